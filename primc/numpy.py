"""numpy-style user ops, built from primitives while tracing (or run eagerly on arrays).

Semantics follow numpy (2, NEP 50): broadcasting is resolved into explicit
`broadcast_in_dim`, mixed array dtypes are promoted with `np.result_type` and an explicit
`convert`. Python scalars are weak: `x * 2.0` keeps `x`'s dtype (float32 stays float32),
a Python float mixed with an integer or bool array gives float64, and Python scalars alone
are float64 / int64 (`sqrt(2.0)` is float64). A Python scalar passed to a transform (`jit`,
`grad`, ...) is traced as a weak value (`Tracer.weak`), so it means inside what it means to
numpy: arithmetic operators on weak values alone give weak values (Python arithmetic),
functions give strong ones (`sqrt(lr)` is a numpy float64). Integer operands of float functions
(`sqrt`, `divide`, ...) become float64, as in numpy. Creation functions (`zeros`, `ones`,
`full`, `eye`) default to float32, as in Paddle and JAX. Names follow numpy, with the
seeds' aliases (`concat`, `index_select`, `multiply`, `scale`, `assign`, ...).
"""

from __future__ import annotations

import builtins
import collections
import functools
import inspect
import math
import operator
import sys
from typing import Any, Callable

import numpy as np

from primc import contraction
from primc import prims as P
from primc.core import (
  FLOAT_DTYPES,
  SUPPORTED_DTYPES,
  PrimcError,
  PrimcIndexError,
  PrimcTypeError,
  ShapedArray,
  ShapeError,
  dtype_name,
  index_error,
)
from primc.batching import batch_program
from primc.tree import tree_flatten
from primc.trace import (
  Tracer,
  aval_of,
  eval_program,
  locate,
  refresh_view,
  size_constant,
  trace_flat,
  tracing,
  user_ops,
  user_source,
)
from primc.trace import as_array as leaf_array
from primc.trace import state as trace_state


class _ArrayType(type):
  def __instancecheck__(cls, x):
    return isinstance(x, (np.ndarray, Tracer))


class ndarray(metaclass=_ArrayType):
  """`isinstance(x, pnp.ndarray)` holds for numpy arrays and traced arrays alike (as for
  `jax.Array`); arrays are made by `pnp.array`, `pnp.zeros`, ..., not by this class."""

  def __new__(cls, *args, **kwargs):
    raise PrimcError(
      "primc.numpy.ndarray is for isinstance checks; make arrays with "
      "pnp.array, pnp.zeros, pnp.empty, ..."
    )


def _converting(int_type):
  """numpy's integer type `int_type`, whose call also converts a traced array (as
  `x.astype`; no derivative flows through an integer). A subclass, so it is a dtype where
  numpy's is: `np.dtype(pnp.int64)` is int64; a value made by it is numpy's own."""

  def __new__(cls, value=0, *args, **kwargs):
    if _holds_tracer(value):
      return asarray(value).astype(int_type)
    return int_type(value, *args, **kwargs)

  return type(
    int_type.__name__,
    (int_type,),
    {
      "__new__": __new__,
      "__module__": __name__,
      "__doc__": f"numpy.{int_type.__name__}; called on a traced array, `x.astype`.",
    },
  )


# numpy's own float and bool types: `x.dtype.type is pnp.float32` holds as with numpy (a
# traced value is converted by `x.astype(pnp.float32)`); the integer types convert a traced
# value when called, as `np.int64(x)` converts an array (`pnp.int64(x)`: indices from
# values)
float32, float64, bool_ = np.float32, np.float64, np.bool_
int32, int64 = _converting(np.int32), _converting(np.int64)
pi, e, inf, nan = np.pi, np.e, np.inf, np.nan
__version__ = np.__version__  # the numpy whose API and promotion rules this module follows


def _op(fn):
  """Marks a user op: errors raised inside name it, the operands and the user's line."""
  name = fn.__name__.rstrip("_")

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    ops = user_ops()  # (`trace.user_op`'s stack, without a context manager: every op)
    ops.append(name)
    try:
      return fn(*args, **kwargs)
    except PrimcError as e:
      if not getattr(e, "located", False):
        raise locate(e, f"{name} on ({_describe_args(args)}): {e}") from None
      if not str(e).startswith(name):  # located by argument conversion: add the op
        out = type(e)(f"{name}: {e}")
        out.located = True
        raise out from None
      raise
    finally:
      ops.pop()

  return wrapped


def _describe_args(args) -> str:
  def one(a):
    if isinstance(a, (Tracer, np.ndarray)):
      return str(aval_of(a))
    if isinstance(a, (list, tuple)):
      return "[" + ", ".join(one(x) for x in a) + "]"
    return type(a).__name__

  return ", ".join(one(a) for a in args)


def _is_python_scalar(x) -> bool:
  t = type(x)
  if t is float or t is int or t is bool:
    return True
  return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _is_weak(x) -> bool:
  """A Python scalar, or a traced value standing for one (`Tracer.weak`)."""
  return _is_python_scalar(x) or (isinstance(x, Tracer) and x.weak)


def _weak_kind(x) -> str:
  """'f', 'i' or 'b': the kind of a weak value."""
  if isinstance(x, Tracer):
    return np.dtype(aval_of(x).dtype).kind.replace("u", "i")
  return "b" if isinstance(x, bool) else "i" if isinstance(x, int) else "f"


def _with_weak(dtype: str, x) -> str:
  """The dtype after mixing a weak value in (numpy's rule for Python scalars): it never
  widens an array's dtype, except that a float makes an integer or bool array float64
  and an int makes a bool array int64."""
  kind = _weak_kind(x)
  if kind == "f" and dtype not in FLOAT_DTYPES:
    return "float64"
  if kind == "i" and dtype == "bool":
    return "int64"
  return dtype


def _python_arithmetic(fn):
  """An operator of traced values: on weak values alone its result is weak too, as Python
  arithmetic on Python scalars gives a Python scalar (`lr * 0.5`; numpy's functions, like
  `sqrt(lr)`, give a numpy scalar, which is not weak)."""

  def op(*operands):
    out = fn(*operands)
    if isinstance(out, Tracer) and builtins.all(_is_weak(a) for a in operands):
      out.weak = True
    return out

  return op


def _holds_tracer(x) -> bool:
  if isinstance(x, (list, tuple)):
    return builtins.any(_holds_tracer(item) for item in x)
  return isinstance(x, Tracer)


def _as_array(x):
  """An operand as an array, numpy's `array_like`: nested lists and tuples of arrays and
  scalars too (`array`), as `np.mean([a, b])` or `np.sum([1.0, 2.0])` take them."""
  if isinstance(x, (list, tuple)):
    return array(x) if _holds_tracer(x) else leaf_array(np.asarray(x))
  return leaf_array(x)


as_array = _as_array  # (public; `_as_array` inside ops: no front-end wrapper)


def asarray(x, dtype=None):
  x = _as_array(x)
  if dtype is not None and dtype != aval_of(x).dtype and np.dtype(dtype).name != aval_of(x).dtype:
    return P.convert(x, dtype)
  return x


