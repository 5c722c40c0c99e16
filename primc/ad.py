"""Autodiff by program transformation.

Forward mode is the JVP transform of a program (`jvp_program`), using one linearize rule per
primitive (`jvp_rules`), each written in primitives. `linearize` splits the JVP program by
partial evaluation into a primal program (which also returns residuals) and a linear program
in the tangents. Reverse mode transposes the linear program (`transpose_program`) with one
transpose rule per linear primitive (`transpose_rules`). Every transform is
`Program -> Program` and emits primitives only, so the transforms compose to any order.

Missing tangents and cotangents are symbolic (`Zero`): they cost nothing and are
materialized only at a program boundary. Non-differentiable primitives (comparisons,
`sign`, `stop_gradient`, `iota`, `full`) have zero derivative by definition.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from primc import prims as P
from primc.core import (
  Eqn,
  Frozen,
  Lit,
  Primitive,
  PrimcError,
  Program,
  ShapedArray,
  Var,
  results,
  running,
  run,
  without_gc,
)
from primc.trace import aval_of, eval_program, literal, trace_flat

jvp_rules: dict[Primitive, Callable] = {}  # (primals, tangents, **params) -> (out, t_out)
transpose_rules: dict[Primitive, Callable] = {}  # (ct, *invals, **params) -> [ct | None, ...]
# reverse mode on values (`primc.tape`) by a primitive's own rule, where its equation's
# parameters are made anew at every call (a custom_vjp's fwd and bwd, the user's Python):
# (values, active mask, **params) -> (outputs, backward) or None; backward(cotangents of
# the float outputs) -> cotangents of the inputs marked active
value_vjp_rules: dict[Primitive, Callable] = {}


class _Typed(Frozen):
  """A placeholder of an abstract value, equal to another of its class and value."""

  _fields = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.__dict__["aval"] = aval

  def __eq__(self, other):
    return type(other) is type(self) and other.aval == self.aval

  def __hash__(self):
    return hash((type(self), self.aval))


class Zero(_Typed):
  """A symbolic zero tangent or cotangent."""


class UndefinedPrimal(_Typed):
  """A linear input of an equation being transposed."""


def instantiate(t, aval: ShapedArray | None = None):
  return P.zeros(t.aval) if isinstance(t, Zero) else t


def add_tangents(a, b):
  if isinstance(a, Zero):
    return b
  if isinstance(b, Zero):
    return a
  return P.add(a, b)


def is_undefined(x) -> bool:
  return isinstance(x, UndefinedPrimal)


# ---------------------------------------------------------------------------------------
# Rule helpers: one per rule shape.


def defjvp(prim: Primitive, *fns):
  """Per-argument JVP: `fns[i](t_i, out, *primals, **params)` is the contribution of
  argument i's tangent (None: not differentiable in that argument); they are summed."""

  def rule(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    t_out = Zero(aval_of(out))
    if not aval_of(out).is_float:
      return out, t_out
    for fn, t in zip(fns, tangents):
      if fn is not None and not isinstance(t, Zero):
        t_out = add_tangents(t_out, fn(t, out, *primals, **params))
    return out, t_out

  jvp_rules[prim] = rule


def deflinear(prim: Primitive, transpose_rule):
  """A primitive linear in the arguments it declares (`prim.linear`): its JVP applies it to
  the tangents (missing ones materialized as zeros unless all are missing)."""
  assert prim.linear is not None, f"{prim.name} declares no linear arguments"

  def rule(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    lin = range(len(primals)) if prim.linear == "all" else prim.linear
    if all(isinstance(tangents[i], Zero) for i in lin) or not aval_of(out).is_float:
      return out, Zero(aval_of(out))
    args = [instantiate(tangents[i]) if i in lin else primals[i] for i in range(len(primals))]
    return out, prim.bind(*args, **params)

  jvp_rules[prim] = rule
  transpose_rules[prim] = transpose_rule


def defbilinear(prim: Primitive, lhs_rule, rhs_rule):
  """`prim(x, y)` linear in each argument: JVP is `prim(tx, y) + prim(x, ty)`; the transpose
  takes the cotangent to whichever argument is the linear one."""
  defjvp(
    prim,
    lambda t, out, x, y, **p: prim.bind(t, y, **p),
    lambda t, out, x, y, **p: prim.bind(x, t, **p),
  )

  def transpose(ct, x, y, **params):
    if is_undefined(x) and is_undefined(y):
      raise PrimcError(f"{prim.name} of two linear inputs is not linear")
    if is_undefined(x):
      return [lhs_rule(ct, x, y, **params), None]
    return [None, rhs_rule(ct, x, y, **params)]

  transpose_rules[prim] = transpose


def _one(x, v=1):
  return P.scalar_like(v, x)


# ---------------------------------------------------------------------------------------
# Elementwise rules

defjvp(P.exp_p, lambda t, out, x: P.mul(t, out))
defjvp(P.log_p, lambda t, out, x: P.div(t, x))
defjvp(P.sin_p, lambda t, out, x: P.mul(t, P.cos(x)))
defjvp(P.cos_p, lambda t, out, x: P.neg(P.mul(t, P.sin(x))))
defjvp(P.tanh_p, lambda t, out, x: P.mul(t, P.sub(_one(out), P.mul(out, out))))
defjvp(P.sqrt_p, lambda t, out, x: P.div(t, P.mul(_one(out, 2), out)))
defjvp(P.abs_p, lambda t, out, x: P.mul(t, P.sign(x)))


def _one_minus_sq(x):  # (1 - x)(1 + x): 1 - x*x without its cancellation near |x| = 1
  return P.mul(P.sub(_one(x), x), P.add(_one(x), x))


defjvp(P.tan_p, lambda t, out, x: P.mul(t, P.add(_one(out), P.mul(out, out))))
defjvp(P.sinh_p, lambda t, out, x: P.mul(t, P.cosh(x)))
defjvp(P.cosh_p, lambda t, out, x: P.mul(t, P.sinh(x)))
defjvp(P.arcsin_p, lambda t, out, x: P.div(t, P.sqrt(_one_minus_sq(x))))
defjvp(P.arccos_p, lambda t, out, x: P.neg(P.div(t, P.sqrt(_one_minus_sq(x)))))
defjvp(P.arctan_p, lambda t, out, x: P.div(t, P.add(_one(x), P.mul(x, x))))
defjvp(P.arcsinh_p, lambda t, out, x: P.div(t, P.sqrt(P.add(_one(x), P.mul(x, x)))))
defjvp(P.arccosh_p, lambda t, out, x: P.div(t, P.sqrt(P.mul(P.sub(x, _one(x)), P.add(x, _one(x))))))
defjvp(P.arctanh_p, lambda t, out, x: P.div(t, _one_minus_sq(x)))
defjvp(P.log1p_p, lambda t, out, x: P.div(t, P.add(_one(x), x)))
defjvp(P.expm1_p, lambda t, out, x: P.mul(t, P.add(out, _one(out))))
defjvp(P.log2_p, lambda t, out, x: P.div(t, P.mul(x, _one(x, np.log(2.0)))))
defjvp(P.log10_p, lambda t, out, x: P.div(t, P.mul(x, _one(x, np.log(10.0)))))
defjvp(P.exp2_p, lambda t, out, x: P.mul(t, P.mul(out, _one(out, np.log(2.0)))))

# scipy.special's functions: d erf = 2/sqrt(pi) exp(-x^2); d erfinv = sqrt(pi)/2 exp(out^2);
# d gammaln = digamma = polygamma(0); d polygamma(n) = polygamma(n + 1)
_gauss = lambda x: P.mul(_one(x, 2 / np.sqrt(np.pi)), P.exp(P.neg(P.mul(x, x))))
_inverse_gauss = lambda out: P.mul(_one(out, np.sqrt(np.pi) / 2), P.exp(P.mul(out, out)))
defjvp(P.erf_p, lambda t, out, x: P.mul(t, _gauss(x)))
defjvp(P.erfc_p, lambda t, out, x: P.neg(P.mul(t, _gauss(x))))
defjvp(P.erfinv_p, lambda t, out, x: P.mul(t, _inverse_gauss(out)))
defjvp(P.erfcinv_p, lambda t, out, x: P.neg(P.mul(t, _inverse_gauss(out))))
defjvp(P.gammaln_p, lambda t, out, x: P.mul(t, P.polygamma_p.bind(x, n=0)))
defjvp(P.gamma_p, lambda t, out, x: P.mul(t, P.mul(out, P.polygamma_p.bind(x, n=0))))
defjvp(P.polygamma_p, lambda t, out, x, *, n: P.mul(t, P.polygamma_p.bind(x, n=n + 1)))


# scipy.special's other functions (`special[name]`): the derivative in the last operand (x)
# from formulas in the same family; in the others (a Bessel order, gammainc's a) it is not
# supported: an error, never a zero
def _sp(name, *xs):
  return P.special_p.bind(*xs, name=name)


def _half(x):
  return P.mul(x, _one(x, 0.5))


def _shift(v, k):
  return P.add(v, _one(v, k))


def _log_power_density(a, x):  # x^(a-1) e^(-x) / Gamma(a), in logs
  return P.sub(P.sub(P.mul(_shift(a, -1), P.log(x)), x), P.gammaln_p.bind(a))


def _log_beta_density(a, b, x):  # x^(a-1) (1-x)^(b-1) / B(a, b), in logs
  betaln = P.sub(P.add(P.gammaln_p.bind(a), P.gammaln_p.bind(b)), P.gammaln_p.bind(P.add(a, b)))
  return P.sub(
    P.add(P.mul(_shift(a, -1), P.log(x)), P.mul(_shift(b, -1), P.log1p_p.bind(P.neg(x)))), betaln
  )


def _recurrence(name, sign):  # (f(v-1, x) + sign f(v+1, x)) / 2
  return lambda out, v, x: _half(
    (P.add if sign > 0 else P.sub)(_sp(name, _shift(v, -1), x), _sp(name, _shift(v, 1), x))
  )


_SPECIAL_DERIVATIVES = {  # name -> (out, *operands) -> d out / d (last operand)
  "j0": lambda out, x: P.neg(_sp("j1", x)),
  "j1": lambda out, x: _half(P.sub(_sp("j0", x), _sp("jv", _one(x, 2), x))),
  "y0": lambda out, x: P.neg(_sp("y1", x)),
  "y1": lambda out, x: _half(P.sub(_sp("y0", x), _sp("yv", _one(x, 2), x))),
  "i0": lambda out, x: _sp("i1", x),
  "i1": lambda out, x: _half(P.add(_sp("i0", x), _sp("iv", _one(x, 2), x))),
  "i0e": lambda out, x: P.sub(_sp("i1e", x), P.mul(P.sign(x), out)),
  "i1e": lambda out, x: P.sub(
    _half(P.add(_sp("i0e", x), _sp("ive", _one(x, 2), x))), P.mul(P.sign(x), out)
  ),
  "k0": lambda out, x: P.neg(_sp("k1", x)),
  "k1": lambda out, x: P.neg(_half(P.add(_sp("k0", x), _sp("kv", _one(x, 2), x)))),
  "k0e": lambda out, x: P.sub(out, _sp("k1e", x)),
  "k1e": lambda out, x: P.sub(out, _half(P.add(_sp("k0e", x), _sp("kve", _one(x, 2), x)))),
  "jv": _recurrence("jv", -1),
  "yv": _recurrence("yv", -1),
  "iv": _recurrence("iv", 1),
  "ive": lambda out, v, x: P.sub(_recurrence("ive", 1)(out, v, x), P.mul(P.sign(x), out)),
  "kv": lambda out, v, x: P.neg(_recurrence("kv", 1)(out, v, x)),
  "kve": lambda out, v, x: P.sub(out, _recurrence("kve", 1)(out, v, x)),
  "gammasgn": lambda out, x: P.zeros(aval_of(out)),  # piecewise constant
  "exp1": lambda out, x: P.neg(P.div(P.exp(P.neg(x)), x)),
  "expi": lambda out, x: P.div(P.exp(x), x),
  "dawsn": lambda out, x: P.sub(_one(x), P.mul(_one(x, 2), P.mul(x, out))),
  "gammainc": lambda out, a, x: P.exp(_log_power_density(a, x)),
  "gammaincc": lambda out, a, x: P.neg(P.exp(_log_power_density(a, x))),
  "gammaincinv": lambda out, a, y: P.exp(P.neg(_log_power_density(a, out))),
  "gammainccinv": lambda out, a, y: P.neg(P.exp(P.neg(_log_power_density(a, out)))),
  "betainc": lambda out, a, b, x: P.exp(_log_beta_density(a, b, x)),
  "betaincinv": lambda out, a, b, y: P.exp(P.neg(_log_beta_density(a, b, out))),
}


def _special_operand(i):
  def rule(t, out, *xs, name):
    if i != len(xs) - 1:
      raise PrimcError(
        f"scipy.special.{name}: the derivative with respect to operand {i} "
        f"(of {len(xs)}) is not supported, only in the last one"
      )
    return P.mul(t, _SPECIAL_DERIVATIVES[name](out, *xs))

  return rule


defjvp(P.special_p, *map(_special_operand, range(3)))


def _sum_of_squares(x, y):
  return P.add(P.mul(x, x), P.mul(y, y))


defjvp(
  P.arctan2_p,
  lambda t, out, y, x: P.mul(t, P.div(x, _sum_of_squares(x, y))),
  lambda t, out, y, x: P.neg(P.mul(t, P.div(y, _sum_of_squares(x, y)))),
)
# fmod(x, y) = x - q y with q = trunc(x / y) piecewise constant: d/dx = 1, d/dy = -q
defjvp(
  P.fmod_p, lambda t, out, x, y: t, lambda t, out, x, y: P.neg(P.mul(t, P.div(P.sub(x, out), y)))
)
defjvp(
  P.hypot_p,
  lambda t, out, x, y: P.mul(t, P.div(x, out)),
  lambda t, out, x, y: P.mul(t, P.div(y, out)),
)
defjvp(
  P.logaddexp_p,
  lambda t, out, x, y: P.mul(t, P.exp(P.sub(x, out))),
  lambda t, out, x, y: P.mul(t, P.exp(P.sub(y, out))),
)
# nextafter(x, y) moves x by one ulp towards y: d/dx = 1, y only chooses the direction
defjvp(P.nextafter_p, lambda t, out, x, y: t, None)
defjvp(P.add_p, lambda t, out, x, y: t, lambda t, out, x, y: t)
defjvp(P.sub_p, lambda t, out, x, y: t, lambda t, out, x, y: P.neg(t))
defjvp(
  P.div_p, lambda t, out, x, y: P.div(t, y), lambda t, out, x, y: P.neg(P.mul(t, P.div(out, y)))
)


def _pow_dx(t, out, x, y):
  # y * x**(y-1), defined as 0 where y == 0 (so 0**0 has derivative 0, not nan)
  d = P.mul(y, P.pow_(x, P.sub(y, _one(y))))
  return P.mul(t, P.select(P.eq(y, _one(y, 0)), _one(y, 0), d))


def _pow_dy(t, out, x, y):
  # log(x) * x**y, defined as 0 where x == 0
  return P.mul(t, P.select(P.eq(x, _one(x, 0)), _one(x, 0), P.mul(P.log(x), out)))


defjvp(P.pow_p, _pow_dx, _pow_dy)


def _max_weight(x, y, strict_cmp):
  # 1 where x wins, 0.5 on ties, 0 where y wins: ties split the derivative evenly.
  win = P.convert(strict_cmp(x, y), aval_of(x).dtype)
  tie = P.convert(P.eq(x, y), aval_of(x).dtype)
  return P.add(win, P.mul(tie, _one(x, 0.5)))


defjvp(
  P.max_p,
  lambda t, out, x, y: P.mul(t, _max_weight(x, y, P.gt)),
  lambda t, out, x, y: P.mul(t, _max_weight(y, x, P.gt)),
)
defjvp(
  P.min_p,
  lambda t, out, x, y: P.mul(t, _max_weight(x, y, P.lt)),
  lambda t, out, x, y: P.mul(t, _max_weight(y, x, P.lt)),
)

for _p in P.with_trait("nondifferentiable"):
  defjvp(_p)  # zero derivative by definition

# ---------------------------------------------------------------------------------------
# Linear algebra: d inv = -inv da inv; d solve(a, b) = solve(a, db - da x);
# d log|det a| = trace(solve(a, da)); d det = det * that. The rules are written in the
# primitives themselves, so every order follows.


def _bmm(x, y):
  """Batched matrix product over the last two axes."""
  nd = aval_of(x).ndim
  batch = tuple(range(nd - 2))
  return P.dot_general(x, y, (((nd - 1,), (nd - 2,)), (batch, batch)))


def _mT(x):
  """The last two axes swapped."""
  nd = aval_of(x).ndim
  return P.transpose(x, list(range(nd - 2)) + [nd - 1, nd - 2])


def _rows_cols(x):
  """Each element's row and column index (iotas over the last two axes of x's shape)."""
  shape = aval_of(x).shape
  return P.iota(shape, len(shape) - 2), P.iota(shape, len(shape) - 1)


def _on_diagonal(x):
  row, col = _rows_cols(x)
  return P.eq(row, col)


def _where(mask, x, value=0):
  return P.select(mask, x, P.full(aval_of(x).shape, value, aval_of(x).dtype))


def _along_columns(w, shape):
  """w (..., k) broadcast to `shape` (..., r, k): w[..., j] down column j."""
  nd = len(shape)
  return P.broadcast_in_dim(w, shape, tuple(range(nd - 2)) + (nd - 1,))


def _inverse_gaps(w, shape):
  """F with F_ij = 1 / (w_j - w_i) off the diagonal and 0 on it (w: (..., k)): the factor
  of the eigenvector and singular-vector derivatives (infinite at repeated values)."""
  wj = _along_columns(w, shape)
  gap = P.sub(wj, _mT(wj))
  diagonal = _on_diagonal(gap)
  return P.select(
    diagonal, P.zeros(aval_of(gap)), P.div(_one(gap), P.select(diagonal, _one(gap), gap))
  )


def _trace_last2(x):
  nd = aval_of(x).ndim
  return P.reduce_sum(_where(_on_diagonal(x), x), (nd - 2, nd - 1))


def _dlogdet(t, a):
  return _trace_last2(P.solve_p.bind(a, t))


defjvp(P.inv_p, lambda t, out, a: P.neg(_bmm(_bmm(out, t), out)))
defjvp(
  P.solve_p,
  lambda t, out, a, b: P.neg(P.solve_p.bind(a, _bmm(t, out))),
  lambda t, out, a, b: P.solve_p.bind(a, t),
)
defjvp(P.det_p, lambda t, out, a: P.mul(out, _dlogdet(t, a)))


def _solve_transpose(ct, a, b):
  """solve(a, .) is linear in b: its transpose solves with a's transpose."""
  if is_undefined(a):
    raise PrimcError("solve is not linear in its matrix")
  return [None, P.solve_p.bind(_mT(a), ct)]


transpose_rules[P.solve_p] = _solve_transpose


def _slogdet_jvp(t, out, a):
  d = _dlogdet(t, a)  # the sign's derivative is zero
  shape = aval_of(out).shape
  return P.concatenate(
    [P.full(shape[:-1] + (1,), 0, aval_of(out).dtype), P.reshape(d, shape[:-1] + (1,))],
    len(shape) - 1,
  )


defjvp(P.slogdet_p, _slogdet_jvp)


# cholesky, eigh, qr, triangular_solve. Matrices reaching cholesky_p and eigh_p are
# symmetric (primc.numpy builds them from the lower triangle, as LAPACK reads them), so
# their tangents are too. Formulas: dL = L phi(L^-1 dA L^-T) (phi: the lower triangle,
# its diagonal halved); dw = diag(V^T dA V), dV = V (F * V^T dA V) with
# F_ij = 1 / (w_j - w_i) off the diagonal (infinite at repeated eigenvalues, as in every
# framework); QR (m >= n): C = Q^T dA R^-1, O = tril(C, -1) - tril(C, -1)^T,
# dQ = Q (O - C) + dA R^-1, dR = (C - O) R.


def _trisolve(a, b, lower, transpose_a=False):
  return P.triangular_solve_p.bind(a, b, lower=lower, transpose_a=transpose_a)


def _cholesky_jvp(t, out, a):
  x = _trisolve(out, _mT(_trisolve(out, t, True)), True)  # L^-1 dA L^-T
  phi = P.add(
    _triangle(x, lower=True, strict=True), _where(_on_diagonal(x), P.mul(x, _one(x, 0.5)))
  )
  return _bmm(out, phi)


def _eigh_jvp(t, out, a):
  shape = aval_of(out).shape
  nd, n = len(shape), shape[-1]
  w = P.reshape(P.slice_(out, (0,) * nd, shape[:-2] + (1, n)), shape[:-2] + (n,))
  v = P.slice_(out, (0,) * (nd - 2) + (1, 0), shape)  # (..., n, n)
  m = _bmm(_mT(v), _bmm(t, v))
  dw = P.reduce_sum(_where(_on_diagonal(m), m), (nd - 2,))
  dv = _bmm(v, P.mul(_inverse_gaps(w, aval_of(m).shape), m))
  return P.concatenate([P.reshape(dw, shape[:-2] + (1, n)), dv], nd - 2)


def _qr_jvp(t, out, a):
  shape = aval_of(a).shape
  nd, (m, n) = len(shape), shape[-2:]
  if m < n:
    raise PrimcError(
      f"the derivative of qr needs a matrix with at least as many rows as columns, got {shape}"
    )
  start = (0,) * nd
  q = P.slice_(out, start, shape[:-2] + (m, n))
  r = P.slice_(out, start[:-2] + (m, 0), shape[:-2] + (m + n, n))
  x = _mT(_trisolve(r, _mT(t), False, True))  # dA R^-1
  c = _bmm(_mT(q), x)
  low = _triangle(c, lower=True, strict=True)
  omega = P.sub(low, _mT(low))
  dq = P.add(_bmm(q, P.sub(omega, c)), x)
  dr = _bmm(P.sub(c, omega), r)
  return P.concatenate([dq, dr], nd - 2)


def _triangle(a, lower, strict=False):
  """a's lower (or upper) triangle, without the diagonal if `strict`, zeros elsewhere."""
  row, col = _rows_cols(a)
  above, below = (col, row) if lower else (row, col)
  return _where((P.gt_p if strict else P.ge_p).bind(below, above), a)


def _trisolve_da(t, out, a, b, *, lower, transpose_a):
  da = _triangle(t, lower)
  return P.neg(_trisolve(a, _bmm(_mT(da) if transpose_a else da, out), lower, transpose_a))


def _trisolve_transpose(ct, a, b, *, lower, transpose_a):
  if is_undefined(a):
    raise PrimcError("triangular_solve is not linear in its matrix")
  return [None, _trisolve(a, ct, lower, not transpose_a)]


def _scale_columns(x, w):
  """x (..., r, k) with column j multiplied by w[..., j] (w: (..., k))."""
  return P.mul(x, _along_columns(w, aval_of(x).shape))


def _svd_jvp(t, out, a):
  """Reduced SVD, distinct nonzero singular values: with dP = U^T dA V, ds = diag(dP),
  F_ij = 1 / (s_j^2 - s_i^2) off the diagonal,
  dU = U (F o (dP S + S dP^T)) + (dA V - U dP) S^-1,
  dV = V (F o (S dP + dP^T S)) + (dA^T U - V dP^T) S^-1."""
  shape = aval_of(a).shape
  nd, (m, n) = len(shape), shape[-2:]
  lead = shape[:-2]
  rows, k = P.svd_shapes(m, n)
  start = (0,) * nd
  u = P.slice_(out, start, lead + (m, k))
  s = P.reshape(P.slice_(out, start[:-2] + (m, 0), lead + (m + 1, k)), lead + (k,))
  v = P.slice_(out, start[:-2] + (m + 1, 0), lead + (rows, k))
  dp = _bmm(_mT(u), _bmm(t, v))
  ds = P.reduce_sum(_where(_on_diagonal(dp), dp), (nd - 2,))
  f = _inverse_gaps(P.mul(s, s), aval_of(dp).shape)
  dp_s, s_dp = _scale_columns(dp, s), _mT(_scale_columns(_mT(dp), s))  # dP S, S dP
  inv_s = P.div(_one(s), s)
  du = P.add(
    _bmm(u, P.mul(f, P.add(dp_s, _mT(dp_s)))), _scale_columns(P.sub(_bmm(t, v), _bmm(u, dp)), inv_s)
  )
  dv = P.add(
    _bmm(v, P.mul(f, P.add(s_dp, _mT(s_dp)))),
    _scale_columns(P.sub(_bmm(_mT(t), u), _bmm(v, _mT(dp))), inv_s),
  )
  return P.concatenate([du, P.reshape(ds, lead + (1, k)), dv], nd - 2)


def _pinv_jvp(t, out, a, *, rcond):
  """Constant rank: dA+ = -A+ dA A+ + A+ A+^T dA^T (I - A A+) + (I - A+ A) dA^T A+^T A+."""
  p, dt = out, _mT(t)
  first = P.neg(_bmm(p, _bmm(t, p)))
  p_pt = _bmm(p, _mT(p))
  second = P.sub(_bmm(p_pt, dt), _bmm(_bmm(p_pt, dt), _bmm(a, p)))
  pt_p = _bmm(_mT(p), p)
  third = P.sub(_bmm(dt, pt_p), _bmm(_bmm(p, a), _bmm(dt, pt_p)))
  return P.add(first, P.add(second, third))


defjvp(P.svd_p, _svd_jvp)
defjvp(P.pinv_p, _pinv_jvp)
defjvp(P.cholesky_p, _cholesky_jvp)
defjvp(P.eigh_p, _eigh_jvp)
defjvp(P.qr_p, _qr_jvp)
defjvp(
  P.triangular_solve_p, _trisolve_da, lambda t, out, a, b, **p: P.triangular_solve_p.bind(a, t, **p)
)
transpose_rules[P.triangular_solve_p] = _trisolve_transpose


deflinear(P.neg_p, lambda ct, x: [P.neg(ct)])
transpose_rules[P.add_p] = lambda ct, x, y: [
  ct if is_undefined(x) else None,
  ct if is_undefined(y) else None,
]
transpose_rules[P.sub_p] = lambda ct, x, y: [
  ct if is_undefined(x) else None,
  P.neg(ct) if is_undefined(y) else None,
]
defbilinear(P.mul_p, lambda ct, x, y: P.mul(ct, y), lambda ct, x, y: P.mul(x, ct))


def _div_transpose(ct, x, y):
  if is_undefined(y):
    raise PrimcError("div is not linear in its denominator")
  return [P.div(ct, y), None]


transpose_rules[P.div_p] = _div_transpose


def _convert_jvp(primals, tangents, *, new_dtype):
  (x,), (t,) = primals, tangents
  out = P.convert(x, new_dtype)
  if isinstance(t, Zero) or not aval_of(out).is_float:
    return out, Zero(aval_of(out))
  return out, P.convert(t, new_dtype)


jvp_rules[P.convert_p] = _convert_jvp
transpose_rules[P.convert_p] = lambda ct, x, *, new_dtype: [P.convert(ct, x.aval.dtype)]


def _select_transpose(ct, pred, on_true, on_false):
  zeros = P.zeros(aval_of(ct))
  return [
    None,
    P.select(pred, ct, zeros) if is_undefined(on_true) else None,
    P.select(pred, zeros, ct) if is_undefined(on_false) else None,
  ]


deflinear(P.select_p, _select_transpose)

# ---------------------------------------------------------------------------------------
# Structural rules


def _broadcast_transpose(ct, x, *, shape, broadcast_dimensions):
  kept = [d for i, d in enumerate(broadcast_dimensions) if x.aval.shape[i] == shape[d]]
  summed = [d for d in range(len(shape)) if d not in kept]
  out = P.reduce_sum(ct, summed) if summed else ct
  return [P.reshape(out, x.aval.shape) if aval_of(out).shape != x.aval.shape else out]


deflinear(P.broadcast_in_dim_p, _broadcast_transpose)
deflinear(P.reshape_p, lambda ct, x, *, new_sizes: [P.reshape(ct, x.aval.shape)])
deflinear(P.transpose_p, lambda ct, x, *, permutation: [P.transpose(ct, np.argsort(permutation))])


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
  config = []
  for lo, st, n, m in zip(start_indices, strides, x.aval.shape, aval_of(ct).shape):
    used = m + max(0, m - 1) * (st - 1)
    config.append((lo, n - lo - used, st - 1))
  return [P.pad(ct, config)]


def _pad_transpose(ct, x, *, padding_config):
  start = [lo for lo, _, _ in padding_config]
  limit = [
    lo + max(0, (n - 1) * (it + 1) + 1) for (lo, _, it), n in zip(padding_config, x.aval.shape)
  ]
  return [P.slice_(ct, start, limit, [it + 1 for _, _, it in padding_config])]


deflinear(P.slice_p, _slice_transpose)
deflinear(P.pad_p, _pad_transpose)


def _concatenate_transpose(ct, *xs, dimension):
  out, offset = [], 0
  shape = aval_of(ct).shape
  for x in xs:
    n = (x.aval if is_undefined(x) else aval_of(x)).shape[dimension]
    if is_undefined(x):
      start = [0] * len(shape)
      limit = list(shape)
      start[dimension], limit[dimension] = offset, offset + n
      out.append(P.slice_(ct, start, limit))
    else:
      out.append(None)
    offset += n
  return out


deflinear(P.concatenate_p, _concatenate_transpose)
deflinear(
  P.gather_p,
  lambda ct, x, idx, *, axis, batch_dims: [
    P.scatter_add(P.zeros(x.aval), idx, ct, axis, batch_dims),
    None,
  ],
)
deflinear(
  P.scatter_add_p,
  lambda ct, x, idx, upd, *, axis, batch_dims: [
    ct if is_undefined(x) else None,
    None,
    P.gather(ct, idx, axis, batch_dims) if is_undefined(upd) else None,
  ],
)
deflinear(P.rev_p, lambda ct, x, *, dimensions: [P.rev(ct, dimensions)])
deflinear(
  P.roll_p,
  lambda ct, x, *, dimension, shift: [
    P.roll(ct, x.aval.shape[dimension] - shift, dimension)  # (rolled back)
  ],
)


def _windows_transpose(ct, x, *, window_dimensions, window_strides, window_dilation):
  """The windows' cotangents added back where each was read: per window offset, the
  cotangents of its windows padded into place (interior stride - 1), summed."""
  shape, nd = x.aval.shape, len(window_dimensions)
  lead, size = shape[: len(shape) - nd], shape[len(shape) - nd :]
  out = aval_of(ct).shape[len(lead) + nd :]
  total = None
  for ks in itertools.product(*(range(k) for k in window_dimensions)):
    start = (0,) * len(lead) + ks + (0,) * nd
    limit = (*lead, *(k + 1 for k in ks), *out)
    part = P.reshape(P.slice_(ct, start, limit), (*lead, *out))
    config = [(0, 0, 0)] * len(lead) + [
      (k * d, n - k * d - (o - 1) * s - 1, s - 1)
      for k, d, s, o, n in zip(ks, window_dilation, window_strides, out, size)
    ]
    term = P.pad(part, config)
    total = term if total is None else P.add(total, term)
  return [total]


deflinear(P.windows_p, _windows_transpose)

# ---------------------------------------------------------------------------------------
# Reductions and contractions


def _reduce_sum_transpose(ct, x, *, axes):
  kept = [d for d in range(len(x.aval.shape)) if d not in axes]
  return [P.broadcast_in_dim(ct, x.aval.shape, kept)]


deflinear(P.reduce_sum_p, _reduce_sum_transpose)


def _reduce_max_jvp(t, out, x, *, axes):
  # The tangent at the maximal entries, averaged over ties.
  kept = [d for d in range(aval_of(x).ndim) if d not in axes]
  mask = P.convert(P.eq(x, P.broadcast_in_dim(out, aval_of(x).shape, kept)), aval_of(x).dtype)
  return P.div(P.reduce_sum(P.mul(t, mask), axes), P.reduce_sum(mask, axes))


defjvp(P.reduce_max_p, _reduce_max_jvp)


def _reduce_prod_jvp(t, out, x, *, axes):
  # d prod = sum_i t_i * (the product of the others), found without dividing by x_i
  # (a zero among them is fine)
  return P.reduce_sum(P.mul(t, _product_of_others(x, axes)), axes)


def _product_of_others(x, axes):
  """At each element of `x`, the product of the other elements of its reduction along
  `axes`: the exclusive prefix times the exclusive suffix product over the reduced
  elements in C order (each a scan by doubling, log2(n) products)."""
  shape, dtype = aval_of(x).shape, aval_of(x).dtype
  if int(np.prod([shape[a] for a in axes])) <= 1:
    return P.full(shape, 1, dtype)
  flat, perm = P.axes_last(x, shape, axes)
  *rows, n = aval_of(flat).shape
  rows, last = list(rows), len(rows)
  suffix = P.rev(_exclusive_prefix_product(P.rev(flat, (last,)), rows, n), (last,))
  others = P.mul(_exclusive_prefix_product(flat, rows, n), suffix)
  return P.transpose(P.reshape(others, [shape[d] for d in perm]), np.argsort(perm))


def _exclusive_prefix_product(a, rows, n):
  """out[..., i] = prod(a[..., :i]) along the last axis (1 at i = 0)."""
  dtype, last = aval_of(a).dtype, len(rows)

  def shifted(v, step):  # v moved `step` places along, ones shifted in
    kept = P.slice_(v, [0] * last + [0], rows + [n - step])
    return P.concatenate([P.full(rows + [step], 1, dtype), kept], last)

  a, step = shifted(a, 1), 1
  while step < n:
    a = P.mul(a, shifted(a, step))
    step *= 2
  return a


defjvp(P.reduce_prod_p, _reduce_prod_jvp)


def _shifted(v, step: int, fill):
  """`v` moved `step` places along its last axis, its first `step` entries `fill`."""
  shape = aval_of(v).shape
  n, keep = shape[-1], [(0, 0, 0)] * (len(shape) - 1)
  out = P.pad(P.slice_(v, [0] * len(shape), [*shape[:-1], n - step]), keep + [(step, 0, 0)])
  if not fill:
    return out
  border = P.full([*shape[:-1], step], fill, aval_of(v).dtype)
  return P.add(out, P.pad(border, keep + [(0, n - step, 0)]))


def _cumprod_jvp(t, out, x):
  """The product rule along a doubling scan (prefix products by log2(n) products with a
  shifted copy): its association, not numpy's left-to-right one, which a derivative needs
  not match bit for bit; of primitives only, so every order differentiates it again."""
  a, step = x, 1
  while step < aval_of(x).shape[-1]:
    sa = _shifted(a, step, 1)
    t = P.add(P.mul(t, sa), P.mul(a, _shifted(t, step, 0)))
    a, step = P.mul(a, sa), 2 * step
  return t


defjvp(P.cumprod_p, _cumprod_jvp)
deflinear(P.cumsum_p, lambda ct, x: [_reversed_cumsum(ct)])


def _reversed_cumsum(ct):
  last = (len(aval_of(ct).shape) - 1,)
  return P.rev(P.cumsum(P.rev(ct, last)), last)


def _dot_transpose_lhs(ct, x_aval, y, dimension_numbers):
  """Cotangent of the lhs: contract ct's rhs-free dims with y's free dims, batch with
  batch; the result comes out as (batch, x_free, x_contracting) and is permuted into x's
  layout (no permutation at all for a plain matmul)."""
  (lc, rc), (lb, rb) = dimension_numbers
  nx = len(x_aval.shape)
  x_free = P._dot_free(nx, lc, lb)
  y_free = P._dot_free(aval_of(y).ndim, rc, rb)
  nb, nxf = len(lb), len(x_free)
  ct_yfree = tuple(range(nb + nxf, nb + nxf + len(y_free)))
  out = P.dot_general(ct, y, ((ct_yfree, tuple(y_free)), (tuple(range(nb)), rb)))
  y_rest = sorted(rc)  # y's dims left in `out`, in order: each pairs with one of lc
  pos = {d: i for i, d in enumerate(lb)}
  pos.update({d: nb + i for i, d in enumerate(x_free)})
  pos.update({dx: nb + nxf + y_rest.index(dy) for dx, dy in zip(lc, rc)})
  perm = [pos[d] for d in range(nx)]
  return P.transpose(out, perm) if perm != sorted(perm) else out


def _dot_transpose_rhs(ct, x, y_aval, dimension_numbers):
  """Cotangent of the rhs: contract x's free dims with ct's lhs-free dims; the result
  comes out as (batch, y_contracting, y_free) and is permuted into y's layout."""
  (lc, rc), (lb, rb) = dimension_numbers
  ny = len(y_aval.shape)
  x_free = P._dot_free(aval_of(x).ndim, lc, lb)
  y_free = P._dot_free(ny, rc, rb)
  nb, nxf = len(lb), len(x_free)
  ct_xfree = tuple(range(nb, nb + nxf))
  out = P.dot_general(x, ct, ((tuple(x_free), ct_xfree), (lb, tuple(range(nb)))))
  x_rest = sorted(lc)  # x's dims left in `out`, in order: each pairs with one of rc
  pos = {d: i for i, d in enumerate(rb)}
  pos.update({dy: nb + x_rest.index(dx) for dx, dy in zip(lc, rc)})
  pos.update({d: nb + len(lc) + i for i, d in enumerate(y_free)})
  perm = [pos[d] for d in range(ny)]
  return P.transpose(out, perm) if perm != sorted(perm) else out


defbilinear(
  P.dot_general_p,
  lambda ct, x, y, *, dimension_numbers: _dot_transpose_lhs(ct, x.aval, y, dimension_numbers),
  lambda ct, x, y, *, dimension_numbers: _dot_transpose_rhs(ct, x, y.aval, dimension_numbers),
)


def _conv_transpose_lhs(ct, x_aval, w, *, window_strides, rhs_dilation, feature_group_count):
  """Cotangent of conv's input: ct dilated by the strides and padded by the dilated window
  less one (plus the rows the forward never reached), convolved with the kernel flipped,
  its in and out channels swapped within each group."""
  g, w_aval = feature_group_count, aval_of(w)
  o, cg, *win = w_aval.shape
  nd, ct_sp = len(win), aval_of(ct).shape[2:]
  config = [(0, 0, 0), (0, 0, 0)]
  for n, k, s, d, m in zip(x_aval.shape[2:], win, window_strides, rhs_dilation, ct_sp):
    config.append(((k - 1) * d, n - (m - 1) * s - 1, s - 1))
  spatial = tuple(range(3, 3 + nd))
  wt = P.reshape(w, (g, o // g, cg, *win))
  wt = P.reshape(P.transpose(wt, (0, 2, 1) + spatial), (g * cg, o // g, *win))
  wt = P.rev(wt, tuple(range(2, 2 + nd)))
  return P.conv(P.pad(ct, config), wt, (1,) * nd, rhs_dilation, g)


def _conv_transpose_rhs(ct, x, w_aval, *, window_strides, rhs_dilation, feature_group_count):
  """Cotangent of conv's kernel: a convolution of the input (its channels of a group as the
  batch, the examples as channels) with ct as the kernel, strides and dilation swapped,
  cut to the window."""
  g, x_aval = feature_group_count, aval_of(x)
  n, c, *size = x_aval.shape
  o, cg, *win = w_aval.shape
  nd = len(win)
  spatial = tuple(range(3, 3 + nd))
  xt = P.transpose(P.reshape(x, (n, g, cg, *size)), (2, 1, 0) + spatial)
  xt = P.reshape(xt, (cg, g * n, *size))
  kt = P.transpose(ct, (1, 0) + tuple(range(2, 2 + nd)))
  out = P.conv(xt, kt, rhs_dilation, window_strides, g)  # (cg, o, *out)
  if aval_of(out).shape[2:] != tuple(win):
    out = P.slice_(out, (0,) * (2 + nd), (cg, o, *win))
  return P.transpose(out, (1, 0) + tuple(range(2, 2 + nd)))


defbilinear(
  P.conv_p,
  lambda ct, x, w, **params: _conv_transpose_lhs(ct, x.aval, w, **params),
  lambda ct, x, w, **params: _conv_transpose_rhs(ct, x, w.aval, **params),
)

# Primitives that are linear in some argument: each must have a transpose rule.
LINEAR_PRIMITIVES = tuple(p for p in P.ALL_PRIMITIVES if p.linear is not None)


# ---------------------------------------------------------------------------------------
# Program transforms


def _wrt_mask(program: Program, wrt) -> tuple[bool, ...]:
  if wrt is None:
    return tuple(v.aval.is_float for v in program.inputs)
  wrt = tuple(bool(w) for w in wrt)
  assert len(wrt) == len(program.inputs)
  for w, v in zip(wrt, program.inputs):
    if w and not v.aval.is_float:
      raise PrimcError(
        f"cannot differentiate with respect to an input of dtype {v.aval.dtype} "
        f"(only float32/float64 inputs have derivatives)"
      )
  return wrt


def jvp_eval(program: Program, primals: Sequence, tangents: Sequence) -> tuple[list, list]:
  """Evaluates `program` on (primal, tangent) pairs with `jvp_rules`; tangents may be Zero."""

  def apply(eqn, pairs):
    xs, ts = zip(*pairs) if pairs else ((), ())
    if eqn.prim not in jvp_rules:
      raise PrimcError(f"primitive {eqn.prim.name} has no JVP rule")
    out, t_out = jvp_rules[eqn.prim](xs, ts, **eqn.kw)
    return list(zip(out, t_out, strict=True)) if eqn.prim.multiple_results else [(out, t_out)]

  outs = run(
    program,
    list(zip(primals, tangents, strict=True)),
    apply,
    lit=lambda a: (literal(a), Zero(a.aval)),
  )
  return [x for x, _ in outs], [t for _, t in outs]


@without_gc
def jvp_program(program: Program, wrt: Sequence[bool] | None = None) -> Program:
  """Forward mode: the program `(*inputs, *tangents) -> (*outputs, *output_tangents)`.

  Args:
    program: the program to differentiate.
    wrt: one bool per input: which inputs get a tangent input (default: the float ones).
  Returns:
    A program whose inputs are the primal inputs then one tangent per `wrt` input, and whose
    outputs are the primal outputs then one tangent per float output (zeros materialized).
  """
  wrt = _wrt_mask(program, wrt)
  n = len(program.inputs)

  def fn(*args):
    it = iter(args[n:])
    tangents = [next(it) if w else Zero(v.aval) for w, v in zip(wrt, program.inputs)]
    outs, t_outs = jvp_eval(program, args[:n], tangents)
    return list(outs) + [instantiate(t) for t, a in zip(t_outs, program.out_avals) if a.is_float]

  avals = list(program.in_avals) + [v.aval for w, v in zip(wrt, program.inputs) if w]
  return trace_flat(fn, avals)[0]


@without_gc
def linearize_program(
  program: Program, wrt: Sequence[bool] | None = None
) -> tuple[Program, Program]:
  """JVP followed by partial evaluation.

  Returns:
    (primal, linear): `primal(*inputs) -> (*outputs, *residuals)` and
    `linear(*residuals, *tangents) -> (*output_tangents)`, linear in the tangents.
  """
  wrt = _wrt_mask(program, wrt)
  jvp = jvp_program(program, wrt)
  n_in, n_out = len(program.inputs), len(program.outputs)
  tangent_ins = jvp.inputs[n_in:]
  linear_vars = set(tangent_ins)
  primal_eqns, linear_eqns = [], []
  for eqn in jvp.eqns:
    if any(isinstance(a, Var) and a in linear_vars for a in eqn.inputs):
      linear_eqns.append(eqn)
      linear_vars.update(eqn.outputs)
    else:
      primal_eqns.append(eqn)
  _check_split(jvp.outputs[:n_out], linear_eqns, linear_vars)
  residuals: dict[Var, None] = {}
  for eqn in linear_eqns:
    for a in eqn.inputs:
      if isinstance(a, Var) and a not in linear_vars:
        residuals[a] = None
  for a in jvp.outputs[n_out:]:
    if isinstance(a, Var) and a not in linear_vars:
      residuals[a] = None
  res = tuple(residuals)
  primal = Program(jvp.inputs[:n_in], tuple(primal_eqns), jvp.outputs[:n_out] + res)
  # Residuals get fresh variables in the linear program so the two programs share none.
  fresh = {v: Var(v.aval) for v in res}
  linear = _rename(
    Program(res + tuple(tangent_ins), tuple(linear_eqns), jvp.outputs[n_out:]), fresh
  )
  return primal, linear


def _check_split(primal_outputs, linear_eqns, linear_vars) -> None:
  """The primal program must not need a value only the linear one computes: an equation
  whose JVP computes primal outputs and tangents together (while_loop's: one loop carries
  both) cannot be split, so reverse mode cannot run through it."""
  needed = {v for v in primal_outputs if isinstance(v, Var) and v in linear_vars}
  if needed:
    eqn = _mixed_origin(needed, linear_eqns)
    where = f" (from {eqn.source})" if eqn.source else ""
    raise PrimcError(
      f"reverse-mode differentiation through {eqn.prim.name}{where} is not "
      f"supported: its forward-mode rule computes the primal values and the "
      f"tangents in one equation, which cannot be transposed; use scan, or "
      f"fori_loop with constant bounds, or forward mode (jvp, jacfwd)"
    )


def _mixed_origin(needed: set, linear_eqns) -> Eqn:
  """The equation that mixes primal values into the linear side: of the linear equations
  the needed values come from, the first not linear in any operand (a loop carrying
  values and tangents), else the first."""
  ancestors = []
  for eqn in reversed(linear_eqns):
    if needed & set(eqn.outputs):
      ancestors.append(eqn)
      needed |= {a for a in eqn.inputs if isinstance(a, Var)}
  ancestors.reverse()
  return next((e for e in ancestors if e.prim.linear is None), ancestors[0])


def _rename(program: Program, mapping: dict[Var, Var]) -> Program:
  sub = lambda a: mapping.get(a, a) if isinstance(a, Var) else a
  eqns = tuple(
    Eqn(e.prim, tuple(map(sub, e.inputs)), e.params, e.outputs, e.source) for e in program.eqns
  )
  return Program(tuple(map(sub, program.inputs)), eqns, tuple(map(sub, program.outputs)))


@without_gc
def transpose_program(program: Program, linear_mask: Sequence[bool]) -> Program:
  """Reverse mode: transposes a program linear in the inputs marked by `linear_mask`.

  Returns:
    `(*nonlinear_inputs, *output_cotangents) -> (*cotangents of the linear inputs)`.
    Equations that do not depend on a linear input are evaluated forward first.
  """
  linear_mask = tuple(bool(m) for m in linear_mask)
  lin_in = [v for m, v in zip(linear_mask, program.inputs) if m]
  const_in = [v for m, v in zip(linear_mask, program.inputs) if not m]
  linear_vars = set(lin_in)
  for eqn in program.eqns:
    if any(isinstance(a, Var) and a in linear_vars for a in eqn.inputs):
      linear_vars.update(eqn.outputs)
  out_cts_avals = [a.aval for a in program.outputs]

  def fn(*args):
    before = running.source
    try:
      return sweep(*args)
    finally:
      running.source = before

  def sweep(*args):
    consts = dict(zip(const_in, args[: len(const_in)], strict=True))
    read = lambda a: literal(a) if isinstance(a, Lit) else consts[a]
    linear_eqns = []
    for eqn in program.eqns:
      if eqn.outputs[0] in linear_vars:
        linear_eqns.append(eqn)
      else:
        running.source = eqn.source  # (what it stages names its line: `core.running`)
        outs = results(eqn, eqn.prim.bind(*map(read, eqn.inputs), **eqn.kw))
        consts.update(zip(eqn.outputs, outs, strict=True))
    cts: dict[Var, object] = {}

    def accum(v, ct):
      cts[v] = add_tangents(cts[v], ct) if v in cts else ct

    for a, ct in zip(program.outputs, args[len(const_in) :], strict=True):
      if isinstance(a, Var) and a in linear_vars:
        accum(a, ct)
    for eqn in reversed(linear_eqns):
      if eqn.prim.multiple_results:  # one cotangent per output, Zero where none came
        ct = [cts.pop(v, None) for v in eqn.outputs]
        if all(c is None for c in ct):
          continue
        ct = [Zero(v.aval) if c is None else c for c, v in zip(ct, eqn.outputs)]
      else:
        ct = cts.pop(eqn.outputs[0], None)
        if ct is None:
          continue
      invals = [
        UndefinedPrimal(a.aval) if isinstance(a, Var) and a in linear_vars else read(a)
        for a in eqn.inputs
      ]
      if eqn.prim not in transpose_rules:
        raise PrimcError(f"primitive {eqn.prim.name} is not linear: it has no transpose rule")
      running.source = eqn.source
      in_cts = transpose_rules[eqn.prim](ct, *invals, **eqn.kw)
      for a, c in zip(eqn.inputs, in_cts, strict=True):
        if c is not None and isinstance(a, Var) and a in linear_vars:
          accum(a, c)
    return [cts[v] if v in cts else P.zeros(v.aval) for v in lin_in]

  avals = [v.aval for v in const_in] + out_cts_avals
  return trace_flat(fn, avals)[0]


@without_gc
def vjp_program(
  program: Program,
  wrt: Sequence[bool] | None = None,
  ct_outputs: Sequence[bool] | None = None,
) -> Program:
  """Reverse mode: `(*inputs, *output_cotangents) -> (*outputs, *input_cotangents)`.

  Args:
    program: the program to differentiate.
    wrt: one bool per input: which inputs get cotangents (default: the float ones).
    ct_outputs: one bool per output: which outputs take a cotangent (default: float ones).
  """
  wrt = _wrt_mask(program, wrt)
  float_outs = [a.is_float for a in program.out_avals]
  ct_outputs = tuple(float_outs) if ct_outputs is None else tuple(ct_outputs)
  primal, linear = linearize_program(program, wrt)
  lin_outs = [a for a, f in zip(linear.outputs, float_outs) if f]
  chosen = [a for a, c in zip(lin_outs, [c for c, f in zip(ct_outputs, float_outs) if f]) if c]
  n_res = len(primal.outputs) - len(program.outputs)
  linear = Program(linear.inputs, linear.eqns, tuple(chosen))
  transposed = transpose_program(linear, [False] * n_res + [True] * (len(linear.inputs) - n_res))
  n_in, n_out = len(program.inputs), len(program.outputs)

  def fn(*args):
    outs = eval_program(primal, *args[:n_in])
    cts = eval_program(transposed, *outs[n_out:], *args[n_in:])
    return outs[:n_out] + cts

  ct_avals = [a for a, c in zip(program.out_avals, ct_outputs) if c]
  return trace_flat(fn, list(program.in_avals) + ct_avals)[0]
