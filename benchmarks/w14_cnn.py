"""W14: convolutional networks, primc against JAX (jit, CPU) and PyTorch (eager, CPU) in
one run (`make bench-peers` installs both).

Rows: a small CNN (two conv-BN-ReLU-maxpool blocks and a linear layer) at 64x3x32x32 -
its training step (forward, cross entropy, backward, Adam, one compiled function), its
inference, and the Hessian-vector product of its loss; and vgg11 at 1x3x224x224 - its
training step and inference (dropout left out in every framework). Each row runs in a
fresh process per framework: the first call from an empty cache (compile included), the
median of later calls idle and beside one busy process, and the process's peak memory
(its compile workers included), and the row's first values, compared with primc's. The
networks are written once per framework with the same arithmetic (NCHW, batch statistics
in training, the same initial values); the FLOPs of each row and this machine's GEMM rate
bound the times.

  python benchmarks/w14_cnn.py [--rows small_train,...] [--repeat 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.common import busy_processes, child_env  # noqa: E402

SMALL = [(3, 32), (32, 64)]  # (in, out) channels of the small CNN's 3x3 convolutions
VGG11 = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def small_params(rng):
  p = {}
  for i, (cin, cout) in enumerate(SMALL):
    p[f"w{i}"] = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (9 * cin))).astype("f4")
    p[f"g{i}"], p[f"b{i}"] = np.ones(cout, "f4"), np.zeros(cout, "f4")
  p["wl"] = (rng.standard_normal((64 * 8 * 8, 10)) * 0.01).astype("f4")
  p["bl"] = np.zeros(10, "f4")
  return p


def vgg_params(rng):
  p, cin, i = {}, 3, 0
  for v in VGG11:
    if v != "M":
      p[f"w{i}"] = (rng.standard_normal((v, cin, 3, 3)) * np.sqrt(2 / (9 * cin))).astype("f4")
      p[f"c{i}"], cin, i = np.zeros(v, "f4"), v, i + 1
  for j, (a, b) in enumerate([(512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)]):
    p[f"l{j}"] = (rng.standard_normal((a, b)) * np.sqrt(2 / (a + b))).astype("f4")
    p[f"m{j}"] = np.zeros(b, "f4")
  return p


def networks(np_, conv, pool, lsm):
  """(small_loss, small_logits, vgg_loss, vgg_logits) written in `np_` with `conv(x, w)`
  (3x3, stride 1, padding 1), `pool(x)` (2x2 max) and `lsm` (log-softmax)."""

  def bn(x, g, b):
    mean = np_.mean(x, axis=(0, 2, 3), keepdims=True)
    var = np_.mean((x - mean) ** 2, axis=(0, 2, 3), keepdims=True)
    return (x - mean) / np_.sqrt(var + 1e-5) * g[None, :, None, None] + b[None, :, None, None]

  def small_logits(p, x):
    for i in range(len(SMALL)):
      x = pool(np_.maximum(bn(conv(x, p[f"w{i}"]), p[f"g{i}"], p[f"b{i}"]), 0.0))
    return np_.reshape(x, (x.shape[0], -1)) @ p["wl"] + p["bl"]

  def vgg_logits(p, x):
    i = 0
    for v in VGG11:
      if v == "M":
        x = pool(x)
      else:
        x = np_.maximum(conv(x, p[f"w{i}"]) + p[f"c{i}"][None, :, None, None], 0.0)
        i += 1
    x = np_.reshape(x, (x.shape[0], -1))  # 512x7x7: the adaptive pool is the identity
    x = np_.maximum(x @ p["l0"] + p["m0"], 0.0)
    x = np_.maximum(x @ p["l1"] + p["m1"], 0.0)
    return x @ p["l2"] + p["m2"]

  def loss_of(logits):
    def loss(p, x, labels):
      out = lsm(logits(p, x))
      return -np_.mean(np_.sum(out * labels, axis=1))

    return loss

  return loss_of(small_logits), small_logits, loss_of(vgg_logits), vgg_logits


def adam(np_, p, g, m, v, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
  out = {}
  for k in p:
    m_k = b1 * m[k] + (1 - b1) * g[k]
    v_k = b2 * v[k] + (1 - b2) * g[k] * g[k]
    update = lr * (m_k / (1 - b1**t)) / (np_.sqrt(v_k / (1 - b2**t)) + eps)
    out[k] = (p[k] - update, m_k, v_k)
  return (
    {k: o[0] for k, o in out.items()},
    {k: o[1] for k, o in out.items()},
    {k: o[2] for k, o in out.items()},
  )


def primc_functions():
  import primc
  import primc.numpy as pnp
  from primc import lax

  conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)])
  pool = lambda x: lax.reduce_window(x, -np.inf, "max", (1, 1, 2, 2), (1, 1, 2, 2))
  nets = networks(pnp, conv, pool, lambda z: pnp.log_softmax(z, axis=1))
  return primc, pnp, primc.jit, nets


def jax_functions():
  import jax

  jax.config.update("jax_platforms", "cpu")
  import jax.numpy as jnp
  from jax import lax

  conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)])
  pool = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
  nets = networks(jnp, conv, pool, lambda z: jax.nn.log_softmax(z, axis=1))
  return jax, jnp, jax.jit, nets


def torch_row(name: str, p, x, labels):
  """The row in PyTorch, eager (its CPU kernels: oneDNN's convolutions), as its users
  write it: tensors that require gradients, `backward`, `torch.optim.Adam`."""
  import torch
  import torch.nn.functional as tF

  tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
  tx, ty = torch.tensor(x), torch.tensor(labels)

  def bn(h, g, b):
    mean = h.mean(dim=(0, 2, 3), keepdim=True)
    var = ((h - mean) ** 2).mean(dim=(0, 2, 3), keepdim=True)
    return (h - mean) / torch.sqrt(var + 1e-5) * g[None, :, None, None] + b[None, :, None, None]

  def logits(q, h):
    if name.startswith("small"):
      for i in range(len(SMALL)):
        h = tF.max_pool2d(
          torch.relu(bn(tF.conv2d(h, q[f"w{i}"], padding=1), q[f"g{i}"], q[f"b{i}"])), 2
        )
      return h.reshape(h.shape[0], -1) @ q["wl"] + q["bl"]
    i = 0
    for v in VGG11:
      if v == "M":
        h = tF.max_pool2d(h, 2)
      else:
        h, i = torch.relu(tF.conv2d(h, q[f"w{i}"], q[f"c{i}"], padding=1)), i + 1
    h = h.reshape(h.shape[0], -1)
    h = torch.relu(h @ q["l0"] + q["m0"])
    return torch.relu(h @ q["l1"] + q["m1"]) @ q["l2"] + q["m2"]

  def loss(q):
    return -(tF.log_softmax(logits(q, tx), dim=1) * ty).sum(dim=1).mean()

  if name.endswith("infer"):

    def infer():
      with torch.no_grad():
        return logits(tp, tx).numpy()

    return infer, ()
  if name.endswith("hvp"):
    tv = {k: torch.tensor(v) for k, v in _tangents(p).items()}
    from torch.func import grad, jvp

    plain = {k: t.detach() for k, t in tp.items()}
    return lambda: jvp(grad(lambda q: loss(q)), (plain,), (tv,))[1]["w0"].numpy(), ()
  opt = torch.optim.Adam(list(tp.values()), lr=1e-3)

  def step():
    opt.zero_grad()
    value = loss(tp)
    value.backward()
    opt.step()
    return value.item()

  return step, ()


def _tangents(p):
  rng = np.random.default_rng(1)
  return {k: rng.standard_normal(a.shape).astype("f4") for k, a in p.items()}


def _inputs(name):
  rng = np.random.default_rng(0)
  vgg = name.startswith("vgg")
  p = vgg_params(rng) if vgg else small_params(rng)
  n, size = (1, 224) if vgg else (64, 32)
  x = rng.standard_normal((n, 3, size, size)).astype("f4")
  labels = np.eye(1000 if vgg else 10, dtype="f4")[rng.integers(0, 1000 if vgg else 10, n)]
  return p, x, labels


def row(name: str, impl: str):
  """(function, arguments) of a row in framework `impl`."""
  p, x, labels = _inputs(name)
  if impl == "torch":
    return torch_row(name, p, x, labels)
  lib, np_, jit, (small_loss, small_logits, vgg_loss, vgg_logits) = (
    primc_functions() if impl == "primc" else jax_functions()
  )
  vgg = name.startswith("vgg")
  loss, logits = (vgg_loss, vgg_logits) if vgg else (small_loss, small_logits)
  if name.endswith("infer"):
    return jit(logits), (p, x)
  if name.endswith("hvp"):
    hvp = lambda p, v: lib.jvp(lambda q: lib.grad(loss)(q, x, labels), (p,), (v,))[1]["w0"]
    return jit(hvp), (p, _tangents(p))
  zeros = {k: np.zeros_like(a) for k, a in p.items()}

  def step(p, m, v, t, x, labels):
    value, g = lib.value_and_grad(loss)(p, x, labels)
    p, m, v = adam(np_, p, g, m, v, t)
    return value, p, m, v

  return _loss_only(jit(step)), (p, zeros, zeros, np.float32(1.0), x, labels)


def _loss_only(step):
  """The step, its result the loss (all of its outputs computed and waited for)."""

  def run(*args):
    out = step(*args)
    _ready(out)
    return out[0]

  return run


def value_of(out) -> list[float]:
  """A row's result to compare across frameworks: its first 8 values."""
  return [float(v) for v in np.asarray(out, dtype=np.float64).ravel()[:8]]


ROWS = ["small_train", "small_infer", "small_hvp", "vgg11_train", "vgg11_infer"]
FLOPS = {  # multiply-adds x 2 of the convolutions and products (forward; backward ~2x)
  "small": 2 * 64 * (32 * 32 * 32 * 27 + 16 * 16 * 64 * 288 + 4096 * 10),
  "vgg11": 2 * 7.6e9,
}


def _ready(out):
  for leaf in _leaves(out):
    if hasattr(leaf, "block_until_ready"):
      leaf.block_until_ready()


def _leaves(x):
  if isinstance(x, dict):
    return [y for v in x.values() for y in _leaves(v)]
  if isinstance(x, (list, tuple)):
    return [y for v in x for y in _leaves(v)]
  return [x]


def child(name: str, impl: str, repeat: int, busy: int) -> dict:
  fn, args = row(name, impl)
  t = time.perf_counter()
  out = fn(*args)
  _ready(out)
  cold = time.perf_counter() - t
  times = {}
  for load in sorted({0, busy}):
    with busy_processes(load):
      _ready(fn(*args))
      runs = []
      for _ in range(repeat):
        t = time.perf_counter()
        _ready(fn(*args))
        runs.append(time.perf_counter() - t)
      times[str(load)] = sorted(runs)[len(runs) // 2]
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  return {
    "cold_s": cold,
    "warm_s": times,
    "peak_mb": (peak + peak_children) / 1024,
    "value": value_of(out),
  }


def run_child(name, impl, repeat, busy, cache) -> dict:
  env = child_env(PRIMC_CACHE_DIR=cache, PRIMC_TIERED="0")
  proc = subprocess.run(
    [sys.executable, __file__, "--child", name, impl, str(repeat), str(busy)],
    env=env,
    capture_output=True,
    text=True,
    timeout=3600,
  )
  if proc.returncode:
    return {"error": proc.stderr.strip()[-400:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def available(impl: str) -> bool:
  try:
    __import__({"primc": "primc", "jax": "jax", "torch": "torch"}[impl])
    return True
  except ImportError:
    return False


def report(results: dict, busy: int) -> str:
  lines = [
    "| row | framework | cold first call | warm idle | warm beside busy | peak MB |"
    " primc / it, warm | max rel. diff from primc |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for name, by in results.items():
    for impl, r in by.items():
      if "error" in r:
        lines.append(f"| {name} | {impl} | error: {r['error'][-120:]} | | | | | |")
        continue
      ratio, diff = "", ""
      ours = by.get("primc", {})
      if impl != "primc" and "warm_s" in ours:
        ratio = f"{ours['warm_s']['0'] / r['warm_s']['0']:.2f}"
        a, b = np.asarray(ours.get("value", [])), np.asarray(r.get("value", []))
        if a.size and a.shape == b.shape:
          diff = f"{np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-6)):.1e}"
      lines.append(
        f"| {name} | {impl} | {r['cold_s']:.2f} s | {1e3 * r['warm_s']['0']:.1f} ms | "
        f"{1e3 * r['warm_s'][str(busy)]:.1f} ms | {r['peak_mb']:.0f} | {ratio} | {diff} |"
      )
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--child", nargs=4)
  ap.add_argument("--rows", default=",".join(ROWS))
  ap.add_argument("--repeat", type=int, default=10)
  ap.add_argument("--busy", type=int, default=1)
  ap.add_argument("--json")
  a = ap.parse_args()
  if a.child:
    name, impl, repeat, busy = a.child
    print(json.dumps(child(name, impl, int(repeat), int(busy))))
    return
  impls = [i for i in ("primc", "jax", "torch") if available(i)]
  if "torch" not in impls:
    print("PyTorch is not importable here: its rows are left out", flush=True)
  results = {}
  for name in a.rows.split(","):
    for impl in impls:
      cache = tempfile.mkdtemp(prefix="primc-w14-")
      os.chmod(cache, 0o700)
      r = run_child(name, impl, a.repeat, a.busy, cache)
      results.setdefault(name, {})[impl] = r
      print(name, impl, r, flush=True)
  print(report(results, a.busy))
  if a.json:
    with open(a.json, "w") as f:
      json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
