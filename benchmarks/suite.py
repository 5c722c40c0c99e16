"""`make bench` / `make bench-peers`: every workload, every implementation present, side by
side in one run. Steady medians (adaptive repeats), first calls in fresh processes (cold
and warm primc cache), peak memory, and a correctness check. Writes a markdown table and
`benchmarks/results.json`; ratios are to JAX where JAX ran, else to numpy."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.common import child_env, leaves  # noqa: E402


def _flat(x):
  import numpy as np

  return [np.asarray(leaf, np.float64) for leaf in leaves(x)]


def first_call(workload: str, impl: str) -> dict:
  """Run in a fresh process: import, build and first call, then peak memory. Tiered
  (PRIMC_TIERED=1), also the time until the background compile has finished."""
  t_start = time.perf_counter()
  from benchmarks import workloads

  w = workloads.WORKLOADS[workload]()
  t_import = time.perf_counter()
  fn = w[impl]()
  out = fn(*w["args"])
  [x.sum() for x in _flat(out)]
  t_first = time.perf_counter()
  result = {"first_call_s": t_first - t_import, "process_to_result_s": t_first - t_start}
  if os.environ.get("PRIMC_TIERED") == "1":
    fn.wait_compiled()
    result["native_after_s"] = time.perf_counter() - t_import
  [x.sum() for x in _flat(fn(*w["args"]))]
  result["second_call_done_s"] = time.perf_counter() - t_import  # default: interpreted
  for _ in range(2):
    fn(*w["args"])
  return {**result, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# W3 at other numbers of points after its first call (4096): smaller and larger ones
NEW_SIZES = (1000, 2500, 3000, 5000, 6000, 8192)


def new_sizes(impl: str) -> dict:
  """Run in a fresh process: W3's first call, then each of NEW_SIZES called twice: its
  first call (primc: a trace and a plan, no compile; JAX: a trace and a compile) and the
  next (the steady call at that size). Medians over the sizes."""
  import numpy as np
  from benchmarks import workloads

  w = workloads.WORKLOADS["W3"]()
  fn = w[impl]()
  params = w["args"][0]
  _ready(fn(*w["args"]))
  rng = np.random.default_rng(7)
  firsts, calls = [], []
  for n in NEW_SIZES:
    pts = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    args = (params, pts, np.sin(pts[:, 0]).astype(np.float32))
    for times in (firsts, calls):
      t = time.perf_counter()
      _ready(fn(*args))
      times.append(time.perf_counter() - t)
  median = lambda v: sorted(v)[len(v) // 2]
  return {
    "sizes": NEW_SIZES,
    "first_s": firsts,
    "steady_s": calls,
    "median_first_s": median(firsts),
    "median_overhead_s": median([a - b for a, b in zip(firsts, calls)]),
  }


def steady_child(workload: str) -> dict:
  """Run in a fresh process (PRIMC_CPU set by the parent): primc's steady time."""
  from benchmarks import workloads

  w = workloads.WORKLOADS[workload]()
  return {"steady_s": steady(w["primc"](), w["args"])}


