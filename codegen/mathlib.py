"""Vectorizable float32/float64 math for generated kernels.

numba lowers `np.exp`/`np.tanh`/... to scalar libm calls, which LLVM cannot vectorize
without SVML; these functions are polynomial approximations written in plain arithmetic
(plus bit casts for exponent manipulation), so loops that call them vectorize. Edge cases
(NaN, ±inf, ±0, overflow, underflow, denormals) are handled by selects, not branches.

Accuracy against numpy (max ulp over dense samples and edge cases; see
`tests/test_mathlib.py` and the table of docs/guide/compiling.md): exp, log ≤ 1.5 ulp;
sin, cos ≤ 2.5 ulp; tanh ≤ 3 ulp.
sin/cos use Cody-Waite reduction, valid for |x| <= 8192 (float32) and 1e6 (float64);
a kernel that uses them counts larger arguments in its loop and, if there are any, runs a
second version of the loop with libm's sin/cos (scalar, rare).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from primc.codegen.kernels import SINCOS_LIMIT  # noqa: F401 (sin/cos's range)

# CACHE: set by codegen.loader, which runs this file as a module of the cache (so numba
# keeps the machine code there, sealed and verified); imported as a package module, False
CACHE = globals().get("CACHE", False)
_OPTS = dict(error_model="numpy", fastmath={"contract"}, cache=CACHE)


def _bitcast(src, dst, dst_ir):
  @intrinsic
  def cast(typingctx, x):
    def codegen(context, builder, signature, args):
      return builder.bitcast(args[0], dst_ir)

    return dst(src), codegen

  return cast


f32_from_bits = _bitcast(types.int32, types.float32, ir.FloatType())
f32_to_bits = _bitcast(types.float32, types.int32, ir.IntType(32))
f64_from_bits = _bitcast(types.int64, types.float64, ir.DoubleType())
f64_to_bits = _bitcast(types.float64, types.int64, ir.IntType(64))

F = np.float32
D = np.float64


@intrinsic
def NONNEG(typingctx, x):
  """`x`, with LLVM told that it is >= 0 (`llvm.assume`): kernels mark loop indices that
  start at a run-time row, so numba's wrap-around of negative indices folds away."""

  def codegen(context, builder, signature, args):
    assume = builder.module.declare_intrinsic(
      "llvm.assume", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(1)])
    )
    builder.call(assume, [builder.icmp_signed(">=", args[0], ir.Constant(args[0].type, 0))])
    return args[0]

  return x(x), codegen


# Element access by address: kernels read and write their table's arrays as
# `LOAD(ptr, offset, np.float32)` / `STORE(ptr, offset, value, np.float32)` (offset in
# elements, computed by the kernel) rather than through `carray` views and multi-dimensional
# indexing, which numba types and lowers at many times the cost (a dot kernel with a
# ten-operation epilogue: 0.60 s -> 0.25 s to compile), with the same machine code.


def _element_pointer(context, builder, ty, signature, args):
  """The address of element `offset` of the array at `ptr` (a pointer, or an address)."""
  (ptr, offset), (ptr_ty, offset_ty) = args[:2], signature.args[:2]
  data = context.get_data_type(ty).as_pointer()
  base = (
    builder.inttoptr(ptr, data) if isinstance(ptr_ty, types.Integer) else builder.bitcast(ptr, data)
  )
  index = context.cast(builder, offset, offset_ty, types.intp)
  return builder.gep(base, [index], inbounds=True)


@intrinsic
def LOAD(typingctx, ptr, offset, dtype):
  """The element at `offset` of the `dtype` array at `ptr` (a pointer or an address)."""
  ty = dtype.instance_type

  def codegen(context, builder, signature, args):
    at = _element_pointer(context, builder, ty, signature, args)
    return context.data_model_manager[ty].from_data(builder, builder.load(at))

  return ty(ptr, offset, dtype), codegen


@intrinsic
def STORE(typingctx, ptr, offset, value, dtype):
  """Writes `value`, converted to `dtype` (as numpy assignment does), at `offset` of the
  `dtype` array at `ptr`."""
  ty = dtype.instance_type

  def codegen(context, builder, signature, args):
    at = _element_pointer(context, builder, ty, signature, args)
    converted = context.cast(builder, args[2], signature.args[2], ty)
    builder.store(context.data_model_manager[ty].as_data(builder, converted), at)
    return context.get_dummy_value()

  return types.none(ptr, offset, value, dtype), codegen


