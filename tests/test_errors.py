"""Bad input raises an error naming the op, the shapes/dtypes and the user's file:line."""

import inspect

import numpy as np
import pytest

import primc
import primc.numpy as pnp

F = lambda *s: np.zeros(s, np.float32)


def _line():
  """The caller's line number."""
  return inspect.currentframe().f_back.f_lineno


def test_matmul_shape_mismatch_names_op_shapes_and_line():
  line = _line() + 1  # the next line's
  fn = lambda a, b: pnp.matmul(a, b)
  with pytest.raises(primc.ShapeError) as e:
    primc.make_program(fn)(F(2, 3), F(2, 3))
  msg = str(e.value)
  assert "matmul" in msg and "f32[2,3], f32[2,3]" in msg and f"test_errors.py:{line}" in msg


def test_add_shape_mismatch_reports_user_line():
  line = _line() + 1  # the next line's
  fn = lambda a, b: a + b
  with pytest.raises(primc.ShapeError) as e:
    primc.make_program(fn)(F(3), F(4))
  msg = str(e.value)
  assert "add" in msg and "f32[3], f32[4]" in msg and f"test_errors.py:{line}" in msg


def test_bad_reshape():
  line = _line() + 1  # the next line's
  fn = lambda a: a.reshape(4, 2)
  with pytest.raises(primc.ShapeError) as e:
    primc.make_program(fn)(F(3, 3))
  msg = str(e.value)
  assert "reshape" in msg and "f32[3,3]" in msg and f"test_errors.py:{line}" in msg


@pytest.mark.parametrize(
  "bad", [np.zeros(3, np.complex64), np.array([object()] * 3), np.zeros(3, "datetime64[s]")]
)
def test_unsupported_dtype(bad):
  line = _line() + 1  # the next line's
  fn = lambda a: pnp.sin(a)
  with pytest.raises(primc.PrimcError) as e:
    fn(bad)
  msg = str(e.value)
  assert "unsupported dtype" in msg and bad.dtype.name in msg and "sin" in msg
  assert f"test_errors.py:{line}" in msg


@pytest.mark.parametrize("bad", ["text", object(), None])  # lists of numbers are
def test_non_array_argument(bad):  # array_like (numpy's)
  line = _line() + 1  # the next line's
  fn = lambda a: pnp.tanh(a)
  with pytest.raises(primc.PrimcError) as e:
    fn(bad)
  msg = str(e.value)
  assert "tanh" in msg and "expected an array" in msg and f"test_errors.py:{line}" in msg


def test_non_array_argument_to_make_program():
  with pytest.raises(primc.PrimcError, match="expected an array argument, got str"):
    primc.make_program(lambda a: a)("text")


def test_data_dependent_python_control_flow_is_a_clear_error():
  def f(x):
    if x.sum() > 0:
      return x
    return -x

  with pytest.raises(primc.PrimcError, match="truth value of a traced array"):
    primc.make_program(f)(F(3))


@pytest.mark.parametrize("convert,kind", [(float, "float"), (lambda t: [1, 2][t], "index")])
def test_python_numbers_of_traced_values_are_clear_errors(convert, kind):
  # a float's float would lose its derivative, a float is no index: errors, in every trace
  for transform in (primc.grad, primc.jit):
    with pytest.raises(primc.PrimcError, match=rf"{kind}.* of a traced array .*test_errors.py"):
      transform(lambda x: convert(x[0]) * x[1])(np.ones(2))


def test_int_of_a_traced_value_is_a_step_with_derivative_zero():
  f = lambda x: int(x[0]) * x[1]  # (a graph break under jit: primc.breaks)
  for transform in (primc.grad, lambda f: primc.jit(primc.grad(f))):
    np.testing.assert_array_equal(transform(f)(np.array([2.7, 1.0])), [0.0, 2.0])
    np.testing.assert_array_equal(transform(f)(np.array([-1.5, 1.0])), [0.0, -1.0])


def test_escaped_tracer_is_a_clear_error():
  leaked = []
  primc.make_program(lambda x: leaked.append(x) or x)(F(2))
  with pytest.raises(primc.PrimcError, match="escaped"):
    primc.make_program(lambda y: y + leaked[0])(F(2))


def test_an_unknown_setting_is_refused_with_the_closest_name():
  with pytest.raises(AttributeError, match="did you mean 'interpret'"):
    primc.config.interpet = True
  assert not hasattr(primc.config, "interpet")


@pytest.mark.parametrize("loop", ["scan", "fori_loop", "while_loop"])
def test_a_loop_carry_of_another_dtype_names_the_loop_the_line_and_the_fix(loop):
  from primc import lax

  x = np.linspace(0.0, 1.0, 4)  # float64 data, a float32 start
  zero = lambda: pnp.zeros((), "float32")
  run = {
    "scan": lambda: lax.scan(lambda c, xi: (c + xi, c), zero(), x),
    "fori_loop": lambda: lax.fori_loop(0, 4, lambda i, c: c + pnp.take(x, i, axis=0), zero()),
    "while_loop": lambda: lax.while_loop(lambda c: c < 3.0, lambda c: c + x[0] + 1.0, zero()),
  }[loop]
  with pytest.raises(
    primc.PrimcError,
    match=rf"{loop} body: carry leaf 0 comes out as "
    r"f64\[\] but goes in as f32\[\].*pnp.zeros\(shape, 'float64'\).*test_errors.py",
  ):
    run()


# Python's own errors raised inside an op (a float where a sequence is read, a keyword the
# op lacks): the same type, saying the op, its operands and the user's line
_INSIDE = {
  "squeeze": (lambda p, x, m: p.squeeze(m, axis=1.5), TypeError),
  "expand_dims": (lambda p, x, m: p.expand_dims(x, 1.5), TypeError),
  "sin": (lambda p, x, m: p.sin(x, foo=1), TypeError),
  "moveaxis": (lambda p, x, m: p.moveaxis(m, 0.5, 1), TypeError),
  "tensordot": (lambda p, x, m: p.tensordot(m, m, axes=1.5), TypeError),
}


@pytest.mark.parametrize("name", sorted(_INSIDE))
@pytest.mark.parametrize("path", ["values", "traced"])
def test_a_python_error_inside_an_op_names_it_and_the_line(name, path):
  call, kind = _INSIDE[name]
  x, m = np.arange(6.0), np.ones((2, 3))
  with pytest.raises(kind) as info:
    if path == "values":
      call(pnp, x, m)
    else:
      primc.make_program(lambda x, m: call(pnp, x, m))(x, m)
  assert type(info.value) is kind
  assert str(info.value).startswith(f"{name} on (") and "test_errors.py" in str(info.value)
