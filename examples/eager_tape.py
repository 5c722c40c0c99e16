"""Seed 002 (Paddle dynamic graph), eager tensors with a tape on primc."""

import numpy as np

import primc
import primc.numpy as pnp
from primc import to_tensor


def stop_gradient_defaults():
  a = to_tensor([1.0, 2.0, 3.0])
  b = to_tensor([1.0, 2.0, 3.0], stop_gradient=False)
  print(a.stop_gradient, b.stop_gradient)
  a.stop_gradient = False
  print(a.stop_gradient)
  return b.stop_gradient


def backward_example():
  x = to_tensor([1.0, 2.0, 3.0], stop_gradient=False)
  y = to_tensor([4.0, 5.0, 6.0], stop_gradient=False)
  z = x**2 + 4 * y
  z.backward()
  print("Tensor x's grad is: {}".format(x.grad.numpy()))
  print("Tensor y's grad is: {}".format(y.grad.numpy()))
  return x.grad.numpy(), y.grad.numpy()


def retain_graph_example():
  x = to_tensor([1.0, 2.0, 3.0], stop_gradient=False)
  y = x + 3
  y.backward(retain_graph=True)
  print("Tensor x's grad is: {}".format(x.grad.numpy()))
  first = x.grad.numpy()
  y.backward()  # allowed: the graph was retained; gradients accumulate
  return first, x.grad.numpy()


def clear_grad_example():
  x = np.ones([2, 2], np.float32)
  inputs2 = []
  for _ in range(10):
    tmp = to_tensor(x)
    tmp.stop_gradient = False
    inputs2.append(tmp)
  ret2 = pnp.add_n(inputs2)
  loss2 = pnp.sum(ret2)
  loss2.backward()
  before = loss2.gradient()
  print("Before clear {}".format(before))
  loss2.clear_grad()
  print("After clear {}".format(loss2.gradient()))
  return before, loss2.gradient(), inputs2[0].grad.numpy()


def mechanism_example_1():
  a = to_tensor(2.0, stop_gradient=False)
  b = to_tensor(5.0, stop_gradient=True)
  c = a * b
  c.backward()
  print("Tensor a's grad is: {}".format(a.grad.numpy()))
  print("Tensor b's grad is: {}".format(b.grad))
  return a.grad.numpy(), b.grad


def mechanism_example_2():
  a = to_tensor(2.0, stop_gradient=False)
  b = to_tensor(5.0, stop_gradient=False)
  c = a * b
  d = to_tensor(4.0, stop_gradient=False)
  e = c * d
  e.backward()
  grads = [t.grad.numpy() for t in (a, b, c, d)]
  for name, g in zip("abcd", grads):
    print("Tensor {}'s grad is: {}".format(name, g))
  return grads


def higher_order():
  """primc.eager.grad(create_graph=True) makes the gradient differentiable again."""
  x = to_tensor([0.5, 1.0], stop_gradient=False)
  y = pnp.sum(pnp.tanh(x))
  (dx,) = primc.eager.grad(y, [x], create_graph=True)
  (ddx,) = primc.eager.grad(pnp.sum(dx), [x])
  print("d/dx tanh:", dx.numpy(), " d2/dx2 tanh:", ddx.numpy())
  return dx.numpy(), ddx.numpy()


def training_loop(steps=20):
  """An eager training loop: the backward program is compiled once and cached."""
  from primc import nn, optimizer

  rng = np.random.default_rng(0)
  layer = nn.Linear(3, 1)
  opt = optimizer.SGD(0.1, parameters=layer.parameters())
  x = to_tensor(rng.standard_normal((16, 3)).astype(np.float32))
  target = to_tensor((x.numpy() @ np.array([[1.0], [-2.0], [0.5]], np.float32)))
  losses = []
  for _ in range(steps):
    loss = pnp.mean((layer(x) - target) ** 2)
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss.numpy()))
  print("eager SGD loss:", losses[0], "->", losses[-1])
  return losses


def main():
  print("== seed 002: stop_gradient")
  stop_gradient_defaults()
  print("== seed 002: backward")
  backward_example()
  retain_graph_example()
  clear_grad_example()
  mechanism_example_1()
  mechanism_example_2()
  higher_order()
  training_loop()


if __name__ == "__main__":
  main()
