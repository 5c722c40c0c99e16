"""Timing helpers shared by the benchmarks: medians of repeated calls, the environment
of a fresh measured process, a busy machine, the arrays of a result."""

import contextlib
import os
import statistics
import subprocess
import sys
import time


def child_env(**values) -> dict:
  """The environment of a measured fresh process: this one's, with `values`, and Python
  allowed to keep compiled bytecode (an installed package's modules are compiled when it
  is installed; with PYTHONDONTWRITEBYTECODE=1 an editable primc recompiled its modules'
  source in every process, ~50 ms of each first call, a cost no user pays)."""
  env = dict(os.environ, **values)
  env.pop("PYTHONDONTWRITEBYTECODE", None)
  return env


def median_time(fn, *args, repeat=15, warmup=2, min_time=0.0):
  """Median wall time of fn(*args) in seconds (after warm-up calls)."""
  for _ in range(warmup):
    fn(*args)
  times = []
  start = time.perf_counter()
  while len(times) < repeat or time.perf_counter() - start < min_time:
    t0 = time.perf_counter()
    fn(*args)
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def fmt(seconds):
  if seconds < 1e-3:
    return f"{seconds * 1e6:.1f} µs"
  return f"{seconds * 1e3:.2f} ms"


@contextlib.contextmanager
def busy_processes(n: int):
  """`n` CPU-bound processes running for the length of the block (started 0.5 s before
  it, so that they run and count in the load average)."""
  procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
  try:
    if procs:
      time.sleep(0.5)
    yield procs
  finally:
    for p in procs:
      p.kill()
      p.wait()


def leaves(x):
  """The arrays of a result (nested lists and tuples of arrays)."""
  if isinstance(x, (list, tuple)):
    return [y for item in x for y in leaves(item)]
  return [x]
