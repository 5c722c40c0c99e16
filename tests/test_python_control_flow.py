"""Python control flow on traced values (`if`, `while`, indexing a numpy array with a
traced index) inside functions given to the transforms outside `jit`: traced again with
the call's values, the path taken is differentiated as one program (as autograd's tape
records it). Random branching programs against numpy and finite differences."""

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import autograd, eager, static

OPS = [
  lambda y: y * y,
  lambda y: pnp.sin(y),
  lambda y: y * 3.0 - 1.0,
  lambda y: pnp.tanh(y) + y,
  lambda y: pnp.exp(-y * y),
]
NP_OPS = [
  lambda y: y * y,
  np.sin,
  lambda y: y * 3.0 - 1.0,
  lambda y: np.tanh(y) + y,
  lambda y: np.exp(-y * y),
]


def _program(steps, ops, record=None):
  """y through `steps` (threshold, op if above, op if not), branching on sum(y)."""

  def f(x):
    y = x
    for threshold, above, below in steps:
      taken = (y * 1.0).sum() > threshold
      if record is not None:
        record.append(bool(taken))
      y = ops[above](y) if taken else ops[below](y)
    return (y * y).sum()

  return f


STEPS = st.lists(
  st.tuples(
    st.floats(-2, 2, allow_nan=False), st.integers(0, len(OPS) - 1), st.integers(0, len(OPS) - 1)
  ),
  min_size=1,
  max_size=4,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(STEPS, st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3))
def test_branching_programs_match_numpy_and_finite_differences(steps, x):
  x = np.array(x)
  eps = 1e-6
  paths = []
  for point in [x] + [x + s * eps * e for e in np.eye(3) for s in (1, -1)]:
    record = []
    _program(steps, NP_OPS, record)(point)
    paths.append(record)
  assume(all(p == paths[0] for p in paths))  # no branch flips within the step
  value = _program(steps, NP_OPS)(x)
  got_value, got_grad = primc.value_and_grad(_program(steps, OPS))(x)
  np.testing.assert_allclose(got_value, value, rtol=1e-10, atol=1e-12)
  f = _program(steps, NP_OPS)
  fd = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(3)]
  np.testing.assert_allclose(got_grad, fd, rtol=1e-5, atol=_fd_atol(value, eps))
  # second order through the same path: the Hessian against differences of gradients
  h = primc.hessian(_program(steps, OPS))(x)
  g = lambda p: primc.grad(_program(steps, OPS))(p)
  fd2 = np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(3)])
  np.testing.assert_allclose(h, fd2, rtol=1e-4, atol=10 * _fd_atol(got_grad, eps))


def test_a_while_loop_on_values_differentiates_its_iterations():
  def newton_sqrt(x):
    y = x
    while pnp.abs(y * y - x).max() > 1e-12:
      y = 0.5 * (y + x / y)
    return pnp.sum(y)

  x = np.array([4.0, 9.0, 2.0])
  np.testing.assert_allclose(primc.grad(newton_sqrt)(x), 0.5 / np.sqrt(x), rtol=1e-9)


def test_a_traced_index_into_a_numpy_array():
  table = np.arange(10.0) ** 2
  f = lambda x: pnp.sum(x * table[pnp.argmax(x)])  # the value at the largest's position
  x = np.array([1.0, 5.0, 2.0])
  np.testing.assert_allclose(primc.grad(f)(x), np.full(3, table[1]))
  idx = lambda x: pnp.sum(table[pnp.argsort(x)] * x)
  np.testing.assert_allclose(primc.grad(idx)(x), table[np.argsort(x)])


def _fd_atol(value, eps) -> float:
  """The tolerance of a central difference of step `eps` of a function of this size: its
  rounding error, ~|f| * float64's epsilon / eps, beside 1e-5 (paths of squares reach
  |f| ~ 1e10, where that error is ~1)."""
  return 1e-5 + 8 * np.finfo(np.float64).eps * float(np.max(np.abs(value))) / eps


def _same_path_nearby(steps, x, eps):
  paths = []
  for point in [x] + [x + s * eps * e for e in np.eye(len(x)) for s in (1, -1)]:
    record = []
    _program(steps, NP_OPS, record)(point)
    paths.append(record)
  return all(p == paths[0] for p in paths)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  STEPS,
  st.lists(
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3), min_size=2, max_size=4
  ),
)
def test_under_jit_graph_breaks_take_each_calls_path(steps, points):
  """One jitted function called on inputs that take different paths: each call's value
  and gradient are its own path's (numpy, finite differences), whichever paths were
  compiled before (the guards are checked on every call)."""
  eps = 1e-6
  points = [np.array(p) for p in points]
  assume(all(_same_path_nearby(steps, x, eps) for x in points))
  from primc.settings import config

  config.interpret = True  # the programs on the interpreter (compiled: the tests below)
  try:
    value = primc.jit(_program(steps, OPS))
    gradient = primc.jit(primc.grad(_program(steps, OPS)))
    hessian = primc.jit(primc.hessian(_program(steps, OPS)))  # breaks inside jacfwd's vmap
    f = _program(steps, NP_OPS)
    g = lambda p: primc.grad(_program(steps, OPS))(p)
    for x in points + points[::-1]:
      np.testing.assert_allclose(value(x), f(x), rtol=1e-10, atol=1e-12)
      fd = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(3)]
      np.testing.assert_allclose(gradient(x), fd, rtol=1e-5, atol=_fd_atol(f(x), eps))
      fd2 = np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(3)])
      np.testing.assert_allclose(hessian(x), fd2, rtol=1e-4, atol=10 * _fd_atol(g(x), eps))
  finally:
    config.interpret = False


