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


def adam_update(param, grad, m, v, step, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8):
  """One Adam step (Kingma & Ba), as in Paddle's Adam: returns (param, m, v)."""
  m = beta1 * m + (1 - beta1) * grad
  v = beta2 * v + (1 - beta2) * grad * grad
  m_hat = m / (1 - beta1**step)
  v_hat = v / (1 - beta2**step)
  return param - lr * m_hat / (pnp.sqrt(v_hat) + eps), m, v


def mynet_train_step(x, weight, bias, m_w, v_w, m_b, v_b, step):
  """The seed's training step: loss, its gradient wrt (W, b), and an Adam update."""
  loss, (g_w, g_b) = primc.value_and_grad(lambda w, b: mynet_loss(x, w, b), argnums=(0, 1))(
    weight, bias
  )
  weight, m_w, v_w = adam_update(weight, g_w, m_w, v_w, step)
  bias, m_b, v_b = adam_update(bias, g_b, m_b, v_b, step)
  return loss, weight, bias, m_w, v_w, m_b, v_b


def mlp_loss(params, x):
  """A tanh MLP with a squared-norm loss (params: list of (W, b))."""
  h = x
  for w, b in params[:-1]:
    h = pnp.tanh(h @ w + b)
  w, b = params[-1]
  return pnp.mean((h @ w + b) ** 2)


# Declared for ahead-of-time compilation: `primc warmup examples/seed_programs.py`.
mynet_step_compiled = primc.jit(mynet_train_step, warmup=[("f32[2,2]",) * 7 + ("f32[]",)])
tanh_derivatives_compiled = primc.jit(tanh_derivatives, warmup=[("f32[1]",), ("f32[1000]",)])
mynet_forward_compiled = primc.jit(mynet_forward, warmup=[("f32[2,2]", "f32[2,2]", "f32[2]")])
