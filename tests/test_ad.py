"""Autodiff rules: every JVP rule by finite differences (fwd and rev), every transpose rule
by the identity <t, A^T c> = <A t, c>, and the rule registries' completeness."""

import numpy as np
import pytest

import primc
from primc import ad, batching
from primc import prims as P

from prim_cases import CASES, case_id

NON_DIFFERENTIABLE = P.with_trait("nondifferentiable")
# every differentiable elementwise primitive, unary and binary, from its traits (convert's
# case rounds through float32: finite differences of order 3 see only its rounding)
ELEMENTWISE = {
  p for p in P.with_trait("elementwise") if p not in NON_DIFFERENTIABLE and p is not P.convert_p
}
DIFF_CASES = [c for c in CASES if c.prim not in NON_DIFFERENTIABLE]


@pytest.mark.parametrize("prim", P.ALL_PRIMITIVES, ids=lambda p: p.name)
def test_every_primitive_has_jvp_and_batching_rules(prim):
  assert prim in ad.jvp_rules, f"{prim.name} lacks a JVP rule"
  assert prim in batching.batch_rules, f"{prim.name} lacks a batching rule"


@pytest.mark.parametrize("prim", ad.LINEAR_PRIMITIVES, ids=lambda p: p.name)
def test_every_linear_primitive_has_a_transpose_rule(prim):
  assert prim in ad.transpose_rules, f"linear primitive {prim.name} lacks a transpose rule"


def test_every_linear_case_is_declared_linear():
  assert {c.prim for c in CASES if c.linear} == set(ad.LINEAR_PRIMITIVES)


@pytest.mark.parametrize("case", DIFF_CASES, ids=case_id)
@pytest.mark.parametrize("order", [1, 2])
def test_jvp_rule_by_finite_differences(case, order, rng):
  xs = case.make(rng)
  primc.check_grads(
    case.fn,
    xs,
    order=order,
    modes=("fwd", "rev"),
    eps=case.eps,
    atol=1e-4 if case.eps > 1e-6 else 1e-5,
  )


@pytest.mark.parametrize("case", [c for c in CASES if c.prim in ELEMENTWISE], ids=case_id)
def test_elementwise_jvp_rules_at_order_3(case, rng):
  primc.check_grads(case.fn, case.make(rng), order=3, modes=("fwd", "rev"))


@pytest.mark.parametrize(
  "case",
  [c for c in CASES if c.prim in NON_DIFFERENTIABLE and c.make(np.random.default_rng(0))],
  ids=case_id,
)
def test_non_differentiable_primitives_have_zero_derivative(case, rng):
  xs = case.make(rng)
  f = lambda *a: P.convert(case.fn(*a), "float64")
  _, t = primc.jvp(f, xs, [np.ones_like(x) for x in xs])
  np.testing.assert_array_equal(t, 0)
  for g in primc.vjp(f, *xs)[1](np.ones(np.shape(f(*xs)))):
    np.testing.assert_array_equal(g, 0)


def _transpose_masks(case, n):
  if case.bilinear:
    return [[i == j for i in range(n)] for j in case.linear]
  return [[i in case.linear for i in range(n)]]


@pytest.mark.parametrize("case", [c for c in CASES if c.linear], ids=case_id)
def test_transpose_rule_identity(case, rng):
  xs = case.make(rng)
  program = primc.make_program(case.fn)(*xs)
  for mask in _transpose_masks(case, len(xs)):
    consts = [x for x, m in zip(xs, mask) if not m]
    ts = [rng.standard_normal(np.shape(x)) for x, m in zip(xs, mask) if m]
    it = iter(ts)
    (at,) = primc.interpret(program, *[next(it) if m else x for x, m in zip(xs, mask)])
    c = rng.standard_normal(at.shape)
    transposed = ad.transpose_program(program, mask)
    primc.typecheck(transposed)
    atc = primc.interpret(transposed, *consts, c)
    lhs = sum(np.vdot(t, a) for t, a in zip(ts, atc))
    tol = 1e-6 if case.prim is P.convert_p else 1e-10  # the case rounds through float32
    np.testing.assert_allclose(lhs, np.vdot(at, c), rtol=tol, atol=tol)


def test_transformed_programs_typecheck(rng):
  for case in DIFF_CASES:
    program = primc.make_program(case.fn)(*case.make(rng))
    if not any(a.is_float for a in program.in_avals):
      continue
    primc.typecheck(ad.jvp_program(program))
    primal, linear = ad.linearize_program(program)
    primc.typecheck(primal)
    primc.typecheck(linear)
    primc.typecheck(ad.vjp_program(program))


def test_symbolic_zeros_skip_work():
  # d/dx of x * c with c a constant: no tangent flows through c, so no add of zeros.
  program = primc.make_program(lambda x, c: x * c)(np.ones(3), np.ones(3))
  jvp = ad.jvp_program(program, wrt=(True, False))
  assert [e.prim.name for e in jvp.eqns] == ["mul", "mul"]


def test_integer_inputs_cannot_be_differentiated():
  with pytest.raises(primc.PrimcError, match="only float"):
    primc.grad(lambda x: x.sum())(np.arange(3, dtype=np.int32))
  program = primc.make_program(lambda x: x * 2)(np.arange(3, dtype=np.int32))
  with pytest.raises(primc.PrimcError, match="int32"):
    ad.jvp_program(program, wrt=(True,))
