"""Every primc.numpy op, traced and interpreted (and run eagerly), equals numpy."""

import pathlib
import warnings
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc.tree import tree_map


def _softmax(x, axis=-1):
  z = np.exp(x - x.max(axis, keepdims=True))
  return z / z.sum(axis, keepdims=True)


def _lse(x, axis=None, keepdims=False):
  m = x.max(axis, keepdims=True)
  out = np.log(np.exp(x - m).sum(axis, keepdims=True)) + m
  return out if keepdims else np.squeeze(out, axis)


def _bce(z, y):
  s = 1 / (1 + np.exp(-z))
  return np.mean(-(y * np.log(s) + (1 - y) * np.log(1 - s)))


def _ce(logits, labels):
  lsm = logits - _lse(logits, -1, keepdims=True)
  return -np.mean(lsm[np.arange(len(labels)), labels])


N = lambda *s: np.random.default_rng(sum(s) + len(s)).standard_normal(s).astype(np.float32)

# numpy's array functions built from primitives: (name, primc op, numpy op), each applied
# to a (3, 4) array; the differentiable ones are checked by finite differences below
ARRAY_FUNCTIONS = [
  ("flip", pnp.flip, np.flip),
  ("flip_1", lambda x: pnp.flip(x, 1), lambda x: np.flip(x, 1)),
  ("flipud", pnp.flipud, np.flipud),
  ("fliplr", pnp.fliplr, np.fliplr),
  *[
    (
      f"rot90_{k}",
      (lambda k: lambda x: pnp.rot90(x, k))(k),
      (lambda k: lambda x: np.rot90(x, k))(k),
    )
    for k in (-1, 1, 2, 3)
  ],
  ("roll", lambda x: pnp.roll(x, 2), lambda x: np.roll(x, 2)),
  (
    "roll_axes",
    lambda x: pnp.roll(x, (1, -3), axis=(0, 1)),
    lambda x: np.roll(x, (1, -3), axis=(0, 1)),
  ),
  ("pad", lambda x: pnp.pad(x, ((1, 0), (2, 3))), lambda x: np.pad(x, ((1, 0), (2, 3)))),
  (
    "pad_value",
    lambda x: pnp.pad(x, 1, constant_values=1.5),
    lambda x: np.pad(x, 1, constant_values=1.5),
  ),
  ("tile", lambda x: pnp.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3))),
  ("repeat", lambda x: pnp.repeat(x, 2), lambda x: np.repeat(x, 2)),
  ("repeat_axis", lambda x: pnp.repeat(x, 3, axis=0), lambda x: np.repeat(x, 3, axis=0)),
  ("tril", pnp.tril, np.tril),
  ("triu_1", lambda x: pnp.triu(x, 1), lambda x: np.triu(x, 1)),
  ("tril_-1", lambda x: pnp.tril(x, -1), lambda x: np.tril(x, -1)),
  ("diag", pnp.diag, np.diag),
  ("diag_1", lambda x: pnp.diag(x, 1), lambda x: np.diag(x, 1)),
  ("diagonal_-2", lambda x: pnp.diagonal(x, -2), lambda x: np.diagonal(x, -2)),
  ("trace", pnp.trace, np.trace),
  ("trace_1", lambda x: pnp.trace(x, 1), lambda x: np.trace(x, 1)),
  ("diff", pnp.diff, np.diff),
  ("diff_2_0", lambda x: pnp.diff(x, 2, axis=0), lambda x: np.diff(x, 2, axis=0)),
  (
    "diff_edges",
    lambda x: pnp.diff(x, prepend=0.5, append=x[:, :2], axis=1),
    lambda x: np.diff(x, prepend=0.5, append=x[:, :2], axis=1),
  ),
  (
    "diff_edges_0",
    lambda x: pnp.diff(x, 2, axis=0, append=np.float32(-1)),
    lambda x: np.diff(x, 2, axis=0, append=np.float32(-1)),
  ),
  ("cumsum", pnp.cumsum, np.cumsum),
  ("cumsum_1", lambda x: pnp.cumsum(x, 1), lambda x: np.cumsum(x, 1)),
  ("cumprod", pnp.cumprod, np.cumprod),
  ("cumprod_0", lambda x: pnp.cumprod(x, 0), lambda x: np.cumprod(x, 0)),
  ("prod", pnp.prod, np.prod),
  ("prod_1_keep", lambda x: pnp.prod(x, 1, keepdims=True), lambda x: np.prod(x, 1, keepdims=True)),
  ("std", pnp.std, np.std),
  ("std_ddof", lambda x: pnp.std(x, 0, ddof=1), lambda x: np.std(x, 0, ddof=1)),
  (
    "var_ddof",
    lambda x: pnp.var(x, 1, ddof=1, keepdims=True),
    lambda x: np.var(x, 1, ddof=1, keepdims=True),
  ),
  ("ravel_method", lambda x: x.ravel() * 2, lambda x: x.ravel() * 2),
  (
    "methods_more",
    lambda x: (x.cumsum(0), x.prod(), x.std(), x.clip(-1, 1), x.trace()),
    lambda x: (x.cumsum(0), x.prod(), x.std(), x.clip(-1, 1), x.trace()),
  ),
  ("mod_scalar", lambda x: pnp.mod(x, 0.7), lambda x: np.mod(x, 0.7)),
  ("mod_op_negative", lambda x: x % -0.7, lambda x: x % -0.7),
  ("fmod_rows", lambda x: pnp.fmod(x * 3, x[::-1] + 2.5), lambda x: np.fmod(x * 3, x[::-1] + 2.5)),
  ("floordiv_op", lambda x: x // 0.3, lambda x: x // 0.3),
  ("divmod", lambda x: pnp.divmod(x * 4, 1.5), lambda x: np.divmod(x * 4, 1.5)),
  (
    "rounding",
    lambda x: (
      pnp.floor(x * 3),
      pnp.ceil(x * 3),
      pnp.trunc(x * 3),
      pnp.rint(x * 3),
      pnp.round(x * 3, 1),
      pnp.fix(x * 3),
      *pnp.modf(x * 3),
    ),
    lambda x: (
      np.floor(x * 3),
      np.ceil(x * 3),
      np.trunc(x * 3),
      np.rint(x * 3),
      np.round(x * 3, 1),
      np.fix(x * 3),
      *np.modf(x * 3),
    ),
  ),
  ("sinc", pnp.sinc, np.sinc),
  ("copysign", lambda x: pnp.copysign(x, x[::-1]), lambda x: np.copysign(x, x[::-1])),
  ("nextafter", lambda x: pnp.nextafter(x, x[::-1]), lambda x: np.nextafter(x, x[::-1])),
  ("signbit", lambda x: pnp.signbit(x * 0.0), lambda x: np.signbit(x * 0.0)),
  ("angle", pnp.angle, np.angle),
  ("angle_deg", lambda x: pnp.angle(x, deg=True), lambda x: np.angle(x, deg=True)),
  # API variants (orders, axis tuples, modes, keyword axes) a numpy program uses
  (
    "reshape_F",
    lambda x: pnp.reshape(x, (2, -1), order="F"),
    lambda x: np.reshape(x, (2, -1), order="F"),
  ),
  (
    "ravel_flatten_F",
    lambda x: (pnp.ravel(x, order="F"), x.flatten(order="F")),
    lambda x: (np.ravel(x, order="F"), x.flatten(order="F")),
  ),
  (
    "concatenate_None",
    lambda x: pnp.concatenate([x, x[:1]], axis=None),
    lambda x: np.concatenate([x, x[:1]], axis=None),
  ),
  (
    "expand_dims_tuple",
    lambda x: pnp.expand_dims(x, (0, -1)),
    lambda x: np.expand_dims(x, (0, -1)),
  ),
  ("eye_k", lambda x: x * pnp.eye(3, 4, k=1), lambda x: x * np.eye(3, 4, k=1)),
  *[
    (
      f"pad_{mode}",
      (lambda m: lambda x: pnp.pad(x, ((2, 5), (1, 3)), mode=m))(mode),
      (lambda m: lambda x: np.pad(x, ((2, 5), (1, 3)), mode=m))(mode),
    )
    for mode in ("edge", "reflect", "symmetric", "wrap")
  ],
  (
    "interp_lists",
    lambda x: pnp.interp(x, [-1.0, 0.0, 1.0], [0.0, 1.0, 0.5]),
    lambda x: np.interp(x, [-1.0, 0.0, 1.0], [0.0, 1.0, 0.5]),
  ),
  (
    "delete",
    lambda x: (pnp.delete(x, 1, axis=1), pnp.delete(x, [0, 5])),
    lambda x: (np.delete(x, 1, axis=1), np.delete(x, [0, 5])),
  ),
  (
    "insert",
    lambda x: (
      pnp.insert(x, 1, 5.0, axis=1),
      pnp.insert(x, -1, x[0], axis=0),
      pnp.insert(x, 3, [7.0, 8.0]),
    ),
    lambda x: (
      np.insert(x, 1, 5.0, axis=1),
      np.insert(x, -1, x[0], axis=0),
      np.insert(x, 3, [7.0, 8.0]),
    ),
  ),
  (
    "trace_diagonal_axes",
    lambda x: (
      pnp.trace(pnp.stack([x, 2 * x]), 1, axis1=1, axis2=2),
      pnp.diagonal(pnp.stack([x, x]), -1, axis1=2, axis2=1),
    ),
    lambda x: (
      np.trace(np.stack([x, 2 * x]), 1, axis1=1, axis2=2),
      np.diagonal(np.stack([x, x]), -1, axis1=2, axis2=1),
    ),
  ),
  (
    "moveaxis_tuples",
    lambda x: pnp.moveaxis(pnp.stack([x, x]), (0, 2), (2, 0)),
    lambda x: np.moveaxis(np.stack([x, x]), (0, 2), (2, 0)),
  ),
  (
    "unravel_index",
    lambda x: pnp.unravel_index(pnp.argmax(x), (3, 4)),
    lambda x: np.unravel_index(np.argmax(x), (3, 4)),
  ),
  (
    "reduction_keywords",
    lambda x: (
      pnp.sum(x, 0, initial=2.0, where=x > 0),
      pnp.mean(x, 1, where=x > -0.5, dtype=np.float64),
      pnp.max(x, 1, initial=0.25, where=x < 1),
      pnp.min(x, 0, keepdims=True, initial=-0.1),
    ),
    lambda x: (
      np.sum(x, 0, initial=2.0, where=x > 0),
      np.mean(x, 1, where=x > -0.5, dtype=np.float64),
      np.max(x, 1, initial=0.25, where=x < 1),
      np.min(x, 0, keepdims=True, initial=-0.1),
    ),
  ),
  (
    "digitize",
    lambda x: (pnp.digitize(x, [-1.0, 0.0, 0.5]), pnp.digitize(x, [0.5, 0.0, -1.0], right=True)),
    lambda x: (np.digitize(x, [-1.0, 0.0, 0.5]), np.digitize(x, [0.5, 0.0, -1.0], right=True)),
  ),
  (
    "polynomials",
    lambda x: (
      pnp.polyadd(x[0], x[1, :2]),
      pnp.polysub(x[0, :2], x[1]),
      pnp.polymul(x[0], x[1, :3]),
      pnp.polyder(x[0], 2),
      pnp.polyint(x[0], 2, k=[1.0, 2.0]),
      pnp.polyfit(np.linspace(0, 1, 4), x[0], 2),
    ),
    lambda x: (
      np.polyadd(x[0], x[1, :2]),
      np.polysub(x[0, :2], x[1]),
      np.polymul(x[0], x[1, :3]),
      np.polyder(x[0], 2),
      np.polyint(x[0], 2, k=[1.0, 2.0]),
      np.polyfit(np.linspace(0, 1, 4), x[0], 2),
    ),
  ),
  (
    "piecewise_choose_compress_resize",
    lambda x: (
      pnp.piecewise(x, [x < 0, x > 1], [lambda v: -v, lambda v: v**2, 0.5]),
      pnp.choose(np.array([[0, 1, 2, 1]] * 3), [x, -x, x * 2]),
      pnp.compress([True, False, True, True], x, axis=1),
      pnp.resize(x, (5, 3)),
      pnp.ldexp(x, np.array([1, -2, 3, 0])),
      pnp.hamming(4) * x,
    ),
    lambda x: (
      np.piecewise(x, [x < 0, x > 1], [lambda v: -v, lambda v: v**2, 0.5]),
      np.choose(np.array([[0, 1, 2, 1]] * 3), [x, -x, x * 2]),
      np.compress([True, False, True, True], x, axis=1),
      np.resize(x, (5, 3)),
      np.ldexp(x, np.array([1, -2, 3, 0])),
      np.hamming(4) * x,
    ),
  ),
  (
    "apply_along_axis",
    lambda x: (
      pnp.apply_along_axis(lambda r: r * pnp.sum(r), 1, x),
      pnp.apply_along_axis(lambda r: pnp.sum(r**2), 0, x),
      pnp.apply_along_axis(lambda r: pnp.outer(r, r), 0, x),
    ),
    lambda x: (
      np.apply_along_axis(lambda r: r * np.sum(r), 1, x),
      np.apply_along_axis(lambda r: np.sum(r**2), 0, x),
      np.apply_along_axis(lambda r: np.outer(r, r), 0, x),
    ),
  ),
  (
    "constant_helpers",
    lambda x: (
      pnp.isin(pnp.round(x), [0.0, 1.0, -1.0]),
      pnp.indices((2, 3)),
      pnp.spacing(x),
      pnp.histogram_bin_edges(x, 5),
      pnp.array_equiv(x, x + 0),
      pnp.ravel_multi_index((np.array([0, 2]), np.array([1, 3])), (3, 4)),
    ),
    lambda x: (
      np.isin(np.round(x), [0.0, 1.0, -1.0]),
      np.indices((2, 3)),
      np.spacing(x),
      np.histogram_bin_edges(x, 5),
      np.array_equiv(x, x + 0),
      np.ravel_multi_index((np.array([0, 2]), np.array([1, 3])), (3, 4)),
    ),
  ),
  (
    "method_var",
    lambda x: (x.var(), x.var(axis=1, ddof=1)),
    lambda x: (x.var(), x.var(axis=1, ddof=1)),
  ),
  (
    "arg_keepdims",
    lambda x: (pnp.argmax(x, 1, keepdims=True), pnp.argmin(x, keepdims=True)),
    lambda x: (np.argmax(x, 1, keepdims=True), np.argmin(x, keepdims=True)),
  ),
  (
    "methods_dot_round_take_clip",
    lambda x: (
      x.dot(x.T),
      x.round(1),
      x.take([2, 0], axis=1),
      x.clip(min=-0.5),
      pnp.clip(x, max=0.3),
    ),
    lambda x: (
      x.dot(x.T),
      x.round(1),
      x.take([2, 0], axis=1),
      x.clip(min=-0.5),
      np.clip(x, None, 0.3),
    ),
  ),
  (
    "bool_operators",
    lambda x: (
      (x > 0) & (x < 1),
      (x > 0) | (x < -1),
      (x > 0) ^ (x < 1),
      ~(x > 0),
      pnp.bitwise_and(x > 0, True),
    ),
    lambda x: (
      (x > 0) & (x < 1),
      (x > 0) | (x < -1),
      (x > 0) ^ (x < 1),
      ~(x > 0),
      np.bitwise_and(x > 0, True),
    ),
  ),
  (
    "array_split",
    lambda x: tuple(pnp.array_split(x, 3, axis=1)),
    lambda x: tuple(np.array_split(x, 3, axis=1)),
  ),
  (
    "hsplit_vsplit",
    lambda x: (*pnp.hsplit(x, [1, 9]), *pnp.vsplit(x, 3)),
    lambda x: (*np.hsplit(x, [1, 9]), *np.vsplit(x, 3)),
  ),
  (
    "r_c_",
    lambda x: (pnp.r_[x[0], 2.0, x[1] * 3.0, 0:2], pnp.c_[x[0], x[2]]),
    lambda x: (np.r_[x[0], 2.0, x[1] * 3.0, 0:2], np.c_[x[0], x[2]]),
  ),
  ("argmax", pnp.argmax, np.argmax),
  ("argmin_1", lambda x: pnp.argmin(x, 1), lambda x: np.argmin(x, 1)),
  ("sort", pnp.sort, np.sort),
  ("sort_0", lambda x: pnp.sort(x, 0), lambda x: np.sort(x, 0)),
  ("sort_flat", lambda x: pnp.sort(x, None), lambda x: np.sort(x, None)),
  ("argsort", pnp.argsort, lambda x: np.argsort(x, kind="stable")),
  ("argsort_0_method", lambda x: x.argsort(0), lambda x: np.argsort(x, 0, kind="stable")),
]
NONDIFFERENTIABLE = {
  "argmax",
  "argmin_1",
  "argsort",
  "argsort_0_method",
  "signbit",
  "unravel_index",
  "arg_keepdims",
  "bool_operators",
  "digitize",
  "constant_helpers",
}
COMPILED_GRADS = {
  "mod_op_negative",
  "fmod_rows",
  "sinc",
  "copysign",
  "nextafter",
  "pad_reflect",
  "insert",
  "trace_diagonal_axes",
  "rounding",
  "r_c_",
  "rot90_1",
  "roll_axes",
  "pad_value",
  "tile",
  "repeat_axis",
  "triu_1",
  "diff_2_0",
  "diff_edges",
  "diff_edges_0",
  "cumsum_1",
  "cumprod_0",
  "prod_1_keep",
  "std_ddof",
  "sort_0",
}
POS = lambda *s: np.abs(N(*s)) + 0.5
IDX = np.array([2, 0, 1, 2], np.int32)

