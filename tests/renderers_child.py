"""Run in a fresh process by tests/test_renderers.py: every primitive's gradient program
(tests/prim_cases.py, float64 and float32 by turns) compiled by the kernel compiler
PRIMC_KERNEL_COMPILER names, run on fixed inputs; the results are saved to an .npz file,
and the kernel statistics printed as JSON (last line of stdout).

  python renderers_child.py OUT.npz
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import prim_cases  # noqa: E402

from primc import ad  # noqa: E402
from primc.codegen import cache, loader  # noqa: E402
from primc.compile import load_executable  # noqa: E402
from primc.trace import aval_of, trace_flat  # noqa: E402


def as_dtype(args, dtype):
  return [
    a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a for a in args
  ]


def gradient_program(case, args, rng):
  """The case's vjp program (its values and the cotangents of its float inputs) and its
  inputs: the arguments, then random output cotangents."""
  program, _, _ = trace_flat(case.fn, [aval_of(np.asarray(a)) for a in args])
  wrt = [aval_of(np.asarray(a)).is_float for a in args]
  floats = [a.is_float for a in program.out_avals]
  if not any(wrt) or not any(floats):
    return program, list(args)
  cts = [
    rng.standard_normal(a.shape).astype(a.dtype) for a, f in zip(program.out_avals, floats) if f
  ]
  return ad.vjp_program(program, wrt, floats), [*args, *cts]


def _overflowing():
  """Programs whose int64 values wrap (numpy's semantics; numba's own signed arithmetic
  may assume they never do): counter-based random draws, products, sums and lanes of
  sums past 2**63."""
  import primc.numpy as pnp
  from primc import random as R

  big = np.arange(-40, 40, dtype=np.int64) * np.int64(3_037_000_499)
  key = np.asarray(R.key(9))
  return [
    ("uniform", lambda k: R.uniform(R.fold_in(k, 3), (5, 7), "float64"), [key]),
    ("normal32", lambda k: R.normal(R.split(k)[1], (33,), "float32"), [key]),
    ("products", lambda x: (x * x, x * np.int64(0xD2E7470E), (x + x) >> 3), [big]),
    ("sums", lambda x: (pnp.sum(x * x), pnp.sum(pnp.reshape(x * 7, (8, 10)), axis=1)), [big]),
  ]


def main(out_path):
  results, by = {}, {"llvm": 0, "numba": 0}
  inner = loader._cfunc

  def counted(module):
    cfunc = inner(module)
    by["llvm" if isinstance(cfunc, loader.Translated) else "numba"] += 1
    return cfunc

  loader._cfunc = counted
  for i, case in enumerate(prim_cases.CASES):
    rng = np.random.default_rng(i)
    args = as_dtype(case.make(rng), "float32" if i % 2 else "float64")
    program, inputs = gradient_program(case, args, rng)
    outs = load_executable(program, tiered=False)([np.asarray(x) for x in inputs], None)
    for k, o in enumerate(outs):
      results[f"{i:03d}_{case.name}_{k}"] = np.asarray(o)
  for name, fn, args in _overflowing():
    program, _, _ = trace_flat(fn, [aval_of(np.asarray(a)) for a in args])
    outs = load_executable(program, tiered=False)([np.asarray(a) for a in args], None)
    for k, o in enumerate(outs):
      results[f"int64_{name}_{k}"] = np.asarray(o)
  np.savez(out_path, **results)
  print(json.dumps({"compiled_by": by, "stats": cache.stats()}))


if __name__ == "__main__":
  main(sys.argv[1])
