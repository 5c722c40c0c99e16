"""The primitive set: each primitive with its shape rule and numpy implementation.

Binary elementwise primitives take operands of identical shape and dtype: numpy
broadcasting and type promotion are resolved by `primc.numpy` while tracing. Each
primitive also has a small binding function (`add(x, y)`, `reduce_sum(x, axes)`) that the
autodiff and batching rules are written in.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from primc.core import (
  ALL_INT_DTYPES,
  FLOAT_DTYPES,
  TRAITS,
  Primitive,
  ShapedArray,
  ShapeError,
  abstract_rules,
  dtype_name,
  impl_rules,
  index_error,
  runner_rules,
  ufunc_rules,
)


def _fail(msg):
  raise ShapeError(msg)


def _check(cond, msg):
  """Raises ShapeError(msg) unless cond; `msg` may be a function making the message (only
  called on failure: shape rules run once per traced operation)."""
  if not cond:
    _fail(msg() if callable(msg) else msg)


def _dt(x) -> str:
  return dtype_name(x)  # (memoized: numpy makes a dtype's name anew, ~2 us)


# ---------------------------------------------------------------------------------------
# Elementwise


def unary_float(x):
  _check(x.dtype in FLOAT_DTYPES, lambda: f"expects a float operand, got {x.dtype}")
  return x


def unary_numeric(x):
  _check(x.dtype != "bool", "expects a numeric operand, got bool")
  return x


def binary_same(x, y):
  _check(x.shape == y.shape, lambda: f"operand shapes differ: {x.shape} vs {y.shape}")
  _check(x.dtype == y.dtype, lambda: f"operand dtypes differ: {x.dtype} vs {y.dtype}")
  return x


def binary_numeric(x, y):
  _check(x.dtype != "bool", "expects numeric operands, got bool")
  return binary_same(x, y)


def binary_float(x, y):
  _check(x.dtype in FLOAT_DTYPES, lambda: f"expects float operands, got {x.dtype}")
  return binary_same(x, y)


def compare_rule(x, y):
  binary_same(x, y)
  return ShapedArray(x.shape, "bool")


def _keep_dtype(fn):
  """numpy may upcast 0-d results to Python-scalar-like types; keep shape and dtype."""
  return lambda *xs: np.asarray(fn(*xs), dtype=xs[0].dtype)


def def_unary(name, np_fn, rule=unary_float, ieee=False, traits=(), linear=None):
  p = Primitive(name, traits=("elementwise",) + traits, linear=linear)
  abstract_rules[p] = rule
  impl_rules[p] = _keep_dtype(_errstate(np_fn) if ieee else np_fn)
  if isinstance(np_fn, np.ufunc):
    ufunc_rules[p] = np_fn
  return p


def def_binary(name, np_fn, rule=binary_numeric, ieee=False, traits=(), linear=None):
  comparison = ("comparison", "nondifferentiable") if rule is compare_rule else ()
  p = Primitive(name, traits=("elementwise",) + comparison + traits, linear=linear)
  abstract_rules[p] = rule
  impl = _errstate(np_fn) if ieee else np_fn
  impl_rules[p] = impl if rule is compare_rule else _keep_dtype(impl)
  if isinstance(np_fn, np.ufunc) and rule is not compare_rule:
    ufunc_rules[p] = np_fn
  return p


def _int_div(x, y):
  with np.errstate(divide="ignore"):
    return np.floor_divide(x, y) if x.dtype.kind in "iu" else np.divide(x, y)


def _errstate(fn):
  def run(*xs, **params):
    with np.errstate(all="ignore"):  # IEEE results (inf/nan), as in the compiled code
      return fn(*xs, **params)

  return run


neg_p = def_unary("neg", np.negative, unary_numeric, linear=(0,))
exp_p = def_unary("exp", np.exp, ieee=True)
log_p = def_unary("log", np.log, ieee=True)
sin_p = def_unary("sin", np.sin, ieee=True)
cos_p = def_unary("cos", np.cos, ieee=True)
tanh_p = def_unary("tanh", np.tanh)
sqrt_p = def_unary("sqrt", np.sqrt, ieee=True)
# numpy's other float functions, each a primitive with its own derivative rule (ad.py) and
# libm lowering (codegen): compositions of the ones above lose accuracy (sinh of small x,
# log2 of powers of two) or derivatives at single points (arcsinh at 0)
tan_p = def_unary("tan", np.tan, ieee=True)
sinh_p = def_unary("sinh", np.sinh, ieee=True)
cosh_p = def_unary("cosh", np.cosh, ieee=True)
arcsin_p = def_unary("arcsin", np.arcsin, ieee=True)
arccos_p = def_unary("arccos", np.arccos, ieee=True)
arctan_p = def_unary("arctan", np.arctan, ieee=True)
arcsinh_p = def_unary("arcsinh", np.arcsinh, ieee=True)
arccosh_p = def_unary("arccosh", np.arccosh, ieee=True)
arctanh_p = def_unary("arctanh", np.arctanh, ieee=True)
log1p_p = def_unary("log1p", np.log1p, ieee=True)
expm1_p = def_unary("expm1", np.expm1, ieee=True)
log2_p = def_unary("log2", np.log2, ieee=True)
log10_p = def_unary("log10", np.log10, ieee=True)
exp2_p = def_unary("exp2", np.exp2, ieee=True)


# scipy.special's functions (primc.scipy.special): scipy computes them here; kernels call
# numba's math (erf, erfc, gammaln, gamma) or codegen/special.py (the rest)
def _scipy_special(name):
  def run(*xs, **params):
    import scipy.special  # at the first use: `import primc` does not import scipy

    return getattr(scipy.special, name)(*params.values(), *xs)

  return run


erf_p = def_unary("erf", _scipy_special("erf"), ieee=True)
erfc_p = def_unary("erfc", _scipy_special("erfc"), ieee=True)
erfinv_p = def_unary("erfinv", _scipy_special("erfinv"), ieee=True)


def _erfcinv(c):
  """scipy's erfcinv, but right at the smallest subnormal (scipy's gives inf there): below
  1e-300 by ndtri_exp (erfc(y) = c is ndtr(-y sqrt 2) = c / 2)."""
  import scipy.special

  out = np.asarray(scipy.special.erfcinv(c))
  tiny = (c > 0) & (c < 1e-300)
  if tiny.any():
    low = -scipy.special.ndtri_exp(np.log(np.where(tiny, c, 1.0)) - np.log(2.0)) / np.sqrt(2)
    out = np.where(tiny, low, out)
  return out


def _gammaln(x):
  """scipy's gammaln, but finite at subnormal x (scipy's is inf there): libm's."""
  import scipy.special

  out = np.asarray(scipy.special.gammaln(x))
  tiny = (x != 0) & (np.abs(x) < np.finfo(np.float64).tiny)
  if tiny.any():
    out = np.where(tiny, np.vectorize(math.lgamma, otypes=[out.dtype])(np.where(tiny, x, 1.0)), out)
  return out


