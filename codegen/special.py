"""Special functions for generated kernels that numba's `math` lacks: the polygamma family
and the inverse error functions (scalar float64; kernels round the result for float32).
`primc.prims` computes the same functions with scipy.special in the interpreter;
`tests/test_scipy.py` checks these against it, poles and tails included.

Like `mathlib`, this file runs as a module of the cache (`codegen.loader.LIBRARY`), so
numba keeps the machine code of what kernels call.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from primc.prims import SPECIAL_ARITY

CACHE = globals().get("CACHE", False)  # set by codegen.loader when it runs this file
_OPTS = dict(cache=CACHE, error_model="numpy")

# Bernoulli numbers B_2, B_4, ..., B_16 (the asymptotic series of the polygamma functions)
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)


@njit(**_OPTS)
def _polygamma_large(n, x):
  """psi^(n)(x) for x >= 10 + n by its asymptotic series (8 Bernoulli terms: relative
  error below 1e-16 there)."""
  if n == 0:
    s = math.log(x) - 0.5 / x
    z = 1.0 / (x * x)
    p = z
    for k in range(len(_BERNOULLI)):
      s -= _BERNOULLI[k] / (2 * (k + 1)) * p
      p *= z
    return s
  # (-1)^(n+1) [(n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B_2k (2k+n-1)!/(2k)! / x^(2k+n)]
  fact = math.gamma(n)  # (n-1)!
  xn = x**n
  s = fact / xn + fact * n / (2.0 * xn * x)
  ratio = fact * n * (n + 1) / 2.0  # (2k+n-1)!/(2k)! for k = 1
  p = xn * x * x
  for k in range(len(_BERNOULLI)):
    s += _BERNOULLI[k] * ratio / p
    ratio *= (2 * k + n + 2) * (2 * k + n + 3) / ((2 * k + 3) * (2 * k + 4))
    p *= x * x
  return s if n % 2 == 1 else -s


@njit(**_OPTS)
def _polygamma_positive(n, x):
  """psi^(n)(x), x > 0: shifted up by psi^(n)(x) = psi^(n)(x+1) - (-1)^n n! / x^(n+1)."""
  fact = math.gamma(n + 1)  # n!
  sign = 1.0 if n % 2 == 0 else -1.0
  acc = 0.0
  while x < 10.0 + n:
    acc -= sign * fact / x ** (n + 1)
    x += 1.0
  return acc + _polygamma_large(n, x)


@njit(**_OPTS)
def _cot_derivative(n, c):
  """d^n/du^n cot(u) as a polynomial in c = cot(u): P_0 = c, P_(k+1) = -(1 + c^2) P_k'."""
  coef = np.zeros(n + 2)
  coef[1] = 1.0
  for _ in range(n):
    new = np.zeros(n + 2)
    for j in range(1, n + 2):
      if coef[j] != 0.0:
        new[j - 1] -= j * coef[j]
        if j + 1 < n + 2:
          new[j + 1] -= j * coef[j]
    coef = new
  s = 0.0
  for j in range(n + 1, -1, -1):
    s = s * c + coef[j]
  return s


@njit(**_OPTS)
def polygamma_f64(n, x):
  """psi^(n)(x) (n = 0: digamma) as scipy.special.polygamma: nan at NaN, at -inf and at
  negative integers for n = 0; a pole at 0 (-inf for n = 0, inf for odd n). Negative x
  by the reflection psi^(n)(x) = (-1)^n psi^(n)(1-x) - pi^(n+1) d^n/du^n cot(u)."""
  if x != x or (x == -math.inf and n == 0):
    return math.nan
  if x == -math.inf:
    return math.inf if n % 2 == 1 else -math.inf
  if x == math.inf:
    return math.inf if n == 0 else 0.0
  if x <= 0.0 and x == math.floor(x):  # poles: scipy's values
    if n == 0:  # digamma(+-0) = -+inf
      return -math.copysign(math.inf, x) if x == 0.0 else math.nan
    return math.inf if n % 2 == 1 else -math.inf
  if x > 0.0:
    return _polygamma_positive(n, x)
  r = x - math.floor(x + 0.5)  # cot(pi x) = cot(pi r), r in [-1/2, 1/2], exactly
  c = math.cos(math.pi * r) / math.sin(math.pi * r)
  mirrored = _polygamma_positive(n, 1.0 - x)
  return (1.0 if n % 2 == 0 else -1.0) * mirrored - math.pi ** (n + 1) * _cot_derivative(n, c)


@njit(**_OPTS)
def gammaln_f64(x):
  """log |Γ(x)| as scipy.special.gammaln: libm's, but -inf at -inf (scipy's value)."""
  return -math.inf if x == -math.inf else math.lgamma(x)


_TWO_OVER_SQRT_PI = 1.1283791670955126


