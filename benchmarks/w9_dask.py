"""W9: the PINN's value and gradient (W3's network and loss, with the Laplacian) over 2^22
collocation points, in one process (the same chunks in a loop) and on a Dask LocalCluster
of 2 worker processes (`primc.dask.value_and_grad`). Reports the median time per step,
the Dask overhead per chunk, and checks that both agree.

  python benchmarks/w9_dask.py [--points N] [--chunk N] [--steps N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import primc  # noqa: E402
import primc.numpy as pnp  # noqa: E402
from benchmarks.pinn import pinn_loss  # noqa: E402

SIZES = [2, 64, 64, 64, 1]


def chunk_loss(params, chunk):
  return pinn_loss(pnp, primc.grad)(params, chunk[:, :2], chunk[:, 2])


def problem(points: int):
  r = np.random.default_rng(0)
  params = [
    ((r.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32))
    for a, b in zip(SIZES[:-1], SIZES[1:])
  ]
  pts = r.uniform(-1, 1, (points, 2)).astype(np.float32)
  return params, np.concatenate([pts, np.sin(pts[:, :1])], 1)


def single_process(params, data, chunk):
  vg = primc.jit(primc.value_and_grad(chunk_loss))
  total_v, total_g = 0.0, None
  for start in range(0, len(data), chunk):
    block = data[start : start + chunk]
    v, g = vg(params, block)
    w = len(block) / len(data)
    flat = [w * np.asarray(x, np.float64) for pair in g for x in pair]
    total_v += w * float(v)
    total_g = flat if total_g is None else [a + b for a, b in zip(total_g, flat)]
  return total_v, total_g


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--points", type=int, default=1 << 22)
  parser.add_argument("--chunk", type=int, default=1 << 18)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()
  import dask.array as da
  from distributed import Client, LocalCluster
  from primc import dask as pdask

  params, data = problem(args.points)
  n_chunks = -(-args.points // args.chunk)
  single_process(params, data[: args.chunk], args.chunk)  # compile once (the cache serves both)
  times = {"single process": [], "dask, 2 workers": []}
  for _ in range(args.steps):
    t = time.perf_counter()
    v1, g1 = single_process(params, data, args.chunk)
    times["single process"].append(time.perf_counter() - t)
  with (
    LocalCluster(
      n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster,
    Client(cluster),
  ):
    x = da.from_array(data, chunks=(args.chunk, 3)).persist()  # data lives on the workers
    pdask.value_and_grad(chunk_loss, params, x)  # the workers load the kernels
    for _ in range(args.steps):
      t = time.perf_counter()
      v2, g2 = pdask.value_and_grad(chunk_loss, params, x)
      times["dask, 2 workers"].append(time.perf_counter() - t)
  g2 = [np.asarray(x, np.float64) for pair in g2 for x in pair]
  err = max(float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-30)) for a, b in zip(g1, g2))
  med = {k: float(np.median(v)) for k, v in times.items()}
  print(
    f"W9: PINN value and gradient, {args.points} points in {n_chunks} chunks of "
    f"{args.chunk}, float32, median of {args.steps} steps"
  )
  print("| | time per step | per chunk |")
  print("|---|---|---|")
  for k, v in med.items():
    print(f"| {k} | {v:.2f} s | {1e3 * v / n_chunks:.1f} ms |")
  overhead = (med["dask, 2 workers"] - med["single process"]) / n_chunks
  print(
    f"Dask over one process: {overhead * 1e3:+.1f} ms per chunk; loss {v1:.6g} vs "
    f"{float(v2):.6g}, largest relative gradient difference {err:.2g}"
  )


if __name__ == "__main__":
  main()
