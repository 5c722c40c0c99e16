"""codegen.translate against numba: the kernels' Python subset means the same compiled
either way. numba is the reference the translator's typing follows; every function here
runs on generated values (NaN, infinities, signed zeros, zero divisors, int64 limits) in
both, and results and result types must agree exactly."""

import ctypes
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from primc.codegen import kernels, loader, mathlib, translate

CTYPES = {
  "int64": ctypes.c_int64,
  "int32": ctypes.c_int32,
  "float32": ctypes.c_float,
  "float64": ctypes.c_double,
  "bool": ctypes.c_bool,
}
_compiled = {}


def both(source: str, arg_types: tuple, globals_=None):
  """(translated, numba) versions of the function `f` in `source` for `arg_types`, or
  None when the translator refuses it (numba then compiles such a kernel)."""
  key = (source, arg_types)
  if key not in _compiled:
    names = {"np": np, "math": math, **(globals_ or {})}
    exec(source, names)
    try:
      address, ret = translate.compile_function(source, "f", arg_types, names)
    except translate.Unsupported:
      _compiled[key] = None
      return None
    fn = ctypes.CFUNCTYPE(CTYPES[ret], *(CTYPES[t] for t in arg_types))(address)
    reference = njit(**kernels.OPTIONS)(names["f"])
    _compiled[key] = (fn, ret, reference)
  return _compiled[key]


def _numpy_value(source, typed):
  with np.errstate(all="ignore"):
    return eval(source.split("return ", 1)[1], {"np": np, "math": math}, dict(zip("ab", typed)))


def _min_by_minus_one(typed) -> bool:
  """int64's MIN // -1 (narrower ints are computed in int64 by both: no overflow)."""
  return (
    len(typed) == 2
    and all(isinstance(t, np.signedinteger) for t in typed)
    and (int(typed[0]) == np.iinfo(np.int64).min and int(typed[1]) == -1)
  )


def same(source: str, arg_types: tuple, *args, globals_=None, required=True):
  """Runs both versions on `args`: the same result type and bits (NaNs alike). A case the
  translator refuses fails when `required` (the kernels' subset), else passes."""
  compiled = both(source, arg_types, globals_)
  if compiled is None:
    assert not required, f"not translated: {source!r} for {arg_types}"
    return
  fn, ret, reference = compiled
  typed = [np.dtype(t).type(a) for t, a in zip(arg_types, args)]
  got = fn(*typed)
  try:
    want = reference(*typed)
  except ZeroDivisionError:  # numba's kernel fails (0.0 ** -n): the translation gives
    want = _numpy_value(source, typed)  # numpy's value
  if "//" in source and _min_by_minus_one(typed):  # numba: 0; numpy and the translation:
    want = _numpy_value(source, typed)  # MIN (wrapped)
  assert str(reference.nopython_signatures[-1].return_type) == ret, (source, arg_types)
  with np.errstate(over="ignore"):  # numpy's value of 0.0 ** -n, float64 -> float32
    want = np.asarray(want, ret)
  got = np.asarray(got, ret)
  assert got.tobytes() == want.tobytes() or (
    np.isnan(want) and np.isnan(got) if want.dtype.kind == "f" else False
  ), (source, arg_types, args, got, want)


def floats(width=64):
  return st.floats(width=width, allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5, 3.0, math.inf, -math.inf, math.nan]
  )


INT64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1, 2, -2, 3, -7, 7])
INT32 = st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 1, -1, 3, -7])
VALUES = {
  "int64": INT64,
  "int32": INT32,
  "float64": floats(),
  "float32": floats(32),
  "bool": st.booleans(),
}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BINARY = [
  "a + b",
  "a - b",
  "a * b",
  "a / b",
  "min(a, b)",
  "max(a, b)",
  "a < b",
  "a <= b",
  "a == b",
  "a != b",
  "a > b",
  "a >= b",
  "a if a > b else b",
  "(a > 0) and (b > 0)",
  "(a > 0) or (b < 1)",
  "abs(a) + abs(b)",
  "-a + b",
]
INTEGER = ["a // b", "a % b", "a & b", "a | b", "a ^ b", "a >> (b & 31)", "a << (b & 31)", "~a"]
FLOAT = [
  "np.fmod(a, b)",
  "math.copysign(a, b)",
  "math.atan2(a, b)",
  "math.hypot(a, b)",
  "np.nextafter(a, b)",
]
PAIRS = [
  ("int64", "int64"),
  ("float64", "float64"),
  ("float32", "float32"),
  ("int64", "float32"),
  ("int32", "float64"),
  ("bool", "int64"),
  ("float32", "bool"),
  ("int32", "int32"),
]


