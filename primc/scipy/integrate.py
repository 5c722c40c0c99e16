"""`scipy.integrate.odeint`, traced: an explicit Runge-Kutta solver written in primc's own
operations (`primc.lax` loops, so it compiles to a native loop under `jit`), with reverse-mode
derivatives of every order by the adjoint method.

The solver is Dormand and Prince's 5(4) pair with step-size control: a step is accepted
when the RMS over the state of `error / (atol + rtol * max(|y|, |y_new|))` is at most 1, and
every step's size is scaled by `0.9 * ratio^(-1/5)` (within [0.2, 10]); steps end exactly on
the requested times. scipy's odeint calls LSODA (Adams or BDF, switching on stiffness), so
results agree to within the tolerances, not bit for bit, and a stiff problem takes many
small steps here.

Derivatives (`custom_vjp`): the cotangent of the trajectory runs backwards through the
adjoint system `lam' = -lam df/dy`, integrated by `odeint` itself from each requested time
to the one before, together with the state (restarted from the stored value at each time)
and the parameters' cotangent `abar' = -lam df/dargs`. The times' cotangents are
`<g_i, f(y_i, t_i)>` and, for the first, `-<lam(t_0), f(y_0, t_0)>`. The backward pass is
made of `odeint` calls, so a gradient of a gradient differentiates it again. Forward mode
(`jvp`, `jacfwd`) has no rule, as in JAX.
"""

from __future__ import annotations

import numpy as np

from primc import lax
from primc import numpy as pnp
from primc.api import vjp
from primc.custom import custom_vjp
from primc.numpy import NotSupportedError
from primc.trace import aval_of
from primc.tree import tree_flatten, tree_unflatten
from primc.scipy._missing import missing

RTOL = ATOL = 1.49012e-8  # scipy's defaults
MXSTEP = 5000  # steps per requested time before the row is NaN

# Dormand-Prince 5(4): nodes, stage weights, the 5th-order solution's weights and the
# difference of the 4th-order one's (the error estimate)
_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0)
_A = (
  (),
  (1 / 5,),
  (3 / 40, 9 / 40),
  (44 / 45, -56 / 15, 32 / 9),
  (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
  (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
)
_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)
_E = (
  35 / 384 - 5179 / 57600,
  0.0,
  500 / 1113 - 7571 / 16695,
  125 / 192 - 393 / 640,
  -2187 / 6784 + 92097 / 339200,
  11 / 84 - 187 / 2100,
  -1 / 40,
)


def _rms(x):
  return pnp.sqrt(pnp.mean(x * x))


def _weighted(y, k, h, weights):
  """y + h * sum(w_i k_i) over the nonzero weights."""
  return y + h * sum(w * ki for w, ki in zip(weights, k) if w)


def _step(f, y, f0, t, h):
  """One Dormand-Prince step: (y_new, f(y_new, t + h), the error estimate)."""
  k = [f0]
  for c, a in zip(_C[1:], _A[1:]):
    k.append(f(_weighted(y, k, h, a), t + c * h))
  y_new = _weighted(y, k, h, _B)
  f_new = f(y_new, t + h)
  err = h * sum(e * ki for e, ki in zip(_E, k + [f_new]) if e)
  return y_new, f_new, err


def _first_step(f, y0, t0, f0, rtol, atol):
  """An initial step size from the scales of y0, f0 and f's change along f0 (Hairer,
  Norsett and Wanner, Solving ODEs I, II.4)."""
  scale = atol + rtol * pnp.abs(y0)
  d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
  h0 = pnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / pnp.maximum(d1, 1e-300))
  f1 = f(y0 + h0 * f0, t0 + h0)
  d2 = _rms((f1 - f0) / scale) / h0
  top = pnp.maximum(d1, d2)
  h1 = pnp.where(
    top <= 1e-15, pnp.maximum(1e-6, h0 * 1e-3), (0.01 / pnp.maximum(top, 1e-300)) ** 0.2
  )
  return pnp.minimum(100 * h0, h1)


def _solve(func, rtol, atol, mxstep, y0, t, *args):
  """The trajectory at every time of `t` (increasing or decreasing: solved in s = sign * t,
  where it increases)."""
  sign = pnp.where(t[-1] >= t[0], 1.0, -1.0).astype(aval_of(t).dtype)
  f = lambda y, s: sign * func(y, sign * s, *args)
  s = sign * t
  f0 = f(y0, s[0])
  h0 = _first_step(f, y0, s[0], f0, rtol, atol)

  def interval(carry, s_next):
    def unfinished(state):
      s_now, _, _, _, n = state
      return (s_now < s_next) & (n < mxstep)

    def advance(state):
      s_now, y, fy, h, n = state
      last = h >= s_next - s_now
      h_try = pnp.where(last, s_next - s_now, h)
      y_new, f_new, err = _step(f, y, fy, s_now, h_try)
      ratio = _rms(err / (atol + rtol * pnp.maximum(pnp.abs(y), pnp.abs(y_new))))
      ok = ratio <= 1.0
      grow = pnp.clip(0.9 * pnp.maximum(ratio, 1e-10) ** -0.2, 0.2, 10.0)
      return (
        pnp.where(ok, pnp.where(last, s_next, s_now + h_try), s_now),
        pnp.where(ok, y_new, y),
        pnp.where(ok, f_new, fy),
        h_try * grow,
        n + 1,
      )

    s_now, y, fy, h = carry
    s_end, y, fy, h, _ = lax.while_loop(unfinished, advance, (s_now, y, fy, h, 0))
    row = pnp.where(s_end >= s_next, y, np.nan)  # mxstep ran out: NaN, never a short row
    return (s_end, y, fy, h), row

  _, rows = lax.scan(interval, (s[0], y0, f0, h0), s[1:])
  return pnp.concatenate([y0[None], rows])


