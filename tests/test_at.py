"""Functional updates `x.at[idx].set/add/multiply`: numpy's assignment (and np.add.at)
for every kind of constant index, gradients by finite differences, every path."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp

R = np.random.default_rng(13)
X = R.standard_normal((4, 5))

INDEXES = {
  "int": np.s_[2],
  "negative": np.s_[-1, 3],
  "slice": np.s_[1:3],
  "step": np.s_[::2, 1::2],
  "reversed": np.s_[::-1, 0],
  "ellipsis": np.s_[..., 2],
  "none": np.s_[None, 1],
  "int_array": np.s_[[0, 2, 3]],
  "repeated": np.s_[[1, 1, 3], [0, 0, 4]],
  "mask": np.s_[np.arange(4) % 2 == 0],
  "mixed": np.s_[[0, 3], 1:4],
}


def _numpy(x, idx, v, how):
  out = x.copy()
  if how == "set":
    out[idx] = v
  elif how == "add":
    np.add.at(out, idx, v)
  else:
    out[idx] *= v
  return out


@pytest.mark.parametrize("how", ["set", "add", "multiply"])
@pytest.mark.parametrize("name", list(INDEXES))
def test_updates_equal_numpy_interpreted_and_eager(name, how):
  idx = INDEXES[name]
  if how == "multiply" and name == "repeated":
    with pytest.raises(primc.PrimcError, match="repeated index"):
      primc.make_program(lambda x: x.at[idx].multiply(2.0))(X)
    return
  v = R.standard_normal(X[idx].shape)
  want = _numpy(X, idx, v, how)
  traced = lambda x, v: getattr(x.at[idx], how)(v)  # the spelling on traced values
  np.testing.assert_allclose(primc.interpret(primc.make_program(traced)(X, v), X, v)[0], want)
  t = primc.to_tensor(X)
  np.testing.assert_allclose(getattr(t.at[idx], how)(v).numpy(), want)
  f = lambda x, v: pnp.index_update(x, idx, v, how)  # the same op on numpy arrays too
  np.testing.assert_allclose(f(X, v), want)
  primc.check_grads(f, (X, v), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("how", ["set", "add", "multiply"])
def test_updates_compiled_and_scalar_values(how):
  idx = np.s_[[0, 2], 1:4]
  f = lambda x: pnp.index_update(x, idx, x[1, 0] * 3.0, how)  # a scalar value, broadcast
  want = _numpy(X, idx, X[1, 0] * 3.0, how)
  np.testing.assert_allclose(primc.jit(f)(X), want, rtol=1e-12)
  g = primc.grad(lambda x: pnp.sum(f(x) ** 2))
  np.testing.assert_allclose(primc.jit(g)(X), g(X), rtol=1e-12)
  assert (X == X.copy()).all()  # the argument itself is never written


def test_out_of_bounds_and_traced_indices_raise():
  with pytest.raises(IndexError):
    primc.make_program(lambda x: x.at[4].set(0.0))(X)
  with pytest.raises(primc.PrimcError, match="traced indices"):
    primc.make_program(lambda x, i: x.at[i].set(0.0))(X, np.int32(1))
  assert float(primc.jit(lambda x: x.at[1, 2].get())(X)) == X[1, 2]
