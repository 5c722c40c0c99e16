"""`scipy.stats` distributions' density functions (`norm.logpdf(x, loc, scale)`, ...),
traced like `primc.numpy`'s functions: compositions of `primc.scipy.special`, with
scipy's values outside the support (-inf log-densities, zero densities). Methods and
distributions scipy has and primc does not raise NotSupportedError naming them.
"""
from __future__ import annotations

import numpy as np

from primc import numpy as pnp
from primc.numpy import NotSupportedError, _op
from primc.scipy import special
from primc.trace import aval_of

_HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


class _Distribution:
  """A distribution's functions, as `scipy.stats.<name>.<method>(x, *shape, loc, scale)`."""

  def __init__(self, name: str, **methods):
    self.name = name
    for method, fn in methods.items():
      fn.__name__ = f"{name}.{method}"
      setattr(self, method, _op(fn))

  def __getattr__(self, method):
    if method.startswith("__"):
      raise AttributeError(method)
    raise NotSupportedError(f"primc.scipy.stats.{self.name}.{method} is not supported yet "
                            f"(the README's scipy section lists what is)")


def _standardized(x, loc, scale):
  x = pnp._float(x)
  return pnp.divide(pnp.subtract(x, loc), scale), pnp.log(pnp._float(scale))


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


norm = _Distribution("norm", logpdf=_norm_logpdf, pdf=_exp_of(_norm_logpdf), cdf=_norm_cdf,
                     logcdf=_norm_logcdf, sf=_norm_sf, logsf=_norm_logsf, ppf=_norm_ppf)


def _t_logpdf(x, df, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  df = pnp._float(df)
  half = pnp.multiply(0.5, pnp.add(df, 1.0))
  const = pnp.subtract(special.gammaln(half), special.gammaln(pnp.multiply(0.5, df)))
  const = pnp.subtract(const, pnp.multiply(0.5, pnp.log(pnp.multiply(df, np.pi))))
  return pnp.subtract(pnp.subtract(const, log_scale),
                      pnp.multiply(half, pnp.log1p(pnp.divide(pnp.multiply(z, z), df))))


t = _Distribution("t", logpdf=_t_logpdf, pdf=_exp_of(_t_logpdf))


def _outside(condition, value):
  """`value` where `condition` is False, -inf (a log-density off the support) where True."""
  return pnp.where(condition, -np.inf, value)


def _gamma_logpdf(x, a, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  a = pnp._float(a)
  inside = pnp.where(pnp.less(z, 0.0), 1.0, z)
  value = pnp.subtract(pnp.subtract(special.xlogy(pnp.subtract(a, 1.0), inside), inside),
                       pnp.add(special.gammaln(a), log_scale))
  return _outside(pnp.less(z, 0.0), value)


gamma = _Distribution("gamma", logpdf=_gamma_logpdf, pdf=_exp_of(_gamma_logpdf))


def _chi2_logpdf(x, df, loc=0.0, scale=1.0):
  return _gamma_logpdf(x, pnp.multiply(0.5, pnp._float(df)), loc, pnp.multiply(2.0, scale))


chi2 = _Distribution("chi2", logpdf=_chi2_logpdf, pdf=_exp_of(_chi2_logpdf))


def _beta_logpdf(x, a, b, loc=0.0, scale=1.0):
  z, log_scale = _standardized(x, loc, scale)
  a, b = pnp._float(a), pnp._float(b)
  off = pnp.logical_or(pnp.less(z, 0.0), pnp.greater(z, 1.0))
  inside = pnp.where(off, 0.5, z)
  value = pnp.add(special.xlogy(pnp.subtract(a, 1.0), inside),
                  special.xlog1py(pnp.subtract(b, 1.0), pnp.negative(inside)))
  return _outside(off, pnp.subtract(value, pnp.add(special.betaln(a, b), log_scale)))


beta = _Distribution("beta", logpdf=_beta_logpdf, pdf=_exp_of(_beta_logpdf))


def _poisson_logpmf(k, mu, loc=0.0):
  k = pnp.subtract(pnp._float(k), loc)
  mu = pnp._float(mu)
  off = pnp.logical_or(pnp.less(k, 0.0), pnp.not_equal(k, pnp.floor(k)))
  inside = pnp.where(off, 0.0, k)
  value = pnp.subtract(pnp.subtract(special.xlogy(inside, mu), mu),
                       special.gammaln(pnp.add(inside, 1.0)))
  return _outside(off, value)


poisson = _Distribution("poisson", logpmf=_poisson_logpmf, pmf=_exp_of(_poisson_logpmf))


def _dirichlet_logpdf(x, alpha):
  """x: points of the simplex along the last axis (scipy takes them along the first)."""
  x, alpha = pnp._float(x), pnp._float(alpha)
  norm_const = pnp.subtract(special.gammaln(pnp.sum(alpha, -1)),
                            pnp.sum(special.gammaln(alpha), -1))
  return pnp.add(pnp.sum(special.xlogy(pnp.subtract(alpha, 1.0), x), -1), norm_const)


dirichlet = _Distribution("dirichlet", logpdf=_dirichlet_logpdf, pdf=_exp_of(_dirichlet_logpdf))


def _mvn_logpdf(x, mean=None, cov=1.0):
  """x: (..., k) points; cov a (k, k) positive definite matrix (or a scalar: a multiple of
  the identity); by its Cholesky factor."""
  x = pnp._float(x)
  k = pnp.shape(x)[-1]
  d = x if mean is None else pnp.subtract(x, mean)
  cov = pnp._float(cov)
  if pnp.ndim(cov) < 2:
    cov = pnp.multiply(cov, pnp.eye(k, dtype=aval_of(x).dtype))
  chol = pnp.linalg.cholesky(cov)
  flat = pnp.reshape(d, (-1, k))
  z = pnp.linalg.solve_triangular(chol, pnp.transpose(flat), lower=True)
  maha = pnp.reshape(pnp.sum(pnp.multiply(z, z), 0), pnp.shape(x)[:-1])
  log_det = pnp.multiply(2.0, pnp.sum(pnp.log(pnp.diagonal(chol))))
  return pnp.multiply(-0.5, pnp.add(pnp.add(maha, log_det), 2 * k * _HALF_LOG_2PI))


multivariate_normal = _Distribution("multivariate_normal", logpdf=_mvn_logpdf,
                                    pdf=_exp_of(_mvn_logpdf))


def __getattr__(name: str):
  import scipy.stats
  if name.startswith("__") or not hasattr(scipy.stats, name):
    raise AttributeError(f"module 'primc.scipy.stats' has no attribute {name!r}")
  raise NotSupportedError(f"primc.scipy.stats.{name} (scipy.stats.{name}) is not supported "
                          f"yet; the README's scipy section lists what is")
