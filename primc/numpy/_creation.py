"""Creation: zeros, ones, full, eye, arange, linspace and their kin."""

from __future__ import annotations

import builtins
import math

import numpy as np

from primc import prims as P
from primc.core import FLOAT_DTYPES, dtype_name
from primc.numpy._base import (
  _PYTHON_NUMBERS,
  NotSupportedError,
  _as_array,
  _shape,
  _integer,
  astype,
  broadcast_to,
)
from primc.trace import Tracer, aval_of
from primc.trace import state as trace_state


def _filled(shape, fill_value, dtype, name):
  """`P.full`: staged while tracing; on values numpy's array at once (what evaluating the
  primitive gives, ~5 us sooner: creation functions are called in loops), except where
  the primitive's checks speak (a negative size; a fill numpy would cast unlike it).
  `name`: the creation function's, for an error."""
  shape = _shape(shape, f"{name}'s shape")
  if not trace_state.builders and min(shape, default=0) >= 0:
    dtype = dtype_name(dtype)
    if type(fill_value) is int or type(fill_value) is bool or dtype in FLOAT_DTYPES:
      return np.zeros(shape, dtype) if fill_value == 0 else np.full(shape, fill_value, dtype)
  return P.full(shape, fill_value, dtype)


def zeros(shape, dtype="float64"):
  return _filled(shape, 0, dtype, "zeros")


def ones(shape, dtype="float64"):
  return _filled(shape, 1, dtype, "ones")


# a Python number's kind decides full's dtype, as numpy's: an int makes int64 (as `arange`
# and `array` do), a bool bool, a float float64
_FILL_DTYPES = {float: "float64", int: "int64", bool: "bool"}


def full(shape, fill_value, dtype=None):
  """numpy.full (a Python number's dtype by default, as numpy's: `_FILL_DTYPES`); a
  `fill_value` with a dtype (an array of any rank, broadcast to `shape`, a numpy scalar, a
  traced value) gives its dtype unless `dtype` says otherwise, traced or not. On values,
  a new array, as numpy's (writable)."""
  if type(fill_value) in _PYTHON_NUMBERS:  # (the common call, first)
    return _filled(shape, fill_value, dtype or _FILL_DTYPES[type(fill_value)], "full")
  if isinstance(fill_value, Tracer) or np.ndim(fill_value) > 0:
    value = _as_array(fill_value)
    shape = _shape(shape, "full's shape")
    return _fresh(broadcast_to(value if dtype is None else astype(value, dtype), shape))
  if isinstance(fill_value, (np.ndarray, np.generic)):
    dtype = dtype or aval_of(np.asarray(fill_value)).dtype
  return _filled(shape, fill_value, dtype or "float64", "full")


def _fresh(x):
  """`x` as a new array where it is a value (a broadcast view is read-only)."""
  return x if isinstance(x, Tracer) else np.array(x)


def zeros_like(x, dtype=None, shape=None):
  return full_like(x, 0, dtype, shape)


def ones_like(x, dtype=None, shape=None):
  return full_like(x, 1, dtype, shape)


def full_like(x, fill_value, dtype=None, shape=None):
  """numpy.full_like; `shape` replaces x's (its dtype is kept)."""
  a = aval_of(_as_array(x))
  shape = a.shape if shape is None else _shape(shape, "full_like's shape")
  if isinstance(fill_value, Tracer) or np.ndim(fill_value) > 0:
    return _fresh(broadcast_to(astype(_as_array(fill_value), dtype or a.dtype), shape))
  return _filled(shape, fill_value, dtype or a.dtype, "full_like")


def eye(n, m=None, k=0, dtype="float64"):
  """numpy.eye: ones on diagonal k."""
  if not isinstance(k, (int, np.integer)):  # eye(n, m, dtype) as primc once took it
    k, dtype = 0, k
  n = _integer(n, "eye's N")
  m = n if m is None else _integer(m, "eye's M")
  if not trace_state.builders and min(n, m) >= 0:  # (on values: numpy's, as `_filled`)
    return np.eye(n, m, k, dtype_name(dtype))
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
  dtype = dtype_name(dtype or np.result_type(start, stop, step))
  if not trace_state.builders:  # (on values: the same arithmetic, numpy's at once)
    k = np.arange(n, dtype=dtype)
    return k if start == 0 and step == 1 else k * np.asarray(step, dtype) + np.asarray(start, dtype)
  k = P.iota((n,), 0, dtype)
  if start == 0 and step == 1:
    return k
  return P.add(P.mul(k, P.full((n,), step, dtype)), P.full((n,), start, dtype))


def empty(shape, dtype="float64"):
  """Zeros: numpy leaves the values undefined; primc's are zero."""
  return zeros(shape, dtype)


def empty_like(x, dtype=None, shape=None):
  return zeros_like(x, dtype, shape)


def identity(n, dtype="float64"):
  return eye(n, dtype=dtype)
