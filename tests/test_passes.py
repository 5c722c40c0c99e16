"""Passes: each rewrite by before/after IR text; semantics (incl. NaN/inf) on random
programs; CSE of commuted duplicates; DCE; the pipeline's printing and counts."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primc import passes
import primc
import primc.numpy as pnp
from primc.passes import cse, dce, simplify
from primc.passes.combine import combine
from primc import prims as P

F3 = np.zeros(3, np.float32)


def after(fn, *args, pipeline=(simplify, dce), **kw):
  program = primc.make_program(fn)(*args)
  for p in pipeline:
    program = p(program, **kw) if kw and p in (simplify, combine) else p(program)
  primc.typecheck(program)
  return str(program)


def body(text):
  """The equation lines and the outputs of a printed program."""
  return [line.strip() for line in text.splitlines()[1:]]


@pytest.mark.parametrize("fn,expected", [
    (lambda x: x + 0.0, ["in ( a ) }"]),
    (lambda x: 0.0 + x, ["in ( a ) }"]),
    (lambda x: x * 1.0, ["in ( a ) }"]),
    (lambda x: x / 1.0, ["in ( a ) }"]),
    (lambda x: x - 0.0, ["in ( a ) }"]),
    (lambda x: -(-x), ["in ( a ) }"]),
    (lambda x: x * -1.0, ["let b:f32[3] = neg a", "in ( b ) }"]),
    (lambda x: x ** 2, ["let b:f32[3] = mul a a", "in ( b ) }"]),
    (lambda x: x ** 3, ["let b:f32[3] = mul a a", "c:f32[3] = mul b a", "in ( c ) }"]),
    (lambda x: x ** 1, ["in ( a ) }"]),
    (lambda x: x + (-pnp.sin(x)), ["let b:f32[3] = sin a", "c:f32[3] = sub a b", "in ( c ) }"]),
    (lambda x: pnp.astype(x, "float32"), ["in ( a ) }"]),
    (lambda x: pnp.where(True, x, pnp.sin(x)), ["in ( a ) }"]),
    (lambda x: pnp.where(x > 0, x, x), ["in ( a ) }"]),
    (lambda x: x.reshape(3, 1).reshape(1, 3),
     ["let b:f32[1,3] = reshape[new_sizes=(1, 3)] a", "in ( b ) }"]),
    (lambda x: P.transpose(P.transpose(x.reshape(1, 3, 1), (1, 2, 0)), (2, 0, 1)),
     ["let b:f32[1,3,1] = reshape[new_sizes=(1, 3, 1)] a", "in ( b ) }"]),
    (lambda x: P.broadcast_in_dim(P.broadcast_in_dim(x, (2, 3), (1,)), (4, 2, 3), (1, 2)),
     ["let b:f32[4,2,3] = broadcast_in_dim[broadcast_dimensions=(2,), shape=(4, 2, 3)] a",
      "in ( b ) }"]),
    (lambda x: x[0:3],  ["in ( a ) }"]),
])
def test_simplify_rewrites(fn, expected):
  assert body(after(fn, F3)) == expected


def test_reduce_sum_of_broadcast_is_a_multiply():
  text = after(lambda x: P.reduce_sum(P.broadcast_in_dim(x, (4, 3), (1,)), (0,)), F3)
  assert body(text) == [
      "let b:f32[3] = broadcast_in_dim[broadcast_dimensions=(), shape=(3,)] 4.0",
      "c:f32[3] = mul a b", "in ( c ) }"]


def test_constant_folding_of_literals_and_splats():
  text = after(lambda x: x * (pnp.full((3,), 2.0) * 3.0 + 1.0), F3)
  assert body(text) == [
      "let b:f32[3] = broadcast_in_dim[broadcast_dimensions=(), shape=(3,)] 7.0",
      "c:f32[3] = mul a b", "in ( c ) }"]
  small = primc.make_program(lambda: P.add(np.arange(3.0), np.ones(3)))()
  folded = simplify(small)
  assert folded.eqns == () and np.array_equal(folded.outputs[0].value, [1.0, 2.0, 3.0])


def test_single_elements_made_from_nothing_fold_to_literals():
  # eye(1) is the literal 1, so multiplying by it disappears (larger iotas stay equations)
  text = after(lambda x: x * pnp.eye(1, dtype="float32").reshape(1), F3)
  assert body(text) == ["in ( a ) }"]
  assert "iota" in after(lambda x: x * pnp.eye(3, dtype="float32")[0], F3)


def test_dot_general_absorbs_transposes():
  a, b = np.zeros((3, 4), np.float32), np.zeros((3, 5), np.float32)
  text = after(lambda a, b: a.T @ b, a, b)
  assert body(text) == [
      "let c:f32[4,5] = dot_general[dimension_numbers=(((0,), (0,)), ((), ()))] a b",
      "in ( c ) }"]
  text = after(lambda a, b: (a.T @ b).T, a, b)
  assert body(text) == [
      "let c:f32[5,4] = dot_general[dimension_numbers=(((0,), (0,)), ((), ()))] b a",
      "in ( c ) }"]


def test_unsafe_rewrites_need_fast():
  safe = after(lambda x: x * 0.0 + (x - x), F3)
  assert "mul" in safe and "sub" in safe  # inf * 0 and inf - inf are nan: kept
  fast = after(lambda x: x * 0.0 + (x - x), F3, fast=True)
  assert body(fast) == ["let b:f32[3] = broadcast_in_dim[broadcast_dimensions=(), shape=(3,)] 0.0",
                        "in ( b ) }"]


def test_combine_canonical_sums():
  text = after(lambda x, y: (x + y) + y + x * 2.0 - (-y), F3, F3,
               pipeline=(simplify, combine, cse, dce))
  assert body(text) == [
      "let c:f32[3] = broadcast_in_dim[broadcast_dimensions=(), shape=(3,)] 3.0",
      "d:f32[3] = mul a c", "e:f32[3] = mul b c", "f:f32[3] = add d e", "in ( f ) }"]


def test_combine_keeps_cancelled_terms_unless_fast():
  fn = lambda x, y: (x + y) - x
  x = np.array([np.inf, 1.0])
  assert np.isnan(primc.interpret(passes.optimize(primc.make_program(fn)(x, x)), x, x)[0][0])
  fast = passes.optimize(primc.make_program(fn)(x, x), fast=True)
  assert [e.prim.name for e in fast.eqns] == [] and fast.outputs[0] is fast.inputs[1]


def test_cse_merges_commuted_duplicates():
  text = after(lambda a, b: pnp.tanh(a * b) + pnp.tanh(b * a), F3, F3, pipeline=(cse, dce))
  assert body(text) == ["let c:f32[3] = mul a b", "d:f32[3] = tanh c", "e:f32[3] = add d d",
                        "in ( e ) }"]


def test_dce_removes_dead_code():
  program = primc.make_program(lambda x: (pnp.sin(x), pnp.cos(x))[0])(F3)
  assert [e.prim.name for e in program.eqns] == ["sin", "cos"]
  assert [e.prim.name for e in dce(program).eqns] == ["sin"]


def test_optimize_prints_after_named_passes(capsys, monkeypatch):
  program = primc.make_program(lambda x: x * 1.0 + 0.0)(F3)
  passes.optimize(program, print_after="simplify,dce")
  err = capsys.readouterr().err
  assert "--- after simplify" in err and "--- after dce" in err and "--- after cse" not in err
  monkeypatch.setenv("PRIMC_PRINT_AFTER", "cse")
  passes.optimize(program)
  assert "--- after cse" in capsys.readouterr().err


def test_pipeline_is_a_readable_list():
  assert [p.name for p in passes.PIPELINE] == ["simplify", "merge", "combine", "cse", "dce"]
  assert all(p.description for p in passes.PIPELINE)


def _tanh_derivative(n):
  h = lambda x: pnp.tanh(x).sum()
  for _ in range(n - 1):
    h = (lambda d: lambda x: d(x).sum())(primc.grad(h))
  return primc.grad(h)


def test_tanh_derivative_counts_grow_polynomially():
  x = np.ones(1, np.float32)
  counts = [len(passes.optimize(primc.make_program(_tanh_derivative(n))(x)).eqns)
            for n in range(1, 9)]
  with primc.raw_transforms():
    raw = [len(primc.make_program(_tanh_derivative(n))(x).eqns) for n in range(1, 9)]
  assert counts[5] <= 100 and raw[5] > 300
  # linear growth: the optimized count never more than 4 equations per order past n=3
  assert all(b - a <= 4 for a, b in zip(counts[2:], counts[3:])), counts
  assert raw[-1] / raw[-2] > 2  # while the raw programs grow exponentially


def test_optimized_derivatives_are_still_correct():
  xs = np.linspace(-2, 2, 11)
  t = np.tanh(xs)
  np.testing.assert_allclose(_tanh_derivative(3)(xs), (1 - t ** 2) * (6 * t ** 2 - 2), atol=1e-12)


def test_equation_counts_reports_each_stage():
  program = primc.make_program(_tanh_derivative(3))(np.ones(1, np.float32))
  counts = passes.equation_counts(program)
  assert list(counts) == ["traced", "simplify", "merge", "combine", "cse", "dce", "optimized",
                          "regions"]
  assert counts["optimized"] <= counts["traced"] and counts["regions"] >= 1


# --- semantics preserved on random programs, NaN and inf inputs included -------------------

OPS = [pnp.sin, pnp.tanh, pnp.exp, lambda x: x * 0.0, lambda x: x - x, lambda x: x + 0.0,
       lambda x: x * 1.0, lambda x: -(-x), lambda x: x ** 2, lambda x: x ** 0, lambda x: x / 1.0,
       lambda x: x + x, lambda x: x * 2.0 - x, lambda x: pnp.sum(x, keepdims=True) + x,
       lambda x: pnp.maximum(x, 0.5), lambda x: pnp.where(x > 0, x, -x)]
VALUES = st.sampled_from([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e30, 3e-39])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=6),
       st.lists(VALUES, min_size=4, max_size=4), st.lists(st.integers(0, 1), min_size=2,
                                                            max_size=4))
def test_optimize_preserves_nan_and_inf(ops, values, mix):
  x = np.array(values, np.float32)

  def f(x, y):
    v = x
    for i, k in enumerate(ops):
      v = OPS[k](v)
      v = v + y if mix[i % len(mix)] else v * y
    return v

  program = primc.make_program(f)(x, x)
  before = primc.interpret(program, x, x[::-1].copy())[0]
  optimized = passes.optimize(program)
  (got,) = primc.interpret(optimized, x, x[::-1].copy())
  np.testing.assert_array_equal(np.isnan(got), np.isnan(before))
  finite = np.isfinite(before)
  np.testing.assert_array_equal(got[~finite & ~np.isnan(before)],
                                before[~finite & ~np.isnan(before)])
  np.testing.assert_allclose(got[finite], before[finite], rtol=1e-5, atol=1e-30)


def test_the_pass_manager_names_a_failing_pass_and_dumps_after_named_passes(capsys,
                                                                              monkeypatch):
  from primc.passes import pipeline
  program = primc.make_program(lambda x: pnp.tanh(x) * 1.0 + 0.0)(np.ones(3, np.float32))

  def broken(p):
    raise ValueError("boom")
  monkeypatch.setattr(pipeline, "PIPELINE", pipeline.PIPELINE[:1] + [
      pipeline.Pass("broken", broken, "fails")])
  with pytest.raises(pipeline.PassError, match="pass broken failed .*boom"):
    pipeline.optimize(program)

  def ill_typed(p):  # drops an equation whose output is still used
    return primc.Program(p.inputs, p.eqns[1:], p.outputs)
  monkeypatch.setattr(pipeline, "PIPELINE", [pipeline.Pass("ill_typed", ill_typed, "")])
  with pytest.raises(pipeline.PassError, match="pass ill_typed made an ill-typed program"):
    pipeline.optimize(program, check=True)
  monkeypatch.undo()
  monkeypatch.setenv("PRIMC_DUMP", "after:cse")
  out = pipeline.optimize(program)
  err = capsys.readouterr().err
  assert "--- after cse" in err and "--- after simplify" not in err and "tanh" in err
  assert len(out.eqns) == 1  # x * 1 + 0 is x, and the fixed point is reached