erfcinv_p = def_unary("erfcinv", _erfcinv, ieee=True)
gammaln_p = def_unary("gammaln", _gammaln, ieee=True)
gamma_p = def_unary("gamma", _scipy_special("gamma"), ieee=True)
# psi^(n), the n-th derivative of digamma (n = 0: digamma itself); n is a parameter
polygamma_p = Primitive("polygamma", traits=("elementwise",))
abstract_rules[polygamma_p] = lambda x, *, n: unary_float(x)
impl_rules[polygamma_p] = _errstate(
  lambda x, *, n: np.asarray(_scipy_special("polygamma")(x, n=n), dtype=x.dtype)
)
# scipy.special's other real functions: one primitive, the function's name a parameter
# (`special[name=j0] x`); all operands float, of one shape and dtype. scipy computes them
# here; kernels call scipy's own C functions by name (codegen/special.py, `FOREIGN`).
SPECIAL_ARITY = {
  **dict.fromkeys(
    (
      "j0",
      "j1",
      "y0",
      "y1",
      "i0",
      "i1",
      "i0e",
      "i1e",
      "k0",
      "k1",
      "k0e",
      "k1e",
      "gammasgn",
      "exp1",
      "expi",
      "dawsn",
    ),
    1,
  ),
  **dict.fromkeys(
    ("jv", "yv", "iv", "ive", "kv", "kve", "gammainc", "gammaincc", "gammaincinv", "gammainccinv"),
    2,
  ),
  **dict.fromkeys(("betainc", "betaincinv"), 3),
}
special_p = Primitive("special", traits=("elementwise",))


def _special_rule(*xs, name):
  _check(name in SPECIAL_ARITY, lambda: f"unknown function {name!r}")
  _check(len(xs) == SPECIAL_ARITY[name], lambda: f"{name} takes {SPECIAL_ARITY[name]} operands")
  for x in xs[1:]:
    binary_float(xs[0], x)
  return unary_float(xs[0])


abstract_rules[special_p] = _special_rule
impl_rules[special_p] = _errstate(
  lambda *xs, name: np.asarray(_scipy_special(name)(*xs), dtype=xs[0].dtype)
)
# the sign bit of a float (-0.0 and -nan included), and the next float towards another
signbit_p = Primitive("signbit", traits=("elementwise", "nondifferentiable"))
abstract_rules[signbit_p] = lambda x: ShapedArray(unary_float(x).shape, "bool")
impl_rules[signbit_p] = np.signbit
abs_p = def_unary("abs", np.abs, unary_numeric)
sign_p = def_unary("sign", np.sign, unary_numeric, traits=("nondifferentiable",))
# rounding: piecewise constant, so their derivative is zero wherever it exists
floor_p = def_unary("floor", np.floor, traits=("nondifferentiable",))
ceil_p = def_unary("ceil", np.ceil, traits=("nondifferentiable",))
trunc_p = def_unary("trunc", np.trunc, traits=("nondifferentiable",))
rint_p = def_unary("rint", np.rint, traits=("nondifferentiable",))  # halves to even
stop_gradient_p = def_unary(
  "stop_gradient", lambda x: x, lambda x: x, traits=("nondifferentiable",)
)


# bitwise operations on integers (and bools), numpy's: a shift by a count outside
# [0, bits) gives 0 (left) or the sign's fill (right; arithmetic for signed integers)
def integer_binary(x, y):
  _check(x.dtype not in FLOAT_DTYPES, lambda: f"expects integer or bool operands, got {x.dtype}")
  return binary_same(x, y)


def integer_unary(x):
  _check(x.dtype not in FLOAT_DTYPES, lambda: f"expects an integer or bool operand, got {x.dtype}")
  return x


_INTEGER = ("integer", "nondifferentiable")
bit_and_p = def_binary(
  "bit_and", np.bitwise_and, integer_binary, traits=_INTEGER + ("commutative",)
)
bit_or_p = def_binary("bit_or", np.bitwise_or, integer_binary, traits=_INTEGER + ("commutative",))
bit_xor_p = def_binary(
  "bit_xor", np.bitwise_xor, integer_binary, traits=_INTEGER + ("commutative",)
)
bit_not_p = def_unary("bit_not", np.invert, integer_unary, traits=_INTEGER)


def shift_rule(x, y):
  _check(
    x.dtype not in FLOAT_DTYPES + ("bool",), lambda: f"expects integer operands, got {x.dtype}"
  )
  return binary_same(x, y)


shift_left_p = def_binary("shift_left", np.left_shift, shift_rule, traits=_INTEGER)
shift_right_p = def_binary("shift_right", np.right_shift, shift_rule, traits=_INTEGER)
nextafter_p = def_binary("nextafter", np.nextafter, binary_float)
add_p = def_binary("add", np.add, ieee=True, traits=("commutative",), linear=(0, 1))
sub_p = def_binary("sub", np.subtract, ieee=True, linear=(0, 1))
mul_p = def_binary("mul", np.multiply, ieee=True, traits=("commutative",), linear=(0, 1))
div_p = def_binary("div", _int_div, ieee=True, linear=(0,))
ufunc_rules[div_p] = np.divide  # on floats (integers floor-divide)
pow_p = def_binary("pow", np.power, binary_float, ieee=True)
arctan2_p = def_binary("arctan2", np.arctan2, binary_float, ieee=True)
fmod_p = def_binary("fmod", np.fmod, binary_float, ieee=True)  # C's: the dividend's sign
hypot_p = def_binary("hypot", np.hypot, binary_float, ieee=True, traits=("commutative",))
logaddexp_p = def_binary(
  "logaddexp", np.logaddexp, binary_float, ieee=True, traits=("commutative",)
)
max_p = def_binary("max", np.maximum, traits=("commutative",))
min_p = def_binary("min", np.minimum, traits=("commutative",))
eq_p = def_binary("eq", np.equal, compare_rule, traits=("commutative",))
ne_p = def_binary("ne", np.not_equal, compare_rule, traits=("commutative",))
lt_p = def_binary("lt", np.less, compare_rule)
le_p = def_binary("le", np.less_equal, compare_rule)
gt_p = def_binary("gt", np.greater, compare_rule)
ge_p = def_binary("ge", np.greater_equal, compare_rule)


select_p = Primitive("select", traits=("elementwise",), linear=(1, 2))


def _select_rule(pred, on_true, on_false):
  _check(pred.dtype == "bool", lambda: f"predicate must be bool, got {pred.dtype}")
  _check(
    pred.shape == on_true.shape,
    lambda: f"predicate shape {pred.shape} differs from {on_true.shape}",
  )
  return binary_same(on_true, on_false)


abstract_rules[select_p] = _select_rule
impl_rules[select_p] = lambda p, t, f: np.where(p, t, f)


# ---------------------------------------------------------------------------------------
# Structural

broadcast_in_dim_p = Primitive("broadcast_in_dim", traits=("index_map",), linear=(0,))


