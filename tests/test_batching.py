"""Batching rules: vmap of each primitive equals a Python loop over the batch."""

import itertools

import numpy as np
import pytest

import primc
import primc.numpy as pnp

from prim_cases import CASES, case_id


def _loop(fn, xs, batched):
  n = next(x.shape[0] for x, b in zip(xs, batched) if b)
  outs = [fn(*[x[i] if b else x for x, b in zip(xs, batched)]) for i in range(n)]
  return np.stack([np.asarray(o) for o in outs])


@pytest.mark.parametrize(
  "case", [c for c in CASES if c.make(np.random.default_rng(0))], ids=case_id
)
def test_vmap_of_each_primitive_matches_a_loop(case, rng):
  xs = case.make(rng)
  for batched in itertools.product([True, False], repeat=len(xs)):
    if not any(batched):
      continue
    bxs = [
      np.stack([case.make(np.random.default_rng(k))[i] for k in range(3)]) if b else x
      for i, (x, b) in enumerate(zip(xs, batched))
    ]
    got = primc.vmap(case.fn, in_axes=tuple(0 if b else None for b in batched))(*bxs)
    np.testing.assert_allclose(got, _loop(case.fn, bxs, batched), rtol=1e-12, atol=1e-12)


def test_vmap_gather_and_scatter_with_batched_indices(rng):
  x = rng.standard_normal((4, 5, 3))
  idx = rng.integers(0, 5, (4, 2, 2)).astype(np.int32)
  upd = rng.standard_normal((4, 2, 2, 3))
  from primc import prims as P

  for in_axes in [(0, 0), (None, 0), (0, None)]:
    xi = x if in_axes[0] == 0 else x[0]
    ii = idx if in_axes[1] == 0 else idx[0]
    got = primc.vmap(lambda a, i: P.gather(a, i, 0), in_axes)(xi, ii)
    np.testing.assert_allclose(
      got, _loop(lambda a, i: P.gather(a, i, 0), [xi, ii], [a == 0 for a in in_axes])
    )
  got = primc.vmap(lambda a, i, u: P.scatter_add(a, i, u, 0))(x, idx, upd)
  np.testing.assert_allclose(
    got, _loop(lambda a, i, u: P.scatter_add(a, i, u, 0), [x, idx, upd], [True] * 3)
  )
  # indices along a middle axis
  x2 = rng.standard_normal((4, 3, 5))
  got = primc.vmap(lambda a, i: P.gather(a, i, 1))(x2, idx)
  np.testing.assert_allclose(got, _loop(lambda a, i: P.gather(a, i, 1), [x2, idx], [True, True]))
  upd2 = rng.standard_normal((4, 3, 2, 2))
  got = primc.vmap(lambda a, i, u: P.scatter_add(a, i, u, 1))(x2, idx, upd2)
  np.testing.assert_allclose(
    got, _loop(lambda a, i, u: P.scatter_add(a, i, u, 1), [x2, idx, upd2], [True] * 3)
  )


def test_vmap_in_axes_out_axes_and_pytrees(rng):
  w = rng.standard_normal((3, 4))
  xs = rng.standard_normal((3, 5))  # batch along axis 1
  got = primc.vmap(lambda x, w: pnp.tanh(x @ w), in_axes=(1, None), out_axes=1)(xs, w)
  np.testing.assert_allclose(got, np.tanh(xs.T @ w).T, rtol=1e-12)
  tree = {"a": rng.standard_normal((2, 3)), "b": rng.standard_normal((2,))}
  out = primc.vmap(lambda t: (t["a"].sum(), t["b"] * 2))(tree)
  np.testing.assert_allclose(out[0], tree["a"].sum(1))
  np.testing.assert_allclose(out[1], tree["b"] * 2)


def test_vmap_errors():
  with pytest.raises(primc.PrimcError, match="inconsistent sizes"):
    primc.vmap(lambda a, b: a + b)(np.ones(2), np.ones(3))
  with pytest.raises(primc.PrimcError, match="at least one mapped"):
    primc.vmap(lambda a: a, in_axes=None)(np.ones(2))


def test_nested_vmap_and_vmap_of_grad(rng):
  x = rng.standard_normal((2, 3, 4))
  got = primc.vmap(primc.vmap(lambda v: pnp.sin(v).sum()))(x)
  np.testing.assert_allclose(got, np.sin(x).sum(-1))
  per_example = primc.vmap(primc.grad(lambda v: pnp.sum(pnp.tanh(v) ** 2)))(x[0])
  for i in range(3):
    np.testing.assert_allclose(
      per_example[i], primc.grad(lambda v: pnp.sum(pnp.tanh(v) ** 2))(x[0, i])
    )
