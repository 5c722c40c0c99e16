"""The pass pipeline: a readable list of named pure `Program -> Program` passes.

`optimize` runs the list until a round changes nothing (the program after the round is
alpha-equal to the one before: `core.alpha_equal`, no printing). With checks on
(`PRIMC_CHECKS=1`, or `check=True`) every pass's output is typechecked; a pass that fails,
or makes an ill-typed program, is named in the error (`PassError`).
`PRIMC_DUMP=after:simplify,after:cse` (or `print_after=`; `PRIMC_PRINT_AFTER=cse` too)
prints the IR after the named passes (to stderr); `after:fuse` and `after:codegen` print
the regions and the generated source.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
from typing import Callable

from primc.core import (
  Frozen,
  PrimcError,
  Program,
  TypeCheckError,
  alpha_equal,
  shape_free_key,
  typecheck,
  without_gc,
)
from primc.passes.combine import combine
from primc.passes.cse import cse
from primc.passes.dce import dce
from primc.passes.simplify import simplify


class Pass(Frozen):
  """A pass of the pipeline: `run(program)` (and `fast`, where it `takes_fast`: rewrites
  exact only for finite values)."""

  _fields = ("name", "run", "description", "takes_fast")

  def __init__(self, name: str, run: Callable[..., Program], description: str, takes_fast=False):
    self.__dict__.update(name=name, run=run, description=description, takes_fast=takes_fast)

  def __call__(self, program: Program, fast: bool = False) -> Program:
    return self.run(program, fast=fast) if self.takes_fast else self.run(program)


PIPELINE = [
  Pass("simplify", simplify, "constant folding and algebraic identities (IEEE-safe)", True),
  # CSE before combine too: operands it merges (x + y with y equal to x) are terms
  # combine then joins (2 x) in this round, not the next (W3: three rounds -> two)
  Pass("merge", cse, "CSE before combine: equal operands merged into one"),
  Pass("combine", combine, "sums and products of terms in canonical form", True),
  Pass("cse", cse, "merge equal equations, commutative operands canonicalized"),
  Pass("dce", dce, "drop equations and region outputs nothing uses"),
]
MAX_ROUNDS = 10


class PassError(PrimcError):
  """A pass failed, or made an ill-typed program: names the pass."""


def checks_enabled(check: bool | None = None) -> bool:
  return check if check is not None else os.environ.get("PRIMC_CHECKS", "") not in ("", "0")


def print_after_names(print_after=None) -> set[str]:
  """The stages whose output to print: `print_after` (names, or a comma-separated
  string), else PRIMC_DUMP (`after:cse,after:fuse`) and PRIMC_PRINT_AFTER (`cse,fuse`)."""
  if print_after is None:
    print_after = ",".join(
      n.strip().removeprefix("after:")
      for n in (os.environ.get("PRIMC_DUMP", ""), os.environ.get("PRIMC_PRINT_AFTER", ""))
    )
  if isinstance(print_after, str):
    print_after = [n.strip() for n in print_after.split(",")]
  return {n for n in print_after if n}


def changed(before: Program, after: Program) -> bool:
  """Whether a pass rewrote anything (a pass that rebuilt equations without rewriting them
  gives an alpha-equal program)."""
  return not alpha_equal(before, after)


def run_pass(p: Pass, program: Program, *, check: bool, show: set[str], fast: bool) -> Program:
  """One pass, named in any error it raises and in any ill-typed program it makes."""
  try:
    out = p(program, fast)
  except Exception as e:
    raise PassError(
      f"pass {p.name} failed on a program of {len(program.eqns)} equations: {type(e).__name__}: {e}"
    ) from e
  if check:
    try:
      typecheck(out)
    except TypeCheckError as e:
      raise PassError(f"pass {p.name} made an ill-typed program: {e}") from e
  if p.name in show:
    print(f"--- after {p.name} ({len(out.eqns)} equations)\n{out}", file=sys.stderr)
  return out


@without_gc
def optimize(
  program: Program,
  *,
  fast: bool = False,
  check: bool | None = None,
  print_after=None,
  rounds: int = MAX_ROUNDS,
) -> Program:
  """Runs the pipeline (simplify, CSE, combine, CSE, DCE) until no pass changes the program
  (or for `rounds` rounds).

  Args:
    program: the program to optimize.
    fast: allow rewrites that are exact only for finite values (see passes.simplify).
    check: typecheck after every pass (default: the PRIMC_CHECKS environment variable).
    print_after: pass names (a list or a comma-separated string) whose output to print
      (default: the PRIMC_DUMP / PRIMC_PRINT_AFTER environment variables).
    rounds: at most this many rounds (the default: until a round changes nothing).
  Returns:
    an equivalent program with the same inputs and outputs.
  Raises:
    PassError: naming the pass that failed or made an ill-typed program.
  """
  check, show = checks_enabled(check), print_after_names(print_after)
  if check:
    typecheck(program)
  for k in range(rounds):
    start = program
    for p in PIPELINE:
      program = run_pass(p, program, check=check, show=show, fast=fast)
    if not changed(start, program):  # a round that rewrote nothing (passes may undo
      if k:  # each other's spelling within a round: combine, cse)
        _known_fixpoint(shape_free_key(program), fast)
      break
    if rounds > 1 and _known_fixpoint(shape_free_key(program), fast, add=False):
      break
  return program


_FIXPOINTS: "collections.OrderedDict[tuple, None]" = collections.OrderedDict()
FIXPOINTS_KEPT = 4096
_FIXPOINTS_LOCK = threading.Lock()


def _known_fixpoint(key: str, fast: bool, add: bool = True) -> bool:
  """Whether programs of this shape-free key (`core.shape_free_key`) were found to be
  fixpoints of the pipeline; `add` records one. The passes decide from a program's
  structure and which of its sizes are equal, never from a size's value (core.SMALL_INT),
  so a program with the key of a fixpoint is one: a new size whose round gives that key
  skips the round that would only confirm it (W3 at a new size: one round of two)."""
  key = (key, fast)
  with _FIXPOINTS_LOCK:  # (programs may be compiled in several threads at once)
    if key in _FIXPOINTS:
      _FIXPOINTS.move_to_end(key)
      return True
    if add:
      _FIXPOINTS[key] = None
      if len(_FIXPOINTS) > FIXPOINTS_KEPT:
        _FIXPOINTS.popitem(last=False)
    return False


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
  from primc.passes.fusion import fuse  # (code generation's: imported when it runs)

  counts["regions"] = len(fuse(optimized).regions)
  return counts
