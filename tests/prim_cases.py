"""One or more cases per primitive: a function applying it, and random float64 arguments.

Shared by the impl, JVP/transpose and batching tests, so every primitive is covered by each.
`linear` names the argument positions in which the primitive is linear (for the transpose
identity); `oracle` is an independent numpy formulation of the primitive.
"""

import dataclasses
import math
from typing import Callable

import numpy as np

from primc import prims as P
from primc.trace import aval_of


@dataclasses.dataclass
class Case:
  prim: object
  fn: Callable
  make: Callable  # rng -> tuple of arguments
  oracle: Callable | None = None
  linear: tuple = ()
  bilinear: bool = False  # linear in each of `linear` separately (mul, dot_general)
  eps: float = 1e-6  # finite-difference step
  name: str = ""

  def __post_init__(self):
    self.name = self.name or self.prim.name


def normal(*shape):
  return lambda rng: rng.standard_normal(shape)


def positive(*shape):
  return lambda rng: rng.uniform(0.5, 2.0, shape)


def away_from_zero(*shape):
  return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)


def uniform(lo, hi, *shape):
  return lambda rng: rng.uniform(lo, hi, shape)


def matrices(*shape):
  """Well-conditioned square matrices (batched over leading axes)."""
  return lambda rng: rng.standard_normal(shape) + shape[-1] * np.eye(shape[-1])


def _sym(a):
  """The symmetric part of a (cholesky_p and eigh_p take symmetric matrices)."""
  nd = aval_of(a).ndim
  at = P.transpose(a, list(range(nd - 2)) + [nd - 1, nd - 2])
  return P.mul(P.add(a, at), P.full(aval_of(a).shape, 0.5, aval_of(a).dtype))


def _eigh_oracle(a):
  """Eigenvalues (row 0) over eigenvectors whose largest-magnitude entry is positive."""
  w, v = np.linalg.eigh((a + np.swapaxes(a, -1, -2)) / 2)
  big = np.take_along_axis(v, np.argmax(np.abs(v), -2)[..., None, :], -2)
  return np.concatenate([w[..., None, :], v * np.sign(big)], -2)


def _svd_oracle(a):
  """U, the singular values, V, each pair signed so V's column's largest entry is positive."""
  u, s, vh = np.linalg.svd(a, full_matrices=False)
  v = np.swapaxes(vh, -1, -2)
  big = np.take_along_axis(v, np.argmax(np.abs(v), -2)[..., None, :], -2)
  return np.concatenate([u * np.sign(big), s[..., None, :], v * np.sign(big)], -2)


def _ints(x, scale=8):
  """floor(scale x) as int64 (the integer operands of the bitwise cases)."""
  return P.convert(P.floor_p.bind(P.mul(x, P.scalar_like(scale, x))), "int64")


def _as_float(n, x):
  return P.convert(n, aval_of(x).dtype)


def _periodic_mean(integrand, n=256):
  """(1/pi) * the integral over [0, pi] of an integrand even and 2 pi-periodic in t: the mean
  over a period, by the trapezoid rule (exact to rounding for these smooth integrands)."""
  t = np.arange(n) * (2 * np.pi / n)
  return integrand(t).mean(-1)


def _special_at(name, *args):
  """special[name] with constant leading operands (the last, x, is the argument)."""
  x = args[-1]
  consts = [P.full(aval_of(x).shape, a, aval_of(x).dtype) for a in args[:-1]]
  return P.special_p.bind(*consts, x, name=name)


def _erfinv_oracle(x):
  """erfinv by bisection on math.erf (float64; then rounded as x)."""
  lo, hi = np.full(np.shape(x), -6.0), np.full(np.shape(x), 6.0)
  erf = np.vectorize(math.erf)
  for _ in range(80):
    mid = (lo + hi) / 2
    below = erf(mid) < x
    lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
  return ((lo + hi) / 2).astype(np.result_type(x, np.float32))


