"""primc.numpy.linalg (inv, solve, det, slogdet, cholesky, eigh, eigvalsh, qr,
solve_triangular, svd, pinv, norm): values against numpy (scipy for solve_triangular) traced, eager
and compiled, batched; derivatives by finite differences at orders 1-2 and compiled; vmap."""

import numpy as np
import pytest
import scipy.linalg

import primc
import primc.numpy as pnp

R = np.random.default_rng(21)


def _matrices(*shape):
  return R.standard_normal(shape) + shape[-1] * np.eye(shape[-1])


A, A1 = _matrices(2, 3, 3), _matrices(4, 4)
CASES = [
  ("inv", pnp.linalg.inv, np.linalg.inv, (A,)),
  ("inv_single", pnp.linalg.inv, np.linalg.inv, (A1,)),
  ("solve_matrix", pnp.linalg.solve, np.linalg.solve, (A, R.standard_normal((2, 3, 2)))),
  ("solve_vector", pnp.linalg.solve, np.linalg.solve, (A, R.standard_normal(3))),
  (
    "solve_broadcast_batch",
    pnp.linalg.solve,
    np.linalg.solve,
    (_matrices(3, 3), R.standard_normal((2, 3, 1))),
  ),
  ("det", pnp.linalg.det, np.linalg.det, (A,)),
  (
    "slogdet",
    lambda a: pnp.linalg.slogdet(a),
    lambda a: tuple(np.linalg.slogdet(a)),
    (A * np.array([1, -1, 1])[:, None],),
  ),
  ("norm", pnp.linalg.norm, np.linalg.norm, (A1,)),
]


def _spd(*shape):
  x = R.standard_normal(shape)
  return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _signed(v):
  """Eigenvectors (columns) with their largest-magnitude entry positive (primc's sign)."""
  out = v.copy()
  for index in np.ndindex(v.shape[:-2]):
    for j in range(v.shape[-1]):
      col = out[index][:, j]
      out[index][:, j] = col if col[np.argmax(np.abs(col))] > 0 else -col
  return out


def _per_matrix(fn):
  """scipy's unbatched function over the leading axes."""

  def batched(a, b, **kw):
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2] if b.ndim > 1 else ())
    a = np.broadcast_to(a, lead + a.shape[-2:])
    b = np.broadcast_to(b, lead + b.shape[-(2 if b.ndim > 1 else 1) :])
    return np.stack([fn(a[i], b[i], **kw) for i in np.ndindex(lead)]).reshape(
      lead + b.shape[len(lead) :]
    )

  return batched


S, TALL, WIDE = _spd(2, 3, 3), R.standard_normal((2, 4, 3)), R.standard_normal((3, 4))
GENERAL = R.standard_normal((3, 3))  # not symmetric: the lower triangle is read
solve_tri = _per_matrix(scipy.linalg.solve_triangular)
CASES += [
  ("cholesky", pnp.linalg.cholesky, np.linalg.cholesky, (S,)),
  (
    "cholesky_upper_triangle_ignored",
    pnp.linalg.cholesky,
    np.linalg.cholesky,
    (np.tril(S[0]) + np.triu(GENERAL, 1),),
  ),
  (
    "eigh",
    lambda a: tuple(pnp.linalg.eigh(a)),
    lambda a: (np.linalg.eigh(a)[0], _signed(np.linalg.eigh(a)[1])),
    (S + np.tril(GENERAL),),
  ),
  (
    "eigh_upper",
    lambda a: pnp.linalg.eigh(a, UPLO="U").eigenvectors,
    lambda a: _signed(np.linalg.eigh(a, UPLO="U")[1]),
    (S[1] + np.triu(GENERAL),),
  ),
  ("eigvalsh", pnp.linalg.eigvalsh, np.linalg.eigvalsh, (S + GENERAL,)),
  ("qr_tall_q", lambda a: pnp.linalg.qr(a).Q, lambda a: np.linalg.qr(a)[0], (TALL,)),
  ("qr_tall_r", lambda a: pnp.linalg.qr(a).R, lambda a: np.linalg.qr(a)[1], (TALL,)),
  ("qr_square", lambda a: tuple(pnp.linalg.qr(a)), lambda a: tuple(np.linalg.qr(a)), (A1,)),
  ("qr_r_mode", lambda a: pnp.linalg.qr(a, mode="r"), lambda a: np.linalg.qr(a, mode="r"), (TALL,)),
  (
    "solve_triangular_lower",
    lambda a, b: pnp.linalg.solve_triangular(a, b, lower=True),
    lambda a, b: solve_tri(a, b, lower=True),
    (A, R.standard_normal((2, 3, 2))),
  ),
  (
    "solve_triangular_upper_trans",
    lambda a, b: pnp.linalg.solve_triangular(a, b, trans="T"),
    lambda a, b: solve_tri(a, b, trans="T"),
    (A, R.standard_normal((3, 2))),
  ),
  (
    "solve_triangular_vector_unit",
    lambda a, b: pnp.linalg.solve_triangular(a, b, trans=1, lower=True, unit_diagonal=True),
    lambda a, b: solve_tri(a, b, trans=1, lower=True, unit_diagonal=True),
    (A1, R.standard_normal(4)),
  ),
]


