"""einsum, tensordot, inner and kron against numpy: values traced, eager and compiled;
derivatives by finite differences (orders 1 and 2) and compiled gradients."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp

R = np.random.default_rng(9)
N = lambda *s: R.standard_normal(s)

CASES = {
  "matmul": ("ij,jk->ik", (N(3, 4), N(4, 5))),
  "implicit": ("ij,jk", (N(3, 4), N(4, 5))),
  "transpose": ("ij->ji", (N(3, 4),)),
  "diagonal": ("ii->i", (N(4, 4),)),
  "trace": ("ii", (N(4, 4),)),
  "sum_axis": ("ijk->ik", (N(2, 3, 4),)),
  "batched": ("bij,bjk->bik", (N(2, 3, 4), N(2, 4, 5))),
  "dot": ("i,i->", (N(5), N(5))),
  "outer": ("i,j->ij", (N(3), N(4))),
  "hadamard": ("ij,ij->ij", (N(3, 4), N(3, 4))),
  "ellipsis_broadcast": ("...ij,...jk->...ik", (N(2, 1, 3, 4), N(5, 4, 2))),
  "three": ("abc,cd,de->abe", (N(2, 3, 4), N(4, 5), N(5, 2))),
  "chain_batched": ("bij,bjk,bkl->bil", (N(2, 3, 4), N(2, 4, 2), N(2, 2, 3))),
  "bilinear": ("i,ij,j->", (N(3), N(3, 4), N(4))),
  "repeated_and_summed": ("iij,jk->k", (N(3, 3, 4), N(4, 2))),
  "size_one_broadcast": ("ij,ij->i", (N(3, 1), N(3, 4))),
}


def _cases():
  for name, (spec, args) in CASES.items():
    yield (
      name,
      (lambda spec: lambda *a: pnp.einsum(spec, *a))(spec),
      (lambda spec: lambda *a: np.einsum(spec, *a))(spec),
      args,
    )
  yield "tensordot_2", pnp.tensordot, np.tensordot, (N(2, 3, 4), N(3, 4, 5))
  yield (
    "tensordot_axes",
    lambda a, b: pnp.tensordot(a, b, ([0, 2], [2, 0])),
    lambda a, b: np.tensordot(a, b, ([0, 2], [2, 0])),
    (N(2, 3, 4), N(4, 5, 2)),
  )
  yield (
    "tensordot_0",
    lambda a, b: pnp.tensordot(a, b, 0),
    lambda a, b: np.tensordot(a, b, 0),
    (N(2, 3), N(4)),
  )
  yield "inner", pnp.inner, np.inner, (N(3, 4), N(2, 4))
  yield "inner_vectors", pnp.inner, np.inner, (N(4), N(4))
  yield "kron", pnp.kron, np.kron, (N(2, 3), N(3, 2))
  yield "kron_ranks", pnp.kron, np.kron, (N(3), N(2, 2))


ALL = list(_cases())


@pytest.mark.parametrize("name,op,ref,args", ALL, ids=[c[0] for c in ALL])
def test_values_traced_eager_compiled(name, op, ref, args):
  want = ref(*args)
  np.testing.assert_allclose(op(*args), want, rtol=1e-12, atol=1e-12)
  program = primc.make_program(op)(*args)
  np.testing.assert_allclose(primc.interpret(program, *args)[0], want, rtol=1e-12, atol=1e-12)
  f32 = [a.astype(np.float32) for a in args]  # compiled: float32 (float64 below, for some)
  np.testing.assert_allclose(primc.jit(op)(*f32), want, rtol=2e-5, atol=2e-5)


COMPILED_GRADS = {
  "matmul",
  "batched",
  "three",
  "ellipsis_broadcast",
  "repeated_and_summed",
  "tensordot_axes",
  "kron",
}  # a representative set: each is a compile


@pytest.mark.parametrize("name,op,ref,args", ALL, ids=[c[0] for c in ALL])
def test_derivatives(name, op, ref, args):
  primc.check_grads(op, args, order=2, modes=("fwd", "rev"))
  if name not in COMPILED_GRADS:
    return
  w = R.standard_normal(np.shape(ref(*args)))
  g = primc.grad(lambda *a: pnp.sum(op(*a) * w), argnums=tuple(range(len(args))))
  for got, want in zip(primc.jit(g)(*args), g(*args), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_contraction_order_comes_from_opt_einsum():
  # (a b)(c) with a tiny c: opt_einsum contracts b with c first; the program's first
  # product must be the one it chose (and the result numpy's)
  a, b, c = N(20, 30), N(30, 40), N(40, 1)
  program = primc.make_program(lambda *x: pnp.einsum("ij,jk,kl->il", *x))(a, b, c)
  dots = [e for e in program.eqns if e.prim.name == "dot_general"]
  assert len(dots) == 2 and [v.aval.shape for v in dots[0].inputs] == [(30, 40), (40, 1)]
  np.testing.assert_allclose(primc.interpret(program, a, b, c)[0], a @ b @ c, rtol=1e-12)


def test_errors_name_the_problem():
  with pytest.raises(primc.ShapeError, match="index 'j' has sizes 4 and 5"):
    pnp.einsum("ij,jk->ik", N(3, 4), N(5, 2))
  with pytest.raises(primc.ShapeError, match="2 operand subscripts for 1 operands"):
    pnp.einsum("ij,jk->ik", N(3, 4))
  with pytest.raises(primc.ShapeError, match="do not fit"):
    pnp.einsum("ijk->i", N(3, 4))
  with pytest.raises(primc.ShapeError, match="output subscripts"):
    pnp.einsum("ij->iz", N(3, 4))
