"""W11, the first program: a small training loop from a fresh process with an empty cache,
as a new user runs it, primc and JAX, on an idle machine and beside one busy process.

Programs (each step jitted whole, as users write them):
  MLP  8 -> 64 -> 1 (tanh), 1,024 rows, mean squared error, SGD: 100 steps
  W2   the seed's MyNet step (a gradient of a second derivative's norm, Adam): 100 steps
  W3   the PINN (W3's loss, its gradient, Adam; W8's step): 50 steps
  W4   W4's 64 x 64 Hessian of the network's input, and a step x - 0.01 H x: 100 steps

Times: the imports (numpy, then primc or JAX), the first step's result from the end of
the imports, and every step done from the start of the imports.

  python benchmarks/w11_first.py [--loads 0 1] [--only NAME...] [--repeat N]
  python benchmarks/w11_first.py --child NAME IMPL      (one run, this process)
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.common import busy_processes, child_env, leaves  # noqa: E402

STEPS = {"MLP": 100, "W2": 100, "W3": 50, "W4": 100}


def _mlp(np_, grad):
  r = np.random.default_rng(0)
  x = r.standard_normal((1024, 8)).astype(np.float32)
  y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
  params = [
    (r.standard_normal((8, 64)).astype(np.float32) * 0.3, np.zeros(64, np.float32)),
    (r.standard_normal((64, 1)).astype(np.float32) * 0.1, np.zeros(1, np.float32)),
  ]

  def loss(params, x, y):
    (w1, b1), (w2, b2) = params
    return np_.mean((np_.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)

  def step(params, x, y):
    g = grad(loss)(params, x, y)
    return [(w - 0.05 * gw, b - 0.05 * gb) for (w, b), (gw, gb) in zip(params, g)]

  return step, lambda state: (state, x, y), params, lambda out: out


def _w2(np_, grad):
  from benchmarks import workloads

  w = workloads.w2()
  step = workloads._mynet_step(np_)
  x, *state, t = w["args"]  # t stays 1 (Adam's bias correction of a first step)
  return step, lambda s: (x, *s, t), state, lambda out: out[1:]


def _w3(np_, grad, value_and_grad):
  from benchmarks import w8_train

  params, pts, f = w8_train.problem()
  zeros = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
  state = (params, zeros, [(w.copy(), b.copy()) for w, b in zeros], np.zeros((), np.float32))
  step = w8_train.make_step(np_, value_and_grad, grad)
  return step, lambda s: (*s, pts, f), state, lambda out: out[1:]


def _w4(np_, hessian):
  from benchmarks import workloads

  x, w1, b1, w2, b2 = workloads.w4()["args"]

  def step(x):
    f = lambda x: np_.sum(np_.tanh(w2 @ np_.tanh(w1 @ x + b1) + b2))
    return x - 0.01 * (hessian(f)(x) @ x)

  return step, lambda s: (s,), x, lambda out: out


def program(name: str, impl: str):
  """(jitted step, args of a state, first state, next state of an output)."""
  if impl == "jax":
    import jax
    import jax.numpy as np_

    jax.config.update("jax_platforms", "cpu")
    lib = jax
  else:
    import primc as lib
    import primc.numpy as np_
  made = {
    "MLP": lambda: _mlp(np_, lib.grad),
    "W2": lambda: _w2(np_, lib.grad),
    "W3": lambda: _w3(np_, lib.grad, lib.value_and_grad),
    "W4": lambda: _w4(np_, lib.hessian),
  }[name]()
  step, args, state, advance = made
  return lib.jit(step), args, state, advance


def run(name: str, impl: str) -> dict:
  """In this (fresh) process: imports, the first step, every step."""
  if impl == "jax":
    import jax  # noqa: F401
  else:
    import primc  # noqa: F401
  t_import = time.perf_counter() - T0
  step, args, state, advance = program(name, impl)
  for k in range(STEPS[name]):
    out = step(*args(state))
    for leaf in leaves(out):
      np.asarray(leaf)  # the result is there (JAX dispatches asynchronously)
    state = advance(out)
    if k == 0:
      first = time.perf_counter() - T0
  total = time.perf_counter() - T0
  result = {"import_s": t_import, "first_step_s": first - t_import, "total_s": total}
  if impl == "primc":
    import primc

    stats = primc.cache_stats()
    result["compiles"] = stats.get("kernel_compiles", 0) + stats.get("worker_compiles", 0)
  return result


def _fresh(name, impl, cache):
  env = child_env(PRIMC_CACHE_DIR=cache, PRIMC_BENCH_PEERS="1" if impl == "jax" else "0")
  proc = subprocess.run(
    [sys.executable, __file__, "--child", name, impl],
    env=env,
    capture_output=True,
    text=True,
    timeout=1800,
  )
  if proc.returncode:
    return {"error": proc.stderr.strip()[-300:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(names, loads, repeat):
  has_jax = (
    subprocess.run([sys.executable, "-c", "import jax"], capture_output=True).returncode == 0
  )
  impls = ("primc", "jax") if has_jax else ("primc",)
  rows = {}
  for load in loads:
    with busy_processes(load):
      for name in names:
        for impl in impls:
          for _ in range(repeat):
            cache = tempfile.mkdtemp(prefix="primc-w11-")
            os.chmod(cache, 0o700)
            r = _fresh(name, impl, cache)
            shutil.rmtree(cache, ignore_errors=True)
            rows.setdefault((name, load, impl), []).append(r)
            print(f"busy {load} {name} {impl}: {r}", flush=True)
  return rows


def report(rows) -> str:
  lines = [
    "| program | busy | impl | import | first step (after imports) | all steps (with "
    "imports) | compiles |",
    "|---|---|---|---|---|---|---|",
  ]
  med = lambda rs, key: sorted(r[key] for r in rs)[len(rs) // 2]
  for (name, load, impl), rs in rows.items():
    ok = [r for r in rs if "error" not in r]
    if not ok:
      lines.append(f"| {name} ({STEPS[name]} steps) | {load} | {impl} | failed | | | |")
      continue
    lines.append(
      f"| {name} ({STEPS[name]} steps) | {load} | {impl} | "
      f"{med(ok, 'import_s'):.2f} s | {med(ok, 'first_step_s'):.2f} s | "
      f"{med(ok, 'total_s'):.2f} s | {ok[0].get('compiles', '—')} |"
    )
  return "\n".join(lines)


def main() -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("--child", nargs=2)
  parser.add_argument("--only", nargs="*")
  parser.add_argument("--loads", nargs="*", type=int, default=[0, 1])
  parser.add_argument("--repeat", type=int, default=3)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(run(*args.child)))
    return 0
  names = [n for n in STEPS if not args.only or n in args.only]
  table = report(measure(names, args.loads, args.repeat))
  print(table)
  if not args.only:
    with open(os.path.join(ROOT, "benchmarks", "results_w11.md"), "w") as f:
      f.write(table + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
