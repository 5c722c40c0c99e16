"""primc.numpy on plain arrays against numpy: what each call adds to numpy's own time.

A `primc.numpy` function given no traced value and no front end's value runs numpy's
function of the same name (see `primc.numpy._dispatch._front_end_aware`); this measures the
dispatch, on 128-element float64 vectors and 16 x 16 matrices (medians of interleaved
repeats, in microseconds).

  python benchmarks/numpy_calls.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import primc.numpy as pnp  # noqa: E402

R = np.random.default_rng(0)
X, Y = R.standard_normal(128), R.standard_normal(128)
M = R.standard_normal((16, 16))
S = M @ M.T + 16 * np.eye(16)  # (positive definite)
CALLS = {  # name: (arguments, keywords)
  "add": ((X, 1.0), {}),
  "subtract": ((X, Y), {}),
  "multiply": ((X, Y), {}),
  "divide": ((X, 2.0), {}),
  "exp": ((X,), {}),
  "log": ((np.abs(X),), {}),
  "tanh": ((X,), {}),
  "sin": ((X,), {}),
  "sqrt": ((np.abs(X),), {}),
  "maximum": ((X, 0.0), {}),
  "where": ((X > 0, X, Y), {}),
  "sum": ((M,), {"axis": 0}),
  "mean": ((X,), {}),
  "max": ((M,), {"axis": 1}),
  "argmax": ((X,), {}),
  "dot": ((M, M), {}),
  "matmul": ((M, M), {}),
  "reshape": ((X, (8, 16)), {}),
  "transpose": ((M,), {}),
  "concatenate": (([X, Y],), {}),
  "stack": (([X, Y],), {}),
  "clip": ((X, -1.0, 1.0), {}),
  # creation: numpy's dtypes and speed
  "zeros": (((16, 16),), {}),
  "ones": ((128,), {}),
  "full": (((128,), 0.5), {}),
  "eye": ((16,), {}),
  "arange": ((128,), {}),
  "array": (([1.0, 2.0, 3.0],), {}),
  # results that are not one array; numpy.linalg's functions
  "unstack": ((X,), {}),
  "split": ((X, 4), {}),
  "linalg.solve": ((S, X[:16]), {}),
  "linalg.inv": ((S,), {}),
  "linalg.det": ((S,), {}),
  "linalg.slogdet": ((S,), {}),
  "linalg.cholesky": ((S,), {}),
  "linalg.norm": ((M,), {}),
}


def _named(module, name: str):
  """`module`'s function of a dotted name (`linalg.solve`)."""
  for part in name.split("."):
    module = getattr(module, part)
  return module


def _time(fn, args, kwargs, n=2000) -> float:
  t = time.perf_counter()
  for _ in range(n):
    fn(*args, **kwargs)
  return (time.perf_counter() - t) / n


def measure(rounds: int = 15) -> dict:
  rows = {}
  for name, (args, kwargs) in CALLS.items():
    ours, theirs = _named(pnp, name), _named(np, name)
    got, want = ours(*args, **kwargs), theirs(*args, **kwargs)
    np.testing.assert_array_equal(got, want)
    pairs = [(_time(theirs, args, kwargs), _time(ours, args, kwargs)) for _ in range(rounds)]
    np_us = statistics.median(a for a, _ in pairs) * 1e6
    pc_us = statistics.median(b for _, b in pairs) * 1e6
    rows[name] = (np_us, pc_us)
  return rows


def main() -> None:
  rows = measure()
  print("| function | numpy | primc.numpy | added |\n|---|---|---|---|")
  for name, (np_us, pc_us) in rows.items():
    print(f"| {name} | {np_us:.2f} µs | {pc_us:.2f} µs | {pc_us - np_us:+.2f} µs |")
  added = sorted(b - a for a, b in rows.values())
  print(
    f"\nmedian added {added[len(added) // 2]:.2f} µs, largest {added[-1]:.2f} µs "
    f"({len(rows)} functions)"
  )


if __name__ == "__main__":
  main()
