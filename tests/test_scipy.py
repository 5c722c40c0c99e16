"""primc.scipy: scipy.special and scipy.stats functions against scipy itself (values, in
eager mode, compiled and batched), finite differences (derivatives of orders 1-2 in both
modes), and the compiled special functions (codegen/special.py) against scipy on dense
samples with their poles, tails and IEEE corners."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import scipy.linalg as SL
import scipy.special as S
import scipy.stats as ST

import primc
import primc.scipy.linalg as psl
import primc.scipy.special as ps
import primc.scipy.stats as pst
from primc import numpy as pnp
from primc import prims as P
from primc.numpy import NotSupportedError

R = np.random.default_rng(5)
UNIT = R.uniform(0.05, 0.95, 6)  # (0, 1)
POS = R.uniform(0.3, 4.0, 6)  # > 0
REAL = R.standard_normal(6)
COUNTS = np.array([-1.0, 0.0, 1.0, 2.5, 4.0, 7.0])

# name -> (function of the module (scipy.special / scipy.stats, or primc's), arguments,
# whether finite differences apply (smooth at these arguments))
CASES = {
  "erf": (lambda m, x: m.erf(x), (REAL,), True),
  "erfc": (lambda m, x: m.erfc(x), (REAL,), True),
  "erfinv": (lambda m, x: m.erfinv(x), (UNIT * 2 - 1,), True),
  "erfcinv": (lambda m, x: m.erfcinv(x), (UNIT * 2,), True),
  "gammaln": (lambda m, x: m.gammaln(x), (POS,), True),
  "gammaln_negative": (lambda m, x: m.gammaln(x), (-POS - 0.25,), False),
  "gamma": (lambda m, x: m.gamma(x), (POS,), True),
  "digamma": (lambda m, x: m.digamma(x), (POS,), True),
  "psi_negative": (lambda m, x: m.psi(x), (-POS - 0.25,), True),
  "polygamma_2": (lambda m, x: m.polygamma(2, x), (POS,), True),
  "rgamma": (lambda m, x: m.rgamma(x), (np.array([-2.0, -1.5, 0.0, 0.5, 3.0, 6.2]),), False),
  "beta": (lambda m, a, b: m.beta(a, b), (POS, POS[::-1]), True),
  "betaln": (lambda m, a, b: m.betaln(a, b), (POS, POS[::-1]), True),
  "multigammaln": (lambda m, a: m.multigammaln(a, 3), (POS + 2,), True),
  "expit": (lambda m, x: m.expit(x), (REAL * 30,), True),
  "log_expit": (lambda m, x: m.log_expit(x), (REAL * 30,), True),
  "logit": (lambda m, p: m.logit(p), (UNIT,), True),
  "xlogy": (
    lambda m, x, y: m.xlogy(x, y),
    (np.array([0.0, 1.0, 2.0, 0.0, 3.0, 0.5]), np.array([0.0, 2.0, 3.0, 1.0, 0.5, 1.5])),
    False,
  ),
  "xlogy_smooth": (lambda m, x, y: m.xlogy(x, y), (REAL, POS), True),
  "xlog1py": (lambda m, x, y: m.xlog1py(x, y), (REAL, UNIT - 0.5), True),
  "entr": (lambda m, x: m.entr(x), (np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 1e-300]),), False),
  "logsumexp": (lambda m, a: m.logsumexp(a), (REAL,), True),
  "logsumexp_b": (lambda m, a, b: m.logsumexp(a, b=b), (REAL, UNIT), True),
  "softmax": (lambda m, x: m.softmax(x), (REAL,), True),
  "log_softmax": (lambda m, x: m.log_softmax(x), (REAL,), True),
  "ndtr": (lambda m, x: m.ndtr(x), (REAL * 3,), True),
  "log_ndtr": (
    lambda m, x: m.log_ndtr(x),
    (np.array([-50.0, -21.0, -19.0, 0.0, 5.0, 12.0]),),
    True,
  ),
  "ndtri": (lambda m, p: m.ndtri(p), (UNIT,), True),
  # the `special[name]` primitive (scipy's C functions in kernels), in the last operand
  **{
    name: ((lambda name: lambda m, x: getattr(m, name)(x))(name), (POS * 3,), True)
    for name in (
      "j0",
      "j1",
      "y0",
      "y1",
      "i0",
      "i1",
      "i0e",
      "i1e",
      "k0",
      "k1",
      "k0e",
      "k1e",
      "exp1",
      "expi",
    )
  },
  "dawsn": (lambda m, x: m.dawsn(x), (REAL * 3,), True),
  "i1e_negative": (lambda m, x: m.i1e(x), (-POS,), True),
  "gammasgn": (lambda m, x: m.gammasgn(x), (REAL * 3,), False),
  **{
    name: ((lambda name: lambda m, x: getattr(m, name)(1.7, x))(name), (POS * 3,), True)
    for name in ("jv", "yv", "iv", "kv", "kve", "gammainc", "gammaincc")
  },
  "ive": (lambda m, x: m.ive(0.6, x), (REAL * 3,), True),
  "jn": (lambda m, x: m.jn(2, x), (POS * 3,), True),
  "yn": (lambda m, x: m.yn(3, x), (POS * 3,), True),
  "gammaincinv": (lambda m, y: m.gammaincinv(1.7, y), (UNIT,), True),
  "gammainccinv": (lambda m, y: m.gammainccinv(1.7, y), (UNIT,), True),
  "betainc": (lambda m, x: m.betainc(1.7, 2.5, x), (UNIT,), True),
  "betaincinv": (lambda m, y: m.betaincinv(1.7, 2.5, y), (UNIT,), True),
  "norm.logpdf": (lambda m, x: m.norm.logpdf(x, 0.3, 1.7), (REAL,), True),
  "norm.pdf": (lambda m, x: m.norm.pdf(x, 0.3, 1.7), (REAL,), True),
  "norm.cdf": (lambda m, x: m.norm.cdf(x, 0.3, 1.7), (REAL,), True),
  "norm.logcdf": (lambda m, x: m.norm.logcdf(x), (REAL * 20,), True),
  "norm.sf": (lambda m, x: m.norm.sf(x), (REAL,), True),
  "norm.logsf": (lambda m, x: m.norm.logsf(x), (REAL * 20,), True),
  "norm.ppf": (lambda m, q: m.norm.ppf(q, 1.0, 2.0), (UNIT,), True),
  "t.logpdf": (lambda m, x: m.t.logpdf(x, 3.5, 0.2, 1.3), (REAL,), True),
  "t.pdf": (lambda m, x, df: m.t.pdf(x, df), (REAL, POS + 1), True),
  "gamma.logpdf": (
    lambda m, x: m.gamma.logpdf(x, 2.5, 0.0, 1.5),
    (np.array([-1.0, 0.0, 0.5, 2.0, 5.0, 9.0]),),
    False,
  ),
  "gamma.pdf": (lambda m, x, a: m.gamma.pdf(x, a), (POS, POS + 1), True),
  "chi2.logpdf": (lambda m, x: m.chi2.logpdf(x, 3), (POS,), True),
  "beta.logpdf": (
    lambda m, x: m.beta.logpdf(x, 2.5, 1.5),
    (np.array([-0.5, 0.0, 0.3, 0.9, 1.0, 1.5]),),
    False,
  ),
  "beta.pdf": (lambda m, x, a, b: m.beta.pdf(x, a, b), (UNIT, POS + 1, POS[::-1] + 1), True),
  "poisson.logpmf": (lambda m, k: m.poisson.logpmf(k, 2.5), (COUNTS,), False),
  "poisson.pmf": (lambda m, mu: m.poisson.pmf(3.0, mu), (POS,), True),
  # distribution functions: the middle, both tails (log-probabilities near 0 keep their
  # digits), the support's edges; derivatives in x (and loc, scale)
  **{
    f"t.{f}": (
      (lambda f: lambda m, x, loc: getattr(m.t, f)(x, 3.5, loc, 1.3))(f),
      (np.concatenate([REAL[:3] * 3, [0.0, 40.0, -1e3]]), REAL),
      True,
    )
    for f in ("cdf", "sf", "logcdf", "logsf")
  },
  "t.cdf_df": (
    lambda m, x, df: m.t.cdf(x, df),
    (REAL * 4, np.array([0.6, 1, 2, 5, 30, 1e3])),
    False,
  ),
  **{
    f"gamma.{f}": (
      (lambda f: lambda m, x: getattr(m.gamma, f)(x, 2.5, 0.1, 1.2))(f),
      (np.concatenate([POS[:4], [0.2, 60.0]]),),
      True,
    )
    for f in ("cdf", "sf", "logcdf", "logsf")
  },
  "gamma.cdf_edges": (
    lambda m, x: m.gamma.cdf(x, 2.5),
    (np.array([-1, 0, 1e-300, 1, 1e3, 7]),),
    False,
  ),
  "chi2.cdf": (lambda m, x: m.chi2.cdf(x, 3), (POS,), True),
  "chi2.logsf": (lambda m, x: m.chi2.logsf(x, 3), (POS * 10,), True),
  **{
    f"beta.{f}": (
      (lambda f: lambda m, x: getattr(m.beta, f)(x, 2.5, 1.5))(f),
      (np.concatenate([UNIT[:4], [1e-3, 0.999]]),),
      True,
    )
    for f in ("cdf", "sf", "logcdf", "logsf")
  },
  "beta.cdf_edges": (
    lambda m, x: m.beta.cdf(x, 2.5, 1.5),
    (np.array([-1, 0, 0.5, 1, 2, 1.0]),),
    False,
  ),
  "poisson.cdf": (lambda m, mu: m.poisson.cdf(3.0, mu), (POS,), True),
  "poisson.sf": (lambda m, mu: m.poisson.sf(3.0, mu), (POS,), True),
  "poisson.cdf_counts": (lambda m, k: m.poisson.cdf(k, 2.5), (COUNTS,), False),
}


def _modules(name):
  return (ST, pst) if "." in name else (S, ps)


@pytest.mark.parametrize("name", CASES)
def test_values_match_scipy_eager_compiled_and_batched(name):
  fn, args, _ = CASES[name]
  ref, ours = _modules(name)
  want = fn(ref, *args)
  f = lambda *a: fn(ours, *a)
  for got in (f(*args), primc.jit(f)(*args)):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True, err_msg=name)
  # batched: the same arguments as rows of a batch of 2 (the second row reversed)
  batch = [np.stack([a, a[::-1]]) for a in args]
  got = primc.jit(primc.vmap(f))(*batch)
  want_rows = np.stack([fn(ref, *args), fn(ref, *[a[::-1] for a in args])])
  np.testing.assert_allclose(got, want_rows, rtol=1e-12, atol=0, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("name", [n for n, (_, _, smooth) in CASES.items() if smooth])
@pytest.mark.parametrize("order", [1, 2])
def test_derivatives_by_finite_differences(name, order):
  fn, args, _ = CASES[name]
  _, ours = _modules(name)
  primc.check_grads(
    lambda *a: fn(ours, *a), args, order=order, modes=("fwd", "rev"), eps=1e-6, atol=2e-5, rtol=2e-5
  )


def test_distributions_of_vectors_match_scipy():
  x, alpha = R.dirichlet([1.0, 2.0, 3.0], 4), np.array([1.5, 2.0, 3.0])
  for f in (lambda m, v: m.dirichlet.logpdf(v, alpha), lambda m, v: m.dirichlet.pdf(v, alpha)):
    want = [f(ST, v) for v in x]
    np.testing.assert_allclose(f(pst, x), want, rtol=1e-12)
    np.testing.assert_allclose(primc.jit(lambda v: f(pst, v))(x), want, rtol=1e-12)
  cov = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.7]])
  mean, points = np.array([0.1, -0.2, 0.4]), R.standard_normal((5, 3))
  want = ST.multivariate_normal.logpdf(points, mean, cov)
  np.testing.assert_allclose(pst.multivariate_normal.logpdf(points, mean, cov), want, rtol=1e-12)
  np.testing.assert_allclose(
    pst.multivariate_normal.pdf(points, mean, 1.5),
    ST.multivariate_normal.pdf(points, mean, 1.5),
    rtol=1e-12,
  )
  primc.check_grads(
    lambda m, c: pst.multivariate_normal.logpdf(points, m, c @ c.T + np.eye(3)),
    (mean, cov),
    order=2,
  )
  primc.check_grads(lambda a: pst.dirichlet.logpdf(x, a), (alpha,), order=2)


def test_special_functions_differentiate_only_in_their_last_operand():
  """The orders of Bessel functions and gammainc's a have no derivative rule: an error
  naming the function, never a zero (eager and compiled)."""
  for f in (
    lambda v: ps.jv(v, 2.0),
    lambda a: ps.gammainc(a, 2.0),
    lambda b: ps.betainc(1.5, b, 0.3),
  ):
    for g in (primc.grad(f), primc.jit(primc.grad(f))):
      with pytest.raises(primc.PrimcError, match=r"derivative with respect to operand"):
        g(1.5)


def test_compiled_special_functions_load_from_the_cache_in_a_new_process(tmp_path):
  """Kernels call scipy's C functions by name: a process that loads them from the disk
  cache links the names again (cached machine code holds no address)."""
  code = (
    "import numpy as np, primc, primc.numpy as pnp, primc.scipy.special as ps\n"
    "f = primc.jit(primc.grad(lambda x: pnp.sum(ps.jv(1.5, x) * ps.gammaincc(2.0, x))))\n"
    "print(repr(f(np.array([0.5, 1.5, 4.0])).tolist()), primc.cache_stats().get("
    "'kernel_compiles', 0))"
  )
  env = {**__import__("os").environ, "PRIMC_CACHE_DIR": str(tmp_path / "cache")}
  runs = [
    subprocess.run(
      [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    for _ in range(2)
  ]
  for run in runs:
    assert run.returncode == 0, run.stderr
  (first, compiles1), (second, compiles2) = [r.stdout.rsplit(" ", 1) for r in runs]
  assert int(compiles1) >= 1 and int(compiles2) == 0
  x = np.array([0.5, 1.5, 4.0])
  want = (S.jv(0.5, x) - S.jv(2.5, x)) / 2 * S.gammaincc(2.0, x) - S.jv(1.5, x) * np.exp(
    -x
  ) * x / S.gamma(2.0)
  np.testing.assert_allclose(eval(first), want, rtol=1e-12)
  assert eval(first) == eval(second)


def test_multivariate_normal_singular_and_entropy():
  cov = np.zeros((4, 4))
  cov[:2, :2] = [[1.0, 0.3], [0.3, 0.5]]
  mean = np.array([0.1, -0.2, 0.5, 0.0])
  x = np.concatenate([R.standard_normal((3, 2)), np.tile(mean[2:], (3, 1))], 1)
  want = ST.multivariate_normal.logpdf(x, mean, cov, allow_singular=True)
  for f in (
    pst.multivariate_normal.logpdf,
    primc.jit(pst.multivariate_normal.logpdf, static_argnames=("allow_singular",)),
  ):
    np.testing.assert_allclose(f(x, mean, cov, allow_singular=True), want, rtol=1e-12)
  primc.check_grads(
    lambda m: pst.multivariate_normal.logpdf(
      x, pnp.concatenate([m, mean[2:]]), cov, allow_singular=True
    ),
    (mean[:2],),
    order=2,
  )
  full = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.7]])
  np.testing.assert_allclose(
    pst.multivariate_normal.entropy(None, full),
    ST.multivariate_normal.entropy(None, full),
    rtol=1e-13,
  )
  primc.check_grads(
    lambda c: pst.multivariate_normal.entropy(None, c @ c.T + np.eye(3)), (full,), order=2
  )


def test_rvs_samples_with_scipy_and_refuses_traced_parameters():
  a = pst.dirichlet.rvs([1.0, 2.0, 3.0], size=4, random_state=0)
  np.testing.assert_array_equal(a, ST.dirichlet.rvs([1.0, 2.0, 3.0], size=4, random_state=0))
  with pytest.raises(NotSupportedError, match="rvs of traced parameters"):
    primc.grad(lambda s: pnp.sum(pst.norm.rvs(0.0, s, size=2)))(1.0)


def _compiled(prim, **params):
  return primc.jit(lambda a: prim.bind(a, **params))


CORNERS = np.array(
  [
    0.0,
    -0.0,
    np.inf,
    -np.inf,
    np.nan,
    1e-300,
    -1e-300,
    1.0,
    -1.0,
    2.0,
    -2.0,
    0.5,
    -0.5,
    1e300,
    -1e300,
    171.5,
    -171.5,
    5e-324,
  ]
)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_compiled_polygamma_matches_scipy(n):
  x = np.concatenate([R.uniform(-8, 12, 4000), np.geomspace(1e-8, 1e6, 400), CORNERS])
  got, want = _compiled(P.polygamma_p, n=n)(x), S.polygamma(n, x)
  with np.errstate(all="ignore"):
    # negative x by reflection: its two terms cancel near the poles and far out
    hard = (x < 0) & ((np.abs(x - np.round(x)) < 1e-3) & (x != np.round(x)) | (x < -100))
    x32 = x.astype(np.float32)
    want32 = S.polygamma(n, x32.astype(np.float64)).astype(np.float32)
  np.testing.assert_allclose(got[~hard], want[~hard], rtol=1e-11, equal_nan=True)
  np.testing.assert_allclose(got[hard], want[hard], rtol=1e-7, equal_nan=True)
  np.testing.assert_allclose(_compiled(P.polygamma_p, n=n)(x32), want32, rtol=2e-6, equal_nan=True)


@pytest.mark.parametrize(
  "prim,ref,samples",
  [
    (
      P.erfinv_p,
      S.erfinv,
      np.concatenate(
        [
          R.uniform(-1, 1, 4000),
          1 - np.geomspace(1e-16, 0.5, 200),
          -1 + np.geomspace(1e-16, 0.5, 200),
          [1.5, -1.5],
        ]
      ),
    ),
    (
      P.erfcinv_p,
      S.erfcinv,
      np.concatenate(
        [
          R.uniform(0, 2, 4000),
          np.geomspace(5e-324, 1, 400),
          2 - np.geomspace(1e-16, 1, 200),
          [2.5, -1.0],
        ]
      ),
    ),
    (P.gammaln_p, S.gammaln, R.uniform(-30, 200, 4000)),
    (P.gamma_p, S.gamma, R.uniform(-30, 170, 4000)),
    (P.erf_p, S.erf, R.uniform(-7, 7, 4000)),
    (P.erfc_p, S.erfc, R.uniform(-7, 28, 4000)),
  ],
  ids=lambda v: getattr(v, "name", ""),
)
def test_compiled_special_functions_match_scipy(prim, ref, samples):
  x = np.concatenate([samples, CORNERS])
  with np.errstate(all="ignore"):
    want = ref(x)
  got = _compiled(prim)(x)
  # where scipy's value is wrong (subnormal arguments), the interpreter's is the oracle
  subnormal = (x != 0) & (np.abs(x) < np.finfo(np.float64).tiny)
  want[subnormal] = primc.interpret(primc.make_program(lambda a: prim.bind(a))(x), x)[0][subnormal]
  tiny = np.abs(want) < 1e-300  # scipy flushes some underflowing results to zero
  np.testing.assert_allclose(got[~tiny], want[~tiny], rtol=1e-13, equal_nan=True)
  np.testing.assert_allclose(got[tiny], want[tiny], atol=1e-300)
  np.testing.assert_array_equal(np.signbit(got[np.isinf(want)]), np.signbit(want[np.isinf(want)]))


def test_right_where_scipy_is_not():
  # scipy gives inf for gammaln of a subnormal and erfcinv of the smallest one
  tiny = np.array([5e-324, -5e-324, 1e-310])
  for f in (ps.gammaln, primc.jit(ps.gammaln)):
    np.testing.assert_allclose(f(tiny), -np.log(np.abs(tiny)), rtol=1e-12)
  for f in (ps.erfcinv, primc.jit(ps.erfcinv)):
    y = f(np.array([5e-324]))[0]
    # log erfc(y) = -y^2 - log(y sqrt(pi)) + log(1 - 1/(2y^2) + 3/(4y^4)) far in the tail
    log_c = -y * y - np.log(y * np.sqrt(np.pi)) + np.log1p(-0.5 / y**2 + 0.75 / y**4)
    np.testing.assert_allclose(log_c, np.log(5e-324), rtol=1e-9)


def test_missing_names_raise_errors_that_name_them():
  with pytest.raises(NotSupportedError, match=r"scipy\.special\.struve"):
    ps.struve(1.0, 2.0)
  with pytest.raises(NotSupportedError, match=r"scipy\.stats\.laplace"):
    pst.laplace
  with pytest.raises(NotSupportedError, match=r"norm\.entropy"):
    pst.norm.entropy()
  with pytest.raises(NotSupportedError, match="polygamma of order"):
    ps.polygamma(1.5, 2.0)
  with pytest.raises(AttributeError):
    ps.not_a_scipy_name


def test_import_primc_does_not_import_scipy():
  """Nor does asking a primc.scipy module for a dunder name (introspection, an import
  system's `hasattr(module, "__path__")`): scipy.stats' import is ~0.5 s."""
  code = (
    "import sys, primc, primc.numpy, primc.scipy as s\n"
    "for m in (s.stats, s.special, s.linalg, s.signal, s.integrate):\n"
    "  assert not hasattr(m, '__path__') and not hasattr(m, '__wrapped__')\n"
    "print('scipy' in sys.modules)"
  )
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "False"


def test_docs_scipy_table_matches_the_modules():
  import pathlib
  import re

  readme = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "guide" / "numpy.md").read_text()
  rows = [line for line in readme.splitlines() if re.match(r"\| `(special|stats)`", line)]
  assert len(rows) == 4
  import primc.scipy.integrate as psi
  import primc.scipy.signal as pss

  for module, row_name in ((psl, "linalg"), (pss, "signal"), (psi, "integrate")):
    (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{row_name}`")]
    for name in re.findall(r"`(\w+)`", row.split("|")[2]):
      assert callable(getattr(module, name)), name
  distributions = [
    d
    for d in ("norm", "t", "gamma", "chi2", "beta", "dirichlet", "multivariate_normal", "poisson")
    if d in rows[-1]
  ]
  for row in rows:
    names = re.findall(r"`(\w+)`", row.split("|")[2])
    assert names, row
    for name in names:
      if row.startswith("| `special`"):
        assert callable(getattr(ps, name)), name
      elif name not in ("loc", "scale", "allow_singular"):  # a distribution, or a method
        assert name in distributions or any(
          callable(getattr(pst, d).__dict__.get(name))
          or callable(getattr(type(getattr(pst, d)), name, None))
          for d in distributions
        ), name


_M = R.standard_normal((4, 4))
_SPD, _GEN, _B = _M @ _M.T + 4 * np.eye(4), _M.T + 4 * np.eye(4), R.standard_normal((4, 2))
LINALG = {  # name -> (function of scipy.linalg or primc's, arguments, finite differences)
  "cholesky": (lambda m, a: m.cholesky(a), (_SPD,), True),
  "cholesky_lower": (lambda m, a: m.cholesky(a, lower=True), (_SPD,), True),
  "cho_solve": (lambda m, a, b: m.cho_solve(m.cho_factor(a), b), (_SPD, _B), True),
  "cho_solve_lower": (
    lambda m, a, b: m.cho_solve((m.cholesky(a, lower=True), True), b),
    (_SPD, _B),
    True,
  ),
  "solve": (lambda m, a, b: m.solve(a, b), (_GEN, _B), True),
  "solve_transposed": (lambda m, a, b: m.solve(a, b, transposed=True), (_GEN, _B), True),
  "solve_triangular": (
    lambda m, a, b: m.solve_triangular(a, b, lower=True),
    (np.tril(_GEN), _B),
    True,
  ),
  "solve_sylvester": (
    lambda m, a, b, q: m.solve_sylvester(a, b, q),
    (_SPD, _GEN[:3, :3], R.standard_normal((4, 3))),
    True,
  ),
  "eigh_values": (lambda m, a: m.eigh(a, eigvals_only=True), (_SPD,), True),
  "svd_values": (lambda m, a: m.svd(a, compute_uv=False), (_GEN,), True),
  "block_diag": (lambda m, a, b: m.block_diag(a, b, np.array([7.0])), (_GEN[:2, :3], _B), True),
  **{
    f"solve_banded_{lo}{up}": (
      (lambda lo, up: lambda m, ab, b: m.solve_banded((lo, up), ab, b))(lo, up),
      (
        R.standard_normal((lo + up + 1, 5)) + 6 * (np.arange(lo + up + 1) == up)[:, None],
        R.standard_normal(5) if lo else R.standard_normal((5, 2)),
      ),
      True,
    )
    for lo, up in ((1, 1), (0, 2), (2, 0))
  },
}


_SIGNAL_PAIRS = [
  ((4,), (2,)),
  ((3,), (6,)),
  ((5, 4), (3, 2)),
  ((6, 7), (4, 1)),
  ((2, 3), (4, 5)),
  ((2, 5), (3, 2)),
  ((3, 3, 2), (2, 2, 2)),
]


@pytest.mark.parametrize("fn", ["convolve", "correlate"])
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("shapes", _SIGNAL_PAIRS, ids=str)
def test_scipy_signal_matches_scipy(fn, mode, shapes):
  """N-d convolve/correlate: scipy's values, shapes, swaps and errors (for 'valid', one
  operand must contain the other), eager and compiled; finite differences in both."""
  import scipy.signal as SS
  import primc.scipy.signal as pss

  a, b = (R.standard_normal(s) for s in shapes)
  try:
    want = getattr(SS, fn)(a, b, mode)
  except ValueError:
    with pytest.raises(ValueError):
      getattr(pss, fn)(a, b, mode)
    return
  for got in (
    getattr(pss, fn)(a, b, mode),
    primc.jit(lambda a, b: getattr(pss, fn)(a, b, mode))(a, b),
  ):
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
  if len(shapes[0]) == 2:
    np.testing.assert_allclose(
      getattr(pss, fn + "2d")(a, b, mode),
      getattr(SS, fn + "2d")(a, b, mode),
      rtol=1e-12,
      atol=1e-13,
    )
  primc.check_grads(lambda a, b: getattr(pss, fn)(a, b, mode), (a, b), order=1)


@pytest.mark.parametrize("name", LINALG)
def test_scipy_linalg_matches_scipy(name):
  fn, args, smooth = LINALG[name]
  want = fn(SL, *args)
  for got in (fn(psl, *args), primc.jit(lambda *a: fn(psl, *a))(*args)):
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
  if smooth:
    primc.check_grads(lambda *a: fn(psl, *a), args, order=2)
  with pytest.raises(NotSupportedError, match=r"scipy\.linalg\.expm"):
    psl.expm(_SPD)


def _convolve_axes_oracle(a, b, axes, dot_axes, mode):
  """The generalized convolution from scipy's N-d one, slice by slice: every index of the
  arrays' other axes, summed over the dot axes' common indices."""
  import itertools
  import scipy.signal as SS

  (c1, c2), (d1, d2) = axes, dot_axes
  r1 = [x for x in range(a.ndim) if x not in c1 + d1]
  r2 = [x for x in range(b.ndim) if x not in c2 + d2]
  at = np.transpose(a, r1 + d1 + c1)
  bt = np.transpose(b, r2 + d2 + c2)
  lead1, lead2, dots = (
    at.shape[: len(r1)],
    bt.shape[: len(r2)],
    at.shape[len(r1) : len(r1) + len(d1)],
  )
  out = None
  for i in itertools.product(*map(range, lead1)):
    for j in itertools.product(*map(range, lead2)):
      total = sum(
        SS.convolve(at[i + k], bt[j + k], mode) if c1 else at[i + k] * bt[j + k]
        for k in itertools.product(*map(range, dots))
      )
      if out is None:
        out = np.zeros(lead1 + lead2 + np.shape(total))
      out[i + j] = total
  return out


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_convolve_over_chosen_axes_and_dot_axes(mode, data):
  """autograd's generalization (`axes=`, `dot_axes=`): random ranks, pairings and sizes,
  against scipy's N-d convolution slice by slice, eager and compiled; finite differences
  in both operands. 'valid' needs one operand to contain the other on the convolved axes
  (else a ValueError, as scipy)."""
  import primc.scipy.signal as pss

  n_conv, n_dot = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 1))
  if n_conv + n_dot == 0:
    n_conv = 1
  extra1, extra2 = data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1))
  nd1, nd2 = n_conv + n_dot + extra1, n_conv + n_dot + extra2
  axes1 = data.draw(st.permutations(range(nd1)))[: n_conv + n_dot]
  axes2 = data.draw(st.permutations(range(nd2)))[: n_conv + n_dot]
  shape1 = [data.draw(st.integers(1, 4)) for _ in range(nd1)]
  shape2 = [data.draw(st.integers(1, 4)) for _ in range(nd2)]
  for x, y in zip(axes1[n_conv:], axes2[n_conv:]):
    shape2[y] = shape1[x]
  a, b = R.standard_normal(shape1), R.standard_normal(shape2)
  axes = (list(axes1[:n_conv]), list(axes2[:n_conv]))
  dots = (list(axes1[n_conv:]), list(axes2[n_conv:]))
  conv = lambda a, b: pss.convolve(a, b, mode=mode, axes=axes, dot_axes=dots)
  n, m = [shape1[x] for x in axes[0]], [shape2[y] for y in axes[1]]
  if mode == "valid" and not (
    all(x >= y for x, y in zip(n, m)) or all(y >= x for x, y in zip(n, m))
  ):
    with pytest.raises(ValueError, match="valid"):
      conv(a, b)
    return
  want = _convolve_axes_oracle(a, b, axes, dots, mode)
  for got in (conv(a, b), primc.jit(conv)(a, b)):
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  primc.check_grads(conv, (a, b), order=1)


def test_convolve_axes_errors():
  import primc.scipy.signal as pss

  a, b = np.ones((3, 4)), np.ones((3, 2))
  for kwargs, match in [
    (dict(axes=([0], [0, 1])), "pairs 1 axes"),
    (dict(axes=([2], [0])), "axis 2"),
    (dict(axes=([0], [0]), dot_axes=([0], [1])), "named twice"),
    (dict(axes=([0], [0]), dot_axes=([1], [1])), "differ in size"),
    (dict(dot_axes=([0], [0])), "needs axes"),
  ]:
    with pytest.raises(ValueError, match=match):
      pss.convolve(a, b, **kwargs)


def _ode(y, t, a, b):  # non-autonomous and nonlinear (autograd's test system)
  return -pnp.sqrt(t) - y + a - pnp.mean((y + b) ** 2)


def _ode_np(y, t, a, b):
  return -np.sqrt(t) - y + a - np.mean((y + b) ** 2)


@pytest.mark.parametrize(
  "times",
  [np.linspace(0.1, 0.2, 4), np.array([0.3, 0.25, 0.05]), np.array([0.0, 0.5, 1.0])],
  ids=["rising", "falling", "long"],
)
def test_odeint_matches_scipy(times):
  """Values against scipy's LSODA at tight tolerances (both solvers well inside them),
  eager, compiled and batched; times may fall; `tfirst` as scipy's."""
  import scipy.integrate as SI
  from primc.scipy import integrate as psi

  # (a generator of its own: the module's draws depend on the order tests run in, and
  # some starts blow up before t = 1, where scipy returns an unconverged row with a
  # warning and primc's odeint NaN: no draw of that kind is a check)
  rng = np.random.default_rng(0)
  y0, a, b = (rng.standard_normal(3) * 0.5 for _ in range(3))
  want = SI.odeint(_ode_np, y0, times, (a, b), rtol=1e-12, atol=1e-12)
  tol = dict(rtol=1e-10, atol=1e-10)
  for got in (
    psi.odeint(_ode, y0, times, (a, b), **tol),
    primc.jit(lambda y0, t, a, b: psi.odeint(_ode, y0, t, (a, b), **tol))(y0, times, a, b),
    psi.odeint(lambda t, y, a, b: _ode(y, t, a, b), y0, times, (a, b), tfirst=True, **tol),
  ):
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)  # an unstable system: the
    # 1e-10 per step grows
  starts = np.stack([y0, -y0, 0.5 * y0])
  batched = primc.vmap(lambda y: psi.odeint(_ode, y, times, (a, b), **tol))(starts)
  for row, start in zip(batched, starts):
    np.testing.assert_allclose(
      row, SI.odeint(_ode_np, start, times, (a, b), rtol=1e-12, atol=1e-12), rtol=1e-7, atol=1e-8
    )


