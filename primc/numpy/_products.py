"""Products: matmul, dot, einsum, tensordot and their kin."""

from __future__ import annotations

import builtins
import operator

from primc import contraction
from primc import prims as P
from primc.core import ShapeError
from primc.numpy._base import (
  NotSupportedError,
  _as_array,
  _op,
  _promote,
  _promote_list,
  _axis,
  astype,
  broadcast_shapes,
  broadcast_to,
  expand_dims,
  moveaxis,
  ravel,
  reshape,
  stack,
)
from primc.numpy._indexing import getitem
from primc.numpy._reductions import sum
from primc.numpy._shape import squeeze
from primc.numpy._ufuncs import multiply, not_equal, subtract
from primc.trace import aval_of


@_op(recorded=True)
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


@_op(recorded=True)
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


@_op
def vdot(a, b):
  """The dot product of `a` and `b` flattened (of equal sizes, as numpy's)."""
  a, b = ravel(_as_array(a)), ravel(_as_array(b))
  if aval_of(a).shape != aval_of(b).shape:
    raise ShapeError(f"vdot of {aval_of(a).size} and {aval_of(b).size} elements")
  return sum(multiply(a, b))


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
def vecdot(x1, x2, axis=-1):
  """Dot products along `axis` (of equal lengths in both: numpy's gufunc broadcasts only
  the other axes)."""
  x1, x2 = _as_array(x1), _as_array(x2)
  n1, n2 = (aval_of(x).shape[_axis(axis, aval_of(x).ndim)] for x in (x1, x2))
  if n1 != n2:
    raise ShapeError(f"vecdot of vectors of {n1} and {n2} elements along axis {axis}")
  return sum(multiply(x1, x2), axis)


@_op
def matvec(x1, x2):
  return squeeze(matmul(x1, expand_dims(x2, -1)), -1)


@_op
def vecmat(x1, x2):
  return squeeze(matmul(expand_dims(x1, -2), x2), -2)
