"""`scipy.stats` distributions' density functions (`norm.logpdf(x, loc, scale)`, ...),
traced like `primc.numpy`'s functions: compositions of `primc.scipy.special`, with
scipy's values outside the support (-inf log-densities, zero densities). Methods and
distributions scipy has and primc does not raise NotSupportedError naming them.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

from primc import numpy as pnp
from primc.numpy import NotSupportedError
from primc.scipy import special
from primc.trace import Tracer, aval_of
from primc.scipy._missing import missing

_HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


class _Distribution:
  """A distribution's functions, as `scipy.stats.<name>.<method>(x, *shape, loc, scale)`."""

  def __init__(self, name: str, **methods):
    self.name = name
    for method, fn in methods.items():
      fn.__name__ = f"{name}.{method}"
      setattr(self, method, pnp.takes_front_ends(special.scipy_op(fn)))

  def rvs(self, *args, **kwargs):
    """Samples, from scipy itself: sampling is not differentiated (as in autograd and
    jax.random's callers), so traced parameters are refused."""
    if any(isinstance(a, Tracer) for a in (*args, *kwargs.values())):
      raise NotSupportedError(
        f"primc.scipy.stats.{self.name}.rvs of traced parameters "
        f"(sampling is not differentiable; sample outside the "
        f"function and pass the samples in)"
      )
    # scipy.stats takes ~0.6 s to import: loaded on the first sample only
    return getattr(importlib.import_module("scipy.stats"), self.name).rvs(*args, **kwargs)

  def __getattr__(self, method):
    if method.startswith("__"):
      raise AttributeError(method)
    raise NotSupportedError(
      f"primc.scipy.stats.{self.name}.{method} is not supported yet "
      f"(the README's scipy section lists what is)"
    )


def _standardized(x, loc, scale):
  x = pnp._float(x)
  return pnp.divide(pnp.subtract(x, loc), scale), pnp.log(pnp._float(scale))


def _log_of(fn, other):
  """log fn, where fn < 1/2; log1p(-other) where fn is near 1 (other = 1 - fn, computed
  on its own: the cdf's sf, the sf's cdf), so that a log-probability near 0 keeps its
  digits."""

  def log_fn(*args, **kwargs):
    p, q = fn(*args, **kwargs), other(*args, **kwargs)
    small = pnp.less(p, 0.5)
    return pnp.where(
      small, pnp.log(pnp.where(small, p, 0.5)), pnp.log1p(pnp.negative(pnp.where(small, 0.5, q)))
    )

  return log_fn


def _with_cdfs(name, cdf, sf, **methods):
  return _Distribution(
    name, cdf=cdf, sf=sf, logcdf=_log_of(cdf, sf), logsf=_log_of(sf, cdf), **methods
  )


def _exp_of(logpdf):
  return lambda *args, **kwargs: pnp.exp(logpdf(*args, **kwargs))


