"""Every primc.numpy op, traced and interpreted (and run eagerly), equals numpy."""
import numpy as np
import pytest

import primc
import primc.numpy as pnp


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
    ("sum_axis_keepdims", lambda x: pnp.sum(x, axis=1, keepdims=True),
     lambda x: np.sum(x, axis=1, keepdims=True), (N(3, 4, 2),)),
    ("sum_neg_axes", lambda x: pnp.sum(x, axis=(-1, 0)), lambda x: np.sum(x, axis=(-1, 0)), (N(3, 4, 2),)),
    ("mean", lambda x: pnp.mean(x, axis=0), lambda x: np.mean(x, axis=0), (N(3, 4),)),
    ("max", lambda x: pnp.max(x, axis=-1), lambda x: np.max(x, axis=-1), (N(3, 4),)),
    ("min", pnp.min, np.min, (N(3, 4),)),
    ("norm_default", pnp.norm, np.linalg.norm, (N(3, 4),)),
    ("norm_p2_axis", lambda x: pnp.norm(x, p=2, axis=1), lambda x: np.linalg.norm(x, axis=1), (N(3, 4),)),
    ("sqrt", pnp.sqrt, np.sqrt, (POS(5),)),
    ("tanh", pnp.tanh, np.tanh, (N(5),)),
    ("sin", pnp.sin, np.sin, (N(5),)),
    ("cos", pnp.cos, np.cos, (N(5),)),
    ("exp", pnp.exp, np.exp, (N(5),)),
    ("log", pnp.log, np.log, (POS(5),)),
    ("abs", pnp.abs, np.abs, (N(5),)),
    *[(name, getattr(pnp, name), getattr(np, name), (make(5),)) for name, make in (
        ("tan", N), ("sinh", N), ("cosh", N), ("arctan", N), ("arcsinh", N), ("expm1", N),
        ("exp2", N), ("deg2rad", N), ("rad2deg", N), ("radians", N), ("degrees", N),
        ("log2", POS), ("log10", POS), ("arccosh", lambda n: POS(n) + 0.6),
        ("arcsin", lambda n: np.tanh(N(n))), ("arccos", lambda n: np.tanh(N(n))),
        ("arctanh", lambda n: np.tanh(N(n))), ("log1p", lambda n: POS(n) - 0.9),
        ("asin", lambda n: np.tanh(N(n))), ("atan", N))],
    *[(name, getattr(pnp, name), getattr(np, name), (N(3, 4), N(4) * 2)) for name in (
        "arctan2", "atan2", "hypot", "logaddexp")],
    ("logaddexp_equal_and_inf", pnp.logaddexp, np.logaddexp,
     (np.array([1.0, -np.inf, np.inf, 3.0], np.float32), np.array([1.0, -np.inf, np.inf, -np.inf], np.float32))),
    ("clip", lambda x: pnp.clip(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), (N(3, 4),)),
    ("clip_upper", lambda x: pnp.clip(x, None, 0.2), lambda x: np.clip(x, None, 0.2), (N(6),)),
    ("clip_arrays", pnp.clip, np.clip, (N(3, 4), N(4) - 1, N(3, 1) + 1)),
    ("square", pnp.square, np.square, (N(5),)),
    ("reciprocal", pnp.reciprocal, np.reciprocal, (POS(5),)),
    ("maximum_broadcast", pnp.maximum, np.maximum, (N(3, 1), N(1, 4))),
    ("minimum_scalar", lambda x: pnp.minimum(x, 0.5), lambda x: np.minimum(x, np.float32(0.5)), (N(3, 4),)),
    ("where", lambda c, x, y: pnp.where(c > 0, x, y), lambda c, x, y: np.where(c > 0, x, y),
     (N(3, 1), N(3, 4), N(4))),
    ("reshape", lambda x: pnp.reshape(x, (2, -1)), lambda x: np.reshape(x, (2, -1)), (N(3, 4),)),
    ("broadcast_to", lambda x: pnp.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)), (N(3, 1),)),
    ("transpose", pnp.transpose, np.transpose, (N(2, 3, 4),)),
    ("transpose_axes", lambda x: pnp.transpose(x, (1, 0, 2)), lambda x: np.transpose(x, (1, 0, 2)), (N(2, 3, 4),)),
    ("split", lambda x: pnp.split(x, 2, axis=1), lambda x: np.split(x, 2, axis=1), (N(3, 4),)),
    ("split_points", lambda x: pnp.split(x, [1, 3]), lambda x: np.split(x, [1, 3]), (N(5, 2),)),
    ("concatenate", lambda x, y: pnp.concatenate([x, y], axis=1),
     lambda x, y: np.concatenate([x, y], axis=1), (N(2, 3), N(2, 2))),
    ("concat", lambda x, y: pnp.concat([x, y]), lambda x, y: np.concatenate([x, y]), (N(2, 3), N(1, 3))),
    ("stack", lambda x, y: pnp.stack([x, y], 1), lambda x, y: np.stack([x, y], 1), (N(2, 3), N(2, 3))),
    ("slicing", lambda x: x[1:, ::2, 0], lambda x: x[1:, ::2, 0], (N(3, 5, 2),)),
    ("slicing_none_ellipsis", lambda x: x[None, ..., -1], lambda x: x[None, ..., -1], (N(3, 5, 2),)),
    ("take", lambda x: pnp.take(x, IDX, axis=1), lambda x: np.take(x, IDX, axis=1), (N(2, 3),)),
    ("index_select", lambda x: pnp.index_select(x, IDX), lambda x: x[IDX], (N(3, 2),)),
    ("gather", lambda x: pnp.gather(x, IDX), lambda x: x[IDX], (N(3, 2),)),
    ("array_index", lambda x: x[IDX], lambda x: x[IDX], (N(3, 2),)),
    ("zeros_like", pnp.zeros_like, np.zeros_like, (N(2, 3),)),
    ("ones_like", pnp.ones_like, np.ones_like, (N(2, 3),)),
    ("full", lambda x: x + pnp.full((2, 3), 2.5), lambda x: x + np.float32(2.5), (N(2, 3),)),
    ("scale", lambda x: pnp.scale(x, 2.0, 1.0), lambda x: 2 * x + 1, (N(2, 3),)),
    ("scale_bias_first", lambda x: pnp.scale(x, 2.0, 1.0, bias_after_scale=False),
     lambda x: 2 * (x + 1), (N(2, 3),)),
    ("assign", pnp.assign, np.copy, (N(2, 3),)),
    ("sigmoid", pnp.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (N(5),)),
    ("relu", pnp.relu, lambda x: np.maximum(x, 0), (N(5),)),
    ("softmax", pnp.softmax, _softmax, (N(3, 4),)),
    ("log_softmax", lambda x: pnp.log_softmax(x, 0), lambda x: np.log(_softmax(x, 0)), (N(3, 4),)),
    ("logsumexp", lambda x: pnp.logsumexp(x, 1), lambda x: _lse(x, 1), (N(3, 4),)),
    ("bce_with_logits", pnp.binary_cross_entropy_with_logits, _bce,
     (N(4, 3), (N(4, 3) > 0).astype(np.float32))),
    ("cross_entropy", pnp.cross_entropy, _ce, (N(4, 3), np.array([0, 2, 1, 2], np.int32))),
    ("add_sub_mul_div_pow", lambda x, y: (x + y, x - y, x * y, x / y, POS(3) ** y),
     lambda x, y: (x + y, x - y, x * y, x / y, POS(3) ** y), (N(3), POS(3))),
    ("operators_with_scalars", lambda x: (2.0 * x, 1.0 - x, 1 / x, x ** 2, -x, x @ x.T),
     lambda x: (2 * x, 1 - x, 1 / x, x ** 2, -x, x @ x.T), (POS(2, 2),)),
    ("comparisons", lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y),
     lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y), (N(4), N(1))),
    ("methods", lambda x: (x.T, x.reshape(4, 2), x.sum(), x.mean(0), x.max(), x.shape == (2, 4)),
     lambda x: (x.T, x.reshape(4, 2), x.sum(), x.mean(0), x.max(), True), (N(2, 4),)),
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
      if w.dtype.kind == "f":
        assert got.dtype == np.float32
      np.testing.assert_allclose(got, w, rtol=2e-6, atol=2e-6)


