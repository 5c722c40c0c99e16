"""The operators and methods of traced arrays, and numpy's own functions applied to them.

`primc.trace.Tracer` is the IR layer's and knows no ops; this module gives it numpy's
operators and methods (`x + y`, `x.sum()`, `np.tanh(x)`) once the ops exist."""

from __future__ import annotations

import builtins
import functools

import numpy as np

from primc.core import PrimcError
from primc.numpy._base import _op, _python_arithmetic, astype, ravel, reshape, transpose
from primc.numpy._indexing import _At, getitem, take
from primc.numpy._linalg import diagonal, trace
from primc.numpy._products import dot, matmul
from primc.numpy._reductions import (
  all,
  any,
  cumprod,
  cumsum,
  max,
  mean,
  min,
  prod,
  ptp,
  std,
  sum,
  var,
)
from primc.numpy._shape import copy, repeat, squeeze, swapaxes
from primc.numpy._sorting import argmax, argmin, argsort
from primc.numpy._ufuncs import (
  abs,
  add,
  bitwise_and,
  bitwise_or,
  bitwise_xor,
  clip,
  conj,
  divide,
  equal,
  floor_divide,
  greater,
  greater_equal,
  invert,
  left_shift,
  less,
  less_equal,
  mod,
  multiply,
  negative,
  not_equal,
  power,
  right_shift,
  round,
  subtract,
)
from primc.trace import Tracer, aval_of, user_source


def _swap(fn):
  return lambda self, other: fn(other, self)


# numpy returns a new array object from every function and method but these (they give
# their argument itself when there is nothing to convert); a traced result that is an
# argument's own object is made a new one (`_apart`)
_SAME_OBJECT = frozenset(
  {
    "asarray",
    "asanyarray",
    "ascontiguousarray",
    "asfortranarray",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "require",
    "as_array",
  }
)


def _apart(out, args, kwargs, twin=None):
  """`out` with each traced result that is one of the arguments' own objects (an op that
  computed nothing: a copy, `astype` to the same dtype, `+x`) replaced by a new object of
  the same value: an in-place write into one (`y = x.copy(); y[0] = v`) must not reach
  the other, as numpy's copy is apart from its original. Where numpy's own function
  (`twin`) gives a view of that argument (`real` of a real array), it stays the same
  object: a write into either is seen by both, as in numpy."""
  if type(out) is Tracer:
    if not _among(out, args, kwargs) or _numpy_shares(twin, out, args, kwargs):
      return out
    return _new_object(out)
  if type(out) in (list, tuple) and builtins.any(type(o) is Tracer for o in out):
    return type(out)(
      [_new_object(o) if type(o) is Tracer and _among(o, args, kwargs) else o for o in out]
    )
  return out


def _numpy_shares(twin, t, args, kwargs) -> bool:
  """Whether numpy's `twin`, given a probe array in `t`'s place, returns memory of it."""
  if twin is None:
    return False
  probe = np.empty(aval_of(t).shape, np.dtype(aval_of(t).dtype))
  swap = lambda a: probe if a is t else a
  args, kwargs = [swap(a) for a in args], {k: swap(v) for k, v in kwargs.items()}
  if builtins.any(isinstance(a, Tracer) for a in (*args, *kwargs.values())):
    return False
  try:
    out = twin(*args, **kwargs)
  except Exception:
    return False
  return isinstance(out, np.ndarray) and np.shares_memory(out, probe)


def _among(t, args, kwargs) -> bool:
  for a in (*args, *kwargs.values()):
    if a is t or (type(a) in (list, tuple) and builtins.any(x is t for x in a)):
      return True
  return False


def _new_object(t: Tracer) -> Tracer:
  fresh = Tracer(t.builder, t.ir_var)
  fresh.weak, fresh.concrete = t.weak, t.concrete
  return fresh


def _apart_method(fn):
  """A Tracer method whose result is never its receiver's object (see `_apart`)."""

  @functools.wraps(fn)
  def method(*args, **kwargs):
    return _apart(fn(*args, **kwargs), args, kwargs)

  return method


_ARITHMETIC = {
  "__add__": add,
  "__radd__": _swap(add),
  "__sub__": subtract,
  "__rsub__": _swap(subtract),
  "__mul__": multiply,
  "__rmul__": _swap(multiply),
  "__truediv__": divide,
  "__rtruediv__": _swap(divide),
  "__pow__": power,
  "__rpow__": _swap(power),
  "__neg__": negative,
  "__abs__": abs,
  "__floordiv__": floor_divide,
  "__rfloordiv__": _swap(floor_divide),
  "__mod__": mod,
  "__rmod__": _swap(mod),
}
_TRACER_METHODS = {
  **{name: _python_arithmetic(fn) for name, fn in _ARITHMETIC.items()},
  # (+x is a copy: `_apart_method` makes it a new object)
  "__matmul__": matmul,
  "__rmatmul__": _swap(matmul),
  "__pos__": lambda self: self,
  "__lt__": less,
  "__le__": less_equal,
  "__gt__": greater,
  "__ge__": greater_equal,
  "__eq__": equal,
  "__ne__": not_equal,
  "__getitem__": getitem,
  "T": property(lambda self: transpose(self)),
  "reshape": reshape,
  "sum": sum,
  "mean": mean,
  "max": max,
  "min": min,
  "astype": astype,
  "transpose": lambda self, *axes: transpose(
    self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None)
  ),
}
_FRONT_END_CLASSES: list[tuple[type, ...]] = [()]  # register_front_end's classes