def _signed_svd(a):
  """numpy's reduced SVD with each pair of singular vectors signed as primc signs them."""
  u, s, vh = np.linalg.svd(a, full_matrices=False)
  v = _signed(np.swapaxes(vh, -1, -2))
  signs = np.sign(np.sum(v * np.swapaxes(vh, -1, -2), -2, keepdims=True))
  return u * signs, s, np.swapaxes(v, -1, -2)


CASES += [
  ("svd_tall", lambda a: tuple(pnp.linalg.svd(a, full_matrices=False)), _signed_svd, (TALL,)),
  (
    "svd_wide_vh",
    lambda a: pnp.linalg.svd(a, full_matrices=False).Vh,
    lambda a: _signed_svd(a)[2],
    (WIDE,),
  ),
  ("svd_square_u", lambda a: pnp.linalg.svd(a).U, lambda a: _signed_svd(a)[0], (A1,)),
  (
    "svdvals",
    lambda a: pnp.linalg.svd(a, compute_uv=False),
    lambda a: np.linalg.svd(a, compute_uv=False),
    (TALL,),
  ),
  ("pinv_tall", pnp.linalg.pinv, np.linalg.pinv, (TALL,)),
  ("pinv_wide", pnp.linalg.pinv, np.linalg.pinv, (WIDE,)),
]
NORMS = [
  (None, None, False),
  (np.inf, 1, False),
  (-np.inf, 0, True),
  (1, -1, False),
  (3, 1, True),
  (0.5, 0, False),
  ("fro", (0, 2), False),
  (1, (0, 1), True),
  (-1, (2, 1), False),
  (np.inf, (1, 2), False),
  (-np.inf, (2, 0), True),
]
X3 = R.standard_normal((2, 3, 4))
CASES += [
  (
    f"norm_{o}_{ax}_{kd}".replace(" ", ""),
    lambda x, o=o, ax=ax, kd=kd: pnp.linalg.norm(x, o, ax, kd),
    lambda x, o=o, ax=ax, kd=kd: np.linalg.norm(x, o, ax, kd),
    (X3,),
  )
  for o, ax, kd in NORMS
]
NORMS += [(2, (0, 2), True), (-2, (2, 1), False), ("nuc", (1, 2), False)]
CASES += [
  (
    f"norm_{o}_{ax}_{kd}".replace(" ", ""),
    lambda x, o=o, ax=ax, kd=kd: pnp.linalg.norm(x, o, ax, kd),
    lambda x, o=o, ax=ax, kd=kd: np.linalg.norm(x, o, ax, kd),
    (X3,),
  )
  for o, ax, kd in NORMS[-3:]
]
CASES += [
  (
    f"norm_matrix_{o}",
    lambda x, o=o: pnp.linalg.norm(x, o),
    lambda x, o=o: np.linalg.norm(x, o),
    (GENERAL,),
  )
  for o in ("fro", 1, -np.inf, 2, "nuc")
]
# compiled values: every kernel variant once (one matrix kind per primitive, both qr
# packings, lower/upper and transposed substitution) and a sample of the norms
COMPILED = {
  "inv",
  "inv_single",
  "solve_matrix",
  "solve_vector",
  "det",
  "slogdet",
  "cholesky",
  "eigh",
  "qr_tall_q",
  "qr_r_mode",
  "qr_square",
  "solve_triangular_lower",
  "solve_triangular_upper_trans",
  "svd_tall",
  "svd_wide_vh",
  "pinv_wide",
  "norm_inf_1_False",
  "norm_matrix_-inf",
  "norm_nuc_(1,2)_False",
}


def _leaves(x):
  return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("name,op,ref,args", CASES, ids=[c[0] for c in CASES])
