"""primc.lax control flow: values against Python loops and branches (numpy), derivatives
by finite differences in float64 (orders 1-2, both modes where defined) and the transpose
identity, batching against a loop over examples, in every path (eager, interpreted,
compiled); traced once and never unrolled."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import lax

R = np.random.default_rng(11)
X = np.array([0.5, -1.0, 2.0])


def _branchy(x):
  return lax.cond(pnp.sum(x) > 0, lambda x: pnp.sin(x) * 2.0, lambda x: pnp.cos(x) * x, x)


def _branchy_ref(x):
  return np.sin(x) * 2.0 if np.sum(x) > 0 else np.cos(x) * x


def test_cond_values_derivatives_batching_every_path():
  for x in (X, -X):
    want = _branchy_ref(x)
    for got in (
      _branchy(x),
      primc.jit(_branchy)(x),
      primc.interpret(primc.make_program(_branchy)(x), x)[0],
    ):
      np.testing.assert_allclose(got, want, rtol=1e-12)
    primc.check_grads(_branchy, (x,), order=2, modes=("fwd", "rev"))
    g = primc.grad(lambda x: pnp.sum(_branchy(x)))
    np.testing.assert_allclose(primc.jit(g)(x), g(x), rtol=1e-12)
  xs = np.stack([X, -X, X * 0.5])  # a batched predicate: each example its own branch
  for got in (primc.vmap(_branchy)(xs), primc.jit(primc.vmap(_branchy))(xs)):
    np.testing.assert_allclose(got, np.stack([_branchy_ref(x) for x in xs]), rtol=1e-12)


def test_cond_reads_outer_values_and_differentiates_them():
  w = np.array([1.5, -0.5, 0.25])

  def f(w, x):
    return lax.cond(x[0] > 0, lambda v: pnp.sum(v * w), lambda v: pnp.sum(v * w * w), x)

  primc.check_grads(f, (w, X), order=2, modes=("fwd", "rev"))
  primc.check_grads(f, (w, -X), order=2, modes=("fwd", "rev"))
  gw = primc.grad(f)(w, -X)
  np.testing.assert_allclose(gw, -X * 2 * w, rtol=1e-12)
  np.testing.assert_allclose(primc.jit(primc.grad(f))(w, -X), gw, rtol=1e-12)


def test_switch_and_its_index_errors():
  fns = [lambda x: x + 1.0, lambda x: x * 3.0, lambda x: pnp.exp(x)]
  f = lambda i, x: lax.switch(i, fns, x)
  for i in range(3):
    want = [X + 1, X * 3, np.exp(X)][i]
    np.testing.assert_allclose(primc.jit(f)(np.int32(i), X), want, rtol=1e-12)
    np.testing.assert_allclose(
      primc.interpret(primc.make_program(f)(np.int32(i), X), np.int32(i), X)[0], want, rtol=1e-12
    )
  for run in (
    lambda i: f(i, X),
    lambda i: primc.jit(f)(np.int32(i), X),
    lambda i: primc.interpret(primc.make_program(f)(np.int32(0), X), np.int32(i), X),
  ):
    with pytest.raises(IndexError, match="out of range"):  # never clamped
      run(3)
    with pytest.raises(IndexError, match="out of range"):
      run(-1)
  with pytest.raises(primc.PrimcError, match="branch 1's outputs"):
    primc.make_program(lambda x: lax.cond(x[0] > 0, lambda x: x, lambda x: x[:2], x))(X)


def _doubling(x):
  """How far 2^k * x + (2^k - 1) gets before passing 10 (a data-dependent trip count)."""
  return lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0 + c[1], c[1]), (x, 1.0))[0]


def _doubling_ref(x):
  while x < 10.0:
    x = x * 2.0 + 1.0
  return x


def test_while_loop_values_forward_mode_batching_every_path():
  for x in (0.5, 3.0, 20.0):
    want = _doubling_ref(x)
    np.testing.assert_allclose(_doubling(np.array(x)), want)
    np.testing.assert_allclose(primc.jit(_doubling)(np.array(x)), want)
  xs = np.array([0.5, 3.0, 20.0])  # different trip counts in one batch
  for got in (primc.vmap(_doubling)(xs), primc.jit(primc.vmap(_doubling))(xs)):
    np.testing.assert_allclose(got, [_doubling_ref(x) for x in xs])
  # forward mode: d/dx of 2^k x + ... is 2^k for the trip count k at x
  _, t = primc.jvp(_doubling, (np.array(0.5),), (np.array(1.0),))
  np.testing.assert_allclose(t, 8.0)
  np.testing.assert_allclose(primc.jit(primc.jacfwd(_doubling))(np.array(3.0)), 4.0)


def _loop(x):
  return lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 1.5 + 0.1, c[1] + 1), (x, 0))[0]


def _in_scan(x):
  return lax.scan(lambda c, s: (_loop(c + s), _loop(c)), x, pnp.arange(3.0))[1]


def _in_cond(x):
  return lax.cond(pnp.sum(x) > 0, _loop, lambda v: v * 2.0, x)


_through_rule = primc.custom_vjp(_in_scan)
_through_rule.defvjp(lambda x: (_in_scan(x), (x,)), lambda res, g: (pnp.sum(g, 0) * res[0],))


@pytest.mark.parametrize(
  "where", [_loop, _in_scan, _in_cond, _through_rule], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("how", ["grad", "jit", "vmap", "second"])
def test_reverse_mode_through_while_is_a_clear_error_everywhere(where, how):
  """However the loop is reached (directly, inside a scan body or a cond branch, or in
  the residuals of a custom_vjp rule at second order), in every path: the same clear
  error, never a broken program or a zero gradient."""
  loss = lambda x: pnp.sum(where(x) ** 2)
  fn = {
    "grad": primc.grad(loss),
    "jit": primc.jit(primc.grad(loss)),
    "vmap": primc.vmap(primc.grad(loss)),
    "second": primc.grad(lambda x: pnp.sum(primc.grad(loss)(x))),
  }[how]
  x = np.full((2, 3) if how == "vmap" else 3, 0.5)
  if where is _through_rule and how != "second":  # its rule covers the first order
    assert np.all(np.isfinite(fn(x)))
    return
  with pytest.raises(primc.PrimcError, match="reverse-mode differentiation through while"):
    fn(x)


def test_while_loop_reverse_mode_and_python_if_are_clear_errors():
  with pytest.raises(primc.PrimcError, match="reverse-mode differentiation through while"):
    primc.grad(_doubling)(np.array(0.5))
  with pytest.raises(primc.PrimcError, match="primc.lax.cond"):  # (else a graph break)
    primc.jit(lambda x: x * 2 if pnp.sum(x) > 0 else x, fullgraph=True)(X)


def _scan_body(c, x):
  return c * x[0] + pnp.sin(c) * x[1], c * 2.0 + x[0]


def _scan_ref(c, xs, reverse=False):
  ys = [None] * len(xs)
  for i in range(len(xs) - 1, -1, -1) if reverse else range(len(xs)):
    c, ys[i] = c * xs[i][0] + np.sin(c) * xs[i][1], c * 2.0 + xs[i][0]
  return c, np.array(ys)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(length=st.integers(0, 6), reverse=st.booleans(), seed=st.integers(0, 100))
def test_scan_values_and_derivatives_interpreted(length, reverse, seed):
  rng = np.random.default_rng(seed)
  c0, xs = np.array(rng.uniform(-1, 1)), rng.uniform(-1, 1, (length, 2))
  f = lambda c, xs: lax.scan(_scan_body, c, xs, reverse=reverse)
  want_c, want_ys = _scan_ref(c0, xs, reverse)
  got_c, got_ys = f(c0, xs)
  np.testing.assert_allclose(got_c, want_c, rtol=1e-12)
  np.testing.assert_allclose(got_ys, want_ys.reshape(length), rtol=1e-12)
  if length:
    primc.check_grads(
      lambda c, xs: f(c, xs)[0] + pnp.sum(f(c, xs)[1] ** 2), (c0, xs), order=2, modes=("fwd", "rev")
    )


def test_scan_compiled_batched_and_pytrees():
  c0, xs = np.array(0.3), R.uniform(-1, 1, (5, 2))
  f = lambda c, xs: lax.scan(_scan_body, c, xs)
  loss = lambda c, xs: pnp.sum(f(c, xs)[1] ** 2) + f(c, xs)[0]
  g = primc.grad(loss, argnums=(0, 1))
  for got, want in zip(primc.jit(g)(c0, xs), g(c0, xs)):
    np.testing.assert_allclose(got, want, rtol=1e-12)
  cs, xss = np.array([0.3, -0.2]), np.stack([xs, xs[::-1]])
  got = primc.jit(primc.vmap(f))(cs, xss)
  for k in range(2):
    want = _scan_ref(cs[k], xss[k])
    np.testing.assert_allclose(got[0][k], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1][k], want[1], rtol=1e-12)
  # pytrees: a dict carry, a tuple of xs, outputs a pair; a weight read from the closure
  w = np.array([0.5, -1.5])

  def tree_loss(w, xs):
    def step(carry, x):
      a, b = x
      new = {"h": pnp.tanh(carry["h"] * w + a), "n": carry["n"] + 1.0}
      return new, (pnp.sum(new["h"]), b * 2.0)

    carry, (s, b2) = lax.scan(step, {"h": np.zeros(2), "n": np.array(0.0)}, (xs, xs[:, 0]))
    return pnp.sum(carry["h"]) + pnp.sum(s) + pnp.sum(b2) * carry["n"]

  xs2 = R.uniform(-1, 1, (4, 2))
  primc.check_grads(tree_loss, (w, xs2), order=2, modes=("fwd", "rev"))
  gw = primc.grad(tree_loss)(w, xs2)
  np.testing.assert_allclose(primc.jit(primc.grad(tree_loss))(w, xs2), gw, rtol=1e-12)


def test_scan_transpose_identity():
  c0, xs = np.array(0.3), R.uniform(-1, 1, (4, 2))
  f = lambda c, xs: lax.scan(_scan_body, c, xs)[1]
  tc, txs, ct = np.array(0.7), R.standard_normal((4, 2)), R.standard_normal(4)
  _, t_out = primc.jvp(f, (c0, xs), (tc, txs))
  _, pullback = primc.vjp(f, c0, xs)
  cc, cxs = pullback(ct)
  np.testing.assert_allclose(cc * tc + np.sum(cxs * txs), np.dot(ct, t_out), rtol=1e-10)


def test_fori_loop_constant_bounds_reverse_mode_and_traced_bounds_forward():
  f = lambda x: lax.fori_loop(0, 6, lambda i, v: v * x + i, x)

  def ref(x):
    v = x
    for i in range(6):
      v = v * x + i
    return v

  x = np.array(0.7)
  np.testing.assert_allclose(f(x), ref(0.7), rtol=1e-12)
  np.testing.assert_allclose(primc.jit(f)(x), ref(0.7), rtol=1e-12)
  primc.check_grads(f, (x,), order=2, modes=("fwd", "rev"))
  np.testing.assert_allclose(
    primc.jit(primc.vmap(f))(np.array([0.7, 0.2])), [ref(0.7), ref(0.2)], rtol=1e-12
  )
  g = lambda n, x: lax.fori_loop(0, n, lambda i, v: v * x, x)  # traced bound: a while_loop
  np.testing.assert_allclose(primc.jit(g)(np.int32(3), x), 0.7**4, rtol=1e-12)
  _, t = primc.jvp(lambda x: g(np.int32(3), x), (x,), (np.array(1.0),))
  np.testing.assert_allclose(t, 4 * 0.7**3, rtol=1e-12)


def test_traced_once_and_not_unrolled():
  calls = []

  def body(c, x):
    calls.append(1)
    return c + x, c

  sizes = {}
  for n in (3, 300):
    calls.clear()
    program = primc.make_program(lambda xs: lax.scan(body, np.array(0.0), xs))(np.ones(n))
    sizes[n] = len(program.eqns)
    assert len(calls) == 1
  assert sizes[3] == sizes[300] == 1
  grad = primc.make_program(primc.grad(lambda xs: pnp.sum(lax.scan(body, np.array(0.0), xs)[1])))
  assert len(grad(np.ones(300)).eqns) < 30


def test_one_plan_stages_of_a_control_flow_program_are_a_clear_error():
  f = primc.jit(lambda x: lax.cond(x[0] > 0, lambda v: v * 2.0, lambda v: v - 1.0, x))
  with pytest.raises(primc.PrimcError, match="control flow"):
    f.lower(X)
  np.testing.assert_allclose(f(X), X * 2.0)  # running it is not affected


_UNARY = [
  pnp.sin,
  pnp.tanh,
  lambda v: v * v,
  lambda v: pnp.exp(0.3 * v),
  lambda v: -v,
  lambda v: pnp.sqrt(1.0 + v * v),
]
_BINARY = [
  pnp.add,
  pnp.multiply,
  lambda a, b: a / (1.5 + b * b),
  pnp.maximum,
  lambda a, b: a - 0.5 * b,
]


@st.composite
def _bodies(draw):
  """A random step (carry, x) -> (carry', y) of the ops above, and a random branch pair."""
  steps = draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 30)), min_size=1, max_size=4))

  def step(c, x):
    vals = [c, x]
    for kind, k in steps:
      a = vals[-1]
      vals.append(
        _UNARY[k % len(_UNARY)](a)
        if kind == 0
        else _BINARY[k % len(_BINARY)](a, vals[k % len(vals)])
      )
    return 0.5 * pnp.tanh(pnp.sum(vals[-1])) + 0.5 * c, vals[-1] * x

  return step, draw(st.integers(1, 4)), draw(st.booleans()), draw(st.integers(0, 1000))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(_bodies())
