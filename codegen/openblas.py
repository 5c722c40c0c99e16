"""The BLAS of primc's products: an OpenBLAS of primc's own, on one thread.

primc runs a large product as tasks on its own pool (`codegen.pool`), each task one
BLAS call over a block of rows. The BLAS must not start threads of its own inside
those calls: OpenBLAS splits a call statically between its threads, so beside a busy
process the call waits a whole scheduler slice for a thread that is not running
(measured: a 1024 x 8 x 64 gradient beside 3 busy processes, mean 3.0 ms per call with
OpenBLAS's threads, 0.26 ms without). OpenBLAS's thread count is one number per library,
not per call (`openblas_set_num_threads_local` sets it for every thread of a pthreads
build), and numpy's OpenBLAS is the user's: primc does not change it.

So primc loads a library of its own, the `scipy-openblas64` distribution's (the build
numpy's wheels bundle, 64-bit integers), started with OPENBLAS_NUM_THREADS=1 (read once,
when it loads: no threads are made). It is another file, so another copy of OpenBLAS's
state: numpy and scipy keep their threads. Where that distribution is not installed,
primc calls numpy's own OpenBLAS (which may thread large calls) or scipy's through
numba (`codegen.translate.link_blas`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

from primc.codegen import installed, target

# (distribution, the library file's name starts with), in order of preference
LIBRARIES = (("scipy_openblas64", "libscipy_openblas64_"), ("numpy", "libscipy_openblas64_"))
GEMM = {"s": "scipy_sgemm_64_", "d": "scipy_dgemm_64_"}
_env_lock = threading.Lock()


@functools.cache
def library() -> tuple[str, ctypes.CDLL] | None:
  """(distribution, the loaded library) of the first of LIBRARIES installed, or None."""
  for dist, prefix in LIBRARIES:
    path = installed.file_path(dist, prefix, prefix=True)
    if path is None:
      continue
    try:
      lib = _load_single_threaded(path) if dist != "numpy" else ctypes.CDLL(path)
      if all(hasattr(lib, name) for name in GEMM.values()):
        return dist, lib
    except OSError:
      continue
  return None


def _load_single_threaded(path: str) -> ctypes.CDLL:
  """Loads an OpenBLAS of primc's own with one thread, and the kernels of the CPU
  PRIMC_CPU names (its constructor reads OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE
  once)."""
  settings = {"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": target.openblas_core()}
  with _env_lock:
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update({name: v for name, v in settings.items() if v})
    try:
      lib = ctypes.CDLL(path)
    finally:
      for name, value in saved.items():
        if value is None:
          os.environ.pop(name, None)
        else:
          os.environ[name] = value
  setter = getattr(lib, "scipy_openblas_set_num_threads64_", None)
  if setter is not None:  # already loaded elsewhere in this process, with threads
    setter(1)
  return lib


def gemm_addresses() -> dict[str, int] | None:
  """The addresses of the library's Fortran sgemm/dgemm ({"s": ..., "d": ...}), or None."""
  found = library()
  if found is None:
    return None
  return {
    kind: ctypes.cast(getattr(found[1], name), ctypes.c_void_p).value for kind, name in GEMM.items()
  }


def threads() -> int | None:
  """The thread count of the library primc's products call (None: not OpenBLAS's)."""
  found = library()
  getter = found and getattr(found[1], "scipy_openblas_get_num_threads64_", None)
  return int(getter()) if getter else None


@functools.cache
def single_threaded() -> bool:
  """Whether primc's products call an OpenBLAS of their own, on one thread (that it is
  installed: nothing is loaded)."""
  dist, prefix = LIBRARIES[0]
  return installed.file_path(dist, prefix, prefix=True) is not None
