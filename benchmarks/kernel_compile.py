"""Cold compile time per kernel, by each kernel compiler, over the suite's workloads.

Each workload's compiled function is called once in a fresh process with an empty cache
and no tiering (`PRIMC_TIERED=0`: its kernels compile in the process before the call
runs), once with LLVM (`codegen.translate`, the default; numba for a kernel outside its
subset) and once with numba for every kernel (`PRIMC_KERNEL_COMPILER=numba`). Each
kernel's compile is timed where the loader compiles it (`loader._cfunc`); reported: the
kernels' count, median, p90 and total seconds per compiler, and how many kernels the
LLVM run left to numba. A process's first kernel also pays its compiler's start (numba's
~1 s). The numbers a change of the kernel compilers is held to.

  python benchmarks/kernel_compile.py [--only "W2,W3"]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.common import child_env  # noqa: E402

WORKLOADS = ["W1 (1,)", "W2", "W3", "W4", "W6", "W7 n=6", "Hessian n=100"]

CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
from benchmarks.workloads import WORKLOADS
from primc.codegen import loader
timed = []
inner = loader._cfunc

def cfunc(module):
  start = time.perf_counter()
  out = inner(module)
  by = "llvm" if isinstance(out, loader.Translated) else "numba"
  timed.append((time.perf_counter() - start, by))
  return out

loader._cfunc = cfunc
w = WORKLOADS[sys.argv[1]]()
w["primc"]()(*w["args"])
print(json.dumps(timed))
"""


def run(workload: str, compiler: str) -> list[tuple[float, str]]:
  """(seconds, compiler) of each kernel compiled by the workload's first call."""
  cache = tempfile.mkdtemp(prefix="primc-kc-")
  env = child_env(PRIMC_CACHE_DIR=cache, PRIMC_TIERED="0", PRIMC_KERNEL_COMPILER=compiler)
  out = subprocess.run(
    [sys.executable, "-c", CHILD, workload, ROOT],
    env=env,
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  return [tuple(x) for x in json.loads(out.strip().splitlines()[-1])]


def summary(times: list[float]) -> str:
  if not times:
    return "| 0 | - | - | - |"
  ordered = sorted(times)
  p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
  median = statistics.median(times)
  return f"| {len(times)} | {median * 1e3:.0f} ms | {p90 * 1e3:.0f} ms | {sum(times):.2f} s |"


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--only")
  args = ap.parse_args()
  chosen = args.only.split(",") if args.only else WORKLOADS
  results = {"llvm": [], "numba": []}
  for workload in chosen:
    for compiler in results:
      results[compiler] += [(workload, s, by) for s, by in run(workload, compiler)]
  print("| compiler | kernels | median | p90 | total |")
  print("|---|---|---|---|---|")
  for compiler, rows in results.items():
    print(f"| {compiler} " + summary([s for _, s, _ in rows]))
  left = [w for w, _, by in results["llvm"] if by == "numba"]
  print(f"\nkernels the LLVM run left to numba: {len(left)} ({', '.join(sorted(set(left)))})")
  with open(os.path.join(ROOT, "benchmarks", "results_kernel_compile.json"), "w") as f:
    json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