OPS = [
  ("matmul", pnp.matmul, np.matmul, (N(3, 4), N(4, 5))),
  ("matmul_vec_mat", pnp.matmul, np.matmul, (N(4), N(4, 5))),
  ("matmul_mat_vec", pnp.matmul, np.matmul, (N(3, 4), N(4))),
  ("matmul_vec_vec", pnp.matmul, np.matmul, (N(4), N(4))),
  ("matmul_vec_batched", pnp.matmul, np.matmul, (N(4), N(2, 4, 3))),
  ("matmul_batched_vec", pnp.matmul, np.matmul, (N(2, 3, 4), N(4))),
  ("matmul_batched_broadcast", pnp.matmul, np.matmul, (N(2, 1, 3, 4), N(5, 4, 2))),
  ("dot_vec", pnp.dot, np.dot, (N(4), N(4))),
  ("dot_3d", pnp.dot, np.dot, (N(2, 3, 4), N(4, 5))),
  ("sum_all", pnp.sum, np.sum, (N(3, 4),)),
  (
    "sum_axis_keepdims",
    lambda x: pnp.sum(x, axis=1, keepdims=True),
    lambda x: np.sum(x, axis=1, keepdims=True),
    (N(3, 4, 2),),
  ),
  (
    "sum_neg_axes",
    lambda x: pnp.sum(x, axis=(-1, 0)),
    lambda x: np.sum(x, axis=(-1, 0)),
    (N(3, 4, 2),),
  ),
  ("mean", lambda x: pnp.mean(x, axis=0), lambda x: np.mean(x, axis=0), (N(3, 4),)),
  ("max", lambda x: pnp.max(x, axis=-1), lambda x: np.max(x, axis=-1), (N(3, 4),)),
  ("min", pnp.min, np.min, (N(3, 4),)),
  ("norm_default", pnp.norm, np.linalg.norm, (N(3, 4),)),
  (
    "norm_p2_axis",
    lambda x: pnp.norm(x, p=2, axis=1),
    lambda x: np.linalg.norm(x, axis=1),
    (N(3, 4),),
  ),
  ("sqrt", pnp.sqrt, np.sqrt, (POS(5),)),
  ("tanh", pnp.tanh, np.tanh, (N(5),)),
  ("sin", pnp.sin, np.sin, (N(5),)),
  ("cos", pnp.cos, np.cos, (N(5),)),
  ("exp", pnp.exp, np.exp, (N(5),)),
  ("log", pnp.log, np.log, (POS(5),)),
  ("abs", pnp.abs, np.abs, (N(5),)),
  *[
    (name, getattr(pnp, name), getattr(np, name), (make(5),))
    for name, make in (
      ("tan", N),
      ("sinh", N),
      ("cosh", N),
      ("arctan", N),
      ("arcsinh", N),
      ("expm1", N),
      ("exp2", N),
      ("deg2rad", N),
      ("rad2deg", N),
      ("radians", N),
      ("degrees", N),
      ("log2", POS),
      ("log10", POS),
      ("arccosh", lambda n: POS(n) + 0.6),
      ("arcsin", lambda n: np.tanh(N(n))),
      ("arccos", lambda n: np.tanh(N(n))),
      ("arctanh", lambda n: np.tanh(N(n))),
      ("log1p", lambda n: POS(n) - 0.9),
      ("asin", lambda n: np.tanh(N(n))),
      ("atan", N),
    )
  ],
  *[
    (name, getattr(pnp, name), getattr(np, name), (N(3, 4), N(4) * 2))
    for name in ("arctan2", "atan2", "hypot", "logaddexp")
  ],
  (
    "logaddexp_equal_and_inf",
    pnp.logaddexp,
    np.logaddexp,
    (
      np.array([1.0, -np.inf, np.inf, 3.0], np.float32),
      np.array([1.0, -np.inf, np.inf, -np.inf], np.float32),
    ),
  ),
  ("clip", lambda x: pnp.clip(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), (N(3, 4),)),
  *[(name, op, ref, (N(3, 4),)) for name, op, ref in ARRAY_FUNCTIONS],
  ("argmax_nan", pnp.argmax, np.argmax, (np.array([1, np.nan, 3, np.nan], np.float32),)),
  ("argmin_ties", pnp.argmin, np.argmin, (np.array([1, 0, 3, 0], np.float32),)),
  (
    "sort_nan_ties",
    lambda x: (pnp.sort(x), pnp.argsort(x)),
    lambda x: (np.sort(x), np.argsort(x, kind="stable")),
    (np.array([2, np.nan, 1, 2, -np.inf, 1], np.float32),),
  ),
  ("vstack", lambda x, y: pnp.vstack([x, y]), lambda x, y: np.vstack([x, y]), (N(3, 4), N(4))),
  ("hstack", lambda x, y: pnp.hstack([x, y]), lambda x, y: np.hstack([x, y]), (N(5), N(4))),
  (
    "column_stack",
    lambda x, y: pnp.column_stack([x, y]),
    lambda x, y: np.column_stack([x, y]),
    (N(3), N(3, 2)),
  ),
  ("append", pnp.append, np.append, (N(3, 4), N(5))),
  (
    "diag_of_vector",
    lambda v: (pnp.diag(v), pnp.diag(v, 2), pnp.diag(v, -1)),
    lambda v: (np.diag(v), np.diag(v, 2), np.diag(v, -1)),
    (N(5),),
  ),
  ("cumsum_37", lambda x: pnp.cumsum(x, 0), lambda x: np.cumsum(x, 0), (N(37),)),
  ("cumsum_bool", pnp.cumsum, np.cumsum, (N(7) > 0,)),
  ("prod_odd", lambda x: pnp.prod(x, 0), lambda x: np.prod(x, 0), (N(7, 2),)),
  (
    "array_of_values",
    lambda x: (
      pnp.array([x[0], x[1] * 2]),
      pnp.array([[x[0, 0], 1.0]]),
      pnp.array((x, x), dtype=np.int32),
    ),
    lambda x: (
      np.array([x[0], x[1] * 2]),
      np.array([[x[0, 0], 1.0]]),  # float64
      np.array((x, x), dtype=np.int32),
    ),
    (N(2, 3),),
  ),
  (
    "empty_axis",
    lambda x: (
      pnp.diff(x, axis=0),
      pnp.cumsum(x, 0),
      pnp.prod(x, 0),
      pnp.roll(x, 1, 0),
      pnp.flip(x, 0),
    ),
    lambda x: (np.diff(x, axis=0), np.cumsum(x, 0), np.prod(x, 0), np.roll(x, 1, 0), np.flip(x, 0)),
    (N(0, 3),),
  ),
  ("clip_upper", lambda x: pnp.clip(x, None, 0.2), lambda x: np.clip(x, None, 0.2), (N(6),)),
  ("clip_arrays", pnp.clip, np.clip, (N(3, 4), N(4) - 1, N(3, 1) + 1)),
  ("square", pnp.square, np.square, (N(5),)),
  ("reciprocal", pnp.reciprocal, np.reciprocal, (POS(5),)),
  ("maximum_broadcast", pnp.maximum, np.maximum, (N(3, 1), N(1, 4))),
  (
    "minimum_scalar",
    lambda x: pnp.minimum(x, 0.5),
    lambda x: np.minimum(x, np.float32(0.5)),
    (N(3, 4),),
  ),
  (
    "where",
    lambda c, x, y: pnp.where(c > 0, x, y),
    lambda c, x, y: np.where(c > 0, x, y),
    (N(3, 1), N(3, 4), N(4)),
  ),
  ("reshape", lambda x: pnp.reshape(x, (2, -1)), lambda x: np.reshape(x, (2, -1)), (N(3, 4),)),
  (
    "broadcast_to",
    lambda x: pnp.broadcast_to(x, (2, 3, 4)),
    lambda x: np.broadcast_to(x, (2, 3, 4)),
    (N(3, 1),),
  ),
  ("transpose", pnp.transpose, np.transpose, (N(2, 3, 4),)),
  (
    "transpose_axes",
    lambda x: pnp.transpose(x, (1, 0, 2)),
    lambda x: np.transpose(x, (1, 0, 2)),
    (N(2, 3, 4),),
  ),
  ("split", lambda x: pnp.split(x, 2, axis=1), lambda x: np.split(x, 2, axis=1), (N(3, 4),)),
  ("split_points", lambda x: pnp.split(x, [1, 3]), lambda x: np.split(x, [1, 3]), (N(5, 2),)),
  (
    "concatenate",
    lambda x, y: pnp.concatenate([x, y], axis=1),
    lambda x, y: np.concatenate([x, y], axis=1),
    (N(2, 3), N(2, 2)),
  ),
  (
    "concat",
    lambda x, y: pnp.concat([x, y]),
    lambda x, y: np.concatenate([x, y]),
    (N(2, 3), N(1, 3)),
  ),
  (
    "stack",
    lambda x, y: pnp.stack([x, y], 1),
    lambda x, y: np.stack([x, y], 1),
    (N(2, 3), N(2, 3)),
  ),
  ("slicing", lambda x: x[1:, ::2, 0], lambda x: x[1:, ::2, 0], (N(3, 5, 2),)),
  ("slicing_none_ellipsis", lambda x: x[None, ..., -1], lambda x: x[None, ..., -1], (N(3, 5, 2),)),
  ("take", lambda x: pnp.take(x, IDX, axis=1), lambda x: np.take(x, IDX, axis=1), (N(2, 3),)),
  ("index_select", lambda x: pnp.index_select(x, IDX), lambda x: x[IDX], (N(3, 2),)),
  ("gather", lambda x: pnp.gather(x, IDX), lambda x: x[IDX], (N(3, 2),)),
  ("array_index", lambda x: x[IDX], lambda x: x[IDX], (N(3, 2),)),
  ("zeros_like", pnp.zeros_like, np.zeros_like, (N(2, 3),)),
  ("ones_like", pnp.ones_like, np.ones_like, (N(2, 3),)),
  ("full", lambda x: x + pnp.full((2, 3), 2.5), lambda x: x + np.full((2, 3), 2.5), (N(2, 3),)),
  ("scale", lambda x: pnp.scale(x, 2.0, 1.0), lambda x: 2 * x + 1, (N(2, 3),)),
  (
    "scale_bias_first",
    lambda x: pnp.scale(x, 2.0, 1.0, bias_after_scale=False),
    lambda x: 2 * (x + 1),
    (N(2, 3),),
  ),
  ("assign", pnp.assign, np.copy, (N(2, 3),)),
  ("sigmoid", pnp.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (N(5),)),
  ("relu", pnp.relu, lambda x: np.maximum(x, 0), (N(5),)),
  ("softmax", pnp.softmax, _softmax, (N(3, 4),)),
  ("log_softmax", lambda x: pnp.log_softmax(x, 0), lambda x: np.log(_softmax(x, 0)), (N(3, 4),)),
  ("logsumexp", lambda x: pnp.logsumexp(x, 1), lambda x: _lse(x, 1), (N(3, 4),)),
  (
    "bce_with_logits",
    pnp.binary_cross_entropy_with_logits,
    _bce,
    (N(4, 3), (N(4, 3) > 0).astype(np.float32)),
  ),
  ("cross_entropy", pnp.cross_entropy, _ce, (N(4, 3), np.array([0, 2, 1, 2], np.int32))),
  (
    "add_sub_mul_div_pow",
    lambda x, y: (x + y, x - y, x * y, x / y, POS(3) ** y),
    lambda x, y: (x + y, x - y, x * y, x / y, POS(3) ** y),
    (N(3), POS(3)),
  ),
  (
    "operators_with_scalars",
    lambda x: (2.0 * x, 1.0 - x, 1 / x, x**2, -x, x @ x.T),
    lambda x: (2 * x, 1 - x, 1 / x, x**2, -x, x @ x.T),
    (POS(2, 2),),
  ),
  (
    "comparisons",
    lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y),
    lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y),
    (N(4), N(1)),
  ),
  (
    "methods",
    lambda x: (x.T, x.reshape(4, 2), x.sum(), x.mean(0), x.max(), x.shape == (2, 4)),
    lambda x: (x.T, x.reshape(4, 2), x.sum(), x.mean(0), x.max(), True),
    (N(2, 4),),
  ),
]