@intrinsic
def ADDRESS(typingctx, ptr):
  """A pointer's address as an int64 (for the products' calls)."""

  def codegen(context, builder, signature, args):
    return builder.ptrtoint(args[0], ir.IntType(64))

  return types.int64(ptr), codegen


def _wrapping(op: str):
  @intrinsic
  def wrapping(typingctx, x, y):
    def codegen(context, builder, signature, args):
      a, b = (context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args))
      return getattr(builder, op)(a, b)  # (no `nsw`: the result wraps, as numpy's)

    return types.int64(x, y), codegen

  return wrapping


# int64 arithmetic that wraps on overflow, as numpy's does: numba's own `+ - *` on signed
# integers carry LLVM's `nsw` flag (overflow is undefined: LLVM may assume a product of
# non-negative values is non-negative and shift it right logically). Kernels compute
# int64 values with these; the LLVM renderer emits the same plain instructions.
WRAP_ADD = _wrapping("add")
WRAP_SUB = _wrapping("sub")
WRAP_MUL = _wrapping("mul")


# ---------------------------------------------------------------------------------------
# exp and expm1: x = n*ln2 + r, |r| <= ln2/2, e^r by its Taylor polynomial, 2^n by bits
# (as two factors, so results down to the denormal range and up to overflow are right).


@njit(**_OPTS)
def _scale_f32(y, n):
  """y * 2^n, as two factors so that neither over- nor underflows on its own."""
  n1 = n >> np.int32(1)
  return (
    y
    * f32_from_bits((n1 + np.int32(127)) << np.int32(23))
    * f32_from_bits((n - n1 + np.int32(127)) << np.int32(23))
  )


@njit(**_OPTS)
def _scale_f64(y, n):
  n1 = n >> np.int64(1)
  return (
    y
    * f64_from_bits((n1 + np.int64(1023)) << np.int64(52))
    * f64_from_bits((n - n1 + np.int64(1023)) << np.int64(52))
  )


@njit(**_OPTS)
def _expm1_poly_f32(r):  # e^r - 1 for |r| <= ln2/2 (degree 7: error < 1e-8 relative)
  p = F(1 / 5040)
  p = p * r + F(1 / 720)
  p = p * r + F(1 / 120)
  p = p * r + F(1 / 24)
  p = p * r + F(1 / 6)
  p = p * r + F(0.5)
  return (p * r) * r + r


@njit(**_OPTS)
def _expm1_poly_f64(r):  # degree 13: error < 1e-17 relative
  p = D(1 / 6227020800)
  p = p * r + D(1 / 479001600)
  p = p * r + D(1 / 39916800)
  p = p * r + D(1 / 3628800)
  p = p * r + D(1 / 362880)
  p = p * r + D(1 / 40320)
  p = p * r + D(1 / 5040)
  p = p * r + D(1 / 720)
  p = p * r + D(1 / 120)
  p = p * r + D(1 / 24)
  p = p * r + D(1 / 6)
  p = p * r + D(0.5)
  return (p * r) * r + r


@njit(**_OPTS)
def _reduce_ln2_f32(x):
  n = np.floor(x * F(1.4426950408889634) + F(0.5))
  r = x - n * F(0.693145751953125)  # ln2 split: 16 high bits exact in n * hi
  r = r - n * F(1.428606765330187e-06)
  return n, r


@njit(**_OPTS)
def _reduce_ln2_f64(x):
  n = np.floor(x * D(1.4426950408889634) + D(0.5))
  r = x - n * D(6.93147180369123816490e-01)  # fdlibm's ln2_hi / ln2_lo
  r = r - n * D(1.90821492927058770002e-10)
  return n, r


@njit(**_OPTS)
def exp_f32(x):
  c = min(max(x, F(-104.0)), F(89.0))
  n, r = _reduce_ln2_f32(c)
  y = _scale_f32(_expm1_poly_f32(r) + F(1.0), np.int32(n))
  return x if x != x else y