def test_odeint_linear_system_is_exact_to_the_tolerance():
  """y' = A y: y(t) = expm(A t) y0 (a stable, oscillating A) at scipy's default tolerances."""
  from primc.scipy import integrate as psi

  A = np.array([[-0.5, 2.0], [-2.0, -0.5]])
  y0, times = np.array([1.0, -0.5]), np.linspace(0, 3, 7)
  got = psi.odeint(lambda y, t, A: A @ y, y0, times, (A,))
  want = np.stack([SL.expm(A * t) @ y0 for t in times])
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("argnum", [0, 1, 2], ids=["y0", "t", "args"])
def test_odeint_derivatives_by_the_adjoint_method(argnum):
  """Reverse mode in y0, the times and the parameters, first and second order (a gradient
  of a gradient differentiates the backward pass), against finite differences of odeint
  itself; compiled equals eager; forward mode is a clear error (no forward rule)."""
  from primc.scipy import integrate as psi

  y0, a, b = (R.standard_normal(3) for _ in range(3))
  times = np.linspace(0.1, 0.2, 4)

  def f(x):
    args = [y0, times, (a, b)]
    args[argnum] = x
    return psi.odeint(_ode, args[0], args[1], args[2])

  x = [y0, times, (a, b)][argnum]
  primc.check_grads(f, (x,), order=2, modes=("rev",))
  loss = lambda x: pnp.sum(pnp.sin(f(x)))
  tree = primc.jit(primc.grad(loss))(x), primc.grad(loss)(x)
  for compiled, eager in zip(*(primc.tree_util.tree_leaves(v) for v in tree), strict=True):
    np.testing.assert_allclose(compiled, eager, rtol=1e-9, atol=1e-12)
  with pytest.raises(primc.PrimcError, match="reverse-mode rule only"):
    primc.jvp(f, (x,), (x,))


def test_odeint_options_and_step_limit():
  from primc.scipy import integrate as psi

  y0, times = np.ones(2), np.linspace(0, 1, 3)
  with pytest.raises(NotSupportedError, match="Dfun"):
    psi.odeint(lambda y, t: -y, y0, times, Dfun=lambda y, t: -np.eye(2))
  out = psi.odeint(lambda y, t: -y, y0, times, mxstep=2, rtol=1e-13, atol=1e-13)
  np.testing.assert_allclose(out[0], y0)
  assert np.isnan(out[1:]).all()  # the step budget ran out: NaN, never a short answer
  with pytest.raises(NotSupportedError, match="solve_ivp"):
    psi.solve_ivp
