"""The eager tape (Paddle dygraph, MegEngine GradManager, MindSpore functional) is right at
every order: checked against the functional API (`primc.grad` of the same function) and
the seeds' own examples, verbatim where they are runnable."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import autograd, eager, nn, static
from primc import functional as F

R = np.random.default_rng(7)
x_np = R.uniform(0.2, 1.0, 10).astype("float32")


def test_gradient_penalty_reaches_the_weights():
  W0 = R.standard_normal((3, 2)).astype(np.float32)
  xv = R.standard_normal((4, 3)).astype(np.float32)
  W = nn.Parameter(W0)
  x = primc.to_tensor(xv, stop_gradient=False)
  y = pnp.tanh(x @ W).sum()
  (gx,) = eager.grad(y, [x], create_graph=True)
  (gx * gx).sum().backward()
  penalty = lambda w: pnp.sum(primc.grad(lambda a: pnp.sum(pnp.tanh(a @ w)))(xv) ** 2)
  np.testing.assert_allclose(W.grad.numpy(), primc.grad(penalty)(W0), rtol=1e-5, atol=1e-6)


def test_mixed_partials_on_the_tape():
  xv, yv = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
  x = primc.to_tensor(xv, stop_gradient=False)
  y = primc.to_tensor(yv, stop_gradient=False)
  z = (pnp.sin(x) * x * y * y).sum()
  (dx,) = eager.grad(z, [x], create_graph=True)
  (dxy,) = eager.grad(dx.sum(), [y])
  want = primc.grad(lambda b: pnp.sum(primc.grad(lambda a: pnp.sum(pnp.sin(a) * a * b * b))(xv)))(
    yv
  )
  np.testing.assert_allclose(dxy.numpy(), want, rtol=1e-6)


def test_nested_grad_managers_give_mixed_partials():
  x, y = primc.to_tensor([1.0, 2.0]), primc.to_tensor([3.0, 4.0])
  gm, gm2 = primc.GradManager().attach([y]), primc.GradManager().attach([x])
  with gm:
    with gm2:
      gm2.backward((x * x * y).sum())
    gx = x.grad
    gm.backward(gx.sum())
  np.testing.assert_allclose(y.grad.numpy(), [2.0, 4.0])  # d/dy sum(2 x y) = 2x


def test_stop_gradient_on_an_intermediate_cuts_the_graph():
  x = primc.to_tensor([1.0, 2.0], stop_gradient=False)
  h = x * x
  h.stop_gradient = True
  (h * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [1.0, 4.0])  # h is a constant: d/dx = h


def test_attaching_twice_changes_nothing():
  x = primc.to_tensor([1.0, 2.0])
  gm = primc.GradManager().attach([x]).attach(x)
  with gm:
    gm.backward((x * x).sum())
  np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


# MegEngine's seed examples, verbatim but for the import names (mge.tensor -> to_tensor,
# F.cos -> primc.numpy.cos)
mge_tensor, GradManager = primc.to_tensor, primc.GradManager


def test_megengine_union_example_verbatim():
  x = mge_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm | gm2:
    y = pnp.cos(x)
    gm.backward(y)
    gm2.backward(y)
  np.testing.assert_almost_equal(x.grad.numpy(), -2 * np.sin(x_np), decimal=5)


def test_megengine_union_fail_example_verbatim():
  x = mge_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm | gm2:
    y = pnp.cos(x)
    gm2.backward(y)
    x_grad = gm2.backward(y)
    x.grad = None
    np.testing.assert_almost_equal(x_grad.numpy(), -np.sin(x_np), decimal=5)
    gm.backward(x_grad)
    assert x.grad is None


def test_megengine_nested_examples_verbatim():
  x = mge_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm:
    with gm2:
      y = pnp.cos(x)
      gm2.backward(y)
    x_grad = x.grad
    x.grad = None
    np.testing.assert_almost_equal(x_grad.numpy(), -np.sin(x_np), decimal=5)
    gm.backward(x_grad)
  np.testing.assert_almost_equal(x.grad.numpy(), -np.cos(x_np), decimal=5)
  x = mge_tensor(x_np)
  gm = GradManager().attach([x])
  gm2 = GradManager().attach([x])
  with gm2:
    with gm:
      y = pnp.cos(x)
      x_grad = gm2.backward(y)
      x.grad = None
      np.testing.assert_almost_equal(x_grad.numpy(), -np.sin(x_np), decimal=5)
      gm.backward(x.grad)
  assert x.grad is None


def test_mindspore_requires_grad_false_is_honoured():
  class Net(nn.Cell):
    def __init__(self):
      super().__init__()
      self.w = nn.Parameter(np.array([2.0, 3.0], np.float32))
      self.b = nn.Parameter(np.array([1.0], np.float32))

    def construct(self, x):
      return pnp.sum(x * self.w) + self.b

  net = Net()
  net.b.requires_grad = False
  assert net.b.requires_grad is False and [p is net.w for p in net.trainable_params()] == [True]
  _, grads = F.value_and_grad(net, None, weights=net.trainable_params())(
    np.array([1.0, 1.0], np.float32)
  )
  assert len(grads) == 1
  np.testing.assert_allclose(grads[0].numpy(), [1.0, 1.0])


def test_jacobian_hessian_forward_grad_on_eager_tensors():
  xv = np.array([0.5, -1.0, 2.0], np.float32)
  x = primc.to_tensor(xv, stop_gradient=False)
  f = lambda v: pnp.sin(v) * pnp.sum(v * v)
  np.testing.assert_allclose(autograd.Jacobian(f, x)[:].numpy(), primc.jacrev(f)(xv), rtol=1e-5)
  g = lambda v: pnp.sum(pnp.sin(v) * v * v)
  np.testing.assert_allclose(autograd.Hessian(g, x)[:].numpy(), primc.hessian(g)(xv), rtol=1e-5)
  y = f(x)
  tangent = np.array([1.0, 0.0, 2.0], np.float32)
  np.testing.assert_allclose(
    autograd.forward_grad(y, x, primc.to_tensor(tangent)).numpy(),
    primc.jvp(f, (xv,), (tangent,))[1],
    rtol=1e-5,
  )
  # rows of an eager Jacobian are recorded: differentiable again
  autograd.Jacobian(f, x)[1, :].sum().backward()
  want = primc.grad(lambda v: pnp.sum(primc.jacrev(f)(v)[1]))(xv)
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)


def test_static_hessian_over_data():
  static.reset()
  static.enable_static()
  try:
    x = static.data("x", shape=(3,), dtype="float32")
    H = autograd.Hessian(lambda v: pnp.sum(v * v * v), x)
    full, row = H[:], H[1]
  finally:
    static.disable_static()
  xv = np.array([1.0, 2.0, -1.0], np.float32)
  got_full, got_row = static.Executor().run(feed={"x": xv}, fetch_list=[full, row])
  np.testing.assert_allclose(got_full, np.diag(6 * xv))
  np.testing.assert_allclose(got_row, np.diag(6 * xv)[1])


def test_jit_of_functional_grad():
  fn = lambda x, w: pnp.sum(pnp.tanh(x * w))
  x, w = np.ones(3, np.float32), np.array([1.0, 2.0, 3.0], np.float32)
  got = primc.jit(F.grad(fn, grad_position=(0, 1)))(x, w)
  want = primc.grad(fn, argnums=(0, 1))(x, w)
  for g, v in zip(got, want):
    np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-7)


def test_paddle_keyword_spellings():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(pnp.transpose(x, perm=[1, 0]), x.T)
  np.testing.assert_allclose(pnp.matmul(x, x, transpose_y=True), x @ x.T)
  np.testing.assert_allclose(pnp.matmul(x, x, transpose_x=True), x.T @ x)
  parts = pnp.split(x, num_or_sections=[1, -1], axis=1)
  assert [p.shape for p in parts] == [(3, 1), (3, 3)]
  assert [p.shape for p in pnp.split(x, num_or_sections=3)] == [(1, 4)] * 3
  np.testing.assert_array_equal(pnp.add(x=x, y=x), 2 * x)
  np.testing.assert_array_equal(pnp.tanh(x=x), np.tanh(x))
  np.testing.assert_array_equal(
    pnp.slice(x, axes=[0, 1], starts=[1, -3], ends=[10, 3]), x[1:10, -3:3]
  )
  np.testing.assert_array_equal(
    pnp.strided_slice(x, axes=[1], starts=[-1], ends=[-5], strides=[-2]), x[:, -1:-5:-2]
  )
  np.testing.assert_array_equal(pnp.concat([x, x], axis=1), np.concatenate([x, x], 1))
  # and on eager tensors, with gradients
  t = primc.to_tensor(x, stop_gradient=False)
  pnp.strided_slice(t, axes=[0], starts=[2], ends=[0], strides=[-1]).sum().backward()
  np.testing.assert_array_equal(t.grad.numpy(), [[0] * 4, [1] * 4, [1] * 4])


def test_mynet_in_dygraph_style_matches_the_functional_gradients():
  """The seed's MyNet loss (norm of a second derivative of tanh(x W + b)), on the tape."""
  primc.seed(0)
  xv = R.uniform(-1, 1, (3, 2)).astype(np.float32)
  net = nn.Linear(2, 2)
  W0, b0 = net.weight.numpy().copy(), net.bias.numpy().copy()
  x = primc.to_tensor(xv, stop_gradient=False)
  y = pnp.tanh(net(x))
  (g1,) = eager.grad(y, [x], create_graph=True)
  (g2,) = eager.grad(g1, [x], create_graph=True)
  loss = pnp.norm(g2, p=2)
  loss.backward()

  def functional_loss(w, b):
    inner = lambda a: pnp.sum(primc.grad(lambda c: pnp.sum(pnp.tanh(c @ w + b)))(a))
    return pnp.norm(primc.grad(inner)(xv), p=2)

  gw, gb = primc.grad(functional_loss, argnums=(0, 1))(W0, b0)
  np.testing.assert_allclose(net.weight.grad.numpy(), gw, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(net.bias.grad.numpy(), gb, rtol=1e-4, atol=1e-6)
  opt = primc.optimizer.SGD(0.1, parameters=net.parameters())
  opt.step()
  np.testing.assert_allclose(net.weight.numpy(), W0 - 0.1 * gw, rtol=1e-5, atol=1e-6)


# Random higher-order programs on the tape, against the functional API.
UNARY = [pnp.sin, pnp.cos, pnp.tanh, pnp.exp, lambda v: v * v, lambda v: pnp.sqrt(v * v + 1.0)]
BINARY = [
  pnp.add,
  pnp.subtract,
  pnp.multiply,
  lambda a, b: a / (b * b + 1.0),
  # a comparison's bool result is a constant of the graph (no gradient)
  lambda a, b: pnp.where(a > b, a * b, b - a),
  lambda a, b: a * pnp.take(b, pnp.argmax(a * 1.5, keepdims=True)),
]


@st.composite
def programs(draw):
  """A random function of two vectors as a list of (op, operand indices)."""
  steps = []
  for k in range(draw(st.integers(1, 5))):
    if draw(st.booleans()):
      steps.append(("u", draw(st.integers(0, len(UNARY) - 1)), draw(st.integers(0, k + 1))))
    else:
      steps.append(
        (
          "b",
          draw(st.integers(0, len(BINARY) - 1)),
          draw(st.integers(0, k + 1)),
          draw(st.integers(0, k + 1)),
        )
      )
  return steps


def run(steps, a, b):
  vals = [a, b]
  for s in steps:
    vals.append(UNARY[s[1]](vals[s[2]]) if s[0] == "u" else BINARY[s[1]](vals[s[2]], vals[s[3]]))
  return vals[-1]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(), st.sampled_from(["x", "y"]), st.sampled_from(["x", "y"]))
