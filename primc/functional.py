"""MindSpore-style functional differentiation: `grad(fn, grad_position, weights,
has_aux)` and `value_and_grad(...)` (seed 003's keywords; `primc.grad` is JAX-style).

- `grad_position`: an int or tuple of ints (positional inputs to differentiate), or None.
- `weights`: parameters (`primc.nn.Parameter`, e.g. `model.trainable_params()`) that `fn`
  uses; their gradients are returned too.
- `has_aux`: `fn` returns `(output, *aux)`; only `output` is differentiated and the aux
  values are returned undifferentiated. Without it, every output is differentiated (the
  gradient of their sum), so `stop_gradient` is the way to exclude one.

Returns the gradients of the positions (a single one for an int), then of the weights:
`grads`, `weight_grads` or `(grads, weight_grads)`; with `has_aux`, `(grads, aux)`.
"""

from __future__ import annotations

import contextlib


from primc import api
from primc import numpy as pnp
from primc.core import PrimcError
from primc.eager import Tensor
from primc.trace import Tracer
from primc.tree import tree_flatten, tree_unflatten

stop_gradient = pnp.stop_gradient


def _raw(x):
  return x.value if isinstance(x, Tensor) else x


@contextlib.contextmanager
def _bound(weights, values):
  """Temporarily gives the weights traced values (so gradients flow to them)."""
  old = [w.value for w in weights]
  for w, v in zip(weights, values):
    w.value = v
  try:
    yield
  finally:
    for w, v in zip(weights, old):
      w.value = v


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False):
  """See the module docstring; returns `(value, grads)` (value: `(output, *aux)` with
  has_aux)."""
  weights = list(weights) if weights is not None else []
  if grad_position is None and not weights:
    raise PrimcError("value_and_grad needs grad_position or weights")

  def run(*args):
    positions = (
      ()
      if grad_position is None
      else ((grad_position,) if isinstance(grad_position, int) else tuple(grad_position))
    )
    raw_args = [_raw(a) for a in args]

    def pure(pos_vals, weight_vals):
      call = list(raw_args)
      for p, v in zip(positions, pos_vals):
        call[p] = v
      with _bound(weights, weight_vals):
        out = fn(*call)
      leaves, tree = tree_flatten(out)
      leaves = [_raw(x) for x in leaves]
      if has_aux:
        if tree.kind not in ("tuple", "list") or len(tree.children) < 2:
          raise PrimcError("has_aux=True needs fn to return (output, aux...)")
        first = tree_flatten(tree_unflatten(tree, leaves)[0])[0]
        value = pnp.sum(first[0])
        return value, tree_unflatten(tree, leaves)
      total = pnp.sum(leaves[0])
      for x in leaves[1:]:
        total = total + pnp.sum(x)
      return total, tree_unflatten(tree, leaves)

    pos_vals = [raw_args[p] for p in positions]
    weight_vals = [w.numpy() for w in weights]
    (_, out), (g_pos, g_w) = api.value_and_grad(pure, argnums=(0, 1), has_aux=True)(
      pos_vals, weight_vals
    )
    wrap = lambda x: x if isinstance(x, Tracer) else Tensor(x)  # traced (jit): arrays
    g_pos = [wrap(g) for g in g_pos]
    g_w = tuple(wrap(g) for g in g_w)
    pos_out = g_pos[0] if isinstance(grad_position, int) else tuple(g_pos)
    grads = g_w if grad_position is None else (pos_out if not weights else (pos_out, g_w))
    value = tree_unflatten(tree_flatten(out)[1], [wrap(x) for x in tree_flatten(out)[0]])
    return value, grads

  return run


def grad(fn, grad_position=0, weights=None, has_aux=False):
  """See the module docstring."""
  vg = value_and_grad(fn, grad_position, weights, has_aux)

  def run(*args):
    value, grads = vg(*args)
    return (grads, tuple(value[1:])) if has_aux else grads

  return run
