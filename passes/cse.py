"""cse: merges equations that compute the same thing (commutative operands canonicalized)."""

from __future__ import annotations

from primc import prims as P
from primc.core import Lit, Program, Var
from primc.passes.rewrite import Rewriter

COMMUTATIVE = P.with_trait("commutative")


def cse(program: Program) -> Program:
  """Replaces every equation equal to an earlier one (same primitive, params and inputs, in
  canonical order for commutative primitives) by the earlier one's outputs."""
  r = Rewriter(program)
  order: dict[Var, int] = {v: i for i, v in enumerate(program.inputs)}
  seen: dict[tuple, tuple] = {}

  def rank(a):
    return (1, hash(a), 0) if isinstance(a, Lit) else (0, order[a], 0)

  for eqn in program.eqns:
    inputs = tuple(r.read(a) for a in eqn.inputs)
    key_inputs = tuple(sorted(inputs, key=rank)) if eqn.prim in COMMUTATIVE else inputs
    key = (eqn.prim, key_inputs, eqn.params)
    if key in seen:
      for v, w in zip(eqn.outputs, seen[key], strict=True):
        r.replace(v, w)
      continue
    seen[key] = eqn.outputs
    r.keep(eqn)
    for v in eqn.outputs:
      order[v] = len(order)
  return r.finish()