def test_random_scan_and_cond_bodies_differentiate_like_their_unrolled_loops(body):
  """The family: any body. Values equal the Python loop; derivatives (orders 1-2, both
  modes) pass finite differences; cond of two such bodies too."""
  step, n, reverse, seed = body
  rng = np.random.default_rng(seed)
  c0, xs = np.array(rng.uniform(-1, 1)), rng.uniform(-1, 1, (n, 3))
  f = lambda c, xs: lax.scan(step, c, xs, reverse=reverse)

  def unrolled(c, xs):
    ys = [None] * n
    for i in range(n - 1, -1, -1) if reverse else range(n):
      c, ys[i] = step(c, xs[i])
    return c, pnp.stack(ys)

  for got, want in zip(f(c0, xs), unrolled(c0, xs)):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  loss = lambda c, xs: f(c, xs)[0] + pnp.sum(f(c, xs)[1])
  primc.check_grads(loss, (c0, xs), order=2, modes=("fwd", "rev"), eps=1e-5, atol=1e-4, rtol=1e-4)
  branchy = lambda c, xs: lax.cond(
    c > 0, lambda v: step(v, xs[0])[1], lambda v: step(-v, xs[-1])[1], c
  )
  primc.check_grads(
    branchy, (c0, xs), order=2, modes=("fwd", "rev"), eps=1e-5, atol=1e-4, rtol=1e-4
  )