def _defined(expr: str, types) -> bool:
  """Whether numba types `expr` for these operand types (the cases both must agree on)."""
  ints = all(t in ("int64", "int32", "bool") for t in types)
  if expr in INTEGER:
    return all(t in ("int64", "int32") for t in types)
  if expr in FLOAT:
    return not ints
  return True


@pytest.mark.parametrize(
  "expr,types",
  [(e, t) for e in BINARY + INTEGER + FLOAT for t in PAIRS if _defined(e, t)],
  ids=lambda v: v if isinstance(v, str) else "-".join(v),
)
def test_operators_type_and_value_as_numba(expr, types):
  source = f"def f(a, b):\n  return {expr}\n"

  # operands of one type are what kernels write; numba's rules for odd mixes (a bool and
  # a float32 in math.atan2, a power of an integer, numpy's loop choice for np.fmod of
  # an int and a float32) may be refused, never answered differently
  required = types[0] == types[1] != "bool" or expr in BINARY[:4]

  @SETTINGS
  @given(VALUES[types[0]], VALUES[types[1]])
  def check(a, b):
    same(source, types, a, b, required=required and (types[0] != "int32" or expr not in FLOAT))

  check()


POWERS = {  # base type -> (bases, exponents) for `a ** b` with an integer exponent
  "float32": (floats(32), st.integers(-70_000, 70_000) | st.integers(-40, 40)),
  "float64": (floats(), st.integers(-70_000, 70_000) | st.integers(-40, 40)),
  "int64": (st.integers(-50, 50), st.integers(-3, 40)),  # beyond: numba's int overflow
  "int32": (st.integers(-50, 50), st.integers(-3, 40)),
}


@pytest.mark.parametrize("base", list(POWERS))
@pytest.mark.parametrize(
  "expr", ["a ** b", "a ** 3", "a ** -2", "a ** 0", "a ** 17", "a ** 2.5", "a ** -b"]
)
def test_powers_as_numba(expr, base):
  """Powers: numba's loop for an integer exponent, unrolled for a constant one, `pow`
  for a float one; the result's type numba's (a float32 stays float32)."""
  source = f"def f(a, b):\n  return {expr}\n"
  bases, exponents = POWERS[base]

  @SETTINGS
  @given(bases, exponents)
  def check(a, b):
    same(source, (base, "int64"), a, b)

  check()


UNARY = [
  "math.tanh(a)",
  "math.erf(a)",
  "math.log1p(a)",
  "math.expm1(a)",
  "math.sin(a)",
  "math.exp(a)",
  "math.log(abs(a) + 1)",
  "np.sqrt(abs(a))",
  "np.floor(a)",
  "np.rint(a)",
  "np.trunc(a)",
  "np.float32(a)",
  "np.float64(a)",
  "float(a)",
  "not a",
  "-a",
  "a > 0.5 > -a",
  "np.int64(a) if abs(a) < 1e18 else 0",
  "np.int32(a) if abs(a) < 1e9 else 0",
]


@pytest.mark.parametrize("ty", ["float32", "float64", "int64"])
@pytest.mark.parametrize("expr", UNARY)
def test_functions_and_casts_as_numba(expr, ty):
  source = f"def f(a):\n  return {expr}\n"

  @SETTINGS
  @given(VALUES[ty])
  def check(a):  # numpy functions of integers keep odd types in numba: may be refused
    same(source, (ty,), a, required=ty != "int64" or not expr.startswith("np.") or "np.int" in expr)

  check()


