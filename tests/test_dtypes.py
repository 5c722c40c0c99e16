"""Float dtypes besides float32 and float64: float16 and long double (numpy's longdouble
where it is wider than float64) are values of every transform, run by the interpreter in
numpy's own loops, under `jit` too; LAPACK (and scipy.special for long double) refuse them
when traced. numpy's integer types convert traced arrays when called (`pnp.int64(x)`).

Oracles: numpy's float64 results at the same (rounded) arguments, within the dtype's
precision; numpy itself for dtypes and conversions."""

import logging

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc import prims as P
from primc.core import PrimcError

from prim_cases import CASES, case_id

LONG = np.dtype(np.longdouble).name
DTYPES = ["float16"] + ([LONG] if LONG != "float64" else [])
RTOL = {"float16": 2e-2, LONG: 1e-12}
LAPACK = P.with_trait("linalg")
SPECIAL = {
  P.erf_p,
  P.erfc_p,
  P.erfinv_p,
  P.erfcinv_p,
  P.gammaln_p,
  P.gamma_p,
  P.polygamma_p,
  P.special_p,
}


def _refused(prim, dtype) -> bool:
  return prim in LAPACK or (prim in SPECIAL and dtype != "float16")


def _cast(args, dtype):
  return tuple(np.asarray(a, dtype) if np.asarray(a).dtype.kind == "f" else a for a in args)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_primitive_in_the_dtype(case, dtype, rng):
  """Each primitive on arguments of the dtype: eager and traced-then-interpreted give the
  dtype back and numpy's float64 values at the same arguments; or, for LAPACK and
  scipy.special, a clear error when traced."""
  xs = _cast(case.make(rng), dtype)
  if _refused(case.prim, dtype):
    with pytest.raises(PrimcError, match=f"only .*got {dtype}"):
      primc.make_program(case.fn)(*xs)
    return
  with np.errstate(all="ignore"):
    want = np.asarray(case.oracle(*(np.asarray(x, np.float64) for x in xs)), np.float64)
    program = primc.make_program(case.fn)(*xs)
    got = [np.asarray(case.fn(*xs)), primc.interpret(program, *xs)[0]]
  for out in got:
    assert out.shape == want.shape
    if out.dtype.kind == "f" and case.prim not in (P.convert_p, P.full_p):
      assert out.dtype == np.dtype(dtype)
    finite = np.abs(want) < np.finfo(dtype).max  # float16 overflows where float64 does not
    np.testing.assert_allclose(
      np.asarray(out, np.float64)[finite], want[finite], rtol=RTOL[dtype], atol=RTOL[dtype]
    )


FUNCTIONS = {  # (function of a vector, arguments' range)
  "tanh": (lambda x: pnp.sum(pnp.tanh(x) * x), (-2, 2)),
  "exp_log": (lambda x: pnp.sum(pnp.exp(0.5 * x) + pnp.log(x)), (0.5, 2)),
  "sin_sqrt": (lambda x: pnp.sum(pnp.sin(x) * pnp.sqrt(x)), (0.5, 2)),
  "softmax": (lambda x: pnp.sum(pnp.softmax(x) * x), (-1, 1)),
  "matmul": (lambda x: pnp.sum(pnp.tanh(pnp.outer(x, x) @ x)), (-0.5, 0.5)),
  "power_mean": (lambda x: pnp.mean(x**3) / (1 + pnp.max(x)), (0.5, 1.5)),
}
PATHS = {  # each path's gradient of f
  "grad": lambda f: primc.grad(f),
  "jit": lambda f: primc.jit(primc.grad(f)),
  "vmap": lambda f: lambda x: primc.vmap(primc.grad(f))(x[None])[0],
  "hessian_row": lambda f: lambda x: primc.jit(primc.hessian(f))(x)[0],
  "eager": lambda f: _eager_grad(f),
}


def _eager_grad(f):
  def g(x):
    t = primc.eager.to_tensor(x, stop_gradient=False)
    f(t).backward()
    return t.grad.numpy()

  return g


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_derivatives_in_the_dtype(name, path, dtype, rng):
  """Gradients (and a Hessian row) in every path: of the dtype, and equal to the same
  derivative taken in float64 at the rounded arguments within the dtype's precision."""
  f, (lo, hi) = FUNCTIONS[name]
  x = rng.uniform(lo, hi, 5).astype(dtype)
  got = PATHS[path](f)(x)
  want = PATHS["grad" if path != "hessian_row" else path](f)(x.astype(np.float64))
  assert got.dtype == np.dtype(dtype)
  np.testing.assert_allclose(
    got.astype(np.float64), want, rtol=RTOL[dtype] * 3, atol=RTOL[dtype] * 3
  )