# --- loops run natively (codegen.loops): the runner called on the bodies' tables -----------


@pytest.fixture
def native_loops(monkeypatch):
  """Counts the loops that ran natively (and fails a test whose loops should have)."""
  from primc.codegen import loops

  ran = []
  real = loops._Prepared.run
  monkeypatch.setattr(
    loops._Prepared, "run", lambda self, *a: ran.append(self.kind) or real(self, *a)
  )
  return ran


def _step(carry, x):
  a, b = carry
  return (a * 0.9 + pnp.sin(x[0]), b + pnp.sum(x * a)), (a * x, b * 2.0)


@pytest.mark.parametrize("length", [0, 1, 7])
@pytest.mark.parametrize("reverse", [False, True])
def test_native_scan_matches_the_interpreter(native_loops, length, reverse):
  """Two carries of two shapes, two outputs per step, rows read and written in either
  order, zero steps included."""
  c = (R.standard_normal(2), np.float64(0.3))
  xs = R.standard_normal((length, 2))
  f = lambda c, xs: lax.scan(_step, c, xs, reverse=reverse)
  got, want = primc.jit(f)(c, xs), f(c, xs)
  leaves = primc.tree_util.tree_leaves
  assert len(leaves(got)) == len(leaves(want)) == 4
  for g, w in zip(leaves(got), leaves(want)):
    assert np.shape(g) == np.shape(w)
    np.testing.assert_allclose(g, w, rtol=1e-13)
  a, b = c  # against a Python loop
  ys = [None] * length
  for i in range(length - 1, -1, -1) if reverse else range(length):
    ys[i] = (a * xs[i], b * 2.0)
    a, b = a * 0.9 + np.sin(xs[i][0]), b + np.sum(xs[i] * a)
  np.testing.assert_allclose(got[0][0], a, rtol=1e-13)
  np.testing.assert_allclose(got[0][1], b, rtol=1e-13)
  if length:
    np.testing.assert_allclose(got[1][0], np.stack([y[0] for y in ys]), rtol=1e-13)
  assert native_loops and set(native_loops) == {1}