LOOPS = {
  # a variable that takes an int, then floats: numba unifies it to float64
  "unified": "def f(n, x):\n  s = 0\n  for i in range(n % 50):\n    s += x * i\n  return s\n",
  "reverse": "def f(n, x):\n  s = x\n  for i in range(n % 40, -3, -2):\n    s = s * 0.5 + i\n"
  "  return s\n",
  "while": "def f(n, x):\n  k = 0\n  s = 0.0\n  while True:\n    k += 1\n"
  "    if k % 3 == 0:\n      continue\n    if k > n % 30:\n      break\n"
  "    s += x / k\n  return s\n",
  "early": "def f(n, x):\n  for i in range(100):\n    if i * x > n:\n      return i\n  return -1\n",
  "arrays": "def f(n, x):\n  m = n % 7 + 1\n  a = np.full((m, 3), x, np.float64)\n"
  "  a[m - 1] = 2.0\n  a[0, 1] += 1.0\n  s = a.reshape(-1)\n  t = 0.0\n"
  "  for j in range(s.size):\n    t += s[j] * (j + 1)\n  return t + a.shape[0]\n",
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_control_flow_and_arrays_as_numba(name):
  @SETTINGS
  @given(st.integers(0, 10**6), floats())
  def check(n, x):
    same(LOOPS[name], ("int64", "float64"), n, x)

  check()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sin", "cos"])
def test_math_library_translated_as_numba(name, dtype):
  """The math library's functions (tuple returns, bit casts, their helpers) translated
  give numba's results bit for bit."""
  fn = getattr(mathlib, mathlib.FUNCTIONS[(name, dtype)])
  source = "def f(a):\n  return fn(a)\n"

  @SETTINGS
  @given(VALUES[dtype])
  def check(a):
    same(source, (dtype,), a, globals_={"fn": fn})

  check()


@njit(error_model="numpy")
def _keeps_an_array(n):
  a = np.full((n,), 1.0, np.float64)
  return a[0]


def test_outside_the_subset_is_unsupported():
  """What the translator does not know raises Unsupported (numba compiles such kernels),
  never a guess."""
  names = {"np": np, "math": math}
  for source in [
    "def f(a):\n  return len(a)\n",
    "def f(a):\n  try:\n    return a\n  except Exception:\n    return 0\n",
    "def f(a):\n  return math.nextafter(a, 0.0)\n",
    "def f(a):\n  return a.real\n",
    "def f(a):\n  x = (a, a)\n  return a\n",
  ]:
    with pytest.raises(translate.Unsupported):
      translate.compile_function(source, "f", ("float64",), names)
  with pytest.raises(translate.Unsupported):  # heap arrays: in kernels only (their lifetime)
    translate.compile_function(
      "def f(n):\n  return g(n)\n", "f", ("int64",), {**names, "g": _keeps_an_array}
    )


def test_generated_kernels_translate():
  """Every loop, dot, reduction, gather, scatter and sort kernel the emitters write for a
  small program set is in the subset (a kernel outside it would silently fall back to
  numba's slow compile), and translates to the same IR whether its module (and the
  library's C entries) ran with numba or with the translator's stand-ins for it."""
  import primc
  import primc.numpy as pnp

  def loss(w, x):
    h = pnp.tanh(x @ w)
    return pnp.mean(h**2) + pnp.sum(pnp.sin(h), axis=0).max()

  x = np.random.default_rng(0).standard_normal((33, 5)).astype(np.float32)
  w = np.ones((5, 4), np.float32)

  def indexed(w, x, idx):  # a gather, its scatter_add gradient, and sorts
    rows = pnp.tanh(x[idx] @ w)
    return pnp.sum(pnp.sort(rows, axis=0) * pnp.argsort(rows, axis=1))

  idx = np.array([3, 0, 3, 32, 7])
  for fn, args in ((loss, (w, x)), (indexed, (w, x, idx))):
    jitted = primc.jit(primc.grad(fn))
    np.testing.assert_allclose(jitted(*args), primc.grad(fn)(*args), rtol=1e-5, atol=1e-6)
    ((executable, _),) = jitted._compiled.values()
    assert len(executable.modules) >= 3, "the program compiled into several kernels"
    for m in executable.modules:  # or Unsupported; and read against numba's stand-ins,
      real = translate.kernel_ir(m.SOURCE, vars(loader.executed(m)), "probe")
      assert translate.kernel_ir(m.SOURCE, loader.translation_names(m), "probe") == real
  for symbol, file, function in kernels.EXTERNALS.values():  # the library's C entries
    lib = loader.library(in_memory=True)[loader.LIBRARY.index(file)]
    run, names = loader.executed(lib), loader.translation_names(lib)
    args = tuple(re.findall(r"\w+", run.EXTERNAL_SIGNATURE.split("(", 1)[1]))
    assert (
      translate.function_ir(lib.SOURCE, function, args, names, symbol)[0]
      == translate.function_ir(lib.SOURCE, function, args, vars(run), symbol)[0]
    ), symbol


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_library_products_translated(dtype):
  """The products kernels call by symbol (codegen.blas's gemm entries: loops for small
  products, BLAS above), translated, against numpy: both layouts of A, accumulating or
  not, B and c the first columns of wider matrices, empty and one-column shapes."""
  blas = loader.library_module("blas.py", in_memory=True)
  name = "gemm_f32" if dtype == "float32" else "gemm_f64"
  symbol = f"primc_test_{name}"
  text, ret = translate.function_ir(
    blas.SOURCE, name, ("int64",) * 9, vars(blas), symbol, fastmath=()
  )
  assert ret is None
  fn = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 9)(
    translate.load(translate.object_code(text), symbol)
  )
  r = np.random.default_rng(0)
  tol = 1e-4 if dtype == "float32" else 1e-12
  for m, n, k in [
    (3, 4, 5),
    (64, 64, 64),
    (10, 1, 7),
    (1, 9, 300),
    (1, 600, 64),  # one row: loops, at any size
    (300, 1, 50),  # one column: rows summed in lanes
    (0, 3, 3),
    (33, 17, 129),
    (5, 8, 0),
  ]:
    for ta, wider in ((0, 0), (1, 0), (0, 5), (1, 5)):  # B, c: the first n of n + wider
      a = r.standard_normal((k, m) if ta else (m, k)).astype(dtype)
      b = r.standard_normal((k, n + wider)).astype(dtype)
      c0 = r.standard_normal((m, n + wider)).astype(dtype)
      for acc in (0, 1):
        c = c0.copy()
        fn(ta, m, n, k, a.ctypes.data, b.ctypes.data, c.ctypes.data, acc, n + wider)
        want = (a.T if ta else a).astype(np.float64) @ b[:, :n] + (c0[:, :n] if acc else 0)
        np.testing.assert_allclose(
          c[:, :n], want, rtol=tol, atol=tol * max(1, k), err_msg=f"{m}x{n}x{k} ta={ta} acc={acc}"
        )
        np.testing.assert_array_equal(c[:, n:], c0[:, n:])


