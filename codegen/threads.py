"""Threads for primc's kernels: numba's threading layer, chosen so that a process that
has run threaded kernels can still fork.

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
TBB fails there. `prepare()` loads it from the wheel's files before numba starts its
pool; numba's default choice then finds it. It runs where primc first needs threads
(readying the first program to run), not at import. A layer the user chose
(NUMBA_THREADING_LAYER) is left alone, and so is a pool the user's own numba code
started first. Where TBB is missing, OpenMP runs with a bounded GOMP_SPINCOUNT:
idle OpenMP threads spinning for the default 300,000 rounds took the cores from the
BLAS call that followed (a W3-like network went 50 -> 29 ms).
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys
import threading

_lock = threading.Lock()
_prepared = False
GOMP_SPINCOUNT = "10000"
_LIBTBB = {"linux": "libtbb.so.12", "win32": "tbb12.dll", "darwin": "libtbb.12.dylib"}


def libtbb_path() -> str | None:
  """The libtbb of the installed `tbb` distribution, if there is one."""
  name = _LIBTBB.get(sys.platform)
  try:
    files = importlib.metadata.files("tbb") or []
  except importlib.metadata.PackageNotFoundError:
    return None
  return next((str(f.locate()) for f in files if f.name == name), None)


def prepare() -> None:
  """Makes TBB loadable for numba's thread pool (once, before the pool starts)."""
  global _prepared
  with _lock:
    if _prepared:
      return
    _prepared = True
    from numba.core import config
    from numba.np.ufunc import parallel
    if parallel._is_initialized or str(config.THREADING_LAYER).lower() != "default":
      return
    os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)  # read when libgomp loads
    path = libtbb_path()
    if path is not None:
      try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # numba finds it by its soname
      except OSError:
        pass


def layer() -> str:
  """The threading layer numba runs primc's threaded kernels on (starts the pool)."""
  prepare()
  import numba
  numba.get_num_threads()
  return numba.threading_layer()