def test_native_while_and_fori_loops_match_python_loops(native_loops):
  x = R.standard_normal(4)
  f = lambda x: lax.fori_loop(0, 300, lambda i, c: c * 0.99 + pnp.sin(c) * 0.01, x)
  want = x.copy()
  for _ in range(300):
    want = want * 0.99 + np.sin(want) * 0.01
  np.testing.assert_allclose(primc.jit(f)(x), want, rtol=1e-12)
  w = lambda x, n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1.0, c[1] * 1.01), (0.0, x))
  for n in (0.0, 1.0, 57.0):  # zero, one and many steps
    k, v = primc.jit(w)(x, n)
    assert k == n
    np.testing.assert_allclose(v, x * 1.01**n, rtol=1e-12)
  # reverse mode through a fixed-trip loop: the stored steps replayed natively too
  g = primc.grad(lambda x: pnp.sum(f(x)))
  np.testing.assert_allclose(primc.jit(g)(x), g(x), rtol=1e-12)
  assert 0 in native_loops


def test_native_loop_bodies_raise_index_errors(native_loops):
  table = np.arange(5.0)

  def f(i0):
    return lax.fori_loop(0, 4, lambda k, i: i + pnp.take(table, i).astype(np.int64), i0)

  assert primc.jit(f)(np.int64(0)) == 0 + 0  # take(0) = 0 forever
  with pytest.raises(IndexError):
    primc.jit(f)(np.int64(1))  # 1, 2, 4, 8: index 8 of 5 in the fourth step
  assert native_loops


