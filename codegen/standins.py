"""Stand-ins for the numba names the library and generated modules use, enough for the
translator (`codegen.translate`) to read them without importing numba (~0.25 s of a cold
first call, in this process and in every compile worker).

A module's source run by `run` sees these instead of numba's: `njit` keeps the Python
function (`py_func`) and its options (`targetoptions`, as numba's dispatcher has them),
`intrinsic` a marker (the translator knows the library's intrinsics by name), `types` names
whose calls make signatures (`types.float64(types.int32)`), `types.ExternalFunction` a C
symbol with its signature, and any other name of numba a placeholder. Nothing here runs
code: what the translator refuses is compiled by numba from the module run for real
(`codegen.loader.executed`).
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import types as pytypes


class Type(str):
  """A numba type, by its name (`str(t)` is what the translator reads); called, the
  signature of a function returning it."""

  def __call__(self, *args):
    return Signature(self, tuple(args))


@dataclasses.dataclass(frozen=True)
class Signature:
  return_type: Type
  args: tuple

  def __str__(self):
    return f"{self.return_type}({', '.join(self.args)})"


class ExternalFunction:
  """A C function by its symbol and signature (numba's `types.ExternalFunction`; the
  translator knows it by this class name)."""

  def __init__(self, symbol: str, sig: Signature):
    self.symbol, self.sig = symbol, sig


class Dispatcher:
  """What `njit` made: the Python function and the options it was given."""

  def __init__(self, py_func, options: dict):
    functools.update_wrapper(self, py_func)
    self.py_func, self.targetoptions = py_func, dict(options)

  def __call__(self, *args, **kwargs):
    return self.py_func(*args, **kwargs)


class Placeholder:
  """Any other name of numba: attributes and calls give placeholders (module-level code
  may build things with them that only numba's own run uses)."""

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    return Placeholder()

  def __call__(self, *args, **kwargs):
    return Placeholder()


def njit(*args, **options):
  if len(args) == 1 and callable(args[0]) and not options:
    return Dispatcher(args[0], {})
  return lambda fn: Dispatcher(fn, options)


def intrinsic(fn):
  return Placeholder()


_NAMES = (
  "boolean",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "intp",
  "float32",
  "float64",
)
TYPES = pytypes.SimpleNamespace(
  **{n: Type(n) for n in _NAMES},
  void=Type("none"),
  none=Type("none"),
  ExternalFunction=ExternalFunction,
)


class _Module(pytypes.ModuleType):
  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    return Placeholder()


def _module(name: str, **names) -> _Module:
  module = _Module(name)
  module.__dict__.update(names)
  return module


MODULES = {
  "numba": _module("numba", njit=njit, jit=njit, types=TYPES, carray=Placeholder()),
  "numba.extending": _module("numba.extending", intrinsic=intrinsic),
  "numba.core": _module("numba.core"),
  "numba.types": _module("numba.types", **vars(TYPES)),
}


def _importer(modules: dict):
  def importer(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name in modules and fromlist:
      return modules[name]
    if level == 0 and (name == "numba" or name.startswith("numba.")):
      return MODULES.get(name if fromlist else "numba") or _module(name)
    return builtins.__import__(name, globals, locals, fromlist, level)

  return importer


def run(source: str, filename: str, names: dict, modules: dict | None = None) -> dict:
  """The globals of `source` run with `names` and these stand-ins for numba; `modules`:
  other modules' globals, by the name `source` imports them by (`from ... import`)."""
  modules = {name: _module(name, **ns) for name, ns in (modules or {}).items()}
  namespace = dict(names)
  namespace["__builtins__"] = {**vars(builtins), "__import__": _importer(modules)}
  exec(compile(source, filename, "exec"), namespace)
  return namespace
