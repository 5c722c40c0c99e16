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
    self.out_specs = plan.out_specs
    self._arenas: list[tuple[np.ndarray, ...]] = []
    # a pool per large output (None: a plain np.empty)
    self._pools = [[] if dtype.itemsize * int(np.prod(shape)) >= POOLED_MIN_BYTES else None
                   for shape, dtype in self.out_specs]
    self._pool_lock = threading.Lock()
    self._first = not driver.signatures
    self._consts, self._sizes = tuple(_read_only(c) for c in plan.const_arrays), plan.sizes
    self._n_in = len(plan.inputs)
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
    # the module's source fixes its input dtypes and ranks, and every caller passes
    # C-contiguous writeable arrays: any other argument types are a caller's miss
    # (`runner`), never a reason to compile again
    self.driver.disable_compile()
    self._first = False
    loader.mark_compiled(self.plan.source)

  def compile(self) -> None:
    """Compiles the driver (or loads it from numba's cache) without real inputs: one run
    on zeros of the input shapes."""
    if self._first:
      self([np.zeros(v.aval.shape, v.aval.dtype) for v in self.plan.inputs])

  def _arena(self):
    return tuple(np.empty(b.size, b.dtype) for b in self.plan.buffers)

  def _outputs(self) -> list[np.ndarray]:
    return [np.empty(shape, dtype) if pool is None else self._pooled(k)
            for k, ((shape, dtype), pool) in enumerate(zip(self.out_specs, self._pools))]

  def _pooled(self, k: int) -> np.ndarray:
    """Output k from its pool: an array nothing refers to any more, else a new one."""
    pool = self._pools[k]
    with self._pool_lock:
      # free when referred to by the pool, this loop and getrefcount's argument only
      free = next((a for a in pool if sys.getrefcount(a) == 3), None)
      if free is None:
        free = np.empty(*self.out_specs[k])
        if len(pool) < POOL_DEPTH:
          pool.append(free)
    return free

  def __call__(self, inputs, out=None) -> list[np.ndarray]:
    """Runs the program on C-contiguous `inputs`, into `out` (checked) or into fresh (or
    pooled) outputs; returns the program's outputs in order."""
    outs = self._outputs() if out is None else check_out(out, self.out_specs)
    arenas = self._arenas
    arena = arenas.pop() if arenas else self._arena()
    try:
      if self._first:
        self._first_call(inputs, outs, arena)
      else:
        try:
          self.driver(*inputs, *self._consts, *outs, *arena, self._sizes)
        except TypeError:  # argument types this module was not compiled for: compile them
          self.driver.disable_compile(False)
          self._first_call(inputs, outs, arena)
    finally:
      arenas.append(arena)
    return outs if self._outs_in_order else self._results(inputs, outs)

  def runner(self, build=list):
    """The steady call, for a caller that passes its arguments as they are: a function of
    the argument tuple that returns `build(outputs)`, or None when the arguments are not
    C-contiguous writeable arrays of the compiled dtypes, ranks and shapes (the driver
    checks them; the caller then takes the general path). None before the first call
    (which compiles the driver).

    Generated per plan: one line per output and the driver call with its arguments
    spelled out (a loop over the outputs costs more than the arithmetic of a small
    program)."""
    if self._first:
      return None
    n_out = len(self.out_specs)
    env = {"empty": np.empty, "driver": self.driver, "arenas": self._arenas,
           "new_arena": self._arena, "pooled": self._pooled, "results": self._results,
           "sizes": self._sizes, "build": build}
    lines = ["def run_hot(args):", f"  if len(args) != {self._n_in}:", "    return None"]
    for k, ((shape, dtype), pool) in enumerate(zip(self.out_specs, self._pools)):
      env[f"s{k}"], env[f"d{k}"] = shape, dtype
      lines.append(f"  o{k} = empty(s{k}, d{k})" if pool is None else f"  o{k} = pooled({k})")
    env.update({f"c{k}": c for k, c in enumerate(self._consts)})
    call = ["*args"] + [f"c{k}" for k in range(len(self._consts))] + [
        f"o{k}" for k in range(n_out)] + (["*arena"] if self.plan.buffers else []) + ["sizes"]
    outs = "[" + ", ".join(f"o{k}" for k in range(n_out)) + "]"
    run = f"miss = driver({', '.join(call)})"
    if self.plan.buffers:
      lines += ["  arena = arenas.pop() if arenas else new_arena()", "  try:",
                "    try:", "      " + run, "    except TypeError:", "      return None",
                "  finally:", "    arenas.append(arena)"]
    else:
      lines += ["  try:", "    " + run, "  except TypeError:", "    return None"]
    lines += ["  if miss:", "    return None",
              f"  return build({outs if self._outs_in_order else f'results(args, {outs})'})"]
    exec(compile("\n".join(lines), f"<primc run_hot {self.driver.__name__}>", "exec"), env)
    return env["run_hot"]

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


def check_out(out, specs) -> list[np.ndarray]:
  """The `out=` arrays, checked against the outputs' (shape, dtype) `specs`."""
  outs = list(out)
  for o, (shape, dtype) in zip(outs, specs, strict=True):
    if (o.shape != shape or o.dtype != dtype or not o.flags.c_contiguous
        or not o.flags.writeable):
      raise PrimcError(f"out= array {o.dtype}{list(o.shape)} does not match the output "
                       f"{dtype}{list(shape)} (or is not C-contiguous and writeable)")
  return outs


def _read_only(a: np.ndarray) -> np.ndarray:
  """A constant as the driver always sees it: C-contiguous and read-only (a plan loaded
  from the cache unpickles writeable arrays; one type keeps one compiled signature)."""
  a = np.array(a, order="C")
  a.setflags(write=False)
  return a


def _is_cache_error(e: Exception) -> bool:
  """Whether `e` came from reading numba's cache files (not from compiling)."""
  import pickle
  import traceback
  if isinstance(e, (pickle.UnpicklingError, EOFError)):
    return True
  return any("caching" in f.filename for f in traceback.extract_tb(e.__traceback__))
