"""Graph breaks under `jit`: functions whose Python reads traced values.

`if loss < tol:`, `while err > eps:` and `int(n)` need a value that exists only when the
program runs. Where `jit`'s trace meets one (a `ConcretizationError`), the signature is
traced again with the call's values (`trace_flat(concrete=)`): each value Python read
on the way is a *guard*, an extra output of the program, and the program is the path
those values take. One program per path is compiled and kept. A call runs the path taken
last; where its guards come out as recorded, its outputs are the answer (the path is the
function's, for these inputs, by construction); where one differs, the values up to it
are this call's too (the computation up to a guard depends only on the guards before it),
so only paths that agree with them are tried next, and a call no kept path agrees with
traces its own. Derivatives compose across the breaks because each path is traced whole:
a transform inside the function differentiates the path its values took (`lift_guards`
makes its guards the enclosing trace's).

This is torch.compile's graph break with the pieces' order kept in one program per
path, and the check of TorchDynamo's guards made on the computed values.
`jit(fullgraph=True)` makes a break an error, as torch.compile spells it; each break's
source line is logged once per function.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from primc.settings import log

PATHS_KEPT = 16  # per signature, least recently taken dropped first


class Paths:
  """The executables of one signature of a function with graph breaks, one per path,
  the most recently taken first. `make(leaves)` traces and compiles the path of these
  inputs: (executable, guard values, output tree)."""

  def __init__(self, make: Callable):
    self.make = make
    self.paths: list[tuple[object, list, object]] = []
    self.last = None  # the path the last call took
    self._lock = threading.Lock()

  def add(self, path) -> None:
    with self._lock:
      self.paths.insert(0, path)
      del self.paths[PATHS_KEPT:]

  def run(self, leaves) -> tuple[list, object]:
    """(the flat outputs, their tree) of the path these inputs take."""
    found = self.find(leaves, lambda path: path[0](leaves, None))
    if found is not None:
      path, flat = found
      return flat[: len(flat) - len(path[1])], path[2]
    path = self.make(leaves)
    self.add(path)
    self.last = path
    exe, guards, out_tree = path
    flat = exe(leaves, None)
    return flat[: len(flat) - len(guards)], out_tree

  def find(self, leaves, run: Callable) -> tuple | None:
    """(the path kept that these inputs take, its flat outputs, guards last), or None
    (nothing is made). `run(path)`: the path's flat outputs on the inputs (None: it cannot
    be run here, not taken)."""
    known: list = []  # this call's guard values found so far
    for path in list(self.paths):
      guards = path[1]
      if not _agree(guards, known):
        continue
      flat = run(path)
      if flat is None:
        continue
      got = flat[len(flat) - len(guards) :]
      k = _first_difference(got, guards)
      if k is None:
        self._taken(path)
        self.last = path
        return path, flat
      known = list(got[: k + 1])
    return None

  def _taken(self, path) -> None:
    with self._lock:
      if self.paths and self.paths[0] is not path and path in self.paths:
        self.paths.remove(path)
        self.paths.insert(0, path)

  def wait(self, timeout: float | None = None) -> bool:
    return all(exe.wait(timeout) for exe, _, _ in self.paths if hasattr(exe, "wait"))


def _agree(guards: list, known: list) -> bool:
  return all(np.array_equal(g, k) for g, k in zip(guards, known))


def _first_difference(got, guards) -> int | None:
  for i, (g, want) in enumerate(zip(got, guards)):
    if not np.array_equal(g, want):
      return i
  return None


_logged: set = set()


def log_breaks(name: str, sources) -> None:
  """One log line per function and break source line."""
  for source in dict.fromkeys(sources):
    if (name, source) not in _logged:
      _logged.add((name, source))
      log.warning(
        "jit(%s): graph break at %s (Python reads a traced value there); the "
        "program is compiled per path taken (jit(fullgraph=True) makes this an "
        "error)",
        name,
        source,
      )
