"""The seeds' first programs, written with primc.numpy (used by the demo and the tests)."""
import primc
import primc.numpy as pnp


def tanh(x):
  return pnp.tanh(x)


def mynet_forward(x, weight, bias):
  """Seed MyNet's forward: tanh(x @ W + b)."""
  return pnp.tanh(pnp.matmul(x, weight) + bias)


def multiply(x, y):
  return pnp.multiply(x, y)


def tanh_derivatives(x):
  """1st, 2nd and 3rd derivatives of tanh, elementwise (the seed prints them at x=1)."""
  d1 = lambda x: primc.grad(lambda x: pnp.tanh(x).sum())(x)
  d2 = lambda x: primc.grad(lambda x: d1(x).sum())(x)
  d3 = lambda x: primc.grad(lambda x: d2(x).sum())(x)
  return d1(x), d2(x), d3(x)


def mynet_loss(x, weight, bias):
  """Seed MyNet's loss: norm(d²y/dx², p=2) for y = tanh(x @ W + b) (grads of sums)."""
  y = lambda x: mynet_forward(x, weight, bias).sum()
  grad1 = lambda x: primc.grad(y)(x)
  grad2 = primc.grad(lambda x: grad1(x).sum())(x)
  return pnp.norm(grad2, p=2)
