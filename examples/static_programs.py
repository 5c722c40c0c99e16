"""Seed 000/001 (Paddle incubate.autograd), static programs on primc: build a program on
`data` variables, differentiate it at any order, run it with an Executor."""

import numpy as np

import primc.numpy as pnp
from primc import autograd, nn, optimizer, static


class MyNet(nn.Layer):
  def __init__(self, bias_shape=(2, 2)):
    super().__init__()
    self.weight = self.create_parameter(shape=(2, 2), dtype="float32", is_bias=False)
    self.bias = self.create_parameter(shape=bias_shape, dtype="float32", is_bias=True)
    self.add_parameter("weight", self.weight)
    self.add_parameter("bias", self.bias)

  def forward(self, x):
    y = pnp.matmul(x, self.weight) + self.bias
    return pnp.tanh(y)


def recommended_usage(data):
  """The seed's training example: loss = norm(d²y/dx²), Adam, ten iterations."""
  static.reset()
  x = static.data("x", shape=(2, 2), dtype="float32")
  net = MyNet()
  y = net(x)
  grad1 = autograd.grad(y, x)
  grad2 = autograd.grad(grad1, x)
  loss = pnp.norm(grad2, p=2)
  opt = optimizer.Adam(0.01)
  opt.minimize(loss)
  exe = static.Executor()
  exe.run(static.default_startup_program())
  losses = []
  for i, xv in enumerate(data):
    (loss_val,) = exe.run(feed={"x": xv}, fetch_list=[loss])
    print("iter: ", i + 1, " loss: ", loss_val)
    losses.append(float(loss_val))
  return losses


def tanh_derivatives():
  static.reset()
  x = static.data("x", shape=(1,), dtype="float32")
  y = pnp.tanh(x)
  grad1 = autograd.grad(y, x)
  grad2 = autograd.grad(grad1, x)
  grad3 = autograd.grad(grad2, x)
  feed = {"x": np.ones((1,)).astype(np.float32)}
  exe = static.Executor()
  grad1, grad2, grad3 = exe.run(feed=feed, fetch_list=[grad1, grad2, grad3])
  print(grad1, grad2, grad3)  # the seed prints [0.41997433] [-0.6397] [0.6216267]
  return grad1, grad2, grad3


def forward_mode(xv):
  static.reset()

  def func(x):
    return x + x, x * x, pnp.tanh(x)

  x = static.data("x", shape=(1,), dtype="float32")
  y = func(x)
  out = autograd.forward_grad(y, x)
  out = static.Executor().run(feed={"x": xv}, fetch_list=[out])
  print(out)
  return out


def jacobian(xv, yv):
  static.reset()
  x = static.data("x", shape=(2, 8), dtype="float32")
  y = static.data("y", shape=(2, 8), dtype="float32")
  J = autograd.Jacobian(pnp.multiply, (x, y), is_batched=True)  # nothing computed yet
  row = J[:, 0, :]  # the first row, cached
  col = J[:, 0:3, :]  # the first three rows: row 0 comes from the cache
  all_ = J[:]  # everything: rows 0-2 come from the cache
  feed = {"x": xv, "y": yv}
  row, col, all_ = static.Executor().run(feed=feed, fetch_list=[row, col, all_])
  print("Jacobian shapes", row.shape, col.shape, all_.shape, "rows computed:", J.evaluations)
  return row, col, all_, J.evaluations


def variable_shapes(data, fixed_shapes_workaround=False):
  """Appendix 1: inputs whose shape changes. The seed builds one network per shape; with
  primc a `None` dimension works directly (compiled once per fed shape)."""
  static.reset()
  exe = static.Executor()
  if fixed_shapes_workaround:
    losses = []
    for i, inp in enumerate(data):
      x = static.data(f"x{i}", shape=inp.shape, dtype="float32")
      net = MyNet(bias_shape=(2,))
      y = net(x)
      grad1 = autograd.grad(y, x)
      grad2 = autograd.grad(grad1, x)
      losses.append(pnp.norm(grad2, p=2))
      optimizer.Adam(0.01).minimize(losses[-1])
    exe.run(static.default_startup_program())
    feed = {f"x{i}": x for i, x in enumerate(data)}
    history = []
    for epoch in range(10):
      loss_val = exe.run(feed=feed, fetch_list=losses)
      print("epoch: ", epoch + 1, " loss: ", [float(v) for v in loss_val])
      history.append(loss_val)
    return history
  x = static.data("x", shape=(None, 2), dtype="float32")
  net = MyNet(bias_shape=(2,))
  y = net(x)
  loss = pnp.norm(autograd.grad(autograd.grad(y, x), x), p=2)
  optimizer.Adam(0.01).minimize(loss)
  exe.run(static.default_startup_program())
  history = []
  for epoch in range(10):
    loss_val = [float(exe.run(feed={"x": inp}, fetch_list=[loss])[0]) for inp in data]
    print("epoch: ", epoch + 1, " loss: ", loss_val)
    history.append(loss_val)
  return history


def main():
  rng = np.random.default_rng(0)
  static.enable_static()
  autograd.enable_prim()
  print("== seed 000: MyNet with a second-order gradient in the loss, Adam")
  recommended_usage([rng.random((2, 2)).astype(np.float32) for _ in range(10)])
  print("== seed 000: tanh derivatives")
  tanh_derivatives()
  print("== seed 000: forward_grad")
  forward_mode(rng.random(1).astype(np.float32))
  print("== seed 000: lazy Jacobian")
  jacobian(
    rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((2, 8)).astype(np.float32)
  )
  print("== seed 000 appendix: variable shapes (None dimension)")
  variable_shapes([rng.random((n, 2)).astype(np.float32) for n in (3, 4, 5)])
  static.disable_static()


if __name__ == "__main__":
  main()