def _leaves(x):
  if isinstance(x, (list, tuple)):
    return [y for item in x for y in _leaves(item)]
  return [np.asarray(x)]


@pytest.mark.parametrize("name,op,ref,args", OPS, ids=[o[0] for o in OPS])
def test_op_traced_and_eager_match_numpy(name, op, ref, args):
  want = _leaves(ref(*args))
  program = primc.make_program(lambda *a: [x for x in _leaves_traced(op(*a))])(*args)
  primc.typecheck(program)
  traced = primc.interpret(program, *args)
  eager = _leaves(op(*args))
  for got_list in (traced, eager):
    assert len(got_list) == len(want)
    for got, w in zip(got_list, want):
      assert got.shape == w.shape, (got.shape, w.shape)
      if w.dtype.kind == "f":  # numpy's own result dtype
        assert got.dtype == w.dtype, (got.dtype, w.dtype)
      np.testing.assert_allclose(got, w, rtol=2e-6, atol=2e-6)


def _leaves_traced(x):
  if isinstance(x, (list, tuple)):
    return [y for item in x for y in _leaves_traced(item)]
  return [x if not isinstance(x, bool) else np.asarray(x)]


@pytest.mark.parametrize(
  "a,b",
  [
    ((3, 1), (1, 4)),
    ((), (2, 3)),
    ((2, 1, 3), (4, 1)),
    ((1,), (5,)),
    ((4, 1, 1), (1, 2, 3)),
    ((1, 1), ()),
  ],
)
def test_broadcasting_edge_cases(a, b):
  x, y = (
    N(*a) if a else np.float32(0.5) * np.ones((), np.float32),
    N(*b) if b else np.ones((), np.float32),
  )
  program = primc.make_program(lambda x, y: x * y - y)(x, y)
  (got,) = primc.interpret(program, x, y)
  np.testing.assert_allclose(got, x * y - y, rtol=1e-6)
  assert got.shape == np.broadcast_shapes(a, b)


