"""Pytrees through every transform (namedtuples, dataclasses, registered classes beside
tuples, lists and dicts), has_aux on each derivative transform, jit's keyword and static
arguments."""

import collections
import dataclasses

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc import tree_util

Params = collections.namedtuple("Params", "w b")


@dataclasses.dataclass
class Layer:
  w: np.ndarray
  b: np.ndarray
  name: str = dataclasses.field(default="dense", compare=False)


class Box:
  """A registered class: its `scale` is auxiliary data (part of the tree definition)."""

  def __init__(self, value, scale):
    self.value, self.scale = value, scale


tree_util.register_pytree_node(
  Box, lambda b: ((b.value,), b.scale), lambda scale, children: Box(children[0], scale)
)

R = np.random.default_rng(5)
X = R.standard_normal((4, 3))


def _loss(p):
  w, b = (p.w, p.b) if not isinstance(p, dict) else (p["w"], p["b"])
  return pnp.sum(pnp.tanh(X @ w + b) ** 2)


def _numpy_grad(w, b):
  z = X @ w + b
  t = np.tanh(z)
  dz = 2 * t * (1 - t * t)
  return X.T @ dz, dz.sum(0)


CONTAINERS = {
  "namedtuple": lambda w, b: Params(w, b),
  "dataclass": lambda w, b: Layer(w, b),
  "dict": lambda w, b: {"w": w, "b": b},
  "registered": None,
}


@pytest.mark.parametrize("kind", [k for k, v in CONTAINERS.items() if v])
@pytest.mark.parametrize("path", ["interpreted", "jit"])
def test_containers_in_and_out_of_grad(kind, path):
  w, b = R.standard_normal((3, 2)), R.standard_normal(2)
  p = CONTAINERS[kind](w, b)
  g_fn = primc.value_and_grad(_loss)
  value, g = (primc.jit(g_fn) if path == "jit" else g_fn)(p)
  assert type(g) is type(p)
  gw, gb = (g.w, g.b) if kind != "dict" else (g["w"], g["b"])
  want_w, want_b = _numpy_grad(w, b)
  np.testing.assert_allclose(gw, want_w, rtol=1e-10)
  np.testing.assert_allclose(gb, want_b, rtol=1e-10)
  np.testing.assert_allclose(value, np.sum(np.tanh(X @ w + b) ** 2), rtol=1e-12)


def test_registered_class_keeps_its_aux_data_through_transforms():
  box = Box(np.arange(3.0), scale=2.5)
  f = lambda bx: Box(bx.value * bx.scale, bx.scale)
  for out in (f(box), primc.jit(f)(box), primc.vmap(f)(Box(np.ones((2, 3)), 2.5))):
    assert type(out) is Box and out.scale == 2.5
  g = primc.grad(lambda bx: pnp.sum(bx.value**2) * bx.scale)(box)
  assert type(g) is Box and g.scale == 2.5
  np.testing.assert_allclose(g.value, 2 * np.arange(3.0) * 2.5)
  # the aux data is part of the signature: another scale is another program
  f2 = primc.jit(lambda bx: bx.value * bx.scale)
  np.testing.assert_allclose(f2(Box(np.ones(2), 2.0)), [2.0, 2.0])
  np.testing.assert_allclose(f2(Box(np.ones(2), 3.0)), [3.0, 3.0])


def test_tree_util_functions():
  tree = {"a": Params(1.0, [2.0, 3.0]), "b": Layer(np.ones(2), None)}
  leaves = tree_util.tree_leaves(tree)
  assert len(leaves) == 4
  doubled = tree_util.tree_map(lambda x: x * 2, tree)
  assert doubled["a"] == Params(2.0, [4.0, 6.0]) and type(doubled["b"]) is Layer
  summed = tree_util.tree_map(lambda x, y: x + y, tree, doubled)
  assert summed["a"].b == [6.0, 9.0]
  with pytest.raises(ValueError, match="different structures"):
    tree_util.tree_map(lambda x, y: x, tree, {"a": 1})
  with pytest.raises(ValueError, match="already registered"):
    tree_util.register_pytree_node(Box, lambda b: ((), None), lambda a, c: None)


def _with_aux(x):
  return pnp.sin(x) * 2.0, {"total": pnp.sum(x), "n": pnp.asarray(3)}


@pytest.mark.parametrize("path", ["interpreted", "jit"])
def test_has_aux_on_every_derivative_transform(path):
  x = np.array([0.1, -0.4, 0.7])
  wrap = primc.jit if path == "jit" else (lambda f: f)
  jac = np.diag(2 * np.cos(x))
  for transform in (primc.jacrev, primc.jacfwd):
    j, aux = wrap(transform(_with_aux, has_aux=True))(x)
    np.testing.assert_allclose(j, jac, rtol=1e-12)
    np.testing.assert_allclose(aux["total"], x.sum())
  out, tangent, aux = primc.jvp(_with_aux, (x,), (np.ones(3),), has_aux=True)
  np.testing.assert_allclose(out, 2 * np.sin(x))
  np.testing.assert_allclose(tangent, 2 * np.cos(x), rtol=1e-12)
  assert int(aux["n"]) == 3
  out, pullback, aux = primc.vjp(_with_aux, x, has_aux=True)
  np.testing.assert_allclose(pullback(np.ones(3))[0], 2 * np.cos(x), rtol=1e-12)
  (value, aux), g = wrap(
    primc.value_and_grad(lambda x: (pnp.sum(_with_aux(x)[0]), _with_aux(x)[1]), has_aux=True)
  )(x)
  np.testing.assert_allclose(g, 2 * np.cos(x), rtol=1e-12)
  with pytest.raises(primc.PrimcError, match="return a pair"):
    primc.jacrev(lambda x: pnp.sin(x), has_aux=True)(x)


