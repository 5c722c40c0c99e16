"""Saying what a long first call is doing.

A first call that compiles kernels for longer than `PRIMC_PROGRESS_AFTER` seconds (1 by
default) shows one line on stderr, rewritten in place, when stderr is a terminal:

    primc: compiling step: 12/27 kernels, 4.1 s

and ends it with the total. Nothing is written to pipes or files (logs and captured
output stay clean); the start and the end are logged (logger `primc.compile`, INFO)
either way. `PRIMC_PROGRESS=0` turns the line off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger("primc.compile")
TICK = 0.2  # seconds between updates


def _after() -> float:
  try:
    return float(os.environ.get("PRIMC_PROGRESS_AFTER", "1"))
  except ValueError:
    return 1.0


def _shown() -> bool:
  stream = sys.stderr
  return (
    os.environ.get("PRIMC_PROGRESS", "1") != "0"
    and stream is not None
    and hasattr(stream, "isatty")
    and stream.isatty()
  )


class Progress:
  """A context manager around a compile of `total` kernels of `what`; `done()` counts
  the kernels finished so far (by this process or by its compile workers)."""

  def __init__(self, what: str, total: int, done):
    self.what, self.total, self.done = what, total, done
    self._stop = threading.Event()
    self._thread = None
    self._printed = False
    self._t0 = 0.0

  def __enter__(self) -> "Progress":
    self._t0 = time.perf_counter()
    log.info("compiling %s: %d kernels", self.what, self.total)
    if self.total and _shown():
      if _after() <= 0:  # shown from the start (else a compile shorter than one tick of
        self._show()  # the thread would show nothing)
      self._thread = threading.Thread(target=self._run, name="primc-progress", daemon=True)
      self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    elapsed = time.perf_counter() - self._t0
    if self._printed:
      self._line(f"compiled {self.what}: {self.total} kernels in {elapsed:.1f} s\n")
    log.info("compiled %s: %d kernels in %.2f s", self.what, self.total, elapsed)

  def _run(self) -> None:
    after = _after()
    while not self._stop.wait(TICK):
      if time.perf_counter() - self._t0 >= after:
        self._show()

  def _show(self) -> None:
    try:
      done = min(self.total, self.done())
    except Exception:  # counting is best effort (a cache file read may fail)
      return
    elapsed = time.perf_counter() - self._t0
    self._line(f"compiling {self.what}: {done}/{self.total} kernels, {elapsed:.1f} s")

  def _line(self, text: str) -> None:
    try:
      sys.stderr.write(f"\rprimc: {text}\033[K")
      sys.stderr.flush()
      self._printed = True
    except (OSError, ValueError):  # a closed or broken stream: say nothing
      pass