def test_a_translator_crash_fails_in_strict_mode_and_is_counted_otherwise(monkeypatch, caplog):
  """The suite runs with PRIMC_STRICT_KERNELS=1 (tests/conftest.py): a renderer bug raises,
  so it fails a test instead of hiding behind numba's compile. Users get numba's compile,
  one warning and the `translate_failures` counter."""
  import primc
  import primc.numpy as pnp
  from primc.codegen import cache
  from primc.settings import config

  def crash(*args, **kwargs):
    raise RuntimeError("a renderer bug")

  jitted = primc.jit(lambda x: pnp.tanh(x) * 2.0)
  jitted(np.ones(3))
  ((executable, _),) = jitted._compiled.values()
  source = executable.modules[0].SOURCE  # a kernel's module
  assert loader.kernel_ir(source) is not None  # translated, before the bug is planted
  monkeypatch.setattr(translate, "render_kernel", crash)
  assert config.strict_kernels
  with pytest.raises(RuntimeError, match="a renderer bug"):
    loader.kernel_ir(source)
  monkeypatch.setattr(config, "strict_kernels", False)
  before = cache.stats().get("translate_failures", 0)
  with caplog.at_level("WARNING"):
    assert loader.kernel_ir(source) is None
  assert cache.stats().get("translate_failures", 0) == before + 1
  assert "numba compiles it" in caplog.text


def test_perf_map_names_each_kernel_loaded(monkeypatch):
  """PRIMC_PERF_MAP=1 (`config.perf_map`): each kernel LLVM compiles is named in
  `/tmp/perf-<pid>.map` (start, size, name), so `perf report` shows kernels by name."""
  monkeypatch.setenv("PRIMC_KERNEL_COMPILER", "llvm")  # (whatever the suite's default)
  import os

  import primc
  import primc.numpy as pnp
  from primc.settings import config

  monkeypatch.setattr(config, "perf_map", True)
  path = f"/tmp/perf-{os.getpid()}.map"
  before = open(path).read() if os.path.exists(path) else ""
  jitted = primc.jit(lambda x: pnp.cosh(x) * 3.25 - pnp.arctan(x), tiered=False)  # (a
  # program of this test alone: its kernels are loaded in this process, from the cache or not)
  np.testing.assert_allclose(jitted(np.ones(5)), np.cosh(1.0) * 3.25 - np.arctan(1.0))
  lines = open(path).read()[len(before) :].splitlines()
  assert lines
  for line in lines:
    start, size, name = line.split()
    assert int(start, 16) > 0 and int(size, 16) > 0 and re.fullmatch(r"\w+_[0-9a-f]{8}", name)
  assert any("cosh" in line for line in lines)
