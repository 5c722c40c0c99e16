"""A small program builder shared by the rewriting passes.

A pass walks the input program once, re-emitting equations into a `Rewriter`; an equation
can be replaced by an existing atom (`replace`) or by new equations (`emit`). Inputs are
substituted as it goes, so rewrites see already-simplified operands.
"""

from __future__ import annotations

import collections
import functools

import numpy as np

from primc.core import Atom, Eqn, Lit, Primitive, Program, Var, abstract_rules, make_params


class Rewriter:
  def __init__(self, program: Program):
    self.program = program
    self.subst: dict[Var, Atom] = {}
    self.eqns: list[Eqn] = []
    self.defs: dict[Var, Eqn] = {}

  def read(self, a: Atom) -> Atom:
    subst = self.subst
    while type(a) is Var:  # (a literal's hash reads its bytes: never looked up)
      b = subst.get(a)
      if b is None:
        return a
      a = b
    return a

  def keep(self, eqn: Eqn) -> None:
    """Re-emits `eqn` with substituted inputs (the same eqn object if nothing changed)."""
    subst = self.subst
    if subst:
      inputs = tuple([self.read(a) for a in eqn.inputs])
      if any([x is not y for x, y in zip(inputs, eqn.inputs)]):
        eqn = Eqn(eqn.prim, inputs, eqn.params, eqn.outputs, eqn.source)
    self.eqns.append(eqn)
    for v in eqn.outputs:
      self.defs[v] = eqn

  def emit(self, prim: Primitive, inputs, **params) -> Var:
    inputs = tuple(self.read(a) for a in inputs)
    out = Var(abstract_rules[prim](*(a.aval for a in inputs), **params))
    self.keep(Eqn(prim, inputs, make_params(params), (out,)))
    return out

  @functools.cached_property
  def uses(self) -> collections.Counter:
    """How often the input program reads each of its variables (an output counts once)."""
    return collections.Counter(
      [a for e in self.program.eqns for a in e.inputs if type(a) is Var]
      + [a for a in self.program.outputs if type(a) is Var]
    )

  def replace(self, v: Var, a: Atom) -> None:
    self.subst[v] = a

  def splat(self, a: Atom):
    """The scalar value if `a` is a constant with all elements equal, else None."""
    a = self.read(a)
    if type(a) is Lit:
      return a.uniform
    eqn = self.defs.get(a)
    if eqn is None:
      return None
    name = eqn.prim.name
    if name == "full":
      return np.asarray(eqn.kw["fill_value"], a.aval.dtype)[()]
    if name in _SPLAT_PRESERVING:
      v = self.splat(eqn.inputs[0])
      return None if v is None else np.asarray(v, a.aval.dtype)[()]
    return None

  def is_splat(self, a: Atom, value) -> bool:
    v = self.splat(a)
    return v is not None and v == value

  def producer(self, a: Atom, prim_name: str) -> Eqn | None:
    """The defining equation of `a` if it is a `prim_name` equation."""
    a = self.read(a)
    eqn = self.defs.get(a) if isinstance(a, Var) else None
    return eqn if eqn is not None and eqn.prim.name == prim_name else None

  def finish(self) -> Program:
    return Program(
      self.program.inputs, tuple(self.eqns), tuple(self.read(a) for a in self.program.outputs)
    )


_SPLAT_PRESERVING = frozenset({"broadcast_in_dim", "reshape", "transpose", "convert"})
