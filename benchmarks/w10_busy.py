"""W10, a shared machine: steady calls of threaded workloads on an idle machine and beside
1 and 3 CPU-bound processes, primc and its peers (JAX, numpy) measured in the same run.

Each (load, workload, implementation) runs in a fresh process with a warm primc cache:
warm-up calls, then timed calls one by one; the report gives the median, the 90th
percentile and the mean per call, and the load average the machine showed. Targets: beside
the busy processes, primc's mean at most JAX's, and primc's p90 at most 3x its own median.

  python benchmarks/w10_busy.py [--loads 0 1 3] [--only NAME...] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.common import busy_processes, child_env  # noqa: E402


def two_kernel_gradient():
  """jit(grad(lambda W: sum(tanh(X @ W) ** 2))), X 1024 x 8: two threaded kernels."""
  import numpy as np
  from benchmarks import workloads

  r = np.random.default_rng(0)
  x = r.standard_normal((1024, 8)).astype(np.float32)
  w = r.standard_normal((8, 64)).astype(np.float32)
  out = {"args": (w,)}
  import primc
  import primc.numpy as pnp

  out["primc"] = lambda: primc.jit(primc.grad(lambda w: pnp.sum(pnp.tanh(x @ w) ** 2)))
  jax = workloads.jax
  if jax:
    jnp = workloads.jnp
    out["jax"] = lambda: jax.jit(jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2)))

  def numpy_grad(w):
    t = np.tanh(x @ w)
    return x.T @ (2 * t * (1 - t * t))

  out["numpy"] = lambda: numpy_grad
  return out


def _workload(name):
  from benchmarks import workloads

  if name == "two-kernel gradient":
    return two_kernel_gradient()
  return workloads.WORKLOADS[name]()


WORKLOADS = ("two-kernel gradient", "W3", "W5")


def child(name: str, impl: str, seconds: float) -> dict:
  """In a fresh process: per-call times of `impl` on workload `name` (after warm-up)."""
  from benchmarks.suite import _ready

  w = _workload(name)
  fn = w[impl]()
  for _ in range(3):
    _ready(fn(*w["args"]))
  times = []
  start = time.perf_counter()
  while len(times) < 20 or (time.perf_counter() - start < seconds and len(times) < 5000):
    t = time.perf_counter()
    _ready(fn(*w["args"]))
    times.append(time.perf_counter() - t)
  return {"times": times, "load": os.getloadavg()[0]}


def summary(times: list[float]) -> dict:
  s = sorted(times)
  return {
    "median_s": s[len(s) // 2],
    "p90_s": s[int(0.9 * (len(s) - 1))],
    "mean_s": sum(s) / len(s),
    "calls": len(s),
  }


def _run_child(name, impl, seconds, cache):
  env = child_env(PRIMC_CACHE_DIR=cache, PRIMC_BENCH_PEERS="1" if impl == "jax" else "0")
  proc = subprocess.run(
    [sys.executable, __file__, "--child", name, impl, str(seconds)],
    env=env,
    capture_output=True,
    text=True,
    timeout=1200,
  )
  if proc.returncode:
    return {"error": proc.stderr.strip()[-300:]}
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  return {**summary(out["times"]), "load": out["load"]}


def measure(loads, names, impls, seconds) -> dict:
  cache = tempfile.mkdtemp(prefix="primc-w10-")
  os.chmod(cache, 0o700)
  for name in names:  # compile once: every measured process starts warm
    _run_child(name, "primc", 0.0, cache)
  results = {}
  offered = {name: [i for i in impls if _workload(name).get(i)] for name in names}
  for load in loads:
    with busy_processes(load):
      for name in names:
        for impl in offered[name]:
          r = _run_child(name, impl, seconds, cache)
          results.setdefault(name, {}).setdefault(impl, {})[str(load)] = r
          print(
            f"busy {load} {name} {impl}: "
            + (
              r.get("error")
              or ", ".join(f"{k[:-2]} {r[k] * 1e3:.3f} ms" for k in ("median_s", "p90_s", "mean_s"))
            ),
            flush=True,
          )
  return results


def report(results: dict, loads) -> str:
  lines = [
    "| workload | busy processes | impl | median | p90 | mean | p90 / median | "
    "mean / JAX mean | load average |",
    "|" + "---|" * 9,
  ]
  ms = lambda s: f"{s * 1e3:.3f} ms"
  for name, by_impl in results.items():
    for load in map(str, loads):
      jax_mean = by_impl.get("jax", {}).get(load, {}).get("mean_s")
      for impl, rows in by_impl.items():
        r = rows.get(load, {})
        if "median_s" not in r:
          continue
        vs = f"{r['mean_s'] / jax_mean:.2f}" if jax_mean else "—"
        lines.append(
          f"| {name} | {load} | {impl} | {ms(r['median_s'])} | {ms(r['p90_s'])} | "
          f"{ms(r['mean_s'])} | {r['p90_s'] / r['median_s']:.1f} | {vs} | "
          f"{r['load']:.1f} |"
        )
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--child", nargs=3)
  parser.add_argument("--loads", nargs="*", type=int, default=[0, 1, 3])
  parser.add_argument("--only", nargs="*")
  parser.add_argument("--seconds", type=float, default=4.0)
  args = parser.parse_args()
  if args.child:
    name, impl, seconds = args.child
    print(json.dumps(child(name, impl, float(seconds))))
    return
  names = [n for n in WORKLOADS if not args.only or n in args.only]
  from benchmarks import workloads

  impls = ["primc"] + (["jax"] if workloads.jax else []) + ["numpy"]
  results = measure(args.loads, names, impls, args.seconds)
  table = report(results, args.loads)
  print(table)
  if not args.only:
    with open(os.path.join(ROOT, "benchmarks", "results_w10.json"), "w") as f:
      json.dump(
        {
          "machine": {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")},
          "results": results,
        },
        f,
        indent=1,
      )
    with open(os.path.join(ROOT, "benchmarks", "results_w10.md"), "w") as f:
      f.write(table + "\n")


if __name__ == "__main__":
  main()
