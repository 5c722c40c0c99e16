"""primc: higher-order automatic differentiation of numpy-style programs, compiled to CPU code.

The pipeline, each stage a pure function of the one before:

  Python fn --trace--> Program --jvp/linearize/transpose--> Program --passes--> regions
            --codegen--> numba kernels (cached on disk) --executor--> numpy arrays

`import primc` loads the IR and the errors only; any other name (`primc.grad`,
`primc.numpy`, `from primc import eager`) loads its module, with what that module uses,
at its first use (PEP 562): a pytest session, a CLI `--help` or a process that only
unpickles pays for what it uses. A front end registers with `primc.numpy` when its module
loads, which is before any of its values exist. numba is imported when something is
first compiled (`primc.compile.backend`).
"""

import importlib

from primc import core
from primc.core import VERSION as __version__
from primc.core import (
  ConcretizationError,
  Eqn,
  Lit,
  PrimcError,
  PrimcIndexError,
  PrimcTypeError,
  Primitive,
  Program,
  ShapedArray,
  ShapeError,
  TypeCheckError,
  Var,
  pp_program,
  typecheck,
)

# submodules that are names of the package, and the other names with their modules
_SUBMODULES = (
  "numpy",
  "lax",
  "eager",
  "autograd",
  "extend",
  "functional",
  "nn",
  "optimizer",
  "random",
  "vision",
  "static",
  "tree_util",
)
_NAMES = {
  "interpreter": ["interpret"],
  "trace": ["make_program"],
  "api": [
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacrev",
    "jvp",
    "linearize",
    "stop_gradient",
    "value_and_grad",
    "vjp",
    "vmap",
    "checkpoint",
    "deriv",
    "elementwise_grad",
    "grad_and_aux",
    "hessian_tensor_product",
    "hessian_vector_product",
    "jacobian",
    "make_ggnvp",
    "make_hvp",
    "make_jvp",
    "make_vjp",
    "tensor_jacobian_product",
    "vector_jacobian_product",
  ],
  "ad": ["jvp_program", "linearize_program", "transpose_program", "vjp_program"],
  "batching": ["batch_program"],
  "settings": ["config", "raw_transforms"],
  "custom": ["custom_jvp", "custom_vjp"],
  "fixed_points": ["fixed_point"],
  "checking": ["check_grads"],
  "compile": ["cache_stats", "jit"],
  "eager": ["GradManager", "PyLayer", "PyLayerContext", "Tensor", "to_tensor"],
  "nn": ["seed", "rand", "randn", "randint"],
}
_HOME = {name: module for module, names in _NAMES.items() for name in names}
__all__ = sorted(
  [
    *_SUBMODULES,
    *_HOME,
    "ConcretizationError",
    "Eqn",
    "Lit",
    "PrimcError",
    "PrimcIndexError",
    "PrimcTypeError",
    "Primitive",
    "Program",
    "ShapedArray",
    "ShapeError",
    "TypeCheckError",
    "Var",
    "pp_program",
    "typecheck",
  ]
)


def _load_all() -> None:
  """Imports every module that defines primitives, rules or front ends, and binds the
  package's names."""
  g = globals()
  for module in (*_SUBMODULES, *_NAMES):
    loaded = importlib.import_module(f"primc.{module}")
    if module in _SUBMODULES:
      g[module] = loaded
    for name in _NAMES.get(module, ()):
      g[name] = getattr(loaded, name)


def __getattr__(name: str):
  if name in _SUBMODULES:
    value = importlib.import_module(f"primc.{name}")
  elif name in _HOME:
    if _HOME[name] == "trace":  # (a traced value's operators are primc.numpy's ops)
      importlib.import_module("primc.numpy")
    value = getattr(importlib.import_module(f"primc.{_HOME[name]}"), name)
  else:
    raise AttributeError(f"module 'primc' has no attribute {name!r}")
  globals()[name] = value
  return value


def __dir__():
  return __all__


core.on_unknown_primitive.append(_load_all)  # a program unpickled before any use
core.on_compiler_wanted.append(lambda: importlib.import_module("primc.compile"))