def test_jit_says_once_that_the_interpreter_runs(caplog):
  f = primc.jit(lambda x: pnp.tanh(x) * 2)
  with caplog.at_level(logging.WARNING, logger="primc"):
    for shape in ((3,), (4,), (3,)):
      f(np.ones(shape, np.float16))
  assert sum("float16 run on the interpreter" in r.message for r in caplog.records) <= 1
  out = f(np.full(3, 0.5, np.float16))
  assert out.dtype == np.float16
  np.testing.assert_array_equal(out, np.tanh(np.float16(0.5)) * np.float16(2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_promotion_of_the_dtype_follows_numpy(dtype):
  """Mixed with Python scalars, numpy scalars and arrays of the other dtypes: numpy's
  result dtype (NEP 50), traced and eager."""
  x = np.linspace(0.5, 1.5, 3).astype(dtype)
  others = [
    2.0,
    3,
    True,
    np.float32(1.5),
    np.float64(2.5),
    np.ones(3, np.float32),
    np.ones(3, np.float64),
    np.arange(3, dtype=np.int32),
    np.arange(3),
    np.array([True, False, True]),
  ]
  for y in others:
    for fn in (lambda a, b: a * b, lambda a, b: b - a, lambda a, b: a / (b + 1)):
      want = np.asarray(fn(x, y)).dtype
      traced = primc.make_program(lambda a: fn(a, y))(x).outputs[0].aval.dtype
      eager = np.asarray(fn(primc.eager.to_tensor(x).numpy(), y)).dtype
      assert traced == want.name and eager == want, (dtype, y, traced, want)


@pytest.mark.parametrize("int_type", [pnp.int32, pnp.int64])
def test_integer_types_convert_traced_arrays(int_type, rng):
  """`pnp.int64(x)` truncates as numpy does, in every path; indices made this way select
  rows, and the gradient flows through the rows selected, not through the indices."""
  base = np.dtype(int_type)
  assert base in (np.int32, np.int64) and issubclass(int_type, np.integer)
  assert pnp.int64(2.7) == 2 and type(pnp.int64(2.7)) is np.int64
  w = rng.standard_normal((6, 4))
  w[:, -1] = rng.uniform(-5.9, 5.9, 6)

  def f(w):
    idx = int_type(w[:, -1])
    assert idx.dtype == base
    return pnp.sum(w[:, :-1][idx] ** 2)

  idx = w[:, -1].astype(base)
  want = np.zeros_like(w)
  for i in idx:
    want[i, :-1] += 2 * w[i, :-1]
  for g in (
    primc.grad(f),
    primc.jit(primc.grad(f)),
    lambda w: primc.vmap(primc.grad(f))(w[None])[0],
  ):
    np.testing.assert_allclose(g(w), want, rtol=1e-12)
  conv = primc.jit(lambda v: int_type(v * 3))
  v = rng.uniform(-3, 3, 7)
  np.testing.assert_array_equal(conv(v), (v * 3).astype(base))
  assert conv(v).dtype == base


FILLS = [3, -2, True, False, 1.5, np.float64(2.5), np.int32(7), np.float32(0.5), np.bool_(True)]
# every creation function without a dtype, as (name, the call on a numpy-like module)
CREATIONS = [
  *((f"full({v!r})", lambda m, v=v: m.full((2, 3), v)) for v in FILLS),
  ("zeros", lambda m: m.zeros((2, 3))),
  ("ones", lambda m: m.ones(4)),
  ("empty", lambda m: m.empty((2, 3)) * 0),  # (numpy's values are undefined)
  ("eye", lambda m: m.eye(3, 4, k=1)),
  ("identity", lambda m: m.identity(3)),
  ("zeros_like", lambda m: m.zeros_like(np.arange(3))),
  ("full_like", lambda m: m.full_like(np.ones(2, np.float32), 7)),
  ("arange", lambda m: m.arange(0.5, 3)),
  ("linspace", lambda m: m.linspace(0, 1, 5)),
  ("array", lambda m: m.array([[1.0, 2.0], [3.0, 4.0]])),
]


@pytest.mark.parametrize("case", CREATIONS, ids=[name for name, _ in CREATIONS])
@pytest.mark.parametrize("path", ["values", "jit", "traced"])
def test_creation_functions_make_numpys_dtype(case, path):
  """A creation function without a dtype makes what numpy's makes (float64; `full` its fill
  value's kind: a Python int int64, a bool bool, a numpy scalar its own dtype), so a
  program written for numpy or autograd computes in the precision it did there; the same
  on plain values, under `jit` and traced. numpy is the oracle of dtype and values."""
  _, call = case
  want = call(np)
  if path == "values":
    got = call(pnp)
  elif path == "jit":
    got = primc.jit(lambda x: call(pnp))(np.ones(1))
  else:  # (traced: the program's output type, and its value by the interpreter)
    program = primc.make_program(lambda x: call(pnp))(np.ones(1))
    assert program.outputs[0].aval.dtype == want.dtype.name
    (got,) = primc.interpret(program, np.ones(1))
  assert got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(got, want)