def on_cpu(workload: str, cpu: str, cache: str) -> dict:
  """primc's steady time with its kernels compiled for `cpu` (PRIMC_CPU)."""
  env = child_env(PRIMC_CACHE_DIR=cache, PRIMC_CPU=cpu, PRIMC_BENCH_PEERS="0")
  proc = subprocess.run(
    [sys.executable, __file__, "--steady-child", workload],
    env=env,
    capture_output=True,
    text=True,
    timeout=900,
  )
  if proc.returncode:
    return {"error": proc.stderr.strip()[-200:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(workload, impl, cache, policy="0"):
  """A fresh process's first call; `policy`: PRIMC_TIERED ("0" compiles first, "1"
  interprets until compiled, "" the default)."""
  env = child_env(
    PRIMC_CACHE_DIR=cache, PRIMC_TIERED=policy, PRIMC_BENCH_PEERS="1" if impl == "jax" else "0"
  )
  command = ["--new-sizes", impl] if workload is None else ["--child", workload, impl]
  proc = subprocess.run(
    [sys.executable, "-X", "faulthandler", __file__, *command],
    env=env,
    capture_output=True,
    text=True,
    timeout=900,
  )
  if proc.returncode:
    sys.stderr.write(f"{workload} {impl} child failed (exit {proc.returncode}):\n{proc.stderr}")
    return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _ready(out):
  """Waits for every array of `out` (JAX dispatches asynchronously: a pytree of results is
  only done when each of its arrays is)."""
  for leaf in leaves(out):
    if hasattr(leaf, "block_until_ready"):
      leaf.block_until_ready()


def steady(fn, args, budget=1.0):
  """Median seconds per call. Results with asynchronous arrays (JAX) are waited for inside
  the timed region; synchronous ones (primc, numpy) pay no walk over their leaves."""
  import numpy as np

  first = fn(*args)
  asynchronous = any(hasattr(leaf, "block_until_ready") for leaf in leaves(first))
  ready = _ready if asynchronous else (lambda out: None)
  del first
  times = []
  start = time.perf_counter()
  while len(times) < 5 or (time.perf_counter() - start < budget and len(times) < 2000):
    t0 = time.perf_counter()
    ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def interleaved(fns, args, budget=1.0):
  """Median seconds per call of each function when the calls alternate (primc, JAX,
  primc, ...): each one runs right after the other's, as in a process that uses both
  (the other's threads just finished, caches hold the other's data)."""
  import numpy as np

  times = [[] for _ in fns]
  start = time.perf_counter()
  while len(times[0]) < 5 or (time.perf_counter() - start < budget and len(times[0]) < 1000):
    for k, fn in enumerate(fns):
      t0 = time.perf_counter()
      _ready(fn(*args))
      times[k].append(time.perf_counter() - t0)
  return [float(np.median(t)) for t in times]


def fmt(s):
  if s is None:
    return "—"
  return f"{s * 1e6:.1f} µs" if s < 1e-3 else (f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--child", nargs=2)
  parser.add_argument("--only", nargs="*")
  parser.add_argument("--no-first-call", action="store_true")
  parser.add_argument("--new-sizes")
  parser.add_argument(
    "--cpus",
    nargs="*",
    default=[],
    help="also time primc with its kernels compiled for these LLVM CPUs "
    "(PRIMC_CPU), e.g. haswell for AVX2",
  )
  parser.add_argument("--steady-child")
  args = parser.parse_args()
  if args.child:
    print(json.dumps(first_call(*args.child)))
    return
  if args.steady_child:
    print(json.dumps(steady_child(args.steady_child)))
    return
  if args.new_sizes:
    print(json.dumps(new_sizes(args.new_sizes)))
    return
  import numpy as np
  from benchmarks import workloads

  results, cpu_caches = {}, {}
  for name, make in workloads.WORKLOADS.items():
    if args.only and name not in args.only:
      continue
    w = make()
    row = {}
    outs, fns = {}, {}
    for impl in ("primc", "jax", "numpy", "numba"):
      if not w.get(impl):
        continue
      try:
        fn = fns[impl] = w[impl]()
        outs[impl] = _flat(fn(*w["args"]))
        row[impl] = {"steady_s": steady(fn, w["args"])}
      except Exception as e:
        row[impl] = {"error": f"{type(e).__name__}: {e}"[:200]}
    if "steady_s" in row.get("primc", {}) and "steady_s" in row.get("jax", {}):
      pj = interleaved([fns["primc"], fns["jax"]], w["args"])
      row["primc"]["interleaved_s"], row["jax"]["interleaved_s"] = pj
    for cpu in args.cpus:
      if "steady_s" in row.get("primc", {}):
        cache = cpu_caches.setdefault(cpu, tempfile.mkdtemp(prefix=f"primc-bench-{cpu}-"))
        os.chmod(cache, 0o700)
        row["primc"].setdefault("on_cpu", {})[cpu] = on_cpu(name, cpu, cache)
    ref = outs.get("jax") or outs.get("numpy")
    if ref and "primc" in outs:
      err = max(float(np.max(np.abs(a - b) / (1 + np.abs(b)))) for a, b in zip(outs["primc"], ref))
      row["primc"]["max_rel_error_vs_peer"] = err
    if not args.no_first_call:
      for impl in ("primc", "jax"):
        if impl in row and "error" not in row[impl]:
          cache = tempfile.mkdtemp(prefix="primc-bench-")
          os.chmod(cache, 0o700)
          cold = _child(name, impl, cache)
          row[impl]["cold"] = cold
          if impl == "primc":
            # a warm first call takes ~0.1 s: the median of three processes
            warm = [_child(name, impl, cache) for _ in range(3)]
            row[impl]["warm"] = sorted(warm, key=lambda r: r.get("first_call_s", 1e9))[1]
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(cache, mode=0o700)
            row[impl]["tiered"] = _child(name, impl, cache, policy="1")
            shutil.rmtree(cache, ignore_errors=True)
            os.makedirs(cache, mode=0o700)
            row[impl]["default"] = _child(name, impl, cache, policy="")
          shutil.rmtree(cache, ignore_errors=True)
    results[name] = row
    print(
      f"{name}: " + ", ".join(f"{k} {fmt(v.get('steady_s'))}" for k, v in row.items()), flush=True
    )
  if "W7 n=6" in results:
    results["W7 n=6"]["equations"] = _equation_counts()
  if "W3" in results and not args.no_first_call:
    sized = {}
    for impl in ("primc", "jax"):
      if "steady_s" in results["W3"].get(impl, {}):
        cache = tempfile.mkdtemp(prefix="primc-bench-")
        os.chmod(cache, 0o700)
        sized[impl] = _child(None, impl, cache)
        shutil.rmtree(cache, ignore_errors=True)
    results["W3"]["new_sizes"] = sized
  for cache in cpu_caches.values():
    shutil.rmtree(cache, ignore_errors=True)
  _report(results, partial=bool(args.only))
  if args.cpus:
    print(_cpu_report(results, args.cpus))


def _cpu_report(results, cpus) -> str:
  """primc's steady times and ratios to JAX with kernels compiled for other CPUs, beside
  this machine's (the ratio there over the ratio here: 1.0 = as good, relative to JAX,
  on that CPU's vector unit as on this one's). JAX runs this machine's code in both."""
  import platform

  lines = [
    f"\nprimc's kernels compiled for other CPUs (PRIMC_CPU; JAX as here; this machine: "
    f"{platform.processor() or platform.machine()})\n",
    "| workload | primc here | primc / JAX here | "
    + " | ".join(f"primc {c} | primc / JAX {c} | {c} ratio / here" for c in cpus)
    + " |",
    "|" + "---|" * (3 + 3 * len(cpus)),
  ]
  for name, row in results.items():
    here, jax_s = row.get("primc", {}).get("steady_s"), row.get("jax", {}).get("steady_s")
    cells = [fmt(here), f"{here / jax_s:.2f}" if here and jax_s else "—"]
    for cpu in cpus:
      t = row.get("primc", {}).get("on_cpu", {}).get(cpu, {}).get("steady_s")
      cells += [
        fmt(t),
        f"{t / jax_s:.2f}" if t and jax_s else "—",
        f"{t / here:.2f}" if t and here else "—",
      ]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _equation_counts():
  import numpy as np
  from primc import passes
  import primc
  import primc.numpy as pnp
  from benchmarks.workloads import jax, jnp, nth_derivative

  x = np.ones(8, np.float32)
  out = {
    "primc_after_passes": len(
      passes.optimize(primc.make_program(nth_derivative(primc.grad, pnp, 6))(x)).eqns
    )
  }
  if jax:
    out["jax_jaxpr"] = len(jax.make_jaxpr(nth_derivative(jax.grad, jnp, 6))(x).jaxpr.eqns)
  return out


def _report(results, partial=False):
  lines = [
    "| workload | primc steady | JAX steady | numpy steady | primc / JAX "
    "| primc / JAX, alternating | primc / numpy "
    "| primc cold first call, default (second result) "
    "| primc cold first call, compiled first "
    "| primc cold first call, tiered (native after) "
    "| primc warm first call | JAX cold first call | primc peak MB | max rel. error |",
    "|" + "---|" * 14,
  ]
  for name, row in results.items():
    get = lambda impl, key="steady_s": row.get(impl, {}).get(key)
    p, j, n = get("primc"), get("jax"), get("numpy")
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "—"
    cold = row.get("primc", {}).get("cold", {}).get("first_call_s")
    warm = row.get("primc", {}).get("warm", {}).get("first_call_s")
    default = row.get("primc", {}).get("default", {})
    first = (
      f"{fmt(default.get('first_call_s'))} ({fmt(default.get('second_call_done_s'))})"
      if default
      else "—"
    )
    tiered = row.get("primc", {}).get("tiered", {})
    tier = (
      f"{fmt(tiered.get('first_call_s'))} ({fmt(tiered.get('native_after_s'))})" if tiered else "—"
    )
    jcold = row.get("jax", {}).get("cold", {}).get("first_call_s")
    mem = row.get("primc", {}).get("cold", {}).get("peak_rss_mb")
    err = get("primc", "max_rel_error_vs_peer")
    alternating = ratio(get("primc", "interleaved_s"), get("jax", "interleaved_s"))
    lines.append(
      f"| {name} | {fmt(p)} | {fmt(j)} | {fmt(n)} | {ratio(p, j)} | {alternating} | "
      f"{ratio(p, n)} | "
      f"{first} | {fmt(cold)} | {tier} | {fmt(warm)} | {fmt(jcold)} | "
      f"{'—' if mem is None else f'{mem:.0f}'} | "
      f"{'—' if err is None else f'{err:.1e}'} |"
    )
  sized = results.get("W3", {}).get("new_sizes", {})
  if sized:
    ms = lambda r, key: "—" if key not in r else f"{r[key] * 1e3:.0f} ms"
    lines.append(
      "\nW3 at a new size (" + ", ".join(map(str, NEW_SIZES)) + " points after "
      "4096; a fresh process, medians): "
      + "; ".join(
        f"{impl} first call {ms(r, 'median_first_s')}, of which "
        f"{ms(r, 'median_overhead_s')} more than the steady call there"
        for impl, r in sized.items()
      )
    )
  if "W7 n=6" in results:
    eq = results["W7 n=6"].get("equations", {})
    lines.append(
      f"\nW7 n=6 equations: primc after passes {eq.get('primc_after_passes')}, "
      f"JAX jaxpr {eq.get('jax_jaxpr', '—')}"
    )
  imports = {}
  for row in results.values():
    for impl, case in (("primc", "warm"), ("jax", "cold")):
      r = row.get(impl, {}).get(case, {})
      if "first_call_s" in r:
        imports.setdefault(impl, []).append(r["process_to_result_s"] - r["first_call_s"])
  if imports:
    lines.append(
      "\nFirst calls are from the end of the imports to the first result, in a fresh "
      "process; the imports themselves (median; `import primc` does not load "
      "numba, its first compile does, within the first call): "
      + ", ".join(f"{impl} {fmt(sorted(v)[len(v) // 2])}" for impl, v in imports.items())
    )
  table = "\n".join(lines)
  print(table)
  if partial:  # a run of some workloads does not replace the full run's files
    return
  with open(os.path.join(ROOT, "benchmarks", "results.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
  with open(os.path.join(ROOT, "benchmarks", "results.md"), "w") as f:
    f.write(table + "\n")


if __name__ == "__main__":
  main()
