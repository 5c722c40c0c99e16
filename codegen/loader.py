"""Importing generated modules (and the library they call), and compiling (or loading)
their drivers.

A module is executed from the source in hand, under the name of its content-addressed
file in the cache (`codegen.store` puts the file in place and verifies it), so numba's
`cache=True` keeps its machine code beside it and finds it by that file in later
processes. The module is put in `sys.modules` before it is executed: numba's cache looks
it up by name. Where nothing can be written (a refused cache directory, a full disk) the
module lives in memory only: its globals say `CACHE = False` and numba caches nothing.
"""
from __future__ import annotations

import os
import sys
import threading
import types

from primc.codegen import cache, store, threads
from primc.codegen.module import DRIVER_OPTIONS, DRIVER_SIGNATURE

_lock = threading.Lock()
_loaded: dict[tuple[str, bool], types.ModuleType] = {}
module_key = store.module_key


# The library generated kernels call (the math library, the products): these files of
# codegen run as modules of the cache, like generated ones, and their functions are
# globals of every generated module.
LIBRARY = ("mathlib.py", "blas.py")


def load(source: str, in_memory: bool = False) -> types.ModuleType:
  """The module for `source`: from its file in the cache directory (written, or rewritten
  when damaged, by the store), or in memory when no cache directory takes it. Its
  globals hold the library (`library`)."""
  globals_ = library_globals(in_memory)
  with _lock:
    return _load(source, in_memory, globals_)


def _load(source: str, in_memory: bool, globals_: dict) -> types.ModuleType:
  key = module_key(source)
  module = _loaded.get((key, in_memory))
  if module is not None:
    cache.count("modules_reused")
    return module
  directory = None if in_memory else store.current().module_dir(source)
  name = f"primc_kernels.m_{key}" + ("" if directory else "_memory")
  module = types.ModuleType(name)
  module.__dict__.update(globals_)
  module.DIRECTORY, module.KEY = directory, key
  module.CACHE = directory is not None  # read by numba decorators in the module
  module.__file__ = (store.Store.path(directory, "module", key) if directory
                     else f"<primc module m_{key}>")
  code = compile(source, module.__file__, "exec")
  sys.modules[name] = module  # before exec: numba's cache looks the module up by name
  exec(code, module.__dict__)
  cache.count("modules_loaded")
  _loaded[(key, in_memory)] = module
  return module


def library(in_memory: bool = False) -> list[types.ModuleType]:
  """The library modules of this process (loaded once, by the first `load`)."""
  here = os.path.dirname(os.path.abspath(__file__))
  modules = []
  with _lock:
    for name in LIBRARY:
      with open(os.path.join(here, name)) as f:
        modules.append(_load(f.read(), in_memory, {}))
  return modules


def library_globals(in_memory: bool) -> dict:
  """What generated modules see of the library: its numba functions and constants."""
  out = {}
  for module in library(in_memory):
    out.update({k: v for k, v in vars(module).items() if not k.startswith("_") and (
        hasattr(v, "py_func") or k.isupper() and k != "CACHE")})
  return out


def forget(source: str) -> None:
  """Drops this process's module of `source` (its next `load` executes it again)."""
  key = module_key(source)
  with _lock:
    for in_memory in (False, True):
      module = _loaded.pop((key, in_memory), None)
      if module is not None:
        sys.modules.pop(module.__name__, None)


def compile_driver(module: types.ModuleType):
  """The module's driver as a numba cfunc (`codegen.module.DRIVER_SIGNATURE`), compiled
  or loaded from numba's cache once per module: the caller holds the module's lock and
  has had the store verify numba's files."""
  driver = compiled_driver(module)
  if driver is None:
    import numba
    if any(getattr(f, "targetoptions", {}).get("parallel") for f in vars(module).values()):
      # numba starts its thread pool when it compiles a parallel loop, or when it loads
      # one from the cache for a jitted function; a cfunc loaded from the cache does not
      # record that its (inlined) threaded kernels need the pool, which then segfaults
      threads.layer()  # starts the pool, on a fork-safe layer (codegen.threads)
    driver = numba.cfunc(DRIVER_SIGNATURE, cache=module.CACHE, **DRIVER_OPTIONS)(module.driver)
    with _lock:
      module._primc_cfunc = getattr(module, "_primc_cfunc", None) or driver
      driver = module._primc_cfunc
  return driver


def compiled_driver(module: types.ModuleType):
  """The module's driver if this process has compiled or loaded it, else None."""
  return getattr(module, "_primc_cfunc", None)
