"""primc.nn.functional against PyTorch's torch.nn.functional, value and gradients, on
random shapes, strides, paddings, dilations and groups, in float32 and float64 (run by
`make bench-peers`, which installs PyTorch; the test suite's oracles are the definitions
written as loops, which need no PyTorch).

  python benchmarks/check_torch.py [--cases 200] [--seed 0]

Prints one line per kind of op with its cases and largest relative difference, and exits
non-zero when one exceeds its dtype's tolerance.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOL = {"float32": 2e-4, "float64": 1e-10}


def rel(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape:
    return np.inf
  return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))) if a.size else 0.0


def conv_case(rng, dtype):
  nd = int(rng.integers(1, 4))
  groups = int(rng.integers(1, 3))
  cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
  k = [int(rng.integers(1, 4)) for _ in range(nd)]
  stride = [int(rng.integers(1, 3)) for _ in range(nd)]
  dilation = [int(rng.integers(1, 3)) for _ in range(nd)]
  padding = [int(rng.integers(0, 3)) for _ in range(nd)]
  size = [int(rng.integers((kk - 1) * d + 1, (kk - 1) * d + 6)) for kk, d in zip(k, dilation)]
  x = rng.standard_normal((2, cin, *size)).astype(dtype)
  w = rng.standard_normal((cout, cin // groups, *k)).astype(dtype)
  b = rng.standard_normal(cout).astype(dtype)
  return nd, x, w, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def check_conv(rng, dtype, torch, tF, F, primc, pnp):
  nd, x, w, b, kw = conv_case(rng, dtype)
  ours = getattr(F, f"conv{nd}d")
  theirs = getattr(tF, f"conv{nd}d")
  f = lambda x, w, b: pnp.sum(pnp.tanh(ours(x, w, b, **kw)))
  value = ours(x, w, b, **kw)
  grads = primc.grad(f, argnums=(0, 1, 2))(x, w, b)
  tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
  ty = theirs(tx, tw, tb, **kw)
  torch.tanh(ty).sum().backward()
  return max(
    [rel(value, ty.detach().numpy())]
    + [rel(g, t.grad.numpy()) for g, t in zip(grads, (tx, tw, tb))]
  )


def check_pool(rng, dtype, torch, tF, F, primc, pnp):
  k, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
  p = int(rng.integers(0, k // 2 + 1))
  ceil_mode = bool(rng.integers(0, 2))
  size = [int(rng.integers(k, k + 6)) for _ in range(2)]
  x = rng.standard_normal((2, 3, *size)).astype(dtype)
  include = bool(rng.integers(0, 2))
  out = []
  for ours, theirs, extra, torch_extra in (
    (F.max_pool2d, tF.max_pool2d, {}, {}),
    (F.avg_pool2d, tF.avg_pool2d, {"count_include_pad": include}, {"count_include_pad": include}),
  ):
    f = lambda x: pnp.sum(ours(x, k, s, p, ceil_mode, **extra) ** 2)
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx, k, s, p, ceil_mode=ceil_mode, **torch_extra)
    (ty**2).sum().backward()
    out += [rel(ours(x, k, s, p, ceil_mode, **extra), ty.detach().numpy())]
    out += [rel(primc.grad(f)(x), tx.grad.numpy())]
  size_out = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
  tx = torch.tensor(x, requires_grad=True)
  ty = tF.adaptive_avg_pool2d(tx, size_out)
  (ty**3).sum().backward()
  g = primc.grad(lambda x: pnp.sum(F.adaptive_avg_pool2d(x, size_out) ** 3))(x)
  out += [rel(F.adaptive_avg_pool2d(x, size_out), ty.detach().numpy()), rel(g, tx.grad.numpy())]
  return max(out)


def check_norm_and_loss(rng, dtype, torch, tF, F, primc, pnp):
  x = rng.standard_normal((4, 3, 5, 5)).astype(dtype) * 2 + 1
  g, b = rng.standard_normal(3).astype(dtype), rng.standard_normal(3).astype(dtype)
  f = lambda x, g, b: pnp.sum(pnp.sin(F.batch_norm(x, None, None, g, b, training=True)))
  tx, tg, tb = (torch.tensor(a, requires_grad=True) for a in (x, g, b))
  ty = tF.batch_norm(tx, None, None, tg, tb, training=True)
  torch.sin(ty).sum().backward()
  out = [rel(F.batch_norm(x, None, None, g, b, training=True), ty.detach().numpy())]
  out += [rel(a, t.grad.numpy()) for a, t in zip(primc.grad(f, (0, 1, 2))(x, g, b), (tx, tg, tb))]
  shape = (5, 5)
  lw, lb = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
  tx = torch.tensor(x, requires_grad=True)
  ty = tF.layer_norm(tx, shape, torch.tensor(lw), torch.tensor(lb))
  (ty**2).sum().backward()
  gl = primc.grad(lambda x: pnp.sum(F.layer_norm(x, shape, lw, lb) ** 2))(x)
  out += [rel(F.layer_norm(x, shape, lw, lb), ty.detach().numpy()), rel(gl, tx.grad.numpy())]
  logits = rng.standard_normal((6, 7)).astype(dtype)
  labels = rng.integers(0, 7, 6)
  tl = torch.tensor(logits, requires_grad=True)
  tloss = tF.cross_entropy(tl, torch.tensor(labels))
  tloss.backward()
  gc = primc.grad(lambda z: F.cross_entropy(z, labels))(logits)
  out += [rel(F.cross_entropy(logits, labels), tloss.item()), rel(gc, tl.grad.numpy())]
  return max(out)


def check_seed_vgg11(torch, tF, primc):
  """The dynamic-graph seed's program (vgg11, a 224x224 image, cross entropy,
  `loss.backward()`) against the same network in PyTorch with the same weights: the loss
  and every parameter's gradient (dropout off: `eval()`, so both are deterministic). In
  float64: a max pool routes its gradient to its window's largest element, and in float32
  two elements within rounding of each other make the two frameworks' (or two BLAS thread
  counts') choices differ somewhere in 3 million windows, moving 1e-3 of a gradient."""
  from primc.nn import functional as F
  from primc.vision.models import vgg11

  primc.seed(0)
  model = vgg11().eval()
  for _, p in model.named_parameters():
    p.value = p.value.astype("float64")
  x, label = primc.rand([1, 3, 224, 224], "float64"), primc.randint(0, 1000)
  loss = F.cross_entropy(model(x), label)
  loss.backward()
  named = model.named_parameters()
  tp = {n: torch.tensor(p.numpy(), requires_grad=True) for n, p in named}
  h = torch.tensor(x.numpy())
  for i, layer in enumerate(model.features.sublayers()):
    kind = type(layer).__name__
    if kind == "Conv2D":
      h = tF.conv2d(h, tp[f"features.{i}.weight"], tp[f"features.{i}.bias"], padding=1)
    elif kind == "ReLU":
      h = torch.relu(h)
    else:
      h = tF.max_pool2d(h, 2, 2)
  h = tF.adaptive_avg_pool2d(h, (7, 7)).reshape(1, -1)
  for j in (0, 3):  # Linear, ReLU, Dropout, Linear, ReLU, Dropout, Linear
    h = torch.relu(h @ tp[f"classifier.{j}.weight"] + tp[f"classifier.{j}.bias"])
  h = h @ tp["classifier.6.weight"] + tp["classifier.6.bias"]
  tloss = tF.cross_entropy(h, torch.tensor(label.numpy()))
  tloss.backward()
  diffs = [rel(loss.numpy(), tloss.item())]
  diffs += [rel(p.grad.numpy(), tp[n].grad.numpy()) for n, p in named]
  return max(diffs), len(named)


CHECKS = {"conv": check_conv, "pool": check_pool, "norm_and_loss": check_norm_and_loss}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cases", type=int, default=100)
  ap.add_argument("--seed", type=int, default=0)
  a = ap.parse_args()
  import torch
  import torch.nn.functional as tF

  import primc
  import primc.numpy as pnp
  from primc.nn import functional as F

  rng = np.random.default_rng(a.seed)
  failed = False
  for name, check in CHECKS.items():
    for dtype in ("float32", "float64"):
      worst = max(check(rng, dtype, torch, tF, F, primc, pnp) for _ in range(a.cases // 2 or 1))
      ok = worst <= TOL[dtype]
      failed |= not ok
      print(
        f"{name} {dtype}: {a.cases // 2 or 1} cases, max rel. diff {worst:.2e}"
        f" {'ok' if ok else 'OVER ' + str(TOL[dtype])}"
      )
  worst, n = check_seed_vgg11(torch, tF, primc)
  ok = worst <= TOL["float64"]
  failed |= not ok
  print(f"seed vgg11: loss and {n} gradients, max rel. diff {worst:.2e} {'ok' if ok else 'OVER'}")
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  main()
