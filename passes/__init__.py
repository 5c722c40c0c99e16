"""Optimization passes over primc programs, each a pure `Program -> Program` function.

  optimize(program)   simplify · CSE · DCE to a fixed point (passes.pipeline)
  lower(program)      primitives kernels do not compute (conv) rewritten into ones they do
  fuse(program)       group equations into regions codegen emits as one loop nest each

Passes depend only on `primc`'s IR and rule tables; they never mutate their input.
"""

import importlib

from primc.passes.cse import cse
from primc.passes.dce import dce
from primc.passes.lower import lower, lowering_rules
from primc.passes.pipeline import PIPELINE, equation_counts, optimize, print_after_names
from primc.passes.simplify import simplify

# fusion, code generation's pass, imported at its first use (a transform's program is
# optimized, never fused: its first call does not import it)
_FUSION = {"FusedProgram", "fuse", "fusion_blocker", "fusion_blockers", "region_p", "unprofitable"}


def __getattr__(name: str):
  if name in _FUSION:
    return getattr(importlib.import_module("primc.passes.fusion"), name)
  raise AttributeError(f"module 'primc.passes' has no attribute {name!r}")
