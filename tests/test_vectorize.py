"""The kernels' hot loops vectorize at the full width of each vector unit: 8 float32 (4
float64) lanes with AVX2, 4 (2) with Arm's NEON (Linux servers, Apple silicon), SVE's
scalable vectors, for every function of the math library.
Read from the IR LLVM optimizes for each CPU (cross-compiled: nothing runs there). An
int64 value in a float32 loop (a count, an index computed per element) halves the width
on AVX2: the loop takes as many lanes as the widest of its values fills a register."""

import re

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc.codegen import loader, translate
from primc.compile import build_plan

FUNCTIONS = {
  "exp": pnp.exp,
  "log": lambda x: pnp.log(x + 4.0),
  "tanh": pnp.tanh,
  "sin": pnp.sin,
  "cos": pnp.cos,
  "sqrt": lambda x: pnp.sqrt(x * x + 1.0),
  "w5": lambda x: pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x),
}
TARGETS = {  # (triple, cpu): lanes of float32, float64 ("vscale x n": SVE's scalable ones)
  "avx2": (("x86_64-unknown-linux-gnu", "haswell"), {"float32": "8", "float64": "4"}),
  "neon": (("aarch64-unknown-linux-gnu", "neoverse-n1"), {"float32": "4", "float64": "2"}),
  "apple": (("arm64-apple-macosx14.0.0", "apple-m1"), {"float32": "4", "float64": "2"}),
  "sve": (
    ("aarch64-unknown-linux-gnu", "neoverse-v1"),
    {"float32": "vscale x 4", "float64": "vscale x 2"},
  ),
}


def _kernel_irs(fn, dtype):
  x = np.linspace(-3, 3, 1 << 16).astype(dtype)
  _, _, plan = build_plan(primc.make_program(fn)(x))
  irs = [loader.kernel_ir(source) for source in plan.kernels]
  assert irs and all(ir is not None for ir in irs), "a kernel LLVM does not compile"
  return irs


def _body_widths(ir: str, elem: str) -> set[str]:
  """The vector widths ("8", "vscale x 4") of the float arithmetic in the basic block that
  has the most of it (the vectorized loop's body)."""
  best, widths = 0, set()
  for block in re.split(r"\n(?=[\w.]+:)", ir):
    found = re.findall(
      rf"= (?:fadd|fsub|fmul|fdiv|fneg|select|call \w+ @llvm\.\w+\.n?x?v\d+\w+\()"
      rf"[^\n]*?<((?:vscale x )?\d+) x {elem}>",
      block,
    )
    if len(found) > best:
      best, widths = len(found), set(found)
  return widths


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_loops_vectorize_at_full_width(name, dtype, target):
  (triple, cpu), lanes = TARGETS[target]
  tm = translate.cross_machine(triple, cpu)
  elem = {"float32": "float", "float64": "double"}[dtype]
  for ir in _kernel_irs(FUNCTIONS[name], dtype):
    widths = _body_widths(str(translate.optimized(ir, tm)), elem)
    assert widths == {lanes[dtype]}, (name, dtype, target, sorted(widths))