def _polygamma_oracle(n, x):
  """psi^(n)(x) as (-1)^(n+1) n! sum_k 1/(x+k)^(n+1) (n >= 1, the sum's tail by its
  integral), or digamma as the limit of log(m) - sum_k 1/(x+k) (n = 0, with the tail's
  1/(2m) correction): independent of both scipy and codegen's series."""
  x = np.asarray(x, np.float64)
  m = 200000
  k = np.arange(m)[:, None]
  terms = 1.0 / (x.reshape(1, -1) + k)
  if n == 0:
    out = (
      np.log(m + x.reshape(-1))
      - 0.5 / (m + x.reshape(-1))
      - terms.sum(0)
      - 1.0 / 12 / (m + x.reshape(-1)) ** 2
    )
  else:
    tail = 1.0 / (n * (m + x.reshape(-1)) ** n) + 0.5 / (m + x.reshape(-1)) ** (n + 1)
    out = (-1) ** (n + 1) * math.factorial(n) * ((terms ** (n + 1)).sum(0) + tail)
  return out.reshape(np.shape(x))


def args(*makers):
  return lambda rng: tuple(m(rng) for m in makers)


def _scatter_oracle(x, idx, upd):
  out = x.copy()
  for k, i in enumerate(idx):
    out[i] += upd[k]
  return out


def _pad_oracle(x):
  out = np.zeros((1 + 2 + 3 + 2 * 2, 4 + 1))
  out[1:8:3, 0:4] = x  # interior padding 2: every third row
  return out


