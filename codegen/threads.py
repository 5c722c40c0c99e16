"""Threads for primc's kernels: numba's thread pool, started without importing numba
where it can be, on a layer chosen so that a process that has run threaded kernels can
still fork.

numba picks its layer once, when it first starts its thread pool: TBB if it can load
it, else OpenMP, else its own workqueue (unless NUMBA_THREADING_LAYER names one).
GNU OpenMP does not survive fork: numba kills a forked child that enters a threaded
region ("fork() called from a process already using GNU OpenMP, this is unsafe"), so
`os.fork()` children die and `multiprocessing.Pool` (fork is Linux's default start
method) hangs. TBB survives fork, is safe to call from several threads, and costs
little more per launch (measured here, 2 cores: 2.7 µs against OpenMP's 2.1 µs for
1,024 elements, 8.3 against 4.3 µs for 16,384; numba's workqueue is fork-safe too but
costs ~120 µs per launch and is not thread-safe).

The `tbb` wheel (a dependency of primc where it exists) installs libtbb under
`<prefix>/lib`, where the dynamic loader does not look, so numba's own attempt to load
TBB fails there. `pool()` loads it from the wheel's files, then numba's TBB pool (the C
extension `numba.np.ufunc.tbbpool`) by itself and starts it as numba would: importing
numba costs ~0.2 s, more than the rest of a warm first call. The module is registered
under its own name, so numba, imported later, finds the pool already running and uses
it (its `launch_threads` does nothing the second time). Where that fails, or where the
user chose a layer (NUMBA_THREADING_LAYER) or numba's pool already runs, numba starts
(or keeps) its pool its own way; then, where TBB is missing, OpenMP runs with a bounded
GOMP_SPINCOUNT: idle OpenMP threads spinning for the default 300,000 rounds took the
cores from the BLAS call that followed (a W3-like network went 50 -> 29 ms).
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import threading

from primc.codegen import installed

_lock = threading.Lock()
_pool: Pool | None = None
GOMP_SPINCOUNT = "10000"
TBB_INTERFACE_MIN = 12060  # numba refuses older TBB runtimes
_LIBTBB = {"linux": "libtbb.so.12", "win32": "tbb12.dll", "darwin": "libtbb.12.dylib"}


@dataclasses.dataclass(frozen=True)
class Pool:
  """A running thread pool: its layer's name and the addresses of its C functions
  `parallel_for(fn, args, dims, steps, data, inner_ndim, array_count, num_threads)` and
  `get_num_threads()` (numba's gufunc-style interface)."""
  layer: str
  parallel_for: int
  get_num_threads: int


def libtbb_path() -> str | None:
  """The libtbb of the installed `tbb` distribution, if there is one."""
  name = _LIBTBB.get(sys.platform)
  return installed.file_path("tbb", name) if name else None


def pool() -> Pool:
  """Starts the thread pool once per process (see the module docstring) and returns it."""
  global _pool
  with _lock:
    if _pool is None:
      _pool = (None if _numba_decides() else _tbb_pool()) or _numba_pool()
    return _pool


def layer() -> str:
  """The threading layer primc's threaded kernels run on (starts the pool)."""
  return pool().layer


def num_threads() -> int:
  """numba's thread count: NUMBA_NUM_THREADS, else the CPUs this process may run on."""
  env = os.environ.get("NUMBA_NUM_THREADS")
  if env:
    return int(env)
  if hasattr(os, "sched_getaffinity"):
    return max(1, len(os.sched_getaffinity(0)))
  return max(1, os.cpu_count() or 1)


def _numba_decides() -> bool:
  """Whether numba's own choice applies: a layer named by the user, or a pool of numba's
  already running."""
  if os.environ.get("NUMBA_THREADING_LAYER", "default").lower() != "default":
    return True
  if "numba.core.config" in sys.modules:
    config = sys.modules["numba.core.config"]
    if str(config.THREADING_LAYER).lower() != "default":
      return True
  parallel = sys.modules.get("numba.np.ufunc.parallel")
  return bool(parallel is not None and parallel._is_initialized)


def _tbb_pool() -> Pool | None:
  """numba's TBB pool started without numba, or None where TBB or the extension is not
  there or too old."""
  path = libtbb_path()
  if path is None:
    return None
  try:
    libtbb = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # found later by its soname
    version = libtbb.TBB_runtime_interface_version
    version.restype = ctypes.c_int
    if version() < TBB_INTERFACE_MIN:
      return None
    lib = installed.extension("numba.np.ufunc.tbbpool")
  except (OSError, ImportError, AttributeError):
    return None
  count = num_threads()
  ctypes.CFUNCTYPE(None, ctypes.c_int)(lib.launch_threads)(count)
  ctypes.CFUNCTYPE(None, ctypes.c_int)(lib.set_num_threads)(count)  # this thread's count
  return Pool("tbb", lib.parallel_for, lib.get_num_threads)


def _numba_pool() -> Pool:
  """numba's pool started by numba (its own choice of layer, TBB made loadable first)."""
  from llvmlite import binding
  from numba.np.ufunc import parallel
  if not parallel._is_initialized:
    os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)  # read when libgomp loads
    path = libtbb_path()
    if path is not None:
      try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # numba finds it by its soname
      except OSError:
        pass
  import numba
  numba.get_num_threads()  # starts the pool
  addresses = [binding.address_of_symbol(s) for s in ("numba_parallel_for", "get_num_threads")]
  if not all(addresses):
    raise RuntimeError("numba's thread pool gave no parallel_for/get_num_threads")
  return Pool(numba.threading_layer(), *addresses)
