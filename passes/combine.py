"""combine: rewrites chains of add/sub/neg/mul into a canonical sum of monomials.

Each float value built by `add sub neg mul` (and constants) is given a *form*: a sum of
`coefficient * monomial`, where a monomial is a product of opaque leaves (values made by
any other op). Forms are re-emitted in a canonical order (monomials left-folded over
sorted leaves), so CSE then shares what the chains had in common: `x + x` becomes
`2 * x`, `(k + j) + j` becomes `k + 2 * j`, constants inside products move out, and, for
bounded values, products of sums are expanded into sums of monomials. This keeps
nested derivatives polynomial in size: d^n/dx^n tanh becomes a polynomial in tanh(x).

NaN/inf policy (tested with NaN/inf inputs): rewrites are exact in real arithmetic and keep
which results are NaN and which are ±inf; values may differ by rounding.
  - Products are reassociated or distributed over sums only when every leaf of both
    factors has a static bound (range analysis: tanh, sin, cos are in [-1, 1], constants,
    and sums and products of bounded values), so no new term can be infinite or overflow
    (`(sin(x) * y) * y` is not reordered: `y * y` may overflow where the original did not).
    Scaling by a nonzero constant is always done.
  - A monomial whose coefficients cancel is kept as `0 * m` (NaN where m is NaN or inf);
    an unbounded monomial that merged coefficients of both signs also gets a `0 * m` term
    (`2x - x` is NaN for x = inf, `x` is not).
`fast=True` distributes and drops cancelled terms regardless (exact only for finite values).
"""

from __future__ import annotations

import math

import numpy as np

from primc import prims as P
from primc.core import Lit, Program, Var
from primc.passes.rewrite import Rewriter
from primc.passes.simplify import splat

MAX_TERMS = 32
MAX_DEGREE = 16
BOUND_LIMIT = 1e30  # a bounded form stays far from float32 overflow (3.4e38)
FORM_PRIMS = {P.add_p, P.sub_p, P.neg_p, P.mul_p}


def _mul_bounds(*bs):
  return None if any(b is None for b in bs) else math.prod(bs)


# prim -> (eqn, *input bounds) -> bound on |output| (None: unbounded). Range analysis.
# A bound never depends on a size (a sum's or a product's grows with its length, so they
# are unbounded; a sized literal is too): a program is rewritten alike at every size, so
# a new batch size gives the structure, and the kernels, of the last one.
bound_rules = {
  P.tanh_p: lambda e, b: 1.0,
  P.sin_p: lambda e, b: 1.0,
  P.cos_p: lambda e, b: 1.0,
  P.sign_p: lambda e, b: 1.0,
  P.sqrt_p: lambda e, b: None if b is None else math.sqrt(b),
  P.exp_p: lambda e, b: None if b is None or b > 80 else math.exp(b),
  P.neg_p: lambda e, b: b,
  P.abs_p: lambda e, b: b,
  P.stop_gradient_p: lambda e, b: b,
  P.convert_p: lambda e, b: b,
  P.reduce_max_p: lambda e, b: b,
  P.broadcast_in_dim_p: lambda e, b: b,
  P.reshape_p: lambda e, b: b,
  P.transpose_p: lambda e, b: b,
  P.slice_p: lambda e, b: b,
  P.pad_p: lambda e, b: b,
  P.rev_p: lambda e, b: b,
  P.roll_p: lambda e, b: b,
  P.windows_p: lambda e, b: b,
  P.gather_p: lambda e, b, i: b,
  P.concatenate_p: lambda e, *bs: None if None in bs else max(bs),
  P.max_p: lambda e, a, b: None if None in (a, b) else max(a, b),
  P.min_p: lambda e, a, b: None if None in (a, b) else max(a, b),
  P.select_p: lambda e, p, a, b: None if None in (a, b) else max(a, b),
  P.add_p: lambda e, a, b: None if None in (a, b) else a + b,
  P.sub_p: lambda e, a, b: None if None in (a, b) else a + b,
  P.mul_p: lambda e, a, b: _mul_bounds(a, b),
}


