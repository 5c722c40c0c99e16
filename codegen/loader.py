"""Importing generated modules (and the library they call), and compiling (or loading)
their kernels.

A module is executed from the source in hand, under the name of its content-addressed
file in the cache (`codegen.store` puts the file in place and verifies it), so numba's
`cache=True` keeps its machine code beside it and finds it by that file in later
processes. The module is put in `sys.modules` before it is executed: numba's cache looks
it up by name. Where nothing can be written (a refused cache directory, a full disk) the
module lives in memory only: its globals say `CACHE = False` and numba caches nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import threading
import types

from primc.codegen import cache, kernels, standins, store, translate
from primc.settings import config

log = logging.getLogger("primc.cache")

_lock = threading.Lock()
_loaded: dict[tuple[str, bool], types.ModuleType] = {}
module_key = store.module_key


# The library generated kernels call (the math library, the products, the special
# functions): these files of codegen run as modules of the cache, like generated ones, and
# their functions are globals of every generated module.
LIBRARY = ("mathlib.py", "blas.py", "special.py")


def load(source: str, in_memory: bool = False) -> types.ModuleType:
  """The module for `source`: from its file in the cache directory (written, or rewritten
  when damaged, by the store), or in memory when no cache directory takes it. Its source
  runs only when something needs what it defines (`executed`): a kernel loaded from its
  object file needs nothing of it, and a process that only loads such kernels never
  imports numba."""
  with _lock:
    return _load(source, in_memory, False)


def _load(source: str, in_memory: bool, is_library: bool) -> types.ModuleType:
  key = module_key(source)
  module = _loaded.get((key, in_memory))
  if module is not None:
    cache.count("modules_reused")
    return module
  directory = None if in_memory else store.current().module_dir(source)
  name = f"primc_kernels.m_{key}" + ("" if directory else "_memory")
  module = types.ModuleType(name)
  module.DIRECTORY, module.KEY, module.SOURCE = directory, key, source
  module.CACHE = directory is not None  # read by numba decorators in the module
  module.__file__ = (
    store.Store.path(directory, "module", key) if directory else f"<primc module m_{key}>"
  )
  module._primc_library, module._primc_in_memory = is_library, in_memory
  cache.count("modules_loaded")
  _loaded[(key, in_memory)] = module
  return module


_exec_lock = threading.Lock()
OWN = ("DIRECTORY", "KEY", "SOURCE", "CACHE")  # a module's own names, never the library's


def executed(module: types.ModuleType) -> types.ModuleType:
  """`module` with its source run (which imports numba): a generated one sees the
  library's functions and constants as globals (`library_globals`)."""
  if module.__dict__.get("_primc_executed"):
    return module
  globals_ = {} if module._primc_library else library_globals(module._primc_in_memory)
  with _exec_lock:
    if not module.__dict__.get("_primc_executed"):
      module.__dict__.update(globals_)
      code = compile(module.SOURCE, module.__file__, "exec")
      sys.modules[module.__name__] = module  # before exec: numba's cache finds it by name
      exec(code, module.__dict__)
      module._primc_executed = True
  return module


_read: dict[tuple[str, bool], dict] = {}  # (key, in memory) -> the library's names


def translation_names(module: types.ModuleType) -> dict:
  """The globals the translator reads a module by: its source run against numba's
  stand-ins (`codegen.standins`), a generated module's with the library's functions and
  constants, so that translating a kernel imports no numba. The library's are kept (a
  kernel is translated once)."""
  own = {k: getattr(module, k) for k in OWN if hasattr(module, k)}
  own["__name__"] = module.__name__
  if not module._primc_library:
    return standins.run(
      module.SOURCE, module.__file__, {**_library_names(module._primc_in_memory), **own}
    )
  cached = (module.KEY, module._primc_in_memory)
  with _lock:
    names = _read.get(cached)
  if names is None:
    names = standins.run(module.SOURCE, module.__file__, own, _library_imports(module))
    with _lock:
      names = _read.setdefault(cached, names)
  return names