def test_python_scalars_are_weak_typed():
  x32 = N(3)
  assert (primc.make_program(lambda x: x * 2.0)(x32).outputs[0].aval.dtype) == "float32"
  assert (
    primc.make_program(lambda x: 1 + x)(x32.astype(np.float64)).outputs[0].aval.dtype == "float64"
  )
  ints = np.arange(3, dtype=np.int32)
  assert primc.make_program(lambda x: x * 2)(ints).outputs[0].aval.dtype == "int32"
  assert primc.make_program(lambda x: x * 2.5)(ints).outputs[0].aval.dtype == "float64"
  # mixed array dtypes promote like numpy, with an explicit convert
  p = primc.make_program(lambda x, y: x + y)(x32, x32.astype(np.float64))
  assert p.outputs[0].aval.dtype == "float64" and p.eqns[0].prim.name == "convert"


# Operands of every kind numpy types differently: Python scalars (weak), numpy scalars and
# 0-d arrays (strong), arrays of each dtype.
OPERANDS = {
  "py_float": 1.5,
  "py_int": 3,
  "py_bool": True,
  "np_f32": np.float32(1.25),
  "np_f64": np.float64(0.75),
  "zero_d_f64": np.asarray(0.5),
  "f32": N(2),
  "f64": N(2).astype(np.float64),
  "i32": np.arange(1, 3, dtype=np.int32),
  "i64": np.arange(1, 3),
  "bool": np.array([True, False]),
}
PROGRAMS = {  # numpy's and primc's spelling of the same computation
  "add": lambda m, a, b: a + b,
  "mul": lambda m, a, b: a * b,
  "truediv": lambda m, a, b: a / (b + 1),
  "sub_scaled": lambda m, a, b: (a * 0.5) - b,
  "fn_add": lambda m, a, b: m.add(a, b),
  "sqrt_mul": lambda m, a, b: m.sqrt(a) * b,
  "power": lambda m, a, b: (a + 0) ** 2 * b,
}


@pytest.mark.parametrize("program", PROGRAMS)
def test_promotion_follows_numpy_in_every_path(program):
  """The result dtype (and value) of numpy's promotion (NEP 50) for every pair of operand
  kinds: eager, traced with the operands as arguments (Python scalars traced weak), and
  compiled. The oracle is numpy itself."""
  fn = PROGRAMS[program]
  boolean = {"py_bool", "bool"}  # bool + bool (numpy's logical or) is refused, clearly
  pairs = [
    (a, b)
    for a in OPERANDS
    for b in OPERANDS
    if (not (a.startswith("py") and b.startswith("py")) or program == "sqrt_mul")
    and not {a, b} <= boolean
  ]
  jitted = primc.jit(lambda a, b: fn(pnp, a, b))
  compiled = {("f32", "py_float"), ("py_int", "i32"), ("np_f64", "f32"), ("py_float", "py_int")}
  for a, b in pairs:
    x, y = OPERANDS[a], OPERANDS[b]
    with np.errstate(all="ignore"):
      want = np.asarray(fn(np, x, y))
    if program == "sqrt_mul" and a in boolean:  # numpy's float of a bool is float16,
      continue  # primc's float64 (native code's floats)
    program_out = primc.make_program(lambda a, b: fn(pnp, a, b))(x, y).outputs[0].aval.dtype
    got = {"eager": np.asarray(fn(pnp, x, y)).dtype.name, "traced": program_out}
    if (a, b) in compiled:
      out = jitted(x, y)
      got["jit"] = out.dtype.name
      np.testing.assert_allclose(out, want, rtol=1e-6)
    assert set(got.values()) == {want.dtype.name}, (a, b, got, want.dtype)


def test_numpy_broadcasting_becomes_explicit_broadcast_in_dim():
  program = primc.make_program(lambda x, y: x + y)(N(3, 1), N(4))
  prims = [e.prim.name for e in program.eqns]
  assert prims.count("broadcast_in_dim") == 2 and prims[-1] == "add"


def test_every_numpy_name_exists_or_raises_naming_it():
  missing = []
  for name in dir(np):
    if name.startswith("_"):
      continue
    try:
      getattr(pnp, name)
    except primc.numpy.NotSupportedError as e:
      assert f"numpy.{name}" in str(e) and isinstance(e, (primc.PrimcError, AttributeError))
      missing.append(name)
  assert "fill_diagonal" in missing and "unique" not in missing
  for sub in ("linalg", "fft"):  # numpy's submodules: each name exists or is refused
    for name in dir(getattr(np, sub)):
      if not name.startswith("_"):
        try:
          getattr(getattr(pnp, sub), name)
        except primc.numpy.NotSupportedError as e:
          assert f"numpy.{sub}.{name}" in str(e), e
  assert callable(pnp.fft.fftshift) and not hasattr(pnp.fft, "fft")
  with pytest.raises(primc.numpy.NotSupportedError, match="complex"):
    pnp.linalg.eig
  with pytest.raises(AttributeError, match="no attribute 'not_a_numpy_name'"):
    pnp.not_a_numpy_name


def test_docs_compatibility_table_matches_the_module():
  """Each name of the user guide's table is in primc.numpy (or its linalg) in the column
  it is listed in: supported names exist, the others raise NotSupportedError naming them."""
  readme = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guide" / "numpy.md"
  rows = [
    line
    for line in readme.read_text().splitlines()
    if line.startswith("| ") and line.count("|") == 4 and "`" in line
  ]
  assert len(rows) >= 5
  for row in rows:
    group, supported, missing = [re.sub(r"\(.*?\)", "", cell) for cell in row.split("|")[1:4]]
    module = pnp.linalg if "linalg" in group else pnp
    for name in re.findall(r"`(\w+)`", supported):
      assert callable(getattr(module, name)) or name in ("r_", "c_"), name
    for name in re.findall(r"`(\w+)`", missing):
      with pytest.raises(pnp.NotSupportedError, match=name):
        getattr(module, name)


@pytest.mark.parametrize(
  "name,op",
  [(n, op) for n, op, _ in ARRAY_FUNCTIONS if n not in NONDIFFERENTIABLE],
  ids=[n for n, _, _ in ARRAY_FUNCTIONS if n not in NONDIFFERENTIABLE],
)
def test_array_functions_derivatives_by_finite_differences(name, op):
  """Orders 1 and 2, forward and reverse (float64, interpreted); compiled gradients equal
  the interpreted ones."""
  x = np.random.default_rng(3).uniform(0.5, 1.5, (3, 4)) * np.array([1, -1, 1, -1])
  primc.check_grads(op, (x,), order=2, modes=("fwd", "rev"))
  w = np.random.default_rng(4).standard_normal(np.shape(_leaves(op(x))[0]))
  g = primc.grad(lambda x: pnp.sum(_leaves_traced(op(x))[0] * w))
  if name in COMPILED_GRADS:  # a representative set compiled (each is a compile)
    np.testing.assert_allclose(primc.jit(g)(x), g(x), rtol=1e-10, atol=1e-12)
  xs = np.stack([x, x[::-1] * 2.0])  # batched: vmap equals a loop
  for got, want in zip(
    _leaves(primc.vmap(op)(xs)), zip(*[_leaves(op(b)) for b in xs]), strict=True
  ):
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12, atol=1e-12)


def test_sinc_derivatives_at_and_near_zero():
  """sinc's series near 0 keeps every derivative of orders 1-3 right there (oracle: finite
  differences in float64; at 0 also the known values 0, -pi^2/3, 0)."""
  x = np.array([0.0, 3e-4, -2e-4, 0.4])
  primc.check_grads(pnp.sinc, (x,), order=3, modes=("fwd", "rev"))
  d2 = primc.vmap(primc.grad(primc.grad(pnp.sinc)))(x[:1])
  np.testing.assert_allclose(d2, [-(np.pi**2) / 3], rtol=1e-12)