def _broadcast_rule(x, *, shape, broadcast_dimensions):
  dims = broadcast_dimensions
  _check(
    len(dims) == x.ndim, lambda: f"broadcast_dimensions {dims} must have one entry per operand dim"
  )
  _check(
    list(dims) == sorted(set(dims)) and all(0 <= d < len(shape) for d in dims),
    lambda: f"broadcast_dimensions {dims} must be increasing and within rank {len(shape)}",
  )
  for i, d in enumerate(dims):
    _check(
      x.shape[i] in (1, shape[d]),
      lambda: f"cannot broadcast operand dim {i} of size {x.shape[i]} to size {shape[d]}",
    )
  return ShapedArray(shape, x.dtype)


def _broadcast_runner(x, *, shape, broadcast_dimensions):
  """The broadcast of a value of `x`'s shape (an array or its aval): a fresh C-ordered
  array, filled by numpy's broadcast."""
  dims = [1] * len(shape)
  for i, d in enumerate(broadcast_dimensions):
    dims[d] = x.shape[i]

  def run(v):
    out = np.empty(shape, v.dtype)
    out[...] = v.reshape(dims)
    return out

  return run


def _broadcast_impl(x, *, shape, broadcast_dimensions):
  x = np.asarray(x)
  return _broadcast_runner(x, shape=shape, broadcast_dimensions=broadcast_dimensions)(x)


abstract_rules[broadcast_in_dim_p] = _broadcast_rule
impl_rules[broadcast_in_dim_p] = _broadcast_impl
runner_rules[broadcast_in_dim_p] = _broadcast_runner

reshape_p = Primitive("reshape", traits=("index_map",), linear=(0,))


def _reshape_rule(x, *, new_sizes):
  if min(new_sizes, default=0) < 0:
    _fail(f"sizes must be non-negative, got {new_sizes}")
  if math.prod(new_sizes) != math.prod(x.shape):
    _fail(f"cannot reshape {x.shape} ({x.size} elements) to {new_sizes}")
  return ShapedArray(new_sizes, x.dtype)


abstract_rules[reshape_p] = _reshape_rule
impl_rules[reshape_p] = lambda x, *, new_sizes: np.reshape(x, new_sizes).copy()
runner_rules[reshape_p] = lambda x, *, new_sizes: lambda v: v.reshape(new_sizes).copy()

transpose_p = Primitive("transpose", traits=("index_map",), linear=(0,))


def _transpose_rule(x, *, permutation):
  _check(
    sorted(permutation) == list(range(x.ndim)),
    lambda: f"permutation {permutation} is not a permutation of {x.ndim} dims",
  )
  return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype)


abstract_rules[transpose_p] = _transpose_rule
impl_rules[transpose_p] = lambda x, *, permutation: np.array(
  np.transpose(x, permutation), order="C"
)

slice_p = Primitive("slice", traits=("index_map",), linear=(0,))


