"""Statistics: numpy's nan-ignoring reductions, averages, quantiles, covariances,
histograms."""

from __future__ import annotations

import builtins

import numpy as np

from primc import prims as P
from primc.core import FLOAT_DTYPES, PrimcError, PrimcTypeError, ShapeError
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _axes,
  _float,
  _holds_tracer,
  _op,
  _promote,
  asarray,
  astype,
  broadcast_to,
  concatenate,
  expand_dims,
  ravel,
  reshape,
  size,
  stack,
  transpose,
)
from primc.numpy._creation import full_like, ones, zeros, zeros_like
from primc.numpy._indexing import _At, getitem, take, take_along_axis
from primc.numpy._linalg import diagonal
from primc.numpy._products import matmul
from primc.numpy._reductions import (
  _correction,
  _mean,
  _nans_as,
  all,
  cumprod,
  cumsum,
  max,
  mean,
  min,
  prod,
  sum,
)
from primc.numpy._shape import _atleast, squeeze
from primc.numpy._sorting import sort
from primc.numpy._ufuncs import (
  _nan_mask,
  _where,
  add,
  divide,
  equal,
  floor,
  floor_divide,
  greater,
  greater_equal,
  less_equal,
  logical_and,
  logical_not,
  maximum,
  minimum,
  multiply,
  sqrt,
  subtract,
  where,
)
from primc.trace import Tracer, aval_of


def _nan_reduction(name, reduce, fill):
  def fn(a, axis=None, keepdims=False, *, dtype=None, initial=None, where=None):
    return reduce(_nans_as(a, fill), axis, keepdims, dtype, initial, where)

  fn.__name__ = fn.__qualname__ = name
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

  fn.__name__ = fn.__qualname__ = name
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
def histogram_bin_edges(a, bins=10, range=None, weights=None):
  return histogram(a, bins, range)[1]


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


def _known(x) -> np.ndarray:
  """`x`'s values as float64 where they are known while tracing, else an empty array."""
  if isinstance(x, Tracer):
    return np.zeros(0)
  try:
    return np.asarray(x, np.float64)
  except (TypeError, ValueError):  # (a list holding traced values)
    return np.zeros(0)


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
  elif np.ndim(bins) != 1:
    raise PrimcTypeError(
      f"histogram: bins must be an integer or an array of edges, got {type(bins).__name__}"
      f" {bins!r:.40}"
    )
  else:
    edges = ravel(_float(bins))
    if (np.diff(_known(bins)) < 0).any():  # (traced edges are not checked, as in JAX)
      raise PrimcError(f"histogram: bins must increase monotonically, got {bins!r:.60}")
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