@njit(**_OPTS)
def exp_f64(x):
  c = min(max(x, D(-746.0)), D(710.0))
  n, r = _reduce_ln2_f64(c)
  y = _scale_f64(_expm1_poly_f64(r) + D(1.0), np.int64(n))
  return x if x != x else y


@njit(**_OPTS)
def _expm1_pos_f32(y):  # e^y - 1 for 0 <= y <= 20
  n, r = _reduce_ln2_f32(y)
  s = _scale_f32(F(1.0), np.int32(n))
  return s * _expm1_poly_f32(r) + (s - F(1.0))


@njit(**_OPTS)
def _expm1_pos_f64(y):  # e^y - 1 for 0 <= y <= 40
  n, r = _reduce_ln2_f64(y)
  s = _scale_f64(D(1.0), np.int64(n))
  return s * _expm1_poly_f64(r) + (s - D(1.0))


@njit(**_OPTS)
def tanh_f32(x):
  a = min(abs(x), F(9.5))  # tanh(9.5) rounds to 1 in float32
  u = _expm1_pos_f32(F(2.0) * a)
  t = u / (u + F(2.0))
  return x if x != x else math.copysign(t, x)


@njit(**_OPTS)
def tanh_f64(x):
  a = min(abs(x), D(19.5))  # tanh(19.5) rounds to 1 in float64
  u = _expm1_pos_f64(D(2.0) * a)
  t = u / (u + D(2.0))
  return x if x != x else math.copysign(t, x)


# ---------------------------------------------------------------------------------------
# log: x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m-1)/(m+1).


@njit(**_OPTS)
def log_f32(x):
  tiny = x < F(1.1754944e-38)
  xs = x * F(8388608.0) if tiny else x  # denormals: scale by 2^23 first
  bits = f32_to_bits(xs)
  e = ((bits >> np.int32(23)) & np.int32(0xFF)) - np.int32(127)
  m = f32_from_bits((bits & np.int32(0x7FFFFF)) | np.int32(0x3F800000))
  big = m > F(1.4142135)
  m = m * F(0.5) if big else m
  e = e + np.int32(1) if big else e
  e = e - np.int32(23) if tiny else e
  f = m - F(1.0)
  s = f / (F(2.0) + f)
  z = s * s
  p = F(2 / 11)
  p = p * z + F(2 / 9)
  p = p * z + F(2 / 7)
  p = p * z + F(2 / 5)
  p = p * z + F(2 / 3)
  logm = f - s * (f - p * z)  # = 2s + s*z*p, written around f for accuracy
  ef = F(e)
  y = ef * F(0.693145751953125) + (ef * F(1.428606765330187e-06) + logm)
  y = F(np.inf) if x == F(np.inf) else y
  y = -F(np.inf) if x == F(0.0) else y
  return F(np.nan) if x < F(0.0) or x != x else y


@njit(**_OPTS)
def log_f64(x):
  tiny = x < D(2.2250738585072014e-308)
  xs = x * D(18014398509481984.0) if tiny else x  # 2^54
  bits = f64_to_bits(xs)
  e = ((bits >> np.int64(52)) & np.int64(0x7FF)) - np.int64(1023)
  m = f64_from_bits((bits & np.int64(0xFFFFFFFFFFFFF)) | np.int64(0x3FF0000000000000))
  big = m > D(1.4142135623730951)
  m = m * D(0.5) if big else m
  e = e + np.int64(1) if big else e
  e = e - np.int64(54) if tiny else e
  f = m - D(1.0)
  s = f / (D(2.0) + f)
  z = s * s
  p = D(2 / 21)
  p = p * z + D(2 / 19)
  p = p * z + D(2 / 17)
  p = p * z + D(2 / 15)
  p = p * z + D(2 / 13)
  p = p * z + D(2 / 11)
  p = p * z + D(2 / 9)
  p = p * z + D(2 / 7)
  p = p * z + D(2 / 5)
  p = p * z + D(2 / 3)
  logm = f - s * (f - p * z)
  ef = D(e)
  y = ef * D(6.93147180369123816490e-01) + (ef * D(1.90821492927058770002e-10) + logm)
  y = D(np.inf) if x == D(np.inf) else y
  y = -D(np.inf) if x == D(0.0) else y
  return D(np.nan) if x < D(0.0) or x != x else y


