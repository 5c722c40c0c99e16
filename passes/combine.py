"""combine: rewrites chains of add/sub/neg/mul into a canonical sum of monomials.

Each float value built by `add sub neg mul` (and constants) is given a *form*: a sum of
`coefficient * monomial`, where a monomial is a product of opaque leaves (values made by
any other op). Products of two forms combine only when one of them is a single term: the
pass never distributes a product over a sum. Forms are re-emitted in a canonical order
(monomials left-folded over sorted leaves), so CSE then shares what the chains had in
common: `x + x` becomes `2 * x`, `(k + j) + j` becomes `k + 2 * j`, `-b - b` becomes
`-2 * b`, constants inside products move out.

NaN/inf: reassociating and commuting sums and products, and folding constant
coefficients, keep NaN/inf results for non-finite inputs (values differ by rounding only).
Distribution would not (inf * (2 - 1) = inf but inf*2 - inf*1 = nan), so it is not done. A
term whose coefficients cancel is kept as `0 * x` (nan for infinite x, like `x - x`),
unless `fast=True`.
"""
from __future__ import annotations

import numpy as np

from primc import prims as P
from primc.core import Lit, Program, Var
from passes.rewrite import Rewriter
from passes.simplify import splat

MAX_TERMS = 32
MAX_DEGREE = 16
FORM_PRIMS = {P.add_p, P.sub_p, P.neg_p, P.mul_p}


def _add(f, g, sign=1.0):
  out = dict(f)
  for m, c in g.items():
    out[m] = out.get(m, 0.0) + sign * c
  return out


def _mul(f, g, key):
  if len(f) != 1 and len(g) != 1:
    return None
  out = {}
  for m1, c1 in f.items():
    for m2, c2 in g.items():
      m = tuple(sorted(m1 + m2, key=key))
      out[m] = out.get(m, 0.0) + c1 * c2
  return out


class _Combiner:
  def __init__(self, program: Program, fast: bool):
    self.r = Rewriter(program)
    self.fast = fast
    self.forms: dict[Var, dict] = {}
    self.order: dict[Var, int] = {v: i for i, v in enumerate(program.inputs)}
    self.emitted: dict[Var, Var] = {}

  def key(self, a):
    return (0, self.order[a]) if isinstance(a, Var) else (1, hash(a))

  def form(self, a):
    a = self.r.read(a)
    if isinstance(a, Var) and a in self.forms:
      return self.forms[a]
    c = self.r.splat(a)
    if c is not None:
      return {(): float(c)}
    return {(a,): 1.0}

  def materialize(self, a):
    """The atom for `a`, emitting its form if it has one."""
    a = self.r.read(a)
    if not isinstance(a, Var) or a not in self.forms:
      return a
    if a not in self.emitted:
      self.emitted[a] = self.emit_form(self.forms[a], a.aval)
    return self.emitted[a]

  def emit_monomial(self, m, aval):
    out = None
    for leaf in m:
      out = leaf if out is None else self.r.emit(P.mul_p, [out, leaf])
    return out

  def emit_form(self, form, aval):
    terms = sorted(form.items(), key=lambda t: (len(t[0]), [self.key(v) for v in t[0]]))
    acc = None
    for m, c in terms:
      if c == 0 and (self.fast or not m):
        continue
      if not m:
        term, sign = splat(self.r, abs(c), aval), np.sign(c)
      else:
        term = self.emit_monomial(m, aval)
        sign = 1.0 if c > 0 else -1.0
        if abs(c) != 1:
          term = self.r.emit(P.mul_p, [term, splat(self.r, abs(c) if c else 0.0, aval)])
      if acc is None:
        acc = term if sign >= 0 else self.r.emit(P.neg_p, [term])
      else:
        acc = self.r.emit(P.add_p if sign >= 0 else P.sub_p, [acc, term])
    return acc if acc is not None else splat(self.r, 0.0, aval)

  def run(self) -> Program:
    r = self.r
    for eqn in self.r.program.eqns:
      out = eqn.outputs[0]
      if eqn.prim in FORM_PRIMS and out.aval.is_float:
        f = self.eqn_form(eqn)
        if f is not None and len(f) <= MAX_TERMS and max(map(len, f), default=0) <= MAX_DEGREE:
          self.forms[out] = f
          self.order[out] = len(self.order)
          continue
      r.keep(eqn.__class__(eqn.prim, tuple(self.materialize(a) for a in eqn.inputs),
                           eqn.params, eqn.outputs, eqn.source))
      for v in eqn.outputs:
        self.order[v] = len(self.order)
    outputs = tuple(self.materialize(a) for a in r.program.outputs)
    return Program(r.program.inputs, tuple(r.eqns), outputs)

  def eqn_form(self, eqn):
    fs = [self.form(a) for a in eqn.inputs]
    if eqn.prim is P.add_p:
      return _add(fs[0], fs[1])
    if eqn.prim is P.sub_p:
      return _add(fs[0], fs[1], -1.0)
    if eqn.prim is P.neg_p:
      return {m: -c for m, c in fs[0].items()}
    return _mul(fs[0], fs[1], self.key)


def combine(program: Program, fast: bool = False) -> Program:
  """Canonicalizes sums and products of terms (see the module docstring).

  Args:
    program: the program to rewrite.
    fast: drop terms whose coefficients cancel (wrong only for non-finite values).
  """
  return _Combiner(program, fast).run()