def test_random_second_order_tape_programs_equal_the_functional_api(steps, first, second):
  xv, yv = np.array([0.3, -0.7], np.float64), np.array([1.1, 0.4], np.float64)
  x = primc.to_tensor(xv, stop_gradient=False)
  y = primc.to_tensor(yv, stop_gradient=False)
  # backward() of the whole tape: every tensor of its graph, intermediates too
  pnp.sum(run(steps, x, y)).backward()
  for t, k in ((x, 0), (y, 1)):
    want1 = primc.grad(lambda a, b: pnp.sum(run(steps, a, b)), argnums=k)(xv, yv)
    np.testing.assert_allclose(
      np.zeros(2) if t.grad is None else t.grad.numpy(), want1, rtol=1e-12, atol=1e-15
    )
  x.clear_grad(), y.clear_grad()
  out = pnp.sum(run(steps, x, y))
  t1 = {"x": x, "y": y}
  (d1,) = eager.grad(out, [t1[first]], create_graph=True, allow_unused=True)
  pos = {"x": 0, "y": 1}
  fwd = lambda a, b: pnp.sum(run(steps, a, b))
  inner = lambda a, b: pnp.sum(primc.grad(fwd, argnums=pos[first])(a, b))
  want = primc.grad(inner, argnums=pos[second])(xv, yv)
  if d1 is None:  # the output does not depend on `first`
    np.testing.assert_array_equal(primc.grad(fwd, argnums=pos[first])(xv, yv), 0)
    return
  (d2,) = eager.grad(d1.sum(), [t1[second]], allow_unused=True)
  got = np.zeros(2) if d2 is None else d2.numpy()
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
