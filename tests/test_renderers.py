"""The two renderers of the kernel IR agree bit for bit: every primitive's gradient
program (tests/prim_cases.py) compiled once by LLVM (`codegen.translate`, the default) and
once by numba for every kernel (PRIMC_KERNEL_COMPILER=numba, the reference), in fresh
processes with caches of their own, gives the same bits."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

CHILD = os.path.join(os.path.dirname(__file__), "renderers_child.py")


def _run(compiler: str, folder: str) -> tuple[subprocess.Popen, str]:
  """The child compiling with `compiler`, started (not waited for), and its .npz file."""
  out = os.path.join(folder, f"{compiler}.npz")
  env = {
    **os.environ,
    "PRIMC_KERNEL_COMPILER": compiler,
    "PRIMC_CACHE_DIR": os.path.join(folder, compiler),
    "PRIMC_TIERED": "0",
    "PRIMC_COMPILE_WORKERS": "1",  # every kernel compiled in this process (counted)
    "PRIMC_STRICT_KERNELS": "1",  # a renderer failure fails the run
  }
  return subprocess.Popen(
    [sys.executable, CHILD, out], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
  ), out


def _bits(a: np.ndarray) -> np.ndarray:
  return a.view(np.dtype(f"u{a.itemsize}")) if a.dtype.kind == "f" else a


def test_llvm_and_numba_kernels_give_the_same_bits():
  with tempfile.TemporaryDirectory() as folder:
    runs = {c: _run(c, folder) for c in ("llvm", "numba")}  # side by side
    report = {}
    for compiler, (process, _) in runs.items():
      stdout, stderr = process.communicate(timeout=1200)
      assert process.returncode == 0, stderr[-3000:]
      report[compiler] = json.loads(stdout.strip().splitlines()[-1])
    llvm, numba = (np.load(runs[c][1]) for c in ("llvm", "numba"))
    assert sorted(llvm.files) == sorted(numba.files) and len(llvm.files) > 200
    differ = [k for k in llvm.files if not np.array_equal(_bits(llvm[k]), _bits(numba[k]))]
    assert not differ, differ
  assert report["numba"]["compiled_by"]["llvm"] == 0
  by = report["llvm"]["compiled_by"]
  assert by["llvm"] > 150 and by["llvm"] > 4 * by["numba"], by  # (numba: outside the subset)
  # kernels compiled in the process that emitted them are rendered from their nodes, never
  # read back from their Python
  assert report["llvm"]["stats"].get("kernels_read_back", 0) == 0, report["llvm"]["stats"]
