"""`scipy.special` functions, traced like `primc.numpy`'s (every path, every order).

Primitives: erf, erfc, erfinv, erfcinv, gammaln, gamma and polygamma (digamma is
polygamma of order 0): the interpreter calls scipy.special, kernels numba's math or
`codegen/special.py`. Bessel functions (j0 ... kve), the incomplete gamma and beta
functions and their inverses, exp1, expi, dawsn and gammasgn are one primitive,
`special[name]`, which kernels run by calling scipy's own C functions. The others are
compositions of primitives, with scipy's values at the edges of their domains (poles,
zeros, infinities), and derivatives that stay finite where the value is (`_guarded`).
Other names scipy.special has raise NotSupportedError.
"""

from __future__ import annotations

import numpy as np

from primc import numpy as pnp
from primc import prims as P
from primc.custom import custom_jvp
from primc.numpy import NotSupportedError, _op
from primc.scipy._missing import missing


def scipy_op(fn):
  """A primc.scipy function as an op (`primc.numpy._op`), recorded: a call while tracing
  replays the equations of its signature where every array argument is traced (one that
  reads a constant array's values runs as it is)."""
  return _op(fn, recorded="traced")


erf = pnp._unary(P.erf_p.bind, "erf")
erfc = pnp._unary(P.erfc_p.bind, "erfc")
erfinv = pnp._unary(P.erfinv_p.bind, "erfinv")
erfcinv = pnp._unary(P.erfcinv_p.bind, "erfcinv")
gammaln = pnp._unary(P.gammaln_p.bind, "gammaln")
gamma = pnp._unary(P.gamma_p.bind, "gamma")


@scipy_op
def polygamma(n, x):
  """psi^(n)(x), for an integer order n >= 0 (scipy also takes an array of orders)."""
  if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
    raise NotSupportedError(f"polygamma of order {n!r}: an int >= 0 is supported")
  return P.polygamma_p.bind(pnp._float(x), n=int(n))


@scipy_op
def digamma(x):
  return polygamma(0, x)


psi = digamma


def _guarded(bad, value, x, safe):
  """`value(x)` where `bad` is False; where it is True, `value` sees `safe` instead of x,
  so that neither its value nor its derivative there can be nan (the caller replaces the
  result there)."""
  return value(pnp.where(bad, safe, x))


def _pole(x):
  """Where Γ has a pole: 0, -1, -2, ..."""
  return pnp.logical_and(pnp.less_equal(x, 0.0), pnp.equal(x, pnp.floor(x)))


@scipy_op
def rgamma(x):
  """1 / Γ(x), 0 at the poles of Γ."""
  x = pnp._float(x)
  pole = _pole(x)
  return pnp.where(pole, 0.0, _guarded(pole, lambda z: pnp.reciprocal(gamma(z)), x, 1.0))


@scipy_op
def betaln(a, b):
  """log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)."""
  a, b = pnp._float(a), pnp._float(b)
  return pnp.subtract(pnp.add(gammaln(a), gammaln(b)), gammaln(pnp.add(a, b)))


@scipy_op
def beta(a, b):
  """B(a, b), signed as Γ(a) Γ(b) / Γ(a + b)."""
  a, b = pnp._float(a), pnp._float(b)
  sign = pnp.multiply(
    pnp.multiply(pnp.sign(gamma(a)), pnp.sign(gamma(b))), pnp.sign(gamma(pnp.add(a, b)))
  )
  return pnp.multiply(pnp.stop_gradient(sign), pnp.exp(betaln(a, b)))


@scipy_op
def multigammaln(a, d):
  """The multivariate log-gamma of dimension d (an int): d(d-1)/4 log(pi) plus
  sum over j < d of gammaln(a - j/2)."""
  if not isinstance(d, (int, np.integer)) or d < 1:
    raise NotSupportedError(f"multigammaln of dimension {d!r}: an int >= 1 is supported")
  a = pnp._float(a)
  out = pnp.full_like(a, d * (d - 1) / 4 * np.log(np.pi))
  for j in range(int(d)):
    out = pnp.add(out, gammaln(pnp.subtract(a, j / 2)))
  return out


@scipy_op
def expit(x):
  """1 / (1 + exp(-x)), without overflow for either sign."""
  x = pnp._float(x)
  e = pnp.exp(pnp.negative(pnp.abs(x)))
  return pnp.where(
    pnp.greater_equal(x, 0.0), pnp.reciprocal(pnp.add(1.0, e)), pnp.divide(e, pnp.add(1.0, e))
  )


@scipy_op
def log_expit(x):
  """log(expit(x)) = -softplus(-x)."""
  return pnp.negative(pnp.softplus(pnp.negative(pnp._float(x))))


@scipy_op
def logit(p):
  """log(p / (1 - p))."""
  p = pnp._float(p)
  return pnp.subtract(pnp.log(p), pnp.log1p(pnp.negative(p)))