def test_values_traced_eager_compiled(name, op, ref, args):
  want = _leaves(ref(*args))
  program = primc.make_program(lambda *a: _leaves(op(*a)))(*args)
  compiled = name in COMPILED
  paths = [_leaves(op(*args)), primc.interpret(program, *args)]
  for got in paths + ([_leaves(primc.jit(op)(*args))] if compiled else []):
    for g, w in zip(got, want, strict=True):
      np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
  if name in ("inv", "solve_matrix", "slogdet"):  # float32 kernels: a representative set
    f32 = [a.astype(np.float32) for a in args]
    for g, w in zip(_leaves(primc.jit(op)(*f32)), want, strict=True):
      np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name,op,ref,args", CASES, ids=[c[0] for c in CASES])
def test_derivatives_every_path(name, op, ref, args):
  f = lambda *a: _leaves(op(*a))[-1]  # slogdet: its log|det|
  primc.check_grads(f, args, order=2, modes=("fwd", "rev"))
  nums = tuple(range(len(args)))
  g = primc.grad(lambda *a: pnp.sum(f(*a) * 0.5), argnums=nums)
  if name in (
    "solve_vector",
    "slogdet",
    "eigh",
    "solve_triangular_upper_trans",
    "svd_tall",
  ):  # compiled gradients: a sample (each is a large compile)
    for got, want in zip(primc.jit(g)(*args), g(*args), strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
  batched = [np.stack([a, a * 1.1]) for a in args]  # vmap equals a loop
  got = primc.vmap(f)(*batched)
  for k in range(2):
    np.testing.assert_allclose(got[k], f(*[b[k] for b in batched]), rtol=1e-10, atol=1e-12)


def test_hessian_of_log_det():
  # d^2 log|det A| [H, K] = -tr(A^-1 H A^-1 K)
  a = A1
  h = primc.jit(primc.hessian(lambda a: pnp.linalg.slogdet(a)[1]))(a)
  inv = np.linalg.inv(a)
  np.testing.assert_allclose(h, -np.einsum("li,jk->ijkl", inv, inv), rtol=1e-9, atol=1e-12)


def test_errors():
  with pytest.raises(primc.ShapeError, match="square"):
    pnp.linalg.inv(np.ones((2, 3)))
  with pytest.raises(np.linalg.LinAlgError):
    pnp.linalg.inv(np.ones((3, 3)))  # singular: numpy's error
  with pytest.raises(pnp.NotSupportedError, match="linalg.eig"):
    pnp.linalg.eig
  with pytest.raises(pnp.NotSupportedError, match="full_matrices=False"):
    pnp.linalg.svd(TALL)
  with pytest.raises(primc.PrimcError, match="qr.*at least as many rows"):
    primc.grad(lambda a: pnp.sum(pnp.linalg.qr(a).R))(WIDE)
  with pytest.raises(pnp.NotSupportedError, match="complete"):
    pnp.linalg.qr(TALL, mode="complete")


SINGULAR = np.array([[[1.0, 0, 0], [0, 2, 0], [0, 0, 3]], [[1, 2, 3], [2, 4, 6], [0, 0, 1]]])
FAILING = [  # (op, batch, the matrix numpy fails on, what the compiled error says)
  ("inv", pnp.linalg.inv, SINGULAR, "matrix 1 of the batch is singular"),
  ("solve", lambda a: pnp.linalg.solve(a, a), SINGULAR, "matrix 1 of the batch is singular"),
  (
    "cholesky",
    pnp.linalg.cholesky,
    SINGULAR * np.array([1, -1, 1]),
    "matrix 0 of the batch is not positive definite",
  ),
  (
    "triangular_solve",
    lambda a: pnp.linalg.solve_triangular(a, a[..., :1]),
    np.stack([np.eye(3), np.triu(SINGULAR[1]) * [1, 0, 1]]),
    "matrix 1 .* zero on the diagonal",
  ),
  # (numpy answers inv, solve and det of a matrix with nans with nans, as primc does:
  # test_a_matrix_with_nans_gives_numpys_nans_compiled; svd's raises in both)
  (
    "svd",
    lambda a: pnp.linalg.svd(a)[1],
    np.stack([np.eye(3), np.full((3, 3), np.nan)]),
    "matrix 1 of the batch has infs or nans",
  ),
]


@pytest.mark.parametrize(
  "prim,op,a,message", FAILING, ids=[f[0] + str(i) for i, f in enumerate(FAILING)]
)
def test_failures_raise_linalg_error_naming_the_matrix(prim, op, a, message):
  """numpy raises LinAlgError (interpreted); compiled, the same error names the op, the
  operand and which matrix of the batch (never a crash or a wrong number)."""
  with pytest.raises(np.linalg.LinAlgError):
    op(a)
  with pytest.raises(np.linalg.LinAlgError, match=f"{prim} of f64.*{message}"):
    primc.jit(op)(a)


_R = np.random.default_rng(21)
_SQ = _R.standard_normal((2, 3, 3)) + 3 * np.eye(3)
_T = _R.standard_normal((6, 2, 3)) + 4 * np.eye(6).reshape(6, 2, 3)
# numpy.linalg's other functions: (function of the module, arguments, finite differences)
MORE = {
  "matrix_power_3": (lambda m, a: m.matrix_power(a, 3), (_SQ,), True),
  "matrix_power_-2": (lambda m, a: m.matrix_power(a, -2), (_SQ,), True),
  "matrix_power_0": (lambda m, a: m.matrix_power(a, 0), (_SQ,), False),
  "multi_dot": (
    lambda m, a, b, c: m.multi_dot([a, b, c]),
    (_R.standard_normal(3), _R.standard_normal((3, 4)), _R.standard_normal((4, 2))),
    True,
  ),
  "cond": (lambda m, a: m.cond(a), (_SQ,), True),
  "cond_fro": (lambda m, a: m.cond(a, "fro"), (_SQ,), True),
  "cond_-2": (lambda m, a: m.cond(a, -2), (_SQ,), True),
  "matrix_norm_nuc": (lambda m, a: m.matrix_norm(a, ord="nuc", keepdims=True), (_SQ,), True),
  "vector_norm": (lambda m, a: m.vector_norm(a), (_SQ,), True),
  "vector_norm_axes": (
    lambda m, a: m.vector_norm(a, axis=(1, 2), ord=3, keepdims=True),
    (_SQ,),
    True,
  ),
  "diagonal": (lambda m, a: m.diagonal(a, offset=1), (_R.standard_normal((2, 3, 5)),), True),
  "diagonal_below": (lambda m, a: m.diagonal(a, offset=-2), (_R.standard_normal((2, 4, 3)),), True),
  "trace": (lambda m, a: m.trace(a, offset=1), (_R.standard_normal((2, 3, 5)),), True),
  "tensorinv": (lambda m, a: m.tensorinv(a, ind=1), (_T,), True),
  "tensorsolve": (lambda m, a, b: m.tensorsolve(a, b), (_T, _R.standard_normal(6)), True),
  "cross": (
    lambda m, a, b: m.cross(a, b),
    (_R.standard_normal((4, 3)), _R.standard_normal((4, 3))),
    True,
  ),
  "vecdot": (lambda m, a, b: m.vecdot(a, b), (_SQ, _SQ[::-1]), True),
}


@pytest.mark.parametrize("name", MORE)
def test_more_linalg_functions_match_numpy(name):
  fn, args, smooth = MORE[name]
  want = fn(np.linalg, *args)
  for got in (fn(pnp.linalg, *args), primc.jit(lambda *a: fn(pnp.linalg, *a))(*args)):
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
  if smooth:
    primc.check_grads(lambda *a: fn(pnp.linalg, *a), args, order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("op", ["inv", "solve", "det"])
@pytest.mark.parametrize("n", [3, 20])
def test_a_matrix_with_nans_gives_numpys_nans_compiled(op, n):
  """numba's LAPACK calls refuse infs and nans where numpy answers with NaNs (a Gaussian
  process whose optimizer wandered): the compiled kernel gives numpy's answer."""
  rng = np.random.default_rng(n)
  a = rng.standard_normal((2, n, n)) + n * np.eye(n)
  a[0, 1, 2] = np.nan  # the first matrix of the batch only
  b = rng.standard_normal((2, n, 2))
  fns = {
    "inv": (lambda a: pnp.linalg.inv(a * 1.0), np.linalg.inv),
    "solve": (lambda a: pnp.linalg.solve(a * 1.0, b), lambda a: np.linalg.solve(a, b)),
    "det": (lambda a: pnp.linalg.det(a * 1.0), np.linalg.det),
  }
  ours, theirs = fns[op]
  with np.errstate(all="ignore"):
    want = theirs(a)
  got = primc.jit(ours, tiered=False)(a)  # compiled, not a first call interpreted
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_allclose(got[1], want[1], rtol=1e-9)