def array(obj, dtype=None):
  """numpy.array of traced values too: nested lists and tuples of arrays and scalars are
  stacked (their dtypes promoted as numpy does), anything else is `asarray`."""
  if isinstance(obj, (list, tuple)):
    if not obj:
      return asarray(np.zeros((0,), dtype or np.float64))
    out = stack([array(item) for item in obj])
    return out if dtype is None else asarray(out, dtype)
  return asarray(obj, dtype)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
  ndim = builtins.max((len(s) for s in shapes), default=0)
  out = []
  for i in range(ndim):
    sizes = {s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0} - {1}
    if len(sizes) > 1:
      raise ShapeError(f"shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def broadcast_to(x, shape):
  """numpy.broadcast_to: right-aligned numpy broadcasting into an explicit broadcast_in_dim."""
  x = _as_array(x)
  shape = tuple(int(d) for d in shape)
  xs = aval_of(x).shape
  if xs == shape:
    return x
  if len(xs) > len(shape):
    raise ShapeError(f"cannot broadcast {xs} to {shape}")
  lead = len(shape) - len(xs)
  for i, n in enumerate(xs):
    if n not in (1, shape[lead + i]):
      raise ShapeError(f"cannot broadcast {xs} to {shape}")
  # Size-1 dims that expand are squeezed first so the broadcast is a pure index map.
  keep = [i for i, n in enumerate(xs) if n == shape[lead + i]]
  if len(keep) != len(xs):
    x = P.reshape(x, [xs[i] for i in keep])
  return P.broadcast_in_dim(x, shape, [lead + i for i in keep])


@functools.lru_cache(maxsize=1024)
def _result_name(*dtypes: str) -> str:
  return np.result_type(*dtypes).name


_raw_asarray, _raw_broadcast_to = asarray, broadcast_to  # (not the public, wrapped ones:
# an operand converted inside an op is neither a front end's call nor a view of the user's)


def _promote(*args):
  """Converts operands to one dtype and one shape (numpy rules, weak Python scalars)."""
  shapes = _shapes_of_one_dtype(args)
  if shapes is not None:  # traced values and arrays of one dtype: broadcast only
    if shapes.count(shapes[0]) == len(shapes):
      return list(args)
    shape = broadcast_shapes(*shapes)
    return [_raw_broadcast_to(a, shape) for a in args]
  args = [_as_array(a) if isinstance(a, (list, tuple)) else a for a in args]
  strong = [aval_of(a).dtype for a in args if not _is_weak(a)]
  if strong:
    dtype = strong[0] if len(set(strong)) == 1 else _result_name(*strong)
    for a in args:
      if _is_weak(a):
        dtype = _with_weak(dtype, a)
  else:  # only weak values: numpy's float64 if any is a float, else int64 (or bool)
    kinds = {_weak_kind(a) for a in args}
    dtype = "float64" if "f" in kinds else "int64" if "i" in kinds else "bool"
    tracers = [aval_of(a).dtype for a in args if isinstance(a, Tracer)]
    if tracers and np.dtype(dtype).kind == np.dtype(np.result_type(*tracers)).kind:
      dtype = np.result_type(*tracers).name  # weak traced values keep theirs
  arrays = [a if _is_python_scalar(a) else _raw_asarray(a, dtype) for a in args]
  shape = broadcast_shapes(*(() if _is_python_scalar(a) else aval_of(a).shape for a in arrays))
  return [
    _weak_constant(a, dtype, shape) if _is_python_scalar(a) else _raw_broadcast_to(a, shape)
    for a in arrays
  ]


def _shapes_of_one_dtype(args) -> list | None:
  """The shapes of `args` where each is a traced value (not weak) or a numpy array, all of
  one dtype (the common case of `_promote`, kept short); else None."""
  dtype, shapes = None, []
  for a in args:
    t = type(a)
    if t is Tracer and not a.weak:
      aval = a.ir_var.aval
      d, shape = aval.dtype, aval.shape
    elif t is np.ndarray:
      d, shape = dtype_name(a.dtype), a.shape
    else:
      return None
    if dtype is None:
      dtype = d
    elif d != dtype:
      return None
    shapes.append(shape)
  return shapes


def _weak_constant(x, dtype: str, shape: tuple):
  """The Python number `x` as an array of this dtype and shape; while tracing, broadcast
  once per trace level (`x ** 2` in a loop stages one constant, not one per step), each
  use a new traced object (an in-place write into one rebinds only that object)."""
  builders = trace_state.builders
  if not builders or not shape:
    return _raw_broadcast_to(np.asarray(x, dtype), shape)
  builder = builders[-1]
  key = (x.hex() if type(x) is float else x, type(x), dtype, shape)
  kept = builder.constants.get(key)
  if kept is None:
    t = _raw_broadcast_to(np.asarray(x, dtype), shape)
    kept = builder.constants[key] = (t.ir_var, t.concrete)
  fresh = Tracer(builder, kept[0])
  fresh.concrete = kept[1]
  return fresh


def _float(x):
  """x as a float array: integers and bools become float64 (numpy's rule for division and
  means; its transcendental ufuncs take int8, uint8 and bools to float16 and int16 and
  uint16 to float32, where primc computes in float64 in every path)."""
  x = _as_array(x)
  if aval_of(x).dtype in FLOAT_DTYPES:
    return x
  return P.convert(x, "float64")


def _axes(axis, ndim) -> tuple[int, ...]:
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  out = []
  for a in axes:
    if not -ndim <= a < ndim:
      raise ShapeError(f"axis {a} is out of bounds for an array of rank {ndim}")
    out.append(a % ndim)
  return tuple(sorted(out))


# ---------------------------------------------------------------------------------------
# Elementwise


def _unary(prim_fn, name, to_float=True):
  def fn(x):
    return prim_fn(_float(x) if to_float else _as_array(x))

  fn.__name__ = name
  return _op(fn)


sin = _unary(P.sin, "sin")
cos = _unary(P.cos, "cos")
tanh = _unary(P.tanh, "tanh")
exp = _unary(P.exp, "exp")
log = _unary(P.log, "log")
sqrt = _unary(P.sqrt, "sqrt")
negative = _unary(P.neg, "negative", to_float=False)
_abs = _unary(P.abs_, "abs", to_float=False)


@_op
def abs(x):
  """numpy.abs (of bools: themselves)."""
  x = _as_array(x)
  return x if aval_of(x).dtype == "bool" else _abs(x)


absolute = abs
sign = _unary(P.sign, "sign", to_float=False)
tan = _unary(P.tan_p.bind, "tan")
sinh = _unary(P.sinh_p.bind, "sinh")
cosh = _unary(P.cosh_p.bind, "cosh")
arcsin = asin = _unary(P.arcsin_p.bind, "arcsin")
arccos = acos = _unary(P.arccos_p.bind, "arccos")
arctan = atan = _unary(P.arctan_p.bind, "arctan")
arcsinh = asinh = _unary(P.arcsinh_p.bind, "arcsinh")
arccosh = acosh = _unary(P.arccosh_p.bind, "arccosh")
arctanh = atanh = _unary(P.arctanh_p.bind, "arctanh")
log1p = _unary(P.log1p_p.bind, "log1p")
expm1 = _unary(P.expm1_p.bind, "expm1")
log2 = _unary(P.log2_p.bind, "log2")
log10 = _unary(P.log10_p.bind, "log10")
exp2 = _unary(P.exp2_p.bind, "exp2")


@_op
def deg2rad(x):
  x = _float(x)
  return P.mul(x, P.scalar_like(np.pi / 180, x))


@_op
def rad2deg(x):
  x = _float(x)
  return P.mul(x, P.scalar_like(180 / np.pi, x))


radians, degrees = deg2rad, rad2deg


def _binary(prim_fn, name, of_bools=None):
  """A numpy binary function; `of_bools(x, y)`: what it is on two bool arrays (numpy's
  `add` is `or`, `multiply` and `minimum` are `and`), if it takes them."""

  def fn(x, y):
    x, y = _promote(x, y)
    if of_bools is not None and aval_of(x).dtype == "bool":
      return of_bools(x, y)
    return prim_fn(x, y)

  fn.__name__ = name
  return _op(fn)


def _or(a, b):
  """a or b, of bool arrays of one shape."""
  return P.select(a, a, b)


def _and(a, b):
  """a and b, of bool arrays of one shape."""
  return P.select(a, b, a)


add = _binary(P.add, "add", _or)
subtract = _binary(P.sub, "subtract")
multiply = _binary(P.mul, "multiply", _and)
maximum = _binary(P.max_, "maximum", _or)
minimum = _binary(P.min_, "minimum", _and)
equal = _binary(P.eq, "equal")
not_equal = _binary(lambda x, y: P.ne_p.bind(x, y), "not_equal")
less = _binary(P.lt, "less")
less_equal = _binary(lambda x, y: P.le_p.bind(x, y), "less_equal")
greater = _binary(P.gt, "greater")
greater_equal = _binary(lambda x, y: P.ge_p.bind(x, y), "greater_equal")


@_op
def divide(x, y):
  """True division: integer operands give float64 (numpy's rule)."""
  x, y = _promote(x, y)
  return P.div(_float(x), _float(y))


true_divide = divide


def _promote_float(x, y):
  """x and y promoted as numpy promotes them, then made float (float64 for integers and
  bools): a float32 array with a bool one stays float32, as numpy's."""
  x, y = _promote(x, y)
  return _float(x), _float(y)


def _binary_float(prim, name):
  def fn(x, y):
    return prim.bind(*_promote_float(x, y))

  fn.__name__ = name
  return _op(fn)


arctan2 = atan2 = _binary_float(P.arctan2_p, "arctan2")
hypot = _binary_float(P.hypot_p, "hypot")
logaddexp = _binary_float(P.logaddexp_p, "logaddexp")


@_op
def clip(a, a_min=None, a_max=None, **bounds):
  """numpy's clip: `minimum(maximum(a, a_min), a_max)`, either bound None (also given as
  min=, max=, numpy 2's names); the gradient is that of maximum and minimum (1 inside, 0
  outside, at a bound the bound's)."""
  unknown = set(bounds) - {"min", "max"}
  if unknown:
    raise PrimcError(f"clip got unexpected arguments {sorted(unknown)}")
  a_min = bounds.get("min", a_min)
  a_max = bounds.get("max", a_max)
  if a_min is None and a_max is None:
    raise PrimcError("clip needs a_min or a_max (both are None)")
  out = _as_array(a)
  if a_min is not None:
    out = maximum(out, a_min)
  if a_max is not None:
    out = minimum(out, a_max)
  return out


@_op
def floor_divide(x, y):
  """numpy's floor division: of floats as numpy computes it (from fmod, so the quotient
  is exact: floor_divide(1, 0.1) is 9, as 0.1 is a little above 1/10); derivative zero."""
  x, y = _promote(x, y)
  if aval_of(x).dtype not in FLOAT_DTYPES:
    return P.div(x, y)
  return _float_divmod(x, y)[0]


def _float_divmod(x, y):
  """(floor(x / y), x mod y) as numpy computes them for floats: from r = fmod(x, y)
  (exact), the quotient (x - r) / y moved down by one where r's sign is not y's, and
  rounded; y = 0 gives numpy's nan / inf."""
  zero = zeros_like(x)
  r = P.fmod_p.bind(x, y)
  moved = _and(P.ne_p.bind(r, zero), P.ne_p.bind(P.lt(r, zero), P.lt(y, zero)))
  mod = where(moved, P.add(r, y), r)
  div = P.div(P.sub(x, r), y)
  div = where(moved, P.sub(div, ones_like(div)), div)
  q = P.floor_p.bind(div)
  q = where(P.gt(P.sub(div, q), full_like(q, 0.5)), P.add(q, ones_like(q)), q)
  q = where(P.eq(y, zero), P.div(x, y), q)
  return q, mod


@_op
def mod(x, y):
  """numpy.mod / remainder / `%`: the result has the divisor's sign (floats from fmod, so
  exact; integers modulo 0 are 0, as numpy's); d/dx = 1, d/dy = -floor(x / y)."""
  x, y = _promote(x, y)
  if aval_of(x).dtype in FLOAT_DTYPES:
    return _float_divmod(x, y)[1]
  zero = zeros_like(x)
  return where(P.eq(y, zero), zero, P.sub(x, P.mul(P.div(x, y), y)))


remainder = mod


@_op
def fmod(x, y):
  """numpy.fmod: C's remainder, with the dividend's sign."""
  x, y = _promote(x, y)
  if aval_of(x).dtype in FLOAT_DTYPES:
    return P.fmod_p.bind(x, y)
  r = mod(x, y)
  differ = _and(
    P.ne_p.bind(r, zeros_like(r)), P.ne_p.bind(P.lt(x, zeros_like(x)), P.lt(y, zeros_like(y)))
  )
  return where(differ, P.sub(r, y), r)


@_op
def divmod_(x, y):
  return floor_divide(x, y), mod(x, y)


divmod = divmod_


def _rounding(prim, name):
  def fn(x):
    x = _as_array(x)
    if aval_of(x).dtype not in FLOAT_DTYPES:  # numpy 2: integers are already whole
      return x if prim is not P.rint_p else P.convert(x, "float64")
    return prim.bind(x)

  fn.__name__ = name
  return _op(fn)


floor = _rounding(P.floor_p, "floor")
ceil = _rounding(P.ceil_p, "ceil")
trunc = fix = _rounding(P.trunc_p, "trunc")
rint = _rounding(P.rint_p, "rint")


@_op
def round_(a, decimals=0):
  """numpy.round: halves to even, at `decimals` places (scaled by 10**decimals)."""
  a = _as_array(a)
  if aval_of(a).dtype == "bool" and decimals >= 0:  # numpy's float16, as other float
    return P.convert(a, "float64")  # functions of bools (docs/guide/numpy.md)
  if aval_of(a).dtype not in FLOAT_DTYPES:
    if decimals >= 0:
      return a
    raise NotSupportedError("round of integers to negative decimals is not supported")
  if not decimals:
    return P.rint_p.bind(a)
  scale = full_like(a, 10.0**decimals)
  return P.div(P.rint_p.bind(P.mul(a, scale)), scale)


round = around = round_


@_op
def modf(x):
  """(fractional part, integral part), each with x's sign."""
  x = _float(x)
  return P.fmod_p.bind(x, ones_like(x)), P.trunc_p.bind(x)


@_op
def sinc(x):
  """sin(pi x) / (pi x), 1 at 0. Near 0 (|pi x| < 1e-3) its Taylor polynomial to x^8, so
  derivatives of orders 1-7 are right at 0 too (a guarded division would make them 0)."""
  x = _float(x)
  px = P.mul(x, full_like(x, np.pi))
  small = P.lt(P.abs_(px), full_like(x, 1e-3))
  safe = where(small, ones_like(x), px)
  z = P.mul(px, px)
  series = ones_like(x)
  for k in (9 * 8, 7 * 6, 5 * 4, 3 * 2):  # 1 - z/3! + z^2/5! - z^3/7! + z^4/9!, nested
    series = P.sub(ones_like(x), P.mul(P.div(z, full_like(x, float(k))), series))
  return where(small, series, P.div(P.sin(safe), safe))


@_op
def power(x, y):
  """x ** y with numpy's dtypes: a Python exponent keeps a float x's dtype; an integer x
  to a constant non-negative integer power stays an integer (exact, by repeated
  squaring); other integer powers need a float operand."""
  exponent = y
  x, y = _promote(x, y)
  if aval_of(x).dtype in FLOAT_DTYPES:
    return P.pow_(x, y)
  if isinstance(exponent, (int, np.integer)) and not isinstance(exponent, bool) and exponent >= 0:
    out, base, n = ones_like(x), x, int(exponent)
    while n:
      out, base, n = (P.mul(out, base) if n & 1 else out), P.mul(base, base), n >> 1
    return out
  raise NotSupportedError(
    f"power of an integer array to {type(exponent).__name__} "
    f"exponent: only a constant non-negative integer is supported; "
    f"convert to float first"
  )


pow = power


@_op
def square(x):
  x = _as_array(x)
  return P.mul(x, x)


@_op
def reciprocal(x):
  """1 / x; of integers numpy's integer result (1 and -1 their own reciprocals, 0 for
  larger magnitudes, the least integer for 0)."""
  x = _as_array(x)
  dtype = aval_of(x).dtype
  if dtype in ("int32", "int64"):
    least = full_like(x, np.iinfo(dtype).min)
    unit = logical_or(equal(x, 1), equal(x, -1))
    return where(equal(x, 0), least, where(unit, x, zeros_like(x)))
  x = _float(x)
  return P.div(P.scalar_like(1, x), x)


@_op
def where(condition, x=None, y=None):
  """numpy.where: x where condition holds, else y; with condition alone, `nonzero`."""
  if x is None and y is None:
    return nonzero(condition)
  if x is None or y is None:
    raise PrimcError("where: either both or neither of x and y should be given")
  condition = _as_array(condition)
  if aval_of(condition).dtype != "bool":
    condition = not_equal(condition, 0)
  x, y = _promote(x, y)
  shape = broadcast_shapes(aval_of(condition).shape, aval_of(x).shape)
  return P.select(broadcast_to(condition, shape), broadcast_to(x, shape), broadcast_to(y, shape))


_where = where  # (for functions with a `where=` parameter)


def stop_gradient(x: Any) -> Any:
  """Identity whose derivative is zero: gradients do not flow through it."""
  return P.stop_gradient(_as_array(x))


@_op
def sigmoid(x):
  x = _float(x)
  one = P.scalar_like(1, x)
  return P.div(one, P.add(one, P.exp(P.neg(x))))


@_op
def relu(x):
  return maximum(x, 0.0)


@_op
def scale(x, scale=1.0, bias=0.0, bias_after_scale=True):
  """Paddle's scale: `scale * x + bias` (or `scale * (x + bias)`)."""
  if bias_after_scale:
    return add(multiply(x, scale), bias)
  return multiply(add(x, bias), scale)


def assign(x):
  """Paddle's assign: a copy of x (a new object: a write into it leaves x, `_apart`)."""
  return _as_array(x)


def astype(x, dtype):
  return asarray(x, dtype)


# ---------------------------------------------------------------------------------------
# Creation


def zeros(shape, dtype="float32"):
  return P.full(_shape(shape), 0, dtype)


def ones(shape, dtype="float32"):
  return P.full(_shape(shape), 1, dtype)


def full(shape, fill_value, dtype=None):
  """numpy.full (float32 by default, as JAX and Paddle); a traced `fill_value` (or an
  array, broadcast to `shape`) gives its dtype unless `dtype` says otherwise."""
  if isinstance(fill_value, Tracer) or np.ndim(fill_value) > 0:
    value = _as_array(fill_value)
    return broadcast_to(value if dtype is None else astype(value, dtype), _shape(shape))
  return P.full(_shape(shape), fill_value, dtype or "float32")


def zeros_like(x, dtype=None, shape=None):
  return full_like(x, 0, dtype, shape)


def ones_like(x, dtype=None, shape=None):
  return full_like(x, 1, dtype, shape)


def full_like(x, fill_value, dtype=None, shape=None):
  """numpy.full_like; `shape` replaces x's (its dtype is kept)."""
  a = aval_of(_as_array(x))
  shape = a.shape if shape is None else _shape(shape)
  if isinstance(fill_value, Tracer) or np.ndim(fill_value) > 0:
    return broadcast_to(astype(_as_array(fill_value), dtype or a.dtype), shape)
  return P.full(shape, fill_value, dtype or a.dtype)


def eye(n, m=None, k=0, dtype="float32"):
  """numpy.eye (float32 by default, as JAX and Paddle): ones on diagonal k."""
  if not isinstance(k, (int, np.integer)):  # eye(n, m, dtype) as primc once took it
    k, dtype = 0, k
  m = n if m is None else m
  return P.convert(
    P.eq(P.add(P.iota((n, m), 0), P.full((n, m), int(k), "int32")), P.iota((n, m), 1)), dtype
  )


def arange(start, stop=None, step=None, dtype=None):
  """numpy.arange: start + k * step for k < ceil((stop - start) / step), the bounds known
  while tracing; numpy's dtype (int64 for ints, float64 for floats) unless `dtype`."""
  for b in (start, stop, step):
    if isinstance(b, Tracer):
      raise NotSupportedError("arange of traced bounds (its length would depend on them)")
  if stop is None:
    start, stop = 0, start
  step = 1 if step is None else step
  if step == 0:
    raise ValueError("arange: step must not be zero")
  n = builtins.max(0, int(math.ceil((stop - start) / step)))
  dtype = np.dtype(dtype or np.result_type(start, stop, step)).name
  k = P.iota((n,), 0, dtype)
  if start == 0 and step == 1:
    return k
  return P.add(P.mul(k, P.full((n,), step, dtype)), P.full((n,), start, dtype))


def _shape(shape):
  return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


# ---------------------------------------------------------------------------------------
# Shape manipulation


@_op
def reshape(x, shape, *more, order="C"):
  """numpy.reshape; order "F" reads and writes the elements in column-major order (the
  reshape of the transpose, transposed back); "A" is "C" here (traced arrays have no
  memory layout)."""
  x = _as_array(x)
  shape = _shape(shape) if not more else _shape((shape,) + more)
  if order == "F":
    full = _full_shape(aval_of(x), shape)
    return transpose(reshape(transpose(x), full[::-1]))
  if order not in ("C", "A"):
    raise PrimcError(f"reshape: order must be 'C', 'F' or 'A', got {order!r}")
  size = aval_of(x).size
  if shape.count(-1) > 1:
    raise ShapeError(f"cannot reshape {aval_of(x).shape} to {shape}: more than one -1")
  if -1 in shape:
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if known == 0 or size % known:
      raise ShapeError(f"cannot reshape {aval_of(x).shape} ({size} elements) to {shape}")
    shape = tuple(size // known if d == -1 else d for d in shape)
  if shape == aval_of(x).shape:
    return x
  return P.reshape(x, shape)


def _full_shape(aval, shape) -> tuple[int, ...]:
  """`shape` with its -1 resolved against `aval`'s size."""
  if -1 not in shape:
    return tuple(shape)
  known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
  return tuple(aval.size // builtins.max(known, 1) if d == -1 else d for d in shape)


@_op
def transpose(x, axes=None, perm=None):
  """numpy.transpose (`perm=` is Paddle's name for `axes`)."""
  x = _as_array(x)
  axes = perm if axes is None else axes
  nd = aval_of(x).ndim
  axes = tuple(reversed(range(nd))) if axes is None else tuple(a % nd for a in axes)
  return x if axes == tuple(range(nd)) else P.transpose(x, axes)


def moveaxis(x, source, destination):
  """Axes `source` (an int or a sequence) moved to `destination`, the others in order."""
  x = _as_array(x)
  nd = aval_of(x).ndim
  source = [int(a) % nd for a in ((source,) if isinstance(source, (int, np.integer)) else source)]
  destination = [
    int(a) % nd
    for a in ((destination,) if isinstance(destination, (int, np.integer)) else destination)
  ]
  if len(source) != len(destination):
    raise ShapeError(f"moveaxis: {len(source)} source axes for {len(destination)} destinations")
  perm = [i for i in range(nd) if i not in source]
  for dest, src in sorted(zip(destination, source)):
    perm.insert(dest, src)
  return transpose(x, perm)


def expand_dims(x, axis):
  """New axes of length 1 at `axis` (an int or a tuple: positions in the result)."""
  x = _as_array(x)
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  ndim = aval_of(x).ndim + len(axes)
  where_new = sorted(int(a) % ndim for a in axes)
  if len(set(where_new)) != len(where_new):
    raise ShapeError(f"expand_dims: repeated axis in {axis}")
  rest = iter(aval_of(x).shape)
  return reshape(x, [1 if k in where_new else next(rest) for k in range(ndim)])


def squeeze(x, axis=None):
  x = _as_array(x)
  shape = aval_of(x).shape
  axes = [i for i, n in enumerate(shape) if n == 1] if axis is None else _axes(axis, len(shape))
  return reshape(x, [n for i, n in enumerate(shape) if i not in axes])


@_op
def concatenate(arrays, axis=0):
  arrays = _promote_list(arrays)
  if axis is None:  # numpy: the arrays flattened, joined
    arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
  nd = aval_of(arrays[0]).ndim
  return arrays[0] if len(arrays) == 1 else P.concatenate(arrays, axis % nd)


def concat(x, axis=0):
  """Paddle's concat: `x` is the list of arrays."""
  return concatenate(x, axis)


def _promote_list(arrays):
  arrays = [_as_array(a) for a in arrays]
  dtype = np.result_type(*(aval_of(a).dtype for a in arrays)).name
  return [asarray(a, dtype) for a in arrays]


@_op
def stack(arrays, axis=0):
  arrays = _promote_list(arrays)
  nd = aval_of(arrays[0]).ndim + 1
  return concatenate([expand_dims(a, axis % nd) for a in arrays], axis % nd)


@_op
def split(x, indices_or_sections=None, axis=0, num_or_sections=None):
  """numpy.split: an int splits into equal parts; a list gives the split points.

  Paddle's `num_or_sections=` takes an int (equal parts) or a list of section sizes, one
  of which may be -1 (the rest)."""
  if num_or_sections is not None:
    if isinstance(num_or_sections, (int, np.integer)):
      indices_or_sections = num_or_sections
    else:
      return split_sizes(x, num_or_sections, axis)
  if indices_or_sections is None:
    raise PrimcError("split needs indices_or_sections (or num_or_sections)")
  x = _as_array(x)
  shape = aval_of(x).shape
  axis = axis % len(shape)
  n = shape[axis]
  if isinstance(indices_or_sections, (int, np.integer)):
    k = int(indices_or_sections)
    if k <= 0 or n % k:
      raise ShapeError(f"array of size {n} along axis {axis} cannot be split into {k} equal parts")
    points = [n // k * i for i in range(1, k)]
  else:
    points = [int(p) for p in indices_or_sections]
  return _split_at(x, axis, points)


def _split_at(x, axis, points):
  """The pieces x[lo:hi] along `axis` between consecutive points (Python's slice rules,
  as numpy: points past the end give empty pieces)."""
  bounds = [0] + list(points) + [None]
  lead = (builtins.slice(None),) * axis
  return [getitem(x, lead + (builtins.slice(lo, hi),)) for lo, hi in zip(bounds[:-1], bounds[1:])]


@_op
def array_split(x, indices_or_sections, axis=0):
  """numpy.array_split: like split, but k sections need not be equal (the first n % k are
  one longer)."""
  x = _as_array(x)
  axis = _axes(axis, aval_of(x).ndim)[0]
  if not isinstance(indices_or_sections, (int, np.integer)):
    return _split_at(x, axis, [int(p) for p in indices_or_sections])
  n, k = aval_of(x).shape[axis], int(indices_or_sections)
  if k <= 0:
    raise ShapeError(f"array_split needs a positive number of sections, got {k}")
  sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
  return _split_at(x, axis, [int(p) for p in np.cumsum(sizes)[:-1]])


def _split_along(name, axis_of, min_ndim):
  def fn(x, indices_or_sections):
    x = _as_array(x)
    nd = aval_of(x).ndim
    if nd < min_ndim:
      raise ShapeError(f"{name} needs an array of rank >= {min_ndim}, got {aval_of(x).shape}")
    return split(x, indices_or_sections, axis_of(nd))

  fn.__name__ = name
  return _op(fn)


hsplit = _split_along("hsplit", lambda nd: 1 if nd > 1 else 0, 1)
vsplit = _split_along("vsplit", lambda nd: 0, 2)
dsplit = _split_along("dsplit", lambda nd: 2, 3)


def split_sizes(x, sizes, axis=0):
  """Paddle-style split by section sizes (one size may be -1: the rest)."""
  n = aval_of(_as_array(x)).shape[_axes(axis, aval_of(_as_array(x)).ndim)[0]]
  sizes = [int(k) for k in sizes]
  if sizes.count(-1) > 1 or builtins.any(k < -1 for k in sizes):
    raise ShapeError(f"section sizes {sizes}: at most one -1 and no other negative size")
  if -1 in sizes:
    sizes[sizes.index(-1)] = n - (builtins.sum(sizes) + 1)
  if builtins.sum(sizes) != n or builtins.any(k < 0 for k in sizes):
    raise ShapeError(f"section sizes {sizes} do not add up to the axis size {n}")
  return split(x, [int(p) for p in np.cumsum(sizes)[:-1]], axis)


@_op
def slice(input, axes, starts, ends):
  """Paddle's slice: `input[starts[i]:ends[i]]` along each of `axes` (negative positions
  count from the end, positions past the end are clipped, as Python slices)."""
  return strided_slice(input, axes, starts, ends, [1] * len(axes))


@_op
def strided_slice(x, axes, starts, ends, strides):
  """Paddle's strided_slice: `x[starts[i]:ends[i]:strides[i]]` along each of `axes`
  (any nonzero stride, negative ones included)."""
  x = _as_array(x)
  nd = aval_of(x).ndim
  if not len(axes) == len(starts) == len(ends) == len(strides):
    raise ShapeError("axes, starts, ends and strides need one entry each")
  index = [builtins.slice(None)] * nd
  for a, lo, hi, st in zip(axes, starts, ends, strides):
    if int(st) == 0:
      raise ShapeError("strided_slice: a stride of 0")
    index[_axes(int(a), nd)[0]] = builtins.slice(int(lo), int(hi), int(st))
  return getitem(x, tuple(index))


def _slice_axis(x, axis, lo, hi):
  shape = aval_of(x).shape
  start = [0] * len(shape)
  limit = list(shape)
  start[axis], limit[axis] = lo, builtins.max(lo, hi)
  return P.slice_(x, start, limit)


def _index_array(k, axis: int, size: int):
  """An integer index array along an axis of `size`: a traced one as it is (the compiled
  code checks it), a constant one checked now and with negatives counted from the end."""
  if isinstance(k, Tracer):
    if aval_of(k).dtype not in ("int32", "int64"):
      raise PrimcIndexError(
        f"arrays used as indices must be of integer type, got {aval_of(k).dtype}"
      )
    return k
  a = np.asarray(k)
  if a.dtype.kind == "f" and a.size == 0:  # numpy reads an empty list as an integer index
    a = a.astype(np.int64)
  if a.dtype.kind not in "iu":
    raise PrimcIndexError(f"arrays used as indices must be of integer type, got {a.dtype}")
  return P.wrap_indices(a, size, axis).astype(np.int64 if a.dtype.itemsize > 4 else np.int32)


@_op
def take(x, indices, axis=None, mode="raise"):
  """numpy.take. `mode="raise"` (the default): negative indices count from the end; an
  index out of bounds raises IndexError (now for constant indices, at run time for traced
  ones). Asked for, `"wrap"` takes indices modulo the axis and `"clip"` clips them into
  it (negatives to 0), as numpy."""
  x = _as_array(x)
  if axis is None:
    x = reshape(x, (-1,))
    axis = 0
  axis = _axes(axis, aval_of(x).ndim)[0]
  n = aval_of(x).shape[axis]
  if mode not in ("raise", "wrap", "clip"):
    raise PrimcError(f"take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
  if mode != "raise":
    if n == 0:
      raise PrimcIndexError("take: cannot do a non-empty take from an empty axis")
    k = _as_array(indices)
    if aval_of(k).dtype not in ("int32", "int64"):
      raise PrimcIndexError(
        f"arrays used as indices must be of integer type, got {aval_of(k).dtype}"
      )
    indices = mod(k, n) if mode == "wrap" else clip(k, 0, n - 1)
  return P.gather(x, _index_array(indices, axis, n), axis)


def index_select(x, index, axis=0):
  """Paddle's index_select: rows (or entries along `axis`) picked by a 1-D index."""
  return take(x, index, axis)


def gather(x, index, axis=0):
  """Paddle's gather: like index_select."""
  return take(x, index, axis)


def _expand_index(idx, ndim: int, shape=None) -> list:
  """The index as a list of entries, one per dim of the array plus None for new axes:
  Ellipsis expanded into full slices (and kept after them, as a marker that takes no dim:
  numpy's placement of advanced-index dims depends on it), 0-d integer arrays as integers,
  boolean masks (known while tracing; checked against `shape` when given) as the integer
  arrays of their nonzero entries."""
  entries = idx if type(idx) is tuple else (idx,)
  if builtins.all(type(k) is builtins.slice or k is None or type(k) is int for k in entries):
    used = len(entries) - entries.count(None)  # (the common case, kept short)
    if used <= ndim:
      return [*entries, *[builtins.slice(None)] * (ndim - used)]
  out = []
  for k in list(idx) if isinstance(idx, tuple) else [idx]:
    if isinstance(k, Tracer):
      if aval_of(k).dtype == "bool":
        raise PrimcIndexError(
          "a boolean mask computed while tracing cannot index (the "
          "result's shape would depend on its values): use where()"
        )
      out.append(k)
    elif isinstance(k, (list, np.ndarray, bool, np.bool_)):
      a = np.asarray(k)
      if a.dtype == np.bool_ and a.ndim == 0:
        raise PrimcIndexError(f"indexing with a boolean scalar ({k!r}) is not supported")
      out.append(a if a.ndim or a.dtype == np.bool_ else operator_index(a))
    else:
      out.append(k)
  if builtins.sum(k is Ellipsis for k in out if not _is_array(k)) > 1:
    raise PrimcIndexError("an index can only have a single ellipsis ('...')")
  width = lambda k: k.ndim if _is_array(k) and k.dtype == np.bool_ else 1
  used = builtins.sum(
    width(k) for k in out if _is_array(k) or (k is not None and k is not Ellipsis)
  )
  if used > ndim:
    raise PrimcIndexError(
      f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
    )
  fill = [builtins.slice(None)] * (ndim - used)
  at = next((i for i, k in enumerate(out) if not _is_array(k) and k is Ellipsis), None)
  out = out + fill if at is None else out[:at] + fill + out[at:]
  expanded, dim = [], 0
  for k in out:  # masks become their nonzero positions, one array per dim they cover
    if _is_array(k) and k.dtype == np.bool_:
      covered = tuple(shape[dim : dim + k.ndim]) if shape is not None else k.shape
      if k.shape != covered:
        raise PrimcIndexError(
          f"boolean index did not match indexed array along axis {dim}; "
          f"size of axis is {covered} but size of corresponding "
          f"boolean index is {k.shape}"
        )
      expanded.extend(np.nonzero(k))
      dim += k.ndim
    else:
      expanded.append(k)
      dim += _takes_dim(k)
  return expanded


def _takes_dim(k) -> bool:
  """Whether an expanded index entry indexes a dim (None and the Ellipsis marker do not)."""
  return _is_array(k) or (k is not None and k is not Ellipsis)


def _is_array(k) -> bool:
  return isinstance(k, (np.ndarray, Tracer))


def operator_index(k) -> int:
  """An integer index (ints, numpy integers, 0-d integer arrays), as numpy accepts it."""
  a = np.asarray(k) if not isinstance(k, Tracer) else None
  if a is not None and a.ndim == 0 and a.dtype.kind in "iu":
    return int(a)
  raise PrimcIndexError(
    f"only integers, slices (`:`), ellipsis (`...`), None and integer "
    f"or boolean arrays are valid indices, got {type(k).__name__} "
    f"({k!r:.40})"
  )


def _slice_bounds(k: builtins.slice, n: int) -> tuple[bool, int, int, int]:
  """(reversed, start, limit, stride) with a positive stride: numpy's slice `k` of a dim
  of size n, read from the dim as it is or from the reversed dim."""
  lo, hi, st = k.indices(n)
  m = len(range(lo, hi, st))
  if m == 0:
    return False, 0, 0, 1
  if st < 0:
    return True, n - 1 - lo, n - 1 - lo + (m - 1) * -st + 1, -st
  return False, lo, lo + (m - 1) * st + 1, st


def _basic(x, dims):
  """x with each dim indexed by its entry: a slice (any step) keeps the dim, an integer
  leaves a unit dim (dropped by the caller), an array keeps the whole dim (for later)."""
  shape = aval_of(x).shape
  flips, start, limit, strides = [], [], [], []
  for dim, (k, n) in enumerate(zip(dims, shape)):
    if isinstance(k, builtins.slice):
      flip, lo, hi, st = _slice_bounds(k, n)
      flips += [dim] if flip else []
    elif _is_array(k):
      lo, hi, st = 0, n, 1
    else:
      k = k if type(k) is int else operator_index(k)
      if not -n <= k < n:
        raise index_error(k, dim, n)
      lo, hi, st = k % n, k % n + 1, 1
    start.append(lo), limit.append(hi), strides.append(st)
  if flips:
    x = P.rev(x, flips)
  whole = tuple(start) == (0,) * len(shape) and tuple(limit) == shape and set(strides) <= {1}
  return x if whole else P.slice_(x, start, limit, strides)


@_op
def getitem(x, idx):
  """numpy indexing, for values and gradients: integers (negative from the end; out of
  bounds an IndexError), slices with any step, None, Ellipsis, integer arrays (constant or
  traced; several broadcast together, their dims placed as numpy places them) and boolean
  masks known while tracing."""
  x = _as_array(x)
  entries = _expand_index(idx, aval_of(x).ndim, aval_of(x).shape)
  if builtins.any(_is_array(k) for k in entries):
    return _advanced_index(x, entries)
  x = _basic(x, [k for k in entries if _takes_dim(k)])
  sizes, out_shape = iter(aval_of(x).shape), []
  for k in entries:
    if k is None:
      out_shape.append(1)
    elif _takes_dim(k):
      n = next(sizes)
      if isinstance(k, builtins.slice):  # an integer's unit dim goes
        out_shape.append(n)
  return x if tuple(out_shape) == aval_of(x).shape else P.reshape(x, out_shape)


def _shape_text(i) -> str:
  return str(aval_of(i).shape if isinstance(i, Tracer) else np.shape(i))


def _advanced_index(x, entries):
  """Integer-array indexing (numpy's advanced indexing): the index arrays, and integers
  beside them, broadcast to one shape B; B's dims stand where the indexed dims stood
  when those stand together in the index (no slice or None between them), else first."""
  dims = [k for k in entries if _takes_dim(k)]  # one per dim of x
  adv = [d for d, k in enumerate(dims) if not isinstance(k, builtins.slice)]
  x = _basic(x, [k if isinstance(k, builtins.slice) else builtins.slice(None) for k in dims])
  shape = aval_of(x).shape
  # integers are checked now (as numpy does), arrays once broadcast (none when B is empty)
  raw = [
    dims[d]
    if _is_array(dims[d])
    else _index_array(np.asarray(operator_index(dims[d])), d, shape[d])
    for d in adv
  ]
  try:
    b = broadcast_shapes(*(aval_of(i).shape if isinstance(i, Tracer) else i.shape for i in raw))
  except ShapeError:
    raise PrimcIndexError(
      "shape mismatch: indexing arrays could not be broadcast together "
      f"with shapes {' '.join(_shape_text(i) for i in raw)}"
    ) from None
  index = [
    broadcast_to(
      _as_array(_index_array(i if isinstance(i, Tracer) else np.broadcast_to(i, b), d, shape[d])), b
    )
    for i, d in zip(raw, adv)
  ]
  kinds = "".join(
    "N"
    if k is None
    else "E"
    if not _takes_dim(k)
    else "S"
    if isinstance(k, builtins.slice)
    else "A"
    for k in entries
  )
  first, last = kinds.index("A"), kinds.rindex("A")
  together = set(kinds[first : last + 1]) == {"A"}
  rest = [d for d in range(len(shape)) if d not in adv]
  if len(adv) == 1:  # gathered in place: B's dims where the indexed dim was
    out = P.gather(x, index[0], adv[0])
  else:  # the indexed dims moved first, gathered one after another, paired along B
    out = P.gather(transpose(x, adv + rest), index[0], 0)
    for i in index[1:]:
      out = P.gather(out, i, len(b), len(b))
    at = kinds[:first].count("S") if together else 0  # slice dims before B's
    nb = len(b)
    out = transpose(out, [*range(nb, nb + at), *range(nb), *range(nb + at, nb + len(rest))])
  sizes, final = iter([shape[d] for d in rest]), ([] if together else list(b))
  for pos, kind in enumerate(kinds):  # None's unit dims, among the slice dims and B
    if kind == "N":
      final.append(1)
    elif kind == "S":
      final.append(next(sizes))
    elif pos == first and together:
      final.extend(b)
  return reshape(out, final)


# ---------------------------------------------------------------------------------------
# Reductions


def _accumulated(a, dtype):
  """`a` in the dtype numpy's sum, prod, cumsum, cumprod and trace accumulate it in:
  `dtype` when given, else the default integer (int64) for bools and narrower integers,
  else its own (a sum of int32 values does not wrap at 2^31)."""
  a = asarray(a, dtype)
  if dtype is None and aval_of(a).dtype in ("bool", "int8", "int16", "int32"):
    a = P.convert(a, "int64")
  elif dtype is None and aval_of(a).dtype in ("uint8", "uint16", "uint32"):
    a = P.convert(a, "uint64")  # (numpy's unsigned default)
  return a


@_op
def sum(x, axis=None, keepdims=False, dtype=None, initial=None, where=None):
  """numpy.sum (integers and bools summed in int64, as numpy); `where` (a mask broadcast
  against x) leaves entries out, `initial` is added."""
  x = _accumulated(x, dtype)
  a = aval_of(x)
  if where is not None:
    x = _masked(x, where, 0)
  axes = _axes(axis, a.ndim)
  out = P.reduce_sum(x, axes) if axes else x
  out = _keep(out, a.shape, axes) if keepdims else out
  return out if initial is None else add(out, asarray(initial, aval_of(out).dtype))


def _kept(where, x, axis, keepdims):
  """How many entries of x the mask `where` (broadcast to x's shape) keeps, in x's dtype."""
  mask = broadcast_to(asarray(where, "bool"), aval_of(x).shape)
  return sum(astype(mask, aval_of(x).dtype), axis, keepdims)


def _masked(x, mask, fill):
  """x where `mask` (broadcast to x's shape), `fill` elsewhere."""
  mask = broadcast_to(asarray(mask, "bool"), aval_of(x).shape)
  return P.select(mask, x, P.full(aval_of(x).shape, fill, aval_of(x).dtype))


def _keep(out, shape, axes):
  return reshape(out, [1 if i in axes else n for i, n in enumerate(shape)])


@_op
def mean(x, axis=None, keepdims=False, dtype=None, where=None):
  """numpy.mean; over the entries `where` is true when it is given."""
  x = _float(x) if dtype is None else asarray(x, dtype)
  if where is not None:
    return divide(sum(x, axis, keepdims, where=where), _kept(where, x, axis, keepdims))
  a = aval_of(x)
  axes = _axes(axis, a.ndim)
  count = int(np.prod([a.shape[i] for i in axes], dtype=np.int64))
  total = sum(x, axis, keepdims)
  shape, dtype = aval_of(total).shape, aval_of(total).dtype
  divisor = size_constant(count, dtype)  # not a value rewrites read: sizes are not code
  if shape:
    divisor = P.broadcast_in_dim(divisor, shape, [])
  return P.div(total, divisor)


_mean = mean  # (for functions with a `mean=` parameter)


@_op
def max(x, axis=None, keepdims=False, initial=None, where=None):
  """numpy.max; `initial` takes part (and is the result of an empty reduction); `where`
  (a mask, with `initial`, as numpy requires) leaves entries out."""
  x = _as_array(x)
  a = aval_of(x)
  if a.dtype == "bool":  # numpy's maximum of bools: any
    return astype(max(astype(x, "int32"), axis, keepdims, initial, where), "bool")
  if where is not None:
    if initial is None:
      raise PrimcError("max with where= needs initial= (numpy's rule: the maximum has no identity)")
    x = _masked(x, where, initial)
  axes = _axes(axis, a.ndim)  # (initial: in x's dtype, as numpy casts it)
  if initial is not None and builtins.any(a.shape[i] == 0 for i in axes):  # over nothing
    least = -np.inf if a.dtype in FLOAT_DTYPES else np.iinfo(a.dtype).min  # (then initial)
    out = P.full(tuple(n for i, n in enumerate(a.shape) if i not in axes), least, a.dtype)
  else:
    out = P.reduce_max(x, axes) if axes else x
  out = _keep(out, a.shape, axes) if keepdims else out
  return out if initial is None else maximum(out, asarray(initial, aval_of(out).dtype))


amax = max


@_op
def min(x, axis=None, keepdims=False, initial=None, where=None):
  """numpy.min: the maximum of the negated values, negated; of integers the maximum of
  their complements (`~x = -x - 1` reverses the order without overflowing: `-x` of the
  least integer is itself)."""
  x = _as_array(x)
  dtype = aval_of(x).dtype
  if dtype == "bool":
    return astype(min(astype(x, "int32"), axis, keepdims, initial, where), "bool")
  flip = bitwise_not if dtype in ("int32", "int64") else negative
  init = None if initial is None else flip(asarray(initial, dtype))
  return flip(max(flip(x), axis, keepdims, init, where))


amin = min


def _correction(ddof, correction):
  """numpy 2's `correction=`, another name for `ddof`."""
  if correction is None:
    return ddof
  if ddof:
    raise PrimcError("var/std: ddof and correction can't be provided simultaneously")
  return correction


@_op
def var(
  x, axis=None, keepdims=False, ddof=0, *, dtype=None, where=None, mean=None, correction=None
):
  """numpy.var; `mean` (of the shape keepdims=True gives) is used instead of computing
  it, `where` (a mask broadcast against x) leaves entries out, `correction` is `ddof`."""
  ddof = _correction(ddof, correction)
  x = _as_array(x) if dtype is None else asarray(x, dtype)
  m = _mean(x, axis, keepdims=True, where=where) if mean is None else _as_array(mean)
  d = subtract(x, m)
  if where is not None:
    total = sum(multiply(d, d), axis, keepdims, where=where)
    dof = maximum(subtract(_kept(where, d, axis, keepdims), asarray(ddof, aval_of(d).dtype)), 0)
    return divide(total, dof)  # no degrees of freedom left: inf or nan, as numpy
  if not ddof:
    return _mean(multiply(d, d), axis, keepdims)
  a = aval_of(d)
  count = int(np.prod([a.shape[i] for i in _axes(axis, a.ndim)], dtype=np.int64)) - ddof
  total = sum(multiply(d, d), axis, keepdims)
  # no degrees of freedom left (ddof >= n): divided by 0, inf or nan, as numpy
  divisor = size_constant(builtins.max(count, 0), aval_of(total).dtype)
  if aval_of(total).shape:
    divisor = P.broadcast_in_dim(divisor, aval_of(total).shape, [])
  return P.div(total, divisor)


@_op
def norm(x, ord=None, axis=None, keepdims=False, p=None):
  """numpy.linalg.norm. Vector norms (an int `axis`, or axis=None on a 1-D array): ord None
  or 2, inf, -inf, 0 (the count of nonzeros), 1, any other p (sum |x|^p)^(1/p). Matrix
  norms (a pair `axis`, or axis=None on a 2-D array): None or 'fro', 1, -1, inf, -inf,
  and from the singular values 2, -2 (largest, smallest) and 'nuc' (their sum). ord=None with
  axis=None is the 2-norm of all elements, at any rank. Paddle's `p=` (with axis=None:
  the norm of the flattened array) is accepted too.

  The derivative of a 2-norm at an all-zero input is nan (d sqrt(s) / ds at s = 0 is
  infinite)."""
  x = _float(x)
  nd = aval_of(x).ndim
  if p is not None:  # Paddle: p applies to all elements when axis is None
    ord = None if p == "fro" else p
    if axis is None:
      return _vector_norm(x, ord, tuple(range(nd)), keepdims)
  if axis is None and ord is None:
    return sqrt(sum(multiply(x, x), None, keepdims))
  if axis is None:
    if nd not in (1, 2):
      raise ShapeError(
        f"norm with ord={ord!r} and axis=None needs a 1-D or 2-D array, "
        f"got shape {aval_of(x).shape}"
      )
    axis = tuple(range(nd))
  axes = tuple(_axes(a, nd)[0] for a in ((axis,) if isinstance(axis, int) else axis))
  if len(axes) == 1:
    return _vector_norm(x, ord, axes[0], keepdims)
  if len(axes) == 2 and axes[0] != axes[1]:
    return _matrix_norm(x, ord, axes, keepdims)
  raise ShapeError(f"norm: axis must name one or two distinct axes, got {axis!r}")


def _vector_norm(x, ord, axis, keepdims):
  if ord is None or ord == 2:
    return sqrt(sum(multiply(x, x), axis, keepdims))
  if isinstance(ord, str):
    raise ValueError(f"norm: invalid order {ord!r} for vectors")
  if ord == np.inf:
    return max(abs(x), axis, keepdims)
  if ord == -np.inf:
    return min(abs(x), axis, keepdims)
  if ord == 0:
    return sum(P.convert(not_equal(x, 0), aval_of(x).dtype), axis, keepdims)
  if ord == 1:
    return sum(abs(x), axis, keepdims)
  return power(sum(power(abs(x), float(ord)), axis, keepdims), 1.0 / float(ord))


def _matrix_norm(x, ord, axes, keepdims):
  row, col = axes
  if ord is None or ord == "fro":
    return sqrt(sum(multiply(x, x), axes, keepdims))
  if ord in (2, -2, "nuc"):  # the largest, smallest or summed singular values
    rest = [d for d in range(aval_of(x).ndim) if d not in axes]
    s = _svd_parts(transpose(x, rest + [row, col]))[1]
    out = {2: max, -2: min, "nuc": sum}[ord](s, -1)
    if not keepdims:
      return out
    for axis in sorted(axes):
      out = expand_dims(out, axis)
    return out
  if ord not in (1, -1, np.inf, -np.inf):
    raise ValueError(f"norm: invalid order {ord!r} for matrices")
  # 1: the largest column sum of |x|; inf: the largest row sum; negative: the smallest
  summed, over = (row, col) if ord in (1, -1) else (col, row)
  best = max if ord > 0 else min
  out = best(sum(abs(x), summed, True), over, True)
  return out if keepdims else squeeze(out, axes)


# ---------------------------------------------------------------------------------------
# Linear algebra


@_op
def matmul(x, y, transpose_x=False, transpose_y=False):
  """numpy.matmul: 1-D operands are promoted and squeezed; leading dims broadcast.
  Paddle's `transpose_x=` / `transpose_y=` swap the last two dims of an operand (of
  rank at least 2) first."""
  a, b = _promote_list([x, y])
  if aval_of(a).dtype == "bool":  # numpy: an or of ands
    return not_equal(matmul(astype(a, "int64"), astype(b, "int64"), transpose_x, transpose_y), 0)
  a = moveaxis(a, -1, -2) if transpose_x and aval_of(a).ndim >= 2 else a
  b = moveaxis(b, -1, -2) if transpose_y and aval_of(b).ndim >= 2 else b
  sa, sb = aval_of(a).shape, aval_of(b).shape
  if not sa or not sb:
    raise ShapeError(f"matmul does not accept 0-d operands: {sa} @ {sb}")
  va, vb = len(sa) == 1, len(sb) == 1
  kb = sb[0] if vb else sb[-2]
  if sa[-1] != kb:
    raise ShapeError(f"contracting dimension mismatch: {sa} @ {sb} ({sa[-1]} != {kb})")
  if (va or vb) and len(sa) <= 2 and len(sb) <= 2:
    # vector forms contract directly: no unit dimension enters the program
    return P.dot_general(a, b, (((len(sa) - 1,), (0,)), ((), ())))
  a2 = reshape(a, (1,) + sa) if va else a
  b2 = reshape(b, sb + (1,)) if vb else b
  sa2, sb2 = aval_of(a2).shape, aval_of(b2).shape
  batch = broadcast_shapes(sa2[:-2], sb2[:-2])
  nb = len(batch)
  if nb:
    a2 = broadcast_to(a2, batch + sa2[-2:])
    b2 = broadcast_to(b2, batch + sb2[-2:])
  bd = tuple(range(nb))
  out = P.dot_general(a2, b2, (((nb + 1,), (nb,)), (bd, bd)))
  out_shape = batch + (() if va else (sa2[-2],)) + (() if vb else (sb2[-1],))
  return reshape(out, out_shape)


@_op
def dot(a, b):
  """numpy.dot for vectors and matrices (and scalars: multiply)."""
  sa, sb = aval_of(_as_array(a)).shape, aval_of(_as_array(b)).shape
  if not sa or not sb:
    return multiply(a, b)
  if len(sa) <= 2 and len(sb) <= 2:
    return matmul(a, b)
  a, b = _promote_list([a, b])  # a's last axis with b's second-to-last (or only) axis
  return P.dot_general(a, b, (((len(sa) - 1,), (builtins.max(len(sb) - 2, 0),)), ((), ())))


@_op
def einsum(subscripts, *operands, optimize="greedy"):
  """numpy.einsum with a subscripts string (explicit or implicit output, ellipses,
  repeated indices), or numpy's interleaved form `einsum(a, [0, 1], b, [1, 2], [0, 2])`
  (ints for indices, `...` for an ellipsis); the contraction order is opt_einsum's
  (`optimize`: its strategy)."""
  if not isinstance(subscripts, str):
    subscripts, operands = _sublists_to_subscripts((subscripts, *operands))
  return contraction.einsum(subscripts, *_promote_list(operands), optimize=optimize)


def _sublists_to_subscripts(args) -> tuple[str, list]:
  """numpy.einsum's (operand, sublist, ..., [output sublist]) as (subscripts, operands)."""

  def letters(sublist):
    return "".join("..." if i is Ellipsis else _EINSUM_LETTERS[operator.index(i)] for i in sublist)

  pairs, out = (args[:-1], args[-1]) if len(args) % 2 else (args, None)
  operands, terms = list(pairs[0::2]), [letters(sub) for sub in pairs[1::2]]
  return ",".join(terms) + ("" if out is None else "->" + letters(out)), operands


_EINSUM_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@_op
def tensordot(a, b, axes=2):
  return contraction.tensordot(*_promote_list([a, b]), axes)


@_op
def inner(a, b):
  a, b = _promote_list([a, b])
  if aval_of(a).dtype == "bool":  # numpy: an or of ands
    return not_equal(inner(astype(a, "int64"), astype(b, "int64")), 0)
  if not aval_of(a).ndim or not aval_of(b).ndim:
    return multiply(a, b)
  return contraction.tensordot(a, b, ([-1], [-1]))


@_op
def kron(a, b):
  return contraction.kron(*_promote_list([a, b]))


@_op
def outer(a, b):
  return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


# ---------------------------------------------------------------------------------------
# Neural-network ops (Paddle / MindSpore names)


@_op
def logsumexp(x, axis=None, keepdims=False):
  x = _float(x)
  a = aval_of(x)
  axes = _axes(axis, a.ndim)
  m = stop_gradient(max(x, axes, keepdims=True))
  m = where(less(abs(m), inf), m, 0.0)  # all -inf (or inf) slices: no shift
  out = add(log(sum(exp(subtract(x, m)), axes, keepdims=True)), m)
  return out if keepdims else reshape(out, [n for i, n in enumerate(a.shape) if i not in axes])


@_op
def softmax(x, axis=-1):
  x = _float(x)
  z = exp(subtract(x, stop_gradient(max(x, axis, keepdims=True))))
  return divide(z, sum(z, axis, keepdims=True))


@_op
def log_softmax(x, axis=-1):
  return subtract(x, logsumexp(x, axis, keepdims=True))


def _reduce_loss(loss, reduction):
  if reduction == "mean":
    return mean(loss)
  if reduction == "sum":
    return sum(loss)
  if reduction == "none":
    return loss
  raise PrimcError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


@_op
def binary_cross_entropy_with_logits(
  logits, labels, weight=None, pos_weight=None, reduction="mean"
):
  """Sigmoid + binary cross entropy, stable for large |logits| (MindSpore/Paddle signature):
  `-w * (pos_weight * y * log σ(x) + (1 - y) * log(1 - σ(x)))`."""
  x = _float(logits)
  y = asarray(labels, aval_of(x).dtype)
  log_sig = negative(softplus(negative(x)))  # log σ(x)
  log_one_minus = negative(softplus(x))  # log(1 - σ(x))
  pos = multiply(y, log_sig) if pos_weight is None else multiply(multiply(pos_weight, y), log_sig)
  loss = negative(add(pos, multiply(subtract(1.0, y), log_one_minus)))
  if weight is not None:
    loss = multiply(loss, weight)
  return _reduce_loss(loss, reduction)


@_op
def softplus(x):
  """log(1 + exp(x)), computed stably as max(x, 0) + log1p(exp(-|x|))."""
  x = _float(x)
  return add(maximum(x, 0.0), log1p(exp(negative(abs(x)))))


@_op
def cross_entropy(logits, labels, axis=-1, soft_label=False, reduction="mean"):
  """Softmax cross entropy. Integer labels are class indices along `axis`
  (shape of logits without `axis`); `soft_label=True` takes probabilities."""
  logits = _float(logits)
  lsm = log_softmax(logits, axis)
  a = aval_of(logits)
  axis = axis % a.ndim
  labels = _as_array(labels)
  if soft_label:
    loss = negative(sum(multiply(labels, lsm), axis))
  else:
    la = aval_of(labels)
    if la.dtype not in ("int32", "int64"):
      raise PrimcError(
        f"cross_entropy: hard labels must be integers, got {la.dtype} "
        f"(pass soft_label=True for probabilities)"
      )
    if la.shape == a.shape[:axis] + (1,) + a.shape[axis + 1 :]:
      labels = reshape(labels, a.shape[:axis] + a.shape[axis + 1 :])
    expected = a.shape[:axis] + a.shape[axis + 1 :]
    if aval_of(labels).shape != expected:
      raise ShapeError(
        f"labels shape {la.shape} does not match logits {a.shape} (expected {expected})"
      )
    onehot = P.eq(
      P.broadcast_in_dim(labels, a.shape, [i for i in range(a.ndim) if i != axis]),
      P.iota(a.shape, axis, aval_of(labels).dtype),
    )
    loss = negative(sum(where(onehot, lsm, 0.0), axis))
  return _reduce_loss(loss, reduction)


@_op
def mse_loss(x, y, reduction="mean"):
  d = subtract(x, y)
  return _reduce_loss(multiply(d, d), reduction)


# ---------------------------------------------------------------------------------------
# Operators and methods of traced arrays


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
_FRONT_END_CLASSES: tuple[type, ...] = ()  # register_front_end's classes


def _deferring(method):
  """A Tracer's arithmetic operator that leaves a front end's value (an eager tensor: a
  layer's parameter inside jit) to that value's reflected operator, which hands the
  operation to its front end."""

  @functools.wraps(method)
  def binary(self, *rest):
    if _FRONT_END_CLASSES and rest and isinstance(rest[0], _FRONT_END_CLASSES):
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
  space = (
    globals()
    if module.count(".") != 1
    else {"numpy.linalg": linalg.__dict__, "numpy.fft": fft.__dict__}.get(module, {})
  )
  return space.get(_numpy_name(func))


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
    or getattr(ours, "__module__", None) != __name__
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


# ---------------------------------------------------------------------------------------
# Front ends: eager tensors and static program variables register their classes here, so
# that every op takes them (and their operators, methods and numpy's own functions work).

_front_ends: list[tuple[type, Callable]] = []  # (class, apply(op, args, kwargs))
_front_end_values: dict[type, Callable | None] = {}  # class -> value(x), or None


def front_end_apply(cls: type) -> Callable:
  """The front end's `apply(op, args, kwargs)` (`register_front_end`)."""
  return next(apply for c, apply in _front_ends if c is cls)


def front_end_value(cls: type) -> Callable | None:
  """How to read a `cls` value's numpy value now (None: the front end has no values yet,
  as static programs' variables)."""
  return _front_end_values.get(cls)


def _mentions(args, kwargs, cls) -> bool:
  """Whether an argument, or an element of a list or tuple argument, is a `cls`."""
  for a in (*args, *kwargs.values()):
    if isinstance(a, cls) or (
      isinstance(a, (list, tuple)) and builtins.any(isinstance(b, cls) for b in a)
    ):
      return True
  return False


def on_front_ends(fn, args, kwargs):
  """fn(*args, **kwargs), handed to a front end (the eager tape, static programs) when an
  argument is one of its values."""
  for cls, apply in _front_ends:
    if _mentions(args, kwargs, cls):
      return apply(fn, args, kwargs)
  return fn(*args, **kwargs)


def front_end_of(args, kwargs) -> type | None:
  """The front end class of a value anywhere among the arguments (in pytrees too)."""
  leaves = tree_flatten((list(args), kwargs))[0]
  for cls, _ in _front_ends:
    if builtins.any(isinstance(x, cls) for x in leaves):
      return cls
  return None


def takes_front_ends(fn):
  """`fn` (a function of primc.scipy, primc.lax) handing a call with a front end's value
  anywhere among its arguments to that front end, as primc.numpy's ops do (without their
  numpy twin: a numpy function of the same name may mean another thing)."""

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    cls = front_end_of(args, kwargs) if _front_ends else None
    return fn(*args, **kwargs) if cls is None else front_end_apply(cls)(fn, args, kwargs)

  wrapped._takes_front_ends = True
  _LIBRARY_OPS.add(fn)
  return wrapped


# The functions `takes_front_ends` hands to front ends: library ops (primc.lax's, primc.scipy's),
# which live as long as the process and read no state, as primc.numpy's own ops do
_LIBRARY_OPS: set = set()


def wrap_public_functions(namespace: dict, module: str) -> None:
  """`takes_front_ends` on each public function of `namespace` (a module's globals) that
  does not take them yet."""
  for name, value in list(namespace.items()):
    if (
      not name.startswith("_")
      and inspect.isfunction(value)
      and not getattr(value, "_takes_front_ends", False)
    ):
      namespace[name] = takes_front_ends(value)


# A call on plain values (arrays of primc's dtypes and numbers, and lists or tuples of
# them: no traced value, no front end's) outside a trace runs numpy's function of the same
# name (inside one, the op is staged: `eye`'s iotas compile to index arithmetic, where its
# values would be a constant loaded from memory): on those,
# primc's ops compute what numpy computes (tests hold them to numpy in every path), and
# numpy's own function costs 1-5 us where the op, bound primitive by primitive, costs
# 20-2000 us. primc's path runs instead where the two differ: the names whose primc
# semantics differ (`_OWN_SEMANTICS`: creation functions default to float32), a call numpy
# refuses (a Paddle keyword, an error: primc's path names the op in its own words), one
# with `out=` (primc writes no argument), and a result primc would not give (a dtype it
# lacks; float16 from non-float16 operands, where primc's floats of bools are float64).
# numpy's scalars come back as numpy's scalars (a float64 is a Python float: matplotlib's
# `alpha=`, `f"{x:.3f}"` take it), as numpy and autograd return them; numpy's warnings
# (a log of 0) are numpy's.
_OWN_SEMANTICS = frozenset({"zeros", "ones", "full", "eye", "array"})
_PLAIN_TYPES = frozenset(
  {int, float, bool, complex, str, type(None), type, builtins.slice, type(Ellipsis)}
)
_NATIVE = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)
_HALF = np.dtype(np.float16)
_WHOLE = _NATIVE - {_HALF}  # (float16 results need `_numpy_result`'s check)
_NUMBERS = frozenset({float, int, bool})


_KEYWORD_TYPES = frozenset({int, bool, float, str, type(None), type})


def _plain_items(items) -> bool:
  """Whether a list or tuple holds only numbers and arrays of primc's dtypes (not float16),
  at any depth (`_plain`; the common items inline)."""
  for y in items:
    t = type(y)
    if not (t is int or t is float or (t is np.ndarray and y.dtype in _WHOLE)):
      return _plain(items) == 1
  return True


def _plain_keywords(kwargs: dict) -> bool:
  """Whether keywords are plain settings (`axis=0`, `keepdims=True`, `dtype=`, axes as
  tuples), not `out=` (which primc never writes) nor values."""
  if "out" in kwargs:
    return False
  for v in kwargs.values():
    t = type(v)
    if t not in _KEYWORD_TYPES and not (t is tuple and _plain(v) == 1) and t is not np.dtype:
      return False
  return True


def _plain(x) -> int:
  """0 when `x` holds a traced value, a front end's value or an array of a dtype primc
  lacks; else 1, or 2 when it holds a float16 array."""
  t = type(x)
  if t is np.ndarray:  # (numpy's dtypes of native order are singletons: `is`)
    return 0 if x.dtype not in _NATIVE else 2 if x.dtype is _HALF else 1
  if t in _PLAIN_TYPES:
    return 1
  if t is tuple or t is list:
    kinds = [_plain(y) for y in x]
    return 0 if 0 in kinds else builtins.max(kinds, default=1)
  return 1 if isinstance(x, (np.generic, np.dtype)) else 0


def _numpy_result(out, half: bool):
  """numpy's result as numpy gives it (a scalar as numpy's scalar: a float64 is a Python
  float, which plotting and formatting code takes, as numpy and autograd give it), or
  None where primc's would differ."""
  t = type(out)
  if t is np.ndarray or isinstance(out, np.generic):
    return out if out.dtype in _NATIVE and (half or out.dtype is not _HALF) else None
  if t is tuple or t is list:
    parts = [_numpy_result(o, half) for o in out]
    return None if builtins.any(p is None for p in parts) else t(parts)
  return None


def _concrete(twin, args, kwargs, half):
  """While tracing: numpy's result on Python values alone (no array among the
  arguments) when it is one number (`prod(x.shape[1:])`: shapes are static, so sizes
  computed from them are Python's, as in numpy), else None (the op is staged)."""
  if builtins.any(_has_array(a) for a in (*args, *kwargs.values())):
    return None
  out = _numpy_result(twin(*args, **kwargs), half)
  return (
    out if out is not None and np.ndim(out) == 0 and not isinstance(out, (list, tuple)) else None
  )


def _has_array(x) -> bool:
  if isinstance(x, (np.ndarray, np.generic)):
    return True
  return (type(x) is tuple or type(x) is list) and builtins.any(_has_array(y) for y in x)


def _numpy_twin(name: str):
  """numpy's function of that name, where it runs calls on plain values (else None)."""
  twin = getattr(np, name, None)
  return twin if callable(twin) and name not in _OWN_SEMANTICS else None


def _front_end_aware(fn):
  """`fn` that runs numpy's twin on plain values, and hands a call on a front end's values
  to that front end."""
  twin = _numpy_twin(fn.__name__)

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    if twin is not None and not trace_state.builders and (not kwargs or _plain_keywords(kwargs)):
      for a in args:  # the common case: arrays and Python numbers (kept short: every call)
        t = type(a)
        if t is np.ndarray:
          if a.dtype in _WHOLE:
            continue
          break
        if t not in _NUMBERS and ((t is not tuple and t is not list) or not _plain_items(a)):
          break
      else:
        try:
          out = twin(*args, **kwargs)
        except Exception:  # primc's path says what is wrong in its own words
          return _by_primc(args, kwargs)
        if (type(out) is np.ndarray or isinstance(out, np.generic)) and out.dtype in _WHOLE:
          return out
    elif (
      args
      and type(args[0]) is Tracer
      and (trace_state.user_ops or not _mentions(args, kwargs, _FRONT_END_CLASSES))
    ):  # a traced value (an op's own call: no front end's value among its arguments)
      out = fn(*args, **kwargs)
      return out if same_object else _apart(out, args, kwargs, twin)
    return _general(args, kwargs)

  def _general(args, kwargs):
    if twin is not None and "out" not in kwargs:
      half = False
      for a in (*args, *kwargs.values()) if kwargs else args:  # every call: kept short
        t = type(a)
        if t is np.ndarray and a.dtype in _NATIVE and a.dtype is not _HALF:
          continue  # the common case, inline
        if t not in _PLAIN_TYPES:
          k = _plain(a)
          if not k:
            break
          half = half or k == 2
      else:
        try:  # (staged while tracing: an iota's structure compiles, its values would not;
          # but a number computed from Python values, a size from a shape, stays a number)
          out = (
            _numpy_result(twin(*args, **kwargs), half)
            if not tracing()
            else (_concrete(twin, args, kwargs, half))
          )
        except Exception:  # primc's path says what is wrong in its own words
          out = None
        if out is not None:
          return out
    return _by_primc(args, kwargs)

  def _by_primc(args, kwargs):
    out = on_front_ends(fn, args, kwargs)
    return out if same_object else _apart(out, args, kwargs, twin)

  same_object = fn.__name__ in _SAME_OBJECT
  wrapped.__wrapped_op__ = fn
  wrapped._takes_front_ends = True
  return wrapped


def register_front_end(
  cls: type, apply: Callable, fallback: Callable, value: Callable | None = None
) -> None:
  """Makes every op of this module take `cls` values: a call given one runs as
  `apply(op, args, kwargs)`; `cls` gets the operators and methods of traced arrays; numpy's
  own functions and ufuncs on its values run the op of the same name, else
  `fallback(func, args, kwargs)`. `value(x)`: the numpy value of one, where the front end
  has values as it goes (the eager tape: primc.lax's control flow then runs as Python's)."""
  global _FRONT_END_CLASSES
  _front_ends.append((cls, apply))
  _FRONT_END_CLASSES += (cls,)
  _front_end_values[cls] = value
  g = globals()
  for name, fn in _TRACER_METHODS.items():
    if isinstance(fn, property):
      setattr(cls, name, property(lambda self: g["transpose"](self)))
    else:
      op = _front_end_aware(fn)
      setattr(cls, name, (lambda op: lambda self, *a, **k: op(self, *a, **k))(op))
  cls.at = property(_At)  # functional updates, recorded as the op `index_update`
  cls.__array_ufunc__ = lambda self, ufunc, method, *args, **kwargs: _numpy_dispatch(
    ufunc, method, args, kwargs, lambda: fallback(getattr(ufunc, method), args, kwargs)
  )
  cls.__array_function__ = lambda self, func, types, args, kwargs: _numpy_dispatch(
    func, "__call__", args, kwargs, lambda: fallback(func, args, kwargs)
  )
  cls.__hash__ = object.__hash__


def refuse_numpy(what: str) -> Callable:
  """A `register_front_end` fallback that refuses numpy functions primc does not have."""
  return lambda func, args, kwargs: _refuse(func, "__call__", what)


def _wrap_ops():
  g = globals()
  skip = {
    "asarray",
    "broadcast_shapes",
    "register_front_end",
    "refuse_numpy",
    "operator_index",
    "on_front_ends",
    "front_end_of",
    "takes_front_ends",
    "front_end_value",
    "front_end_apply",
    "wrap_public_functions",
    "shape",
    "size",
    "ndim",
    "result_type",
    "ascontiguousarray",
    "linspace",
    "arange",
    "empty",
    "empty_like",
    "identity",
    "tri",
    "logspace",
    "geomspace",
    "triu_indices_from",
    "tril_indices_from",
    "diag_indices_from",
    "isrealobj",
    "iscomplexobj",
    "isscalar",
  }
  for name, value in list(g.items()):
    if (
      callable(value)
      and not name.startswith("_")
      and name not in skip
      and getattr(value, "__module__", None) == __name__
      and not isinstance(value, type)
    ):
      g[name] = _front_end_aware(value)


# ---------------------------------------------------------------------------------------
# More of numpy's array functions, composed of primitives: their derivatives (any order),
# batching and compiled code come from those of the primitives.


def _pad_axis(x, axis, before, after):
  return P.pad(x, [(before, after, 0) if d == axis else (0, 0, 0) for d in range(aval_of(x).ndim)])


def _one_axis(axis, ndim):
  return _axes(axis, ndim)[0]


@_op
def ravel(a, order="C"):
  return reshape(a, (-1,), order=order)


flatten = ravel


@_op
def flip(m, axis=None):
  m = _as_array(m)
  axes = _axes(axis, aval_of(m).ndim)
  return P.rev(m, axes) if axes else m


def flipud(m):
  return flip(m, 0)


def fliplr(m):
  return flip(m, 1)


@_op
def rot90(m, k=1, axes=(0, 1)):
  m = _as_array(m)
  nd = aval_of(m).ndim
  a0, a1 = (a % nd for a in axes)
  if a0 == a1 or nd < 2:
    raise ShapeError(f"rot90 needs two different axes of an array of rank >= 2, got {axes}")
  perm = list(range(nd))
  perm[a0], perm[a1] = perm[a1], perm[a0]
  k %= 4
  if k == 0:
    return m
  if k == 2:
    return flip(m, (a0, a1))
  return transpose(flip(m, a1), perm) if k == 1 else flip(transpose(m, perm), a1)


@_op
def roll(a, shift, axis=None):
  a = _as_array(a)
  if axis is None:
    return reshape(roll(ravel(a), shift, 0), aval_of(a).shape)
  shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  if len(shifts) != len(axes):
    shifts = shifts * len(axes) if len(shifts) == 1 else shifts
  if len(shifts) != len(axes):
    raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
  for s, ax in zip(shifts, axes):
    ax = _one_axis(ax, aval_of(a).ndim)
    n = aval_of(a).shape[ax]
    s = int(s) % n if n else 0
    if s:
      a = P.concatenate([_slice_axis(a, ax, n - s, n), _slice_axis(a, ax, 0, n - s)], ax)
  return a


_INDEX_PAD_MODES = ("edge", "reflect", "symmetric", "wrap")


@_op
def pad(array, pad_width, mode="constant", constant_values=0):
  """numpy.pad with mode "constant" (a scalar constant), or one of the modes that repeat
  the array's own elements ("edge", "reflect", "symmetric", "wrap", any width): each axis
  gathered at the positions numpy's pad of its indices gives."""
  x = _as_array(array)
  if mode in _INDEX_PAD_MODES:
    nd = aval_of(x).ndim
    widths = np.broadcast_to(np.asarray(pad_width, np.int64), (nd, 2))
    for axis, (before, after) in enumerate(widths):
      n = aval_of(x).shape[axis]
      if before or after:
        if n == 0:
          raise ShapeError(f"pad with mode={mode!r} of an empty axis {axis}")
        x = take(x, np.pad(np.arange(n), (int(before), int(after)), mode=mode), axis=axis)
    return x
  if mode != "constant":
    raise NotSupportedError(
      f"pad with mode={mode!r} is not supported (modes 'constant', "
      f"{', '.join(map(repr, _INDEX_PAD_MODES))} are)"
    )
  if np.ndim(constant_values) != 0:
    raise NotSupportedError("pad with per-axis constant_values is not supported (a scalar is)")
  nd = aval_of(x).ndim
  widths = np.broadcast_to(np.asarray(pad_width, np.int64), (nd, 2))
  if (widths < 0).any():
    raise ShapeError(f"pad widths must be non-negative, got {pad_width}")
  config = [(int(b), int(e), 0) for b, e in widths]
  out = P.pad(x, config)
  if constant_values != 0:
    border = P.sub(
      P.scalar_like(1, out), P.pad(P.full(aval_of(x).shape, 1, aval_of(x).dtype), config)
    )
    out = add(out, multiply(border, constant_values))
  return out


@_op
def tile(A, reps):
  A = _as_array(A)
  reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
  shape = aval_of(A).shape
  nd = builtins.max(len(shape), len(reps))
  shape = (1,) * (nd - len(shape)) + shape
  reps = (1,) * (nd - len(reps)) + reps
  A = reshape(A, shape)
  spread = [d for r, n in zip(reps, shape) for d in (r, n)]
  wide = P.broadcast_in_dim(A, spread, tuple(range(1, 2 * nd, 2)))
  return reshape(wide, [r * n for r, n in zip(reps, shape)])


@_op
def repeat(a, repeats, axis=None):
  a = _as_array(a)
  if not isinstance(repeats, (int, np.integer)):
    raise NotSupportedError("repeat with an array of repeats is not supported (an int is)")
  if axis is None:
    a, axis = ravel(a), 0
  shape = aval_of(a).shape
  axis = _one_axis(axis, len(shape))
  spread = list(shape[: axis + 1]) + [int(repeats)] + list(shape[axis + 1 :])
  dims = tuple(d if d <= axis else d + 1 for d in range(len(shape)))
  wide = P.broadcast_in_dim(a, spread, dims)
  return reshape(wide, shape[:axis] + (shape[axis] * int(repeats),) + shape[axis + 1 :])


def _triangle(m, k, lower: bool):
  m = _as_array(m)
  shape = aval_of(m).shape
  if len(shape) < 2:
    raise ShapeError(f"{'tril' if lower else 'triu'} needs an array of rank >= 2, got {shape}")
  rows, cols = P.iota(shape, len(shape) - 2), P.iota(shape, len(shape) - 1)
  keep = (less_equal if lower else greater_equal)(subtract(cols, rows), int(k))
  return where(keep, m, zeros_like(m))


@_op
def tril(m, k=0):
  return _triangle(m, k, lower=True)


@_op
def triu(m, k=0):
  return _triangle(m, k, lower=False)


@_op
def diagonal(a, offset=0, axis1=0, axis2=1):
  """The diagonal (offset k: above for k > 0) of the matrices on axes axis1, axis2, as a
  last axis (numpy's)."""
  a = _as_array(a)
  shape = aval_of(a).shape
  if len(shape) < 2:
    raise ShapeError(f"diagonal needs at least 2 dimensions, got shape {shape}")
  if aval_of(a).dtype == "bool":  # (taken by sums of products: of its integer values)
    return not_equal(diagonal(astype(a, "int32"), offset, axis1, axis2), 0)
  if len(shape) != 2 or (axis1 % 2, axis2 % 2) != (0, 1):
    return _diagonal(moveaxis(a, (axis1, axis2), (-2, -1)), offset)
  n, m = shape
  k = int(offset)
  length = builtins.max(0, builtins.min(n, m - k) if k >= 0 else builtins.min(n + k, m))
  i = np.arange(length)
  flat = (i * m + i + k) if k >= 0 else ((i - k) * m + i)
  return take(ravel(a), flat.astype(np.int32))


@_op
def make_diagonal(D, offset=0, axis1=-1, axis2=-2):
  """autograd's (not numpy's) complement of `diagonal`: arrays whose last two axes hold
  D's last axis on their diagonal (autograd's only supported form: offset 0, axes -1, -2)."""
  if int(offset) != 0 or {axis1, axis2} != {-1, -2}:
    raise NotSupportedError(
      "make_diagonal with offset != 0 or axes other than (-1, -2) (autograd's supported form)"
    )
  D = _as_array(D)
  n = aval_of(D).shape[-1]
  return expand_dims(D, -1) * eye(n, dtype=aval_of(D).dtype)


@_op
def diag(v, k=0):
  """A 1-D array's diagonal matrix (k: which diagonal), or a matrix's diagonal."""
  v = _as_array(v)
  shape = aval_of(v).shape
  if len(shape) == 2:
    return diagonal(v, k)
  if len(shape) != 1:
    raise ShapeError(f"diag needs a 1-D or 2-D array, got shape {shape}")
  k = int(k)
  size = shape[0] + builtins.abs(k)
  padded = P.pad(v, [(0, builtins.abs(k), 0)])
  along = 0 if k >= 0 else 1  # row r holds v[r] (k >= 0); column c holds v[c] (k < 0)
  values = P.broadcast_in_dim(padded, (size, size), (along,))
  rows, cols = P.iota((size, size), 0), P.iota((size, size), 1)
  return where(equal(subtract(cols, rows), k), values, zeros_like(values))


@_op
def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
  out = sum(diagonal(a, offset, axis1, axis2), -1)
  return out if dtype is None else astype(out, dtype)


def _atleast(a, nd):
  a = _as_array(a)
  shape = aval_of(a).shape
  if len(shape) >= nd:
    return a
  return reshape(a, (1,) * (nd - len(shape)) + shape)  # numpy's atleast_1d/2d


@_op
def vstack(tup):
  return concatenate([_atleast(a, 2) for a in tup], 0)


row_stack = vstack


@_op
def hstack(tup):
  arrays = [_atleast(a, 1) for a in tup]
  return concatenate(arrays, 0 if aval_of(arrays[0]).ndim == 1 else 1)


@_op
def column_stack(tup):
  cols = []
  for a in tup:
    a = _as_array(a)
    cols.append(reshape(a, (aval_of(a).shape[0], 1)) if aval_of(a).ndim == 1 else _atleast(a, 2))
  return concatenate(cols, 1)


@_op
def append(arr, values, axis=None):
  if axis is None:
    return concatenate([ravel(arr), ravel(values)], 0)
  return concatenate([arr, values], axis)


@_op
def diff(a, n=1, axis=-1, prepend=None, append=None):
  """numpy's `diff`; `prepend`/`append` (a scalar spread over the axis, or an array) are
  joined to `a` along `axis` first, with numpy's promotion (None: nothing joined)."""
  a = _as_array(a)
  if int(n) < 0:
    raise PrimcError(f"diff: order must be non-negative but got {n}")
  axis = _one_axis(axis, aval_of(a).ndim)
  if int(n) == 0:  # (numpy's: `a` itself, nothing joined)
    return a
  if prepend is not None or append is not None:

    def edge(v):
      v = _as_array(v)
      if aval_of(v).ndim == 0:
        shape = list(aval_of(a).shape)
        shape[axis] = 1
        v = broadcast_to(v, tuple(shape))
      return v

    a = concatenate(
      [
        *([edge(prepend)] if prepend is not None else []),
        a,
        *([edge(append)] if append is not None else []),
      ],
      axis=axis,
    )
  for _ in range(int(n)):
    m = aval_of(a).shape[axis]
    a = (not_equal if aval_of(a).dtype == "bool" else subtract)(  # (numpy's, of bools)
      _slice_axis(a, axis, builtins.min(1, m), m), _slice_axis(a, axis, 0, builtins.max(0, m - 1))
    )
  return a


def _scan_input(a, axis, dtype):
  a = _accumulated(a, dtype)
  if axis is None:
    return ravel(a), 0
  return a, _one_axis(axis, aval_of(a).ndim)


@_op
def cumsum(a, axis=None, dtype=None):
  """numpy.cumsum: left to right, as numpy adds (`cumsum` primitive)."""
  return _accumulate_along(P.cumsum, *_scan_input(a, axis, dtype))


@_op
def cumprod(a, axis=None, dtype=None):
  """numpy.cumprod: left to right, as numpy multiplies (an overflow or underflow on the
  way gives numpy's inf, 0 or NaN, as `prod` does)."""
  return _accumulate_along(P.cumprod, *_scan_input(a, axis, dtype))


def _accumulate_along(prim_fn, a, axis):
  """`prim_fn` (along the last axis) applied along `axis`."""
  last = aval_of(a).ndim - 1
  if axis == last:
    return prim_fn(a)
  return moveaxis(prim_fn(moveaxis(a, axis, last)), last, axis)


@_op
def prod(a, axis=None, keepdims=False, dtype=None, initial=None, where=None):
  """numpy.prod: left to right, as numpy multiplies (an overflow or underflow on the way
  gives numpy's inf, 0 or NaN); integers and bools multiplied in int64, as numpy. `where`
  (a mask broadcast against a) leaves entries out; `initial` is the first factor."""
  a = _accumulated(a, dtype)
  if where is not None:
    a = _masked(a, where, 1)
  shape = aval_of(a).shape
  axes = _axes(axis, len(shape))
  if initial is None:
    out = P.reduce_prod(a, axes)
  else:  # numpy starts from `initial`: it goes first along the reduced elements
    flat, _ = P.axes_last(a, shape, axes)
    rows = list(aval_of(flat).shape[:-1])
    first = P.full(rows + [1], initial, aval_of(a).dtype)
    out = P.reduce_prod(P.concatenate([first, flat], len(rows)), (len(rows),))
  return _keep(out, shape, axes) if keepdims else out


@_op
def std(
  a, axis=None, ddof=0, keepdims=False, *, dtype=None, where=None, mean=None, correction=None
):
  """numpy.std (the keywords as `var`'s). Over single elements (ddof=0) it is the
  constant 0, derivatives 0 too (as autograd; sqrt's derivative at a zero variance would
  be 0/0 elsewhere)."""
  ddof = _correction(ddof, correction)
  v = var(a, axis, keepdims, ddof=ddof, dtype=dtype, where=where, mean=mean)
  shape = aval_of(_as_array(a)).shape
  if not ddof and where is None and builtins.all(shape[i] == 1 for i in _axes(axis, len(shape))):
    return multiply(stop_gradient(v), 0)
  return sqrt(v)


def _arg_extreme(a, axis, reduce_fn):
  a = _as_array(a)
  if axis is None:
    a, axis = ravel(a), 0
  shape = aval_of(a).shape
  axis = _one_axis(axis, len(shape))
  n = shape[axis]
  if n == 0:
    raise ShapeError(
      f"attempt to get the arg{'max' if reduce_fn is max else 'min'} of an empty sequence"
    )
  best = reduce_fn(a, axis, keepdims=True)
  hit = equal(a, best)
  if aval_of(a).is_float:  # a NaN is the extreme (numpy): the first NaN wins
    hit = where(not_equal(best, best), not_equal(a, a), hit)
  rank_from_end = subtract(n - 1, P.iota(shape, axis, "int64"))
  first = P.reduce_max(where(hit, rank_from_end, P.full(shape, -1, "int64")), (axis,))
  return subtract(n - 1, first)


@_op
def argmax(a, axis=None, keepdims=False):
  out = _arg_extreme(a, axis, max)
  return _keep_arg(out, a, axis) if keepdims else out


def _keep_arg(out, a, axis):
  """An arg-reduction's result with its axis kept (all axes, of length 1, when None)."""
  ndim = aval_of(_as_array(a)).ndim
  if axis is None:
    return reshape(out, (1,) * ndim)
  return expand_dims(out, int(axis) % ndim)


@_op
def argmin(a, axis=None, keepdims=False):
  out = _arg_extreme(a, axis, min)
  return _keep_arg(out, a, axis) if keepdims else out


def _last_axis(a, axis):
  a = _as_array(a)
  if axis is None or aval_of(a).ndim == 0:
    return ravel(a), 0
  return a, _one_axis(axis, aval_of(a).ndim)


@_op
def argsort(a, axis=-1, kind=None, stable=None):
  """The indices that sort `a` along `axis` (stable whatever `kind` says; NaNs last), as
  numpy's int64."""
  a, axis = _last_axis(a, axis)
  order = P.argsort(moveaxis(a, axis, -1))
  return P.convert(moveaxis(order, -1, axis), "int64")


@_op
def sort(a, axis=-1, kind=None, stable=None):
  """`a` sorted along `axis` (NaNs last): the elements gathered by `argsort`, so the
  gradient flows back through the permutation (to each element from its place)."""
  a, axis = _last_axis(a, axis)
  moved = moveaxis(a, axis, -1)
  nd = aval_of(moved).ndim
  return moveaxis(P.gather(moved, P.argsort(moved), nd - 1, nd - 1), -1, axis)


class _Concatenator:
  """numpy's `r_` (items joined along axis 0) and `c_` (as columns, along the last axis):
  arrays, nested lists, scalars (weak: they take the arrays' dtype, as numpy) and slices
  (`0:3`, `0:1:5j`: numpy's ranges, constants). A leading directive string is not
  supported."""

  def __init__(self, name: str, columns: bool):
    self.name, self.columns = name, columns

  def __getitem__(self, key):
    items = key if isinstance(key, tuple) else (key,)
    if items and isinstance(items[0], str):
      raise NotSupportedError(
        f"{self.name}[{items[0]!r}, ...]: directive strings are not "
        f"supported; use concatenate or stack"
      )
    items = [
      np.r_[it]
      if isinstance(it, builtins.slice)
      else array(it)
      if isinstance(it, (list, tuple))
      else it
      for it in items
    ]
    strong = [aval_of(_as_array(it)).dtype for it in items if not _is_python_scalar(it)]
    dtype = np.result_type(*strong).name if strong else None
    for it in items:
      if _is_python_scalar(it) and dtype is not None:
        dtype = _with_weak(dtype, it)
    arrays = [asarray(it, dtype) for it in items]
    if self.columns:
      arrays = [reshape(a, (-1, 1)) if aval_of(a).ndim < 2 else a for a in arrays]
      return concatenate(arrays, -1)
    return concatenate([_atleast(a, 1) for a in arrays], 0)


r_ = _Concatenator("r_", columns=False)
c_ = _Concatenator("c_", columns=True)


# ---------------------------------------------------------------------------------------
# numpy.linalg (primc.numpy.linalg): primitives over the last two axes, batched over the
# leading ones, with derivative rules of every order (primc/ad.py)


def _linalg_op(fn):
  fn.__name__ = "linalg." + fn.__name__.strip("_")  # errors name linalg.solve, ...
  return _op(fn)


@_linalg_op
def _inv(a):
  return P.inv_p.bind(_float(a))


def _batched_solve(solve, a, b):
  """solve(a, b) for numpy.linalg.solve's operand shapes: b is (..., n, k) with leading axes
  broadcast against a's, or (n,): one vector for every matrix of a (numpy 2)."""
  if aval_of(a).ndim < 2:
    raise ShapeError(f"needs square matrices in the last two axes, got shape {aval_of(a).shape}")
  if aval_of(b).ndim == 1:
    n = aval_of(b).shape[0]
    batch = aval_of(a).shape[:-2]
    col = broadcast_to(reshape(b, (n, 1)), batch + (n, 1))
    return reshape(solve(a, col), batch + (n,))
  batch = broadcast_shapes(aval_of(a).shape[:-2], aval_of(b).shape[:-2])
  a = broadcast_to(a, batch + aval_of(a).shape[-2:])
  b = broadcast_to(b, batch + aval_of(b).shape[-2:])
  return solve(a, b)


@_linalg_op
def _solve(a, b):
  a, b = _promote_list([_float(a), _float(b)])
  return _batched_solve(P.solve_p.bind, a, b)


@_linalg_op
def _det(a):
  return P.det_p.bind(_float(a))


@_linalg_op
def _slogdet(a):
  out = P.slogdet_p.bind(_float(a))
  return getitem(out, (Ellipsis, 0)), getitem(out, (Ellipsis, 1))


def _symmetric(a, uplo="L"):
  """The symmetric matrix LAPACK's symmetric routines see: one triangle of `a`, mirrored
  (the other triangle is not read, and its derivative is zero, as in numpy's values)."""
  if uplo not in ("L", "U"):
    raise ValueError(f"UPLO must be 'L' or 'U', got {uplo!r}")
  a = _float(a)
  half = tril(a) if uplo == "L" else triu(a)
  return add(half, matrix_transpose(tril(a, -1) if uplo == "L" else triu(a, 1)))


EighResult = collections.namedtuple("EighResult", "eigenvalues eigenvectors")
QRResult = collections.namedtuple("QRResult", "Q R")


@_linalg_op
def _cholesky(a, upper=False):
  """The lower factor L (a = L L^T) of a symmetric positive definite matrix, read from its
  lower triangle (numpy); upper=True returns L^T."""
  low = P.cholesky_p.bind(_symmetric(a))
  return matrix_transpose(low) if upper else low


@_linalg_op
def _eigh(a, UPLO="L"):
  """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric matrix read from one
  triangle. Each eigenvector's sign makes its largest-magnitude entry positive (numpy
  leaves the sign to LAPACK); derivatives need distinct eigenvalues."""
  out = P.eigh_p.bind(_symmetric(a, UPLO))
  w, v = _split_at(out, aval_of(out).ndim - 2, [1])  # packed: eigenvalues, then vectors
  return EighResult(squeeze(w, -2), v)


@_linalg_op
def _eigvalsh(a, UPLO="L"):
  return _eigh(a, UPLO).eigenvalues


@_linalg_op
def _qr(a, mode="reduced"):
  """numpy.linalg.qr, modes 'reduced' (Q, R), 'r' (R) and 'complete' where it equals
  'reduced' (rows <= columns). Derivatives need rows >= columns."""
  a = _float(a)
  m, n = aval_of(a).shape[-2:] if aval_of(a).ndim >= 2 else (0, 0)
  if mode not in ("reduced", "r", "complete") or (mode == "complete" and m > n):
    raise NotSupportedError(
      f"linalg.qr mode {mode!r} of a {aval_of(a).shape} array is not "
      f"supported ('reduced', 'r', and 'complete' for rows <= columns)"
    )
  out = P.qr_p.bind(a)
  (_, k), _, axis = P.qr_shapes(m, n)  # packed: Q, then R along `axis`
  q, r = _split_at(out, aval_of(out).ndim + axis, [m if axis == -2 else k])
  return r if mode == "r" else QRResult(q, r)


SVDResult = collections.namedtuple("SVDResult", "U S Vh")


def _svd_parts(a):
  a = _float(a)
  shape = aval_of(a).shape
  if len(shape) < 2:
    raise ShapeError(f"needs matrices in the last two axes, got shape {shape}")
  m = shape[-2]
  out = P.svd_p.bind(a)
  u, s, v = _split_at(out, len(shape) - 2, [m, m + 1])  # packed: U, the values, V
  return u, squeeze(s, -2), v


@_linalg_op
def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
  """numpy.linalg.svd: U, S (descending), Vh, over the leading axes. Each pair of singular
  vectors takes the sign that makes V's column's largest-magnitude entry positive (numpy
  leaves it to LAPACK). full_matrices=True of a non-square matrix (a completed basis, not
  differentiable) raises: pass full_matrices=False. Derivatives need distinct nonzero
  singular values (the singular values alone: distinct is enough where they are simple)."""
  u, s, v = _svd_parts(a)
  if not compute_uv:
    return s
  m, n = aval_of(_as_array(a)).shape[-2:]
  if full_matrices and m != n:
    raise NotSupportedError(
      f"linalg.svd with full_matrices=True of a {m}x{n} matrix (a "
      f"completed basis) is not supported: pass full_matrices=False"
    )
  return SVDResult(u, s, matrix_transpose(v))


@_linalg_op
def _svdvals(x):
  return _svd_parts(x)[1]


@_linalg_op
def _pinv(a, rcond=None, hermitian=False, *, rtol=None):
  """numpy.linalg.pinv: singular values below rcond (or rtol) times the largest are cut;
  the default is numpy's, max(m, n) * eps of the dtype. Its derivative holds where the
  rank does not change."""
  cut = rtol if rtol is not None else rcond
  return P.pinv_p.bind(_float(a), rcond=None if cut is None else float(cut))


@_linalg_op
def _solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False):
  """x with op(a) x = b for a triangular `a` (scipy.linalg.solve_triangular's signature:
  trans 0/'N' op(a) = a, 1/'T' or 2/'C' a^T; only the `lower` or upper triangle is read;
  unit_diagonal: the diagonal is taken as ones). `b` is (..., n) or (..., n, k); leading
  axes broadcast."""
  transpose = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}.get(trans)
  if transpose is None:
    raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
  a, b = _promote_list([_float(a), _float(b)])
  if unit_diagonal:
    shape = aval_of(a).shape
    a = where(P.eq(P.iota(shape, len(shape) - 2), P.iota(shape, len(shape) - 1)), ones_like(a), a)
  solve = lambda a, b: P.triangular_solve_p.bind(a, b, lower=bool(lower), transpose_a=transpose)
  return _batched_solve(solve, a, b)


class _Namespace:
  """A numpy submodule's namespace (`primc.numpy.linalg`, `primc.numpy.fft`): the functions
  primc has; numpy's other names there raise NotSupportedError naming them (`why` says
  why, where there is one reason)."""

  def __init__(self, module: str, why: str = "", reasons=None, **functions):
    self._module, self._why, self._reasons = module, why, reasons or {}
    self.__dict__.update(functions)

  def __getattr__(self, name):
    if name.startswith("__") or not hasattr(getattr(np, self._module), name):
      raise AttributeError(f"module 'primc.numpy.{self._module}' has no attribute {name!r}")
    why = self._reasons.get(name, self._why) or " yet"
    raise NotSupportedError(
      f"primc.numpy.{self._module}.{name} (numpy.{self._module}.{name}) is not supported{why}"
    )


# ---------------------------------------------------------------------------------------
# Functional updates: x.at[idx].set(v) / .add(v) / .multiply(v) (traced arrays are
# immutable). The positions come from numpy's own indexing of an arange, so every constant
# index numpy takes (ints, slices, None, ..., integer and boolean arrays) means what it
# means there, and one out of bounds is numpy's IndexError.


class _At:
  def __init__(self, x):
    self.x = x

  def __getitem__(self, idx):
    return _IndexUpdate(self.x, idx)


class _IndexUpdate:
  """`x.at[idx]`: `.set(v)`, `.add(v)`, `.multiply(v)` return new arrays; `.get()` is
  `x[idx]`."""

  def __init__(self, x, idx):
    self.x, self.idx = x, idx

  def get(self):
    return getitem(self.x, self.idx)

  def set(self, values):
    return index_update(self.x, self.idx, values, "set")

  def add(self, values):
    return index_update(self.x, self.idx, values, "add")

  def multiply(self, values):
    return index_update(self.x, self.idx, values, "multiply")


@_op
def index_update(x, idx, values, how="set"):
  """`x` with `values` set at, added at or multiplied into `x[idx]` (`x.at[idx]`):
  `set` keeps the last value where an index repeats (numpy's assignment), `add`
  accumulates repeats, `multiply` refuses them."""
  x = _as_array(x)
  shape, dtype = aval_of(x).shape, np.dtype(aval_of(x).dtype)
  leaves = idx if isinstance(idx, tuple) else (idx,)
  if builtins.any(isinstance(i, Tracer) for i in leaves):
    raise NotSupportedError(
      "x.at[...] with traced indices is not supported (constant "
      "indices are: ints, slices, integer or boolean arrays)"
    )
  pos = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[idx]
  values = broadcast_to(asarray(values, dtype.name), pos.shape)
  flat = pos.reshape(-1)
  if how == "add":
    return _scatter_flat(x, flat, values)
  if how == "multiply":
    if len(np.unique(flat)) != flat.size:
      raise NotSupportedError("x.at[idx].multiply with a repeated index is not supported")
    return multiply(x, _scatter_flat(P.full(shape, 1, dtype.name), flat, subtract(values, 1)))
  if how != "set":
    raise PrimcError(f"index_update: how must be 'set', 'add' or 'multiply', not {how!r}")
  last = {p: k for k, p in enumerate(flat)}  # position -> its last occurrence
  keep = np.array(sorted(last.values()), np.int64)
  untouched = np.ones(int(np.prod(shape, dtype=np.int64)), bool)
  untouched[flat] = False
  cleared = multiply(x, untouched.reshape(shape).astype(dtype))
  v = reshape(values, (-1,))
  if len(keep) != flat.size:
    v = take(v, keep.astype(np.int32))
  return _scatter_flat(cleared, flat[keep], v)


def _scatter_flat(x, flat, values):
  """x with `values` (in the order of the flat positions) added at those positions."""
  if flat.size == 0:
    return x
  shape = aval_of(x).shape
  out = P.scatter_add(reshape(x, (-1,)), np.asarray(flat, np.int32), reshape(values, (-1,)), 0)
  return reshape(out, shape)


def __getattr__(name: str):
  """A numpy name primc does not have raises an error that names it (not AttributeError's
  bare message), with what exists in its place where there is something."""
  if name.startswith("__") or not hasattr(np, name):
    raise AttributeError(f"module 'primc.numpy' has no attribute {name!r}")
  raise NotSupportedError(
    f"primc.numpy.{name} (numpy.{name}) is not supported yet; the user guide's "
    f"compatibility table (docs/guide/numpy.md) lists what is, and primc.numpy's "
    f"functions can be combined in its place"
  )


class NotSupportedError(PrimcError, AttributeError):
  """A numpy name primc.numpy does not have (an AttributeError too, so `hasattr` and
  `getattr(pnp, name, default)` keep working)."""


# ---------------------------------------------------------------------------------------
# The rest of the numpy names programs use most, composed of the ops above (so their
# derivatives, batching and kernels come with them). Tests: tests/test_numpy.py.


def _nan_mask(x):
  x = _as_array(x)
  if aval_of(x).dtype not in FLOAT_DTYPES:
    return P.full(aval_of(x).shape, False, "bool")
  return P.ne_p.bind(x, x)


@_op
def isnan(x):
  return _nan_mask(x)


@_op
def isinf(x):
  x = _as_array(x)
  if aval_of(x).dtype not in FLOAT_DTYPES:
    return P.full(aval_of(x).shape, False, "bool")
  return P.eq(P.abs_(x), full_like(x, np.inf))


@_op
def isfinite(x):
  return logical_not(logical_or(isnan(x), isinf(x)))


def _truth(x):
  x = _as_array(x)
  return x if aval_of(x).dtype == "bool" else not_equal(x, 0)


@_op
def logical_not(x):
  x = _truth(x)
  return P.select(
    x, P.full(aval_of(x).shape, False, "bool"), P.full(aval_of(x).shape, True, "bool")
  )


@_op
def logical_and(x, y):
  return _and(*_promote(_truth(x), _truth(y)))


@_op
def logical_or(x, y):
  return _or(*_promote(_truth(x), _truth(y)))


@_op
def logical_xor(x, y):
  x, y = _promote(_truth(x), _truth(y))
  return P.ne_p.bind(x, y)


def _bitwise(logical, prim, name):
  """numpy's bitwise `name` (and Python's operator): the logical one on bool arrays, the
  bitwise primitive on integers (bools mixed in become integers, as numpy's)."""

  def fn(*xs):
    xs = [_as_array(x) if not _is_python_scalar(x) else x for x in xs]
    if builtins.all(not _is_python_scalar(x) and aval_of(x).dtype == "bool" for x in xs):
      return logical(*xs)
    xs = _promote(*xs) if len(xs) > 1 else [_as_array(xs[0])]
    if builtins.any(aval_of(x).dtype in FLOAT_DTYPES for x in xs):
      raise PrimcTypeError(
        f"{name} of {', '.join(str(aval_of(x).dtype) for x in xs)}: "
        f"bitwise operations take integer or bool arrays (as numpy)"
      )
    return prim.bind(*xs)

  fn.__name__ = name
  return _op(fn)


bitwise_and = _bitwise(logical_and, P.bit_and_p, "bitwise_and")
bitwise_or = _bitwise(logical_or, P.bit_or_p, "bitwise_or")
bitwise_xor = _bitwise(logical_xor, P.bit_xor_p, "bitwise_xor")
invert = bitwise_not = bitwise_invert = _bitwise(logical_not, P.bit_not_p, "invert")


def _shift(prim, name):
  def fn(x, y):
    x, y = _promote(x, y)
    if aval_of(x).dtype == "bool":  # numpy shifts bools as int8
      x, y = P.convert(x, "int8"), P.convert(y, "int8")
    if builtins.any(aval_of(a).dtype in FLOAT_DTYPES for a in (x, y)):
      raise PrimcTypeError(
        f"{name} of {aval_of(x).dtype}, {aval_of(y).dtype}: shifts take integer arrays"
      )
    return prim.bind(x, y)

  fn.__name__ = name
  return _op(fn)


left_shift = bitwise_left_shift = _shift(P.shift_left_p, "left_shift")
right_shift = bitwise_right_shift = _shift(P.shift_right_p, "right_shift")


@_op
def any(a, axis=None, keepdims=False, *, where=None):
  """numpy.any (False over nothing); `where` leaves entries out."""
  a = max(P.convert(_truth(a), "int32"), axis, keepdims, initial=0, where=where)
  return P.gt(a, zeros_like(a))


@_op
def all(a, axis=None, keepdims=False, *, where=None):
  """numpy.all (True over nothing); `where` leaves entries out."""
  return logical_not(any(logical_not(a), axis, keepdims, where=where))


@_op
def count_nonzero(a, axis=None, keepdims=False):
  return sum(P.convert(_truth(a), "int64"), axis, keepdims)


@_op
def ptp(a, axis=None, keepdims=False):
  return subtract(max(a, axis, keepdims), min(a, axis, keepdims))


@_op
def fabs(x):
  return P.abs_(_float(x))


def _nan_ignoring(pick, name):
  def fn(x, y):
    x, y = _promote(x, y)
    if aval_of(x).dtype not in FLOAT_DTYPES:  # no NaNs: numpy keeps the dtype
      return pick(x, y)
    return where(_nan_mask(y), x, where(_nan_mask(x), y, pick(x, y)))

  fn.__name__ = name
  return _op(fn)


fmax = _nan_ignoring(maximum, "fmax")
fmin = _nan_ignoring(minimum, "fmin")


@_op
def logaddexp2(x, y):
  x, y = _promote_float(x, y)
  ln2 = full_like(x, np.log(2.0))
  return P.div(P.logaddexp_p.bind(P.mul(x, ln2), P.mul(y, ln2)), ln2)


@_op
def heaviside(x1, x2):
  """numpy.heaviside: 0 below 0, x2 at 0, 1 above, NaN at NaN."""
  x1, x2 = _promote_float(x1, x2)
  zero = zeros_like(x1)
  out = where(P.lt(x1, zero), zero, where(P.gt(x1, zero), ones_like(x1), x2))
  return where(isnan(x1), x1, out)


@_op
def float_power(x, y):
  return power(asarray(x, "float64"), asarray(y, "float64"))


@_op
def cbrt(x):
  """The real cube root (negative for negative x), as numpy."""
  x = _float(x)
  root = P.pow_(P.abs_(x), full_like(x, 1.0 / 3.0))
  return P.mul(P.sign(x), root)


@_op
def positive(x):
  return _as_array(x)


def _real_only(name, fn):
  def op(x):
    x = _as_array(x)
    return fn(x)

  op.__name__ = name
  return _op(op)


conj = conjugate = _real_only("conj", lambda x: x)  # primc's arrays are real
real = _real_only("real", lambda x: x)
imag = _real_only("imag", zeros_like)


@_op
def angle(z, deg=False):
  """The argument of real numbers: 0, or pi for negative ones (and -0.0), as numpy's
  arctan2(0, x); derivative 0."""
  out = arctan2(zeros_like(_float(z)), _float(z))
  return multiply(out, 180.0 / np.pi) if deg else out


@_op
def copy(a):
  return _as_array(a)


def ascontiguousarray(a, dtype=None):
  return asarray(a, dtype)


def shape(a):
  return tuple(aval_of(_as_array(a)).shape)


def size(a, axis=None):
  s = shape(a)
  return int(np.prod(s, dtype=np.int64)) if axis is None else s[axis]


def ndim(a):
  return len(shape(a))


def result_type(*args):
  return np.result_type(
    *[
      np.dtype(aval_of(_as_array(a)).dtype) if not isinstance(a, (type, np.dtype, str)) else a
      for a in args
    ]
  )


dtype, finfo, iinfo, newaxis = np.dtype, np.finfo, np.iinfo, None
triu_indices, tril_indices, diag_indices = np.triu_indices, np.tril_indices, np.diag_indices


def empty(shape, dtype="float32"):
  """Zeros: numpy leaves the values undefined; primc's are zero."""
  return zeros(shape, dtype)


def empty_like(x, dtype=None, shape=None):
  return zeros_like(x, dtype, shape)


def identity(n, dtype="float32"):
  return eye(n, dtype=dtype)


@_op
def swapaxes(x, axis1, axis2):
  x = _as_array(x)
  nd = aval_of(x).ndim
  a, b = _axes(axis1, nd)[0], _axes(axis2, nd)[0]
  perm = list(range(nd))
  perm[a], perm[b] = perm[b], perm[a]
  return transpose(x, perm)


@_op
def rollaxis(x, axis, start=0):
  x = _as_array(x)
  nd = aval_of(x).ndim
  axis = _axes(axis, nd)[0]
  if not -nd <= start <= nd:
    raise ShapeError(f"rollaxis: start {start} is out of bounds for rank {nd}")
  start = start % (nd + 1) if start < 0 else start
  if axis < start:
    start -= 1
  perm = [d for d in range(nd) if d != axis]
  perm.insert(start, axis)
  return transpose(x, perm)


@_op
def atleast_1d(*arys):
  out = [_atleast(_as_array(a), 1) for a in arys]
  return out[0] if len(out) == 1 else out


@_op
def atleast_2d(*arys):
  out = [_atleast(_as_array(a), 2) for a in arys]
  return out[0] if len(out) == 1 else out


@_op
def atleast_3d(*arys):
  """numpy's: (N,) -> (1, N, 1), (M, N) -> (M, N, 1)."""
  out = []
  for a in arys:
    a = _as_array(a)
    s = aval_of(a).shape
    new = {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}.get(len(s), s)
    out.append(reshape(a, new))
  return out[0] if len(out) == 1 else out


@_op
def dstack(tup):
  return concatenate(atleast_3d(*tup) if len(tup) > 1 else [atleast_3d(*tup)], 2)


@_op
def meshgrid(*xi, indexing="xy", sparse=False, copy=True):
  """numpy.meshgrid; `sparse` gives each array with ones in the other dimensions."""
  if indexing not in ("xy", "ij"):
    raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
  xs = [ravel(_as_array(x)) for x in xi]
  n = len(xs)
  lengths = [aval_of(x).shape[0] for x in xs]
  if indexing == "xy" and n >= 2:
    lengths[0], lengths[1] = lengths[1], lengths[0]
  out = []
  for k, x in enumerate(xs):
    axis = (1 - k if k < 2 else k) if indexing == "xy" and n >= 2 else k
    shape_ = [1] * n if sparse else list(lengths)
    shape_[axis] = lengths[axis]
    out.append(P.broadcast_in_dim(x, tuple(shape_), (axis,)))
  return out


@_op
def broadcast_arrays(*args):
  arrays = [_as_array(a) for a in args]
  shape_ = broadcast_shapes(*(aval_of(a).shape for a in arrays))
  return [broadcast_to(a, shape_) for a in arrays]


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
  """numpy.linspace; of traced start/stop too (then start + k * step, as numpy computes
  it, with the last sample `stop` exactly when endpoint)."""
  if not isinstance(start, Tracer) and not isinstance(stop, Tracer):
    return np.linspace(
      np.asarray(start),
      np.asarray(stop),
      int(num),
      endpoint=endpoint,
      retstep=retstep,
      dtype=dtype,
      axis=axis,
    )
  if axis != 0:
    raise NotSupportedError("linspace of traced bounds along an axis other than 0")
  start, stop = _promote(_float(start), _float(stop))
  num = int(num)
  div = (num - 1) if endpoint else num
  shape_ = (num,) + aval_of(start).shape
  k = P.convert(P.iota(shape_, 0), aval_of(start).dtype)
  lo = broadcast_to(start, shape_)
  step = P.div(subtract(stop, start), full_like(start, float(builtins.max(div, 1))))
  out = P.add(lo, P.mul(k, broadcast_to(step, shape_)))
  if endpoint and num > 1:
    last = P.eq(P.iota(shape_, 0), P.full(shape_, num - 1, "int32"))
    out = P.select(last, broadcast_to(stop, shape_), out)
  out = out if dtype is None else asarray(out, dtype)
  return (out, step) if retstep else out


@_op
def vdot(a, b):
  return sum(multiply(ravel(_as_array(a)), ravel(_as_array(b))))


@_op
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
  """The cross product of 3-vectors along the last axis (or `axis`)."""
  if axis is not None:
    axisa = axisb = axisc = axis
  a, b = moveaxis(_as_array(a), axisa, -1), moveaxis(_as_array(b), axisb, -1)
  if aval_of(a).shape[-1] != 3 or aval_of(b).shape[-1] != 3:
    raise NotSupportedError(
      f"cross of vectors of {aval_of(a).shape[-1]} and "
      f"{aval_of(b).shape[-1]} components (3 are supported)"
    )
  a, b = _promote(a, b)
  c = [getitem(v, (Ellipsis, k)) for v in (a, b) for k in range(3)]
  a0, a1, a2, b0, b1, b2 = c
  out = stack(
    [
      subtract(multiply(a1, b2), multiply(a2, b1)),
      subtract(multiply(a2, b0), multiply(a0, b2)),
      subtract(multiply(a0, b1), multiply(a1, b0)),
    ],
    -1,
  )
  return moveaxis(out, -1, axisc)


@_op
def select(condlist, choicelist, default=0):
  if len(condlist) != len(choicelist):
    raise ShapeError("select: condlist and choicelist differ in length")
  out = default
  for cond_, choice in reversed(list(zip(condlist, choicelist))):
    out = where(cond_, choice, out)
  return _as_array(out)


@_op
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
  x = _as_array(x)
  dt = aval_of(x).dtype
  if dt not in FLOAT_DTYPES:
    return x
  info = np.finfo(dt)
  x = where(_nan_mask(x), full_like(x, nan), x)
  x = where(P.eq(x, full_like(x, np.inf)), full_like(x, info.max if posinf is None else posinf), x)
  return where(
    P.eq(x, full_like(x, -np.inf)), full_like(x, info.min if neginf is None else neginf), x
  )


def _nans_as(a, fill):
  """`a` with its NaNs replaced by `fill` (integers and bools have none: `a` itself, so
  the nan- functions of integers are the plain ones, in numpy's dtypes)."""
  a = _as_array(a)
  if aval_of(a).dtype not in FLOAT_DTYPES:
    return a
  return where(_nan_mask(a), full_like(a, fill), a)


def _nan_reduction(name, reduce, fill):
  def fn(a, axis=None, keepdims=False, *, dtype=None, initial=None, where=None):
    return reduce(_nans_as(a, fill), axis, keepdims, dtype, initial, where)

  fn.__name__ = name
  return _op(fn)


nansum = _nan_reduction("nansum", sum, 0.0)
nanprod = _nan_reduction("nanprod", prod, 1.0)


@_op
def nanmean(a, axis=None, keepdims=False):
  a = _float(a)
  count = sum(P.convert(logical_not(_nan_mask(a)), aval_of(a).dtype), axis, keepdims)
  return divide(nansum(a, axis, keepdims), count)


def _nan_extreme(name, reduce, fill):
  def fn(a, axis=None, keepdims=False, *, initial=None, where=None):
    """All-NaN slices give NaN, as numpy (which also warns), or `initial` when given;
    `where` (with `initial`) leaves entries out."""
    a = _as_array(a)
    best = reduce(_nans_as(a, fill), axis, keepdims, initial, where)
    if initial is not None or aval_of(a).dtype not in FLOAT_DTYPES:  # (no NaNs: numpy
      return best  # keeps the dtype)
    return _where(all(_nan_mask(a), axis, keepdims), full_like(best, np.nan), best)

  fn.__name__ = name
  return _op(fn)


nanmax = _nan_extreme("nanmax", max, -np.inf)
nanmin = _nan_extreme("nanmin", min, np.inf)


@_op
def average(a, axis=None, weights=None, returned=False, keepdims=False):
  """numpy.average. Known weights that sum to zero raise ZeroDivisionError, as numpy;
  traced ones (their sum is not known while tracing) give NaN there, as JAX."""
  a = _float(a)
  if weights is None:
    avg = mean(a, axis, keepdims)
    scale = full_like(avg, float(size(a) // builtins.max(size(avg), 1)))
    return (avg, scale) if returned else avg
  if not _holds_tracer(weights):  # (traced weights summing to 0 give NaN)
    known = np.asarray(weights, np.float64)
    if not np.all(np.sum(known, axis=None if known.ndim == 1 or axis is None else axis)):
      raise ZeroDivisionError("average: weights sum to zero, can't be normalized")
  w = _as_array(weights)
  if aval_of(w).shape != aval_of(a).shape:
    if axis is None or aval_of(w).ndim != 1:
      raise ShapeError(
        f"average: weights of shape {aval_of(w).shape} need axis= and 1-D "
        f"weights, or a's shape {aval_of(a).shape}"
      )
    ax = _axes(axis, aval_of(a).ndim)[0]
    w = P.broadcast_in_dim(asarray(w, aval_of(a).dtype), aval_of(a).shape, (ax,))
  a, w = _promote(a, w)
  total = sum(w, axis, keepdims)
  avg = divide(sum(multiply(a, w), axis, keepdims), total)
  return (avg, broadcast_to(total, aval_of(avg).shape)) if returned else avg


def _sorted_along(a, axis):
  a = _float(a)
  if axis is None:
    return sort(ravel(a), 0), 0, True
  ax = _axes(axis, aval_of(a).ndim)
  if len(ax) != 1:
    raise NotSupportedError("median/quantile over several axes")
  return sort(a, ax[0]), ax[0], False


def _lerp(a, b, t):
  """numpy's interpolation between order statistics a <= b at weight t (from the nearer
  end: `b - (b - a)(1 - t)` from t = 1/2 on; an infinite neighbour gives NaN, as numpy's)."""
  diff = subtract(b, a)
  if not isinstance(t, (Tracer, np.ndarray)):  # a constant weight
    return subtract(b, multiply(diff, 1.0 - t)) if t >= 0.5 else add(a, multiply(diff, t))
  return where(
    greater_equal(t, 0.5), subtract(b, multiply(diff, subtract(1.0, t))), add(a, multiply(diff, t))
  )


def _quantiles(a, qs, axis, keepdims, name, median=False, weights=None):
  """Linear interpolation between order statistics (numpy's default method) at constant
  quantiles, as numpy computes it (`_lerp`; the median is the middle value, or the mean
  of the two middle ones, as numpy's `median`); a NaN in a slice makes its result NaN
  (NaNs sort last), as numpy."""
  original = _as_array(a)
  s, ax, flat = _sorted_along(original, axis)
  n = aval_of(s).shape[ax]
  if n == 0:
    raise ShapeError(f"{name} of an empty axis")
  take_ = lambda i: getitem(s, (builtins.slice(None),) * ax + (i,))
  outs = []
  for q in np.atleast_1d(np.asarray(qs, np.float64)).ravel():
    if not 0 <= q <= 1:
      raise ValueError(f"{name}: quantiles must be in [0, 1] (percentiles in [0, 100])")
    if median:
      lo, hi = (n - 1) // 2, n // 2
      v = take_(lo) if lo == hi else multiply(add(take_(lo), take_(hi)), 0.5)
    else:
      pos = float(q) * (n - 1)  # (Python floats: weak, so float32 stays float32)
      lo = builtins.min(int(np.floor(pos)), n - 1)
      t = pos - lo if weights is None else np.asarray(pos - lo, weights)[()]
      v = _lerp(take_(lo), take_(builtins.min(lo + 1, n - 1)), t)
    v = where(
      getitem(_nan_mask(s), (builtins.slice(None),) * ax + (n - 1,)), full_like(v, np.nan), v
    )
    if keepdims:
      v = reshape(v, (1,) * aval_of(original).ndim) if flat else expand_dims(v, ax)
    outs.append(v)
  return outs[0] if np.ndim(qs) == 0 else stack(outs, 0)


def _nan_quantiles(a, qs, axis, keepdims, name, median=False, weights=None):
  """As `_quantiles`, over each slice's values that are not NaN (their count is traced:
  the order statistics are gathered at positions computed from it); NaN for a slice of
  NaNs only."""
  original = _as_array(a)
  s, ax, flat = _sorted_along(original, axis)  # NaNs sort last
  if aval_of(s).shape[ax] == 0:
    raise ShapeError(f"{name} of an empty axis")
  valid = sum(logical_not(_nan_mask(s)), ax, keepdims=True)
  last = maximum(subtract(valid, 1), 0)
  at = lambda i: take_along_axis(s, astype(i, "int64"), ax)
  outs = []
  for q in np.atleast_1d(np.asarray(qs, np.float64)).ravel():
    if not 0 <= q <= 1:
      raise ValueError(f"{name}: quantiles must be in [0, 1] (percentiles in [0, 100])")
    if median:
      lo, hi = floor_divide(last, 2), floor_divide(valid, 2)
      hi = minimum(hi, last)
      v = where(equal(lo, hi), at(lo), multiply(add(at(lo), at(hi)), 0.5))
    else:
      kind = weights or aval_of(s).dtype
      pos = multiply(astype(last, kind), float(q))
      lo = minimum(astype(floor(pos), "int64"), last)
      v = _lerp(at(lo), at(minimum(add(lo, 1), last)), subtract(pos, astype(lo, kind)))
    v = where(equal(valid, 0), full_like(v, np.nan), v)
    if keepdims:
      v = reshape(v, (1,) * aval_of(original).ndim) if flat else v
    else:
      v = reshape(v, ()) if flat else squeeze(v, ax)
    outs.append(v)
  return outs[0] if np.ndim(qs) == 0 else stack(outs, 0)


def _first_slice_all_nan(a, axis) -> bool:
  """Whether `a` is a known float array whose first slice along `axis` (all of it for
  None) holds NaNs only: numpy's nanquantile computes slice by slice, and an empty slice
  gives a NaN of the data's dtype, which then sets the dtype of the whole result
  (`apply_along_axis` takes it from the first slice). A traced array keeps the promoted
  dtype, as JAX's."""
  if isinstance(a, Tracer) or not isinstance(a, (np.ndarray, np.generic)):
    return False
  a = np.asarray(a)
  if a.dtype.kind != "f" or a.size == 0:
    return False
  if axis is not None and a.ndim > 1:
    ax = _axes(axis, a.ndim)[0]
    a = np.moveaxis(a, ax, -1)[(0,) * (a.ndim - 1)]
  return bool(np.isnan(a).all())


def _quantile_family(compute, prefix: str):
  """median, quantile and percentile (linear interpolation, constant q) over `compute`:
  `_quantiles`, or `_nan_quantiles` for the nan- versions. The result has the dtype of
  numpy's: the data's float type, promoted with q's unless q is a Python number.
  `overwrite_input` is accepted and changes nothing (primc never writes its inputs)."""

  def median(a, axis=None, keepdims=False, *, overwrite_input=False):
    shape = aval_of(_as_array(a)).shape
    if builtins.any(shape[i] == 0 for i in _axes(axis, len(shape))):  # numpy's median of
      return _mean(_float(a), axis, keepdims)  # nothing: NaN
    return compute(a, 0.5, axis, keepdims, f"{prefix}median", median=True)

  def quantile(a, q, axis=None, keepdims=False, method="linear", *, overwrite_input=False):
    if method != "linear":
      raise NotSupportedError(f"{prefix}quantile method {method!r} (only 'linear')")
    if isinstance(q, Tracer):
      raise NotSupportedError(f"{prefix}quantile at traced q (q must be known while tracing)")
    # an array or a numpy scalar q takes part in the result's type: the interpolation
    # weights are of its type (numpy's arithmetic: float32 data, float64 weights)
    weights = None if type(q) in (int, float) else np.asarray(q).dtype.name
    if prefix == "nan" and _first_slice_all_nan(a, axis):
      weights = None  # numpy's result then has the data's dtype (see the helper)
    return compute(a, q, axis, keepdims, f"{prefix}quantile", weights=weights)

  def percentile(a, q, axis=None, keepdims=False, method="linear", *, overwrite_input=False):
    if isinstance(q, Tracer):
      raise NotSupportedError(f"{prefix}percentile at traced q (q must be known while tracing)")
    scaled = q / 100.0 if type(q) in (int, float) else np.asarray(q) / 100.0
    return quantile(a, scaled, axis, keepdims, method)

  for fn in (median, quantile, percentile):
    fn.__name__ = fn.__qualname__ = prefix + fn.__name__
  return _op(median), _op(quantile), _op(percentile)


median, quantile, percentile = _quantile_family(_quantiles, "")
nanmedian, nanquantile, nanpercentile = _quantile_family(_nan_quantiles, "nan")


@_op
def partition(a, kth, axis=-1):
  """Sorted along `axis`: a valid partition for every kth (numpy leaves the order
  around the kth element unspecified)."""
  return sort(a, axis)


@_op
def take_along_axis(arr, indices, axis):
  arr = _as_array(arr)
  idx = _as_array(indices)
  if axis is None:
    return take_along_axis(ravel(arr), idx, 0)
  nd = aval_of(arr).ndim
  ax = _axes(axis, nd)[0]
  if aval_of(idx).ndim != nd:
    raise ShapeError(
      f"take_along_axis: indices of rank {aval_of(idx).ndim} for an array of rank {nd}"
    )
  shape_ = aval_of(idx).shape
  key = tuple(
    idx if d == ax else np.arange(shape_[d]).reshape([-1 if e == d else 1 for e in range(nd)])
    for d in range(nd)
  )
  return getitem(arr, key)


@_op
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
  a, b = _promote_float(a, b)
  close = less_equal(
    abs(subtract(a, b)), add(full_like(a, atol), multiply(full_like(a, rtol), abs(b)))
  )
  # numpy's rule where either is infinite: equal (an infinite bound would take any value)
  close = where(logical_and(isfinite(a), isfinite(b)), close, equal(a, b))
  if equal_nan:
    close = logical_or(close, logical_and(_nan_mask(a), _nan_mask(b)))
  return close


@_op
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
  return all(isclose(a, b, rtol, atol, equal_nan))


@_op
def array_equal(a1, a2, equal_nan=False):
  a1, a2 = _as_array(a1), _as_array(a2)
  if aval_of(a1).shape != aval_of(a2).shape:
    return np.asarray(False)
  same = equal(a1, a2)
  if equal_nan:
    same = logical_or(same, logical_and(_nan_mask(a1), _nan_mask(a2)))
  return all(same)


@_op
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
  """numpy.cov, in numpy's dtype (at least float64 unless `dtype`); `fweights` (integer
  repeat counts) and `aweights` (observation weights) as numpy weighs them. With no
  degrees of freedom left (ddof >= n) it divides by 0: inf or nan, as numpy."""
  kinds = [aval_of(_as_array(v)).dtype for v in (m, y) if v is not None]
  kind = dtype or np.result_type(*kinds, np.float64).name
  x = _atleast(asarray(m, kind), 2)
  if not rowvar:
    x = transpose(x)
  if y is not None:
    yy = _atleast(asarray(y, kind), 2)
    x = concatenate([x, yy if rowvar else transpose(yy)], 0)
  n = aval_of(x).shape[1]
  dd = ddof if ddof is not None else (0 if bias else 1)
  if fweights is None and aweights is None:
    centered = subtract(x, mean(x, 1, keepdims=True))
    c = divide(matmul(centered, transpose(centered)), float(builtins.max(n - dd, 0)))
  else:
    w = ones((n,), kind)
    for v in (fweights, aweights):
      if v is not None:
        v = asarray(v, kind)
        if aval_of(v).shape != (n,):
          raise ShapeError(
            f"cov: weights must be 1-D of the observations' length {n}, got "
            f"shape {aval_of(v).shape}"
          )
        w = multiply(w, v)
    v1 = sum(w)
    centered = subtract(x, divide(sum(multiply(x, w), 1, keepdims=True), v1))
    if dd == 0:
      fact = v1
    elif aweights is None:
      fact = subtract(v1, float(dd))
    else:
      fact = subtract(
        v1, multiply(float(dd), divide(sum(multiply(w, asarray(aweights, kind))), v1))
      )
    c = divide(matmul(multiply(centered, w), transpose(centered)), maximum(fact, 0))
  return squeeze(c) if aval_of(c).shape == (1, 1) else c


@_op
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
  c = cov(x, y, rowvar, dtype=dtype)
  if aval_of(c).ndim == 0:
    return divide(c, c)
  d = sqrt(diagonal(c))
  return divide(divide(c, reshape(d, (-1, 1))), reshape(d, (1, -1)))


@_op
def searchsorted(a, v, side="left", sorter=None):
  """Insertion points of v into the sorted 1-D a (sorted by `sorter`'s order when given):
  the count of a's elements below v (at or below, side='right'), in numpy's order, where
  NaN is above every number and equal to itself; int64, as numpy."""
  if side not in ("left", "right"):
    raise PrimcError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
  a = ravel(_as_array(a))
  if sorter is not None:
    a = take(a, sorter)
  v = _as_array(v)
  vs = aval_of(v).shape
  n = aval_of(a).shape[0]
  grid = vs + (n,)
  aa = P.broadcast_in_dim(a, grid, (len(vs),))
  vv = P.broadcast_in_dim(v, grid, tuple(range(len(vs))))
  aa, vv = _promote(aa, vv)
  below = P.lt(aa, vv) if side == "left" else P.le_p.bind(aa, vv)
  if aval_of(aa).dtype in FLOAT_DTYPES:  # NaN above every number, equal to itself
    nan_v = isnan(vv)
    below = logical_or(
      below, logical_and(nan_v, logical_not(isnan(aa))) if side == "left" else nan_v
    )
  return sum(P.convert(below, "int64"), -1)


@_op
def digitize(x, bins, right=False):
  """The index of the bin of each x (numpy.digitize): bins constant and monotonic."""
  edges = np.asarray(bins)
  if edges.ndim != 1:
    raise PrimcError(f"digitize: bins must be 1-D, got shape {edges.shape}")
  steps = np.diff(edges)
  if not (np.all(steps >= 0) or np.all(steps <= 0)):
    raise ValueError("digitize: bins must be monotonically increasing or decreasing")
  side = "left" if right else "right"
  if edges.size > 1 and edges[0] > edges[-1]:  # decreasing: numpy counts from the end
    return subtract(edges.size, searchsorted(edges[::-1].copy(), x, side=side))
  return searchsorted(edges, x, side=side)


@_op
def interp(x, xp, fp, left=None, right=None):
  """numpy.interp: piecewise-linear through (xp, fp), xp increasing; constant beyond the
  ends (left/right if given). Differentiable in x and fp."""
  x, xp, fp = _float(x), ravel(_float(array(xp))), ravel(_float(array(fp)))
  n = aval_of(xp).shape[0]
  i = searchsorted(xp, x, side="right")
  i = clip(i, 1, n - 1)
  lo, hi = subtract(i, 1), i
  x0, x1, y0, y1 = take(xp, lo), take(xp, hi), take(fp, lo), take(fp, hi)
  t = divide(subtract(x, x0), subtract(x1, x0))
  out = add(y0, multiply(t, subtract(y1, y0)))
  first, last = getitem(xp, 0), getitem(xp, n - 1)
  out = where(less(x, first), getitem(fp, 0) if left is None else left, out)
  return where(greater(x, last), getitem(fp, n - 1) if right is None else right, out)


def _correlate_valid(a, v):
  """sum_k a[i + k] v[k] for every i where v fits in a."""
  n, m = aval_of(a).shape[0], aval_of(v).shape[0]
  terms = [multiply(getitem(a, builtins.slice(k, n - m + 1 + k)), getitem(v, k)) for k in range(m)]
  out = terms[0]
  for t in terms[1:]:
    out = add(out, t)
  return out


def _correlate_mode(a, v, mode, name):
  a, v = ravel(_float(a)), ravel(_float(v))
  common = np.result_type(aval_of(a).dtype, aval_of(v).dtype).name
  a, v = asarray(a, common), asarray(v, common)
  n, m = aval_of(a).shape[0], aval_of(v).shape[0]
  if m == 0 or n == 0:
    raise ShapeError(f"{name} of an empty array")
  if mode == "valid":
    if m > n:
      a, v = v, a
      n, m = m, n
    return a, v, 0, 0
  if mode == "full":
    return a, v, m - 1, m - 1
  if mode == "same":
    return a, v, (m - 1) // 2, m - 1 - (m - 1) // 2
  raise ValueError(f"{name}: mode must be 'valid', 'same' or 'full', got {mode!r}")


@_op
def correlate(a, v, mode="valid"):
  """numpy.correlate of 1-D real arrays: the sums of products of shifted copies."""
  swapped = aval_of(_as_array(v)).shape[0] > aval_of(_as_array(a)).shape[0] and mode == "valid"
  a, v, before, after = _correlate_mode(a, v, mode, "correlate")
  out = _correlate_valid(pad(a, (before, after)), v)
  return flip(out) if swapped else out


@_op
def convolve(a, v, mode="full"):
  """numpy.convolve of 1-D real arrays: correlate with v reversed."""
  a, v = ravel(_as_array(a)), ravel(_as_array(v))
  if aval_of(v).shape[0] > aval_of(a).shape[0]:
    a, v = v, a
  return correlate(a, flip(v), mode)


# ---------------------------------------------------------------------------------------
# numpy 2 / jax.numpy names that are compositions of the above


def _cumulative(scan, name, initial):
  def fn(x, axis=None, dtype=None, include_initial=False):
    x = _as_array(x) if dtype is None else asarray(x, dtype)
    if aval_of(x).ndim == 0:  # numpy: a 0-d array is scanned as one element
      x = reshape(x, (1,))
    if axis is None:
      if aval_of(x).ndim > 1:
        raise ShapeError(f"{name} of an array of rank > 1 needs axis=")
      axis = 0
    out = scan(x, axis)
    if include_initial:  # the empty prefix first: 0 for a sum, 1 for a product
      ax = _axes(axis, aval_of(out).ndim)[0]
      width = [(1, 0) if d == ax else (0, 0) for d in range(aval_of(out).ndim)]
      out = pad(out, width, constant_values=initial)
    return out

  fn.__name__ = name
  return _op(fn)


cumulative_sum = _cumulative(cumsum, "cumulative_sum", 0)
cumulative_prod = _cumulative(cumprod, "cumulative_prod", 1)


@_op
def diagflat(v, k=0):
  return diag(ravel(_as_array(v)), k)


def tri(N, M=None, k=0, dtype="float64"):
  return tril(ones((N, N if M is None else M), dtype), k)


def triu_indices_from(arr, k=0):
  s = shape(arr)
  return np.triu_indices(s[-2], k, s[-1])


def tril_indices_from(arr, k=0):
  s = shape(arr)
  return np.tril_indices(s[-2], k, s[-1])


def diag_indices_from(arr):
  s = shape(arr)
  return np.diag_indices(s[0], len(s))


@_op
def ediff1d(ary, to_end=None, to_begin=None):
  d = diff(ravel(_as_array(ary)))
  parts = (
    ([ravel(_as_array(to_begin))] if to_begin is not None else [])
    + [d]
    + ([ravel(_as_array(to_end))] if to_end is not None else [])
  )
  return concatenate(parts, 0) if len(parts) > 1 else d


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
  exps = linspace(start, stop, num, endpoint=endpoint, axis=axis)
  out = power(base, exps)
  return out if dtype is None else asarray(out, dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
  if not isinstance(start, Tracer) and not isinstance(stop, Tracer):
    return np.geomspace(start, stop, num, endpoint=endpoint, dtype=dtype, axis=axis)
  return logspace(log10(start), log10(stop), num, endpoint, 10.0, dtype, axis)


@_op
def gradient(f, *varargs, axis=None, edge_order=1):
  """numpy.gradient with scalar spacings: central differences inside, one-sided ones of
  `edge_order` 1 at the ends (edge_order=2: second-order one-sided, as numpy)."""
  f = _float(f)
  nd = aval_of(f).ndim
  axes = (
    list(range(nd))
    if axis is None
    else list(_axes(axis, nd))
    if not isinstance(axis, int)
    else [_axes(axis, nd)[0]]
  )
  if len(varargs) == 0:
    spacings = [1.0] * len(axes)
  elif len(varargs) == 1:
    spacings = [varargs[0]] * len(axes)
  else:
    spacings = list(varargs)
  if len(spacings) != len(axes) or not builtins.all(np.ndim(h) == 0 for h in spacings):
    raise NotSupportedError("gradient with coordinate arrays (scalar spacings are supported)")
  if edge_order not in (1, 2):
    raise ValueError("gradient: edge_order must be 1 or 2")
  outs = []
  for ax, h in zip(axes, spacings):
    n = aval_of(f).shape[ax]
    if n < edge_order + 1:
      raise ShapeError(f"gradient needs at least {edge_order + 1} points along axis {ax}")
    take = lambda lo, hi: _slice_axis(f, ax, lo, hi)
    h = float(h)
    inner = divide(subtract(take(2, n), take(0, n - 2)), 2.0 * h)
    if edge_order == 1:
      first = divide(subtract(take(1, 2), take(0, 1)), h)
      last = divide(subtract(take(n - 1, n), take(n - 2, n - 1)), h)
    else:
      first = divide(
        add(add(multiply(take(0, 1), -1.5), multiply(take(1, 2), 2.0)), multiply(take(2, 3), -0.5)),
        h,
      )
      last = divide(
        add(
          add(multiply(take(n - 3, n - 2), 0.5), multiply(take(n - 2, n - 1), -2.0)),
          multiply(take(n - 1, n), 1.5),
        ),
        h,
      )
    outs.append(concatenate([first, inner, last], ax))
  return outs[0] if len(outs) == 1 else tuple(outs)


@_op
def trapezoid(y, x=None, dx=1.0, axis=-1):
  y = _float(y)
  ax = _axes(axis, aval_of(y).ndim)[0]
  n = aval_of(y).shape[ax]
  mid = multiply(add(_slice_axis(y, ax, 1, n), _slice_axis(y, ax, 0, n - 1)), 0.5)
  if x is None:
    return multiply(sum(mid, ax), float(dx))
  x = _float(x)
  if aval_of(x).ndim == 1:
    d = diff(x)
    shape_ = [1] * aval_of(y).ndim
    shape_[ax] = n - 1
    d = reshape(d, shape_)
  else:
    d = diff(x, axis=ax)
  return sum(multiply(mid, d), ax)


@_op
def polyval(p, x):
  """Horner's rule from zero, as numpy (`y = y * x + c` for each coefficient, so an
  infinite x gives NaN, 0 * inf, where the leading term would give inf), in numpy's
  dtypes (integer coefficients at integer x stay integers)."""
  coeffs = (
    [getitem(_as_array(p), k) for k in range(shape(p)[0])]
    if not isinstance(p, (list, tuple))
    else list(p)
  )
  x = _as_array(x)
  out = zeros_like(x)
  for c in coeffs:
    out = add(multiply(out, x), c)
  return out


def _poly_pair(a1, a2):
  """Two coefficient arrays (highest power first) padded at the front to one length."""
  a1, a2 = ravel(_float(array(a1))), ravel(_float(array(a2)))
  n1, n2 = aval_of(a1).shape[0], aval_of(a2).shape[0]
  n = builtins.max(n1, n2)
  return pad(a1, (n - n1, 0)), pad(a2, (n - n2, 0))


@_op
def polyadd(a1, a2):
  return add(*_poly_pair(a1, a2))


@_op
def polysub(a1, a2):
  return subtract(*_poly_pair(a1, a2))


@_op
def polymul(a1, a2):
  return convolve(ravel(_float(array(a1))), ravel(_float(array(a2))))


@_op
def polyder(p, m=1):
  """The m-th derivative's coefficients (highest power first)."""
  p = ravel(_float(array(p)))
  for _ in range(int(m)):
    n = aval_of(p).shape[0]
    if n <= 1:
      return zeros((1,), aval_of(p).dtype)
    p = multiply(p[:-1], np.arange(n - 1, 0, -1))  # numpy's promotion: float64
  return p


@_op
def polyint(p, m=1, k=None):
  """The m-th antiderivative's coefficients, integration constants k (0 by default)."""
  p = ravel(_float(array(p)))
  ks = np.zeros(int(m)) if k is None else np.broadcast_to(np.asarray(k, np.float64), (int(m),))
  for j in range(int(m)):
    n = aval_of(p).shape[0]
    p = concatenate([divide(p, np.arange(n, 0, -1)), np.asarray([ks[j]])])
  return p


@_op
def polyfit(x, y, deg, rcond=None):
  """Least-squares polynomial coefficients of degree `deg` (highest power first), by
  lstsq on the Vandermonde matrix (numpy also scales its columns: equal up to
  rounding)."""
  x, y = _float(array(x)), _float(array(y))
  return _lstsq(vander(x, int(deg) + 1), y, rcond=rcond)[0]


@_op
def piecewise(x, condlist, funclist):
  """numpy.piecewise: funclist[k](x) where condlist[k] (a later condition overriding an
  earlier one), an extra last function (or value) where none holds, else 0. Every
  function is evaluated on all of x (as JAX does)."""
  x = _as_array(x)
  conds = (
    [condlist]
    if isinstance(condlist, (Tracer, np.ndarray))
    and aval_of(_as_array(condlist)).shape == aval_of(x).shape
    else list(condlist)
  )
  funcs = list(funclist)
  if len(funcs) not in (len(conds), len(conds) + 1):
    raise PrimcError(f"piecewise: {len(funcs)} functions for {len(conds)} conditions")
  value = lambda f: f(x) if callable(f) else full_like(x, f)
  out = value(funcs[-1]) if len(funcs) == len(conds) + 1 else zeros_like(x)
  for cond, f in zip(conds, funcs):
    out = where(cond, value(f), out)
  return out


@_op
def choose(a, choices, mode="raise"):
  """choices[a] elementwise (broadcast). An index out of range is numpy's ValueError for a
  constant `a`; a traced `a` needs mode='clip' or 'wrap' (its range is not known)."""
  n = len(choices)
  if isinstance(a, Tracer):
    if mode == "raise":
      raise NotSupportedError(
        "choose with a traced index array needs mode='clip' or 'wrap' "
        "(an index out of range cannot be checked while tracing)"
      )
    a = clip(a, 0, n - 1) if mode == "clip" else mod(a, n)
  else:
    a = np.asarray(a)
    if mode == "raise" and ((a < 0) | (a >= n)).any():
      raise ValueError("invalid entry in choice array")
    a = np.clip(a, 0, n - 1) if mode == "clip" else np.mod(a, n)
  out = _as_array(choices[-1])
  for k in range(n - 2, -1, -1):
    out = where(equal(a, k), choices[k], out)
  return out


@_op
def compress(condition, a, axis=None):
  """The entries of `a` (flattened when axis is None) where the constant `condition` is
  true."""
  if isinstance(condition, Tracer):
    raise NotSupportedError("compress with a traced condition (the result's length depends on it)")
  a = _as_array(a)
  if axis is None:
    a, axis = ravel(a), 0
  return take(a, np.nonzero(np.asarray(condition))[0], axis=axis)


@_op
def resize(a, new_shape):
  """a's elements repeated cyclically to fill `new_shape` (numpy.resize)."""
  a = ravel(_as_array(a))
  shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
  size = int(np.prod(shape, dtype=np.int64))
  n = aval_of(a).shape[0]
  if n == 0 or size == 0:
    return zeros(shape, aval_of(a).dtype)
  return reshape(take(a, np.arange(size) % n), shape)


@_op
def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
  """Whether each element is among the (constant or traced) test_elements (NaN is among
  none, as numpy's); `assume_unique` and `kind` choose numpy's algorithm, not the result:
  accepted."""
  element = _as_array(element)
  tests = ravel(array(test_elements))
  grid = aval_of(element).shape + aval_of(tests).shape
  nd = aval_of(element).ndim
  hit = (
    any(
      equal(
        P.broadcast_in_dim(element, grid, tuple(range(nd))), P.broadcast_in_dim(tests, grid, (nd,))
      ),
      -1,
    )
    if aval_of(tests).shape[0]
    else full_like(element, False, "bool")
  )
  return logical_not(hit) if invert else hit


@_op
def indices(dimensions, dtype=int, sparse=False):
  return (
    tuple(asarray(i) for i in np.indices(dimensions, dtype, sparse))
    if sparse
    else asarray(np.indices(dimensions, dtype))
  )


@_op
def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
  """Flat indices of index arrays in an array of shape `dims`; a traced index out of range
  needs mode='clip' or 'wrap' (it cannot be checked while tracing)."""
  if not builtins.any(isinstance(i, Tracer) for i in multi_index):
    return asarray(
      np.ravel_multi_index(tuple(np.asarray(i) for i in multi_index), dims, mode, order)
    )
  if mode == "raise":
    raise NotSupportedError("ravel_multi_index of traced indices needs mode='clip' or 'wrap'")
  order_dims = list(range(len(dims)))[::-1] if order == "F" else list(range(len(dims)))
  flat = None
  for k in order_dims:
    i = astype(_as_array(multi_index[k]), "int64")
    i = clip(i, 0, dims[k] - 1) if mode == "clip" else mod(i, dims[k])
    flat = i if flat is None else add(multiply(flat, dims[k]), i)
  return flat


@_op
def ldexp(x1, x2):
  """x1 * 2**x2 (x2 integers)."""
  x1 = _float(x1)
  return multiply(x1, power(asarray(2.0, aval_of(x1).dtype), astype(x2, aval_of(x1).dtype)))


@_op
def spacing(x):
  """The distance from x to the next float away from zero (negative for negative x)."""
  x = _float(x)
  out = subtract(nextafter(x, copysign(full_like(x, np.inf), x)), x)
  tiny = full_like(x, np.finfo(aval_of(x).dtype).smallest_subnormal)
  return where(equal(x, 0), tiny, out)  # numpy: spacing(-0.0) is the positive one


@_op
def histogram_bin_edges(a, bins=10, range=None, weights=None):
  return histogram(a, bins, range)[1]


@_op
def array_equiv(a1, a2):
  """Whether a1 and a2 are equal after broadcasting (False when they cannot broadcast)."""
  a1, a2 = _as_array(a1), _as_array(a2)
  try:
    np.broadcast_shapes(aval_of(a1).shape, aval_of(a2).shape)
  except ValueError:
    return asarray(False)
  return all(equal(a1, a2))


@_op
def real_if_close(a, tol=100):
  return _as_array(a)  # real arrays only (complex numbers are not supported)


@_op
def apply_along_axis(func1d, axis, arr, *args, **kwargs):
  """func1d applied to every 1-D slice along `axis` (traced once on one slice and batched,
  not a loop); the result's axes take the place of `axis`, as numpy's."""
  arr = _as_array(arr)
  nd = aval_of(arr).ndim
  axis = int(axis) % nd
  moved = moveaxis(arr, axis, -1)
  lead = aval_of(moved).shape[:-1]
  rows = reshape(moved, (-1, aval_of(moved).shape[-1]))
  one = ShapedArray(aval_of(rows).shape[1:], aval_of(rows).dtype)
  program, captured, _ = trace_flat(lambda row: [_as_array(func1d(row, *args, **kwargs))], [one])
  count = aval_of(rows).shape[0]
  batched = batch_program(program, [True] + [False] * len(captured), count)
  (out,) = eval_program(batched, rows, *captured)
  result = aval_of(out).shape[1:]
  out = reshape(out, lead + result)
  k = len(result)
  return moveaxis(out, list(range(len(lead), len(lead) + k)), list(range(axis, axis + k)))


def _window(name):
  def window(M, *args):
    return asarray(getattr(np, name)(M, *args))

  window.__name__ = name
  window.__doc__ = f"numpy.{name} (a constant array)."
  return window


hamming, hanning, blackman, bartlett, kaiser = map(
  _window, ("hamming", "hanning", "blackman", "bartlett", "kaiser")
)


@_op
def vander(x, N=None, increasing=False):
  x = ravel(_as_array(x))
  n = shape(x)[0] if N is None else int(N)
  cols = [power(x, k) if k else ones_like(x) for k in range(n)]
  return stack(cols if increasing else cols[::-1], 1)


@_op
def matrix_transpose(x):
  x = _as_array(x)
  if aval_of(x).ndim < 2:
    raise ShapeError(f"matrix_transpose needs rank >= 2, got {aval_of(x).shape}")
  return swapaxes(x, -1, -2)


@_op
def permute_dims(a, axes=None):
  return transpose(a, axes)


@_op
def vecdot(x1, x2, axis=-1):
  return sum(multiply(x1, x2), axis)


@_op
def matvec(x1, x2):
  return squeeze(matmul(x1, expand_dims(x2, -1)), -1)


@_op
def vecmat(x1, x2):
  return squeeze(matmul(expand_dims(x1, -2), x2), -2)


@_op
def nanvar(
  a, axis=None, keepdims=False, ddof=0, *, dtype=None, where=None, mean=None, correction=None
):
  """numpy.nanvar: `var` of the entries that are not NaN (the keywords as `var`'s)."""
  ddof = _correction(ddof, correction)
  a = _float(a) if dtype is None else asarray(a, dtype)
  ok = logical_not(_nan_mask(a))
  if where is not None:
    ok = logical_and(ok, broadcast_to(asarray(where, "bool"), aval_of(a).shape))
  count = sum(P.convert(ok, aval_of(a).dtype), axis, True)
  mean_ = divide(sum(a, axis, True, where=ok), count) if mean is None else _as_array(mean)
  d = _where(ok, subtract(a, mean_), zeros_like(a))
  dof = subtract(count, float(ddof))
  out = _where(
    greater(dof, 0), divide(sum(multiply(d, d), axis, True), dof), full_like(dof, np.nan)
  )  # no degrees of freedom left: NaN, as numpy
  return out if keepdims else squeeze(out, _axes(axis, aval_of(a).ndim))


@_op
def nanstd(
  a, axis=None, keepdims=False, ddof=0, *, dtype=None, where=None, mean=None, correction=None
):
  return sqrt(
    nanvar(a, axis, keepdims, ddof, dtype=dtype, where=where, mean=mean, correction=correction)
  )


@_op
def nancumsum(a, axis=None):
  a = _nans_as(a, 0)
  return cumsum(ravel(a) if axis is None else a, 0 if axis is None else axis)


@_op
def nancumprod(a, axis=None):
  a = _nans_as(a, 1)
  return cumprod(ravel(a) if axis is None else a, 0 if axis is None else axis)


@_op
def nanargmax(a, axis=None, keepdims=False):
  """numpy.nanargmax. A slice of NaNs only: ValueError for a known array, as numpy; -1 for
  a traced one (its values are not known while tracing), as JAX."""
  return _nan_arg(a, axis, keepdims, argmax, -np.inf)


@_op
def nanargmin(a, axis=None, keepdims=False):
  """numpy.nanargmin (a slice of NaNs only: as `nanargmax`)."""
  return _nan_arg(a, axis, keepdims, argmin, np.inf)


def _nan_arg(a, axis, keepdims, arg, fill):
  a = _float(a)
  found = arg(_nans_as(a, fill), axis, keepdims)
  none = all(_nan_mask(a), axis, keepdims)
  if not isinstance(none, Tracer):
    if np.any(none):
      raise ValueError("All-NaN slice encountered")
    return found
  return where(none, full_like(found, -1), found)


@_op
def isposinf(x):
  x = _as_array(x)
  return P.eq(x, full_like(x, np.inf)) if aval_of(x).dtype in FLOAT_DTYPES else isinf(x)


@_op
def isneginf(x):
  x = _as_array(x)
  return P.eq(x, full_like(x, -np.inf)) if aval_of(x).dtype in FLOAT_DTYPES else isinf(x)


@_op
def isreal(x):
  return P.full(shape(x), True, "bool")


@_op
def iscomplex(x):
  return P.full(shape(x), False, "bool")


def isrealobj(x):
  return True


def iscomplexobj(x):
  return False


def isscalar(element):
  return np.isscalar(element)


@_op
def unstack(x, axis=0):
  x = _as_array(x)
  ax = _axes(axis, aval_of(x).ndim)[0]
  return tuple(getitem(x, (builtins.slice(None),) * ax + (k,)) for k in range(shape(x)[ax]))


s_, index_exp, ix_ = np.s_, np.index_exp, np.ix_
issubdtype, promote_types, can_cast, isdtype = (
  np.issubdtype,
  np.promote_types,
  np.can_cast,
  np.isdtype,
)
float_ = double = np.float64
single = np.float32
int_ = int64


# ndarray methods of the functions above

# ---------------------------------------------------------------------------------------
# Sign bits, histograms, counts, rank and least squares


@_op
def unravel_index(indices, shape, order="C"):
  """The coordinates of flat indices in an array of `shape` (a tuple of int64 arrays)."""
  if order not in ("C", "F"):
    raise PrimcError(f"unravel_index: order must be 'C' or 'F', got {order!r}")
  if not isinstance(indices, Tracer):
    return tuple(asarray(c) for c in np.unravel_index(indices, shape, order))
  flat = astype(indices, "int64")
  dims = list(shape) if order == "C" else list(shape)[::-1]
  coords = []
  for n in dims[::-1]:  # the fastest-varying dimension first
    coords.append(mod(flat, n))
    flat = floor_divide(flat, n)
  coords = coords[::-1]
  return tuple(coords if order == "C" else coords[::-1])


@_op
def delete(arr, obj, axis=None):
  """arr without the entries `obj` (constant ints, slices or masks) along `axis`
  (flattened when None)."""
  arr = _as_array(arr)
  if axis is None:
    arr, axis = reshape(arr, (-1,)), 0
  n = aval_of(arr).shape[axis]
  return take(arr, np.delete(np.arange(n), obj), axis=axis)


@_op
def insert(arr, obj, values, axis=None):
  """`values` inserted before position `obj` (one int) along `axis` (flattened when None),
  broadcast as numpy does for one position."""
  arr = _as_array(arr)
  if axis is None:
    arr, axis = reshape(arr, (-1,)), 0
  if not isinstance(obj, (int, np.integer)):
    raise NotSupportedError(
      "insert at several positions (a sequence or slice obj) is not "
      "supported: insert at one int position, repeatedly"
    )
  shape = aval_of(arr).shape
  axis = axis % len(shape)
  at = int(obj) + (shape[axis] if obj < 0 else 0)
  if not 0 <= at <= shape[axis]:
    raise PrimcIndexError(
      f"insert: index {obj} is out of bounds for axis {axis} of size {shape[axis]}"
    )
  values = array(values)
  values = reshape(values, (1,) * (len(shape) - aval_of(values).ndim) + aval_of(values).shape)
  values = moveaxis(values, 0, axis)
  block = list(shape)
  block[axis] = aval_of(values).shape[axis]
  values = astype(broadcast_to(values, block), aval_of(arr).dtype)
  before = take(arr, np.arange(at), axis=axis)
  after = take(arr, np.arange(at, shape[axis]), axis=axis)
  return concatenate([before, values, after], axis)


def _first_true(mask, size: int, fill_value):
  """The flat positions of the first `size` true entries of the 1-D bool `mask`, in order,
  padded with `fill_value`: each found where the running count of trues reaches it."""
  n = aval_of(mask).shape[0]
  count = cumsum(astype(mask, "int64"))
  grid = (size, n)
  hits = logical_and(
    P.broadcast_in_dim(mask, grid, (1,)),
    equal(P.broadcast_in_dim(count, grid, (1,)), add(P.iota(grid, 0, "int64"), 1)),
  )
  positions = sum(where(hits, P.iota(grid, 1, "int64"), 0), 1)
  return where(any(hits, 1), positions, fill_value)


def _static_size(name, size, a):
  """Whether `a` is traced (then `size` must be given: the result's length would depend
  on the values)."""
  if isinstance(a, Tracer) and size is None:
    raise NotSupportedError(
      f"{name} of a traced array without size= (its length depends on "
      f"the values): pass size= (and fill_value=), as in JAX"
    )
  return isinstance(a, Tracer)


def _padded(values, size, fill_value):
  """numpy's result cut or padded to `size` (JAX's size= on concrete arrays)."""
  values = np.asarray(values)
  if size is None:
    return values
  out = np.full((size,) + values.shape[1:], 0 if fill_value is None else fill_value, values.dtype)
  out[: builtins.min(size, len(values))] = values[:size]
  return out


@_op
def flatnonzero(a, *, size=None, fill_value=None):
  """The flat indices of a's nonzero entries (int64); traced, the first `size` of them,
  padded with fill_value (0 by default), as JAX."""
  if not _static_size("flatnonzero", size, a):
    return asarray(_padded(np.flatnonzero(np.asarray(a)), size, fill_value))
  flat = ravel(_as_array(a))
  return _first_true(
    not_equal(flat, zeros_like(flat)), int(size), 0 if fill_value is None else fill_value
  )


@_op
def nonzero(a, *, size=None, fill_value=None):
  """A tuple of index arrays, one per dimension, of a's nonzero entries (see flatnonzero
  for size= and fill_value=, which may be a tuple, one per dimension)."""
  shape = aval_of(_as_array(a)).shape
  fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * len(shape)
  if not _static_size("nonzero", size, a):
    return tuple(asarray(_padded(i, size, f)) for i, f in zip(np.nonzero(np.asarray(a)), fills))
  flat = flatnonzero(a, size=size, fill_value=-1)
  coords = unravel_index(maximum(flat, 0), shape)
  return tuple(where(equal(flat, -1), 0 if f is None else f, c) for c, f in zip(coords, fills))


@_op
def argwhere(a, *, size=None, fill_value=None):
  """The indices of a's nonzero entries as rows (n, ndim); size= as nonzero's."""
  if not _static_size("argwhere", size, a):
    return asarray(_padded(np.argwhere(np.asarray(a)), size, fill_value))
  return stack(nonzero(a, size=size, fill_value=fill_value), axis=-1)


@_op
def unique(
  ar,
  return_index=False,
  return_inverse=False,
  return_counts=False,
  axis=None,
  *,
  equal_nan=True,
  sorted=True,
  size=None,
  fill_value=None,
):
  """The sorted distinct values of ar (flattened), NaNs one value unless `equal_nan` is
  False (numpy's; `sorted=False` allows any order, and gets numpy's sorted one). Traced:
  the first `size` of them, padded with fill_value (the smallest value by default), as
  JAX; return_index, return_inverse, return_counts and axis are supported on constant
  arrays only."""
  extra = return_index or return_inverse or return_counts or axis is not None
  if not isinstance(ar, Tracer):
    out = np.unique(
      np.asarray(ar), return_index, return_inverse, return_counts, axis, equal_nan=equal_nan
    )
    if size is not None and not extra:
      if fill_value is None:
        fill_value = out.min() if out.size else 0
      out = _padded(out, size, fill_value)
    return tuple(asarray(o) for o in out) if extra else asarray(out)
  _static_size("unique", size, ar)
  if extra:
    raise NotSupportedError(
      "unique of a traced array with return_index, return_inverse, "
      "return_counts or axis is not supported"
    )
  s = sort(ravel(_as_array(ar)))  # (NaNs last)
  differs = not_equal(s[1:], s[:-1])
  if equal_nan and aval_of(s).dtype in FLOAT_DTYPES:  # a NaN after a NaN is the same value
    differs = logical_and(differs, logical_not(logical_and(isnan(s[1:]), isnan(s[:-1]))))
  first = concatenate([P.full((1,), True, "bool"), differs])
  idx = _first_true(first, int(size), -1)
  values = take(s, maximum(idx, 0))
  fill = s[0] if fill_value is None else fill_value
  return where(equal(idx, -1), fill, values)


@_op
def signbit(x):
  """Whether x's sign bit is set (true for -0.0 and -nan); x < 0 for integers."""
  x = _as_array(x)
  if aval_of(x).dtype not in FLOAT_DTYPES:
    return P.lt(x, zeros_like(x)) if aval_of(x).dtype != "bool" else zeros_like(x)
  return P.signbit_p.bind(x)


@_op
def copysign(x1, x2):
  """|x1| with the sign (bit) of x2; floats, as numpy (integers become float64)."""
  x1, x2 = _promote_float(x1, x2)
  magnitude = abs(x1)
  return where(signbit(x2), negative(magnitude), magnitude)


nextafter = _binary_float(P.nextafter_p, "nextafter")


def _bin_edges(a, bins, range_):
  """numpy.histogram's edges: `bins` + 1 of them, evenly from range_ (or a's smallest to
  largest, widened by 1/2 each way when those are equal), as numpy.linspace computes them,
  in a's float dtype. Compiled, the edges of a traced range may differ from numpy's in the
  last bit (a fused multiply-add), and so may the bin of a value exactly on one."""
  dtype = aval_of(a).dtype
  if range_ is not None:  # constants: numpy's own
    lo, hi = float(range_[0]), float(range_[1])
    if lo > hi:
      raise PrimcError(f"histogram: max must be larger than min in range, got {range_}")
    if lo == hi:
      lo, hi = lo - 0.5, hi + 0.5
    return asarray(np.linspace(lo, hi, bins + 1).astype(dtype))
  lo, hi = min(a), max(a)  # the edges move with a's extremes (as in JAX): differentiable
  same = equal(lo, hi)
  lo, hi = where(same, subtract(lo, 0.5), lo), where(same, add(hi, 0.5), hi)
  k = P.iota((bins + 1,), 0, dtype)
  edges = add(multiply(k, divide(subtract(hi, lo), float(bins))), lo)
  edges = where(equal(k, float(bins)), P.broadcast_in_dim(hi, (bins + 1,), ()), edges)
  return astype(edges, dtype)


@_op
def histogram(a, bins=10, range=None, density=None, weights=None):
  """numpy.histogram (a flattened): counts (or weights summed) per bin, and the edges.
  Bins are [e_k, e_k+1), the last one closed; values outside the edges are not counted.
  Differentiable in `weights` (the counts are piecewise constant in a)."""
  a = ravel(_float(a))
  if isinstance(bins, (int, np.integer)):
    if bins < 1:
      raise PrimcError(f"histogram: bins must be positive, got {bins}")
    edges = _bin_edges(a, int(bins), range)
  elif isinstance(bins, str):
    raise NotSupportedError(
      f"histogram with bins={bins!r} (an estimator) is not supported: "
      f"give a number of bins or their edges"
    )
  else:
    edges = ravel(_float(bins))
  n = aval_of(edges).shape[0] - 1
  below = P.convert(
    less_equal(
      P.broadcast_in_dim(edges, (aval_of(a).shape[0], n + 1), (1,)),
      P.broadcast_in_dim(a, (aval_of(a).shape[0], n + 1), (0,)),
    ),
    "int64",
  )
  position = sum(below, -1) - 1  # edges at or below: the bin, -1 below the first edge
  last = take(edges, n)
  position = where(equal(a, last), n - 1, position)  # the last bin is closed
  hits = equal(
    P.broadcast_in_dim(position, (aval_of(a).shape[0], n), (0,)),
    P.iota((aval_of(a).shape[0], n), 1, "int64"),
  )
  if weights is None:
    hist = sum(P.convert(hits, "int64"), 0)
  else:
    w = ravel(_as_array(weights))
    hist = sum(
      multiply(
        P.convert(hits, aval_of(w).dtype if aval_of(w).dtype in FLOAT_DTYPES else "int64"),
        P.broadcast_in_dim(w, (aval_of(a).shape[0], n), (0,)),
      ),
      0,
    )
  if density:
    widths = subtract(edges[1:], edges[:-1])
    hist = divide(divide(hist, sum(hist)), widths)
  return hist, edges


@_op
def bincount(x, weights=None, minlength=0):
  """numpy.bincount of constant non-negative integers x (its length depends on their
  values: traced x is not supported); differentiable in `weights`, summed in float64."""
  if isinstance(x, Tracer):
    raise NotSupportedError(
      "bincount of a traced array (its length depends on the values): "
      "pass the indices as a numpy array"
    )
  counts = np.bincount(np.asarray(x), minlength=minlength)  # numpy's checks and length
  if weights is None:
    return asarray(counts)
  w = _float(weights)
  if aval_of(w).shape != np.shape(x):
    raise PrimcError(f"bincount: weights of shape {aval_of(w).shape} for x of shape {np.shape(x)}")
  return _At(zeros(counts.shape, "float64"))[np.asarray(x)].add(astype(w, "float64"))


def _last_axis_kept(t):
  """A per-matrix tolerance against (..., k) singular values: a scalar, or (...) -> (..., 1)."""
  t = _as_array(t)
  return expand_dims(t, -1) if aval_of(t).ndim else t


@_linalg_op
def _matrix_power(a, n):
  """a^n for an int n (batched): squarings and products; n < 0 powers inv(a); n = 0 the
  identity."""
  if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
    raise PrimcError(f"linalg.matrix_power: the exponent must be an int, got {n!r}")
  a = _as_array(a)
  shape = aval_of(a).shape
  if len(shape) < 2 or shape[-1] != shape[-2]:
    raise PrimcError(f"linalg.matrix_power takes square matrices, got {aval_of(a)}")
  if n == 0:
    return broadcast_to(eye(shape[-1], dtype=aval_of(a).dtype), shape)
  base, n = (_inv(a), -int(n)) if n < 0 else (a, int(n))
  out = None
  while n:
    if n & 1:
      out = base if out is None else matmul(out, base)
    n >>= 1
    if n:
      base = matmul(base, base)
  return out


@_linalg_op
def _multi_dot(arrays):
  """numpy.linalg.multi_dot: matmul of the chain, left to right (a 1-D first array is a
  row, a 1-D last one a column, as numpy)."""
  arrays = [_as_array(a) for a in arrays]
  if len(arrays) < 2:
    raise PrimcError(f"linalg.multi_dot needs at least two arrays, got {len(arrays)}")
  out = arrays[0]
  for a in arrays[1:]:
    out = matmul(out, a)
  return out


@_linalg_op
def _cond(x, p=None):
  """The condition number: largest over smallest singular value (p None or 2; -2 the
  inverse), else norm(x, p) norm(inv(x), p) over the last two axes. A singular matrix's
  is inf, as numpy's, except for the norms of its inverse: there inv raises
  LinAlgError (numpy's cond ignores the failed inverse)."""
  x = _float(x)
  if p is None or p in (2, -2):
    s = _svdvals(x)
    big, small = take(s, 0, axis=-1), take(s, -1, axis=-1)
    r = divide(big, small) if p != -2 else divide(small, big)
  else:
    axes = (-2, -1)
    r = multiply(norm(x, p, axis=axes), norm(_inv(x), p, axis=axes))
  # numpy's: a NaN from a singular matrix (0/0) is inf, unless x itself has NaNs
  return where(
    logical_and(isnan(r), logical_not(any(isnan(x), axis=(-2, -1)))), full_like(r, np.inf), r
  )


def _linalg_name(name: str):
  """Names the decorated function `name` (its linalg name) where its own name would shadow
  another of this module."""

  def rename(fn):
    fn.__name__ = name
    return fn

  return rename


@_linalg_op
@_linalg_name("matrix_norm")
def _norm_of_matrices(x, keepdims=False, ord="fro"):
  return norm(x, ord, axis=(-2, -1), keepdims=keepdims)


@_linalg_op
@_linalg_name("vector_norm")
def _norm_of_vectors(x, axis=None, keepdims=False, ord=2):
  """numpy.linalg.vector_norm: over `axis` (every axis when None, the array as one
  vector)."""
  x = _as_array(x)
  ndim = aval_of(x).ndim
  axes = _axes(axis, ndim)
  rest = [k for k in range(ndim) if k not in axes]
  flat = reshape(
    transpose(x, rest + list(axes)), [aval_of(x).shape[k] for k in rest] + [-1]
  )  # the axes as one vector
  out = norm(flat, ord, axis=-1)
  if keepdims:
    out = reshape(out, [1 if k in axes else n for k, n in enumerate(aval_of(x).shape)])
  return out


def _square_part(x, offset):
  """The (..., L, L) block of x whose diagonal is x's diagonal at `offset`."""
  m, n = aval_of(x).shape[-2:]
  x = x[..., :, offset:] if offset >= 0 else x[..., -offset:, :]
  size = builtins.max(0, builtins.min(aval_of(x).shape[-2:]))
  return x[..., :size, :size]


@_linalg_op
def _diagonal(x, offset=0):
  """numpy.linalg.diagonal: the diagonals of the last two axes (batched)."""
  return einsum("...ii->...i", _square_part(_as_array(x), offset))


@_linalg_op
def _trace(x, offset=0, dtype=None):
  """numpy.linalg.trace: numpy.trace over the last two axes (batched)."""
  return trace(x, offset, -2, -1, dtype)


@_linalg_op
def _tensorinv(a, ind=2):
  a = _as_array(a)
  shape = aval_of(a).shape
  rows, cols = shape[:ind], shape[ind:]
  inverse = _inv(reshape(a, (int(np.prod(rows)), int(np.prod(cols)))))
  return reshape(inverse, cols + rows)


@_linalg_op
def _tensorsolve(a, b, axes=None):
  """x with tensordot(a, x, x.ndim) = b (numpy's reshape to a square system)."""
  a, b = _as_array(a), _as_array(b)
  if axes is not None:
    order = [k for k in range(aval_of(a).ndim) if k not in [k % aval_of(a).ndim for k in axes]] + [
      k % aval_of(a).ndim for k in axes
    ]
    a = transpose(a, order)
  x_shape = aval_of(a).shape[aval_of(b).ndim :]
  n = int(np.prod(x_shape))
  x = _solve(reshape(a, (-1, n)), ravel(b))
  return reshape(x, x_shape)


@_linalg_op
def _matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
  """numpy.linalg.matrix_rank: singular values above tol (default: the largest times
  rtol, itself max(m, n) eps by default); for a vector, 1 unless it is all zeros."""
  A = _float(A)
  a = aval_of(A)
  if a.ndim < 2:
    return P.convert(any(not_equal(A, 0.0)), "int64")
  s = stop_gradient(_svdvals(A))
  if tol is None:
    r = builtins.max(a.shape[-2:]) * np.finfo(a.dtype).eps if rtol is None else rtol
    cut = multiply(max(s, -1, keepdims=True), _last_axis_kept(r))
  else:
    cut = _last_axis_kept(tol)
  return sum(P.convert(greater(s, cut), "int64"), -1)


@_linalg_op
def _lstsq(a, b, rcond=None):
  """numpy.linalg.lstsq: (x, residuals, rank, s), x = pinv(a) b with singular values
  below rcond times the largest cut (default max(m, n) eps). The residuals are the sums of
  squares of b - a x per column, always (JAX's choice: numpy returns an empty array when
  the rank is below n or m <= n, a shape that depends on the values)."""
  a, b = _float(a), _float(b)
  if aval_of(a).ndim != 2 or aval_of(b).ndim not in (1, 2):
    raise PrimcError(
      f"linalg.lstsq takes a 2-D a and a 1-D or 2-D b, got {aval_of(a)} and {aval_of(b)}"
    )
  m, n = aval_of(a).shape
  cut = builtins.max(m, n) * np.finfo(aval_of(a).dtype).eps if rcond is None else float(rcond)
  x = matmul(_pinv(a, rcond=cut), b)
  r = subtract(b, matmul(a, x))
  resid = sum(multiply(r, r), 0)
  s = _svdvals(a)
  rank = _matrix_rank(a, tol=multiply(max(stop_gradient(s)), cut))
  return x, resid if aval_of(b).ndim == 2 else reshape(resid, (1,)), rank, s


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


# In-place updates while tracing: `y[idx] = v` on an array made in the traced function is
# functionalized into `y = y.at[idx].set(v)` (the tracer takes the new value), as
# PyTorch's functionalization rewrites mutations. An array numpy may make a view of
# another records its base and the view ops from it: a write into the view writes
# through into the base (each op undone: a slice's update is the base's `.at[].set`, a
# reshape's the reshape back, a transpose's the inverse permutation), and a view read
# after its base changed is taken again from it, so every name sees every write as in
# numpy. Whether numpy makes a view or a copy (a basic slice or an integer array; a
# reshape of a transposed array) numpy itself decides, on an array of the base's shape.

# numpy's floating-point error handling governs numpy's own loops (plain values, the
# interpreter); compiled code gives IEEE results (inf, nan) without raising or warning
seterr, geterr, errstate = np.seterr, np.geterr, np.errstate
seterrcall, geterrcall = np.seterrcall, np.geterrcall

_VIEWS = (
  "getitem",
  "reshape",
  "transpose",
  "moveaxis",
  "expand_dims",
  "squeeze",
  "ravel",
  "swapaxes",
  "broadcast_to",
)
_RAW_VIEWS = {name: globals()[name] for name in _VIEWS}  # (not recording views)


def _viewing(fn):
  name = fn.__name__

  @functools.wraps(fn)
  def view(x, *args, **kwargs):
    out = fn(x, *args, **kwargs)
    if (
      type(x) is Tracer
      and type(out) is Tracer
      and out is not x
      and not (name == "getitem" and _copies(args[0], aval_of(x).ndim))
    ):
      root, version, path = x.base or (x, x.version, ())
      out.base = (root, version, path + ((name, args, kwargs),))
      if (
        x.base is not None and name in ("reshape", "ravel") and (_numpy_views(out) == "copy")
      ):  # (numpy copies a transposed array's reshape)
        out.base = None
    return out

  return view


def _copies(idx, ndim: int) -> bool:
  """Whether numpy's x[idx] is a copy: an integer or boolean array (or list, or traced)
  among the index, or an integer for every dimension (a scalar)."""
  entries = idx if isinstance(idx, tuple) else (idx,)
  if not builtins.all(
    e is None
    or e is Ellipsis
    or isinstance(e, builtins.slice)
    or (isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_)))
    for e in entries
  ):
    return True
  return (
    Ellipsis not in entries
    and builtins.sum(isinstance(e, (int, np.integer)) for e in entries) == ndim
  )


for _name in _VIEWS:
  globals()[_name] = _viewing(globals()[_name])
Tracer.__getitem__ = getitem
Tracer.reshape = reshape
Tracer.ravel, Tracer.squeeze, Tracer.swapaxes = ravel, squeeze, swapaxes  # views, as numpy's


def _numpy_view(probe, name, args, kwargs):
  """numpy's op `name` on a plain array (a traced argument: an index array, a copy)."""
  if builtins.any(isinstance(a, Tracer) for a in tree_flatten((list(args), kwargs))[0]):
    return None
  if name == "getitem":
    return probe[args[0]]
  if name == "transpose" and "perm" in kwargs:
    kwargs = {"axes": kwargs["perm"]}
  if name == "reshape" and len(args) > 1:  # reshape(x, 2, 3)
    args = (args,)
  return getattr(np, name)(probe, *args, **kwargs)


def _numpy_views(view) -> str:
  """ "view", "copy" or "read-only": what numpy's same ops on the base would give."""
  root, _, path = view.base
  probe = np.empty(aval_of(root).shape, np.dtype(aval_of(root).dtype))
  out = probe
  for name, args, kwargs in path:
    try:
      out = _numpy_view(out, name, args, kwargs)
    except Exception:
      return "copy"  # (an op numpy refuses: primc's only, never a view of numpy's)
    if out is None or not isinstance(out, np.ndarray) or not np.shares_memory(out, probe):
      return "copy"
  return "view" if out.flags.writeable else "read-only"


def _replayed(root, path):
  out = root
  for name, args, kwargs in path:
    out = _RAW_VIEWS[name](out, *args, **kwargs)
  return out


def _undone(x, name, args, kwargs, new):
  """x's new value where its view `name(x, *args, **kwargs)` took the value `new`."""
  if name == "getitem":
    return index_update(x, args[0], new, "set")
  if name == "transpose":
    axes = kwargs.get("axes", kwargs.get("perm", args[0] if args else None))
    nd = aval_of(x).ndim
    axes = tuple(reversed(range(nd))) if axes is None else tuple(int(a) % nd for a in axes)
    return _RAW_VIEWS["transpose"](new, tuple(int(i) for i in np.argsort(axes)))
  if name == "moveaxis":
    source, destination = (list(args) + [kwargs.get("source"), kwargs.get("destination")])[:2]
    return _RAW_VIEWS["moveaxis"](new, destination, source)
  if name == "swapaxes":
    return _RAW_VIEWS["swapaxes"](new, *args, **kwargs)
  return _RAW_VIEWS["reshape"](new, aval_of(x).shape)  # reshape, ravel, (expand_)dims


def _written_back(root, path, new):
  """The base's new value where the view `path` of it took the value `new`."""
  (name, args, kwargs), rest = path[0], path[1:]
  if rest:
    new = _written_back(_RAW_VIEWS[name](root, *args, **kwargs), rest, new)
  return _undone(root, name, args, kwargs, new)


def _refresh_view(view) -> None:
  """A view read after its base changed: its value again from the base (numpy's view
  sees the change), or no view any more (numpy's ops made a copy)."""
  root, _, path = view.base
  if _numpy_views(view) == "copy":
    view.base = None
    return
  fresh = _replayed(root, path)
  view.ir_var, view.weak, view.concrete = fresh.ir_var, False, fresh.concrete
  view.base = (root, root.version, path)


refresh_view[0] = _refresh_view


def _write(self, new, what: str) -> None:
  """`self` takes the value `new` in place: through into its base where it is numpy's
  view of one."""
  if self.base is not None:
    kind = _numpy_views(self)
    if kind == "read-only":
      raise PrimcError(
        f"{what} into a read-only view (numpy's broadcast_to gives one), at {user_source()}"
      )
    if kind == "copy":
      self.base = None
    else:
      root, _, path = self.base
      if root.builder is not self.builder:
        raise PrimcError(
          f"{what} into a view of an array of an enclosing traced function "
          f"(it is closed over) is not supported: return the updated value "
          f"with x.at[idx].set(v), at {user_source()}"
        )
      new_root = _written_back(root, path, new)
      root.ir_var, root.weak, root.version = new_root.ir_var, False, root.version + 1
      root.concrete = new_root.concrete
      self.base = (root, root.version, path)
  self.ir_var, self.weak, self.version = new.ir_var, False, self.version + 1
  self.concrete = new.concrete


def _setitem(self, idx, value):
  """`x[idx] = v` on a traced array: x takes the value `x.at[idx].set(v)`."""
  new = index_update(self, idx, value, "set")
  if type(new) is not Tracer or new.builder is not self.builder:
    raise PrimcError(
      f"x[idx] = v into an array of an enclosing traced function (it is "
      f"closed over) is not supported: return the updated value with "
      f"x.at[idx].set(v), at {user_source()}"
    )
  _write(self, new, "x[idx] = v")


Tracer.__setitem__ = _setitem


def _in_place(op, name):
  """`x op= y` on a traced array: x takes the value of `x op y`, in x's dtype and shape
  (numpy's in-place casting rule, same_kind), so every name of x sees it."""

  def update(self, other):
    new = op(self, other)
    if new is NotImplemented:
      return NotImplemented
    got, want = aval_of(new), aval_of(self)
    if got.shape != want.shape:
      raise PrimcError(
        f"x {name} y: the result's shape {got.shape} is not x's {want.shape} "
        f"(numpy refuses it too), at {user_source()}"
      )
    if got.dtype != want.dtype:
      if not np.can_cast(got.dtype, want.dtype, "same_kind"):
        raise PrimcTypeError(
          f"x {name} y: a {got.dtype} result cannot be cast to x's "
          f"{want.dtype} in place (numpy's same_kind rule), at "
          f"{user_source()}"
        )
      new = astype(new, want.dtype)
    if new.builder is not self.builder:
      return new  # x is an enclosing function's: rebound, not changed
    _write(self, new, f"x {name} y")
    return self

  return update


for _name, _op_name, _sign in (
  ("__iadd__", "__add__", "+="),
  ("__isub__", "__sub__", "-="),
  ("__imul__", "__mul__", "*="),
  ("__itruediv__", "__truediv__", "/="),
  ("__ipow__", "__pow__", "**="),
):
  setattr(Tracer, _name, _in_place(getattr(Tracer, _op_name), _sign))
_wrap_ops()


def _fftshift(x, axes=None, inverse=False):
  x = _as_array(x)
  shape = aval_of(x).shape
  axes = (
    tuple(range(len(shape)))
    if axes is None
    else ((axes,) if isinstance(axes, (int, np.integer)) else tuple(axes))
  )
  shifts = [(-(shape[a] // 2) if inverse else shape[a] // 2) for a in axes]
  return roll(x, shifts, axes) if axes else x


fft = _Namespace(
  "fft",
  " (numpy's transforms are complex-valued; primc's dtypes are real)",
  fftshift=_front_end_aware(_op(lambda x, axes=None: _fftshift(x, axes))),
  ifftshift=_front_end_aware(_op(lambda x, axes=None: _fftshift(x, axes, inverse=True))),
  fftfreq=np.fft.fftfreq,
  rfftfreq=np.fft.rfftfreq,
)


_COMPLEX_EIGEN = (
  " (a general matrix's eigenvalues are complex; primc's dtypes are real: "
  "eigh and eigvalsh take symmetric matrices)"
)
_LINALG_OPS = (
  _inv,
  _solve,
  _det,
  _slogdet,
  _cholesky,
  _eigh,
  _eigvalsh,
  _qr,
  _solve_triangular,
  _svd,
  _svdvals,
  _pinv,
  _matrix_rank,
  _lstsq,
  _matrix_power,
  _multi_dot,
  _cond,
  _norm_of_matrices,
  _norm_of_vectors,
  _diagonal,
  _trace,
  _tensorinv,
  _tensorsolve,
)
linalg = _Namespace(
  "linalg",
  reasons=dict.fromkeys(("eig", "eigvals"), _COMPLEX_EIGEN),
  **{fn.__name__.split(".")[1]: _front_end_aware(fn) for fn in _LINALG_OPS},
  norm=norm,
  matmul=matmul,
  tensordot=tensordot,
  vecdot=vecdot,
  outer=outer,
  cross=lambda x1, x2, axis=-1: cross(x1, x2, axis=axis),
  matrix_transpose=matrix_transpose,
)


# `from primc.numpy.linalg import solve` (numpy's and autograd's spelling: modules there)
for _name in ("linalg", "fft"):
  sys.modules[f"{__name__}.{_name}"] = globals()[_name]
