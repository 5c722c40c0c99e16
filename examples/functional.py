"""Seed 003 (MindSpore functional autodiff) on primc.functional."""

import numpy as np

import primc.numpy as pnp
from primc import functional as F
from primc import nn


def setup(seed=0):
  rng = np.random.default_rng(seed)
  x = pnp.ones(5, "float32")  # input tensor
  y = pnp.zeros(3, "float32")  # expected output
  w = nn.Parameter(rng.standard_normal((5, 3)).astype(np.float32), name="w")
  b = nn.Parameter(rng.standard_normal((3,)).astype(np.float32), name="b")
  return x, y, w, b


def function(x, y, w, b):
  z = pnp.matmul(x, w) + b
  return pnp.binary_cross_entropy_with_logits(z, y, pnp.ones_like(z), pnp.ones_like(z))


def function_with_logits(x, y, w, b):
  z = pnp.matmul(x, w) + b
  loss = pnp.binary_cross_entropy_with_logits(z, y, pnp.ones_like(z), pnp.ones_like(z))
  return loss, z


def function_stop_gradient(x, y, w, b):
  z = pnp.matmul(x, w) + b
  loss = pnp.binary_cross_entropy_with_logits(z, y, pnp.ones_like(z), pnp.ones_like(z))
  return loss, F.stop_gradient(z)


def main():
  x, y, w, b = setup()
  loss = function(x, y, w, b)
  print("loss", loss.numpy())
  grads = F.grad(function, (2, 3))(x, y, w, b)
  print("grads", [g.numpy() for g in grads])
  grads_logits = F.grad(function_with_logits, (2, 3))(x, y, w, b)
  print("grads of (loss, z)", [g.numpy() for g in grads_logits])
  grads_stop = F.grad(function_stop_gradient, (2, 3))(x, y, w, b)
  print("grads with stop_gradient(z)", [g.numpy() for g in grads_stop])
  grads_aux, (z,) = F.grad(function_with_logits, (2, 3), has_aux=True)(x, y, w, b)
  print("grads with has_aux", [g.numpy() for g in grads_aux], "z", z.numpy())

  class Network(nn.Cell):
    def __init__(self):
      super().__init__()
      self.w = w
      self.b = b

    def construct(self, x):
      return pnp.matmul(x, self.w) + self.b

  model = Network()
  loss_fn = nn.BCEWithLogitsLoss()

  def forward_fn(x, y):
    z = model(x)
    return loss_fn(z, y)

  grad_fn = F.value_and_grad(forward_fn, None, weights=model.trainable_params())
  loss_value, weight_grads = grad_fn(x, y)
  print("network loss", loss_value.numpy(), "grads", [g.numpy() for g in weight_grads])
  return {
    "loss": loss.numpy(),
    "grads": grads,
    "grads_logits": grads_logits,
    "grads_stop": grads_stop,
    "grads_aux": grads_aux,
    "z": z,
    "network": (loss_value, weight_grads),
    "params": (w, b),
  }


if __name__ == "__main__":
  main()
