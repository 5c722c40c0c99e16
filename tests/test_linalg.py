"""primc.numpy.linalg (inv, solve, det, slogdet): values against numpy traced, eager and
compiled, batched; derivatives by finite differences at orders 1-2 and compiled; vmap."""
import numpy as np
import pytest

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
    ("solve_broadcast_batch", pnp.linalg.solve, np.linalg.solve,
     (_matrices(3, 3), R.standard_normal((2, 3, 1)))),
    ("det", pnp.linalg.det, np.linalg.det, (A,)),
    ("slogdet", lambda a: pnp.linalg.slogdet(a), lambda a: tuple(np.linalg.slogdet(a)),
     (A * np.array([1, -1, 1])[:, None],)),
    ("norm", pnp.linalg.norm, np.linalg.norm, (A1,)),
]


def _leaves(x):
  return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("name,op,ref,args", CASES, ids=[c[0] for c in CASES])
def test_values_traced_eager_compiled(name, op, ref, args):
  want = _leaves(ref(*args))
  program = primc.make_program(lambda *a: _leaves(op(*a)))(*args)
  for got in (_leaves(op(*args)), primc.interpret(program, *args), _leaves(primc.jit(op)(*args))):
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
  if name in ("inv", "solve_vector", "det", "slogdet"):  # compiled: a representative set
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


def test_errors(monkeypatch):
  monkeypatch.setattr("sys.unraisablehook", lambda info: None)  # numba reports LAPACK's
  with pytest.raises(primc.ShapeError, match="square"):
    pnp.linalg.inv(np.ones((2, 3)))
  with pytest.raises(np.linalg.LinAlgError):
    pnp.linalg.inv(np.ones((3, 3)))  # singular: numpy's error
  with pytest.raises(RuntimeError, match="failed"):  # compiled: LAPACK's, reported
    primc.jit(pnp.linalg.inv)(np.ones((3, 3)))
  with pytest.raises(pnp.NotSupportedError, match="linalg.eigh"):
    pnp.linalg.eigh