def test_jit_keyword_and_static_arguments():
  @primc.jit
  def scaled(x, scale=2.0):
    return x * scale

  x = np.ones(2, np.float32)
  np.testing.assert_allclose(scaled(x), [2, 2])
  np.testing.assert_allclose(scaled(x, scale=np.float32(3)), [3, 3])
  np.testing.assert_allclose(scaled(x=x), [2, 2])
  power = primc.jit(lambda x, n: x**n, static_argnames="n")
  np.testing.assert_allclose(power(x * 2, n=3), [8, 8])
  np.testing.assert_allclose(power(x * 2, 2), [4, 4])
  by_position = primc.jit(lambda x, n: x**n, static_argnums=1)  # an int, not a tuple
  for _ in range(2):  # a static Python scalar stays one on every path (no 0-d array)
    np.testing.assert_allclose(by_position(x * 2, 3), [8, 8])
  mode = primc.jit(static_argnames=("mode",))(
    lambda x, mode: pnp.sum(x) if mode == "sum" else pnp.max(x)
  )
  assert float(mode(np.arange(3.0), mode="sum")) == 3.0
  assert float(mode(np.arange(3.0), mode="max")) == 2.0
  with pytest.raises(primc.PrimcError, match="static_argnames"):
    primc.jit(lambda x: x, static_argnames="y")
  with pytest.raises(primc.PrimcError, match="unexpected keyword"):
    scaled(x, bias=1.0)


def test_ir_values_are_leaves_not_dataclass_containers():
  """Dataclasses are pytrees, but the IR's own (avals, literals, variables, symbolic zeros)
  are values: a literal output of a program (a mean's sized 1/n) once flattened into its
  fields, giving a transform an extra output."""
  from primc import ad
  from primc.core import Lit, ShapedArray, Var

  aval = ShapedArray((2,), "float64")
  for leaf in (
    aval,
    Var(aval),
    Lit.of(np.float64(0.5), sized=True),
    ad.Zero(aval),
    ad.UndefinedPrimal(aval),
  ):
    assert primc.tree_util.tree_leaves([leaf]) == [leaf]
  const = np.array([0.1, 0.2, 0.3])
  f = lambda x: pnp.sum(pnp.reshape(pnp.mean(const), (1,)) * 0.5) + 0.0 * pnp.sum(x)
  x = np.ones(3)
  out, t = primc.jvp(f, (x,), (x,))
  np.testing.assert_allclose(out, 0.1)
  np.testing.assert_allclose(t, 0.0)
  primc.check_grads(f, (x,), order=3, modes=("fwd", "rev"))


def test_ravel_pytree_round_trips_and_differentiates():
  from primc.tree_util import ravel_pytree

  tree = {"w": np.arange(6.0).reshape(2, 3), "b": (np.ones(2), np.float64(3.0))}
  flat, unravel = ravel_pytree(tree)
  assert flat.shape == (9,)
  back = unravel(flat)
  np.testing.assert_array_equal(back["w"], tree["w"])
  np.testing.assert_array_equal(back["b"][0], tree["b"][0])
  # d/d(tree) of sum(flat^2) through ravel: 2 * leaves; and through unravel
  g = primc.grad(lambda t: pnp.sum(ravel_pytree(t)[0] ** 2))(tree)
  np.testing.assert_allclose(g["w"], 2 * tree["w"])
  np.testing.assert_allclose(
    primc.grad(lambda f: pnp.sum(unravel(f)["w"]))(flat), [0.0] * 3 + [1.0] * 6
  )  # (keys sorted: b, then w)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_of_pytree_inputs_and_outputs_in_jaxs_layout(jac):
  """Leaf (i, j) of the result: output i's shape + input j's shape (JAX's layout),
  against central differences of each input leaf."""
  f = lambda d: {"s": pnp.sin(d["a"]) * d["b"][0], "t": pnp.sum(d["a"] * d["a"])}
  d = {"a": np.array([0.1, 0.2, 0.3]), "b": (np.array([2.0]),)}
  J = getattr(primc, jac)(f)(d)
  eps = 1e-6
  for path, x in (("a", d["a"]), ("b", d["b"][0])):
    for k in range(x.size):
      plus, minus = (
        {"a": d["a"].copy(), "b": (d["b"][0].copy(),)},
        {"a": d["a"].copy(), "b": (d["b"][0].copy(),)},
      )
      leaf = (lambda t: t["a"]) if path == "a" else (lambda t: t["b"][0])
      leaf(plus)[k] += eps
      leaf(minus)[k] -= eps
      fp = {key: np.asarray(v) for key, v in f(plus).items()}
      fm = {key: np.asarray(v) for key, v in f(minus).items()}
      for out in ("s", "t"):
        block = J[out]["a"] if path == "a" else J[out]["b"][0]
        assert block.shape == np.shape(fp[out]) + x.shape
        np.testing.assert_allclose(block[..., k], (fp[out] - fm[out]) / (2 * eps), atol=1e-7)
  tuple_out = getattr(primc, jac)(lambda x: (pnp.sin(x), x * 3.0))(np.ones(3))
  np.testing.assert_allclose(tuple_out[0], np.diag(np.cos(np.ones(3))))
  np.testing.assert_allclose(tuple_out[1], 3 * np.eye(3))


def test_hessian_of_a_pytree_input():
  h = primc.hessian(lambda d: pnp.sum(d["a"] ** 3) * d["c"])({"a": np.ones(2), "c": 2.0})
  np.testing.assert_allclose(h["a"]["a"], np.diag([12.0, 12.0]))
  np.testing.assert_allclose(h["a"]["c"], [3.0, 3.0])