# ---------------------------------------------------------------------------------------
# sin and cos: k = round(x * 2/pi), r = x - k*pi/2 (Cody-Waite, three parts), then the
# quadrant picks ±sin(r) or ±cos(r), both evaluated by Taylor polynomials on |r| <= pi/4.


@njit(**_OPTS)
def _sin_poly(r):
  z = r * r
  p = D(-1 / 1307674368000)
  p = p * z + D(1 / 6227020800)
  p = p * z + D(-1 / 39916800)
  p = p * z + D(1 / 362880)
  p = p * z + D(-1 / 5040)
  p = p * z + D(1 / 120)
  p = p * z + D(-1 / 6)
  return r + r * z * p


@njit(**_OPTS)
def _cos_poly(r):
  z = r * r
  p = D(1 / 20922789888000)
  p = p * z + D(-1 / 87178291200)
  p = p * z + D(1 / 479001600)
  p = p * z + D(-1 / 3628800)
  p = p * z + D(1 / 40320)
  p = p * z + D(-1 / 720)
  p = p * z + D(1 / 24)
  return D(1.0) - D(0.5) * z + z * z * p


@njit(**_OPTS)
def _sincos_f64(x, shift):
  """sin(x) for shift=0, cos(x) for shift=1 (|x| <= SINCOS_LIMIT)."""
  k = np.floor(x * D(0.6366197723675814) + D(0.5))
  r = x - k * D(1.57079632673412561417e00)  # fdlibm pio2_1, pio2_2, pio2_3
  r = r - k * D(6.07710050630396597660e-11)
  r = r - k * D(2.02226624871116645580e-21)
  q = (np.int64(k) + shift) & np.int64(3)
  s = _sin_poly(r)
  c = _cos_poly(r)
  v = s if (q & np.int64(1)) == 0 else c
  return -v if q >= 2 else v


# SINCOS_LIMIT (codegen.kernels, which versions loops for larger arguments)


@njit(**_OPTS)
def sin_f64(x):
  """Valid for |x| <= SINCOS_LIMIT (codegen versions loops for larger arguments)."""
  return x if x == 0 or x != x else _sincos_f64(x, np.int64(0))  # sin(±0) = ±0


@njit(**_OPTS)
def cos_f64(x):
  return _sincos_f64(x, np.int64(1)) if x == x else x


@njit(**_OPTS)
def _sin_poly_f32(r):
  z = r * r
  p = F(1 / 362880)
  p = p * z + F(-1 / 5040)
  p = p * z + F(1 / 120)
  p = p * z + F(-1 / 6)
  return r + r * z * p


@njit(**_OPTS)
def _cos_poly_f32(r):
  z = r * r
  p = F(-1 / 3628800)
  p = p * z + F(1 / 40320)
  p = p * z + F(-1 / 720)
  p = p * z + F(1 / 24)
  return F(1.0) - F(0.5) * z + z * z * p


@njit(**_OPTS)
def _sincos_f32(x, shift):
  """float32 arithmetic throughout (16 lanes per AVX-512 vector): |x| <= SINCOS_LIMIT."""
  k = np.floor(x * F(0.63661975) + F(0.5))
  r = x - k * F(1.5703125)  # pi/2 in three parts (8 + 11 + 24 bits)
  r = r - k * F(4.837512969970703125e-4)
  r = r - k * F(7.549789948768648e-8)
  q = (np.int32(k) + shift) & np.int32(3)
  s = _sin_poly_f32(r)
  c = _cos_poly_f32(r)
  v = s if (q & np.int32(1)) == 0 else c
  return -v if q >= 2 else v


@njit(**_OPTS)
def sin_f32(x):
  return x if x == 0 or x != x else _sincos_f32(x, np.int32(0))


@njit(**_OPTS)
def cos_f32(x):
  return _sincos_f32(x, np.int32(1)) if x == x else x


FUNCTIONS = {  # (primitive name, dtype) -> function name in this module
  (name, dtype): f"{name}_{'f32' if dtype == 'float32' else 'f64'}"
  for name in ("exp", "log", "tanh", "sin", "cos")
  for dtype in ("float32", "float64")
}