def _norm_logpdf(x, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  return pnp.subtract(pnp.multiply(-0.5, pnp.multiply(z, z)), pnp.add(_HALF_LOG_2PI, log_scale))


def _norm_cdf(x, loc=0.0, scale=1.0):
  return special.ndtr(_standardized(x, loc, scale)[0])


def _norm_logcdf(x, loc=0.0, scale=1.0):
  return special.log_ndtr(_standardized(x, loc, scale)[0])


def _norm_sf(x, loc=0.0, scale=1.0):
  return special.ndtr(pnp.negative(_standardized(x, loc, scale)[0]))


def _norm_logsf(x, loc=0.0, scale=1.0):
  return special.log_ndtr(pnp.negative(_standardized(x, loc, scale)[0]))


def _norm_ppf(q, loc=0.0, scale=1.0):
  return pnp.add(pnp.multiply(special.ndtri(q), scale), loc)


norm = _Distribution(
  "norm",
  logpdf=_norm_logpdf,
  pdf=_exp_of(_norm_logpdf),
  cdf=_norm_cdf,
  logcdf=_norm_logcdf,
  sf=_norm_sf,
  logsf=_norm_logsf,
  ppf=_norm_ppf,
)


def _t_logpdf(x, df, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  df = pnp._float(df)
  half = pnp.multiply(0.5, pnp.add(df, 1.0))
  const = pnp.subtract(special.gammaln(half), special.gammaln(pnp.multiply(0.5, df)))
  const = pnp.subtract(const, pnp.multiply(0.5, pnp.log(pnp.multiply(df, np.pi))))
  return pnp.subtract(
    pnp.subtract(const, log_scale),
    pnp.multiply(half, pnp.log1p(pnp.divide(pnp.multiply(z, z), df))),
  )


def _t_cdf_standard(z, df, log=False):
  """Near the middle (z^2 below df/20 and 1/10: each term of the series then at most a tenth
  of the one before) the power series 1/2 + pdf(0) z 2F1(1/2, (df+1)/2; 3/2; -z^2/df) (20
  terms; a polynomial, so derivatives of every order are accurate there too);
  beyond, the tail betainc(df/2, 1/2, df/(df+z^2))/2, or one minus it (log1p of minus it
  for the log, so that it stays below 0)."""
  df = pnp._float(df)
  zz = pnp.multiply(z, z)
  middle = pnp.logical_and(pnp.less(pnp.multiply(zz, 20.0), df), pnp.less(zz, 0.1))
  r = pnp.negative(pnp.divide(pnp.where(middle, zz, 0.0), df))
  term, total = pnp.ones_like(r), pnp.ones_like(r)
  for k in range(20):
    ratio = pnp.divide(
      pnp.multiply(0.5 + k, pnp.add(pnp.multiply(0.5, df), 0.5 + k)), (1.5 + k) * (k + 1)
    )
    term = pnp.multiply(term, pnp.multiply(ratio, r))
    total = pnp.add(total, term)
  inner = pnp.add(0.5, pnp.multiply(pnp.multiply(pnp.exp(_t_logpdf(0.0, df)), z), total))
  w = pnp.divide(df, pnp.add(df, pnp.where(middle, df, zz)))
  tail = pnp.multiply(0.5, special.betainc(pnp.multiply(0.5, df), 0.5, w))
  below = pnp.less(z, 0.0)
  if log:
    return pnp.where(
      middle, pnp.log(inner), pnp.where(below, pnp.log(tail), pnp.log1p(pnp.negative(tail)))
    )
  return pnp.where(middle, inner, pnp.where(below, tail, pnp.subtract(1.0, tail)))


def _t_function(upper, log):
  def fn(x, df, loc=0.0, scale=1.0):
    z = _standardized(x, loc, scale)[0]
    return _t_cdf_standard(pnp.negative(z) if upper else z, df, log)

  return fn


t = _Distribution(
  "t",
  logpdf=_t_logpdf,
  pdf=_exp_of(_t_logpdf),
  cdf=_t_function(False, False),
  logcdf=_t_function(False, True),
  sf=_t_function(True, False),
  logsf=_t_function(True, True),
)


def _outside(condition, value):
  """`value` where `condition` is False, -inf (a log-density off the support) where True."""
  return pnp.where(condition, -np.inf, value)


def _gamma_logpdf(x, a, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  a = pnp._float(a)
  inside = pnp.where(pnp.less(z, 0.0), 1.0, z)
  value = pnp.subtract(
    pnp.subtract(special.xlogy(pnp.subtract(a, 1.0), inside), inside),
    pnp.add(special.gammaln(a), log_scale),
  )
  return _outside(pnp.less(z, 0.0), value)


def _gamma_cdf(x, a, loc=0.0, scale=1.0, upper=False):
  """gammainc(a, z) (gammaincc for the sf), the bound value below 0."""
  z = _standardized(x, loc, scale)[0]
  below = pnp.less_equal(z, 0.0)
  value = (special.gammaincc if upper else special.gammainc)(a, pnp.where(below, 1.0, z))
  return pnp.where(below, 1.0 if upper else 0.0, value)


def _gamma_sf(x, a, loc=0.0, scale=1.0):
  return _gamma_cdf(x, a, loc, scale, upper=True)


gamma = _with_cdfs("gamma", _gamma_cdf, _gamma_sf, logpdf=_gamma_logpdf, pdf=_exp_of(_gamma_logpdf))


def _chi2_logpdf(x, df, loc=0.0, scale=1.0):
  return _gamma_logpdf(x, pnp.multiply(0.5, pnp._float(df)), loc, pnp.multiply(2.0, scale))


def _chi2_cdf(x, df, loc=0.0, scale=1.0):
  return _gamma_cdf(x, pnp.multiply(0.5, pnp._float(df)), loc, pnp.multiply(2.0, scale))


def _chi2_sf(x, df, loc=0.0, scale=1.0):
  return _gamma_sf(x, pnp.multiply(0.5, pnp._float(df)), loc, pnp.multiply(2.0, scale))


chi2 = _with_cdfs("chi2", _chi2_cdf, _chi2_sf, logpdf=_chi2_logpdf, pdf=_exp_of(_chi2_logpdf))


def _beta_logpdf(x, a, b, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  a, b = pnp._float(a), pnp._float(b)
  off = pnp.logical_or(pnp.less(z, 0.0), pnp.greater(z, 1.0))
  inside = pnp.where(off, 0.5, z)
  value = pnp.add(
    special.xlogy(pnp.subtract(a, 1.0), inside),
    special.xlog1py(pnp.subtract(b, 1.0), pnp.negative(inside)),
  )
  return _outside(off, pnp.subtract(value, pnp.add(special.betaln(a, b), log_scale)))


def _beta_cdf(x, a, b, loc=0.0, scale=1.0):
  """betainc(a, b, z) inside [0, 1], 0 below, 1 above."""
  return _beta_cdf_standard(_standardized(x, loc, scale)[0], a, b)


def _beta_sf(x, a, b, loc=0.0, scale=1.0):
  """The cdf of 1 - z with a and b swapped (no cancellation near 1)."""
  return _beta_cdf_standard(pnp.subtract(1.0, _standardized(x, loc, scale)[0]), b, a)


def _beta_cdf_standard(z, a, b):
  below, above = pnp.less_equal(z, 0.0), pnp.greater_equal(z, 1.0)
  value = special.betainc(a, b, pnp.where(pnp.logical_or(below, above), 0.5, z))
  return pnp.where(below, 0.0, pnp.where(above, 1.0, value))


beta = _with_cdfs("beta", _beta_cdf, _beta_sf, logpdf=_beta_logpdf, pdf=_exp_of(_beta_logpdf))


def _poisson_logpmf(k, mu, loc=0.0):
  k = pnp.subtract(pnp._float(k), loc)
  mu = pnp._float(mu)
  off = pnp.logical_or(pnp.less(k, 0.0), pnp.not_equal(k, pnp.floor(k)))
  inside = pnp.where(off, 0.0, k)
  value = pnp.subtract(
    pnp.subtract(special.xlogy(inside, mu), mu), special.gammaln(pnp.add(inside, 1.0))
  )
  return _outside(off, value)


def _poisson_cdf(k, mu, loc=0.0, upper=False):
  """gammaincc(floor(k) + 1, mu) (gammainc for the sf; differentiable in mu), the bound
  value below 0."""
  k = pnp.floor(pnp.subtract(pnp._float(k), loc))
  below = pnp.less(k, 0.0)
  value = (special.gammainc if upper else special.gammaincc)(
    pnp.add(pnp.where(below, 0.0, k), 1.0), mu
  )
  return pnp.where(below, 1.0 if upper else 0.0, value)


def _poisson_sf(k, mu, loc=0.0):
  return _poisson_cdf(k, mu, loc, upper=True)


poisson = _with_cdfs(
  "poisson", _poisson_cdf, _poisson_sf, logpmf=_poisson_logpmf, pmf=_exp_of(_poisson_logpmf)
)


def _dirichlet_logpdf(x, alpha):
  """x: points of the simplex along the last axis (scipy takes them along the first)."""
  x, alpha = pnp._float(x), pnp._float(alpha)
  norm_const = pnp.subtract(
    special.gammaln(pnp.sum(alpha, -1)), pnp.sum(special.gammaln(alpha), -1)
  )
  return pnp.add(pnp.sum(special.xlogy(pnp.subtract(alpha, 1.0), x), -1), norm_const)


dirichlet = _Distribution("dirichlet", logpdf=_dirichlet_logpdf, pdf=_exp_of(_dirichlet_logpdf))


def _mvn_logpdf(x, mean=None, cov=1.0, allow_singular=False):
  """x: (..., k) points; cov a (k, k) positive definite matrix (or a scalar: a multiple of
  the identity), by its Cholesky factor. allow_singular=True: a positive semidefinite cov,
  by its eigendecomposition, with scipy's cutoff for zero eigenvalues, the pseudo-inverse
  and the pseudo-determinant (the density on the subspace cov spans)."""
  x = pnp._float(x)
  k = pnp.shape(x)[-1]
  d = x if mean is None else pnp.subtract(x, mean)
  cov = _mvn_cov(cov, k, aval_of(x).dtype)
  flat = pnp.reshape(d, (-1, k))
  if allow_singular:
    maha, log_det, rank = _mvn_singular(flat, cov)
  else:
    chol = pnp.linalg.cholesky(cov)
    z = pnp.linalg.solve_triangular(chol, pnp.transpose(flat), lower=True)
    maha = pnp.sum(pnp.multiply(z, z), 0)
    log_det, rank = pnp.multiply(2.0, pnp.sum(pnp.log(pnp.diagonal(chol)))), k
  maha = pnp.reshape(maha, pnp.shape(x)[:-1])
  return pnp.multiply(-0.5, pnp.add(pnp.add(maha, log_det), 2 * _HALF_LOG_2PI * rank))


def _mvn_cov(cov, k, dtype):
  cov = pnp._float(cov)
  if pnp.ndim(cov) < 2:
    cov = pnp.multiply(cov, pnp.eye(k, dtype=dtype))
  return cov


def _mvn_singular(flat, cov):
  """(Mahalanobis distances, log pseudo-determinant, rank) from eigh: eigenvalues at most
  scipy's cutoff (1e6 eps times the largest, for float64) count as zero. The rank is a
  run-time value here, a traced scalar."""
  s, v = pnp.linalg.eigh(cov)
  eps = np.finfo(aval_of(s).dtype).eps * 1e6
  kept = pnp.greater(s, pnp.multiply(eps, pnp.max(pnp.abs(s))))
  safe = pnp.where(kept, s, 1.0)
  z = pnp.matmul(flat, v)  # (n, k): coordinates along the eigenvectors
  maha = pnp.sum(pnp.where(kept, pnp.divide(pnp.multiply(z, z), safe), 0.0), -1)
  log_det = pnp.sum(pnp.where(kept, pnp.log(safe), 0.0))
  return maha, log_det, pnp.sum(pnp.astype(kept, aval_of(s).dtype))


def _mvn_entropy(mean=None, cov=1.0):
  """0.5 (k (1 + log 2 pi) + log det cov), by the Cholesky factor."""
  cov = pnp._float(cov)
  k = 1 if pnp.ndim(cov) < 2 else pnp.shape(cov)[-1]
  cov = _mvn_cov(cov, k, aval_of(cov).dtype)
  log_det = pnp.multiply(2.0, pnp.sum(pnp.log(pnp.diagonal(pnp.linalg.cholesky(cov)))))
  return pnp.multiply(0.5, pnp.add(log_det, k * (1.0 + 2 * _HALF_LOG_2PI)))


multivariate_normal = _Distribution(
  "multivariate_normal", logpdf=_mvn_logpdf, pdf=_exp_of(_mvn_logpdf), entropy=_mvn_entropy
)


def __getattr__(name: str):
  raise missing("stats", name)


pnp.wrap_public_functions(globals(), __name__)  # eager tensors and static variables too

# `import primc.scipy.stats.norm as norm` (autograd's and JAX's spelling: modules there)
for _name, _value in list(globals().items()):
  if isinstance(_value, _Distribution):
    sys.modules[f"{__name__}.{_name}"] = _value
