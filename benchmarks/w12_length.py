"""W12: how each stage's cost grows with program length.

Two programs of n steps, for n = 10 ... 3,000: an HMM's forward pass (a chain of
`logsumexp(a[:, None] + log_A, axis=0) + log_B[t]`, as in a hidden Markov model's
likelihood), an RNN unrolled n times (`h = tanh(h @ W + x[t] @ U)`) and n Jacobi steps
of a 5-point stencil on a periodic grid (rolls, as a fluid simulation's pressure solve:
regions recomputed where others read them through index maps). For each, the
gradient of the final sum, stage by stage: tracing, JVP, partial evaluation
(linearize), transpose, each pass of the pipeline (one round), fusion, planning
(kernel sources and the run plan), and the first compiled call (kernels compiled or
loaded), each in seconds per equation (a pure stage's the least of three runs), with the
exponent of its growth between the two largest n (1: linear). Then the whole
`value_and_grad` as users call it: the first call from an empty cache, and a warm call
(the kept program), against autograd's.

  python benchmarks/w12_length.py [--sizes 10,100,1000,3000] [--no-compile]
      [--compile-max 1000] [--only hmm,rnn,stencil]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

K = 4  # hidden states (HMM) and units (RNN)


def hmm(np_, n):
  rng = np.random.default_rng(0)
  log_b = np.log(rng.uniform(0.1, 1.0, (n, K)))

  def loss(log_a):
    a = log_b[0]
    for t in range(1, n):
      a = _logsumexp(np_, a[:, None] + log_a) + log_b[t]
    return _logsumexp(np_, a)

  return loss, np.log(rng.uniform(0.1, 1.0, (K, K)))


def _logsumexp(np_, x):
  m = np_.max(x, axis=0)
  return np_.log(np_.sum(np_.exp(x - m), axis=0)) + m


def rnn(np_, n):
  rng = np.random.default_rng(1)
  xs = rng.standard_normal((n, K))
  u = rng.standard_normal((K, K)) * 0.5

  def loss(w):
    h = np.zeros(K)
    for t in range(n):
      h = np_.tanh(h @ w + xs[t] @ u)
    return np_.sum(h * h)

  return loss, rng.standard_normal((K, K)) * 0.5


def stencil(np_, n):
  rng = np.random.default_rng(2)
  div = rng.standard_normal((K * 4, K * 4))

  def loss(v):
    p = v
    for _ in range(n):
      p = (div + sum(np_.roll(p, s, axis=a) for s in (1, -1) for a in (0, 1))) / 4.0
    return np_.sum(p * v)

  return loss, rng.standard_normal((K * 4, K * 4))


PROGRAMS = {"hmm": hmm, "rnn": rnn, "stencil": stencil}


def _timed(fn, *args):
  start = time.perf_counter()
  out = fn(*args)
  return out, time.perf_counter() - start


def _least(fn, *args, runs=3):
  """`_timed`, the least of `runs` (a pure stage: a pause of the machine or of Python's
  collector in one run moved single timings by up to 2x, and the growth with them)."""
  times = [_timed(fn, *args) for _ in range(runs)]
  return times[-1][0], min(t for _, t in times)


def stages(name: str, n: int, compile_: bool) -> dict:
  """Seconds of each stage of the gradient of program `name` at length n."""
  import primc.numpy as pnp
  from primc import ad, passes
  from primc.core import without_gc
  from primc.trace import aval_of, trace_flat
  from primc.compile import build_plan, load_executable

  loss, x = PROGRAMS[name](pnp, n)
  row = {}
  (program, _, _), row["trace"] = _timed(trace_flat, loss, [aval_of(x)])
  wrt = [True]
  _, row["jvp"] = _least(ad.jvp_program, program, wrt)
  (primal, linear), row["linearize"] = _least(ad.linearize_program, program, wrt)
  n_res = len(linear.inputs) - 1
  _, row["transpose"] = _least(ad.transpose_program, linear, [False] * n_res + [True])
  vjp, row["vjp (all three)"] = _least(ad.vjp_program, program, wrt, [True])
  current = vjp
  for p in passes.PIPELINE:
    # (collector paused, as `passes.optimize` runs them: else a full collection's walk of
    # the growing heap shows as a pass growing faster than its program)
    current, row[f"pass {p.name}"] = _least(without_gc(p), current)
  optimized, row["optimize (fixpoint)"] = _least(passes.optimize, vjp)
  _, row["fuse"] = _least(passes.fuse, optimized)
  _, row["plan (passes, fusion, sources)"] = _timed(build_plan, vjp)
  if compile_:
    one = np.ones((), x.dtype)
    exe, row["load"] = _timed(load_executable, vjp, False)
    _, row["first call (compile)"] = _timed(exe, [x, one], None)
  row["equations"] = len(vjp.eqns)
  return row


def whole(name: str, n: int) -> dict:
  """`value_and_grad` as users call it: primc's first call (empty cache), its warm call,
  and autograd's call."""
  import primc
  import primc.numpy as pnp

  loss, x = PROGRAMS[name](pnp, n)
  f = primc.value_and_grad(loss)
  _, cold = _timed(f, x)
  f(x)
  warm = min(_timed(f, x)[1] for _ in range(3))
  row = {"primc first": cold, "primc warm": warm}
  try:
    import autograd
    import autograd.numpy as anp
  except ImportError:
    return row
  aloss, _ = PROGRAMS[name](anp, n)
  row["autograd"] = min(_timed(autograd.value_and_grad(aloss), x)[1] for _ in range(3))
  return row