_odeint = custom_vjp(_solve, nondiff_argnums=(0, 1, 2, 3))


def _forward(func, rtol, atol, mxstep, y0, t, *args):
  # the trajectory from odeint itself, so that a higher order differentiates the residual
  # by this rule too (the solver's loops have no reverse mode)
  ys = _odeint(func, rtol, atol, mxstep, y0, t, *args)
  return ys, (ys, t, args)


def _backward(func, rtol, atol, mxstep, res, g):
  ys, t, args = res
  shapes = [aval_of(a).shape for a in args]
  sizes = [int(np.prod(s)) for s in shapes]
  n = int(np.prod(aval_of(ys).shape[1:]))
  flat = lambda parts: (
    pnp.concatenate([pnp.reshape(p, (-1,)) for p in parts])
    if parts
    else (pnp.zeros((0,), aval_of(ys).dtype))
  )

  def adjoint(state, s, *args):
    y = pnp.reshape(state[:n], aval_of(ys).shape[1:])
    lam = pnp.reshape(state[n : 2 * n], aval_of(ys).shape[1:])
    dy, pull = vjp(lambda y, *a: func(y, s, *a), y, *args)
    lam_y, *lam_args = pull(lam)
    return flat([dy, -lam_y, *(-c for c in lam_args)])

  lam = g[-1]
  abar = pnp.zeros((sum(sizes),), aval_of(ys).dtype)
  t_bar = [None] * aval_of(t).shape[0]
  for i in range(len(t_bar) - 1, 0, -1):
    t_bar[i] = pnp.sum(g[i] * func(ys[i], t[i], *args))
    state = _odeint(
      adjoint, rtol, atol, mxstep, flat([ys[i], lam, abar]), pnp.stack([t[i], t[i - 1]]), *args
    )[-1]
    lam = pnp.reshape(state[n : 2 * n], aval_of(lam).shape) + g[i - 1]
    abar = state[2 * n :]
  t_bar[0] = -pnp.sum((lam - g[0]) * func(ys[0], t[0], *args))
  offsets = np.cumsum([0] + sizes)
  args_bar = [
    pnp.reshape(abar[lo:hi], shape) for lo, hi, shape in zip(offsets[:-1], offsets[1:], shapes)
  ]
  return (lam, pnp.stack(t_bar), *args_bar)


_odeint.defvjp(_forward, _backward)


def odeint(
  func,
  y0,
  t,
  args=(),
  Dfun=None,
  col_deriv=0,
  full_output=0,
  ml=None,
  mu=None,
  rtol=None,
  atol=None,
  tcrit=None,
  h0=0.0,
  hmax=0.0,
  hmin=0.0,
  ixpr=0,
  mxstep=0,
  mxhnil=0,
  mxordn=12,
  mxords=5,
  printmessg=0,
  tfirst=False,
):
  """scipy.integrate.odeint: y(t) for y' = func(y, t, *args), y(t[0]) = y0, at every time
  of `t` (a monotonic 1-d array; row 0 is y0). Differentiable in reverse mode in y0, t and
  args (a tuple of arrays or pytrees), to any order; `func` must read what it is differentiated by
  through `args`, not from an enclosing scope. `rtol`/`atol` as scipy's (default 1.49e-8),
  `mxstep` steps per time (default 5000; past it the row is NaN), `tfirst` as scipy's.
  scipy's solver options (Dfun, full_output, tcrit, h0, hmax, hmin, ...) are refused."""
  options = dict(
    Dfun=(Dfun, None),
    col_deriv=(col_deriv, 0),
    full_output=(full_output, 0),
    ml=(ml, None),
    mu=(mu, None),
    tcrit=(tcrit, None),
    h0=(h0, 0.0),
    hmax=(hmax, 0.0),
    hmin=(hmin, 0.0),
    ixpr=(ixpr, 0),
    mxhnil=(mxhnil, 0),
    mxordn=(mxordn, 12),
    mxords=(mxords, 5),
    printmessg=(printmessg, 0),
  )
  for name, (value, default) in options.items():
    if value is not default and not (np.isscalar(value) and value == default):
      raise NotSupportedError(
        f"primc.scipy.integrate.odeint's {name}= (scipy's LSODA "
        f"option; primc's solver is Dormand-Prince 5(4))"
      )
  args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
  leaves, tree = tree_flatten(list(args))  # (pytrees: a network's list of (W, b))
  y0, t, *leaves = (pnp.asarray(a, np.float64) for a in (y0, t, *leaves))  # as scipy
  if aval_of(t).ndim != 1 or aval_of(t).shape[0] < 1:
    raise ValueError(f"odeint: t must be a 1-d array of times, got shape {aval_of(t).shape}")
  user = func
  if tfirst:
    func = lambda y, s, *flat: user(s, y, *tree_unflatten(tree, list(flat)))
  else:
    func = lambda y, s, *flat: user(y, s, *tree_unflatten(tree, list(flat)))
  return _odeint(
    func, float(rtol or RTOL), float(atol or ATOL), int(mxstep or MXSTEP), y0, t, *leaves
  )


def __getattr__(name: str):
  raise missing("integrate", name)


pnp.wrap_public_functions(globals(), __name__)  # eager tensors and static variables too
