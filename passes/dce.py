"""dce: removes equations whose outputs are never used, and unused outputs of multi-output
equations that can drop them (`dce_rules`)."""

from __future__ import annotations

from typing import Callable

from primc.core import Eqn, Primitive, Program, Var

# prim -> (eqn, used: list[bool]) -> a smaller equation computing only the used outputs
dce_rules: dict[Primitive, Callable[[Eqn, list[bool]], Eqn]] = {}


def dce(program: Program) -> Program:
  """Backward liveness from the program outputs; drops dead equations and dead outputs."""
  live = {a for a in program.outputs if isinstance(a, Var)}
  kept: list[Eqn] = []
  for eqn in reversed(program.eqns):
    used = [v in live for v in eqn.outputs]
    if not any(used):
      continue
    if not all(used) and eqn.prim in dce_rules:
      eqn = dce_rules[eqn.prim](eqn, used)
    kept.append(eqn)
    live.update(a for a in eqn.inputs if isinstance(a, Var))
  return Program(program.inputs, tuple(reversed(kept)), program.outputs)