def _leaves_traced(x):
  if isinstance(x, (list, tuple)):
    return [y for item in x for y in _leaves_traced(item)]
  return [x if not isinstance(x, bool) else np.asarray(x)]


@pytest.mark.parametrize("a,b", [((3, 1), (1, 4)), ((), (2, 3)), ((2, 1, 3), (4, 1)),
                                 ((1,), (5,)), ((4, 1, 1), (1, 2, 3)), ((1, 1), ())])
def test_broadcasting_edge_cases(a, b):
  x, y = N(*a) if a else np.float32(0.5) * np.ones((), np.float32), N(*b) if b else np.ones((), np.float32)
  program = primc.make_program(lambda x, y: x * y - y)(x, y)
  (got,) = primc.interpret(program, x, y)
  np.testing.assert_allclose(got, x * y - y, rtol=1e-6)
  assert got.shape == np.broadcast_shapes(a, b)


def test_python_scalars_are_weak_typed():
  x32 = N(3)
  assert (primc.make_program(lambda x: x * 2.0)(x32).outputs[0].aval.dtype) == "float32"
  assert primc.make_program(lambda x: 1 + x)(x32.astype(np.float64)).outputs[0].aval.dtype == "float64"
  ints = np.arange(3, dtype=np.int32)
  assert primc.make_program(lambda x: x * 2)(ints).outputs[0].aval.dtype == "int32"
  assert primc.make_program(lambda x: x * 2.5)(ints).outputs[0].aval.dtype == "float32"
  # mixed array dtypes promote like numpy, with an explicit convert
  p = primc.make_program(lambda x, y: x + y)(x32, x32.astype(np.float64))
  assert p.outputs[0].aval.dtype == "float64" and p.eqns[0].prim.name == "convert"


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
  assert "einsum" in missing and "sinh" not in missing and hasattr(pnp, "fft") is False
  with pytest.raises(AttributeError, match="no attribute 'not_a_numpy_name'"):
    pnp.not_a_numpy_name
