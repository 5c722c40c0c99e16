"""Fixed points found by iteration, differentiated by the implicit function theorem:
autograd's `fixed_point` (`autograd.misc.fixed_points`), with its signature.

Differentiating through the iterations would cost a derivative of every step (a hundred
steps of a slow contraction are a hundred times the work, and a gradient of a gradient
squares that) and would depend on where the iteration started. At a fixed point
x* = f(a)(x*), the derivative of x* with respect to `a` is instead

    dx*/da = (I - df(a)(x)/dx)^-1 df(a)(x)/da   at x = x*,

and reverse mode needs only cotangents: for the output cotangent g, the adjoint w solves
w = g + (df(a)(x*)/dx)^T w, found by the same iteration (a fixed point itself, so a
gradient of a gradient differentiates it by this same rule), then a's cotangent is
(df(a)(x*)/da)^T w. The iteration converges where f(a) contracts near x*, the condition
under which iterating found x* at all.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from primc import lax
from primc import numpy as pnp
from primc.api import vjp
from primc.custom import custom_vjp
from primc.trace import aval_of
from primc.tree import tree_flatten, tree_map, tree_unflatten


def _iterate(f: Callable, a: Any, x0: Any, distance: Callable, tol: float) -> Any:
  """x = f(a)(x) from x0 until distance(x, its previous value) <= tol (at least one step,
  as autograd's); a traced loop, so it runs under `jit` and `vmap` too."""
  step = f(a)
  first = step(x0)

  def going(carry):
    x, previous = carry
    return distance(x, previous) > tol

  def body(carry):
    x, _ = carry
    return step(x), x

  return lax.while_loop(going, body, (first, _like(x0, first)))[0]


def _like(x0, first):
  """The start as a value of the step's output types (a Python float start of a float32
  step is float32): the loop's carry keeps its types."""
  leaves, tree = tree_flatten(first)
  starts = tree_flatten(x0)[0]
  return tree_unflatten(
    tree,
    [
      pnp.broadcast_to(pnp.asarray(s, aval_of(y).dtype), aval_of(y).shape)
      for s, y in zip(starts, leaves, strict=True)
    ],
  )


@functools.partial(custom_vjp, nondiff_argnums=(0, 3, 4))
def _fixed_point(f, a, x0, distance, tol):
  return _iterate(f, a, x0, distance, tol)


def _forward(f, a, x0, distance, tol):
  x = _fixed_point(f, a, x0, distance, tol)  # (itself: a derivative of the residual x*
  return x, (a, x)  # is this rule's again, not one through the loop)


def _adjoint_step(f: Callable, params) -> Callable:
  """The adjoint iteration's step at `params` = (a, x*, g): w -> g + (df(a)(x*)/dx)^T w."""
  a, x, g = params
  _, pull = vjp(f(a), x)
  return lambda w: tree_map(lambda u, v: u + v, g, pull(w)[0])


def _backward(f, distance, tol, residuals, g):
  a, x = residuals
  zero = tree_map(pnp.zeros_like, g)
  w = _fixed_point(functools.partial(_adjoint_step, f), (a, x, g), zero, distance, tol)
  _, pull = vjp(lambda a: f(a)(x), a)
  return pull(w)[0], None  # (the start has no effect on the fixed point)


_fixed_point.defvjp(_forward, _backward)


def fixed_point(f: Callable, a: Any, x0: Any, distance: Callable, tol: float) -> Any:
  """The fixed point x* = f(a)(x*), iterated from `x0` until `distance(x, previous x)` is
  at most `tol` (autograd's `fixed_point`: `from primc.fixed_points import fixed_point`).

  Args:
    f: a function of the parameters `a` returning the step, a function of x.
    a: the parameters (an array or a pytree of arrays): what derivatives are taken of.
    x0: the start (an array, or a pytree of them as f(a) takes); it gets no derivative.
    distance: distance(x, y), a scalar.
    tol: the distance at which the iteration stops (one the dtype cannot reach never
      stops, as autograd's loop).

  Returns:
    x*, differentiable with respect to `a` at every order (reverse mode) by the implicit
    function theorem, not through the iterations (see the module's docstring).
  """
  return _fixed_point(f, a, _typed_start(x0, a), distance, tol)


def _typed_start(x0, a):
  """A Python number start as an array of the parameters' float dtype (numpy's rule for a
  Python scalar among float32 arrays: float32), as the step's first value would be."""
  leaves, tree = tree_flatten(x0)
  if not any(type(x) in (float, int) for x in leaves):
    return x0
  floats = [aval_of(pnp.asarray(p)).dtype for p in tree_flatten(a)[0]]
  floats = [d for d in floats if d in ("float32", "float64")]
  dtype = "float32" if floats and all(d == "float32" for d in floats) else "float64"
  return tree_unflatten(
    tree, [pnp.asarray(x, dtype) if type(x) in (float, int) else x for x in leaves]
  )
