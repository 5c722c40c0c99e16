"""The benchmark workloads W1-W7 (and variants as users call them: a numpy scalar, closed-over
weights, a dense Hessian of n variables): for each, primc and peer implementations with
the same inputs (float32, fixed seed). A peer is None where it has no implementation."""

from __future__ import annotations

import os

import numpy as np

import primc
import primc.numpy as pnp
from benchmarks.pinn import pinn_loss as _pinn

jax = jnp = None
if os.environ.get("PRIMC_BENCH_PEERS", "1") != "0":  # 0: a primc-only child process
  try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
  except Exception:  # JAX is optional: `make bench-peers` installs it
    jax = jnp = None


def rng():
  return np.random.default_rng(0)


# --- W1: tanh 1st-3rd derivatives by nested grad ------------------------------------------


def _w1(grad, np_, jit):
  d1 = grad(lambda x: np_.sum(np_.tanh(x)))
  d2 = grad(lambda x: np_.sum(d1(x)))
  d3 = grad(lambda x: np_.sum(d2(x)))
  return jit(lambda x: (d1(x), d2(x), d3(x)))


def _w1_numpy(x):
  t = np.tanh(x)
  d1 = 1 - t * t
  return d1, -2 * t * d1, d1 * (6 * t * t - 2)


def w1(n):
  x = rng().uniform(-2, 2, n).astype(np.float32)
  return dict(
    args=(x,),
    primc=lambda: _w1(primc.grad, pnp, primc.jit),
    numpy=lambda: _w1_numpy,
    jax=(lambda: _w1(jax.grad, jnp, jax.jit)) if jax else None,
  )


def w1_scalar():
  """W1 as users call it on one number: a numpy scalar, not a (1,) array."""
  return dict(
    args=(np.float32(0.5),),
    primc=lambda: _w1(primc.grad, pnp, primc.jit),
    numpy=lambda: _w1_numpy,
    jax=(lambda: _w1(jax.grad, jnp, jax.jit)) if jax else None,
  )


# --- W2: the seed MyNet training step -----------------------------------------------------


def _mynet_step(np_):
  def loss(x, w, b):
    y = lambda x: np_.sum(np_.tanh(x @ w + b))
    if np_ is pnp:
      g1 = lambda x: primc.grad(y)(x)
      g2 = primc.grad(lambda x: np_.sum(g1(x)))(x)
      return np_.sqrt(np_.sum(g2 * g2))
    g1 = jax.grad(y)
    g2 = jax.grad(lambda x: np_.sum(g1(x)))(x)
    return np_.sqrt(np_.sum(g2 * g2))

  vg = (
    primc.value_and_grad(loss, argnums=(1, 2))
    if np_ is pnp
    else jax.value_and_grad(loss, argnums=(1, 2))
  )

  def step(x, w, b, mw, vw, mb, vb, t):
    value, (gw, gb) = vg(x, w, b)

    def adam(p, g, m, v):
      m = 0.9 * m + 0.1 * g
      v = 0.999 * v + 0.001 * g * g
      return p - 0.01 * (m / (1 - 0.9**t)) / (np_.sqrt(v / (1 - 0.999**t)) + 1e-8), m, v

    w, mw, vw = adam(w, gw, mw, vw)
    b, mb, vb = adam(b, gb, mb, vb)
    return value, w, b, mw, vw, mb, vb

  return step


def w2():
  r = rng()
  z = np.zeros((2, 2), np.float32)
  args = (
    r.random((2, 2), dtype=np.float32),
    r.standard_normal((2, 2)).astype(np.float32),
    np.zeros((2, 2), np.float32),
    z,
    z,
    z,
    z,
    np.ones((), np.float32),
  )
  return dict(
    args=args,
    primc=lambda: primc.jit(_mynet_step(pnp)),
    numpy=None,
    jax=(lambda: jax.jit(_mynet_step(jnp))) if jax else None,
  )


# --- W3: PINN ------------------------------------------------------------------------------


def w3():
  r = rng()
  sizes = [2, 64, 64, 64, 1]
  params = [
    ((r.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32))
    for a, b in zip(sizes[:-1], sizes[1:])
  ]
  pts = r.uniform(-1, 1, (4096, 2)).astype(np.float32)
  f = np.sin(pts[:, 0]).astype(np.float32)
  return dict(
    args=(params, pts, f),
    primc=lambda: primc.jit(primc.value_and_grad(_pinn(pnp, primc.grad))),
    numpy=None,
    jax=(lambda: jax.jit(jax.value_and_grad(_pinn(jnp, jax.grad)))) if jax else None,
  )


# --- W4: full 64x64 Hessian -----------------------------------------------------------------


