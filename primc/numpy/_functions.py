"""The rest of numpy's names programs use, composed of the other modules' ops: ranges
(linspace, logspace, geomspace), windows, select and piecewise, whole-array comparisons
(allclose, array_equal), apply_along_axis, and numpy's dtype names and predicates."""

from __future__ import annotations

import builtins

import numpy as np

from primc import prims as P
from primc.batching import batch_program
from primc.core import PrimcError, PrimcTypeError, ShapedArray, ShapeError
from primc.numpy._base import (
  _axis,
  NotSupportedError,
  _as_array,
  _float,
  _op,
  _promote,
  asarray,
  broadcast_to,
  int64,
  moveaxis,
  reshape,
  shape,
)
from primc.numpy._creation import full_like, zeros_like
from primc.numpy._reductions import all
from primc.numpy._shape import roll
from primc.numpy._ufuncs import (
  _nan_mask,
  equal,
  isclose,
  log10,
  logical_and,
  logical_or,
  power,
  subtract,
  where,
)
from primc.trace import Tracer, aval_of, eval_program, trace_flat


def result_type(*args):
  """numpy.result_type of arrays (traced ones too), scalars and dtypes (not lists: numpy
  reads a list as a structured dtype's fields)."""
  if builtins.any(isinstance(a, (list, tuple)) for a in args):
    raise PrimcTypeError("result_type takes arrays, scalars and dtypes, not lists or tuples")
  return np.result_type(
    *[
      np.dtype(aval_of(_as_array(a)).dtype) if not isinstance(a, (type, np.dtype, str)) else a
      for a in args
    ]
  )


dtype, finfo, iinfo, newaxis = np.dtype, np.finfo, np.iinfo, None
triu_indices, tril_indices, diag_indices = np.triu_indices, np.tril_indices, np.diag_indices


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
def select(condlist, choicelist, default=0):
  if len(condlist) != len(choicelist):
    raise ShapeError("select: condlist and choicelist differ in length")
  for k, cond_ in enumerate(condlist):
    if aval_of(_as_array(cond_)).dtype != "bool":
      raise PrimcTypeError(f"select: condlist's entry {k} is not boolean: {aval_of(cond_)}")
  out = default
  for cond_, choice in reversed(list(zip(condlist, choicelist))):
    out = where(cond_, choice, out)
  return _as_array(out)


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


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
  exps = linspace(start, stop, num, endpoint=endpoint, axis=axis)
  out = power(base, exps)
  return out if dtype is None else asarray(out, dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
  if not isinstance(start, Tracer) and not isinstance(stop, Tracer):
    return np.geomspace(start, stop, num, endpoint=endpoint, dtype=dtype, axis=axis)
  return logspace(log10(start), log10(stop), num, endpoint, 10.0, dtype, axis)


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
def array_equiv(a1, a2):
  """Whether a1 and a2 are equal after broadcasting (False when they cannot broadcast)."""
  a1, a2 = _as_array(a1), _as_array(a2)
  try:
    np.broadcast_shapes(aval_of(a1).shape, aval_of(a2).shape)
  except ValueError:
    return asarray(False)
  return all(equal(a1, a2))


@_op
def apply_along_axis(func1d, axis, arr, *args, **kwargs):
  """func1d applied to every 1-D slice along `axis` (traced once on one slice and batched,
  not a loop); the result's axes take the place of `axis`, as numpy's."""
  arr = _as_array(arr)
  nd = aval_of(arr).ndim
  axis = _axis(axis, nd)
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

  window.__name__ = window.__qualname__ = name
  window.__doc__ = f"numpy.{name} (a constant array)."
  return window


hamming, hanning, blackman, bartlett, kaiser = map(
  _window, ("hamming", "hanning", "blackman", "bartlett", "kaiser")
)


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