def _deferring(method):
  """A Tracer's arithmetic operator that leaves a front end's value (an eager tensor: a
  layer's parameter inside jit) to that value's reflected operator, which hands the
  operation to its front end."""

  @functools.wraps(method)
  def binary(self, *rest):
    if _FRONT_END_CLASSES[0] and rest and isinstance(rest[0], _FRONT_END_CLASSES[0]):
      return NotImplemented
    return method(self, *rest)

  return binary


for _name, _fn in _TRACER_METHODS.items():
  _method = _fn if isinstance(_fn, property) else _apart_method(_fn)
  setattr(Tracer, _name, _deferring(_method) if _name in _ARITHMETIC else _method)


def _numpy_name(func) -> str:
  return {"absolute": "abs", "true_divide": "divide"}.get(func.__name__, func.__name__)


def _ours(func):
  """primc.numpy's function of numpy's `func` (of its submodule's namespace for
  numpy.linalg's and numpy.fft's), or None."""
  module = getattr(func, "__module__", None) or ""
  space = _NAMESPACES["numpy"] if module.count(".") != 1 else _NAMESPACES.get(module, {})
  return space.get(_numpy_name(func))


# numpy's module -> primc.numpy's namespace of the same names (the package's, its linalg's
# and fft's), filled by the package when it has made them
_NAMESPACES: dict[str, dict] = {}


def _numpy_dispatch(func, method, args, kwargs, fallback):
  """numpy's own functions and ufuncs applied to primc values (`np.tanh(t)`,
  `np.sum(t, axis=0)`, `np.linalg.inv(t)`): the primc.numpy op of the same name, else
  `fallback()`."""
  ours = _ours(func)
  plain = method == "__call__" and builtins.all(
    v is None for k, v in kwargs.items() if k in ("out", "where", "casting", "order", "subok")
  )
  if (
    ours is None
    or not callable(ours)
    or isinstance(ours, type)
    or not plain
    or not (getattr(ours, "__module__", None) or "").startswith("primc.numpy.")
  ):
    return fallback()
  kwargs = {k: v for k, v in kwargs.items() if v is not None}
  return ours(*args, **kwargs)


def _refuse(func, method, what):
  module = getattr(func, "__module__", None) or "numpy"
  name = f"{module if module.startswith('numpy.') else 'numpy'}.{func.__name__}" + (
    "" if method == "__call__" else f".{method}"
  )
  sub = module[len("numpy.") :] + "." if module.count(".") == 1 else ""
  ours = sub + _numpy_name(func)
  hint = (
    f"call primc.numpy.{ours} (without out=/where=)"
    if _ours(func) is not None
    else f"primc.numpy has no {ours}"
  )
  raise PrimcError(f"{name} cannot run on {what}: {hint}, at {user_source()}")


def _tracer_ufunc(self, ufunc, method, *args, **kwargs):
  return _numpy_dispatch(
    ufunc, method, args, kwargs, lambda: _refuse(ufunc, method, "a traced array")
  )


def _tracer_function(self, func, types, args, kwargs):
  return _numpy_dispatch(
    func, "__call__", args, kwargs, lambda: _refuse(func, "__call__", "a traced array")
  )


Tracer.__array_ufunc__ = _tracer_ufunc
Tracer.__array_function__ = _tracer_function


@_op
def add_n(inputs):
  """Paddle's add_n: the elementwise sum of a list of arrays."""
  out = inputs[0]
  for x in inputs[1:]:
    out = add(out, x)
  return out


_MORE_METHODS = {
  "ravel": ravel,
  "flatten": lambda self, order="C": copy(ravel(self, order)),
  "squeeze": squeeze,
  "prod": prod,
  "swapaxes": swapaxes,
  "any": any,
  "all": all,
  "copy": copy,
  "conj": conj,
  "conjugate": conj,
  "ptp": ptp,
  "argsort": argsort,
  "cumsum": cumsum,
  "cumprod": cumprod,
  "std": std,
  "var": var,
  "argmax": argmax,
  "argmin": argmin,
  "clip": clip,
  "diagonal": diagonal,
  "trace": trace,
  "repeat": repeat,
  "dot": dot,
  "round": round,
  "take": take,
  "__and__": bitwise_and,
  "__rand__": _swap(bitwise_and),
  "__or__": bitwise_or,
  "__ror__": _swap(bitwise_or),
  "__xor__": bitwise_xor,
  "__rxor__": _swap(bitwise_xor),
  "__invert__": invert,
  "__lshift__": left_shift,
  "__rlshift__": _swap(left_shift),
  "__rshift__": right_shift,
  "__rrshift__": _swap(right_shift),
}
_TRACER_METHODS.update(_MORE_METHODS)
for _name, _fn in _MORE_METHODS.items():
  setattr(Tracer, _name, _fn if isinstance(_fn, property) else _apart_method(_fn))
Tracer.at = property(_At)  # x.at[idx].set(v): functional updates
