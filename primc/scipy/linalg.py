"""`scipy.linalg` functions with scipy's signatures, built on `primc.numpy.linalg` (its
primitives and their derivative rules of every order). Names scipy.linalg has and primc
does not raise NotSupportedError naming them."""

from __future__ import annotations

import numpy as np

from primc import numpy as pnp
from primc.numpy import NotSupportedError, _op
from primc.trace import aval_of
from primc.scipy._missing import missing

solve_triangular = pnp.linalg.solve_triangular
inv, det, norm = pnp.linalg.inv, pnp.linalg.det, pnp.linalg.norm


@_op
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
  """The Cholesky factor read from one triangle of `a`: the upper one, R with a = R^T R,
  by default (scipy's), else the lower one, L with a = L L^T."""
  if lower:
    return pnp.linalg.cholesky(a)
  return pnp.matrix_transpose(pnp.linalg.cholesky(pnp.matrix_transpose(a)))


@_op
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
  """(c, lower): c the factor of `cholesky` (its other triangle zero, where scipy leaves
  whatever was there)."""
  return cholesky(a, lower), lower


@_op
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
  """x with a x = b, from `cho_factor`'s (c, lower)."""
  c, lower = c_and_lower
  if lower:  # a = L L^T
    y = solve_triangular(c, b, lower=True)
    return solve_triangular(c, y, trans=1, lower=True)
  y = solve_triangular(c, b, trans=1, lower=False)  # a = R^T R
  return solve_triangular(c, y, lower=False)


@_op
def solve(
  a,
  b,
  lower=False,
  overwrite_a=False,
  overwrite_b=False,
  check_finite=True,
  assume_a="gen",
  transposed=False,
):
  """x with a x = b (or a^T x = b, `transposed`); every `assume_a` solves the general
  system (the same x for the matrices it assumes)."""
  if assume_a not in (
    "gen",
    "general",
    "sym",
    "symmetric",
    "her",
    "hermitian",
    "pos",
    "positive definite",
  ):
    raise NotSupportedError(f"scipy.linalg.solve with assume_a={assume_a!r}")
  return pnp.linalg.solve(pnp.matrix_transpose(a) if transposed else a, b)


@_op
def eigh(a, b=None, lower=True, eigvals_only=False, **kwargs):
  """Eigenvalues (ascending), and eigenvectors, of the symmetric matrix read from one
  triangle (the lower one by default, as scipy); the generalized problem (b) is not
  supported."""
  if b is not None:
    raise NotSupportedError("scipy.linalg.eigh with b (the generalized problem)")
  w, v = pnp.linalg.eigh(a, "L" if lower else "U")
  return w if eigvals_only else (w, v)


@_op
def svd(a, full_matrices=True, compute_uv=True, **kwargs):
  """scipy's argument defaults (full_matrices=True) over numpy.linalg.svd."""
  if not compute_uv:
    return pnp.linalg.svdvals(a)
  return tuple(pnp.linalg.svd(a, full_matrices=full_matrices))


@_op
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
  """scipy's modes ('full', 'r', 'economic') over numpy.linalg.qr's; no pivoting."""
  if pivoting:
    raise NotSupportedError("scipy.linalg.qr with pivoting=True")
  modes = {"full": "complete", "r": "r", "economic": "reduced"}
  if mode not in modes:
    raise NotSupportedError(f"scipy.linalg.qr with mode={mode!r}")
  out = pnp.linalg.qr(a, modes[mode])
  return (out,) if mode == "r" else tuple(out)


@_op
def pinv(a, atol=None, rtol=None, return_rank=False, check_finite=True):
  if atol is not None or return_rank:
    raise NotSupportedError("scipy.linalg.pinv with atol or return_rank")
  return pnp.linalg.pinv(a, rtol=rtol)


@_op
def solve_sylvester(a, b, q):
  """X with a X + X b = q, as the linear system (a ⊗ I + I ⊗ b^T) vec(X) = vec(q) (row-major
  vec): (mn)^2 unknowns' worth of work, for the small matrices it is used on."""
  a, b, q = pnp._float(a), pnp._float(b), pnp._float(q)
  m, n = pnp.shape(q)
  dtype = aval_of(q).dtype
  a, b = pnp.astype(a, dtype), pnp.astype(b, dtype)
  k = pnp.add(
    pnp.kron(a, pnp.eye(n, dtype=dtype)), pnp.kron(pnp.eye(m, dtype=dtype), pnp.matrix_transpose(b))
  )
  return pnp.reshape(pnp.linalg.solve(k, pnp.ravel(q)), (m, n))


@_op
def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
  """x with a x = b for the banded `a` stored as scipy stores it: a[i, j] = ab[u + i - j, j]
  (l bands below the diagonal, u above), by the dense system (n^2 entries: for the small
  and moderate n it is used on; derivatives in ab and b from solve's)."""
  lower, upper = (int(k) for k in l_and_u)
  rows, n = pnp.shape(ab)
  if rows != lower + upper + 1:
    raise ValueError(
      f"solve_banded: ab has {rows} rows, (l, u) = {(lower, upper)} needs {lower + upper + 1}"
    )
  i, j = np.indices((n, n))
  band = upper + i - j
  inside = (band >= 0) & (band < rows)
  values = pnp.take(pnp.ravel(ab), np.where(inside, band * n + j, 0).astype(np.int64))
  return pnp.linalg.solve(pnp.where(inside, values, 0.0), b)


@_op
def block_diag(*arrs):
  """The arrays (2-D, or 0-/1-D as rows) on the diagonal of a matrix of zeros."""
  if not arrs:
    return pnp.zeros((1, 0))
  blocks = [pnp.atleast_2d(a) for a in arrs]
  rows = [pnp.shape(b)[0] for b in blocks]
  cols = [pnp.shape(b)[1] for b in blocks]
  total = sum(cols)
  out, left = [], 0
  for b, c in zip(blocks, cols):
    out.append(pnp.pad(b, ((0, 0), (left, total - left - c))))
    left += c
  return pnp.concatenate(out, axis=0) if out else pnp.zeros((sum(rows), total))


def __getattr__(name: str):
  raise missing("linalg", name)


pnp.wrap_public_functions(globals(), __name__)  # eager tensors and static variables too
