"""Neural-network ops under Paddle's and MindSpore's names (softmax, cross_entropy, ...).

They are numpy-level functions of arrays, public names of `primc.numpy` as the seeds
spell them; `primc.nn` (a front end, a layer above) builds its layers and functional
forms on them."""

from __future__ import annotations

from primc import prims as P
from primc.core import PrimcError, ShapeError
from primc.numpy._base import _as_array, _axes, _float, _op, asarray, inf, reshape
from primc.numpy._reductions import max, mean, sum
from primc.numpy._ufuncs import (
  abs,
  add,
  divide,
  exp,
  less,
  log,
  log1p,
  maximum,
  multiply,
  negative,
  stop_gradient,
  subtract,
  where,
)
from primc.trace import aval_of


@_op(recorded=True)
def logsumexp(x, axis=None, keepdims=False):
  x = _float(x)
  a = aval_of(x)
  axes = _axes(axis, a.ndim)
  m = stop_gradient(max(x, axes, keepdims=True))
  m = where(less(abs(m), inf), m, 0.0)  # all -inf (or inf) slices: no shift
  out = add(log(sum(exp(subtract(x, m)), axes, keepdims=True)), m)
  return out if keepdims else reshape(out, [n for i, n in enumerate(a.shape) if i not in axes])


@_op
def softmax(x, axis=-1):
  x = _float(x)
  z = exp(subtract(x, stop_gradient(max(x, axis, keepdims=True))))
  return divide(z, sum(z, axis, keepdims=True))


@_op
def log_softmax(x, axis=-1):
  return subtract(x, logsumexp(x, axis, keepdims=True))


def _reduce_loss(loss, reduction):
  if reduction == "mean":
    return mean(loss)
  if reduction == "sum":
    return sum(loss)
  if reduction == "none":
    return loss
  raise PrimcError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


@_op
def binary_cross_entropy_with_logits(
  logits, labels, weight=None, pos_weight=None, reduction="mean"
):
  """Sigmoid + binary cross entropy, stable for large |logits| (MindSpore/Paddle signature):
  `-w * (pos_weight * y * log σ(x) + (1 - y) * log(1 - σ(x)))`."""
  x = _float(logits)
  y = asarray(labels, aval_of(x).dtype)
  log_sig = negative(softplus(negative(x)))  # log σ(x)
  log_one_minus = negative(softplus(x))  # log(1 - σ(x))
  pos = multiply(y, log_sig) if pos_weight is None else multiply(multiply(pos_weight, y), log_sig)
  loss = negative(add(pos, multiply(subtract(1.0, y), log_one_minus)))
  if weight is not None:
    loss = multiply(loss, weight)
  return _reduce_loss(loss, reduction)


@_op
def softplus(x):
  """log(1 + exp(x)), computed stably as max(x, 0) + log1p(exp(-|x|))."""
  x = _float(x)
  return add(maximum(x, 0.0), log1p(exp(negative(abs(x)))))


@_op
def cross_entropy(logits, labels, axis=-1, soft_label=False, reduction="mean"):
  """Softmax cross entropy. Integer labels are class indices along `axis`
  (shape of logits without `axis`); `soft_label=True` takes probabilities."""
  logits = _float(logits)
  lsm = log_softmax(logits, axis)
  a = aval_of(logits)
  axis = axis % a.ndim
  labels = _as_array(labels)
  if soft_label:
    loss = negative(sum(multiply(labels, lsm), axis))
  else:
    la = aval_of(labels)
    if la.dtype not in ("int32", "int64"):
      raise PrimcError(
        f"cross_entropy: hard labels must be integers, got {la.dtype} "
        f"(pass soft_label=True for probabilities)"
      )
    if la.shape == a.shape[:axis] + (1,) + a.shape[axis + 1 :]:
      labels = reshape(labels, a.shape[:axis] + a.shape[axis + 1 :])
    expected = a.shape[:axis] + a.shape[axis + 1 :]
    if aval_of(labels).shape != expected:
      raise ShapeError(
        f"labels shape {la.shape} does not match logits {a.shape} (expected {expected})"
      )
    onehot = P.eq(
      P.broadcast_in_dim(labels, a.shape, [i for i in range(a.ndim) if i != axis]),
      P.iota(a.shape, axis, aval_of(labels).dtype),
    )
    loss = negative(sum(where(onehot, lsm, 0.0), axis))
  return _reduce_loss(loss, reduction)


@_op
def mse_loss(x, y, reduction="mean"):
  d = subtract(x, y)
  return _reduce_loss(multiply(d, d), reduction)
