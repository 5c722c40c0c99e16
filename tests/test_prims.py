"""Primitive registry and numpy implementations against independent numpy oracles."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
from primc import prims as P
from primc.core import Lit, abstract_rules, impl_rules, runner_rules

from prim_cases import CASES, case_id

STARTING_SET = """neg add sub mul div pow max min exp log sin cos tanh sqrt abs sign eq ne lt le gt
ge select broadcast_in_dim reshape transpose slice pad concatenate gather scatter_add reduce_sum
reduce_max dot_general full convert""".split()


def test_registry_covers_the_starting_set():
  names = {p.name for p in P.ALL_PRIMITIVES}
  assert set(STARTING_SET) <= names


@pytest.mark.parametrize("prim", P.ALL_PRIMITIVES, ids=lambda p: p.name)
def test_every_primitive_has_abstract_and_impl_rules(prim):
  assert prim in abstract_rules and prim in impl_rules


def test_every_primitive_has_a_rule_in_every_table():
  """Primitives x tables: shape, numpy, JVP, batching, kernel emission for every one; a
  transpose rule exactly for those that declare linear arguments; the stages' lists of
  primitives derive from the traits each declares where it is created."""
  from primc import ad, batching
  from primc.codegen import kernels
  from primc.core import TRAITS

  tables = {
    "abstract": abstract_rules,
    "impl": impl_rules,
    "jvp": ad.jvp_rules,
    "batching": batching.batch_rules,
  }
  missing = [
    f"{p.name}: {t}" for p in P.ALL_PRIMITIVES for t, table in tables.items() if p not in table
  ]
  missing += [f"{p.name}: kernel emission" for p in P.ALL_PRIMITIVES if not kernels.emits(p)]
  missing += [
    f"{p.name}: transpose rule {'missing' if p.linear else 'without linear args'}"
    for p in P.ALL_PRIMITIVES
    if (p in ad.transpose_rules) != (p.linear is not None)
  ]
  assert not missing, missing
  for p in P.ALL_PRIMITIVES:
    assert p.traits and p.traits <= set(TRAITS), p.name
  assert "comparison" in P.eq_p.traits and P.mul_p in P.with_trait("commutative")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_primitive_folds_when_its_inputs_are_constants(case, rng):
  """Simplification's default rule (constant folding) holds for every primitive: the
  case's equation of the primitive, its inputs made literals, becomes a literal."""
  from primc import passes
  from primc.core import Eqn, Lit, Program, results, run

  xs = case.make(rng)
  program = primc.make_program(case.fn)(*xs)
  values = {}  # each equation's input values

  def apply(e, ins):
    values[e] = ins
    return results(e, impl_rules[e.prim](*ins, **e.kw))

  run(program, xs, apply)
  eqn = next(e for e in program.eqns if e.prim is case.prim)
  lits = tuple(Lit.of(v) for v in values[eqn])
  single = Program((), (Eqn(eqn.prim, lits, eqn.params, eqn.outputs),), eqn.outputs)
  folded = passes.simplify(single)
  size = eqn.outputs[0].aval.size  # (generators stay, unless they make one element)
  if size <= 64 and (eqn.inputs or size == 1):
    assert not folded.eqns and isinstance(folded.outputs[0], Lit), folded
  np.testing.assert_allclose(primc.interpret(folded)[0], primc.interpret(single)[0])


def test_every_primitive_has_a_test_case():
  assert {c.prim for c in CASES} == set(P.ALL_PRIMITIVES)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_impl_matches_numpy(case, dtype, rng):
  xs = tuple(np.asarray(a, dtype) for a in case.make(rng))
  want = case.oracle(*xs)
  eager = case.fn(*xs)  # eager mode runs impl_rules
  program = primc.make_program(case.fn)(*xs)
  (traced,) = primc.interpret(program, *xs)
  for got in (eager, traced):
    assert got.shape == np.shape(want)
    if case.prim is not P.convert_p and case.prim is not P.full_p and got.dtype.kind == "f":
      assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12, atol=1e-6)


@pytest.mark.parametrize(
  "shape,dims,out",
  [
    ((), (), (2, 3)),
    ((1,), (1,), (4, 5)),
    ((3, 1), (0, 2), (3, 4, 5)),
    ((1, 1), (0, 1), (2, 2)),
  ],
)
def test_broadcast_in_dim_edge_cases(shape, dims, out, rng):
  x = rng.standard_normal(shape)
  got = P.broadcast_in_dim(x, out, dims)
  expanded = x.reshape([shape[dims.index(d)] if d in dims else 1 for d in range(len(out))])
  np.testing.assert_array_equal(got, np.broadcast_to(expanded, out))