_G = np.random.default_rng(12)
_A, _B = _G.uniform(0.3, 1.5, (3, 4)) * np.array([1, -1, 1, -1]), _G.normal(size=(3, 4))
_V, _W = _G.normal(size=(4, 3)), _G.normal(size=(4, 3))
MORE = [  # (name, fn(module, *args), args, differentiable): module is numpy or primc.numpy
  ("fabs", lambda m, a: m.fabs(a), (_A,), True),
  ("fmax_fmin", lambda m, a, b: (m.fmax(a, b), m.fmin(a, b)), (_A, _B), True),
  ("logaddexp2", lambda m, a, b: m.logaddexp2(a, b), (_A, _B), True),
  ("float_power_cbrt", lambda m, a: (m.float_power(m.abs(a), 1.5), m.cbrt(a)), (_A,), True),
  (
    "swapaxes_rollaxis",
    lambda m, a: (m.swapaxes(a[None], 0, 2), m.rollaxis(a[None], 2, 0)),
    (_A,),
    True,
  ),
  ("atleast_dstack", lambda m, a, b: (m.atleast_3d(a[0]), m.dstack([a, b])), (_A, _B), True),
  (
    "meshgrid_broadcast",
    lambda m, a: (*m.meshgrid(a[0], a[1, :2]), *m.broadcast_arrays(a[:, :1], a[0])),
    (_A,),
    True,
  ),
  ("vdot_cross", lambda m, v, w: (m.vdot(v, w), m.cross(v, w)), (_V, _W), True),
  ("select", lambda m, a, b: m.select([a < -0.5, a > 0.5], [a * b, a * 3], 0.25), (_A, _B), True),
  (
    "nan_functions",
    lambda m, a: (m.nan_to_num(a), m.nansum(a, 1), m.nanmean(a, 0), m.nanmax(a, 1), m.nanmin(a)),
    (_A,),
    True,
  ),
  ("average", lambda m, a, b: (m.average(a), m.average(a, 1, m.abs(b[0]) + 0.5)), (_A, _B), True),
  (
    "median_quantile",
    lambda m, a: (
      m.median(a),
      m.median(a, 1),
      m.quantile(a, 0.3, 0),
      m.percentile(a, [20, 75], 1, keepdims=True),
    ),
    (_A,),
    True,
  ),
  ("take_along_axis", lambda m, a: m.take_along_axis(a, np.argsort(_B, 1), 1), (_A,), True),
  (
    "cov_corrcoef",
    lambda m, a, b: (m.cov(a), m.cov(a[0], b[0]), m.corrcoef(a, rowvar=False)),
    (_A, _B),
    True,
  ),
  (
    "interp",
    lambda m, x, fp: m.interp(x, np.array([-1.0, 0.2, 0.9, 2.0]), fp),
    (_B[0] * 0.9, _A[0]),
    True,
  ),
  (
    "correlate_convolve",
    lambda m, a, v: (
      m.correlate(a, v),
      m.correlate(a, v, "same"),
      m.convolve(a, v),
      m.convolve(v, a, "valid"),
    ),
    (_A.ravel(), _B[0, :3]),
    True,
  ),
  ("linspace_traced", lambda m, a: m.linspace(a[0, 0], a[1, 1], 5), (_A,), True),
  (
    "logic_reductions",
    lambda m, a, b: (
      m.isnan(a),
      m.isfinite(a),
      m.logical_xor(a > 0, b > 0),
      m.any(a > 1, 0),
      m.all(a > -1, 1),
      m.count_nonzero(a > 0),
      m.ptp(a, 1),
      m.isclose(a, a + 1e-9),
      m.allclose(a, b),
      m.heaviside(b, 0.5),
    ),
    (_A, _B),
    False,
  ),
  (
    "cumulative_diagflat_tri",
    lambda m, a: (
      m.cumulative_sum(a, axis=1, include_initial=True),
      m.cumulative_prod(a[0]),
      m.diagflat(a[:, :2], 1),
      m.tri(3, 4, 1) * a[:, :4],
    ),
    (_A,),
    True,
  ),
  (
    "gradient_trapezoid",
    lambda m, a, b: (
      *m.gradient(a, 0.5),
      m.gradient(a[0], edge_order=2),
      m.trapezoid(a, dx=0.5, axis=0),
      m.trapezoid(a, np.array([0.0, 0.5, 1.5, 2.0])),
    ),
    (_A, _B),
    True,
  ),
  (
    "polyval_vander_ediff1d",
    lambda m, a, b: (
      m.polyval(a[0, :3], b),
      m.vander(a[1, :3], 4),
      m.ediff1d(a, to_begin=b[0, :1]),
    ),
    (_A, _B),
    True,
  ),
  (
    "vecdot_matvec_nanvar",
    lambda m, v, w: (
      m.vecdot(v, w),
      m.matvec(v, w[:, 0][:3]),
      m.vecmat(v[:, 0], w),
      m.matrix_transpose(v),
      m.nanvar(v, 0, ddof=1),
      m.nanstd(v),
      m.nancumsum(v, 1),
      *m.unstack(w, axis=1),
    ),
    (_V, _W),
    True,
  ),
  (
    "searchsorted_arange",
    lambda m, a, b: (
      m.searchsorted(np.sort(a[0]), b[0]),
      m.arange(1, 7, 2),
      m.arange(0.5, 2.0, 0.25),
    ),
    (_A, _B),
    False,
  ),
]


@pytest.mark.parametrize("name,fn,args,differentiable", MORE, ids=[c[0] for c in MORE])
def test_more_numpy_functions_match_numpy_and_finite_differences(name, fn, args, differentiable):
  """Values and dtypes against numpy itself (eager and traced); derivatives of orders 1-2
  by finite differences in float64; compiled values for a sample."""
  want = _leaves(fn(np, *args))
  program = primc.make_program(lambda *a: _leaves_traced(fn(pnp, *a)))(*args)
  for got in (_leaves(fn(pnp, *args)), primc.interpret(program, *args)):
    for g, w in zip(got, want, strict=True):
      assert np.asarray(g).dtype == np.asarray(w).dtype, (name, g.dtype, w.dtype)
      np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
  if name in ("median_quantile", "correlate_convolve", "interp", "logic_reductions"):
    for g, w in zip(primc.jit(lambda *a: _leaves_traced(fn(pnp, *a)))(*args), want):
      np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
  if differentiable:
    floats = lambda *a: [x for x in _leaves_traced(fn(pnp, *a)) if pnp.result_type(x).kind == "f"]
    primc.check_grads(floats, args, order=2, modes=("fwd", "rev"))


def test_histogram_bincount_matrix_rank_lstsq_match_numpy():
  rng = np.random.default_rng(7)
  d = rng.standard_normal(500)
  for kw in (
    dict(),
    dict(bins=7),
    dict(bins=5, range=(-1, 1.5)),
    dict(bins=6, density=True),
    dict(bins=np.array([-3.0, -1, 0, 0.5, 4])),
    dict(bins=4, weights=np.abs(d)),
    dict(bins=3, range=(0.2, 0.2)),
  ):
    want = np.histogram(d, **kw)
    for f in (lambda a: pnp.histogram(a, **kw), primc.jit(lambda a: pnp.histogram(a, **kw))):
      hist, edges = f(d)
      np.testing.assert_allclose(hist, want[0], rtol=1e-12, err_msg=str(kw))
      np.testing.assert_allclose(edges, want[1], rtol=1e-15, atol=1e-15, err_msg=str(kw))
      assert hist.dtype == want[0].dtype
  w = np.abs(d)
  g = primc.grad(lambda w: pnp.sum(pnp.histogram(d, 5, weights=w)[0] ** 2))(w)
  counts, edges = np.histogram(d, 5, weights=w)
  idx = np.clip(np.searchsorted(edges, d, side="right") - 1, 0, 4)
  np.testing.assert_allclose(g, 2 * counts[idx], rtol=1e-12)
  labels, w5 = np.array([0, 2, 2, 5, 1]), rng.standard_normal(5)
  np.testing.assert_array_equal(pnp.bincount(labels), np.bincount(labels))
  for f in (
    lambda w: pnp.bincount(labels, w, minlength=8),
    primc.jit(lambda w: pnp.bincount(labels, w, minlength=8)),
  ):
    np.testing.assert_allclose(f(w5), np.bincount(labels, w5, minlength=8), rtol=1e-12)
  primc.check_grads(lambda w: pnp.bincount(labels, w) ** 2, (w5,), order=2)
  with pytest.raises(pnp.NotSupportedError, match="bincount of a traced"):
    primc.jit(lambda x: pnp.bincount(x))(labels)
  a = rng.standard_normal((6, 3))
  low = a.copy()
  low[:, 2] = low[:, 0] - 2 * low[:, 1]
  stack = np.stack([a.T @ a, low.T @ low])
  for f in (pnp.linalg.matrix_rank, primc.jit(pnp.linalg.matrix_rank)):
    np.testing.assert_array_equal(f(stack), np.linalg.matrix_rank(stack))
  assert int(pnp.linalg.matrix_rank(np.zeros(3))) == 0 and int(pnp.linalg.matrix_rank(a[0])) == 1
  b = rng.standard_normal((6, 2))
  for m in (a, low):
    want = np.linalg.lstsq(m, b, rcond=None)
    for f in (pnp.linalg.lstsq, primc.jit(pnp.linalg.lstsq)):
      x, resid, rank, s = f(m, b)
      np.testing.assert_allclose(x, want[0], rtol=1e-10, atol=1e-12)
      np.testing.assert_allclose(s, want[3], rtol=1e-12)
      assert int(rank) == want[2]
      np.testing.assert_allclose(resid, np.sum((b - m @ want[0]) ** 2, 0), rtol=1e-10)
  np.testing.assert_allclose(
    pnp.linalg.lstsq(a, b[:, 0])[1], np.linalg.lstsq(a, b[:, 0])[1], rtol=1e-10
  )
  primc.check_grads(lambda m, v: pnp.linalg.lstsq(m, v)[0], (a, b), order=2)


@pytest.mark.parametrize("path", ["eager", "jit"])
def test_bitwise_operations_match_numpy(path):
  """Integers, bools, the two mixed, Python ints, operators and numpy's names; shift counts
  past the width; floats a TypeError as in numpy."""
  wrap = primc.jit if path == "jit" else (lambda f: f)
  a = np.array([5, -7, 12, 0, 2**40 + 3, -1])
  b = np.array([3, 6, -10, 1, 65, 63])
  m = np.array([True, False, True, True, False, True])
  cases = [
    lambda np_, a, b, m: np_.bitwise_and(a, b),
    lambda np_, a, b, m: np_.bitwise_or(a, 12),
    lambda np_, a, b, m: np_.bitwise_xor(m, a),
    lambda np_, a, b, m: np_.invert(a),
    lambda np_, a, b, m: np_.invert(m),
    lambda np_, a, b, m: np_.left_shift(a, b),
    lambda np_, a, b, m: np_.right_shift(a, b),
    lambda np_, a, b, m: np_.bitwise_and(m, m),
    lambda np_, a, b, m: (a & b) | (a ^ 3) + (a << 2) - (b >> 1) + ~a,
    lambda np_, a, b, m: np_.right_shift(a.astype(np_.int32), 3),
  ]
  for k, f in enumerate(cases):
    got, want = wrap(lambda a, b, m: f(pnp, a, b, m))(a, b, m), f(np, a, b, m)
    assert got.dtype == want.dtype, k
    np.testing.assert_array_equal(got, want, err_msg=str(k))
  with pytest.raises(TypeError, match="bitwise"):
    wrap(lambda a: pnp.bitwise_and(a, a))(np.ones(3))
  shifted = wrap(lambda m: pnp.left_shift(m, m))(m)  # bools shift as int8, as in numpy
  assert shifted.dtype == np.left_shift(m, m).dtype
  np.testing.assert_array_equal(shifted, np.left_shift(m, m))
  with pytest.raises(TypeError, match="shifts take integer"):
    wrap(lambda a: pnp.left_shift(a, a))(np.ones(3))


