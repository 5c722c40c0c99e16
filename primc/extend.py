"""autograd's way of giving a function its own gradient (`autograd.extend`): `primitive`
and `defvjp`, on primc's `custom_vjp`.

    @primitive
    def logsumexp(x):
      m = pnp.max(x)
      return m + pnp.log(pnp.sum(pnp.exp(x - m)))

    defvjp(logsumexp, lambda ans, x: lambda g: g * pnp.exp(x - ans))

A call with a traced argument (under `grad`, `jit`, `vmap`, the eager tape) is one
`custom_vjp` equation: every transform uses the rule, and a derivative of the next order
differentiates the rule, as autograd's does. The function itself is traced, so it must be
written with primc's ops (autograd runs it on raw values, so a black-box library call
inside works there and not here). A call on plain values runs the function as it is.
Positional arguments that are arrays or numbers are differentiable; keywords and other
values are passed through. An argument without a rule (`None`, or fewer rules than
arguments) gets a zero cotangent, as autograd raises for none.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from primc import numpy as pnp
from primc.custom import custom_vjp
from primc.trace import Tracer


def _differentiable(x) -> bool:
  """An array, a number, a traced value or a front end's (an eager tensor)."""
  if isinstance(x, bool):
    return False
  return isinstance(x, (np.ndarray, np.generic, float, int, Tracer)) or (
    pnp.front_end_of((x,), {}) is not None
  )


class primitive:  # noqa: N801 - autograd's spelling
  """A function whose gradient `defvjp` gives (autograd's `@primitive`)."""

  def __init__(self, fun: Callable):
    self.fun = fun
    self.vjps: dict[int, Callable] = {}
    functools.update_wrapper(self, fun)

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    traced = pnp.front_end_of(args, kwargs) is not None or any(isinstance(a, Tracer) for a in args)
    if not traced or not self.vjps:
      return self.fun(*args, **kwargs)  # (on values, or no rule: the function itself)
    diff = [i for i, a in enumerate(args) if _differentiable(a)]

    def full(xs):
      out = list(args)
      for i, x in zip(diff, xs):
        out[i] = x
      return out

    ruled = custom_vjp(lambda *xs: self.fun(*full(xs), **kwargs))
    ruled.__name__ = ruled.__qualname__ = getattr(self.fun, "__qualname__", "primitive")

    def fwd(*xs):
      ans = self.fun(*full(xs), **kwargs)
      return ans, (ans, xs)

    def bwd(residuals, g):
      ans, xs = residuals
      values = full(xs)
      return tuple(
        None if i not in self.vjps else self.vjps[i](ans, *values, **kwargs)(g) for i in diff
      )

    ruled.defvjp(fwd, bwd)
    return ruled(*[args[i] for i in diff])


def defvjp(fun: primitive, *vjpmakers: Callable | None, argnums: Any = None) -> None:
  """Gives `fun` (a `primitive`) its reverse-mode rule, autograd's way: `vjpmakers[k](ans,
  *args, **kwargs)` returns the function g -> the cotangent of argument `argnums[k]`
  (by default 0, 1, ... in order; None: no gradient) for the output cotangent g, where
  `ans` is the function's output on those arguments."""
  if not isinstance(fun, primitive):
    raise TypeError(f"defvjp takes a function decorated with @primitive, got {fun!r}")
  for k, maker in zip(argnums if argnums is not None else range(len(vjpmakers)), vjpmakers):
    if maker is not None:
      fun.vjps[int(k)] = maker