def _xlog(log_fn, name):
  """x * log_fn(y), 0 where x = 0 (whatever y is); d/dx = log_fn(y) and d/dy = x
  log_fn'(y), as scipy's function is differentiated elsewhere (autograd)."""

  @custom_jvp
  def f(x, y):
    x, y = pnp.broadcast_arrays(pnp._float(x), pnp._float(y))
    zero = pnp.equal(x, 0.0)
    return pnp.where(zero, 0.0, pnp.multiply(x, _guarded(zero, log_fn, y, 1.0)))

  @f.defjvp
  def f_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    dy = y if log_fn is pnp.log else pnp.add(1.0, y)
    return f(x, y), pnp.add(pnp.multiply(tx, log_fn(y)), pnp.divide(pnp.multiply(ty, x), dy))

  f.__name__ = name
  return scipy_op(f)


xlogy = _xlog(pnp.log, "xlogy")
xlog1py = _xlog(pnp.log1p, "xlog1py")


@scipy_op
def entr(x):
  """-x log(x) for x > 0, 0 at 0, -inf below."""
  x = pnp._float(x)
  return pnp.where(pnp.less(x, 0.0), -np.inf, pnp.negative(xlogy(x, x)))


@scipy_op
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
  """log(sum(b * exp(a))) over `axis` (all axes when None), shifted by the maximum; with
  `return_sign`, (log|sum|, its sign), else nan where the sum is negative."""
  a = pnp._float(a)
  if b is None and not return_sign:
    return pnp.logsumexp(a, axis, keepdims)
  axes = pnp._axes(axis, pnp.ndim(a))
  m = pnp.stop_gradient(pnp.max(a, axes, keepdims=True))
  m = pnp.where(pnp.less(pnp.abs(m), np.inf), m, 0.0)
  terms = pnp.exp(pnp.subtract(a, m))
  s = pnp.sum(terms if b is None else pnp.multiply(b, terms), axes, keepdims=True)
  if not keepdims:
    m, s = pnp.squeeze(m, axes), pnp.squeeze(s, axes)
  if return_sign:
    return pnp.add(pnp.log(pnp.abs(s)), m), pnp.sign(s)
  return pnp.add(pnp.log(s), m)


@scipy_op
def softmax(x, axis=None):
  """exp(x) / sum(exp(x)) over `axis` (scipy's default: every axis)."""
  x = pnp._float(x)
  axes = pnp._axes(axis, pnp.ndim(x))
  z = pnp.exp(pnp.subtract(x, pnp.stop_gradient(pnp.max(x, axes, keepdims=True))))
  return pnp.divide(z, pnp.sum(z, axes, keepdims=True))


@scipy_op
def log_softmax(x, axis=None):
  x = pnp._float(x)
  return pnp.subtract(x, pnp.logsumexp(x, axis, keepdims=True))


_SQRT_HALF = float(np.sqrt(0.5))


@scipy_op
def ndtr(x):
  """The standard normal CDF, erfc(-x / sqrt(2)) / 2."""
  return pnp.multiply(0.5, erfc(pnp.multiply(pnp._float(x), -_SQRT_HALF)))


@scipy_op
def log_ndtr(x):
  """log(ndtr(x)): log1p(-ndtr(-x)) above 0; far in the lower tail (x < -20, where ndtr
  underflows) its asymptotic series
  -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - ...)."""
  x = pnp._float(x)
  tail, upper = pnp.less(x, -20.0), pnp.greater(x, 0.0)
  body = pnp.where(
    upper,
    _guarded(
      pnp.logical_not(upper),  # log1p: ndtr near 1 is 1 - ...
      lambda z: pnp.log1p(pnp.negative(ndtr(pnp.negative(z)))),
      x,
      1.0,
    ),
    _guarded(pnp.logical_or(tail, upper), lambda z: pnp.log(ndtr(z)), x, 0.0),
  )

  def series(z):
    w = pnp.reciprocal(pnp.multiply(z, z))
    s, term = pnp.ones_like(z), pnp.ones_like(z)
    for k in range(1, 8):  # 1 - 1/z^2 + 3/z^4 - 15/z^6 + ...: terms below 1e-17 at |z| > 20
      term = pnp.multiply(term, pnp.multiply(w, -(2 * k - 1)))
      s = pnp.add(s, term)
    return pnp.add(
      pnp.subtract(pnp.multiply(-0.5, pnp.multiply(z, z)), pnp.log(pnp.negative(z))),
      pnp.subtract(pnp.log(s), 0.5 * np.log(2 * np.pi)),
    )

  return pnp.where(tail, _guarded(pnp.logical_not(tail), series, x, -30.0), body)


@scipy_op
def ndtri(p):
  """The inverse of ndtr: -sqrt(2) erfcinv(2p)."""
  return pnp.multiply(-np.sqrt(2.0), erfcinv(pnp.multiply(2.0, pnp._float(p))))


def _special(name: str):
  def fn(*xs):
    return P.special_p.bind(*(pnp._float(x) for x in pnp._promote(*xs)), name=name)

  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (
    f"scipy.special.{name}: scipy's own function in both paths (its C code, "
    f"called by kernels); derivatives of every order in the last operand."
  )
  return scipy_op(fn)


# Bessel functions, incomplete gamma and beta functions and their inverses, exponential
# integrals, Dawson's integral (`primc.prims.SPECIAL_ARITY`)
for _name in P.SPECIAL_ARITY:
  globals()[_name] = _special(_name)
jn, yn = _special("jv"), _special("yv")  # integer orders: the same values


def __getattr__(name: str):
  raise missing("special", name)


pnp.wrap_public_functions(globals(), __name__)  # eager tensors and static variables too