@njit(**_OPTS)
def _erfinv_guess(w):
  """erfinv(x) / x from w = -log((1 - x)(1 + x)): a single-precision approximation
  (Giles 2010) that Halley's iteration refines."""
  if w < 5.0:
    w -= 2.5
    p = 2.81022636e-08
    p = 3.43273939e-07 + p * w
    p = -3.5233877e-06 + p * w
    p = -4.39150654e-06 + p * w
    p = 0.00021858087 + p * w
    p = -0.00125372503 + p * w
    p = -0.00417768164 + p * w
    p = 0.246640727 + p * w
    return 1.50140941 + p * w
  w = math.sqrt(w) - 3.0
  p = -0.000200214257
  p = 0.000100950558 + p * w
  p = 0.00134934322 + p * w
  p = -0.00367342844 + p * w
  p = 0.00573950773 + p * w
  p = -0.0076224613 + p * w
  p = 0.00943887047 + p * w
  p = 1.00167406 + p * w
  return 2.83297682 + p * w


@njit(**_OPTS)
def _refine(y, target, complement):
  """Halley's iteration for erf(y) = target (or erfc(y) = target, `complement`): both
  have f''/(2 f') = -y, so a step is y - s / (1 + y s) with s = f / f'."""
  for _ in range(10):
    if complement:
      s = -(math.erfc(y) - target) / (_TWO_OVER_SQRT_PI * math.exp(-y * y))
    else:
      s = (math.erf(y) - target) / (_TWO_OVER_SQRT_PI * math.exp(-y * y))
    step = s / (1.0 + y * s)
    y -= step
    if abs(step) <= 1e-16 * abs(y):
      break
  return y


@njit(**_OPTS)
def _log_erfc_tail(y):
  """log erfc(y) for y > 26 (erfc is subnormal there): -y^2 - log(y sqrt(pi)) + log of
  the asymptotic series 1 - 1/(2y^2) + 3/(4y^4) - ..., 8 terms (error below 1e-20)."""
  w = 1.0 / (2.0 * y * y)
  term, series = 1.0, 1.0
  for k in range(1, 8):
    term *= -(2 * k - 1) * w
    series += term
  return -y * y - math.log(y * math.sqrt(math.pi)) + math.log(series)


@njit(**_OPTS)
def _erfc_inverse_tail(c):
  """erfc(y) = c for c < 1e-300 (y > 26.2): Newton's method on log erfc(y) = log(c)."""
  target = math.log(c)
  t = -target
  y = math.sqrt(t - math.log(math.sqrt(math.pi * t)))
  for _ in range(20):
    step = (_log_erfc_tail(y) - target) / (-2.0 * y - 1.0 / y)
    y -= step
    if abs(step) <= 1e-16 * y:
      break
  return y


@njit(**_OPTS)
def _erfc_inverse(c):
  """y >= 0 with erfc(y) = c, 0 < c <= 1/2 (solved on erfc: no cancellation near 1). Below
  1e-6 the guess is the tail's, from erfc(y) ~ exp(-y^2) / (y sqrt(pi))."""
  if c < 1e-300:  # erfc(y) is subnormal near y: solved in logarithms
    return _erfc_inverse_tail(c)
  if c < 1e-6:
    t = -math.log(c)
    y = math.sqrt(t - math.log(math.sqrt(math.pi * t)))
  else:
    y = (1.0 - c) * _erfinv_guess(-math.log(c * (2.0 - c)))
  return _refine(y, c, True)


@njit(**_OPTS)
def erfinv_f64(x):
  """scipy.special.erfinv: nan outside [-1, 1], +-inf at +-1."""
  if x != x or abs(x) > 1.0:
    return math.nan
  if abs(x) == 1.0:
    return math.copysign(math.inf, x)
  if abs(x) <= 0.5:
    return _refine(x * _erfinv_guess(-math.log((1.0 - x) * (1.0 + x))), x, False)
  return math.copysign(_erfc_inverse(1.0 - abs(x)), x)  # 1 - |x| exact


@njit(**_OPTS)
def erfcinv_f64(c):
  """scipy.special.erfcinv: nan outside [0, 2], inf at 0, -inf at 2."""
  if c != c or c < 0.0 or c > 2.0:
    return math.nan
  if c == 0.0:
    return math.inf
  if c == 2.0:
    return -math.inf
  if 0.5 <= c <= 1.5:  # 1 - c exact: erfinv of it keeps its relative accuracy
    return erfinv_f64(1.0 - c)
  return _erfc_inverse(c) if c < 0.5 else -_erfc_inverse(2.0 - c)


# scipy.special's own C functions (`scipy.special.cython_special`) for the `special[name]`
# primitive: kernels call them by name, `SP_J0(x, np.int32(0))` (the last argument is
# Cython's dispatch flag), and `codegen.loader.link_library` gives LLVM their addresses in
# each process, so that cached machine code holds the name, never an address (their
# symbols: codegen.kernels.FOREIGN).
for _name, _arity in SPECIAL_ARITY.items():
  globals()[f"SP_{_name.upper()}"] = types.ExternalFunction(
    f"primc_scipy_{_name}", types.float64(*[types.float64] * _arity, types.int32)
  )