def w4():
  r = rng()
  w1_ = (r.standard_normal((64, 64)) / 8).astype(np.float32)
  w2_ = (r.standard_normal((64, 64)) / 8).astype(np.float32)
  b1 = r.standard_normal(64).astype(np.float32)
  b2 = r.standard_normal(64).astype(np.float32)
  x = r.standard_normal(64).astype(np.float32)
  f = lambda np_: lambda x, w1, b1, w2, b2: np_.sum(np_.tanh(w2 @ np_.tanh(w1 @ x + b1) + b2))

  def numpy_hessian(x, w1, b1, w2, b2):
    a = np.tanh(w1 @ x + b1)
    s = 1 - a * a
    z = np.tanh(w2 @ a + b2)
    t = 1 - z * z
    c = w2.T @ t  # d sum / d a
    j = w2 * s[None, :]  # d (w2 a) / d h, with h = w1 x + b1
    hz = -2 * z * t  # second derivative of tanh at the output
    inner = (j.T * hz) @ j - np.diag(2 * a * s * c)
    return w1.T @ inner @ w1

  return dict(
    args=(x, w1_, b1, w2_, b2),
    primc=lambda: primc.jit(primc.hessian(f(pnp))),
    numpy=lambda: numpy_hessian,
    jax=(lambda: jax.jit(jax.hessian(f(jnp)))) if jax else None,
  )


def w4_closed():
  """W4 with the weights closed over (constants of the program), the input the only
  argument: as a model's Hessian is usually written."""
  w = w4()
  x, w1_, b1, w2_, b2 = w["args"]
  f = lambda np_: lambda x: np_.sum(np_.tanh(w2_ @ np_.tanh(w1_ @ x + b1) + b2))
  return dict(
    args=(x,),
    primc=lambda: primc.jit(primc.hessian(f(pnp))),
    numpy=lambda: lambda x: w["numpy"]()(x, w1_, b1, w2_, b2),
    jax=(lambda: jax.jit(jax.hessian(f(jnp)))) if jax else None,
  )


# --- Hessian of Rosenbrock's function (a dense n x n Hessian of a chain) -------------------


def rosenbrock_hessian(n):
  x = rng().uniform(-1, 2, n).astype(np.float32)
  f = lambda np_: lambda x: np_.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

  def numpy_hessian(x):
    h = np.zeros((n, n), x.dtype)
    i = np.arange(n - 1)
    h[i, i] = 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    h[i + 1, i + 1] += 200
    h[i, i + 1] = h[i + 1, i] = -400 * x[:-1]
    return h

  return dict(
    args=(x,),
    primc=lambda: primc.jit(primc.hessian(f(pnp))),
    numpy=lambda: numpy_hessian,
    jax=(lambda: jax.jit(jax.hessian(f(jnp)))) if jax else None,
  )


# --- W5: gradient over 1e7 elements --------------------------------------------------------


def w5(n):
  x = rng().uniform(-3, 3, n).astype(np.float32)
  f = lambda np_: lambda x: np_.sum(np_.sin(x) * np_.exp(-x * x) + np_.tanh(x))

  def numpy_grad(x):
    e = np.exp(-x * x)
    t = np.tanh(x)
    return np.cos(x) * e - 2 * x * np.sin(x) * e + (1 - t * t)

  def fused():
    from benchmarks.w5_grad import fused_grad

    out = np.empty_like(x)
    return lambda x: (fused_grad(x, out), out)[1]

  return dict(
    args=(x,),
    primc=lambda: primc.jit(primc.grad(f(pnp))),
    numpy=lambda: numpy_grad,
    numba=fused,
    jax=(lambda: jax.jit(jax.grad(f(jnp)))) if jax else None,
  )


# --- W6: batched Jacobian of multiply -------------------------------------------------------


def w6():
  r = rng()
  x, y = (
    r.standard_normal((4096, 8)).astype(np.float32),
    r.standard_normal((4096, 8)).astype(np.float32),
  )

  def numpy_jac(x, y):
    eye = np.eye(8, dtype=np.float32)
    return x[:, :, None] * 0 + y[:, :, None] * eye, x[:, :, None] * eye

  return dict(
    args=(x, y),
    primc=lambda: primc.jit(primc.vmap(primc.jacrev(pnp.multiply, argnums=(0, 1)))),
    numpy=lambda: numpy_jac,
    jax=(lambda: jax.jit(jax.vmap(jax.jacrev(jnp.multiply, argnums=(0, 1))))) if jax else None,
  )


# --- W7: d^n/dx^n tanh over 1e5 ---------------------------------------------------------------


def nth_derivative(grad, np_, n):
  h = lambda x: np_.sum(np_.tanh(x))
  for _ in range(n - 1):
    h = (lambda d: lambda x: np_.sum(d(x)))(grad(h))
  return grad(h)


def w7(n):
  x = rng().uniform(-2, 2, 10**5).astype(np.float32)
  return dict(
    args=(x,),
    primc=lambda: primc.jit(nth_derivative(primc.grad, pnp, n)),
    numpy=None,
    jax=(lambda: jax.jit(nth_derivative(jax.grad, jnp, n))) if jax else None,
  )


WORKLOADS = {
  "W1 (1,)": lambda: w1(1),
  "W1 scalar": w1_scalar,
  "W1 1e6": lambda: w1(10**6),
  "W2": w2,
  "W3": w3,
  "W4": w4,
  "W4 closed-over": w4_closed,
  "W5": lambda: w5(10**7),
  "W6": w6,
  "W7 n=6": lambda: w7(6),
  "Hessian n=100": lambda: rosenbrock_hessian(100),
  "Hessian n=1000": lambda: rosenbrock_hessian(1000),
  "Hessian n=3000": lambda: rosenbrock_hessian(3000),
}