def test_reductions_with_where_need_initial():
  with pytest.raises(primc.PrimcError, match="needs initial"):
    pnp.max(np.ones(3), where=np.ones(3, bool))


def _jax_sized(values, size, fill):
  """numpy's result cut or padded to `size` with `fill` (JAX's size= semantics)."""
  values = np.asarray(values)
  out = np.full((size,) + values.shape[1:], fill, values.dtype)
  out[: min(size, len(values))] = values[:size]
  return out


@pytest.mark.parametrize("seed", range(4))
def test_data_dependent_shapes_take_jax_size(seed):
  rng = np.random.default_rng(seed)
  x = rng.integers(-2, 3, (3, 5)).astype(np.float64) * (rng.random((3, 5)) < 0.5)
  for size in (1, 4, 20):
    want = np.nonzero(x)
    got = primc.jit(lambda a: pnp.nonzero(a, size=size, fill_value=-1))(x)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, _jax_sized(w, size, -1))
    np.testing.assert_array_equal(
      primc.jit(lambda a: pnp.flatnonzero(a, size=size))(x), _jax_sized(np.flatnonzero(x), size, 0)
    )
    np.testing.assert_array_equal(
      primc.jit(lambda a: pnp.argwhere(a, size=size))(x), _jax_sized(np.argwhere(x), size, 0)
    )
    u = np.unique(x)
    for f in (lambda a: pnp.unique(a, size=size), primc.jit(lambda a: pnp.unique(a, size=size))):
      np.testing.assert_array_equal(f(x), _jax_sized(u, size, u.min()))
    # NaNs: one value (numpy's and JAX's equal_nan=True), each its own with equal_nan=False
    xn = np.where(rng.random((3, 5)) < 0.3, np.nan, x)
    for equal_nan in (True, False):
      u = np.unique(xn, equal_nan=equal_nan)
      got = primc.jit(lambda a: pnp.unique(a, size=size, equal_nan=equal_nan))(xn)
      np.testing.assert_array_equal(got, _jax_sized(u, size, u[0]))
  # concrete arrays: numpy's own results, every option
  for got, want in zip(pnp.nonzero(x), np.nonzero(x)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(
    pnp.unique(x, return_index=True, return_counts=True),
    np.unique(x, return_index=True, return_counts=True),
  ):
    np.testing.assert_array_equal(got, want)
  with pytest.raises(pnp.NotSupportedError, match="without size="):
    primc.jit(pnp.nonzero)(x)


def test_apply_along_axis_closes_over_traced_values():
  x, w = np.random.default_rng(2).standard_normal((3, 4)), np.arange(4.0)
  f = lambda w: pnp.sum(pnp.apply_along_axis(lambda r: pnp.sum(pnp.tanh(r * w)), 1, x))
  want = np.sum(np.tanh(x * w))
  np.testing.assert_allclose(f(w), want, rtol=1e-12)
  np.testing.assert_allclose(
    primc.jit(primc.grad(f))(w), np.sum(x * (1 - np.tanh(x * w) ** 2), 0), rtol=1e-10
  )
  primc.check_grads(f, (w,), order=2)


def test_nan_quantiles_match_numpy():
  x = np.random.default_rng(6).standard_normal((4, 6))
  x[0, 1] = x[3, 0] = x[3, 5] = np.nan
  x[2, :] = np.nan
  cases = [
    (lambda m, a: m.nanmedian(a, axis=1)),
    (lambda m, a: m.nanquantile(a, [0.1, 0.75], axis=0, keepdims=True)),
    (lambda m, a: m.nanpercentile(a, 30)),
    (lambda m, a: m.nanmedian(a, keepdims=True)),
  ]
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns about the NaN-only row
    for f in cases:
      want = f(np, x)
      for got in (f(pnp, x), primc.jit(lambda a: f(pnp, a))(x)):
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
  # gradients go to the order statistics used (finite differences need no NaN)
  primc.check_grads(
    lambda a: pnp.nanquantile(a, 0.3, axis=1),
    (np.random.default_rng(7).standard_normal((2, 6)),),
    order=2,
  )


# --- numpy's functions on every operand kind, edge values included ----------------------
# (a generator over numpy names, operand dtypes and values: zeros of both signs,
# infinities, NaN, the integer limits; numpy is the oracle of value and dtype)

DIFF_DTYPES = [np.bool_, np.int32, np.int64, np.float32, np.float64]
DIFF_UNARY = [
  "negative",
  "abs",
  "sign",
  "square",
  "sqrt",
  "exp",
  "log",
  "sin",
  "tanh",
  "floor",
  "ceil",
  "trunc",
  "rint",
  "isnan",
  "isinf",
  "isfinite",
  "logical_not",
  "reciprocal",
  "cbrt",
  "log1p",
  "expm1",
  "arctan",
  "fabs",
  "signbit",
  "exp2",
  "sum",
  "prod",
  "mean",
  "max",
  "min",
  "argmax",
  "argmin",
  "cumsum",
  "cumprod",
  "any",
  "all",
  "count_nonzero",
  "ptp",
  "var",
  "std",
  "nansum",
  "nanmax",
  "nanmin",
  "nanmean",
  "nanprod",
  "nancumsum",
  "sort",
  "argsort",
  "median",
  "diff",
  "flip",
  "nan_to_num",
  "invert",
  "spacing",
  "fix",
  "isposinf",
  "isneginf",
]
DIFF_BINARY = [
  "add",
  "subtract",
  "multiply",
  "divide",
  "floor_divide",
  "mod",
  "fmod",
  "power",
  "maximum",
  "minimum",
  "fmax",
  "fmin",
  "equal",
  "not_equal",
  "less",
  "less_equal",
  "greater",
  "greater_equal",
  "logical_and",
  "logical_or",
  "logical_xor",
  "arctan2",
  "hypot",
  "copysign",
  "logaddexp",
  "heaviside",
  "bitwise_and",
  "bitwise_or",
  "bitwise_xor",
  "left_shift",
  "right_shift",
  "nextafter",
  "float_power",
  "dot",
  "matmul",
  "outer",
  "inner",
  "isclose",
  "allclose",
  "array_equal",
  "kron",
]


def _edge_values(draw, dtype, shape):
  n = int(np.prod(shape, dtype=np.int64))
  if dtype is np.bool_:
    return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)
  if np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    pool = [0, 1, -1, 2, -3, 7, 100, -1000, int(info.max), int(info.min), 2**20, 12345]
  else:
    pool = [0.0, -0.0, 1.0, -1.5, 0.5, 3.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 2.5]
  return np.array(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)), dtype).reshape(
    shape
  )


@st.composite
def _numpy_calls(draw):
  binary = draw(st.booleans())
  name = draw(st.sampled_from(DIFF_BINARY if binary else DIFF_UNARY))
  shape = draw(st.sampled_from([(), (3,), (2, 3), (4, 1)]))
  if name in ("dot", "matmul", "outer", "inner", "kron") and not shape:
    shape = (3,)
  dtypes = [draw(st.sampled_from(DIFF_DTYPES)) for _ in range(2 if binary else 1)]
  # a second operand broadcast against the first (either side)
  other = draw(st.sampled_from([shape, (), (1,), shape[-1:], (1,) * len(shape)]))
  shapes = (
    [shape, other] if name not in ("dot", "matmul", "inner", "kron", "outer") else [shape, shape]
  )
  args = [_edge_values(draw, dt, s) for dt, s in zip(dtypes, shapes)]
  return name, args[::-1] if draw(st.booleans()) else args


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_numpy_calls())
def test_numpy_functions_match_numpy_on_every_operand_kind(call):
  # declared differences: primc has no float16 or int8 (numpy's result for bools in float
  # functions, and for arithmetic that numpy does in int8), and raises where numpy does
  name, args = call
  with np.errstate(all="ignore"):
    try:
      want = np.asarray(getattr(np, name)(*args))
    except Exception:
      return  # numpy refuses these operands
    if want.dtype in (np.float16, np.int8):
      return
    fn = lambda *a: getattr(pnp, name)(*a)
    for path, run in [
      ("eager", lambda: fn(*args)),
      ("jit", lambda: primc.jit(fn)(*args)),
      ("interpreted", lambda: primc.interpret(primc.make_program(fn)(*args), *args)[0]),
    ]:
      try:
        got = np.asarray(run())
      except pnp.NotSupportedError:  # said so, naming the op: never a wrong number
        return
      what = (path, name, [a.dtype.name for a in args], [a.tolist() for a in args])
      assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
      if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=str(what))
      else:
        tol = 2e-6 if want.dtype == np.float32 else 1e-12
        assert np.isclose(got, want, rtol=tol, atol=0, equal_nan=True).all(), (what, got, want)


_FILLS = [  # a value given as an argument, of every kind
  np.float64(0.3),
  np.float32(0.3),
  np.int64(3),
  np.asarray(0.3),
  np.asarray(0.3, np.float32),
  np.asarray(3, np.int32),
  np.asarray([0.3, -1.5, 2.0]),
  np.asarray([0.3, -1.5, 2.0], np.float32),
]