def _library_imports(module: types.ModuleType) -> dict:
  """The library modules before `module`, by the package names the library's sources
  import them by (blas.py: `from primc.codegen.mathlib import ...`)."""
  modules = library(module._primc_in_memory)
  index = next(i for i, m in enumerate(modules) if m.KEY == module.KEY)
  return {
    f"primc.codegen.{name[:-3]}": translation_names(m)
    for name, m in zip(LIBRARY[:index], modules[:index])
  }


def _library_names(in_memory: bool) -> dict:
  out = {}
  for module in library(in_memory):
    out.update(_exports(translation_names(module)))
  return out


def _exports(names: dict) -> dict:
  """What generated modules see of a library module: its functions and constants."""
  return {
    k: v
    for k, v in names.items()
    if not k.startswith("_") and k not in OWN and (hasattr(v, "py_func") or k.isupper())
  }


def library(in_memory: bool = False) -> list[types.ModuleType]:
  """The library modules of this process (their files in the cache; not run yet)."""
  here = os.path.dirname(os.path.abspath(__file__))
  modules = []
  with _lock:
    for name in LIBRARY:
      with open(os.path.join(here, name)) as f:
        modules.append(_load(f.read(), in_memory, True))
  return modules


def library_module(name: str, in_memory: bool = False) -> types.ModuleType:
  """The library module of file `name` (one of LIBRARY), run."""
  return executed(library(in_memory)[LIBRARY.index(name)])


def library_globals(in_memory: bool) -> dict:
  """What generated modules see of the library: its numba functions and constants."""
  out = {}
  for module in library(in_memory):
    out.update(_exports(vars(executed(module))))
  return out


_externals: dict[str, object] = {}  # C symbol -> what gives it (a cfunc kept alive, ...)


def link_library(sources, in_memory: bool = False) -> bool:
  """Compiles (or loads from the cache) the library's C entry points that the kernels of
  `sources` call (`kernels.EXTERNALS`; by LLVM, or numba), and gives LLVM their
  addresses by name, once per process, before those kernels are compiled or loaded; and
  scipy's functions they call (`kernels.FOREIGN`). Callers that read the cache have
  verified the library's files first (`store.prepare_library`). True when something was
  compiled (the library's files changed: seal them again)."""
  compiled = False
  for name, (symbol, file, function) in kernels.EXTERNALS.items():
    if symbol not in _externals and any(f"{name}(" in s for s in sources):
      translate.link_blas()  # what the products call (before compiling or loading them)
      lib = library(in_memory)[LIBRARY.index(file)]
      linked = _link_translated(lib, symbol, function) if compiler() == "llvm" else None
      compiled |= _link(executed(lib), symbol, function) if linked is None else linked
  for name, (symbol, function) in kernels.FOREIGN.items():
    if symbol not in _externals and any(f"{name}(" in s for s in sources):
      _link_foreign(symbol, function)
  return compiled


def _link_translated(lib: types.ModuleType, symbol: str, function: str) -> bool | None:
  """A library entry (`EXTERNALS`) compiled by LLVM (`codegen.translate`), its object file
  kept with the library's files (`m_<key>.<symbol>.o`, used only as the library's seal
  lists it); None when it is outside the translated subset (numba compiles it). True
  when it was compiled (the library's files changed)."""
  from llvmlite import binding

  name = f"m_{lib.KEY}.{symbol}.o"
  st = store.current()
  cached = None if lib.DIRECTORY is None else st.sealed_file(lib.DIRECTORY, lib.KEY, name)
  path = None if lib.DIRECTORY is None else os.path.join(store.Store.numba_dir(lib.DIRECTORY), name)

  def make_ir():
    try:
      names = translation_names(lib)
      arg_types = tuple(re.findall(r"\w+", names["EXTERNAL_SIGNATURE"].split("(", 1)[1]))
      return translate.function_ir(lib.SOURCE, function, arg_types, names, symbol, fastmath=())[0]
    except translate.Unsupported as e:
      log.debug("library entry %s is compiled by numba: %s", symbol, e)
      return None

  data = _object(cached, make_ir)
  if data is None:
    return None
  if cached is None and path:
    try:
      write_object(path, data)
    except OSError as e:  # the entry serves this process from memory
      st.write_failed(e, lib.DIRECTORY)
  with _lock:
    if symbol not in _externals:
      address = translate.load(data, symbol)
      binding.add_symbol(symbol, address)
      _externals[symbol] = address
  return cached is None


