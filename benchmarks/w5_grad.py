"""W5: gradient of sum(sin(x) * exp(-x*x) + tanh(x)) over 10**7 float32 elements.

primc (jit of grad) against numpy with the hand-derived formula (unfused), a hand-written
fused numba kernel using the same vectorizable math, and a numba copy kernel that reads 4
and writes 4 bytes per element (the memory-bandwidth bound). Medians; ratios to primc.
"""

import argparse
import os
import sys

import numpy as np
from numba import njit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import primc  # noqa: E402
import primc.numpy as pnp  # noqa: E402
from benchmarks.common import fmt, median_time  # noqa: E402
from primc.codegen.mathlib import cos_f32, exp_f32, sin_f32, tanh_f32  # noqa: E402


def loss(x):
  return pnp.sum(pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x))


def numpy_grad(x):
  e = np.exp(-x * x)
  t = np.tanh(x)
  return np.cos(x) * e - 2 * x * np.sin(x) * e + (1 - t * t)


@njit(error_model="numpy", fastmath={"contract"})
def fused_grad(x, out):
  for i in range(x.size):
    v = x[i]
    e = exp_f32(-v * v)
    t = tanh_f32(v)
    out[i] = cos_f32(v) * e - np.float32(2.0) * v * sin_f32(v) * e + (np.float32(1.0) - t * t)


@njit(error_model="numpy")
def triad(x, out):
  for i in range(x.size):
    out[i] = x[i] * np.float32(2.0)


def main(n):
  x = np.random.default_rng(0).uniform(-3, 3, n).astype(np.float32)
  out = np.empty_like(x)
  g = primc.jit(primc.grad(loss))
  want = numpy_grad(x.astype(np.float64))
  np.testing.assert_allclose(g(x), want, rtol=1e-4, atol=1e-5)
  fused_grad(x, out)
  np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
  rows = [
    ("primc jit(grad) (fresh output)", median_time(g, x)),
    ("primc jit(grad) (out=)", median_time(lambda x: g(x, out=out), x)),
    ("numpy, hand-derived, unfused", median_time(numpy_grad, x, repeat=5)),
    ("numba, hand-fused kernel (out=)", median_time(fused_grad, x, out)),
    ("numba copy kernel: bandwidth bound", median_time(triad, x, out)),
  ]
  base = rows[1][1]
  print(f"W5: gradient over {n:.0e} float32 elements (medians)")
  print("| implementation | time | vs primc (out=) |\n|---|---|---|")
  for name, t in rows:
    print(f"| {name} | {fmt(t)} | {t / base:.2f}x |")


if __name__ == "__main__":
  parser = argparse.ArgumentParser()
  parser.add_argument("-n", type=int, default=10**7)
  main(parser.parse_args().n)