@settings(max_examples=60, deadline=None)
@given(
  fill=st.sampled_from(_FILLS),
  call=st.sampled_from(["full", "full_like", "broadcast_to", "asarray", "where"]),
  dtype=st.sampled_from([None, "float32", "float64"]),
)
def test_a_value_with_a_dtype_keeps_it_on_values_and_traced(fill, call, dtype):
  """A fill value that has a dtype (a numpy scalar, a 0-d or larger array) gives the same
  dtype and values on plain values as traced, where it is a traced argument (the values
  path once gave float32 for a 0-d float64 fill, the trace float64); on values, an array
  that can be written where numpy's can (a full array is new, not a broadcast view)."""
  like = np.zeros((2, 3), np.float32)
  fns = {
    "full": lambda v, np=pnp: np.full((2, 3), v, dtype),
    "full_like": lambda v, np=pnp: np.full_like(like, v, dtype),
    "broadcast_to": lambda v, np=pnp: np.broadcast_to(v, (2, 3)),
    "asarray": lambda v, np=pnp: np.asarray(v, dtype),
    "where": lambda v, np=pnp: np.where(like > 0, like, v),
  }
  fn = fns[call]
  writable = np.asarray(fn(fill.copy(), np)).flags.writeable  # (numpy's own)
  assert np.asarray(fn(fill.copy())).flags.writeable == writable, (call, fill)
  got = {
    "values": np.asarray(fn(fill)),
    "jit": np.asarray(primc.jit(fn)(fill)),
    "interpreted": primc.interpret(primc.make_program(fn)(fill), fill)[0],
  }
  dtypes = {path: out.dtype for path, out in got.items()}
  assert len(set(dtypes.values())) == 1, (call, fill, dtype, dtypes)
  if call in ("full", "asarray") and dtype is None:
    assert dtypes["values"] == np.asarray(fill).dtype  # (its own, as numpy's)
  for out in got.values():
    np.testing.assert_array_equal(out, got["values"])


def _axis_calls(rng, x):
  """numpy calls with axes, keepdims and the other keywords, valid for x's rank."""
  nd = x.ndim
  ax = int(rng.integers(-nd, nd)) if nd else None
  kd = bool(rng.integers(0, 2))
  axes = tuple(sorted({int(a) for a in rng.integers(0, nd, 2)})) if nd else None
  calls = [
    ("sum", dict(axis=ax, keepdims=kd)),
    ("sum", dict(axis=axes)),
    ("prod", dict(axis=ax)),
    ("mean", dict(axis=ax, keepdims=kd)),
    ("max", dict(axis=ax, keepdims=kd)),
    ("min", dict(axis=axes)),
    ("argmax", dict(axis=ax)),
    ("argmin", dict(axis=ax)),
    ("cumsum", dict(axis=ax)),
    ("cumprod", dict(axis=ax)),
    ("std", dict(axis=ax, ddof=int(rng.integers(0, 2)))),
    ("var", dict(axis=axes)),
    ("any", dict(axis=ax)),
    ("all", dict(axis=ax, keepdims=kd)),
    ("count_nonzero", dict(axis=ax)),
    ("ptp", dict(axis=ax)),
    ("nansum", dict(axis=ax)),
    ("nanmean", dict(axis=ax)),
    ("nanmax", dict(axis=ax)),
    ("nanmin", dict(axis=ax)),
    ("median", dict(axis=ax)),
    ("nanmedian", dict(axis=ax)),
    ("quantile", dict(q=float(rng.random()), axis=ax)),
    ("nanquantile", dict(q=np.float64(rng.random()), axis=ax)),
    ("percentile", dict(q=[10.0, 90.0], axis=ax)),
    ("average", dict(axis=ax)),
    ("roll", dict(shift=int(rng.integers(-5, 5)), axis=ax)),
    ("ravel", {}),
    (
      "pad",
      dict(
        pad_width=int(rng.integers(0, 3)),
        mode=str(rng.choice(["constant", "edge", "reflect", "symmetric", "wrap"])),
      ),
    ),
    ("clip", dict(a_min=-1, a_max=2)),
    ("round", dict(decimals=int(rng.integers(-1, 3)))),
    ("repeat", dict(repeats=int(rng.integers(0, 3)), axis=ax)),
    ("tile", dict(reps=(2,) * builtins_max(nd, 1))),
  ]
  if nd <= 1:
    calls += [("cumulative_prod", dict(include_initial=kd))]
  if nd:
    calls += [
      ("sort", dict(axis=ax)),
      ("argsort", dict(axis=ax, kind="stable")),
      ("flip", dict(axis=ax)),
      ("cumulative_sum", dict(axis=ax, include_initial=kd)),
      ("diff", dict(axis=ax, n=int(rng.integers(1, 3)))),
      ("expand_dims", dict(axis=int(rng.integers(-nd - 1, nd + 1)))),
    ]
  if nd >= 2:
    calls += [
      ("trace", {}),
      ("diagonal", {}),
      ("tril", dict(k=int(rng.integers(-2, 3)))),
      ("rot90", dict(k=int(rng.integers(-2, 3)))),
      ("swapaxes", dict(axis1=0, axis2=-1)),
    ]
  return calls


def builtins_max(a, b):
  return a if a > b else b


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32 - 1))
def test_numpy_functions_over_axes_match_numpy(seed):
  rng = np.random.default_rng(seed)
  shape = tuple(int(n) for n in rng.integers(1, 6, int(rng.integers(0, 4))))
  dtype = [np.int32, np.int64, np.float32, np.float64, np.bool_][int(rng.integers(0, 5))]
  if dtype is np.bool_:
    x = rng.random(shape) < 0.5
  elif np.issubdtype(dtype, np.integer):
    x = rng.integers(-50, 50, shape).astype(dtype)
  else:  # NaN, infinities and -0 among them
    x = np.asarray(
      rng.choice([np.nan, np.inf, -np.inf, -0.0, 1.5, -2.0, 0.25, 7.0, -3.5, 1e-3], shape)
    ).astype(dtype)
  calls = _axis_calls(rng, x)
  name, kw = calls[int(rng.integers(0, len(calls)))]
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
      want = np.asarray(getattr(np, name)(x, **kw))
    except Exception:
      return  # numpy refuses these operands
    if want.dtype == np.float16:  # declared (docs/guide/numpy.md): a bool's float is float64
      want = want.astype(np.float64)
    fn = lambda x: getattr(pnp, name)(x, **kw)
    for path, run in [("eager", lambda: fn(x)), ("jit", lambda: primc.jit(fn)(x))]:
      try:
        got = np.asarray(run())
      except pnp.NotSupportedError:
        return
      what = (path, name, kw, x.dtype.name, x.tolist())
      dtype = want.dtype
      if path == "jit" and name.startswith("nan") and "q" in kw:
        # numpy's nanquantile of a slice of NaNs only has the data's dtype (a value-
        # dependent type); a traced array keeps the promoted one, as JAX's
        dtype = np.result_type(want.dtype, np.asarray(kw["q"]).dtype)
      assert got.dtype == dtype and got.shape == want.shape, (what, got.dtype, got.shape)
      if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=str(what))
      else:
        tol = 1e-5 if want.dtype == np.float32 else 1e-10
        assert np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True), (what, got, want)


def test_index_maps_of_0d_arrays_compiled():
  # a pad of a 0-d array has no condition to check: its kernel read `... if () else 0`
  x = np.array(25)
  for ours, theirs in [
    (lambda v: pnp.pad(v, 2), lambda v: np.pad(v, 2)),
    (lambda v: pnp.pad(v * 2.0, 1) + 1, lambda v: np.pad(v * 2.0, 1) + 1),
    (pnp.flip, np.flip),
    (lambda v: pnp.roll(v, 3), lambda v: np.roll(v, 3)),
    (lambda v: pnp.tile(v, 1), lambda v: np.tile(v, 1)),
  ]:
    want = theirs(x)
    for got in (ours(x), primc.jit(ours)(x)):
      assert np.asarray(got).dtype == want.dtype and np.asarray(got).shape == want.shape
      np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_roll_matches_numpy_in_every_path(data):
  """numpy.roll (one `roll` equation per axis): any shift (negative, beyond the size),
  one axis, several, or none (the flat array); on values, interpreted, compiled, batched,
  and its derivatives by finite differences (the transpose rolls back)."""
  shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
  nd = len(shape)
  axis = data.draw(
    st.one_of(
      st.none(),
      st.integers(-nd, nd - 1),
      st.lists(st.integers(0, nd - 1), min_size=1, max_size=2, unique=True).map(tuple),
    )
  )
  shifts = st.integers(-12, 12)
  shift = data.draw(shifts if not isinstance(axis, tuple) else st.tuples(*[shifts] * len(axis)))
  x = np.random.default_rng(nd).standard_normal(shape)
  f = lambda v: pnp.roll(v * 2.0, shift, axis) + 1.0
  want = np.roll(x * 2.0, shift, axis) + 1.0
  program = primc.make_program(f)(x)
  for got in (f(x), primc.interpret(program, x)[0], primc.jit(f)(x)):
    np.testing.assert_array_equal(got, want)
  xs = np.stack([x, -x])
  np.testing.assert_array_equal(primc.vmap(f)(xs), np.stack([f(x), f(-x)]))
  primc.check_grads(f, (x,), order=1, modes=("fwd", "rev"))