def _link_foreign(symbol: str, function: str) -> None:
  """Gives LLVM the address of scipy.special's C function `function`: the specialization
  on doubles (`double (double, ..., int __pyx_skip_dispatch)`) among those Cython exports."""
  from llvmlite import binding
  import scipy.special.cython_special as cython_special

  exports = cython_special.__pyx_capi__
  for name in [function] + [f"__pyx_fuse_{i}{function}" for i in range(4)]:
    signature = str(exports.get(name, "")).split('"')[1:2]
    if signature and re.fullmatch(r"double \((double, )+int __pyx_skip_dispatch\)", signature[0]):
      with _lock:
        binding.add_symbol(symbol, _capsule_pointer(exports[name]))
        _externals[symbol] = name
      return
  raise RuntimeError(f"scipy.special.cython_special has no double version of {function}")


def _capsule_pointer(capsule) -> int:
  """The pointer a PyCapsule holds (a Cython module's exported C function)."""
  import ctypes  # prototypes of our own: ctypes.pythonapi's functions are shared

  get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
  )
  get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
  )
  return get_pointer(capsule, get_name(capsule))


def _link(lib: types.ModuleType, symbol: str, function: str) -> bool:
  import numba
  from llvmlite import binding

  with _lock:
    if symbol in _externals:
      return False
    cfunc = numba.cfunc(lib.EXTERNAL_SIGNATURE, cache=lib.CACHE, error_model="numpy")(
      getattr(lib, function)
    )
    binding.add_symbol(symbol, cfunc.address)
    _externals[symbol] = cfunc
    return not cfunc.cache_hits


def forget(source: str) -> None:
  """Drops this process's module of `source` (its next `load` executes it again)."""
  key = module_key(source)
  with _lock:
    for in_memory in (False, True):
      module = _loaded.pop((key, in_memory), None)
      if module is not None:
        sys.modules.pop(module.__name__, None)


def compile_kernel(module: types.ModuleType, wait: bool = True):
  """The module's kernel (`kernels.SIGNATURE`; compiled by LLVM, `Translated`, or a numba
  cfunc, see `compiler`), loaded from its compiled files in the cache when the store has
  verified them against the module's seal, else compiled (and sealed), under the
  module's lock, so that concurrent processes compile it once. A kernel whose files
  cannot be written is compiled in memory. Without `wait`, None when another process
  holds the lock (it is compiling the kernel)."""
  cfunc = compiled_kernel(module)
  if cfunc is not None:
    return cfunc
  link_library([module.SOURCE], module.DIRECTORY is None)
  st, key, directory = store.current(), module.KEY, module.DIRECTORY
  with st.lock(key, wait) as held:
    if not held:
      return None
    sealed = directory is not None and st.prepare_numba(directory, key)
    try:
      cfunc = _cfunc(module)
    except OSError as e:  # numba could not write its cache files (a full disk, ...)
      st.write_failed(e, directory or "numba's cache")
      if directory is not None:
        st.purge_numba(directory, key)
      module = load(module.SOURCE, in_memory=True)
      cfunc = _cfunc(module)
    if module.DIRECTORY is not None and not (sealed and cfunc.cache_hits):
      st.seal(module.DIRECTORY, key)
  cache.count("kernel_cache_loads" if cfunc.cache_hits else "kernel_compiles")
  return cfunc


def compiler() -> str:
  """Which compiler turns kernel sources into machine code: "llvm" (`codegen.translate`,
  the default; numba for a kernel outside its subset) or "numba" for every kernel
  (PRIMC_KERNEL_COMPILER=numba)."""
  return "numba" if os.environ.get("PRIMC_KERNEL_COMPILER") == "numba" else "llvm"


@dataclasses.dataclass(frozen=True)
class Translated:
  """A kernel compiled by `codegen.translate` (what the executor reads of a numba cfunc)."""

  address: int
  cache_hits: int  # 1: loaded from the cache's object file, 0: compiled now


