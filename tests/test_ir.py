"""The IR: printer golden text, typecheck rejections, frozen values."""
import dataclasses

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc import prims as P
from primc.core import Eqn, Lit, Primitive, Program, ShapedArray, Var, make_params, typecheck

F22 = np.zeros((2, 2), np.float32)


def test_printer_mynet_forward_golden():
  program = primc.make_program(lambda x, w, b: pnp.tanh(x @ w + b))(F22, F22, np.zeros(2, np.float32))
  assert str(program) == """\
{ lambda a:f32[2,2] b:f32[2,2] c:f32[2] .
  let d:f32[2,2] = dot_general[dimension_numbers=(((1,), (0,)), ((), ()))] a b
      e:f32[2,2] = broadcast_in_dim[broadcast_dimensions=(1,), shape=(2, 2)] c
      f:f32[2,2] = add d e
      g:f32[2,2] = tanh f
  in ( g ) }"""


def test_printer_literals_and_multiple_outputs_golden():
  program = primc.make_program(lambda x: (x * 2.0, -x, x))(np.zeros(3, np.float64))
  assert str(program) == """\
{ lambda a:f64[3] .
  let b:f64[3] = broadcast_in_dim[broadcast_dimensions=(), shape=(3,)] 2.0
      c:f64[3] = mul a b
      d:f64[3] = neg a
  in ( c d a ) }"""


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
  a, b, c = Var(ShapedArray((2,), "float32")), Var(ShapedArray((2,), "float32")), Var(ShapedArray((2,), "float32"))
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
  with pytest.raises(dataclasses.FrozenInstanceError):
    program.eqns = ()
  with pytest.raises(dataclasses.FrozenInstanceError):
    program.eqns[0].params = ()
  assert hash(program.eqns[0].params) == hash((("axes", (0,)),))
  with pytest.raises(TypeError):
    make_params({"axes": [0]})


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
  outs = primc.interpret(program, np.zeros(2, np.float32), np.full((2, 2), 3, np.float32),
                         np.full((2, 2), 2, np.float32))
  np.testing.assert_array_equal(outs[2], np.full((2, 2), 6, np.float32))
