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
`full`, `eye`) make numpy's dtypes (float64; `full` its fill value's kind), so a program
written for numpy or autograd computes what it computed there. Names follow numpy, with the
seeds' aliases (`concat`, `index_select`, `multiply`, `scale`, `assign`, ...).

The package, by family; each module imports only those above it:

  _base         operands: conversion, promotion, broadcasting; reshape, transpose,
                concatenate and stack (a list of traced arrays is stacked)
  _creation     zeros, ones, full, eye, arange, empty
  _ufuncs       elementwise functions: numpy's ufuncs and their compositions, where
  _indexing     indexes, take, gather, index arithmetic, `x.at[idx]` updates
  _shape        reshaping, joining, splitting, flipping, padding
  _reductions   sums, means, extremes, products, scans, any, all
  _products     matmul, dot, einsum, tensordot, outer, cross
  _linalg       numpy.linalg's functions (`primc.numpy.linalg`), norm, diagonals
  _sorting      sorting, searching and sets (where's one-argument form: nonzero)
  _statistics   nan-ignoring reductions, averages, quantiles, covariances, histograms
  _nn           Paddle's and MindSpore's neural-network ops (softmax, cross_entropy)
  _polynomials  polynomials, correlation, interpolation
  _functions    the rest: ranges, windows, whole-array comparisons, dtype names
  _tracer       traced arrays' operators and methods; numpy's functions on them
  _dispatch     front ends' values (eager tensors, static variables), and calls on
                plain values (numpy's own function)
  _views        in-place updates and views of traced arrays, as numpy's

Here, once every function is defined, each public one is wrapped to take front ends'
values (`_dispatch._front_end_aware`), and the package's functions call each other
through the wrapped ones, as in one namespace (`_base._rebind`).
"""

from __future__ import annotations

import sys

import numpy as np

# (helpers primc's other packages build their ops with)
from primc.numpy._base import (
  NotSupportedError,
  __version__,
  _axes,
  _float,
  _op,
  _promote,
  _promote_list,
  _rebind,
  array,
  as_array,
  asarray,
  astype,
  bool_,
  broadcast_shapes,
  broadcast_to,
  concatenate,
  e,
  expand_dims,
  flatten,
  float32,
  float64,
  inf,
  int32,
  int64,
  moveaxis,
  nan,
  ndarray,
  ndim,
  pi,
  ravel,
  reshape,
  shape,
  size,
  stack,
  transpose,
)
from primc.numpy._creation import (
  arange,
  empty,
  empty_like,
  eye,
  full,
  full_like,
  identity,
  ones,
  ones_like,
  zeros,
  zeros_like,
)
from primc.numpy._dispatch import (
  _LIBRARY_OPS,
  _front_end_aware,
  _wrap_ops,
  front_end_apply,
  front_end_of,
  front_end_value,
  on_front_ends,
  refuse_numpy,
  register_front_end,
  takes_front_ends,
  wrap_public_functions,
)
from primc.numpy._functions import (
  _fftshift,
  allclose,
  apply_along_axis,
  array_equal,
  array_equiv,
  bartlett,
  blackman,
  can_cast,
  diag_indices,
  double,
  dtype,
  finfo,
  float_,
  geomspace,
  hamming,
  hanning,
  iinfo,
  index_exp,
  int_,
  iscomplex,
  iscomplexobj,
  isdtype,
  isreal,
  isrealobj,
  isscalar,
  issubdtype,
  ix_,
  kaiser,
  linspace,
  logspace,
  newaxis,
  piecewise,
  promote_types,
  result_type,
  s_,
  select,
  single,
  tril_indices,
  triu_indices,
)
from primc.numpy._indexing import (
  _expand_index,
  _is_array,
  choose,
  compress,
  delete,
  diag_indices_from,
  gather,
  getitem,
  index_select,
  index_update,
  indices,
  insert,
  operator_index,
  ravel_multi_index,
  slice,
  strided_slice,
  take,
  take_along_axis,
  tril_indices_from,
  triu_indices_from,
  unravel_index,
)
from primc.numpy._linalg import (
  EighResult,
  QRResult,
  SVDResult,
  _cholesky,
  _cond,
  _det,
  _diagonal,
  _eigh,
  _eigvalsh,
  _inv,
  _lstsq,
  _matrix_power,
  _matrix_rank,
  _multi_dot,
  _Namespace,
  _norm_of_matrices,
  _norm_of_vectors,
  _pinv,
  _qr,
  _slogdet,
  _solve,
  _solve_triangular,
  _svd,
  _svdvals,
  _tensorinv,
  _tensorsolve,
  _trace,
  diag,
  diagflat,
  diagonal,
  make_diagonal,
  norm,
  trace,
)
from primc.numpy._nn import (
  binary_cross_entropy_with_logits,
  cross_entropy,
  log_softmax,
  logsumexp,
  mse_loss,
  softmax,
  softplus,
)
from primc.numpy._polynomials import (
  convolve,
  correlate,
  interp,
  polyadd,
  polyder,
  polyfit,
  polyint,
  polymul,
  polysub,
  polyval,
  vander,
)
from primc.numpy._products import (
  cross,
  dot,
  einsum,
  inner,
  kron,
  matmul,
  matvec,
  outer,
  tensordot,
  vdot,
  vecdot,
  vecmat,
)
from primc.numpy._reductions import (
  all,
  amax,
  amin,
  any,
  count_nonzero,
  cumprod,
  cumsum,
  cumulative_prod,
  cumulative_sum,
  diff,
  ediff1d,
  gradient,
  max,
  mean,
  min,
  prod,
  ptp,
  std,
  sum,
  trapezoid,
  var,
)
from primc.numpy._shape import (
  append,
  array_split,
  ascontiguousarray,
  atleast_1d,
  atleast_2d,
  atleast_3d,
  broadcast_arrays,
  c_,
  column_stack,
  concat,
  copy,
  dsplit,
  dstack,
  flip,
  fliplr,
  flipud,
  hsplit,
  hstack,
  matrix_transpose,
  meshgrid,
  pad,
  permute_dims,
  r_,
  repeat,
  resize,
  roll,
  rollaxis,
  rot90,
  row_stack,
  split,
  split_sizes,
  squeeze,
  swapaxes,
  tile,
  tri,
  tril,
  triu,
  unstack,
  vsplit,
  vstack,
)
from primc.numpy._sorting import (
  argmax,
  argmin,
  argsort,
  argwhere,
  digitize,
  flatnonzero,
  isin,
  nanargmax,
  nanargmin,
  nonzero,
  partition,
  searchsorted,
  sort,
  unique,
)
from primc.numpy._statistics import (
  average,
  bincount,
  corrcoef,
  cov,
  histogram,
  histogram_bin_edges,
  median,
  nancumprod,
  nancumsum,
  nanmax,
  nanmean,
  nanmedian,
  nanmin,
  nanpercentile,
  nanprod,
  nanquantile,
  nanstd,
  nansum,
  nanvar,
  percentile,
  quantile,
)
from primc.numpy._tracer import (
  _NAMESPACES,
  _TRACER_METHODS,
  add_n,
)
from primc.numpy._ufuncs import (
  _unary,
  abs,
  absolute,
  acos,
  acosh,
  add,
  angle,
  arccos,
  arccosh,
  arcsin,
  arcsinh,
  arctan,
  arctan2,
  arctanh,
  around,
  asin,
  asinh,
  assign,
  atan,
  atan2,
  atanh,
  bitwise_and,
  bitwise_invert,
  bitwise_left_shift,
  bitwise_not,
  bitwise_or,
  bitwise_right_shift,
  bitwise_xor,
  cbrt,
  ceil,
  clip,
  conj,
  conjugate,
  copysign,
  cos,
  cosh,
  deg2rad,
  degrees,
  divide,
  divmod,
  divmod_,
  equal,
  exp,
  exp2,
  expm1,
  fabs,
  fix,
  float_power,
  floor,
  floor_divide,
  fmax,
  fmin,
  fmod,
  greater,
  greater_equal,
  heaviside,
  hypot,
  imag,
  invert,
  isclose,
  isfinite,
  isinf,
  isnan,
  isneginf,
  isposinf,
  ldexp,
  left_shift,
  less,
  less_equal,
  log,
  log1p,
  log2,
  log10,
  logaddexp,
  logaddexp2,
  logical_and,
  logical_not,
  logical_or,
  logical_xor,
  maximum,
  minimum,
  mod,
  modf,
  multiply,
  nan_to_num,
  negative,
  nextafter,
  not_equal,
  positive,
  pow,
  power,
  rad2deg,
  radians,
  real,
  real_if_close,
  reciprocal,
  relu,
  remainder,
  right_shift,
  rint,
  round,
  round_,
  scale,
  sigmoid,
  sign,
  signbit,
  sin,
  sinc,
  sinh,
  spacing,
  sqrt,
  square,
  stop_gradient,
  subtract,
  tan,
  tanh,
  true_divide,
  trunc,
  where,
)
from primc.numpy._views import (
  errstate,
  geterr,
  geterrcall,
  seterr,
  seterrcall,
)


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


_rebind(_wrap_ops(globals()))  # (every public op takes front ends' values)


fft = _Namespace(
  "fft",
  " (numpy's transforms are complex-valued; primc's dtypes are real)",
  fftshift=_front_end_aware(_op(lambda x, axes=None: _fftshift(x, axes))),
  ifftshift=_front_end_aware(_op(lambda x, axes=None: _fftshift(x, axes, inverse=True))),
  # numpy's own, numpy.fft imported at the first call (~1 ms of `import primc.numpy`)
  fftfreq=lambda *args, **kwargs: np.fft.fftfreq(*args, **kwargs),
  rfftfreq=lambda *args, **kwargs: np.fft.rfftfreq(*args, **kwargs),
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
  norm=_front_end_aware(norm.__wrapped_op__, "linalg.norm"),  # (numpy's is linalg's)
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

_NAMESPACES.update({"numpy": globals(), "numpy.linalg": vars(linalg), "numpy.fft": vars(fft)})