def growth(rows: dict, key: str, sizes: list[int]) -> float:
  """The exponent of the stage's growth between the two largest lengths measured (1:
  linear)."""
  have = [n for n in sizes if rows[n].get(key)]
  if len(have) < 2:
    return float("nan")
  a, b = have[-2], have[-1]
  return math.log(rows[b][key] / rows[a][key]) / math.log(b / a)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--sizes", default="10,100,1000,3000")
  ap.add_argument("--no-compile", action="store_true")
  ap.add_argument("--only", default=",".join(PROGRAMS), help="programs, comma-separated")
  ap.add_argument(
    "--compile-max",
    type=int,
    default=1000,
    help="the compile stages only up to this length (they take minutes past)",
  )
  args = ap.parse_args()
  sizes = [int(s) for s in args.sizes.split(",")]
  cache = tempfile.mkdtemp(prefix="primc-w12-")
  os.environ["PRIMC_CACHE_DIR"] = cache
  out = {}
  try:
    for name in args.only.split(","):
      rows = {n: stages(name, n, not args.no_compile and n <= args.compile_max) for n in sizes}
      for n in sizes:
        rows[n].update(whole(name, n))
      out[name] = rows
      keys = [k for k in rows[sizes[0]] if k != "equations"]
      print(f"\n### {name}: seconds per equation of the gradient program, and growth\n")
      print(
        "| stage | "
        + " | ".join(f"n={n} ({rows[n]['equations']} eqns)" for n in sizes)
        + " | growth |"
      )
      print("|---|" + "---|" * (len(sizes) + 1))
      for k in keys:
        if k.startswith(("primc", "autograd")):
          cells = [f"{rows[n][k]:.3f} s" if k in rows[n] else "—" for n in sizes]
        else:
          cells = [
            f"{rows[n][k] / rows[n]['equations'] * 1e6:.1f} µs" if k in rows[n] else "—"
            for n in sizes
          ]
        print(f"| {k} | " + " | ".join(cells) + f" | {growth(rows, k, sizes):.2f} |")
  finally:
    shutil.rmtree(cache, ignore_errors=True)
  with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results_w12.json"), "w") as f:
    json.dump(
      {"sizes": sizes, "rows": {k: {str(n): r for n, r in v.items()} for k, v in out.items()}},
      f,
      indent=1,
    )


if __name__ == "__main__":
  main()
