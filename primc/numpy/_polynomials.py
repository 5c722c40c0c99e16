"""Polynomials, correlation and interpolation."""

from __future__ import annotations

import builtins

import numpy as np

from primc.core import PrimcError, ShapeError
from primc.numpy._base import (
  _as_array,
  _float,
  _op,
  _integer,
  array,
  asarray,
  concatenate,
  ravel,
  reshape,
  shape,
  stack,
)
from primc.numpy._creation import ones_like, zeros, zeros_like
from primc.numpy._indexing import getitem, take
from primc.numpy._linalg import _lstsq
from primc.numpy._shape import flip, pad
from primc.numpy._sorting import searchsorted
from primc.numpy._ufuncs import add, clip, divide, greater, less, multiply, power, subtract, where
from primc.trace import aval_of


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
  a, v = _coefficients(a, name, True), _coefficients(v, name, True)
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
  a, v = _coefficients(a, "convolve", True), _coefficients(v, "convolve", True)
  if aval_of(v).shape[0] > aval_of(a).shape[0]:
    a, v = v, a
  return correlate(a, flip(v), mode)


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
  a1, a2 = _coefficients(a1, "polynomial", True), _coefficients(a2, "polynomial", True)
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
  return convolve(_coefficients(a1, "polymul", True), _coefficients(a2, "polymul", True))


def _coefficients(p, name, scalars=False):
  """A polynomial's coefficients: a 1-D array (as numpy's `len(p)` needs), in float; a
  number too where `scalars` (numpy's polyadd, polysub and polymul take one)."""
  p = _float(array(p))
  if scalars and aval_of(p).ndim == 0:
    return reshape(p, (1,))
  if aval_of(p).ndim != 1:
    raise ShapeError(f"{name} needs a 1-D array of coefficients, got shape {aval_of(p).shape}")
  return p


@_op
def polyder(p, m=1):
  """The m-th derivative's coefficients (highest power first)."""
  p, m = _coefficients(p, "polyder"), int(m)  # (numpy's int(m): 1.5 is 1)
  if m < 0:
    raise PrimcError(f"polyder: the order of the derivative must be positive, got {m}")
  for _ in range(m):
    n = aval_of(p).shape[0]
    if n <= 1:
      return zeros((1,), aval_of(p).dtype)
    p = multiply(p[:-1], np.arange(n - 1, 0, -1))  # numpy's promotion: float64
  return p


@_op
def polyint(p, m=1, k=None):
  """The m-th antiderivative's coefficients, integration constants k (0 by default)."""
  p, m = _coefficients(p, "polyint"), int(m)
  if m < 0:
    raise PrimcError(f"polyint: the order of the integral must be positive, got {m}")
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
def vander(x, N=None, increasing=False):
  x = _as_array(x)
  if aval_of(x).ndim != 1:
    raise ShapeError(f"vander needs a 1-D array, got shape {aval_of(x).shape}")
  n = shape(x)[0] if N is None else _integer(N, "vander's N")
  cols = [power(x, k) if k else ones_like(x) for k in range(n)]
  return stack(cols if increasing else cols[::-1], 1)