def test_shape_rules_reject_bad_params():
  x = np.zeros((2, 3), np.float32)
  for call in [
    lambda: P.reshape(x, (4,)),
    lambda: P.transpose(x, (0, 0)),
    lambda: P.slice_(x, (0, 2), (2, 5)),
    lambda: P.broadcast_in_dim(x, (3, 3), (0, 1)),
    lambda: P.reduce_sum(x, (2,)),
    lambda: P.concatenate([x, x.T], 0),
    lambda: P.gather(x, np.zeros(2, np.float32), 0),
    lambda: P.dot_general(x, x, (((1,), (1,)), ((0,), (1,)))),
    lambda: P.add(x, x.astype(np.float64)),
    lambda: P.select(x, x, x),
  ]:
    with pytest.raises(primc.ShapeError):
      call()


def test_ieee_results_not_errors():
  x = np.array([0.0, -1.0, np.inf, np.nan], np.float32)
  assert np.isnan(P.log(x)[1]) and P.log(x)[0] == -np.inf
  assert np.isnan(P.sqrt(x)[1])
  assert P.div(np.ones(1, np.float32), np.zeros(1, np.float32))[0] == np.inf


RUNNER_CASES = [c for c in CASES if c.prim in runner_rules]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", RUNNER_CASES, ids=case_id)
def test_runner_rules_agree_with_the_implementation_bit_for_bit(case, dtype, rng):
  """`runner_rules` (kept runners' and the tape's faster implementations on floats) give
  the numpy implementation's values, shapes and dtypes exactly."""
  xs = [np.asarray(x, dtype) for x in case.make(rng)]
  program = primc.make_program(case.fn)(*xs)
  checked = 0
  for e in program.eqns:
    if e.prim is not case.prim or not all(
      a in program.inputs or isinstance(a, Lit) for a in e.inputs
    ):
      continue
    checked += 1
    ins = [a.value if isinstance(a, Lit) else xs[program.inputs.index(a)] for a in e.inputs]
    want = impl_rules[e.prim](*ins, **e.kw)
    got = np.asarray(runner_rules[e.prim](*[a.aval for a in e.inputs], **e.kw)(*ins))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
  assert checked


def test_runner_rules_have_cases():
  assert {c.prim for c in RUNNER_CASES} == set(runner_rules)


@st.composite
def _indexing_cases(draw):
  """x, idx, axis, batch_dims for gather / scatter_add: any rank up to 4, batch dims up
  to the axis, indices of any rank, negative ones included."""
  rank = draw(st.integers(1, 4))
  shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
  axis = draw(st.integers(0, rank - 1))
  batch_dims = draw(st.integers(0, axis))
  idx_tail = draw(st.lists(st.integers(0, 3), min_size=0, max_size=2))
  idx_shape = tuple(shape[:batch_dims]) + tuple(idx_tail)
  n = shape[axis]
  rng = np.random.default_rng(draw(st.integers(0, 2**16)))
  idx = rng.integers(-n, n, idx_shape).astype(draw(st.sampled_from([np.int32, np.int64])))
  return rng.standard_normal(shape), idx, axis, batch_dims


def _per_item(x, idx, batch_dims, each):
  """`each(x[k], idx[k])` for every batch item k, stacked: the definition of batch dims."""
  if batch_dims == 0:
    return each(x, idx)
  return np.stack([_per_item(xk, ik, batch_dims - 1, each) for xk, ik in zip(x, idx)])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_indexing_cases())
def test_gather_and_scatter_add_match_their_definition_item_by_item(case):
  # one vectorized step for any number of batch items (a loop over them, before, made
  # a 110x110 advection's gather 12,100 Python iterations); the oracle is the definition
  x, idx, axis, batch_dims = case
  a = axis - batch_dims
  want = _per_item(x, idx, batch_dims, lambda xk, ik: np.take(xk, ik, axis=a))
  got = impl_rules[P.gather_p](x, idx, axis=axis, batch_dims=batch_dims)
  np.testing.assert_array_equal(got, want)
  updates = np.random.default_rng(1).standard_normal(want.shape)

  def added(xk, ik_uk):
    ik, uk = ik_uk
    out = xk.copy()
    flat = uk.reshape(xk.shape[:a] + (ik.size,) + xk.shape[a + 1 :])
    np.add.at(np.moveaxis(out, a, 0), ik.reshape(-1), np.moveaxis(flat, a, 0))
    return out

  pairs = _pairs(idx, updates, batch_dims)
  want = _per_item(x, pairs, batch_dims, added)
  got = impl_rules[P.scatter_add_p](x, idx, updates, axis=axis, batch_dims=batch_dims)
  np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def _pairs(idx, updates, batch_dims):
  """idx and updates zipped item by item down to the batch dims (for `_per_item`)."""
  if batch_dims == 0:
    return idx, updates
  return [_pairs(i, u, batch_dims - 1) for i, u in zip(idx, updates)]