def _slice_rule(x, *, start_indices, limit_indices, strides):
  _check(
    len(start_indices) == len(limit_indices) == len(strides) == x.ndim,
    "start, limit and strides need one entry per dim",
  )
  shape = []
  for lo, hi, st, n in zip(start_indices, limit_indices, strides, x.shape, strict=True):
    _check(0 <= lo <= hi <= n and st >= 1, lambda: f"bad slice {lo}:{hi}:{st} of a dim of size {n}")
    shape.append(max(0, -(-(hi - lo) // st)))
  return ShapedArray(shape, x.dtype)


def _slice_impl(x, *, start_indices, limit_indices, strides):
  idx = tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))
  return x[idx].copy()


abstract_rules[slice_p] = _slice_rule
impl_rules[slice_p] = _slice_impl

pad_p = Primitive(
  "pad", traits=("index_map",), linear=(0,)
)  # zero padding: padding_config is ((low, high, interior), ...)


def _pad_rule(x, *, padding_config):
  _check(len(padding_config) == x.ndim, "padding_config needs one entry per dim")
  shape = []
  for (lo, hi, interior), n in zip(padding_config, x.shape, strict=True):
    _check(
      lo >= 0 and hi >= 0 and interior >= 0,
      lambda: f"padding must be non-negative: {(lo, hi, interior)}",
    )
    shape.append(lo + hi + n + max(0, n - 1) * interior)
  return ShapedArray(shape, x.dtype)


def _pad_impl(x, *, padding_config):
  out = np.zeros(
    _pad_rule(ShapedArray(x.shape, x.dtype.name), padding_config=padding_config).shape, x.dtype
  )
  idx = tuple(
    slice(lo, lo + max(0, (n - 1) * (it + 1) + 1), it + 1)
    for (lo, _, it), n in zip(padding_config, x.shape)
  )
  out[idx] = x
  return out


abstract_rules[pad_p] = _pad_rule
impl_rules[pad_p] = _pad_impl

concatenate_p = Primitive("concatenate", traits=("index_map",), linear="all")


def _concatenate_rule(*xs, dimension):
  _check(len(xs) >= 1, "needs at least one operand")
  x0 = xs[0]
  _check(0 <= dimension < x0.ndim, lambda: f"dimension {dimension} out of range for rank {x0.ndim}")
  for x in xs:
    _check(x.dtype == x0.dtype, lambda: f"operand dtypes differ: {x0.dtype} vs {x.dtype}")
    _check(
      x.ndim == x0.ndim
      and all(a == b for i, (a, b) in enumerate(zip(x.shape, x0.shape)) if i != dimension),
      lambda: f"shapes {x0.shape} and {x.shape} differ outside dimension {dimension}",
    )
  shape = list(x0.shape)
  shape[dimension] = sum(x.shape[dimension] for x in xs)
  return ShapedArray(shape, x0.dtype)


abstract_rules[concatenate_p] = _concatenate_rule
impl_rules[concatenate_p] = lambda *xs, dimension: np.concatenate(xs, axis=dimension)

# gather / scatter_add: index selection along one axis (numpy `take`, `mode="raise"`):
# negative indices count from the end, an index outside [-n, n) is a PrimcIndexError
# (never clipped, never wrapped twice). The first `batch_dims` dims of x and of idx are
# batch dims that pair up (as in `tf.gather(batch_dims=...)`): item k of the batch takes
# from x[k] with idx[k]. gather(x, idx, axis, batch_dims) has shape
# x.shape[:axis] + idx.shape[batch_dims:] + x.shape[axis+1:].
gather_p = Primitive("gather", traits=("indexing",), linear=(0,))


def _gather_rule(x, idx, *, axis, batch_dims):
  _check(idx.dtype in ALL_INT_DTYPES, lambda: f"indices must be integers, got {idx.dtype}")
  _check(0 <= axis < x.ndim, lambda: f"axis {axis} out of range for rank {x.ndim}")
  _check(
    0 <= batch_dims <= min(axis, idx.ndim),
    lambda: (
      f"batch_dims {batch_dims} must be at most the axis {axis} and the index rank {idx.ndim}"
    ),
  )
  _check(
    x.shape[:batch_dims] == idx.shape[:batch_dims],
    lambda: f"batch dims differ: operand {x.shape[:batch_dims]}, indices {idx.shape[:batch_dims]}",
  )
  return ShapedArray(x.shape[:axis] + idx.shape[batch_dims:] + x.shape[axis + 1 :], x.dtype)


def wrap_indices(idx: np.ndarray, size: int, axis: int) -> np.ndarray:
  """Indices along an axis of `size` with negatives counted from the end; raises
  PrimcIndexError (numpy's message) for the first one outside [-size, size)."""
  idx = np.asarray(idx)
  if not idx.size:
    return idx
  lo, hi = idx.min(), idx.max()  # (two passes without temporaries: most indices are in
  if lo < -size or hi >= size:  # bounds and none negative, and this runs at every call)
    bad = (idx < -size) | (idx >= size)
    raise index_error(int(idx[bad].flat[0]), axis, size)
  if lo < 0:
    idx = np.where(idx < 0, idx + size, idx)
  # (C-ordered, as callers read it; a copy only where it is not; 0-d stays 0-d)
  return idx if idx.flags.c_contiguous else idx.copy(order="C")


def _batched(x, idx, batch_dims):
  """x and idx with their batch dims merged into one leading dim."""
  nb = math.prod(x.shape[:batch_dims])
  return (x.reshape((nb,) + x.shape[batch_dims:]), idx.reshape((nb,) + idx.shape[batch_dims:]))


def _batch_major(x, idx, axis, batch_dims):
  """x with its batch dims merged into one leading dim and `axis` moved after it, and the
  index tuple that selects, for each batch item k, x[k] at idx[k] along that axis (numpy's
  advanced indexing: one vectorized step, however many items)."""
  xb, ib = _batched(x, idx, batch_dims)
  xm = np.moveaxis(xb, 1 + axis - batch_dims, 1)
  k = np.arange(len(xb)).reshape((len(xb),) + (1,) * (ib.ndim - 1))
  return xm, (k, ib)


def _index_dims_after(y, n_pre, n_idx):
  """y (items, index dims, x's dims before the axis, after it) with the index dims moved
  after those before the axis: gather's order."""
  return np.moveaxis(y, range(1, 1 + n_idx), range(1 + n_pre, 1 + n_pre + n_idx))


def _gather_impl(x, idx, *, axis, batch_dims):
  idx = wrap_indices(idx, x.shape[axis], axis)
  if batch_dims == 0:
    return np.take(x, idx, axis=axis)
  shape = _gather_rule(
    ShapedArray(x.shape, x.dtype),
    ShapedArray(idx.shape, idx.dtype),
    axis=axis,
    batch_dims=batch_dims,
  ).shape
  xm, at = _batch_major(x, idx, axis, batch_dims)
  out = _index_dims_after(xm[at], axis - batch_dims, idx.ndim - batch_dims)
  return np.ascontiguousarray(out).reshape(shape)


abstract_rules[gather_p] = _gather_rule
impl_rules[gather_p] = _gather_impl

scatter_add_p = Primitive(
  "scatter_add", traits=("indexing",), linear=(0, 2)
)  # x with `updates` added at `idx` along `axis`


def _scatter_add_rule(x, idx, updates, *, axis, batch_dims):
  expected = _gather_rule(x, idx, axis=axis, batch_dims=batch_dims)
  _check(
    updates.shape == expected.shape and updates.dtype == x.dtype,
    lambda: f"updates {updates} must be {expected}",
  )
  return x


def _scatter_add_impl(x, idx, updates, *, axis, batch_dims):
  idx = wrap_indices(idx, x.shape[axis], axis)
  out = np.array(x, order="C")  # so that the reshapes below are views of it
  om, at = _batch_major(out, idx, axis, batch_dims)
  n_pre, n_idx = axis - batch_dims, idx.ndim - batch_dims
  ub = updates.reshape((len(om),) + updates.shape[batch_dims:])  # (gather's order: back)
  np.add.at(om, at, np.moveaxis(ub, range(1 + n_pre, 1 + n_pre + n_idx), range(1, 1 + n_idx)))
  return out


abstract_rules[scatter_add_p] = _scatter_add_rule
impl_rules[scatter_add_p] = _scatter_add_impl

rev_p = Primitive(
  "rev", traits=("index_map",), linear=(0,)
)  # reverses the order of elements along `dimensions`


def _rev_rule(x, *, dimensions):
  _check(
    len(set(dimensions)) == len(dimensions) and all(0 <= d < x.ndim for d in dimensions),
    lambda: f"dimensions {dimensions} invalid for rank {x.ndim}",
  )
  return x


abstract_rules[rev_p] = _rev_rule
impl_rules[rev_p] = lambda x, *, dimensions: np.flip(x, dimensions).copy()

roll_p = Primitive(
  "roll", traits=("index_map",), linear=(0,)
)  # numpy.roll along one dimension: out[..., i, ...] = x[..., (i - shift) mod n, ...]


def _roll_rule(x, *, dimension, shift):
  _check(0 <= dimension < x.ndim, lambda: f"dimension {dimension} out of range for rank {x.ndim}")
  n = x.shape[dimension]
  _check(0 <= shift < max(n, 1), lambda: f"shift {shift} outside [0, {n}) (its size)")
  return x


abstract_rules[roll_p] = _roll_rule


def _roll_impl(x, *, dimension, shift):
  out, n, at = np.empty(x.shape, x.dtype), x.shape[dimension], (slice(None),) * dimension
  out[at + (slice(shift, None),)] = x[at + (slice(None, n - shift),)]
  out[at + (slice(None, shift),)] = x[at + (slice(n - shift, None),)]
  return out


impl_rules[roll_p] = _roll_impl


# ---------------------------------------------------------------------------------------
# Reductions and contractions


def _reduce_rule(x, *, axes):
  _check(
    len(set(axes)) == len(axes) and all(0 <= a < x.ndim for a in axes),
    lambda: f"axes {axes} invalid for rank {x.ndim}",
  )
  return ShapedArray(tuple(n for i, n in enumerate(x.shape) if i not in axes), x.dtype)


reduce_sum_p = Primitive("reduce_sum", traits=("reduction",), linear=(0,))
abstract_rules[reduce_sum_p] = lambda x, *, axes: (unary_numeric(x), _reduce_rule(x, axes=axes))[1]
impl_rules[reduce_sum_p] = _errstate(lambda x, *, axes: np.asarray(np.sum(x, axis=axes), x.dtype))
runner_rules[reduce_sum_p] = lambda x, *, axes: functools.partial(np.add.reduce, axis=axes)

reduce_max_p = Primitive("reduce_max", traits=("reduction",))


def _reduce_max_rule(x, *, axes):
  unary_numeric(x)
  _check(all(x.shape[a] > 0 for a in axes), lambda: f"reduce_max over an empty axis of {x.shape}")
  return _reduce_rule(x, axes=axes)


abstract_rules[reduce_max_p] = _reduce_max_rule
impl_rules[reduce_max_p] = lambda x, *, axes: np.asarray(np.max(x, axis=axes), x.dtype)
runner_rules[reduce_max_p] = lambda x, *, axes: functools.partial(np.maximum.reduce, axis=axes)

# A product in numpy's order: left to right along the reduced axes (their elements in C
# order), so an overflow or underflow on the way gives numpy's inf, 0 or NaN.
reduce_prod_p = Primitive("reduce_prod", traits=("reduction",))
abstract_rules[reduce_prod_p] = lambda x, *, axes: (unary_numeric(x), _reduce_rule(x, axes=axes))[1]
impl_rules[reduce_prod_p] = _errstate(lambda x, *, axes: np.asarray(np.prod(x, axis=axes), x.dtype))

dot_general_p = Primitive("dot_general", traits=("contraction",), linear=(0, 1))
# dimension_numbers = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)).
# Output dims: batch dims, then lhs free dims, then rhs free dims (as in XLA).


def _dot_free(ndim, contract, batch):
  return [d for d in range(ndim) if d not in contract and d not in batch]


def _dot_general_rule(x, y, *, dimension_numbers):
  (lc, rc), (lb, rb) = dimension_numbers
  _check(x.dtype == y.dtype, lambda: f"operand dtypes differ: {x.dtype} vs {y.dtype}")
  _check(x.dtype != "bool", "expects numeric operands")
  _check(len(lc) == len(rc) and len(lb) == len(rb), "dimension numbers must pair up")
  for dims, nd in ((lc + lb, x.ndim), (rc + rb, y.ndim)):
    _check(
      len(set(dims)) == len(dims) and all(0 <= d < nd for d in dims),
      lambda: f"dimension numbers {dimension_numbers} invalid for ranks {x.ndim}, {y.ndim}",
    )
  for a, b in zip(lc + lb, rc + rb):
    _check(
      x.shape[a] == y.shape[b],
      lambda: (
        f"dimension {a} of lhs {x.shape} (size {x.shape[a]}) does not match "
        f"dimension {b} "
        f"of rhs {y.shape} (size {y.shape[b]})"
      ),
    )
  shape = (
    [x.shape[d] for d in lb]
    + [x.shape[d] for d in _dot_free(x.ndim, lc, lb)]
    + [y.shape[d] for d in _dot_free(y.ndim, rc, rb)]
  )
  return ShapedArray(shape, x.dtype)


def _dot_general_runner(x, y, *, dimension_numbers):
  """The product of values of `x`'s and `y`'s shapes (arrays or avals) as batched matrices
  (batch, x's free, contracted) @ (batch, contracted, y's free), one matmul: 3-6x einsum's
  time on small products (its path search per call), a little less on large ones."""
  (lc, rc), (lb, rb) = dimension_numbers
  xf, yf = _dot_free(len(x.shape), lc, lb), _dot_free(len(y.shape), rc, rb)
  batch = [x.shape[d] for d in lb]
  rows, cols = [x.shape[d] for d in xf], [y.shape[d] for d in yf]
  k = math.prod(x.shape[d] for d in lc)
  x_perm, x_mat = [*lb, *xf, *lc], (math.prod(batch), math.prod(rows), k)
  y_perm, y_mat = [*rb, *rc, *yf], (math.prod(batch), k, math.prod(cols))
  out = tuple(batch + rows + cols)
  return lambda a, b: np.matmul(
    a.transpose(x_perm).reshape(x_mat), b.transpose(y_perm).reshape(y_mat)
  ).reshape(out)


def _dot_general_impl(x, y, *, dimension_numbers):
  product = _dot_general_runner(x, y, dimension_numbers=dimension_numbers)
  return np.asarray(product(x, y), x.dtype)


abstract_rules[dot_general_p] = _dot_general_rule
impl_rules[dot_general_p] = _errstate(_dot_general_impl)
runner_rules[dot_general_p] = _dot_general_runner


# conv: a convolution in its one canonical form (JAX's conv_general_dilated with VALID
# padding, no lhs dilation, NC* / OI* layouts; `primc.lax.conv_general_dilated` reaches the
# rest with pad and transpose). lhs (N, C, *in), rhs (O, C // groups, *window) -> (N, O,
# *out): out[n, o, y] = sum_{c, k} lhs[n, g(o) * C/G + c, y * stride + k * dilation]
# rhs[o, c, k], g(o) = o // (O / G). Its transposes are convolutions too (primc.ad); before
# fusion it is lowered to windows and a dot_general (primc.passes.lower).
conv_p = Primitive("conv", traits=("convolution",), linear=(0, 1))


def conv_out_size(size: int, window: int, stride: int, dilation: int) -> int:
  return (size - (window - 1) * dilation - 1) // stride + 1


def _conv_rule(x, w, *, window_strides, rhs_dilation, feature_group_count):
  g, nd = feature_group_count, x.ndim - 2
  _check(x.dtype == w.dtype, lambda: f"operand dtypes differ: {x.dtype} vs {w.dtype}")
  _check(x.dtype != "bool", "expects numeric operands")
  _check(
    nd >= 1 and w.ndim == x.ndim and len(window_strides) == len(rhs_dilation) == nd,
    lambda: (
      f"conv of {x.shape} and {w.shape}: needs (N, C, *spatial) and (O, I, *window), "
      f"and a stride and a dilation per spatial dim"
    ),
  )
  _check(
    g >= 1 and x.shape[1] == g * w.shape[1] and w.shape[0] % g == 0,
    lambda: (
      f"conv of {x.shape} and {w.shape} in {g} groups: the input's {x.shape[1]} "
      f"channels must be groups x the kernel's {w.shape[1]}, its {w.shape[0]} outputs a "
      f"multiple of the groups"
    ),
  )
  _check(
    all(s >= 1 for s in window_strides) and all(d >= 1 for d in rhs_dilation),
    lambda: f"strides {window_strides} and dilations {rhs_dilation} must be >= 1",
  )
  out = [
    conv_out_size(n, k, s, d)
    for n, k, s, d in zip(x.shape[2:], w.shape[2:], window_strides, rhs_dilation)
  ]
  _check(
    all(o >= 1 for o in out),
    lambda: (
      f"conv: window {w.shape[2:]} dilated by {rhs_dilation} exceeds the input's {x.shape[2:]}"
    ),
  )
  return ShapedArray((x.shape[0], w.shape[0], *out), x.dtype)


def conv_windows(x: np.ndarray, window, strides, dilation) -> np.ndarray:
  """A view of x (..., *in) as (..., *out, *window) over its len(window) trailing dims: each
  output position's window (out: `conv_out_size`)."""
  nd = x.ndim - len(window)
  size, sp = x.shape[nd:], x.strides[nd:]
  out = [conv_out_size(n, k, s, d) for n, k, s, d in zip(size, window, strides, dilation)]
  return np.lib.stride_tricks.as_strided(
    x,
    (*x.shape[:nd], *out, *window),
    (
      *x.strides[:nd],
      *(a * s for a, s in zip(sp, strides)),
      *(a * d for a, d in zip(sp, dilation)),
    ),
    writeable=False,
  )


def _conv_impl(x, w, *, window_strides, rhs_dilation, feature_group_count):
  """The windows copied out (im2col) and one matrix product per group: 2-3x faster than
  einsum over the strided view of the windows (a 64x16x16x16 3x3 conv 15 -> 4.6 ms)."""
  g, nd = feature_group_count, x.ndim - 2
  n, c = x.shape[:2]
  o, cg = w.shape[:2]
  win = conv_windows(np.ascontiguousarray(x), w.shape[2:], window_strides, rhs_dilation)
  out_sp = win.shape[2 : 2 + nd]
  k, s = math.prod(w.shape[2:]), math.prod(out_sp)
  # (n, c, *out, *window) -> (c, *window, n, *out): rows (c, k), columns (n, positions)
  order = (1, *range(2 + nd, 2 + 2 * nd), 0, *range(2, 2 + nd))
  cols = np.ascontiguousarray(win.transpose(order)).reshape(g, cg * k, n * s)
  y = np.matmul(w.reshape(g, o // g, cg * k), cols)  # (g, o / g, n * s)
  y = y.reshape(o, n, *out_sp).swapaxes(0, 1)
  return np.ascontiguousarray(y, dtype=x.dtype)


abstract_rules[conv_p] = _conv_rule
impl_rules[conv_p] = _errstate(_conv_impl)

# The windows of a convolution as an index map (im2col without indices): x (..., *in) ->
# (..., *window, *out), element [..., k, o] = x[..., o * stride + k * dilation] per
# spatial dim. Code generation lowers `conv` to it (`passes.lower`): a loop kernel reads
# each window element at an address it computes from its loop indices.
windows_p = Primitive("windows", traits=("index_map",), linear=(0,))


def _windows_rule(x, *, window_dimensions, window_strides, window_dilation):
  nd = len(window_dimensions)
  _check(
    1 <= nd <= x.ndim and len(window_strides) == len(window_dilation) == nd,
    lambda: f"windows of {nd} dims over {x.shape}: a stride and a dilation per window dim",
  )
  _check(
    all(k >= 1 for k in window_dimensions)
    and all(s >= 1 for s in window_strides)
    and all(d >= 1 for d in window_dilation),
    lambda: (
      f"windows {window_dimensions}, strides {window_strides} and dilations "
      f"{window_dilation} must be >= 1"
    ),
  )
  size = x.shape[x.ndim - nd :]
  out = [conv_out_size(*a) for a in zip(size, window_dimensions, window_strides, window_dilation)]
  _check(
    all(o >= 1 for o in out),
    lambda: f"windows {window_dimensions} dilated by {window_dilation} exceed {size}",
  )
  return ShapedArray((*x.shape[: x.ndim - nd], *window_dimensions, *out), x.dtype)


def _windows_impl(x, *, window_dimensions, window_strides, window_dilation):
  view = conv_windows(np.ascontiguousarray(x), window_dimensions, window_strides, window_dilation)
  lead, nd = view.ndim - 2 * len(window_dimensions), len(window_dimensions)
  order = (*range(lead), *range(lead + nd, lead + 2 * nd), *range(lead, lead + nd))
  return np.array(view.transpose(order), order="C")  # (..., *window, *out)


abstract_rules[windows_p] = _windows_rule
impl_rules[windows_p] = _windows_impl


# ---------------------------------------------------------------------------------------
# Creation and conversion

full_p = Primitive("full", traits=("generator", "nondifferentiable"))


def _full_rule(*, shape, fill_value, dtype):
  _check(all(d >= 0 for d in shape), lambda: f"negative dimension in {shape}")
  return ShapedArray(shape, dtype)


abstract_rules[full_p] = _full_rule
impl_rules[full_p] = lambda *, shape, fill_value, dtype: np.full(shape, fill_value, dtype)

iota_p = Primitive(
  "iota", traits=("generator", "nondifferentiable")
)  # the index along `dimension`, broadcast over `shape`


def _iota_rule(*, shape, dimension, dtype):
  _check(0 <= dimension < len(shape), lambda: f"dimension {dimension} out of range for {shape}")
  return ShapedArray(shape, dtype)


def _iota_impl(*, shape, dimension, dtype):
  ar = np.arange(shape[dimension], dtype=dtype)
  return np.array(
    np.broadcast_to(ar.reshape([-1 if i == dimension else 1 for i in range(len(shape))]), shape),
    order="C",
  )


abstract_rules[iota_p] = _iota_rule
impl_rules[iota_p] = _iota_impl

# the permutation that sorts the last axis (stable; NaNs last, as numpy), as int32 indices
argsort_p = Primitive("argsort", traits=("sorting", "nondifferentiable"))


def _argsort_rule(x):
  _check(x.ndim >= 1, "argsort needs an array of rank >= 1")
  return ShapedArray(x.shape, "int32")


abstract_rules[argsort_p] = _argsort_rule
impl_rules[argsort_p] = lambda x: np.argsort(x, axis=-1, kind="stable").astype(np.int32)

# inclusive sums and products along the last axis, left to right as numpy accumulates them
# (a reassociated scan overflows, underflows or rounds where numpy's order does not)
cumsum_p = Primitive("cumsum", traits=("cumulative",), linear=(0,))
cumprod_p = Primitive("cumprod", traits=("cumulative",))


def _cumulative_rule(x):
  _check(x.ndim >= 1, "a cumulative sum or product needs an array of rank >= 1")
  _check(x.dtype != "bool", "a cumulative sum or product of bools: convert them first")
  return x


for _p, _np_fn in ((cumsum_p, np.cumsum), (cumprod_p, np.cumprod)):
  abstract_rules[_p] = _cumulative_rule
  impl_rules[_p] = lambda x, _f=_np_fn: _f(x, axis=-1, dtype=x.dtype)

# ---------------------------------------------------------------------------------------
# Linear algebra over the last two axes (leading axes are a batch), LAPACK through numpy
# (interpreter) and numba (kernels).


def _square(x, name):
  _check(
    x.ndim >= 2 and x.shape[-1] == x.shape[-2],
    lambda: f"{name} needs square matrices in the last two axes, got shape {x.shape}",
  )
  _check(x.is_float, lambda: f"{name} needs a float array, got {x.dtype}")


def _matrices(x, name):
  _check(
    x.ndim >= 2 and x.is_float,
    lambda: f"{name} needs float matrices in the last two axes, got {x.shape} {x.dtype}",
  )


def _inv_rule(a):
  _square(a, "inv")
  return ShapedArray(a.shape, a.dtype)


def _solve_rule(a, b):
  _square(a, "solve")
  _check(
    b.ndim == a.ndim
    and b.shape[:-2] == a.shape[:-2]
    and b.shape[-2] == a.shape[-1]
    and b.dtype == a.dtype,
    lambda: (
      f"solve of {a.shape} {a.dtype} and {b.shape} {b.dtype}: b must be (..., n, k) "
      f"with a's batch, n and dtype"
    ),
  )
  return ShapedArray(b.shape, b.dtype)


def _slogdet_rule(a):
  _square(a, "slogdet")
  return ShapedArray(a.shape[:-2] + (2,), a.dtype)


def _det_rule(a):
  _square(a, "det")
  return ShapedArray(a.shape[:-2], a.dtype)


def _slogdet_impl(a):
  sign, logabs = np.linalg.slogdet(a)
  return np.stack([sign, logabs], -1).astype(a.dtype)


inv_p = Primitive("inv", traits=("linalg",))
solve_p = Primitive("solve", traits=("linalg",), linear=(1,))  # linear in b
slogdet_p = Primitive("slogdet", traits=("linalg",))  # [..., 0] the sign, [..., 1] log|det|
det_p = Primitive("det", traits=("linalg",))
abstract_rules[inv_p] = _inv_rule
abstract_rules[solve_p] = _solve_rule
abstract_rules[slogdet_p] = _slogdet_rule
abstract_rules[det_p] = _det_rule
impl_rules[inv_p] = lambda a: np.linalg.inv(a).astype(a.dtype)
impl_rules[solve_p] = lambda a, b: np.linalg.solve(a, b).astype(a.dtype)
impl_rules[slogdet_p] = _slogdet_impl
impl_rules[det_p] = lambda a: np.asarray(np.linalg.det(a), a.dtype)


def _cholesky_rule(a):
  _square(a, "cholesky")
  return ShapedArray(a.shape, a.dtype)


def _eigh_rule(a):
  _square(a, "eigh")
  return ShapedArray(a.shape[:-2] + (a.shape[-1] + 1, a.shape[-1]), a.dtype)


def qr_shapes(m: int, n: int) -> tuple[tuple[int, int], tuple[int, int], int]:
  """Reduced QR of an m x n matrix: Q's shape, R's shape, and the axis (-2 rows, -1
  columns) along which qr_p packs them: Q then R."""
  k = min(m, n)
  return (m, k), (k, n), (-2 if m >= n else -1)


def _qr_rule(a):
  _matrices(a, "qr")
  (m, k), (_, n), axis = qr_shapes(*a.shape[-2:])
  packed = (m + k, k) if axis == -2 else (m, k + n)
  return ShapedArray(a.shape[:-2] + packed, a.dtype)


def _triangular_solve_rule(a, b, *, lower, transpose_a):
  _square(a, "triangular_solve")
  return _solve_rule(a, b)


def column_signs(v: np.ndarray) -> np.ndarray:
  """+1 or -1 per column of v (shape (..., 1, k)): the sign that makes each column's
  largest-magnitude entry (the first, on a tie) positive. Eigenvectors and singular vectors
  take it, a convention every path follows, so results do not depend on which LAPACK build
  computed them."""
  rows = np.argmax(np.abs(v), axis=-2)[..., None, :]
  return np.where(np.take_along_axis(v, rows, -2) < 0, -1, 1).astype(v.dtype)


def _eigh_impl(a):
  w, v = np.linalg.eigh(a)
  return np.concatenate([w[..., None, :], v * column_signs(v)], -2).astype(a.dtype)


def _qr_impl(a):
  q, r = np.linalg.qr(a)
  return np.concatenate([q, r], qr_shapes(*a.shape[-2:])[2]).astype(a.dtype)


def _triangular_solve_impl(a, b, *, lower, transpose_a):
  tri = np.tril(a) if lower else np.triu(a)  # the other triangle is not read
  return np.linalg.solve(np.swapaxes(tri, -1, -2) if transpose_a else tri, b).astype(a.dtype)


def svd_shapes(m: int, n: int) -> tuple[int, int]:
  """The packed shape of svd_p's result for an m x n matrix: U (m x k), then the k singular
  values as one row, then V (n x k; not V^T), k = min(m, n)."""
  k = min(m, n)
  return m + 1 + n, k


def _svd_rule(a):
  _matrices(a, "svd")
  return ShapedArray(a.shape[:-2] + svd_shapes(*a.shape[-2:]), a.dtype)


def _svd_impl(a):
  u, s, vh = np.linalg.svd(a, full_matrices=False)
  v = np.swapaxes(vh, -1, -2)
  signs = column_signs(v)
  return np.concatenate([u * signs, s[..., None, :], v * signs], -2).astype(a.dtype)


def _pinv_rule(a, *, rcond):
  _matrices(a, "pinv")
  return ShapedArray(a.shape[:-2] + (a.shape[-1], a.shape[-2]), a.dtype)


svd_p = Primitive("svd", traits=("linalg",))  # reduced; packed as svd_shapes says
pinv_p = Primitive("pinv", traits=("linalg",))  # singular values below rcond * max cut
abstract_rules[svd_p] = _svd_rule
abstract_rules[pinv_p] = _pinv_rule
impl_rules[svd_p] = _svd_impl


def pinv_cutoff(a: np.ndarray, rcond) -> float:
  """numpy's: `rcond`, or max(m, n) * the dtype's epsilon when None."""
  return rcond if rcond is not None else max(a.shape[-2:]) * float(np.finfo(a.dtype).eps)


impl_rules[pinv_p] = lambda a, *, rcond: np.linalg.pinv(a, rcond=pinv_cutoff(a, rcond)).astype(
  a.dtype
)


# cholesky: the lower factor of a symmetric positive definite matrix (read from its lower
# triangle); eigh: [..., 0, :] the eigenvalues (ascending), [..., 1:, :] the eigenvectors
# (columns, signs by column_signs) of a symmetric matrix; qr: reduced Q and R packed along
# the axis qr_shapes names; triangular_solve: x with op(a) x = b, op(a) = a or a^T, a
# lower or upper triangular (the other triangle is not read).
cholesky_p = Primitive("cholesky", traits=("linalg",))
eigh_p = Primitive("eigh", traits=("linalg",))
qr_p = Primitive("qr", traits=("linalg",))
triangular_solve_p = Primitive("triangular_solve", traits=("linalg",), linear=(1,))
abstract_rules[cholesky_p] = _cholesky_rule
abstract_rules[eigh_p] = _eigh_rule
abstract_rules[qr_p] = _qr_rule
abstract_rules[triangular_solve_p] = _triangular_solve_rule
impl_rules[cholesky_p] = lambda a: np.linalg.cholesky(a).astype(a.dtype)
impl_rules[eigh_p] = _eigh_impl
impl_rules[qr_p] = _qr_impl
impl_rules[triangular_solve_p] = _triangular_solve_impl


convert_p = Primitive("convert", traits=("elementwise",), linear=(0,))
abstract_rules[convert_p] = lambda x, *, new_dtype: ShapedArray(x.shape, new_dtype)
impl_rules[convert_p] = lambda x, *, new_dtype: np.asarray(x).astype(new_dtype)


# ---------------------------------------------------------------------------------------
# Binding functions: the vocabulary the AD and batching rules are written in.


def neg(x):
  return neg_p.bind(x)


def exp(x):
  return exp_p.bind(x)


def log(x):
  return log_p.bind(x)


def sin(x):
  return sin_p.bind(x)


def cos(x):
  return cos_p.bind(x)


def tanh(x):
  return tanh_p.bind(x)


def sqrt(x):
  return sqrt_p.bind(x)


def cosh(x):
  return cosh_p.bind(x)


def sinh(x):
  return sinh_p.bind(x)


def abs_(x):
  return abs_p.bind(x)


def sign(x):
  return sign_p.bind(x)


def stop_gradient(x):
  return stop_gradient_p.bind(x)


def add(x, y):
  return add_p.bind(x, y)


def sub(x, y):
  return sub_p.bind(x, y)


def mul(x, y):
  return mul_p.bind(x, y)


def div(x, y):
  return div_p.bind(x, y)


def pow_(x, y):
  return pow_p.bind(x, y)


def max_(x, y):
  return max_p.bind(x, y)


def min_(x, y):
  return min_p.bind(x, y)


def eq(x, y):
  return eq_p.bind(x, y)


def gt(x, y):
  return gt_p.bind(x, y)


def lt(x, y):
  return lt_p.bind(x, y)


def select(p, x, y):
  return select_p.bind(p, x, y)


def convert(x, dtype):
  return convert_p.bind(x, new_dtype=_dt(dtype))


def reshape(x, shape):
  return reshape_p.bind(x, new_sizes=tuple(int(d) for d in shape))


def transpose(x, perm):
  return transpose_p.bind(x, permutation=tuple(int(p) for p in perm))


def reduce_sum(x, axes):
  return reduce_sum_p.bind(x, axes=tuple(int(a) for a in axes))


def reduce_max(x, axes):
  return reduce_max_p.bind(x, axes=tuple(int(a) for a in axes))


def reduce_prod(x, axes):
  return reduce_prod_p.bind(x, axes=tuple(int(a) for a in axes))


def rev(x, dims):
  return rev_p.bind(x, dimensions=tuple(sorted(int(d) for d in dims)))


def roll(x, shift, dimension):
  """x rolled by `shift`, in [0, its size), along `dimension`; x itself for 0."""
  return roll_p.bind(x, dimension=int(dimension), shift=int(shift)) if shift else x


def gather(x, idx, axis, batch_dims=0):
  return gather_p.bind(x, idx, axis=int(axis), batch_dims=int(batch_dims))


def scatter_add(x, idx, upd, axis, batch_dims=0):
  return scatter_add_p.bind(x, idx, upd, axis=int(axis), batch_dims=int(batch_dims))


def concatenate(xs, dimension):
  return concatenate_p.bind(*xs, dimension=int(dimension))


def argsort(x):
  return argsort_p.bind(x)


def cumsum(x):
  return cumsum_p.bind(x)


def cumprod(x):
  return cumprod_p.bind(x)


def broadcast_in_dim(x, shape, dims):
  return broadcast_in_dim_p.bind(
    x, shape=tuple(int(d) for d in shape), broadcast_dimensions=tuple(int(d) for d in dims)
  )


def slice_(x, start, limit, strides=None):
  strides = strides or (1,) * len(start)
  return slice_p.bind(
    x,
    start_indices=tuple(int(a) for a in start),
    limit_indices=tuple(int(a) for a in limit),
    strides=tuple(int(a) for a in strides),
  )


def pad(x, config):
  return pad_p.bind(x, padding_config=tuple(tuple(int(c) for c in cfg) for cfg in config))


def windows(x, window_dimensions, window_strides=None, window_dilation=None):
  nd = len(window_dimensions)
  ints = lambda v: tuple(int(a) for a in v) if v is not None else (1,) * nd
  return windows_p.bind(
    x,
    window_dimensions=ints(window_dimensions),
    window_strides=ints(window_strides),
    window_dilation=ints(window_dilation),
  )


def dot_general(x, y, dimension_numbers):
  (lc, rc), (lb, rb) = dimension_numbers
  t = lambda d: tuple(int(i) for i in d)
  return dot_general_p.bind(x, y, dimension_numbers=((t(lc), t(rc)), (t(lb), t(rb))))


def conv(x, w, window_strides, rhs_dilation, feature_group_count=1):
  return conv_p.bind(
    x,
    w,
    window_strides=tuple(int(s) for s in window_strides),
    rhs_dilation=tuple(int(d) for d in rhs_dilation),
    feature_group_count=int(feature_group_count),
  )


def full(shape, fill_value, dtype):
  value = (
    float(fill_value)
    if _dt(dtype) in FLOAT_DTYPES
    else (bool(fill_value) if _dt(dtype) == "bool" else int(fill_value))
  )
  return full_p.bind(shape=tuple(int(d) for d in shape), fill_value=value, dtype=_dt(dtype))


def iota(shape, dimension, dtype="int32"):
  return iota_p.bind(shape=tuple(int(d) for d in shape), dimension=int(dimension), dtype=_dt(dtype))


def zeros(aval: ShapedArray):
  return full(aval.shape, 0, aval.dtype)


def axes_last(x, shape, axes):
  """`x` (of `shape`) with `axes` moved last and merged into one, their elements in C
  order (a reduction over them as one row per index of the other axes): (that array, the
  permutation taken)."""
  kept = [d for d in range(len(shape)) if d not in axes]
  perm = kept + sorted(axes)
  n = math.prod(shape[a] for a in axes)
  return reshape(transpose(x, perm), [shape[d] for d in kept] + [n]), perm


def scalar_like(value, x):
  """A 0-d literal-like array of x's dtype, broadcast to x's shape (weak-typed scalar)."""
  return broadcast_in_dim(np.asarray(value, dtype=x.dtype), x.shape, ())


# Every primitive, in registration order: the registry tests walk this list.
ALL_PRIMITIVES = [p for p in abstract_rules]


def _floats_limited(rule, dtypes: tuple[str, ...], why: str):
  def limited(*xs, **params):
    for x in xs:
      _check(
        x.dtype not in FLOAT_DTYPES or x.dtype in dtypes,
        lambda: (
          f"computes in {' or '.join(dtypes)} only ({why}), got {x.dtype}: convert with "
          f"x.astype(np.float32) or x.astype(np.float64)"
        ),
      )
    return rule(*xs, **params)

  return limited


def with_trait(trait: str) -> frozenset:
  """The primitives that declare `trait` (see primc.core.TRAITS)."""
  assert trait in TRAITS, trait
  return frozenset(p for p in ALL_PRIMITIVES if trait in p.traits)


# LAPACK has no float16 or long double (numpy's linalg refuses them too), scipy.special no
# long double: refused when traced (naming the op and the user's line), not when run
for _p in with_trait("linalg"):
  abstract_rules[_p] = _floats_limited(abstract_rules[_p], ("float32", "float64"), "LAPACK")
for _p in (erf_p, erfc_p, erfinv_p, erfcinv_p, gammaln_p, gamma_p, polygamma_p, special_p):
  abstract_rules[_p] = _floats_limited(
    abstract_rules[_p], ("float16", "float32", "float64"), "scipy.special"
  )