def _newton_sqrt(x):
  y = x
  while pnp.abs(y * y - x).max() > 1e-12:
    y = 0.5 * (y + x / y)
  return pnp.sum(y)


def test_under_jit_a_while_loop_on_values_compiles_per_trip_count(caplog):
  f = primc.jit(_newton_sqrt)
  g = primc.jit(primc.grad(_newton_sqrt))
  h = primc.jit(primc.hessian(_newton_sqrt))
  inputs = [np.array([4.0, 9.0, 2.0]), np.array([1e4, 3.0, 7.0]), np.array([4.0, 9.0, 2.0])]
  with caplog.at_level("WARNING", logger="primc"):
    for x in inputs:
      np.testing.assert_allclose(f(x), np.sqrt(x).sum(), rtol=1e-12)
      np.testing.assert_allclose(g(x), 0.5 / np.sqrt(x), rtol=1e-9)
      # (the unrolled iterations' own second derivative: the path's, outside jit)
      np.testing.assert_allclose(h(x), primc.hessian(_newton_sqrt)(x), rtol=1e-9, atol=1e-15)
  (paths,) = [entry[0] for entry in f._compiled.values()]
  assert len(paths.paths) == 2  # two trip counts, the third call reused the first's
  breaks = [r.getMessage() for r in caplog.records if "graph break" in r.getMessage()]
  assert breaks and all("test_python_control_flow.py" in m for m in breaks)
  assert len(breaks) == len(set(breaks))  # once per function and line


def test_fullgraph_makes_a_graph_break_an_error():
  def f(x):
    return x * 2.0 if pnp.sum(x) > 0 else x

  with pytest.raises(primc.PrimcError, match="if.*fullgraph"):
    primc.jit(f, fullgraph=True)(np.ones(2))
  np.testing.assert_allclose(primc.jit(f)(np.ones(2)), [2.0, 2.0])
  np.testing.assert_allclose(primc.jit(f)(-np.ones(2)), [-1.0, -1.0])


def test_under_jit_an_int_of_a_traced_index_is_a_break():
  table = np.arange(10.0) ** 2

  def f(x):
    k = int(pnp.argmax(x))
    return x[k] * table[k]

  jf, jg = primc.jit(f), primc.jit(primc.grad(f))
  for x in (np.array([1.0, 5.0, 2.0]), np.array([7.0, 5.0, 2.0]), np.array([1.0, 5.0, 8.0])):
    k = int(np.argmax(x))
    np.testing.assert_allclose(jf(x), x[k] * table[k])
    np.testing.assert_allclose(jg(x), np.eye(3)[k] * table[k])


def _fixed_point():
  """autograd's fixed_point, as a custom_vjp: the forward loops to convergence on values;
  bwd by the implicit function theorem, z = cos(z) a."""

  @primc.custom_vjp
  def solve(a):
    z = a * 0.0
    while True:
      z_next = pnp.cos(z) * a
      if pnp.abs(z_next - z).max() < 1e-13:
        return z_next
      z = z_next

  def fwd(a):
    z = solve(a)
    return z, (a, z)

  def bwd(res, g):
    a, z = res
    return (g * pnp.cos(z) / (1.0 + a * pnp.sin(z)),)

  solve.defvjp(fwd, bwd)
  return solve


def test_a_custom_vjp_whose_forward_loops_on_values():
  solve = _fixed_point()
  a = np.array([0.5, 0.7, 0.9])
  z = a * 0.0
  for _ in range(500):
    z = np.cos(z) * a
  want = np.cos(z) / (1 + a * np.sin(z))
  loss = lambda a: pnp.sum(solve(a))
  for fn in (primc.grad(loss), primc.jit(primc.grad(loss))):
    np.testing.assert_allclose(fn(a), want, rtol=1e-10)
  np.testing.assert_allclose(primc.jit(solve)(a), z, rtol=1e-12)