def _conv_oracle(strides, dilation, groups):
  """conv by its definition: a loop over the output positions and the window offsets."""

  def conv(x, w):
    n, c, *size = x.shape
    o, cg, *win = w.shape
    out = [(m - (k - 1) * d - 1) // s + 1 for m, k, s, d in zip(size, win, strides, dilation)]
    y = np.zeros((n, o, *out), x.dtype)
    for oc in range(o):
      g = oc // (o // groups)
      xs = x[:, g * cg : (g + 1) * cg]
      for pos in np.ndindex(*out):
        for off in np.ndindex(*win):
          at = tuple(p * s + k * d for p, s, k, d in zip(pos, strides, off, dilation))
          y[(slice(None), oc) + pos] += (
            xs[(slice(None), slice(None)) + at] @ w[(oc, slice(None)) + off]
          )
    return y

  return conv


def _conv_case(x_shape, w_shape, strides, dilation, groups, name):
  return Case(
    P.conv_p,
    lambda x, w: P.conv(x, w, strides, dilation, groups),
    args(normal(*x_shape), normal(*w_shape)),
    _conv_oracle(strides, dilation, groups),
    linear=(0, 1),
    bilinear=True,
    name=name,
  )


def _windows_oracle(window, strides, dilation):
  """x[..., o * stride + k * dilation] per trailing dim, by broadcast index arrays."""

  def oracle(x):
    nd = len(window)
    size = x.shape[x.ndim - nd :]
    out = [(n - (k - 1) * d - 1) // s + 1 for n, k, s, d in zip(size, window, strides, dilation)]
    grids = np.meshgrid(*(np.arange(n) for n in (*window, *out)), indexing="ij")
    idx = [grids[nd + d] * strides[d] + grids[d] * dilation[d] for d in range(nd)]
    return x[(Ellipsis, *idx)]

  return oracle


CASES = [
  Case(P.neg_p, P.neg, args(normal(3, 4)), np.negative, linear=(0,)),
  Case(P.exp_p, P.exp, args(normal(3, 4)), np.exp),
  Case(P.log_p, P.log, args(positive(3, 4)), np.log),
  Case(P.sin_p, P.sin, args(normal(3, 4)), np.sin),
  Case(P.cos_p, P.cos, args(normal(3, 4)), np.cos),
  Case(P.tanh_p, P.tanh, args(normal(3, 4)), np.tanh),
  Case(P.sqrt_p, P.sqrt, args(positive(3, 4)), np.sqrt),
  Case(P.abs_p, P.abs_, args(away_from_zero(3, 4)), np.abs),
  Case(P.sign_p, P.sign, args(away_from_zero(3, 4)), np.sign),
  Case(P.stop_gradient_p, P.stop_gradient, args(normal(3, 4)), lambda x: x),
  Case(P.inv_p, P.inv_p.bind, args(matrices(2, 3, 3)), np.linalg.inv),
  Case(
    P.solve_p,
    P.solve_p.bind,
    args(matrices(2, 3, 3), normal(2, 3, 2)),
    np.linalg.solve,
    linear=(1,),
  ),
  Case(P.det_p, P.det_p.bind, args(matrices(2, 3, 3)), np.linalg.det),
  Case(
    P.slogdet_p,
    P.slogdet_p.bind,
    args(matrices(3, 3)),
    lambda a: np.stack(np.linalg.slogdet(a), -1),
  ),
  Case(
    P.cholesky_p,
    lambda a: P.cholesky_p.bind(_sym(a)),
    args(matrices(2, 3, 3)),
    lambda a: np.linalg.cholesky((a + np.swapaxes(a, -1, -2)) / 2),
  ),
  Case(P.eigh_p, lambda a: P.eigh_p.bind(_sym(a)), args(matrices(2, 3, 3)), _eigh_oracle),
  Case(P.qr_p, P.qr_p.bind, args(normal(2, 4, 3)), lambda a: np.concatenate(np.linalg.qr(a), -2)),
  Case(P.svd_p, P.svd_p.bind, args(normal(2, 4, 3)), _svd_oracle),
  Case(P.pinv_p, lambda a: P.pinv_p.bind(a, rcond=None), args(normal(2, 3, 4)), np.linalg.pinv),
  Case(
    P.triangular_solve_p,
    lambda a, b: P.triangular_solve_p.bind(a, b, lower=True, transpose_a=False),
    args(matrices(2, 3, 3), normal(2, 3, 2)),
    lambda a, b: np.linalg.solve(np.tril(a), b),
    linear=(1,),
  ),
  Case(
    P.triangular_solve_p,
    lambda a, b: P.triangular_solve_p.bind(a, b, lower=False, transpose_a=True),
    args(matrices(3, 3), normal(3, 1)),
    lambda a, b: np.linalg.solve(np.triu(a).T, b),
    linear=(1,),
    name="triangular_solve_upper_transposed",
  ),
  Case(
    P.fmod_p,
    P.fmod_p.bind,
    args(lambda rng: 4 * rng.standard_normal((3, 4)), away_from_zero(3, 4)),
    np.fmod,
  ),
  *[
    Case(prim, prim.bind, args(lambda rng: 3 * rng.standard_normal((3, 4))), fn)
    for prim, fn in (
      (P.floor_p, np.floor),
      (P.ceil_p, np.ceil),
      (P.trunc_p, np.trunc),
      (P.rint_p, np.rint),
    )
  ],
  Case(
    P.argsort_p,
    P.argsort,
    args(normal(3, 4)),
    lambda x: np.argsort(x, -1, kind="stable").astype(np.int32),
  ),
  Case(P.tan_p, P.tan_p.bind, args(uniform(-1.2, 1.2, 3, 4)), np.tan),
  Case(P.sinh_p, P.sinh, args(normal(3, 4)), np.sinh),
  Case(P.cosh_p, P.cosh, args(normal(3, 4)), np.cosh),
  Case(P.arcsin_p, P.arcsin_p.bind, args(uniform(-0.9, 0.9, 3, 4)), np.arcsin),
  Case(P.arccos_p, P.arccos_p.bind, args(uniform(-0.9, 0.9, 3, 4)), np.arccos),
  Case(P.arctan_p, P.arctan_p.bind, args(normal(3, 4)), np.arctan),
  Case(P.arcsinh_p, P.arcsinh_p.bind, args(normal(3, 4)), np.arcsinh),
  Case(P.arccosh_p, P.arccosh_p.bind, args(uniform(1.2, 3.0, 3, 4)), np.arccosh),
  Case(P.arctanh_p, P.arctanh_p.bind, args(uniform(-0.9, 0.9, 3, 4)), np.arctanh),
  Case(P.log1p_p, P.log1p_p.bind, args(uniform(-0.5, 2.0, 3, 4)), np.log1p),
  Case(P.expm1_p, P.expm1_p.bind, args(normal(3, 4)), np.expm1),
  Case(P.log2_p, P.log2_p.bind, args(positive(3, 4)), np.log2),
  Case(P.log10_p, P.log10_p.bind, args(positive(3, 4)), np.log10),
  Case(P.exp2_p, P.exp2_p.bind, args(normal(3, 4)), np.exp2),
  Case(P.arctan2_p, P.arctan2_p.bind, args(normal(3, 4), positive(3, 4)), np.arctan2),
  Case(P.hypot_p, P.hypot_p.bind, args(away_from_zero(3, 4), away_from_zero(3, 4)), np.hypot),
  Case(P.logaddexp_p, P.logaddexp_p.bind, args(normal(3, 4), normal(3, 4)), np.logaddexp),
  Case(
    P.signbit_p,
    P.signbit_p.bind,
    args(lambda rng: rng.choice([-1.5, -0.0, 0.0, 2.0, np.inf, -np.inf], (3, 4))),
    lambda x: np.sign(np.copysign(1.0, x)) < 0,
  ),
  Case(
    P.nextafter_p,
    P.nextafter_p.bind,
    args(normal(3, 4), normal(3, 4)),
    lambda x, y: np.where(y > x, x + np.spacing(np.abs(x)), x - np.spacing(np.abs(x))),
  ),
  # scipy.special's: oracles from Python's math where it has the function, else the
  # inverse relations (erf(erfinv(x)) = x) and the series of the polygamma functions
  Case(P.erf_p, P.erf_p.bind, args(normal(3, 4)), np.vectorize(math.erf)),
  Case(P.erfc_p, P.erfc_p.bind, args(normal(3, 4)), np.vectorize(math.erfc)),
  Case(P.erfinv_p, P.erfinv_p.bind, args(uniform(-0.9, 0.9, 3, 4)), _erfinv_oracle),
  Case(
    P.erfcinv_p, P.erfcinv_p.bind, args(uniform(0.1, 1.9, 3, 4)), lambda c: _erfinv_oracle(1 - c)
  ),
  Case(P.gammaln_p, P.gammaln_p.bind, args(uniform(0.3, 4.0, 3, 4)), np.vectorize(math.lgamma)),
  Case(P.gamma_p, P.gamma_p.bind, args(uniform(0.3, 4.0, 3, 4)), np.vectorize(math.gamma)),
  *[
    Case(
      P.polygamma_p,
      lambda x, n=n: P.polygamma_p.bind(x, n=n),
      args(uniform(0.5, 4.0, 3, 4)),
      lambda x, n=n: _polygamma_oracle(n, x),
      name=f"polygamma_{n}",
    )
    for n in (0, 1, 3)
  ],
  # special[name]: oracles by quadrature of the integral representations (the trapezoid
  # rule on a period is exact to rounding here) and the finite sums of integer orders
  Case(
    P.special_p,
    lambda x: P.special_p.bind(x, name="j0"),
    args(uniform(0.1, 6.0, 3, 4)),
    lambda x: _periodic_mean(lambda t: np.cos(x[..., None] * np.sin(t))),
    name="j0",
  ),
  Case(
    P.special_p,
    lambda x: _special_at("iv", 1.0, x),
    args(uniform(0.1, 3.0, 3, 4)),
    lambda x: _periodic_mean(lambda t: np.exp(x[..., None] * np.cos(t)) * np.cos(t)),
    name="iv_1",
  ),
  Case(
    P.special_p,
    lambda x: _special_at("gammainc", 3.0, x),
    args(uniform(0.2, 5.0, 3, 4)),
    lambda x: 1 - np.exp(-x) * (1 + x + x * x / 2),
    name="gammainc_3",
  ),
  Case(
    P.special_p,
    lambda x: _special_at("betainc", 2.0, 3.0, x),
    args(uniform(0.05, 0.95, 3, 4)),
    lambda x: sum(math.comb(4, j) * x**j * (1 - x) ** (4 - j) for j in (2, 3, 4)),
    name="betainc_2_3",
  ),
  # bitwise operations: on integers made from the float arguments (floor(8 x); shift
  # counts floor(20 y), negative and past the width included), the result as a float
  *[
    Case(
      p,
      (lambda p, s: lambda x, y: _as_float(p.bind(_ints(x), _ints(y, s)), x))(p, s),
      args(normal(3, 4), normal(3, 4)),
      (
        lambda f, s: (
          lambda x, y: f(np.floor(8 * x).astype(np.int64), np.floor(s * y).astype(np.int64)).astype(
            x.dtype
          )
        )
      )(f, s),
    )
    for p, f, s in (
      (P.bit_and_p, np.bitwise_and, 8),
      (P.bit_or_p, np.bitwise_or, 8),
      (P.bit_xor_p, np.bitwise_xor, 8),
      (P.shift_left_p, np.left_shift, 40),
      (P.shift_right_p, np.right_shift, 40),
    )
  ],
  Case(
    P.bit_not_p,
    lambda x: _as_float(P.bit_not_p.bind(_ints(x)), x),
    args(normal(3, 4)),
    lambda x: np.invert(np.floor(8 * x).astype(np.int64)).astype(x.dtype),
  ),
  Case(P.add_p, P.add, args(normal(3, 4), normal(3, 4)), np.add, linear=(0, 1)),
  Case(P.sub_p, P.sub, args(normal(3, 4), normal(3, 4)), np.subtract, linear=(0, 1)),
  Case(P.mul_p, P.mul, args(normal(3, 4), normal(3, 4)), np.multiply, linear=(0, 1), bilinear=True),
  Case(P.div_p, P.div, args(normal(3, 4), away_from_zero(3, 4)), np.divide, linear=(0,)),
  Case(P.pow_p, P.pow_, args(positive(3, 4), normal(3, 4)), np.power),
  Case(P.max_p, P.max_, args(normal(3, 4), normal(3, 4)), np.maximum),
  Case(P.min_p, P.min_, args(normal(3, 4), normal(3, 4)), np.minimum),
  Case(P.eq_p, P.eq, args(normal(3, 4), normal(3, 4)), np.equal),
  Case(P.ne_p, lambda x, y: P.ne_p.bind(x, y), args(normal(3, 4), normal(3, 4)), np.not_equal),
  Case(P.lt_p, P.lt, args(normal(3, 4), normal(3, 4)), np.less),
  Case(P.le_p, lambda x, y: P.le_p.bind(x, y), args(normal(3, 4), normal(3, 4)), np.less_equal),
  Case(P.gt_p, P.gt, args(normal(3, 4), normal(3, 4)), np.greater),
  Case(P.ge_p, lambda x, y: P.ge_p.bind(x, y), args(normal(3, 4), normal(3, 4)), np.greater_equal),
  Case(
    P.select_p,
    lambda a, b, c: P.select(P.gt(a, P.zeros(_aval(a))), b, c),
    args(normal(3, 4), normal(3, 4), normal(3, 4)),
    lambda a, b, c: np.where(a > 0, b, c),
    linear=(1, 2),
  ),
  Case(
    P.broadcast_in_dim_p,
    lambda x: P.broadcast_in_dim(x, (2, 3, 4), (1, 2)),
    args(normal(3, 1)),
    lambda x: np.broadcast_to(x[None], (2, 3, 4)),
    linear=(0,),
  ),
  Case(
    P.broadcast_in_dim_p,
    lambda x: P.broadcast_in_dim(x, (3, 2), (0,)),
    args(normal(3)),
    lambda x: np.repeat(x[:, None], 2, 1),
    linear=(0,),
    name="broadcast_in_dim_new_axis",
  ),
  Case(
    P.reshape_p,
    lambda x: P.reshape(x, (2, 6)),
    args(normal(3, 4)),
    lambda x: x.reshape(2, 6),
    linear=(0,),
  ),
  Case(
    P.transpose_p,
    lambda x: P.transpose(x, (2, 0, 1)),
    args(normal(2, 3, 4)),
    lambda x: np.transpose(x, (2, 0, 1)),
    linear=(0,),
  ),
  Case(
    P.slice_p,
    lambda x: P.slice_(x, (1, 0), (4, 6), (2, 3)),
    args(normal(5, 6)),
    lambda x: x[1:4:2, 0:6:3],
    linear=(0,),
  ),
  Case(
    P.pad_p,
    lambda x: P.pad(x, ((1, 2, 2), (0, 1, 0))),
    args(normal(3, 4)),
    _pad_oracle,
    linear=(0,),
  ),
  Case(
    P.concatenate_p,
    lambda x, y: P.concatenate([x, y], 0),
    args(normal(2, 3), normal(4, 3)),
    lambda x, y: np.concatenate([x, y]),
    linear=(0, 1),
  ),
  Case(
    P.gather_p,
    lambda x: P.gather(x, np.array([[0, 4], [2, 2]], np.int32), 0),
    args(normal(5, 3)),
    lambda x: x[np.array([[0, 4], [2, 2]])],
    linear=(0,),
  ),
  Case(
    P.gather_p,
    lambda x: P.gather(x, np.array([2, 0, 2], np.int32), 1),
    args(normal(2, 3, 2)),
    lambda x: x[:, [2, 0, 2]],
    linear=(0,),
    name="gather_axis1",
  ),
  Case(
    P.gather_p,
    lambda x: P.gather(x, np.array([-1, 0, -3, 2], np.int64), 0),
    args(normal(3, 2)),
    lambda x: x[[2, 0, 0, 2]],
    linear=(0,),
    name="gather_negative",
  ),
  Case(
    P.gather_p,
    lambda x: P.gather(x, np.array([[0, 2], [1, -1]], np.int32), 2, 1),
    args(normal(2, 4, 3)),
    lambda x: np.stack([x[0][:, [0, 2]], x[1][:, [1, 2]]]),
    linear=(0,),
    name="gather_batch_dims",
  ),
  Case(
    P.scatter_add_p,
    lambda x, u: P.scatter_add(x, np.array([0, 4, 2, 2], np.int32), u, 0),
    args(normal(5, 3), normal(4, 3)),
    lambda x, u: _scatter_oracle(x, [0, 4, 2, 2], u),
    linear=(0, 1),
  ),
  Case(
    P.scatter_add_p,
    lambda x, u: P.scatter_add(x, np.array([[1, -1, 1], [0, 0, 2]]), u, 1, 1),
    args(normal(2, 3, 2), normal(2, 3, 2)),
    lambda x, u: np.stack(
      [_scatter_oracle(x[0], [1, 2, 1], u[0]), _scatter_oracle(x[1], [0, 0, 2], u[1])]
    ),
    linear=(0, 1),
    name="scatter_add_batch_dims",
  ),
  Case(
    P.windows_p,
    lambda x: P.windows(x, (2, 3), (2, 1), (1, 2)),
    args(normal(2, 5, 9)),
    _windows_oracle((2, 3), (2, 1), (1, 2)),
    linear=(0,),
  ),
  Case(
    P.rev_p,
    lambda x: P.rev(x, (0, 2)),
    args(normal(2, 3, 4)),
    lambda x: x[::-1, :, ::-1],
    linear=(0,),
  ),
  Case(
    P.roll_p,
    lambda x: P.roll(x, 2, 1),
    args(normal(2, 5, 3)),
    lambda x: np.concatenate([x[:, 3:], x[:, :3]], axis=1),
    linear=(0,),
  ),
  Case(
    P.reduce_sum_p,
    lambda x: P.reduce_sum(x, (0, 2)),
    args(normal(3, 4, 5)),
    lambda x: x.sum((0, 2)),
    linear=(0,),
  ),
  Case(P.reduce_max_p, lambda x: P.reduce_max(x, (1,)), args(normal(3, 4)), lambda x: x.max(1)),
  Case(P.cumsum_p, P.cumsum, args(normal(3, 4, 5)), lambda x: np.cumsum(x, -1), linear=(0,)),
  Case(P.cumprod_p, P.cumprod, args(normal(2, 3, 7)), lambda x: np.cumprod(x, -1)),
  Case(
    P.reduce_prod_p,
    lambda x: P.reduce_prod(x, (0, 2)),
    args(normal(3, 4, 2)),
    lambda x: x.prod((0, 2)),
  ),
  Case(
    P.dot_general_p,
    lambda a, b: P.dot_general(a, b, (((1,), (0,)), ((), ()))),
    args(normal(3, 4), normal(4, 5)),
    np.matmul,
    linear=(0, 1),
    bilinear=True,
  ),
  Case(
    P.dot_general_p,
    lambda a, b: P.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
    args(normal(2, 3, 4), normal(2, 4, 5)),
    np.matmul,
    linear=(0, 1),
    bilinear=True,
    name="dot_batched",
  ),
  Case(
    P.dot_general_p,
    lambda a, b: P.dot_general(a, b, (((0, 2), (2, 1)), ((1,), (0,)))),
    args(normal(4, 3, 5), normal(3, 5, 4, 2)),
    lambda a, b: np.einsum("kbm,bmkn->bn", a, b),
    linear=(0, 1),
    bilinear=True,
    name="dot_general_mixed",
  ),
  Case(
    P.dot_general_p,
    lambda a, b: P.dot_general(a, b, (((1,), (0,)), ((), ()))),
    args(normal(3, 4), normal(4)),
    np.matmul,
    linear=(0, 1),
    bilinear=True,
    name="dot_matrix_vector",
  ),
  Case(
    P.dot_general_p,
    lambda a, b: P.dot_general(a, b, (((0,), (0,)), ((), ()))),
    args(normal(4), normal(4)),
    np.dot,
    linear=(0, 1),
    bilinear=True,
    name="dot_vectors",
  ),
  _conv_case((2, 3, 9), (4, 3, 3), (2,), (1,), 1, "conv_1d_strided"),
  _conv_case((2, 4, 7, 6), (6, 2, 3, 2), (2, 1), (1, 2), 2, "conv_2d_groups_dilated"),
  _conv_case((1, 3, 5, 4, 4), (6, 1, 2, 2, 3), (1, 2, 1), (2, 1, 1), 3, "conv_3d_depthwise"),
  Case(P.full_p, lambda: P.full((2, 3), 1.5, "float64"), args(), lambda: np.full((2, 3), 1.5)),
  Case(
    P.iota_p,
    lambda: P.iota((2, 3), 1, "int32"),
    args(),
    lambda: np.tile(np.arange(3, dtype=np.int32), (2, 1)),
  ),
  Case(
    P.convert_p,
    lambda x: P.convert(P.convert(x, "float32"), "float64"),
    args(normal(3, 4)),
    lambda x: x.astype(np.float32).astype(np.float64),
    linear=(0,),
    eps=1e-2,
  ),
]


def _aval(x):
  from primc.trace import aval_of

  return aval_of(x)


def case_id(case):
  return case.name