class _Combiner:
  def __init__(self, program: Program, fast: bool):
    self.r = Rewriter(program)
    self.fast = fast
    self.forms: dict[Var, dict] = {}
    self.bounds: dict[Var, float | None] = {}
    self.order: dict[Var, int] = {v: i for i, v in enumerate(program.inputs)}
    self.emitted: dict[Var, Var] = {}
    self.literals: dict[Lit, int] = {}

  # -- range analysis ------------------------------------------------------------------
  def bound(self, a):
    a = self.r.read(a)
    if isinstance(a, Lit):
      if a.sized or not a.value.size or not a.aval.is_float:
        return None
      return float(np.max(np.abs(a.value)))
    if a in self.forms:
      return self.form_bound(self.forms[a])
    return self.bounds.get(a)

  def form_bound(self, f):
    total = 0.0
    for m, (c, _) in f.items():
      b = _mul_bounds(abs(c), *(self.bound(v) for v in m))
      if b is None:
        return None
      total += b
    return total if np.isfinite(total) else None

  def bounded(self, f) -> bool:
    b = self.form_bound(f)
    return b is not None and b <= BOUND_LIMIT

  def monomial_bounded(self, m) -> bool:
    b = _mul_bounds(1.0, *(self.bound(v) for v in m))
    return b is not None and b <= BOUND_LIMIT

  # -- forms ---------------------------------------------------------------------------
  def key(self, a):
    # literals in the order they are first met (their hash would depend on their values,
    # so on a size for a sized one, and on the process's hash seed): the emitted order
    # of a monomial's factors is the same at every size and in every process
    if isinstance(a, Var):
      return (0, self.order[a])
    return (1, self.literals.setdefault(a, len(self.literals)))

  def form(self, a):
    a = self.r.read(a)
    if isinstance(a, Var) and a in self.forms:
      return self.forms[a]
    c = self.r.splat(a)
    if c is not None:
      return {(): (float(c), False)}
    return {(a,): (1.0, False)}

  def add_term(self, out, m, c, mixed):
    if m not in out:
      out[m] = (c, mixed)
      return
    c0, mixed0 = out[m]
    opposite = c0 * c < 0 and m and not self.monomial_bounded(m)
    out[m] = (c0 + c, mixed0 or mixed or bool(opposite))

  def add(self, f, g, sign=1.0):
    out = dict(f)
    for m, (c, mixed) in g.items():
      self.add_term(out, m, sign * c, mixed)
    return out

  def mul(self, f, g):
    constant = next((h for h in (f, g) if len(h) == 1 and () in h), None)
    if constant is not None:
      c = constant[()][0]
      other = g if constant is f else f
      if c == 0 and not self.fast:
        return None  # 0 * (a + b) is NaN when a + b overflows; 0*a + 0*b is not
      return {m: (c * c2, mixed) for m, (c2, mixed) in other.items()}
    if not self.fast and not (self.bounded(f) and self.bounded(g)):
      return None  # reassociating or distributing products is exact only for bounded values
    out = {}
    for m1, (c1, x1) in f.items():
      for m2, (c2, x2) in g.items():
        self.add_term(out, tuple(sorted(m1 + m2, key=self.key)), c1 * c2, x1 or x2)
    return out

  def eqn_form(self, eqn):
    fs = [self.form(a) for a in eqn.inputs]
    if eqn.prim is P.add_p:
      return self.add(fs[0], fs[1])
    if eqn.prim is P.sub_p:
      return self.add(fs[0], fs[1], -1.0)
    if eqn.prim is P.neg_p:
      return {m: (-c, mixed) for m, (c, mixed) in fs[0].items()}
    return self.mul(fs[0], fs[1])

  # -- emission ------------------------------------------------------------------------
  def materialize(self, a):
    """The atom for `a`, emitting its form if it has one."""
    a = self.r.read(a)
    if not isinstance(a, Var) or a not in self.forms:
      return a
    if a not in self.emitted:
      self.emitted[a] = self.emit_form(self.forms[a], a.aval)
      self.bounds[self.emitted[a]] = self.form_bound(self.forms[a])
    return self.emitted[a]

  def emit_monomial(self, m):
    out = None
    for leaf in m:
      out = leaf if out is None else self.r.emit(P.mul_p, [out, leaf])
    return out

  def emit_form(self, form, aval):
    terms = []
    for m, (c, mixed) in sorted(
      form.items(), key=lambda t: (len(t[0]), [self.key(v) for v in t[0]])
    ):
      if c != 0 or (m and not self.fast):
        terms.append((m, c))  # a cancelled term stays as 0 * m: NaN where m is NaN/inf
      if mixed and m and c != 0 and not self.fast:
        terms.append((m, 0.0))
    acc = None
    for m, c in terms:
      if not m:
        term = splat(self.r, abs(c), aval)
      else:
        term = self.emit_monomial(m)
        if abs(c) != 1:
          term = self.r.emit(P.mul_p, [term, splat(self.r, abs(c), aval)])
      negative = c < 0 or (c == 0 and np.signbit(c))
      if acc is None:
        acc = self.r.emit(P.neg_p, [term]) if negative else term
      else:
        acc = self.r.emit(P.sub_p if negative else P.add_p, [acc, term])
    return acc if acc is not None else splat(self.r, 0.0, aval)

  def run(self) -> Program:
    r = self.r
    for eqn in r.program.eqns:
      out = eqn.outputs[0]
      if eqn.prim in FORM_PRIMS and out.aval.is_float:
        f = self.eqn_form(eqn)
        if f is not None and len(f) <= MAX_TERMS and max(map(len, f), default=0) <= MAX_DEGREE:
          self.forms[out] = f
          self.order[out] = len(self.order)
          continue
      inputs = tuple(self.materialize(a) for a in eqn.inputs)
      r.keep(eqn.__class__(eqn.prim, inputs, eqn.params, eqn.outputs, eqn.source))
      rule = bound_rules.get(eqn.prim)
      if rule is not None and not eqn.prim.multiple_results and out.aval.is_float:
        self.bounds[out] = rule(eqn, *(self.bound(a) for a in inputs))
      for v in eqn.outputs:
        self.order[v] = len(self.order)
    outputs = tuple(self.materialize(a) for a in r.program.outputs)
    return Program(r.program.inputs, tuple(r.eqns), outputs)


def combine(program: Program, fast: bool = False) -> Program:
  """Canonicalizes sums and products of terms (see the module docstring).

  Args:
    program: the program to rewrite.
    fast: distribute and drop cancelled terms without range checks (exact only for
      finite values).
  """
  return _Combiner(program, fast).run()