def test_nested_loops_and_large_bodies():
  """An outer loop whose body holds a loop runs its steps from Python, the inner natively;
  a body of threaded kernels (large arrays) too."""
  x = R.standard_normal(3)
  inner = lambda c: lax.fori_loop(0, 5, lambda j, d: d * 1.1, c)
  f = lambda x: lax.fori_loop(0, 3, lambda i, c: inner(c) + 1.0, x)
  want = x.copy()
  for _ in range(3):
    want = want * 1.1**5 + 1.0
  np.testing.assert_allclose(primc.jit(f)(x), want, rtol=1e-12)
  big = R.standard_normal((512, 512)).astype(np.float32)
  h = lambda y: lax.fori_loop(0, 3, lambda i, c: pnp.tanh(c) * 0.5 + c, y)
  want = big.copy()
  for _ in range(3):
    want = np.tanh(want) * 0.5 + want
  np.testing.assert_allclose(primc.jit(h)(big), want, rtol=1e-5, atol=1e-6)


def test_native_loops_called_from_threads_at_once(native_loops):
  """Concurrent calls of one compiled loop each get their own carry buffers and tables."""
  import threading

  f = primc.jit(lambda x, n: lax.fori_loop(0, 200, lambda i, c: c * 0.99 + n, x))
  results = {}

  def call(k):
    x = np.full(3, float(k))
    for _ in range(30):
      got = f(x, np.float64(k))
    want = x.copy()
    for _ in range(200):
      want = want * 0.99 + k
    results[k] = np.allclose(got, want, rtol=1e-12)

  threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert results == {k: True for k in range(6)} and native_loops