_K = np.array(
  [[1.0, np.nan, 3.0, -2.0], [np.nan, np.nan, np.nan, np.nan], [0.5, 2.0, -1.0, 4.0]], np.float32
)
_KI = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
_KW = np.array([[1, 0, 1, 1], [1, 1, 0, 1], [0, 1, 1, 1]], bool)
KEYWORDS = [  # (name, fn(module, a), a): numpy's keyword arguments, NaN rows included
  ("zeros_like_shape", lambda m, a: m.zeros_like(a, shape=(2, 5)), _K),
  ("full_like_shape", lambda m, a: m.full_like(a, 3, shape=(4,)), _KI),
  ("take_wrap", lambda m, a: m.take(a, np.array([7, -9, 13]), mode="wrap"), _KI),
  ("take_clip", lambda m, a: m.take(a, np.array([7, -9, 13]), axis=1, mode="clip"), _KI),
  ("prod_initial_where", lambda m, a: m.prod(a, axis=1, initial=2, where=_KW), _KI),
  ("prod_initial", lambda m, a: m.prod(a, initial=0.5), _K[2]),
  ("nansum_initial", lambda m, a: m.nansum(a, axis=1, initial=2.0), _K),
  ("nanprod_where", lambda m, a: m.nanprod(a, axis=0, where=_KW), _K),
  ("nanmax_initial", lambda m, a: m.nanmax(a, axis=1, initial=-7.0), _K),
  ("nanmin_initial", lambda m, a: m.nanmin(a, axis=1, initial=5.0), _K),
  ("nanmax_initial_where", lambda m, a: m.nanmax(a, axis=0, initial=0.0, where=_KW), _K),
  ("var_correction", lambda m, a: m.var(a, axis=1, correction=1), _K[[0, 2]]),
  ("var_where", lambda m, a: m.var(a, axis=1, where=_KW), _K[[2, 2, 2]]),
  (
    "var_mean",
    lambda m, a: m.var(a, axis=1, mean=np.array([[1.0], [2.0]], np.float32)),
    _K[[0, 2]],
  ),
  ("std_dtype", lambda m, a: m.std(a, dtype=np.float64), _KI),
  ("std_where_ddof", lambda m, a: m.std(a, axis=0, where=_KW, ddof=1), _K[[2, 2, 2]]),
  ("nanvar_correction_where", lambda m, a: m.nanvar(a, axis=1, correction=1, where=_KW), _K),
  (
    "nanstd_mean",
    lambda m, a: m.nanstd(a, axis=1, mean=np.array([[1.0], [0.0], [2.0]], np.float32)),
    _K,
  ),
  ("nanargmax_keepdims", lambda m, a: m.nanargmax(a, axis=1, keepdims=True), _K[[0, 2]]),
  ("meshgrid_sparse", lambda m, a: m.meshgrid(a[0], a[1], a[2, :3], sparse=True), _K),
  ("meshgrid_sparse_ij", lambda m, a: m.meshgrid(a[0], a[2, :3], sparse=True, indexing="ij"), _K),
  ("median_overwrite", lambda m, a: m.median(a, axis=1, overwrite_input=True), _K[[0, 2]]),
  ("diff_prepend_append", lambda m, a: m.diff(a, 2, axis=0, prepend=1.5, append=a[:1]), _KI),
  # no degrees of freedom left (ddof >= n): numpy divides by 0 (inf, nan); nan- gives NaN
  (
    "var_ddof_past_n",
    lambda m, a: (m.var(a, axis=1, ddof=4), m.var(a, axis=1, ddof=5), m.std(a[0, :3], ddof=2.5)),
    _K[[2, 2]],
  ),
  ("var_where_ddof_past_n", lambda m, a: m.var(a, axis=1, where=_KW, ddof=3), _K[[2, 2, 2]]),
  ("nanvar_ddof_past_n", lambda m, a: (m.nanvar(a, axis=1, ddof=3), m.nanstd(a, 1, ddof=1)), _K),
  (
    "cov_ddof_past_n",
    lambda m, a: (m.cov(a[:, :2], ddof=3), m.cov(a[:, :1], ddof=2), m.cov(a[:, :1])),
    _K[[0, 2]],
  ),
  (
    "any_all_where",
    lambda m, a: (m.any(a, 1, where=_KW[:, :3]), m.all(a > 0, where=_KW[0, :3])),
    np.abs(_KI[:, :3]).astype(np.float32) - 1,
  ),
  # reductions over nothing: numpy's identities (False, True, initial), median NaN
  (
    "reductions_of_nothing",
    lambda m, a: (
      m.any(a, 0),
      m.all(a),
      m.median(a, 0),
      m.nanmedian(a),
      m.median(a[:, :0], 1),
      m.max(a, 0, initial=-5.0),
      m.min(a, initial=7.0),
      m.max(a.astype(np.int32), 0, initial=-3),
    ),
    np.zeros((0, 3), np.float32),
  ),
  # NaN: one value to unique (unless equal_nan=False), above every number to searchsorted
  (
    "unique_nans",
    lambda m, a: (m.unique(a), m.unique(a, equal_nan=False)),
    np.array([3.0, np.nan, 1.0, np.nan, 3.0, -0.0]),
  ),
  (
    "searchsorted_nans_sorter",
    lambda m, a: (
      [
        m.searchsorted(np.array([1.0, 2.0, np.nan, np.nan]), a, side=side)
        for side in ("left", "right")
      ]
      + [m.searchsorted(a, a[::-1], sorter=np.argsort(a, kind="stable"))]
    ),
    np.array([np.nan, 5.0, 1.5, -np.inf, np.inf, 2.0, 1.0]),
  ),
  (
    "digitize_edges",
    lambda m, a: [
      m.digitize(a, np.array(b), right=r)
      for b in ([0.0, 1.0, 2.0], [2.0, 1.0, 1.0, 0.0])
      for r in (False, True)
    ],
    np.array([np.nan, 0.5, -np.inf, np.inf, 1.0, 2.5, -0.0, 2.0]),
  ),
  # Horner's rule from zero, as numpy: an infinite x gives NaN; integers stay integers
  (
    "polyval_numpy_horner",
    lambda m, a: (
      m.polyval(np.array([1.0, -2.0, 0.5]), a),
      m.polyval([1, -2, 3], a[2:4].astype(np.int64)),
    ),
    np.array([np.nan, -np.inf, 1.0, 2.0, np.inf]),
  ),
  (
    "cond_singular",
    lambda m, a: (m.linalg.cond(a), m.linalg.cond(a, -2), m.linalg.cond(a, 2)),
    np.array([[[0.0, 0.0], [0.0, 0.0]], [[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]]]),
  ),
  (
    "isin_keywords",
    lambda m, a: m.isin(a, [np.nan, 2.0, 1.0], assume_unique=True, invert=True, kind="sort"),
    np.array([1.0, np.nan, 2.0, 3.0]),
  ),
  (
    "cov_weights_dtype",
    lambda m, a: (
      m.cov(a, fweights=np.array([1, 2, 0, 3])),
      m.cov(a, aweights=np.array([0.5, 1, 2, 1])),
      m.cov(a, ddof=2, fweights=[1, 1, 2, 1], aweights=[1.0, 0.25, 2.0, 1.0]),
      m.cov(a, rowvar=False, bias=True, aweights=[1.0, 2.0]),
      m.cov(a, dtype=np.float32),
      m.corrcoef(a),
      m.corrcoef(a[0], a[1], dtype=np.float32),
    ),
    _K[[0, 2]] * np.array([1, 0, 1, 1], np.float32),
  ),
]


VALUE_SHAPED = {"unique_nans"}  # results whose shape depends on the values


@pytest.mark.parametrize("path", ["eager", "jit", "vmap"])
@pytest.mark.parametrize("name,fn,a", KEYWORDS, ids=[k[0] for k in KEYWORDS])
def test_numpy_keywords_match_numpy(name, fn, a, path):
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    want = fn(np, a.copy())
    if path == "vmap":  # a batch of two: numpy's result for each, stacked
      want = tree_map(lambda w: np.stack([w, w]), want)
  if path != "eager" and name in VALUE_SHAPED:  # traced: said so (JAX's size= needed)
    with pytest.raises(pnp.NotSupportedError, match="size="):
      primc.jit(lambda a: fn(pnp, a))(a)
    return
  if path == "vmap":
    got = primc.jit(primc.vmap(lambda a: fn(pnp, a)))(np.stack([a, a]))
  else:
    got = fn(pnp, a) if path == "eager" else primc.jit(lambda a: fn(pnp, a))(a)
  for g, w in zip(*(x if isinstance(x, (list, tuple)) else [x] for x in (got, want)), strict=True):
    g, w = np.asarray(g), np.asarray(w)
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
    np.testing.assert_allclose(g, w, rtol=1e-6, equal_nan=True)


def test_numpy_keyword_errors():
  with pytest.raises(primc.PrimcError, match="^var on .*simultaneously"):  # named: var
    pnp.var(np.ones(3), ddof=1, correction=1)
  with pytest.raises(primc.PrimcError, match="mode must be"):
    pnp.take(np.ones(3), [0], mode="nearest")
  with pytest.raises(primc.PrimcError, match="non-negative"):
    pnp.diff(np.ones(3), -1)
  # a slice of NaNs only: numpy's error for a known array, JAX's -1 for a traced one
  nans = np.array([[1.0, np.nan], [np.nan, np.nan]])
  for f in (pnp.nanargmax, pnp.nanargmin):
    with pytest.raises(ValueError, match="All-NaN"):
      f(nans, axis=1)
    np.testing.assert_array_equal(primc.jit(lambda a: f(a, axis=1))(nans), [0, -1])
    np.testing.assert_array_equal(primc.jit(lambda a: f(a, axis=1, keepdims=True))(nans[:1]), [[0]])
  for weights in (np.zeros(3), [1, -1, 0]):
    with pytest.raises(ZeroDivisionError, match="sum to zero"):
      primc.jit(lambda a: pnp.average(a, axis=1, weights=weights))(np.ones((2, 3)))


@pytest.mark.parametrize(
  "exponent", [0.5, np.float32(0.5), np.array(0.5), np.array([0.5])], ids=lambda e: repr(e)
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_power_of_one_half_is_numpys_square_root(exponent, dtype):
  """numpy computes a power with a scalar exponent of 1/2 as a square root
  (`fast_scalar_power`): (-inf) ** 0.5 is nan and (-0.0) ** 0.5 is -0.0 there, where
  pow gives inf and 0.0 (hypothesis found jit's inf)."""
  x = np.array([-np.inf, -0.0, 0.0, 4.0, -1.0, np.inf], dtype)
  with np.errstate(invalid="ignore"):
    want = np.power(x, exponent)
  for got in (
    pnp.power(x, exponent),
    primc.jit(lambda a: pnp.power(a, exponent))(x),
    primc.interpret(primc.make_program(lambda a: pnp.power(a, exponent))(x), x)[0],
  ):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
  # traced, its value unknown while tracing: numpy's nan at -inf all the same
  traced = primc.jit(lambda a, p: pnp.power(a, p))(x, exponent)
  np.testing.assert_array_equal(np.isnan(traced), np.isnan(want))
