"""The pass pipeline: a readable list of named pure `Program -> Program` passes.

`optimize` runs the list to a fixed point. With checks on (`PRIMC_CHECKS=1`, or
`check=True`) every pass's output is typechecked. `PRIMC_PRINT_AFTER=simplify,cse` (or
`print_after=`) prints the IR after the named passes (to stderr).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable

from primc.core import Program, typecheck
from primc.passes.combine import combine
from primc.passes.cse import cse
from primc.passes.dce import dce
from primc.passes.fusion import fuse
from primc.passes.simplify import simplify


@dataclasses.dataclass(frozen=True)
class Pass:
  name: str
  run: Callable[..., Program]
  description: str
  takes_fast: bool = False  # accepts the `fast` flag (rewrites exact only for finite values)

  def __call__(self, program: Program, fast: bool = False) -> Program:
    return self.run(program, fast=fast) if self.takes_fast else self.run(program)


PIPELINE = [
    Pass("simplify", simplify, "constant folding and algebraic identities (IEEE-safe)", True),
    Pass("combine", combine, "sums and products of terms in canonical form", True),
    Pass("cse", cse, "merge equal equations, commutative operands canonicalized"),
    Pass("dce", dce, "drop equations and region outputs nothing uses"),
]
MAX_ROUNDS = 10


def checks_enabled(check: bool | None = None) -> bool:
  return check if check is not None else os.environ.get("PRIMC_CHECKS", "") not in ("", "0")


def print_after_names(print_after=None) -> set[str]:
  names = print_after if print_after is not None else os.environ.get("PRIMC_PRINT_AFTER", "")
  if isinstance(names, str):
    names = [n.strip() for n in names.split(",")]
  return {n for n in names if n}


def run_pass(p: Pass, program: Program, *, check: bool, show: set[str], fast: bool) -> Program:
  out = p(program, fast)
  if check:
    typecheck(out)
  if p.name in show:
    print(f"--- after {p.name} ({len(out.eqns)} equations)\n{out}", file=sys.stderr)
  return out


def optimize(program: Program, *, fast: bool = False, check: bool | None = None,
             print_after=None) -> Program:
  """Runs the pipeline (simplify, CSE, DCE) until the program stops changing.

  Args:
    program: the program to optimize.
    fast: allow rewrites that are exact only for finite values (see passes.simplify).
    check: typecheck after every pass (default: the PRIMC_CHECKS environment variable).
    print_after: pass names (a list or a comma-separated string) whose output to print
      (default: the PRIMC_PRINT_AFTER environment variable).
  Returns:
    an equivalent program with the same inputs and outputs.
  """
  check, show = checks_enabled(check), print_after_names(print_after)
  if check:
    typecheck(program)
  for _ in range(MAX_ROUNDS):
    before = str(program)
    for p in PIPELINE:
      program = run_pass(p, program, check=check, show=show, fast=fast)
    if str(program) == before:
      break
  return program


def equation_counts(program: Program, *, fast: bool = False) -> dict[str, int]:
  """Equation counts after each stage: traced, each pass of the first round, optimized,
  and the number of fused regions."""
  counts = {"traced": len(program.eqns)}
  p = program
  for stage in PIPELINE:
    p = stage(p, fast)
    counts[stage.name] = len(p.eqns)
  optimized = optimize(program, fast=fast)
  counts["optimized"] = len(optimized.eqns)
  counts["regions"] = len(fuse(optimized).regions)
  return counts
