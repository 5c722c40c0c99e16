"""Generated code for every elementwise primitive, through every form an operand can take.

Each unary and binary primitive (and select) runs under `jit` on operands that are
reshaped, sliced with steps, reversed, transposed, broadcast, 0-d, empty, or closed-over
constants, and is compared with the reference interpreter on the same program (NaN where
the interpreter has NaN). A kernel that fails to compile, or computes another value, for
any primitive in any form fails here."""

import inspect

import numpy as np
import pytest

import primc
from primc import prims as P
from primc.core import abstract_rules
from primc.passes.simplify import ELEMENTWISE


def _arity(prim) -> int:
  params = inspect.signature(abstract_rules[prim]).parameters.values()
  return sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)


PRIMS = sorted(
  (
    p
    for p in P.ALL_PRIMITIVES
    if p in ELEMENTWISE and p is not P.convert_p and p not in P.with_trait("integer")
  ),
  key=lambda p: p.name,
)
INTEGER = sorted(P.with_trait("integer"), key=lambda p: p.name)  # on integer operands
UNARY = [p for p in PRIMS if _arity(p) == 1]
BINARY = [p for p in PRIMS if _arity(p) == 2]
assert len(UNARY) >= 10 and len(BINARY) >= 13 and P.select_p in PRIMS

R = np.random.default_rng(11)
CONST = R.standard_normal((3, 4))

# name -> (argument shape, the operand made from the argument): each gives a (3, 4) array,
# except the 0-d and empty forms
FORMS = {
  "plain": ((3, 4), lambda a: a),
  "reshaped": ((2, 6), lambda a: P.reshape(a, (3, 4))),
  "sliced": ((7, 9), lambda a: a[1:7:2, 1:9:2]),
  "reversed": ((3, 8), lambda a: a[::-1, ::-2]),
  "transposed": ((4, 3), lambda a: P.transpose(a, (1, 0))),
  "broadcast_row": ((4,), lambda a: P.broadcast_in_dim(a, (3, 4), (1,))),
  "broadcast_unit": ((3, 1), lambda a: P.broadcast_in_dim(a, (3, 4), (0, 1))),
  "scalar": ((), lambda a: P.broadcast_in_dim(a, (3, 4), ())),
  "0-d": ((), lambda a: a),
  "empty": ((0, 4), lambda a: a),
}


PARAMS = {P.polygamma_p: dict(n=1)}  # the parameters of those that have some


def every_primitive(x, y):
  """Every elementwise primitive on operands x, y of one shape and float dtype."""
  outs = [p.bind(x, **PARAMS.get(p, {})) for p in UNARY] + [p.bind(x, y) for p in BINARY]
  outs.append(P.select(P.gt(x, y), x, y))
  outs.append(P.convert(P.convert(x, "float64" if x.dtype == np.float32 else "float32"), x.dtype))
  return outs


def _operands(form, dtype):
  shape, make = FORMS[form]
  special = np.array([0.0, -0.0, -1.5, 2.0, np.inf, -np.inf, np.nan, 1e-30], dtype)
  a = R.standard_normal(shape).astype(dtype)
  b = R.uniform(-3, 3, shape).astype(dtype)
  a.reshape(-1)[: len(special)] = special[: a.size]  # IEEE corners where there is room
  return a, b, make


