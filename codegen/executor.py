"""The executor: runs a compiled program's driver on numpy arrays.

Thin on purpose: one call into the numba driver per program call. Intermediate buffers
come from a per-executable arena pool (a list used as a stack, so concurrent callers each
get their own set), allocated once and reused across calls. Outputs are arrays the caller
owns (or `out=`); large ones come from a small per-output pool of arrays that are reused
once nothing refers to them any more (no array, view or buffer of the caller's), so a
steady loop writes to memory that is already mapped instead of page-faulting fresh pages
on every call.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

from primc.core import PrimcError
from codegen.module import Plan


POOLED_MIN_BYTES = 1 << 16  # smaller outputs: plain np.empty (numpy caches those)
POOL_DEPTH = 2              # arrays kept per output


class Executable:
  @classmethod
  def load(cls, plan: Plan) -> "Executable":
    """Loads (or compiles) the plan's module and wraps its driver."""
    from codegen import loader
    return cls(plan, loader.load(plan.source).driver)

  def __init__(self, plan: Plan, driver):
    self.plan = plan
    self.driver = driver
    self.out_specs = tuple((v.aval.shape, np.dtype(v.aval.dtype)) for v in plan.outputs)
    self._arenas: list[tuple[np.ndarray, ...]] = []
    # a pool per large output (None: a plain np.empty)
    self._pools = [[] if dtype.itemsize * int(np.prod(shape)) >= POOLED_MIN_BYTES else None
                   for shape, dtype in self.out_specs]
    self._any_pooled = any(pool is not None for pool in self._pools)
    self._pool_lock = threading.Lock()
    self._first = not driver.signatures
    self._consts, self._sizes = tuple(plan.const_arrays), plan.sizes
    self._outs_in_order = list(plan.program_outputs) == [("out", k)
                                                         for k in range(len(plan.outputs))]

  def _first_call(self, inputs, outs, arena):
    """The first call compiles the driver or loads it from numba's disk cache, holding the
    module's file lock (so concurrent processes compile it once). An unreadable numba
    cache entry is purged and the module compiled again."""
    from codegen import cache, loader
    args = (*inputs, *self._consts, *outs, *arena, self._sizes)
    t0 = time.perf_counter()
    with loader.file_lock(self.plan.source):
      try:
        self.driver(*args)
      except Exception as e:
        if not _is_cache_error(e):
          raise
        cache.count("numba_cache_rebuilds", "corrupt numba cache entry")
        cache.log.warning("numba cache of a primc module is unreadable (%s: %s): rebuilding",
                          type(e).__name__, e)
        loader.purge(self.plan.source)
        self.driver = loader.load(self.plan.source).driver
        self.driver(*args)
    cache.record_load(time.perf_counter() - t0)
    st = self.driver.stats
    cache.count("numba_compiles" if st.cache_misses else "numba_cache_loads")
    self._first = False

  def _arena(self):
    return tuple(np.empty(b.size, b.dtype) for b in self.plan.buffers)

  def _outputs(self) -> list[np.ndarray]:
    if not self._any_pooled:
      return [np.empty(shape, dtype) for shape, dtype in self.out_specs]
    outs = []
    with self._pool_lock:
      for (shape, dtype), pool in zip(self.out_specs, self._pools):
        if pool is None:
          outs.append(np.empty(shape, dtype))
          continue
        # free when referred to by the pool, this loop and getrefcount's argument only
        free = next((a for a in pool if sys.getrefcount(a) == 3), None)
        if free is None:
          free = np.empty(shape, dtype)
          if len(pool) < POOL_DEPTH:
            pool.append(free)
        outs.append(free)
    return outs

  def __call__(self, inputs, out=None) -> list[np.ndarray]:
    """Runs the program on C-contiguous `inputs`, into `out` (checked) or into fresh (or
    pooled) outputs; returns the program's outputs in order."""
    outs = self._outputs() if out is None else self._checked(out)
    arenas = self._arenas
    arena = arenas.pop() if arenas else self._arena()
    try:
      if self._first:
        self._first_call(inputs, outs, arena)
      else:
        self.driver(*inputs, *self._consts, *outs, *arena, self._sizes)
    finally:
      arenas.append(arena)
    return outs if self._outs_in_order else self._results(inputs, outs)

  def _checked(self, out) -> list[np.ndarray]:
    outs = list(out)
    for o, (shape, dtype) in zip(outs, self.out_specs, strict=True):
      if o.shape != shape or o.dtype != dtype or not o.flags.c_contiguous:
        raise PrimcError(f"out= array {o.dtype}{list(o.shape)} does not match the output "
                         f"{dtype}{list(shape)} (or is not C-contiguous)")
    return outs

  def _results(self, inputs, outs):
    results = []
    for kind, k in self.plan.program_outputs:
      if kind == "out":
        results.append(outs[k])
      elif kind == "in":
        results.append(np.array(inputs[k]))
      else:
        results.append(np.array(k))
    return results


def _is_cache_error(e: Exception) -> bool:
  """Whether `e` came from reading numba's cache files (not from compiling)."""
  import pickle
  import traceback
  if isinstance(e, (pickle.UnpicklingError, EOFError)):
    return True
  return any("caching" in f.filename for f in traceback.extract_tb(e.__traceback__))