def _fixed_point_of():
  """autograd's `fixed_point` as users write it with primc: a custom_vjp whose forward
  loops to convergence on values, and whose bwd solves the adjoint fixed point with the
  same function (a loop on the values of the residuals and the cotangent)."""

  @functools.partial(primc.custom_vjp, nondiff_argnums=(0,))
  def fixed_point(f, a, x0):
    x, prev = f(a, x0), x0
    while pnp.abs(x - prev).max() > 1e-13:
      x, prev = f(a, x), x
    return x

  def fwd(f, a, x0):
    x = fixed_point(f, a, x0)
    return x, (a, x)

  def bwd(f, res, g):
    a, x = res
    _, vjp_x = primc.vjp(lambda x: f(a, x), x)
    w = fixed_point(lambda _, w: vjp_x(w)[0] + g, a, pnp.zeros_like(g))
    _, vjp_a = primc.vjp(lambda a: f(a, x), a)
    return vjp_a(w)[0], pnp.zeros_like(x)

  fixed_point.defvjp(fwd, bwd)
  return fixed_point


def _cos_solution(a):  # z = cos(z) a, and dz/da = cos(z) / (1 + a sin(z))
  z = a * 0.0
  for _ in range(2000):
    z = np.cos(z) * a
  return z, np.cos(z) / (1 + a * np.sin(z))


def test_a_custom_vjp_whose_bwd_loops_on_values_in_every_path():
  fixed_point = _fixed_point_of()
  solve = lambda a: fixed_point(lambda a, z: pnp.cos(z) * a, a, a * 0.0)
  loss = lambda a: pnp.sum(solve(a) * pnp.arange(1.0, 4.0))
  weights = np.arange(1.0, 4.0)
  jitted = primc.jit(primc.grad(loss))
  for a in (np.array([0.5, 0.7, 0.9]), np.array([0.2, 1.1, 0.4])):  # other loop counts
    z, dz = _cos_solution(a)
    for path, got in [("grad", primc.grad(loss)(a)), ("jit(grad)", jitted(a))]:
      np.testing.assert_allclose(got, weights * dz, rtol=1e-9, err_msg=path)
  x = eager.to_tensor(a, stop_gradient=False)  # the tape: the last input
  (gx,) = eager.grad(loss(x), [x])
  np.testing.assert_allclose(gx.value, weights * dz, rtol=1e-9, err_msg="eager")


def _root_by_newton():
  """sqrt, whose bwd finds 1 / (2 sqrt(a)) by Newton's iteration on values."""

  @primc.custom_vjp
  def root(a):
    return pnp.sqrt(a)

  def bwd(a, g):
    r = pnp.ones_like(a) * 0.1
    while pnp.abs(4.0 * a * r * r - 1.0).max() > 1e-14:
      r = r * (1.5 - 2.0 * a * r * r)
    return (g * r,)

  root.defvjp(lambda a: (root(a), a), bwd)
  return root


def test_a_bwd_on_values_batched_per_example_and_in_static_programs():
  root = _root_by_newton()
  loss = lambda a: pnp.sum(root(a) * pnp.array([1.0, -2.0]))
  batch = np.array([[0.3, 2.0], [5.0, 0.7], [1.0, 1.0]])
  want = np.array([1.0, -2.0]) / (2 * np.sqrt(batch))
  for path, fn in [
    ("vmap(grad)", primc.vmap(primc.grad(loss))),
    ("jit(vmap(grad))", primc.jit(primc.vmap(primc.grad(loss)))),
  ]:
    np.testing.assert_allclose(fn(batch), want, rtol=1e-12, err_msg=path)
  static.enable_static()  # a static program: the executor runs bwd on the fed values
  try:
    static.reset()
    x = static.data("x", shape=(2,), dtype="float64")
    y = loss(x)
    g = autograd.grad(y, x)
    g = g[0] if isinstance(g, (list, tuple)) else g
    for row, w in zip(batch, want):
      np.testing.assert_allclose(
        static.Executor().run(feed={"x": row}, fetch_list=[g])[0], w, rtol=1e-12, err_msg="static"
      )
  finally:
    static.disable_static()


def test_a_bwd_on_values_has_no_derivative_of_its_own():
  fixed_point = _fixed_point_of()
  loss = lambda a: pnp.sum(fixed_point(lambda a, z: pnp.cos(z) * a, a, a * 0.0))
  with pytest.raises(primc.PrimcError, match="decides in Python on values.*while_loop"):
    primc.grad(lambda a: pnp.sum(primc.grad(loss)(a)))(np.array([0.5, 0.7]))


def test_writing_a_traced_value_into_a_numpy_array_is_refused():
  buf = np.zeros(3)

  def scalar(x):
    buf[0] = x[0]
    return pnp.sum(x)

  def row(x):
    buf[:] = x
    return pnp.sum(x)

  def index(x):
    buf[1] = pnp.argmax(x)
    return pnp.sum(x)

  for f in (scalar, row, index):  # every transform, kept or run as it is
    for transform in (
      primc.grad,
      primc.jit,
      primc.value_and_grad,
      primc.jacrev,
      primc.jacfwd,
      primc.hessian,
      primc.elementwise_grad,
    ):
      with pytest.raises(
        primc.PrimcError, match="written into a numpy array.*test_python_control_flow.py"
      ):
        transform(f)(np.ones(3))
  assert not buf.any()
