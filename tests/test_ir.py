"""The IR: printer golden text, typecheck rejections, frozen values."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc import prims as P
from primc import trace
from primc.core import (
  Eqn,
  FrozenError,
  Lit,
  Primitive,
  Program,
  ShapedArray,
  Var,
  make_params,
  typecheck,
)

F22 = np.zeros((2, 2), np.float32)


def test_printer_mynet_forward_golden():
  program = primc.make_program(lambda x, w, b: pnp.tanh(x @ w + b))(
    F22, F22, np.zeros(2, np.float32)
  )
  assert (
    str(program)
    == """\
{ lambda a:f32[2,2] b:f32[2,2] c:f32[2] .
  let d:f32[2,2] = dot_general[dimension_numbers=(((1,), (0,)), ((), ()))] a b
      e:f32[2,2] = broadcast_in_dim[broadcast_dimensions=(1,), shape=(2, 2)] c
      f:f32[2,2] = add d e
      g:f32[2,2] = tanh f
  in ( g ) }"""
  )


def test_printer_literals_and_multiple_outputs_golden():
  program = primc.make_program(lambda x: (x * 2.0, -x, x))(np.zeros(3, np.float64))
  assert (
    str(program)
    == """\
{ lambda a:f64[3] .
  let b:f64[3] = broadcast_in_dim[broadcast_dimensions=(), shape=(3,)] 2.0
      c:f64[3] = mul a b
      d:f64[3] = neg a
  in ( c d a ) }"""
  )


def test_printer_names_are_stable_and_go_past_z():
  x = np.zeros((), np.float32)

  def many(x):
    for _ in range(30):
      x = pnp.sin(x)
    return x

  program = primc.make_program(many)(x)
  text = str(program)
  assert text == str(primc.make_program(many)(x))  # names made at print time: stable
  assert "aa:f32[] = sin z" in text and "in ( ae ) }" in text


def _prog(eqns, inputs, outputs):
  return Program(tuple(inputs), tuple(eqns), tuple(outputs))


def test_typecheck_accepts_traced_programs():
  typecheck(primc.make_program(lambda x: pnp.softmax(x @ x.T))(F22))


def test_typecheck_rejects_undefined_variable():
  a, b, c = (
    Var(ShapedArray((2,), "float32")),
    Var(ShapedArray((2,), "float32")),
    Var(ShapedArray((2,), "float32")),
  )
  bad = _prog([Eqn(P.add_p, (a, b), (), (c,))], [a], [c])
  with pytest.raises(primc.TypeCheckError, match="used before it is defined"):
    typecheck(bad)


def test_typecheck_rejects_double_assignment():
  a = Var(ShapedArray((2,), "float32"))
  b = Var(ShapedArray((2,), "float32"))
  bad = _prog([Eqn(P.neg_p, (a,), (), (b,)), Eqn(P.neg_p, (a,), (), (b,))], [a], [b])
  with pytest.raises(primc.TypeCheckError, match="assigned twice"):
    typecheck(bad)


def test_typecheck_rejects_aval_mismatch():
  a = Var(ShapedArray((2, 3), "float32"))
  out = Var(ShapedArray((2,), "float32"))  # reduce over axis 0 gives (3,)
  bad = _prog([Eqn(P.reduce_sum_p, (a,), make_params({"axes": (0,)}), (out,))], [a], [out])
  with pytest.raises(primc.TypeCheckError, match=r"reduce_sum.*f32\[2\].*f32\[3\]"):
    typecheck(bad)


def test_typecheck_rejects_shape_rule_violation():
  a = Var(ShapedArray((2,), "float32"))
  b = Var(ShapedArray((3,), "float32"))
  out = Var(ShapedArray((2,), "float32"))
  with pytest.raises(primc.TypeCheckError, match="operand shapes differ"):
    typecheck(_prog([Eqn(P.add_p, (a, b), (), (out,))], [a, b], [out]))


def test_typecheck_rejects_unknown_primitive_and_undefined_output():
  a = Var(ShapedArray((2,), "float32"))
  out = Var(ShapedArray((2,), "float32"))
  with pytest.raises(primc.TypeCheckError, match="no abstract rule"):
    typecheck(_prog([Eqn(Primitive("mystery"), (a,), (), (out,))], [a], [out]))
  with pytest.raises(primc.TypeCheckError, match="program outputs"):
    typecheck(_prog([], [a], [out]))


def test_ir_is_frozen_and_params_hashable():
  program = primc.make_program(lambda x: x.sum(0))(F22)
  with pytest.raises(FrozenError):
    program.eqns = ()
  with pytest.raises(FrozenError):
    program.eqns[0].params = ()
  assert hash(program.eqns[0].params) == hash((("axes", (0,)),))
  with pytest.raises(TypeError):
    make_params({"axes": [0]})


def test_every_ir_record_is_frozen_compares_and_pickles():
  import pickle

  from primc.ad import UndefinedPrimal, Zero
  from primc.passes.pipeline import PIPELINE
  from primc.tree import tree_flatten

  aval = ShapedArray([2, np.int64(3)], np.float32)
  assert (aval.shape, aval.dtype) == ((2, 3), "float32")
  assert aval == ShapedArray((2, 3), "float32") and hash(aval) == hash(ShapedArray((2, 3), "f4"))
  assert aval != ShapedArray((3, 2), "float32") and aval != ShapedArray((2, 3), "float64")
  assert pickle.loads(pickle.dumps(aval)) == aval
  assert repr(aval) == "ShapedArray(shape=(2, 3), dtype='float32')"
  program = primc.make_program(lambda x: x.sum(0) * 2.0)(F22)
  treedef = tree_flatten({"a": (1, [2])})[1]
  assert pickle.loads(pickle.dumps(treedef)) == treedef
  assert hash(tree_flatten({"a": (3, [4])})[1]) == hash(treedef)
  assert treedef != tree_flatten({"a": (1, (2,))})[1]
  assert Zero(aval) == Zero(aval) and Zero(aval) != UndefinedPrimal(aval)
  records = [
    aval,
    program,
    program.eqns[0],
    program.inputs[0],
    Lit.of(1.0),
    treedef,
    Zero(aval),
    PIPELINE[0],
  ]
  for record in records:
    name = "kind" if record is treedef else "aval" if not isinstance(record, Program) else "eqns"
    with pytest.raises(AttributeError, match="frozen"):
      setattr(record, name, None)
    with pytest.raises(AttributeError):
      delattr(record, name)


def test_literals_compare_by_value_vars_by_identity():
  assert Lit.of(np.float32(2)) == Lit.of(np.float32(2))
  assert Lit.of(np.float32(2)) != Lit.of(np.float64(2))
  assert len({Lit.of(np.ones(3)), Lit.of(np.ones(3))}) == 1
  aval = ShapedArray((2,), "float32")
  assert Var(aval) != Var(aval)


def test_pytree_inputs_and_outputs():
  def f(params, x):
    return {"y": params["w"] * x, "both": (x, params["b"])}

  program = primc.make_program(f)({"w": F22, "b": np.zeros(2, np.float32)}, F22)
  assert len(program.inputs) == 3 and len(program.outputs) == 3
  outs = primc.interpret(
    program, np.zeros(2, np.float32), np.full((2, 2), 3, np.float32), np.full((2, 2), 2, np.float32)
  )
  np.testing.assert_array_equal(outs[2], np.full((2, 2), 6, np.float32))


# --- a program evaluated into a trace ---------------------------------------------------
# (`trace.eval_program`: a transform's program evaluated into its caller's trace is staged
# as copies of its equations when the arguments have its input types; anything else binds
# each equation again, running its shape rule)


def _nested_programs():
  """Programs with what staging meets: literals (sized ones too), several outputs, an
  input given back, a closed-over array, derivatives."""
  w = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
  yield (
    lambda x, y: (pnp.tanh(x @ w) * 2.0 + y.sum(), x, pnp.mean(x, axis=0)),
    (np.ones((4, 3)), np.float64(0.5)),
  )
  yield primc.grad(lambda x: pnp.sum(pnp.sin(x) * pnp.exp(-x * x))), (np.linspace(0, 1, 5),)
  yield primc.hessian(lambda x: pnp.sum(pnp.tanh(x) ** 3)), (np.linspace(-1, 1, 3),)
  yield (
    lambda x: primc.jvp(lambda z: pnp.cumsum(z * z), (x,), (pnp.ones_like(x),))[1],
    (np.arange(4.0),),
  )


@pytest.mark.parametrize("k", range(4))
def test_a_program_staged_into_a_trace_equals_it_bound_again(k, monkeypatch):
  from primc import trace

  fn, args = list(_nested_programs())[k]
  inner = primc.make_program(fn)(*args)
  outer = lambda *xs: trace.eval_program(inner, *xs)
  staged = primc.make_program(outer)(*args)
  monkeypatch.setattr(trace, "_stageable", lambda program, args: False)
  bound = primc.make_program(outer)(*args)
  assert primc.core.alpha_equal(staged, bound), (staged, bound)
  primc.typecheck(staged)
  for got, want in zip(primc.interpret(staged, *args), primc.interpret(inner, *args)):
    np.testing.assert_array_equal(got, want)


def test_staging_keeps_each_equation_s_source_and_gives_inputs_back_as_they_came():
  from primc import trace

  inner = primc.make_program(lambda x, y: (pnp.sin(x) + y, y))(np.ones(3), np.ones(3))
  seen = {}

  def outer(x, y):
    out, back = trace.eval_program(inner, x, y)
    seen["back_is_y"] = back is y
    return out

  staged = primc.make_program(outer)(np.ones(3), np.ones(3))
  assert seen["back_is_y"]
  assert [e.source for e in staged.eqns] == [e.source for e in inner.eqns]
  assert all(e.source and "test_ir.py" in e.source for e in staged.eqns)


def test_arguments_of_other_types_bind_each_equation_again():
  # a float32 tracer given to a float64 program: not staged; the shape rules run and
  # name the mismatch as any op would
  from primc import trace

  inner = primc.make_program(lambda x, y: x + y)(np.ones(3), np.ones(3))
  with pytest.raises(primc.PrimcError, match="add"):
    primc.make_program(lambda x, y: trace.eval_program(inner, x, y))(
      np.ones(3, np.float32), np.ones(3)
    )
  with pytest.raises(primc.PrimcError, match="shape"):
    primc.make_program(lambda x, y: trace.eval_program(inner, x, y))(np.ones(3), np.ones(4))


def test_shape_free_keys_are_equal_across_batch_sizes_only():
  from primc.core import shape_free_key

  def loss(w, x):
    return pnp.mean(pnp.tanh(x @ w) ** 2)

  key = lambda f, *args: shape_free_key(primc.make_program(primc.grad(f))(*args))
  w = np.ones((3, 20))
  assert key(loss, w, np.ones((100, 3))) == key(loss, w, np.ones((37, 3)))
  # a different structure, an axis, a literal value, a dtype: other keys
  assert key(loss, w, np.ones((100, 3))) != key(
    lambda w, x: pnp.mean(pnp.sin(x @ w) ** 2), w, np.ones((100, 3))
  )
  assert key(lambda w, x: pnp.sum(x @ w, axis=0).sum(), w, np.ones((100, 3))) != key(
    lambda w, x: pnp.sum(x @ w, axis=1).sum(), w, np.ones((100, 3))
  )
  assert key(lambda w, x: (x @ w * 2.0).sum(), w, np.ones((100, 3))) != key(
    lambda w, x: (x @ w * 3.0).sum(), w, np.ones((100, 3))
  )
  assert key(loss, w, np.ones((100, 3))) != key(
    loss, w.astype(np.float32), np.ones((100, 3), np.float32)
  )
  # sizes that are equal in one program and not in the other: other keys
  assert key(lambda w, x: (x @ w).sum(), np.ones((3, 40)), np.ones((40, 3))) != key(
    lambda w, x: (x @ w).sum(), np.ones((3, 40)), np.ones((41, 3))
  )


def test_a_reshape_back_to_a_reshaped_operand_is_the_operand():
  """`a[:, None] + m` squeezes the new axis again to broadcast: no reshape back is staged
  (the operand itself is used), and values, views and derivatives are unchanged."""

  def f(a, m):
    return pnp.sum(pnp.exp(a[:, None] + m) * a[:, None].reshape(3)[:, None])

  a, m = np.array([0.1, 0.2, 0.3]), np.arange(12.0).reshape(3, 4) * 0.1
  program = primc.make_program(f)(a, m)
  broadcasts = [e for e in program.eqns if e.prim is P.broadcast_in_dim_p]
  assert broadcasts and all(e.inputs[0] in program.inputs for e in broadcasts[:1])
  back = [e for e in program.eqns if e.prim is P.reshape_p and e.params == (("new_sizes", (3,)),)]
  assert not back
  want = np.sum(np.exp(a[:, None] + m) * a[:, None])
  np.testing.assert_allclose(f(a, m), want, rtol=1e-14)
  np.testing.assert_allclose(primc.jit(f)(a, m), want, rtol=1e-14)
  g = primc.grad(f)(a, m)
  np.testing.assert_allclose(
    g, [np.sum(np.exp(a[i] + m[i]) * (a[i] + 1)) for i in range(3)], rtol=1e-12
  )


def test_a_program_assigning_twice_is_refused_when_staged_again():
  """`eval_program` into a trace copies a program's equations without their shape rules
  (`trace._stage`): it still refuses a variable assigned twice."""
  a = Var(ShapedArray((2,), "float32"))
  b = Var(ShapedArray((2,), "float32"))
  bad = _prog([Eqn(P.neg_p, (a,), (), (b,)), Eqn(P.neg_p, (b,), (), (b,))], [a], [b])
  with pytest.raises(primc.TypeCheckError, match="assigned twice"):
    trace.trace_flat(lambda x: trace.eval_program(bad, x), [ShapedArray((2,), "float32")])