_translated: dict[str, int] = {}  # module key -> the address of its loaded kernel
OBJECT_SUFFIX = ".kernel.o"  # a module's object file, beside numba's files (sealed as they are)


def write_object(path: str, data: bytes) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  store.write_atomic(path, data)


def kernel_ir(source: str) -> str | None:
  """The LLVM IR of the kernel of a module's `source`, before optimization (None: it is
  numba's to compile)."""
  return _kernel_ir(load(source, in_memory=True), "primc_kernel")


def _kernel_ir(module: types.ModuleType, symbol: str) -> str | None:
  """The LLVM IR of the module's kernel (`codegen.translate`), or None when numba compiles
  it (a source outside the translated subset, or the translator failing)."""
  try:
    function = kernels.emitted(module.SOURCE)
    if function is None:  # written by another process: read back from its Python
      cache.count("kernels_read_back")
      function = translate.python_kernel(module.SOURCE)
    return translate.render_kernel(function, translation_names(module), symbol)
  except translate.Unsupported as e:
    log.debug("kernel %s is compiled by numba: %s", module.KEY, e)
  except Exception as e:  # a translator bug: numba, the reference, compiles it
    if config.strict_kernels:
      raise
    log.warning(
      "primc: translating kernel %s failed (%s: %s); numba compiles it",
      module.KEY,
      type(e).__name__,
      e,
    )
    cache.count("translate_failures")
  return None


def _object(data: bytes | None, make_ir) -> bytes | None:
  """`data` (an object file read from the cache), else LLVM's object code for `make_ir()`
  (None: numba compiles it instead)."""
  if data is None:
    text = make_ir()
    data = None if text is None else translate.object_code(text)
  return data


def _translated_kernel(module: types.ModuleType) -> Translated | None:
  """The module's kernel compiled by LLVM from its source: loaded from its object file in
  the cache (verified against the module's seal by the caller), else translated, compiled
  and written there; None for a source outside the translated subset."""
  key, symbol = module.KEY, f"primc_kernel_{module.KEY}"
  with _lock:
    if key in _translated:
      return Translated(_translated[key], 1)
  path = (
    None
    if module.DIRECTORY is None
    else os.path.join(store.Store.numba_dir(module.DIRECTORY), f"m_{key}{OBJECT_SUFFIX}")
  )
  cached = store.read_bytes(path) if path else None
  data = _object(cached, lambda: _kernel_ir(module, symbol))
  if data is None:
    return None
  if cached is None and path:
    write_object(path, data)  # an OSError: compile_kernel compiles it in memory
  with _lock:
    if key not in _translated:
      _translated[key] = translate.load(data, symbol)
      if config.perf_map:
        _perf_map(_translated[key], translate.text_size(data), module)
    return Translated(_translated[key], int(cached is not None))


def _perf_map(address: int, size: int, module: types.ModuleType) -> None:
  """Names a loaded kernel for Linux `perf` (`/tmp/perf-<pid>.map`, its JIT map format):
  the kernel's function name in its source (its region's primitives) and its key."""
  found = re.search(r"^def (\w+)\(", module.SOURCE, re.M)
  name = f"{found.group(1) if found else 'primc_kernel'}_{module.KEY[:8]}"
  with open(f"/tmp/perf-{os.getpid()}.map", "a") as f:
    f.write(f"{address:x} {size:x} {name}\n")


def _cfunc(module: types.ModuleType):
  cfunc = _translated_kernel(module) if compiler() == "llvm" else None
  if cfunc is None:
    import numba

    cfunc = numba.cfunc(kernels.SIGNATURE, cache=module.CACHE, **kernels.OPTIONS)(
      executed(module).KERNEL
    )
  with _lock:
    module._primc_cfunc = getattr(module, "_primc_cfunc", None) or cfunc
    return module._primc_cfunc


def compiled_kernel(module: types.ModuleType):
  """The module's kernel if this process has compiled or loaded it, else None."""
  return getattr(module, "_primc_cfunc", None)
