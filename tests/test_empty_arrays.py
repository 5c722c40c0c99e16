"""Arrays with no elements, in every path.

A pad or a concatenate of an empty array, a sum over an empty axis, a product over an
empty inner dimension: results with elements made from operands without any. Each is
compared with numpy on values, interpreted, compiled, batched, on the eager tape, and in
its gradients. The empty inputs begin right after an unreadable page, so a kernel that
reads an empty operand (a speculated load at a clamped index, which an empty operand
does not have) crashes the test instead of reading a neighbour's memory."""

import ctypes
import mmap
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

_GUARDED = []  # the mappings behind the guarded arrays, kept alive


def guarded_empty(shape, dtype=np.float64):
  """An empty array whose data pointer is the first byte after an unreadable page."""
  page = mmap.PAGESIZE
  buf = mmap.mmap(-1, 2 * page)
  address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
  libc = ctypes.CDLL(None, use_errno=True)
  libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
  if libc.mprotect(address, page, 0) != 0:
    raise OSError(ctypes.get_errno(), "mprotect")
  _GUARDED.append(buf)
  a = np.frombuffer(buf, np.uint8, offset=page)[:0].view(dtype).reshape(shape)
  assert a.ctypes.data == address + page
  return a


def test_the_page_before_a_guarded_array_is_unreadable():
  """The guard is real: reading before the array kills a process (a child's)."""
  code = (
    "import ctypes, sys; sys.path.insert(0, %r)\n"
    "from test_empty_arrays import guarded_empty\n"
    "a = guarded_empty((3, 0))\n"
    "print('before', flush=True)\n"
    "ctypes.c_double.from_address(a.ctypes.data - 8).value\n"
    "print('read', flush=True)\n"
  ) % (__file__.rsplit("/", 1)[0],)
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  assert done.stdout == "before\n" and done.returncode != 0


# (name, f(m, x, y)) over numpy or primc.numpy `m`: x is (n, 0) and y is (n, k)
INNER = {
  "same": lambda m, v: v,
  "exp": lambda m, v: m.exp(v) * 2.0 + 1.0,
  "flip": lambda m, v: m.flip(v, axis=0),
  "roll": lambda m, v: m.roll(v * 3.0, 1, axis=0),
  "transposed_twice": lambda m, v: m.transpose(m.transpose(v) - 1.0),
}
OUTER = {
  "pad": lambda m, u, y: m.pad(u, ((1, 0), (2, 1))) * m.sum(y),
  "concatenate": lambda m, u, y: m.concatenate([u, y * 2.0, u, y], axis=1),
  "concatenate_last": lambda m, u, y: m.concatenate([m.exp(y), u], axis=1),
  "sum_over_empty": lambda m, u, y: m.sum(u, axis=1)[:, None] + y,
  "product": lambda m, u, y: u @ m.transpose(u[:1, :]) + y[:, :1],
  "pad_of_transpose": lambda m, u, y: m.pad(m.transpose(u), ((0, 2), (0, 0))) + m.sum(y),
}


def _case(inner, outer):
  return lambda m: lambda x, y: OUTER[outer](m, INNER[inner](m, x), y)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  st.sampled_from(sorted(INNER)),
  st.sampled_from(sorted(OUTER)),
  st.integers(1, 4),
  st.integers(1, 3),
)
def test_results_made_from_empty_arrays_equal_numpy(inner, outer, n, k):
  make = _case(inner, outer)
  x, y = guarded_empty((n, 0)), np.arange(n * k, dtype=np.float64).reshape(n, k) - 1.5
  want = make(np)(x, y)
  assert want.size > 0
  f = make(pnp)
  program = primc.make_program(f)(x, y)
  for got in (f(x, y), primc.interpret(program, x, y)[0], primc.jit(f)(x, y)):
    np.testing.assert_allclose(got, want, rtol=1e-13)
  xs, ys = guarded_empty((2, n, 0)), np.stack([y, -y])
  batched = primc.jit(primc.vmap(f))(xs, ys)
  np.testing.assert_allclose(batched, np.stack([want, make(np)(x, -y)]), rtol=1e-13)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(INNER)), st.sampled_from(sorted(OUTER)), st.integers(1, 4))
def test_gradients_through_empty_arrays(inner, outer, n):
  """Compiled gradients equal the interpreter's and finite differences' (in y; the
  gradient in x has no elements); the eager tape's equal them too."""
  make = _case(inner, outer)
  x, y = guarded_empty((n, 0)), np.linspace(-1.0, 1.0, n * 2).reshape(n, 2)
  shape = make(np)(x, y).shape
  w = np.cos(np.arange(np.prod(shape))).reshape(shape)
  loss = lambda a, b: pnp.sum(make(pnp)(a, b) * w)
  gx, gy = primc.jit(primc.grad(loss, argnums=(0, 1)))(x, y)
  want_x, want_y = primc.grad(loss, argnums=(0, 1))(x, y)
  assert gx.shape == x.shape and want_x.shape == x.shape
  np.testing.assert_allclose(gy, want_y, rtol=1e-12, atol=1e-12)
  primc.check_grads(lambda b: loss(x, b), (y,), order=2, modes=("fwd", "rev"))
  tx = primc.to_tensor(x, stop_gradient=False)
  ty = primc.to_tensor(y, stop_gradient=False)
  (make(pnp)(tx, ty) * w).sum().backward()
  assert tx.grad.numpy().shape == x.shape
  np.testing.assert_allclose(ty.grad.numpy(), want_y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
  "f",
  [
    lambda x: pnp.pad(pnp.exp(x), ((0, 0), (2, 3))),
    lambda x: pnp.concatenate([x * 2.0, pnp.ones((3, 2))], axis=1),
    lambda x: pnp.roll(x, 1, axis=0),
    lambda x: pnp.full((3, 0), 2.0) + x,
  ],
)
def test_no_equation_reads_an_empty_array(f):
  """After the passes, an empty operand is read by nothing with elements to make: what
  has no elements is a constant, and pads and concatenates drop empty operands."""
  x = guarded_empty((3, 0))
  fused = primc.jit(f).lower(x).optimized
  for eqn in fused.eqns:
    if eqn.outputs[0].aval.size:
      assert all(0 not in a.aval.shape for a in eqn.inputs), eqn
    elif eqn.prim.name != "broadcast_in_dim":
      raise AssertionError(f"an empty result not made a constant: {eqn}")
