"""numpy.linalg's functions (the package makes them `primc.numpy.linalg`), and norm,
diagonal, trace, diag and diagflat."""

from __future__ import annotations

import builtins
import collections

import numpy as np

from primc import prims as P
from primc.core import PrimcError, ShapeError
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _axes,
  _float,
  _op,
  _promote_list,
  _integer,
  astype,
  broadcast_shapes,
  broadcast_to,
  expand_dims,
  moveaxis,
  ravel,
  reshape,
  transpose,
)
from primc.numpy._creation import eye, full_like, ones_like, zeros_like
from primc.numpy._indexing import getitem, take
from primc.numpy._products import einsum, matmul
from primc.numpy._reductions import any, max, min, sum
from primc.numpy._shape import _split_at, matrix_transpose, squeeze, tril, triu
from primc.numpy._ufuncs import (
  abs,
  add,
  divide,
  equal,
  greater,
  isnan,
  logical_and,
  logical_not,
  multiply,
  not_equal,
  power,
  sqrt,
  stop_gradient,
  subtract,
  where,
)
from primc.trace import aval_of


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
  k = _integer(offset, "diagonal's offset")
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
  k = _integer(k, "diag's k")
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


# numpy.linalg (primc.numpy.linalg): primitives over the last two axes, batched over the
# leading ones, with derivative rules of every order (primc/ad.py)


def _linalg_op(fn):
  # (errors name linalg.solve, ...)
  fn.__name__ = fn.__qualname__ = "linalg." + fn.__name__.strip("_")
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
  return SlogdetResult(getitem(out, (Ellipsis, 0)), getitem(out, (Ellipsis, 1)))


SlogdetResult = collections.namedtuple("SlogdetResult", "sign logabsdet")  # (numpy's names)


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


@_op
def diagflat(v, k=0):
  return diag(ravel(_as_array(v)), k)


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
    fn.__name__ = fn.__qualname__ = name
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
