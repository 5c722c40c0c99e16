"""Seed 004 (MegEngine GradManager) on primc.GradManager."""

import numpy as np

import primc.numpy as F
from primc import GradManager, to_tensor


def second_order(x_np):
  x = to_tensor(x_np)
  gm = GradManager().attach([x])  # outer: the second derivative
  gm2 = GradManager().attach([x])  # inner: the first derivative
  with gm:  # gm outside gm2, so gm sees gm2's backward
    with gm2:
      y = F.cos(x)
      gm2.backward(y)
    x_grad = x.grad
    x.grad = None
    gm.backward(x_grad)
  print("first", x_grad.numpy(), "second", x.grad.numpy())
  return x_grad.numpy(), x.grad.numpy()


def second_order_wrong_nesting(x_np):
  x = to_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm2:
    with gm:  # gm inside: it cannot see gm2's backward
      y = F.cos(x)
      x_grad = gm2.backward(y)
      x.grad = None
      gm.backward(x.grad)
  print("wrong nesting: x.grad is", x.grad)
  return x_grad.numpy(), x.grad


def forward_mode_by_two_reverse(x_np, expr=F.cos):
  inp = to_tensor(x_np)
  with GradManager() as gm:
    with GradManager().attach([inp]) as gm2:
      oup = expr(inp)
      oup_grad = F.ones_like(oup)
      gm.attach(oup_grad)
      gm2.backward(oup, oup_grad)
    gm.backward(inp.grad)
  print("jvp", oup_grad.grad.numpy())
  return oup.numpy(), oup_grad.grad.numpy()


def union(x_np):
  x = to_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm | gm2:
    y = F.cos(x)
    gm.backward(y)
    gm2.backward(y)
  print("union", x.grad.numpy())
  return x.grad.numpy()


def union_cannot_see_each_other(x_np):
  x = to_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm | gm2:
    y = F.cos(x)
    gm2.backward(y)
    x_grad = gm2.backward(y)
    x.grad = None
    gm.backward(x_grad)
  print("union, second order: x.grad is", x.grad)
  return x.grad


def main():
  x_np = np.random.default_rng(0).random(10).astype("float32")
  second_order(x_np)
  second_order_wrong_nesting(x_np)
  forward_mode_by_two_reverse(x_np)
  union(x_np)
  union_cannot_see_each_other(x_np)


if __name__ == "__main__":
  main()
