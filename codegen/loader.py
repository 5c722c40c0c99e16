"""Loading generated modules: content-addressed `.py` files under the cache directory.

A module is written once under `m_<sha256 of its source>.py` (atomically: temp file +
`os.replace`) and imported from there, so numba's `cache=True` keeps its machine code
beside it. The module is put in `sys.modules` before it is executed: numba's cache needs
to find it by name in later processes. The directory is per user: `PRIMC_CACHE_DIR`, or
the platform's user cache directory; it is created 0700, and one that other users can
write is refused (its files are executed).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import sys
import tempfile
import threading
import types

from primc.core import PrimcError
from codegen import threads

_lock = threading.Lock()
_loaded: dict[str, types.ModuleType] = {}
stats = {"modules_written": 0, "modules_loaded": 0, "modules_reused": 0}


_fallback_dir = None
_warned = set()


def writable(path: str) -> bool:
  return os.access(path, os.W_OK | os.X_OK)


def cache_dir() -> str:
  """The cache directory: PRIMC_CACHE_DIR or the platform's per-user cache directory.

  A read-only one still works: modules are then written to a private temporary directory
  for this process (a warning, once)."""
  path = os.environ.get("PRIMC_CACHE_DIR")
  if not path:
    import platformdirs
    path = platformdirs.user_cache_dir("primc")
  path = os.path.abspath(path)
  if not os.path.isdir(path):
    try:
      os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
      pass
  if not os.path.isdir(path):
    return _fallback(path, "cannot be created")
  st = os.stat(path)
  if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
    raise PrimcError(f"refusing cache directory {path}: it is writable by group or others and "
                     f"primc executes the files in it (chmod 700 it or set PRIMC_CACHE_DIR)")
  if hasattr(os, "getuid") and st.st_uid != os.getuid():
    raise PrimcError(f"refusing cache directory {path}: it belongs to another user")
  if not writable(path):
    return _fallback(path, "is read-only")
  return path


def _fallback(path: str, why: str) -> str:
  global _fallback_dir
  if path not in _warned:
    _warned.add(path)
    import warnings
    warnings.warn(f"primc cache directory {path} {why}: compiling without a persistent "
                  f"cache in this process", RuntimeWarning, stacklevel=3)
  if _fallback_dir is None:
    _fallback_dir = tempfile.mkdtemp(prefix="primc-nocache-")
  return _fallback_dir


def write_atomic(path: str, data, binary: bool = False) -> None:
  """Writes a file so that readers see the old content or the new, never a part."""
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
  try:
    with os.fdopen(fd, "wb" if binary else "w") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def module_key(source: str) -> str:
  return hashlib.sha256(source.encode()).hexdigest()[:32]


def file_lock(source: str):
  """An inter-process lock for one module: held while it is written and compiled."""
  import filelock
  return filelock.FileLock(os.path.join(cache_dir(), f"m_{module_key(source)}.lock"))


def _marker(source: str) -> str:
  return os.path.join(cache_dir(), "__pycache__", f"m_{module_key(source)}.compiled")


def compiled(source: str) -> bool:
  """Whether this module's driver was compiled into the cache (numba's machine code sits
  beside it, so a first call only loads it)."""
  return os.path.exists(_marker(source))


def mark_compiled(source: str) -> None:
  """Records that this module's driver is in numba's cache (see `compiled`)."""
  path = _marker(source)
  if not os.path.exists(path):
    try:
      write_atomic(path, "")
    except OSError:  # an informative marker only: a miss compiles in process
      pass


def worker_env() -> dict[str, str]:
  """The environment of a `python -m codegen...` worker process: this cache directory and
  an import path that finds primc's packages."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
  return dict(os.environ, PRIMC_CACHE_DIR=cache_dir(), PYTHONPATH=path)


def purge(source: str) -> None:
  """Forgets a module: its numba cache files, its file, and the imported module."""
  key = module_key(source)
  directory = cache_dir()
  pycache = os.path.join(directory, "__pycache__")
  if os.path.isdir(pycache):
    for name in os.listdir(pycache):
      if name.startswith(f"m_{key}."):
        os.unlink(os.path.join(pycache, name))
  with _lock:
    _loaded.pop(key, None)
    sys.modules.pop(f"primc_kernels.m_{key}", None)


def load(source: str) -> types.ModuleType:
  """The module for `source`, imported from its content-addressed file (rewritten if the
  file is missing or its content is not `source`)."""
  key = module_key(source)
  with _lock:
    if key in _loaded:
      stats["modules_reused"] += 1
      return _loaded[key]
    name = f"primc_kernels.m_{key}"
    path = os.path.join(cache_dir(), f"m_{key}.py")
    try:
      with open(path, "rb") as f:
        current = f.read()
    except OSError:
      current = None
    if current != source.encode():
      if current is not None:
        from codegen.cache import count, log
        count("module_rebuilds", "corrupt module file")
        log.warning("module file %s does not match its key: rewriting it", path)
      write_atomic(path, source)
      stats["modules_written"] += 1
    # numba's cache index is keyed by the source file's (mtime, size); the content is
    # fixed by the key, so a canonical mtime keeps the index valid when the cache
    # directory is copied or moved
    stamp = 1_000_000_000 + int(key[:6], 16)
    if int(os.stat(path).st_mtime) != stamp:
      os.utime(path, (stamp, stamp))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: numba's cache looks the module up by name
    spec.loader.exec_module(module)
    stats["modules_loaded"] += 1
    _loaded[key] = module
    return module


def compile_driver(module: types.ModuleType):
  """The module's driver as a numba cfunc (`codegen.module.DRIVER_SIGNATURE`), compiled
  or loaded from numba's cache once per module: the caller holds the module's file lock."""
  driver = compiled_driver(module)
  if driver is None:
    import numba
    from codegen.module import DRIVER_OPTIONS, DRIVER_SIGNATURE
    if any(getattr(f, "targetoptions", {}).get("parallel") for f in vars(module).values()):
      # numba starts its thread pool when it compiles a parallel loop, or when it loads
      # one from the cache for a jitted function; a cfunc loaded from the cache does not
      # record that its (inlined) threaded kernels need the pool, which then segfaults
      threads.layer()  # starts the pool, on a fork-safe layer (codegen.threads)
    driver = numba.cfunc(DRIVER_SIGNATURE, cache=True, **DRIVER_OPTIONS)(module.driver)
    with _lock:
      module._primc_cfunc = getattr(module, "_primc_cfunc", None) or driver
      driver = module._primc_cfunc
  return driver


def compiled_driver(module: types.ModuleType):
  """The module's driver if this process has compiled or loaded it, else None."""
  return getattr(module, "_primc_cfunc", None)