# float64 code differs from float32 code in its math functions, not in how operands are
# read: a few forms suffice for it (each form costs seconds of numba inlining the math
# library into the kernel)
FORMS_F64 = ("plain", "reversed", "transposed", "0-d", "empty")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_elementwise_primitive_in_every_form_compiles_and_matches(dtype):
  forms = list(FORMS) if dtype == "float32" else list(FORMS_F64)
  args, makers = [], []
  for form in forms:
    a, b, make = _operands(form, dtype)
    args += [a, b]
    makers.append(make)
  const = CONST.astype(dtype)

  def program(*xs):
    outs = []
    for k, make in enumerate(makers):
      outs += every_primitive(make(xs[2 * k]), make(xs[2 * k + 1]))
    # closed-over constants as either operand
    outs += every_primitive(xs[0], const) + every_primitive(const, xs[1])
    return outs

  compiled = primc.jit(program)(*args)
  want = primc.interpret(primc.make_program(program)(*args), *args)
  names = [
    f"{form}:{p.name}"
    for form in forms + ["const_rhs", "const_lhs"]
    for p in UNARY + BINARY + [P.select_p, P.convert_p]
  ]
  assert len(compiled) == len(want) == len(names)
  tol = 4e-7 if dtype == "float32" else 1e-15  # a few ulp (codegen's math library)
  for name, g, w in zip(names, compiled, want):
    assert g.shape == w.shape and g.dtype == w.dtype, name
    if g.dtype.kind == "f":
      np.testing.assert_allclose(g, w, rtol=4 * tol, atol=tol, equal_nan=True, err_msg=name)
    else:
      np.testing.assert_array_equal(g, w, err_msg=name)


def test_programs_that_once_failed_to_compile():
  x = R.standard_normal((4, 4)).astype(np.float32)
  # sin/cos of a view: the libm fallback loop reads the same views as the fast loop
  big = np.full((4, 4), 3.0e5, np.float32)  # beyond the fast range: the fallback runs
  for arg in (x, big):
    got = primc.jit(lambda a: (P.sin(P.reshape(a, (16,))), P.cos(a[::2, 1:])))(arg)
    np.testing.assert_allclose(got[0], np.sin(arg.reshape(16)), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got[1], np.cos(arg[::2, 1:]), rtol=2e-6, atol=2e-6)
  # a product with a literal operand (the gradient of dot(x, x))
  v = np.arange(3, dtype=np.float32)
  np.testing.assert_allclose(primc.jit(primc.grad(lambda a: primc.numpy.dot(a, a)))(v), 2 * v)

  # jit called inside a traced function, on a closure over the tracer
  def outer(y):
    return primc.jit(lambda z: z * y)(np.ones(3, np.float32)).sum()

  np.testing.assert_allclose(primc.grad(outer)(v), np.ones(3))
  np.testing.assert_allclose(primc.jit(primc.grad(outer))(v), np.ones(3))
  # check_grads with pytree (tuple, dict) arguments of different shapes
  primc.check_grads(
    lambda t, d: primc.numpy.sum(t[0] * d["w"]) + primc.numpy.sum(t[1]),
    ((np.ones(2), np.arange(3.0)), {"w": np.array([0.5, 2.0])}),
    order=2,
  )


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_primitives_in_every_form_compile_and_match(dtype):
  """The bitwise primitives on integer operands in every form (shift counts from -3 to
  the width and past it: numpy's 0 or sign fill outside [0, bits))."""
  bits = 8 * np.dtype(dtype).itemsize
  forms = list(FORMS)
  args = []
  for form in forms:
    shape, _ = FORMS[form]
    args += [
      R.integers(-(2**20), 2**20, shape).astype(dtype),
      R.integers(-3, bits + 4, shape).astype(dtype),
    ]

  def program(*xs):
    outs = []
    for k, form in enumerate(forms):
      x, y = (FORMS[form][1](a) for a in xs[2 * k : 2 * k + 2])
      outs += [p.bind(x) if p is P.bit_not_p else p.bind(x, y) for p in INTEGER]
    return outs

  compiled = primc.jit(program)(*args)
  want = primc.interpret(primc.make_program(program)(*args), *args)
  assert len(compiled) == len(want) == len(forms) * len(INTEGER)
  for k, (g, w) in enumerate(zip(compiled, want)):
    assert g.dtype == w.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(
      g, w, err_msg=f"{forms[k // len(INTEGER)]}:{INTEGER[k % len(INTEGER)].name}"
    )
