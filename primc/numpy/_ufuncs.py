"""Elementwise functions: numpy's ufuncs and their compositions."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from primc import prims as P
from primc.core import FLOAT_DTYPES, PrimcError, PrimcTypeError
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _integer_typed,
  _float,
  _is_python_scalar,
  _op,
  _promote,
  _integer,
  asarray,
  astype,
  broadcast_shapes,
  broadcast_to,
)
from primc.numpy._creation import full_like, ones_like, zeros_like
from primc.trace import Tracer, aval_of


def _unary(prim_fn, name, to_float=True):
  def fn(x):
    return prim_fn(_float(x) if to_float else _as_array(x))

  fn.__name__ = fn.__qualname__ = name
  return _op(fn, recorded=True)


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

  fn.__name__ = fn.__qualname__ = name
  return _op(fn, recorded=True)


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


@_op(recorded=True)
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

  fn.__name__ = fn.__qualname__ = name
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

  fn.__name__ = fn.__qualname__ = name
  return _op(fn)


floor = _rounding(P.floor_p, "floor")
ceil = _rounding(P.ceil_p, "ceil")
trunc = _rounding(P.trunc_p, "trunc")
fix = _rounding(P.trunc_p, "fix")  # (numpy.fix, not a ufunc: no `dtype=`)
rint = _rounding(P.rint_p, "rint")


@_op
def round_(a, decimals=0):
  """numpy.round: halves to even, at `decimals` places (scaled by 10**decimals)."""
  a, decimals = _as_array(a), _integer(decimals, "round's decimals")
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


@_op(recorded="traced")  # (a constant exponent's value chooses: `_is_half`)
def power(x, y):
  """x ** y with numpy's dtypes: a Python exponent keeps a float x's dtype; an integer x
  to a constant non-negative integer power stays an integer (exact, by repeated
  squaring); other integer powers need a float operand."""
  exponent = y
  x, y = _promote(x, y)
  if aval_of(x).dtype in FLOAT_DTYPES:
    if _is_half(exponent):  # numpy's square root for a scalar exponent of 1/2 (its
      return P.sqrt(x)  # `fast_scalar_power`): (-inf) ** 0.5 is nan, (-0.0) ** 0.5 -0.0
    out = P.pow_(x, y)
    if isinstance(exponent, Tracer) and aval_of(exponent).size == 1:  # a traced scalar
      # exponent: where it is 1/2, numpy's nan at -inf (pow's inf), a constant there (a
      # branch of x times nan would give every derivative nan: 0 * nan)
      at = logical_and(equal(exponent, 0.5), equal(x, -np.inf))
      out = where(at, np.nan, out)
    return out
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


def _is_half(y) -> bool:
  """A known exponent of 1/2 that numpy takes as a scalar (a number, a numpy scalar, an
  array of one element; not traced)."""
  return (
    (type(y) is float or isinstance(y, (np.floating, np.ndarray)))
    and np.size(y) == 1
    and float(np.ravel(y)[0]) == 0.5
  )


@_op(recorded=True)
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
  """numpy.where: x where condition holds, else y (with condition alone, `nonzero`: the
  public `where` is `_sorting`'s, which this module's functions cannot import)."""
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


# Elementwise compositions of the ops above (their derivatives, batching and kernels come
# with them). Tests: tests/test_numpy.py.


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

  fn.__name__ = fn.__qualname__ = name
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

  fn.__name__ = fn.__qualname__ = name
  return _op(fn)


left_shift = bitwise_left_shift = _shift(P.shift_left_p, "left_shift")
right_shift = bitwise_right_shift = _shift(P.shift_right_p, "right_shift")


@_op
def fabs(x):
  return P.abs_(_float(x))


def _nan_ignoring(pick, name):
  def fn(x, y):
    x, y = _promote(x, y)
    if aval_of(x).dtype not in FLOAT_DTYPES:  # no NaNs: numpy keeps the dtype
      return pick(x, y)
    return where(_nan_mask(y), x, where(_nan_mask(x), y, pick(x, y)))

  fn.__name__ = fn.__qualname__ = name
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

  op.__name__ = op.__qualname__ = name
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
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
  """numpy.nan_to_num (`copy` is checked and has no effect: primc writes no argument)."""
  if copy is not None and not isinstance(copy, (bool, int, np.bool_, np.integer)):
    raise PrimcTypeError(f"copy must be True, False or None, got {type(copy).__name__}")
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
def ldexp(x1, x2):
  """x1 * 2**x2 (x2 integers, as numpy's: a float exponent is an error)."""
  x1 = _float(x1)
  _integer_typed(x2, "ldexp's exponent", bools=True)
  return multiply(x1, power(asarray(2.0, aval_of(x1).dtype), astype(x2, aval_of(x1).dtype)))


@_op
def spacing(x):
  """The distance from x to the next float away from zero (negative for negative x)."""
  x = _float(x)
  out = subtract(nextafter(x, copysign(full_like(x, np.inf), x)), x)
  tiny = full_like(x, np.finfo(aval_of(x).dtype).smallest_subnormal)
  return where(equal(x, 0), tiny, out)  # numpy: spacing(-0.0) is the positive one


@_op
def real_if_close(a, tol=100):
  return _as_array(a)  # real arrays only (complex numbers are not supported)


@_op
def isposinf(x):
  x = _as_array(x)
  return P.eq(x, full_like(x, np.inf)) if aval_of(x).dtype in FLOAT_DTYPES else isinf(x)


@_op
def isneginf(x):
  x = _as_array(x)
  return P.eq(x, full_like(x, -np.inf)) if aval_of(x).dtype in FLOAT_DTYPES else isinf(x)


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
