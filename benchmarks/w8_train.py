"""W8: train the PINN from a cold start, as a new user would (fresh process, one jitted
training step: W3's loss with the Laplacian, its gradient, Adam; 200 steps).

  python benchmarks/w8_train.py primc|jax [--steps N]    (one run, this process)
  python benchmarks/w8_train.py --compare [--steps N]    (fresh processes: primc with an
      empty cache, primc with the cache that run left, JAX; a markdown table)

Times are from process start (the interpreter's own start-up excluded): the first step's
result, and all steps done. Peak memory counts compile workers (their largest) apart.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.common import child_env  # noqa: E402

SIZES = [2, 64, 64, 64, 1]
POINTS = 4096
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


def problem():
  r = np.random.default_rng(0)
  params = [
    ((r.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32))
    for a, b in zip(SIZES[:-1], SIZES[1:])
  ]
  pts = r.uniform(-1, 1, (POINTS, 2)).astype(np.float32)
  f = np.sin(pts[:, 0]).astype(np.float32)
  return params, pts, f


def make_step(np_, value_and_grad, grad):
  from benchmarks.pinn import pinn_loss

  loss = pinn_loss(np_, grad)

  def adam(p, g, m, v, t):
    m = BETA1 * m + (1.0 - BETA1) * g
    v = BETA2 * v + (1.0 - BETA2) * g * g
    m_hat = m / (1.0 - BETA1**t)
    v_hat = v / (1.0 - BETA2**t)
    return p - LR * m_hat / (np_.sqrt(v_hat) + EPS), m, v

  def step(params, m, v, t, pts, f):
    value, grads = value_and_grad(loss)(params, pts, f)
    t = t + 1.0
    new = [
      tuple(adam(p, g, mi, vi, t) for p, g, mi, vi in zip(pw, gw, mw, vw))
      for pw, gw, mw, vw in zip(params, grads, m, v)
    ]
    return (
      value,
      [(w[0], b[0]) for w, b in new],
      [(w[1], b[1]) for w, b in new],
      [(w[2], b[2]) for w, b in new],
      t,
    )

  return step


def run(impl: str, steps: int) -> dict:
  params, pts, f = problem()
  zeros = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
  m, v, t = zeros, [(w.copy(), b.copy()) for w, b in zeros], np.zeros((), np.float32)
  if impl == "jax":
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    step = jax.jit(make_step(jnp, jax.value_and_grad, jax.grad))
  else:
    import primc
    import primc.numpy as pnp

    step = primc.jit(make_step(pnp, primc.value_and_grad, primc.grad))
  times, losses = [], []
  for k in range(steps):
    t1 = time.perf_counter()
    value, params, m, v, t = step(params, m, v, t, pts, f)
    losses.append(float(value))  # the result is there
    times.append(time.perf_counter() - t1)
    if k == 0:
      first = time.perf_counter() - T0
  total = time.perf_counter() - T0
  if impl != "jax":
    primc.cache_stats()  # collects the compile workers (RUSAGE_CHILDREN counts those)
  return {
    "impl": impl,
    "first_step_s": first,
    "total_s": total,
    "steady_ms": float(np.median(times[steps // 2 :]) * 1e3),
    "loss_first": losses[0],
    "loss_last": losses[-1],
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "workers_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
  }


def _fresh(impl, steps, cache, python=sys.executable):
  env = child_env(PRIMC_CACHE_DIR=cache)
  proc = subprocess.run(
    [python, __file__, impl, "--steps", str(steps)],
    env=env,
    capture_output=True,
    text=True,
    timeout=1800,
  )
  if proc.returncode:
    return {"impl": impl, "error": proc.stderr.strip()[-300:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(steps: int, jax_python: str | None) -> None:
  cache = tempfile.mkdtemp(prefix="primc-w8-")
  rows = [
    ("primc, empty cache", _fresh("primc", steps, cache)),
    ("primc, warm cache", _fresh("primc", steps, cache)),
  ]
  python = jax_python or sys.executable
  has_jax = subprocess.run([python, "-c", "import jax"], capture_output=True).returncode == 0
  rows.append(
    (
      "JAX",
      _fresh("jax", steps, cache, python)
      if has_jax
      else {"impl": "jax", "error": "not installed here (make bench-peers installs it)"},
    )
  )
  print(
    f"| W8, {steps} steps | first step | all steps, from process start | steady step "
    "| loss first → last | peak MB (+ compile workers) |"
  )
  print("|---|---|---|---|---|---|")
  for name, r in rows:
    if "error" in r:
      print(f"| {name} | failed: {r['error'][-120:]} | | | | |")
      continue
    print(
      f"| {name} | {r['first_step_s']:.2f} s | {r['total_s']:.2f} s | "
      f"{r['steady_ms']:.1f} ms | {r['loss_first']:.4g} → {r['loss_last']:.4g} | "
      f"{r['peak_mb']:.0f} (+{r['workers_peak_mb']:.0f}) |"
    )


def main() -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("impl", nargs="?", choices=["primc", "jax"])
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--compare", action="store_true")
  parser.add_argument("--jax-python", help="the Python that has JAX (default: this one)")
  args = parser.parse_args()
  if args.compare:
    compare(args.steps, args.jax_python)
    return 0
  print(json.dumps(run(args.impl or "primc", args.steps)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
