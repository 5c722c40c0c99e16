"""Transforms called outside `jit` keep their programs (`primc.kept`): traced once per
function, state and signature; every call's result is the one a fresh trace gives (the
oracle: the same call with keeping off, and closed forms)."""

import functools
import os

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc import kept
from primc.settings import config
from test_ad_random import UNARY


@pytest.fixture(autouse=True)
def fresh():
  kept.reset()
  yield
  kept.reset()


def _unkept(thunk):
  old = config.keep_transforms
  config.keep_transforms = False
  try:
    return thunk()
  finally:
    config.keep_transforms = old


def _tanh_loss_grad(w, a=2.0, b=1.0):  # d/dw sum(tanh(a w + b)^2)
  t = np.tanh(a * w + b)
  return 2 * t * (1 - t * t) * a


def test_grad_in_a_loop_traces_once():
  f = lambda w: pnp.sum(pnp.tanh(2 * w + 1) ** 2)
  rng = np.random.default_rng(0)
  for _ in range(20):
    w = rng.standard_normal(16)
    np.testing.assert_allclose(primc.grad(f)(w), _tanh_loss_grad(w), rtol=1e-10, atol=1e-15)
  s = kept.stats()
  assert s["kept_misses"] == 1 and s["kept_hits"] == 18 and s["kept_checked"] == 1, s


def test_vjp_in_a_loop_traces_thrice_then_runs_the_tape_on_its_trace(monkeypatch):
  """`primc.vjp` on values (autograd's `make_vjp` in a loop): the function's trace is kept
  as a transform's program is, from the second call of its code (a vjp made once walks
  nothing), traced again at the third (the check), then the tape runs on it; a new batch
  each call is an input, not a retrace."""
  from primc import api, trace

  traces = []
  real = trace.trace_flat
  monkeypatch.setattr(trace, "trace_flat", lambda *a, **k: traces.append(1) or real(*a, **k))
  monkeypatch.setattr(kept, "trace_flat", trace.trace_flat)
  monkeypatch.setattr(api, "trace_flat", trace.trace_flat)
  rng = np.random.default_rng(2)
  w = rng.standard_normal(3)
  for step in range(6):
    x = rng.standard_normal((5, 3))
    out, pull = primc.vjp(lambda w: pnp.sum(pnp.tanh(x @ w) ** 2), w)
    (g,) = pull(np.float64(1.0))
    t = np.tanh(x @ w)
    np.testing.assert_allclose(out, np.sum(t**2), rtol=1e-12)
    np.testing.assert_allclose(g, x.T @ (2 * t * (1 - t * t)), rtol=1e-10, atol=1e-14)
  assert len(traces) == 3 and kept.stats()["kept_trace_hits"] == 3, (traces, kept.stats())


def test_check_grads_keeps_nothing():
  """A derivative check runs each of its transforms once or a few times: it keeps none
  (walking and checking them would cost more than they save), and the calls around it
  keep as before."""
  f = lambda w: pnp.sum(pnp.tanh(2 * w + 1) ** 2)
  primc.check_grads(f, (np.linspace(-1, 1, 4),), order=2)
  assert kept.stats() == {} and not kept._traces, kept.stats()
  primc.grad(f)(np.ones(4))
  assert kept.stats()["kept_misses"] == 1


def test_a_new_lambda_over_new_data_keeps_one_program():
  """`grad(lambda w: loss(w, batch))` made anew for every batch: the batch is an input."""

  def loss(w, x, y):
    return pnp.mean((pnp.tanh(x @ w) - y) ** 2)

  rng = np.random.default_rng(1)
  w = rng.standard_normal(3)
  for step in range(12):
    x, y = rng.standard_normal((8, 3)), rng.standard_normal(8)
    got = primc.grad(lambda w: loss(w, x, y))(w)
    t = np.tanh(x @ w)
    want = x.T @ (2 * (t - y) * (1 - t * t)) / 8
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-15)
    w = w - 0.1 * got
  assert kept.stats()["kept_misses"] == 1, kept.stats()


SCALE = np.array([1.0, 2.0, 3.0])


def _scaled(w):
  return pnp.sum(SCALE * w**2)


def test_a_global_array_changed_in_place_or_rebound_is_seen():
  global SCALE
  g = primc.grad(_scaled)
  w = np.array([0.5, -1.0, 2.0])
  np.testing.assert_allclose(g(w), 2 * SCALE * w)
  SCALE[1] = 7.0  # in place: the kept program reads it (an input)
  np.testing.assert_allclose(g(w), 2 * SCALE * w)
  SCALE = np.array([4.0, 5.0, 6.0])  # rebound
  np.testing.assert_allclose(g(w), 2 * SCALE * w)
  SCALE = np.array([1.0, 2.0, 3.0, 4.0])  # another shape: traced again
  with pytest.raises(primc.PrimcError):
    g(w)
  SCALE = np.array([1.0, 2.0, 3.0])
  np.testing.assert_allclose(g(w), 2 * SCALE * w)


def test_python_values_closed_over_are_part_of_the_key():
  w = np.linspace(-1, 1, 5)
  for a in (1.0, 2.0, 3.0, 2.0):
    got = primc.grad(lambda w: pnp.sum(pnp.tanh(a * w + 1) ** 2))(w)
    np.testing.assert_allclose(got, _tanh_loss_grad(w, a), rtol=1e-10, atol=1e-15)
  s = kept.stats()
  assert s["kept_misses"] == 3 and s["kept_miss_reasons"]["new function or state"] == 3, s


class Model:
  def __init__(self, W):
    self.W = W

  def loss(self, x):
    return pnp.sum(pnp.tanh(x @ self.W) ** 2)


def test_a_bound_method_reads_its_object_afresh():
  m = Model(np.eye(3))
  x = np.array([[0.1, 0.2, 0.3]])
  for scale in (1.0, 2.0, 3.0):
    m.W = scale * np.eye(3) + 0.1
    t = np.tanh(x @ m.W)
    want = (2 * t * (1 - t * t)) @ m.W.T
    np.testing.assert_allclose(primc.grad(m.loss)(x), want, rtol=1e-10, atol=1e-15)
  assert kept.stats()["kept_misses"] == 1


@pytest.mark.parametrize("first_calls", ["made", "on_values"])
def test_random_numbers_drawn_inside_are_drawn_at_every_call(caplog, monkeypatch, first_calls):
  """numpy random numbers drawn while tracing: the function is traced at every call (as
  without keeping), once per call (the generator's stream as numpy's), and logged;
  whether its first calls make its program or run on values (`primc.tape`)."""
  if first_calls == "on_values":
    monkeypatch.setattr(kept, "TAPE_MIN_SECONDS", 0.0)
  f = lambda w: pnp.sum(w * np.random.standard_normal(4))
  w = np.ones(4)
  for seed in range(4):
    np.random.seed(seed)
    want = np.random.standard_normal(4)
    np.random.seed(seed)
    np.testing.assert_array_equal(primc.grad(f)(w), want)
    assert np.random.standard_normal() == np.random.RandomState(seed).standard_normal(5)[4]
  assert "draws random numbers while traced" in caplog.text
  assert kept.stats()["kept_not_kept"] >= 2


@pytest.mark.parametrize("draws", [False, True])
def test_a_generator_first_imported_inside_the_first_call(monkeypatch, caplog, draws):
  """numpy.random imported for the first time inside a function's first call (scipy's
  functions import it at their first evaluation): no state before says whether the call
  drew from it. A function that does not draw is kept at once; one that does is seen at
  its second call, which traces it again, and from then on is traced at every call (each
  call's own numbers)."""
  import sys

  module = sys.modules["numpy.random"]
  monkeypatch.delitem(sys.modules, "numpy.random")  # (as before its first import)

  def imported():
    sys.modules["numpy.random"] = module  # (its import, inside the call)
    return np.random.standard_normal(3) if draws else np.ones(3)

  f = lambda w: pnp.sum(w * imported())
  w = np.ones(3)
  np.random.seed(0)
  got = [primc.grad(f)(w) for _ in range(3)]
  s = kept.stats()
  if draws:  # (each call's numbers drawn by it, in numpy's stream)
    np.random.seed(0)
    want = [np.random.standard_normal(3) for _ in range(3)]
    for g, x in zip(got, want, strict=True):
      np.testing.assert_array_equal(g, x)
    assert s["kept_not_kept"] >= 1, s
  else:
    assert s["kept_misses"] == 1 and s["kept_hits"] == 1 and "kept_not_kept" not in s, s
    for g in got:
      np.testing.assert_array_equal(g, np.ones(3))


def test_the_second_call_checks_by_tracing_the_function_alone(monkeypatch):
  """The second call traces the function without the transform (the HMM gradient's
  second call: 5.2 s -> 1.1 s), not the transform again, and compares the two traces
  variable by variable (`core.alpha_equal`), before printing them."""
  made, printed = [], []
  real, fingerprint = kept._make, kept._fingerprint
  monkeypatch.setattr(kept, "_make", lambda *a, **k: made.append(1) or real(*a, **k))
  monkeypatch.setattr(kept, "_fingerprint", lambda p: printed.append(1) or fingerprint(p))
  f = lambda w: pnp.sum(pnp.tanh(2 * w + 1) ** 2)
  w = np.linspace(-1, 1, 7)
  for _ in range(3):
    np.testing.assert_allclose(primc.grad(f)(w), _tanh_loss_grad(w), rtol=1e-10)
  assert len(made) == 1 and kept.stats()["kept_checked"] == 1
  assert not printed  # (the same trace up to names: not printed to compare)


def test_state_read_through_a_module_is_seen_at_the_second_call(monkeypatch, caplog):
  """A value read where the walk does not look (a module's attribute, here the
  environment) and changed before the second call: that call's trace differs, so the
  function is traced at every call from then on."""
  f = lambda w: pnp.sum(w * float(os.environ["PRIMC_TEST_SCALE"]))
  w = np.ones(3)
  for scale in (2.0, 3.0, 5.0, 7.0):
    monkeypatch.setenv("PRIMC_TEST_SCALE", str(scale))
    np.testing.assert_array_equal(primc.grad(f)(w), [scale] * 3)
  assert "changed between two calls" in caplog.text


# ---------------------------------------------------------------------------------------
# The family: functions not kept by what they read (a generator in their closure, numpy's
# global generator, an object's state), kept by the structure of their trace instead:
# every call's result is the one the transform gives without keeping, drawing the same
# numbers (one draw per call)


def _stochastic(rs, noise_shape):
  def objective(params, t):
    mean, log_std = params[:2], params[2:]
    samples = rs.standard_normal(noise_shape) * pnp.exp(log_std) + mean
    return pnp.mean(pnp.sum(pnp.tanh(samples) ** 2, axis=-1)) * (1.0 + 0.1 * t)

  return objective


@pytest.mark.parametrize(
  "transform",
  [
    lambda f: primc.grad(f),
    lambda f: primc.value_and_grad(f),
    lambda f: primc.jacrev(f),
    lambda f: primc.jacfwd(f),
    lambda f: primc.hessian(f),
    lambda f: primc.grad(lambda p, t: (f(p, t), {"p": p * 2.0}), has_aux=True),
  ],
)
@pytest.mark.parametrize("source", ["closure", "global"])
def test_functions_drawing_random_numbers_are_kept_by_their_structure(transform, source):
  def make(seed):
    if source == "closure":
      return _stochastic(np.random.RandomState(seed), (50, 2))
    np.random.seed(seed)
    return _stochastic(np.random, (50, 2))

  kept_fn, plain_fn = transform(make(3)), None
  state = np.random.get_state() if source == "global" else None
  params = np.array([0.1, -0.2, -1.0, -0.5])
  got = [kept_fn(params + 0.01 * t, t) for t in range(5)]
  after = np.random.standard_normal() if source == "global" else None
  plain_fn = transform(make(3))
  want = _unkept(lambda: [plain_fn(params + 0.01 * t, t) for t in range(5)])
  for g, w in zip(got, want):
    for a, b in zip(primc.tree_util.tree_leaves(g), primc.tree_util.tree_leaves(w)):
      np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
  if source == "global":  # as many numbers drawn as without keeping
    assert after == np.random.standard_normal(), state
  assert kept.stats().get("kept_hits", 0) >= 3


_W = np.random.default_rng(5).standard_normal((3, 3))  # read by name (lifted)


def _pytree_loss(params, x, scale=1.0):
  h = pnp.tanh(x @ params["w"] + params["b"][0])
  return pnp.sum(h**2) * scale


def _with_aux(w):
  return pnp.sum(pnp.sin(w)), {"norm": pnp.sum(w * w), "raw": w}


def _two_outputs(w):
  return pnp.sin(w), pnp.cos(w).sum()


def _copy_written(w, x):
  y = w.copy()
  y[0] = y[0] * 2.0
  return pnp.sum(y * x * _W[0])


_R = np.random.default_rng(6)
_FORMS = {  # transform, arguments of the k-th call, keywords
  "pytree and keyword": (
    lambda: primc.grad(_pytree_loss),
    lambda: (
      {"w": _R.standard_normal((3, 2)), "b": [_R.standard_normal(2)]},
      _R.standard_normal((4, 3)),
    ),
    {"scale": 2.0},
  ),
  "argnums tuple": (
    lambda: primc.grad(_pytree_loss, argnums=(0, 1)),
    lambda: (
      {"w": _R.standard_normal((3, 2)), "b": [_R.standard_normal(2)]},
      _R.standard_normal((4, 3)),
    ),
    {},
  ),
  "integer array and int": (
    lambda: primc.value_and_grad(lambda w, idx, n: pnp.sum(pnp.take(w, idx) ** 3) * n),
    lambda: (_R.standard_normal(5), _R.integers(0, 5, 3), int(_R.integers(1, 4))),
    {},
  ),
  "has_aux": (lambda: primc.grad(_with_aux, has_aux=True), lambda: (_R.standard_normal(4),), {}),
  "jacrev of two outputs": (
    lambda: primc.jacrev(_two_outputs),
    lambda: (_R.standard_normal(3),),
    {},
  ),
  "jacfwd of two outputs": (
    lambda: primc.jacfwd(_two_outputs),
    lambda: (_R.standard_normal(3),),
    {},
  ),
  "hessian, a global array, a copy written": (
    lambda: primc.hessian(_copy_written),
    lambda: (_R.standard_normal(3), _R.standard_normal(3)),
    {},
  ),
  "elementwise_grad": (
    lambda: primc.elementwise_grad(lambda w: pnp.tanh(w) * w),
    lambda: (_R.standard_normal(6),),
    {},
  ),
  "vmap of grad": (
    lambda: primc.vmap(primc.grad(lambda w, x: pnp.sum(pnp.tanh(w * x)))),
    lambda: (_R.standard_normal((4, 3)), _R.standard_normal((4, 3))),
    {},
  ),
}


@pytest.mark.parametrize("form", sorted(_FORMS))
def test_kept_calls_of_every_argument_form_agree_with_fresh_traces(form):
  make, arguments, keywords = _FORMS[form]
  fn = make()
  for _ in range(4):
    args = arguments()
    got = fn(*args, **keywords)
    want = _unkept(lambda: make()(*args, **keywords))
    assert primc.tree_util.tree_structure(got) == primc.tree_util.tree_structure(want)
    for a, b in zip(primc.tree_util.tree_leaves(got), primc.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
  assert kept.stats()["kept_hits"] >= 2


def test_vmap_is_not_kept_by_structure():
  rs = np.random.RandomState(0)
  f = lambda x: pnp.sum(x * rs.standard_normal(3))
  xs = np.ones((4, 3))
  for _ in range(3):
    got = primc.vmap(f)(xs)
    assert got.shape == (4,)
  assert "kept by the structure of its trace" not in kept.stats().get("kept_miss_reasons", {})


def test_a_structure_that_changes_at_every_call_stops_being_tried():
  """A random scalar drawn inside stays a literal of the structure: a new structure at
  every call, so after `MAX_STRUCTURES` the function runs as without keeping."""
  rs = np.random.RandomState(0)
  f = lambda w: pnp.sum(w * rs.uniform())
  w = np.ones(2)
  check = np.random.RandomState(0)
  for _ in range(kept.MAX_STRUCTURES + 4):
    np.testing.assert_allclose(primc.grad(f)(w), [check.uniform()] * 2, rtol=1e-15)
  assert kept.stats()["kept_misses"] <= kept.MAX_STRUCTURES + 1


def test_an_object_that_could_change_unseen_is_not_kept():
  class Slotted:
    __slots__ = ("w",)

  s = Slotted()
  s.w = 2.0
  f = lambda x: pnp.sum(x * s.w)
  x = np.ones(2)
  for v in (2.0, 5.0):
    s.w = v
    np.testing.assert_allclose(primc.grad(f)(x), [v, v])
  stats = kept.stats()  # not kept by what it reads (by its trace's structure instead)
  assert stats["kept_not_kept"] >= 1 and stats["kept_misses"] == 2, stats
  assert any("Slotted" in r for r in kept.stats()["kept_miss_reasons"])


def _body(x, y):
  return pnp.sin(x) * y + pnp.tanh(x * y) ** 2


TRANSFORMS = {
  "grad": lambda f, x, y: primc.grad(f)(x, y),
  "grad_argnums": lambda f, x, y: primc.grad(lambda a, b: pnp.sum(f(a, b)), argnums=(0, 1))(x, y),
  "value_and_grad": lambda f, x, y: primc.value_and_grad(f, argnums=1)(x, y),
  "jvp": lambda f, x, y: primc.jvp(f, (x, y), (np.ones_like(x), y)),
  "vmap": lambda f, x, y: primc.vmap(f, in_axes=(0, None))(np.stack([x, 2 * x]), y),
  "jacfwd": lambda f, x, y: primc.jacfwd(lambda a: pnp.sin(a) * f(a, y))(x),
  "jacrev": lambda f, x, y: primc.jacrev(f)(x, y),
  "hessian": lambda f, x, y: primc.hessian(f)(x, y),
  "hvp": lambda f, x, y: primc.hvp(f, (x, y), (y, x)),
  "elementwise_grad": lambda f, x, y: primc.elementwise_grad(lambda a: pnp.sin(a) * f(a, y))(x),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_every_transform_keeps_and_agrees_with_a_fresh_trace(name):
  """Each transform, called in a loop on changing data closed over and passed: kept once
  (per signature), each result the one keeping off gives."""
  rng = np.random.default_rng(5)
  run = TRANSFORMS[name]
  scalar = name in ("grad", "value_and_grad", "hessian", "hvp")
  for _ in range(5):
    x, y, c = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3)
    if scalar:
      f = lambda a, b: pnp.sum(_body(a, b) * c)
    else:
      f = lambda a, b: _body(a, b) * c
    got, want = run(f, x, y), _unkept(lambda: run(f, x, y))
    for g, w in zip(
      primc.tree_util.tree_leaves(got), primc.tree_util.tree_leaves(want), strict=True
    ):
      np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14)
  s = kept.stats()
  assert s["kept_misses"] == 1 and s["kept_hits"] == 3 and "kept_not_kept" not in s, s


def test_partial_and_keywords():
  def loss(w, x, power=2):
    return pnp.sum(x * w**power)

  w = np.array([1.0, 2.0])
  for k in range(3):
    x = np.array([1.0, float(k)])
    np.testing.assert_allclose(primc.grad(functools.partial(loss, x=x))(w), 2 * x * w)
    np.testing.assert_allclose(primc.grad(loss)(w, x, power=3), 3 * x * w**2)
  assert kept.stats()["kept_misses"] == 2


@pytest.mark.parametrize("loaded", [True, False])
def test_a_hot_kept_program_is_compiled_once_calls_pay_for_it(monkeypatch, loaded, hot_compiles):
  """Compiled after HOT_CALLS calls and HOT_SECONDS of interpreting, plus LOAD_SECONDS
  where code generation is not loaded yet (here: never reached)."""
  monkeypatch.setattr(kept, "HOT_CALLS", 3)
  monkeypatch.setattr(kept, "HOT_SECONDS", 0.0)
  monkeypatch.setattr(kept, "COMPILE_SECONDS", 0.0)
  monkeypatch.setattr(kept, "LOAD_SECONDS", 1e6)
  monkeypatch.setattr(kept, "_codegen_loaded", lambda: loaded)
  f = lambda w: pnp.sum(pnp.tanh(2 * w + 1) ** 2)
  w = np.linspace(-1, 1, 7)
  for _ in range(6):
    np.testing.assert_allclose(primc.grad(f)(w), _tanh_loss_grad(w), rtol=1e-10, atol=1e-15)
  assert kept.stats().get("kept_compiled") == (1 if loaded else None)


class _NeverReady:
  """A compile that never finishes: the kept program's own runner serves every call."""

  def ready(self):
    return False


@pytest.mark.parametrize("per_equation", [0.0, 1e3])
def test_a_hot_program_waits_for_its_compile_cost_and_is_not_optimized_first(
  monkeypatch, per_equation, hot_compiles
):
  """A kept program is compiled once its interpreted calls cost COMPILE_SECONDS per
  equation (1e3: never here), before the round of passes it would get at the same call
  (the compile optimizes it to the fixpoint), and no round runs while it compiles."""
  for name, value in [("HOT_CALLS", 2), ("HOT_SECONDS", 0.0), ("LOAD_SECONDS", 0.0)]:
    monkeypatch.setattr(kept, name, value)
  monkeypatch.setattr(kept, "COMPILE_SECONDS", per_equation)
  monkeypatch.setattr(kept, "OPTIMIZE_SECONDS", 0.0)
  compiled = []
  monkeypatch.setattr(kept, "compiler", [lambda program: compiled.append(program) or _NeverReady()])
  f = lambda w: pnp.sum(pnp.tanh(2 * w + 1) ** 2)
  w = np.linspace(-1, 1, 7)
  for _ in range(5):
    np.testing.assert_allclose(primc.grad(f)(w), _tanh_loss_grad(w), rtol=1e-10, atol=1e-15)
  (entry,) = kept._kept.values()
  assert len(compiled) == (1 if per_equation == 0 else 0)
  assert entry.optimized == (per_equation != 0)


# ---------------------------------------------------------------------------------------
# The family: data a function reads, wherever it lives, changed in any way between calls:
# every kept result is the one a fresh trace gives

DATA = np.ones(3)


def _reads_global(w):
  return pnp.sum(pnp.tanh(w * DATA) ** 2)


def _helper():
  return DATA * 2.0


class _Holder:
  def __init__(self, d):
    self.d = d

  def loss(self, w):
    return pnp.sum(pnp.tanh(w * self.d) ** 2)


class _Scenario:
  """A function of `w` reading an array from `place`, and ways to change that array."""

  def __init__(self, place, data):
    self.place, self.data = place, data
    self.box = {"d": data}
    self.cell = [data]
    self.holder = _Holder(data)
    self._set(data)

  def _set(self, data):
    global DATA
    self.data = data
    DATA = data if self.place in ("global", "nested") else DATA
    self.box["d"] = data
    self.cell[0] = data
    self.holder.d = data

  def fun(self):
    data, box, cell = self.data, self.box, self.cell
    return {
      "closure": lambda w: pnp.sum(pnp.tanh(w * data) ** 2),
      "global": _reads_global,
      "nested": lambda w: pnp.sum(pnp.tanh(w * _helper()) ** 2),
      "default": (lambda w, d=data: pnp.sum(pnp.tanh(w * d) ** 2)),
      "partial": functools.partial(lambda w, d: pnp.sum(pnp.tanh(w * d) ** 2), d=data),
      "method": self.holder.loss,
      "dict": lambda w: pnp.sum(pnp.tanh(w * box["d"]) ** 2),
      "list": lambda w: pnp.sum(pnp.tanh(w * cell[0]) ** 2),
    }[self.place]

  def change(self, how, value):
    if how == "in_place":
      self.data[...] = value
    elif how == "rebind":
      self._set(np.full(3, value))


from hypothesis import given, settings, strategies as st  # noqa: E402

KEPT_TRANSFORMS = {
  "grad": lambda f, w: primc.grad(f)(w),
  "value_and_grad": lambda f, w: primc.value_and_grad(f)(w),
  "jvp": lambda f, w: primc.jvp(f, (w,), (np.ones(3),)),
  "hessian": lambda f, w: primc.hessian(f)(w),
  "vmap_grad": lambda f, w: primc.vmap(primc.grad(f))(np.stack([w, -w])),
  "vjp": lambda f, w: primc.vjp(f, w)[1](np.float64(1.5)),  # (its trace kept: `kept.traced`)
}


@settings(max_examples=60, deadline=None)
@given(
  place=st.sampled_from(
    ["closure", "global", "nested", "default", "partial", "method", "dict", "list"]
  ),
  transform=st.sampled_from(sorted(KEPT_TRANSFORMS)),
  changes=st.lists(
    st.tuples(
      st.sampled_from(["in_place", "rebind", "none"]), st.floats(-2, 2, allow_nan=False, width=32)
    ),
    min_size=1,
    max_size=5,
  ),
)
def test_kept_results_follow_the_data_wherever_it_lives(place, transform, changes):
  kept.reset()
  scenario = _Scenario(place, np.array([0.5, -1.0, 2.0]))
  w = np.array([0.3, 0.2, -0.4])
  run = KEPT_TRANSFORMS[transform]
  for how, value in [("none", 0.0)] + changes:
    scenario.change(how, value)
    f = scenario.fun()
    got, want = run(f, w), _unkept(lambda: run(f, w))
    for g, x in zip(
      primc.tree_util.tree_leaves(got), primc.tree_util.tree_leaves(want), strict=True
    ):
      np.testing.assert_allclose(g, x, rtol=1e-10, atol=1e-14)
  s = kept.stats()
  assert "kept_not_kept" not in s, s  # every call kept: none fell back


class _Layer:
  """A layer as model code keeps one: its weights (an array) and where its inputs lie in
  a flat vector, a slice of numpy integers (`np.prod(shape)` sums)."""

  def __init__(self, W, start):
    self.W = W
    self.span = slice(np.int64(start), np.int64(start) + np.int64(W.size))


class _Net:
  """Layers, and a dict keyed by the layer objects (autograd's convnet example keys its
  parser by its layers): a walk makes the layers again around traced weights, and the
  dict must find them."""

  def __init__(self, sizes, rng):
    starts = np.cumsum([0] + sizes[:-1])
    self.layers = [_Layer(rng.standard_normal(n), s) for n, s in zip(sizes, starts)]
    self.index = {layer: np.int32(k + 1) for k, layer in enumerate(self.layers)}

  def loss(self, w):
    total = 0.0
    for layer in self.layers:
      total = total + pnp.sum(pnp.tanh(w[layer.span] * layer.W) ** 2) * self.index[layer]
    return total


@settings(max_examples=40, deadline=None)
@given(
  transform=st.sampled_from(sorted(KEPT_TRANSFORMS)),
  sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3),
  changes=st.lists(st.sampled_from(["in_place", "rebind", "reorder", "none"]), max_size=4),
)
def test_models_of_objects_keyed_and_sliced_by_numpy_integers_are_kept(transform, sizes, changes):
  """A model of layer objects holding weights, sliced by numpy integers and found through
  a dict keyed by the layers: kept (none falls back), every result the unkept one's as
  its weights change in place, are rebound, or its layers are reordered (numpy integers
  are values of the key, as Python's)."""
  kept.reset()
  rng = np.random.default_rng(len(sizes))
  net = _Net(sizes, rng)
  n = sum(sizes)
  w = rng.standard_normal(n)
  run = {"vmap_grad": lambda f, w: primc.vmap(primc.grad(f))(np.stack([w, -w]))}.get(
    transform, KEPT_TRANSFORMS[transform]
  )
  if transform == "jvp":
    run = lambda f, w: primc.jvp(f, (w,), (np.ones(n),))
  for how in ["none", *changes]:
    if how == "in_place":
      net.layers[0].W[...] = rng.standard_normal(net.layers[0].W.shape)
    elif how == "rebind":
      net.layers[-1].W = rng.standard_normal(net.layers[-1].W.shape)
    elif how == "reorder":
      net.index = {layer: np.int32(len(net.layers) - k) for k, layer in enumerate(net.layers)}
    got, want = run(net.loss, w), _unkept(lambda: run(net.loss, w))
    for g, x in zip(
      primc.tree_util.tree_leaves(got), primc.tree_util.tree_leaves(want), strict=True
    ):
      np.testing.assert_allclose(g, x, rtol=1e-10, atol=1e-14)
  s = kept.stats()
  assert "kept_not_kept" not in s, s


def test_python_numbers_among_the_arguments_are_traced_unless_their_values_are_needed():
  """autograd's optimizers call `grad(objective)(params, step)`: one program for every
  step; a number used as a value (`range(n)`) is a value of the key instead."""

  def objective(w, step):
    return pnp.sum(pnp.tanh(w) ** 2) * (1.0 + 0.01 * step)

  w = np.linspace(-1, 1, 4)
  t = np.tanh(w)
  for step in range(10):
    np.testing.assert_allclose(
      primc.grad(objective)(w, step), 2 * t * (1 - t * t) * (1.0 + 0.01 * step), rtol=1e-12
    )
  assert kept.stats()["kept_misses"] == 1, kept.stats()

  def repeated(w, n):
    y = w
    for _ in range(n):
      y = pnp.sin(y)
    return pnp.sum(y)

  for n in (1, 2, 3, 2):
    y, d = w, np.ones_like(w)
    for _ in range(n):
      d, y = d * np.cos(y), np.sin(y)
    np.testing.assert_allclose(primc.grad(repeated)(w, n), d, rtol=1e-12)
  assert kept.stats()["kept_misses"] == 1 + 3, kept.stats()  # objective; n = 1, 2, 3


def _series_sin(x):
  """sin by its series, summed until a term is small: a loop whose length depends on x."""
  term = x
  total = term
  for i in range(1000):
    term = -term * x**2 / ((2 * i + 3) * (2 * i + 2))
    total = total + term
    if pnp.abs(term) < 1e-3:
      break
  return total


def test_a_function_reading_values_keeps_a_program_per_path():
  """Python control flow on values: each path is kept with its guards (as jit's graph
  breaks), checked at every call; a call on another path traces it."""
  d2 = primc.grad(primc.grad(_series_sin))
  xs = np.linspace(-4.0, 4.0, 41)
  got = [d2(x) for x in np.concatenate([xs, xs[::-1]])]
  want = _unkept(lambda: [d2(x) for x in np.concatenate([xs, xs[::-1]])])
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(got[:41], -np.sin(xs), atol=1e-2)  # (the series' own error)
  stats = primc.cache_stats()
  assert stats["kept_misses"] <= 2 and stats["kept_hits"] >= 41, stats


def test_random_numbers_drawn_inside_a_function_reading_values(caplog):
  def f(x):
    y = pnp.sum(x * np.random.randn(3))  # a new draw at every call
    return y * 2.0 if y > -100.0 else y

  g = primc.grad(f)
  with caplog.at_level("WARNING"):
    outs = [g(np.ones(3)) for _ in range(4)]
  assert len({tuple(np.round(o, 12)) for o in outs}) == 4  # never a stale draw
  assert "changed between two calls" in caplog.text


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "elementwise_grad"])
def test_a_new_path_runs_the_functions_python_once(transform, monkeypatch):
  """A path of a grad-like transform is made from the function's trace of that path
  (`kept._replayed_path`): its Python runs once per new path (the trace that finds the
  path), and once more at the path's first reuse (the check); results as unkept."""
  runs, sin = [], pnp.sin
  monkeypatch.setattr(pnp, "sin", lambda x: runs.append(1) or sin(x))  # (counted where
  # the function's closure does not change: a changed closure is a new key)

  def f(x):
    y = pnp.sin(x)  # (once per run of f)
    for i in range(50):
      y = y * 0.5 + pnp.cos(x) / (i + 2)
      if pnp.sum(pnp.abs(y)) < 0.3:
        break
    return pnp.sum(y)

  g = getattr(primc, transform)(f)
  xs = [np.full(2, v) for v in (0.1, 0.1, 0.9, 0.9, 0.9, -2.0)]
  got = [g(x) for x in xs]
  assert primc.cache_stats()["kept_misses"] == 1
  paths = 3  # (0.1, 0.9 and -2.0 stop after different numbers of steps)
  assert len(runs) <= 1 + 2 * paths, len(runs)  # (the first call's abstract try, then each
  # path's trace and its first reuse's check)
  want = _unkept(lambda: [g(x) for x in xs])
  flat = lambda r: np.concatenate([np.ravel(t) for t in (r if isinstance(r, tuple) else (r,))])
  for a, b in zip(got, want):
    np.testing.assert_allclose(flat(a), flat(b), rtol=1e-13)


def test_library_ops_are_keyed_by_identity_not_walked():
  """A transform's key walks the user's functions, not primc's ops (their closures are the
  library's): `elementwise_grad(elementwise_grad(pnp.tanh))` called in a loop walked ~60
  objects a call, most of them inside `pnp.tanh`'s wrappers."""
  for op in (pnp.tanh, pnp.sum, pnp.reshape, primc.lax.cond):
    walk = kept._Walk()
    walk(op)
    assert walk.nodes == 1, op
  eg = primc.elementwise_grad(primc.elementwise_grad(pnp.tanh))
  x = np.linspace(-1.0, 1.0, 5)
  t = np.tanh(x)
  np.testing.assert_allclose(eg(x), -2 * t * (1 - t * t), rtol=1e-12)


def test_a_users_function_marked_as_taking_front_ends_is_still_walked():
  scale = [2.0]
  op = pnp.takes_front_ends(lambda x: x * scale[0])
  g = primc.grad(lambda x: pnp.sum(op(x)))
  for _ in range(3):  # (the second call's check passes: from then on the walk is trusted)
    np.testing.assert_array_equal(g(np.ones(2)), [2.0, 2.0])
  scale[0] = 3.0  # (read through the op's closure: a new key)
  np.testing.assert_array_equal(g(np.ones(2)), [3.0, 3.0])
  assert primc.cache_stats().get("kept_not_kept", 0) == 0


# ---------------------------------------------------------------------------------------
# Inside a trace: a program kept outside it, staged (`kept.staged`)


def _tanh(x):
  return (1.0 - pnp.exp(-2 * x)) / (1.0 + pnp.exp(-(2 * x)))


def test_nested_derivatives_stage_the_programs_kept_before_them():
  """autograd's tanh example: each derivative plotted, then the next nested one. The inner
  levels' first calls kept their programs; inside the next level's trace they are staged
  (checked by tracing the function alone), and every result is a fresh trace's."""
  x = np.linspace(-7, 7, 50)
  fs, f = [], _tanh
  for _ in range(4):
    f = primc.elementwise_grad(f)
    fs.append(f)
  got = [g(x) for g in fs]
  assert kept.stats()["kept_staged"] == 1 + 2 + 3, kept.stats()  # (levels inside each)
  want = _unkept(lambda: [g(x) for g in fs])
  t = np.tanh(x)
  np.testing.assert_allclose(got[0], 1 - t**2, rtol=1e-9, atol=1e-15)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


_DATA_W = np.zeros(4)  # (read by name: rebound by the test below)


@pytest.mark.parametrize("where", ["jit", "vmap", "grad"])
def test_a_kept_gradient_staged_into_jit_vmap_and_grad_agrees(where):
  rng = np.random.default_rng(3)
  w0 = rng.standard_normal((3, 4))
  g = primc.grad(lambda w: pnp.sum(pnp.tanh(w * _DATA_W) ** 2))
  globals()["_DATA_W"] = rng.standard_normal(4)
  g(w0[0])  # kept outside any trace
  run = {
    "jit": lambda: primc.jit(lambda w: g(w) * 2.0)(w0[1]),
    "vmap": lambda: primc.jit(primc.vmap(g))(w0),  # (a kept vmap makes g anew: apart)
    "grad": lambda: primc.grad(lambda w: pnp.sum(g(w) ** 2))(w0[2]),
  }[where]
  globals()["_DATA_W"] = rng.standard_normal(4)  # (rebound: the staged program reads it)
  got = run()
  assert kept.stats().get("kept_staged", 0) >= 1, kept.stats()
  np.testing.assert_allclose(got, _unkept(run), rtol=1e-12, atol=1e-14)


def test_a_function_reading_a_traced_value_by_name_is_made_in_the_trace():
  """A closure over the enclosing trace's value cannot take a kept program: made anew,
  and the function stays kept outside the trace."""
  f = lambda y: primc.grad(lambda x: pnp.sum(pnp.sin(x * y)))(np.ones(3))
  primc.grad(lambda x: pnp.sum(pnp.sin(x * 2.0)))(np.ones(3))
  got = primc.grad(lambda y: pnp.sum(f(y)))(0.5)
  np.testing.assert_allclose(got, 3 * (np.cos(0.5) - 0.5 * np.sin(0.5)), rtol=1e-12)
  assert "kept_staged" not in kept.stats() and not kept.stats().get("kept_not_kept")


def test_random_numbers_drawn_inside_a_trace_are_drawn_once():
  """A kept function that now draws (a switch read through a module, which the walk
  compares by identity) is traced in the enclosing trace once, its transform made from
  that trace: numpy's generator advances as it does without keeping."""
  import types

  switch = types.ModuleType("switch")
  switch.draw = False
  noise = lambda: np.random.standard_normal(3) if switch.draw else 1.0
  f = primc.grad(lambda w: pnp.sum(w * noise()))
  f(np.ones(3))
  switch.draw = True
  jitted = lambda: primc.jit(lambda w: f(w) + 0.0)(np.ones(3))
  np.random.seed(5)
  got = jitted()
  after = np.random.standard_normal()
  np.random.seed(5)
  want = _unkept(jitted)
  np.testing.assert_allclose(got, want)
  assert after == np.random.standard_normal()
  assert "kept_staged" not in kept.stats()


def test_state_read_through_a_module_is_seen_inside_a_trace():
  """The walk compares a module by identity: a value read through it that changed since
  the kept call makes the function trace differently, and it is made in the trace."""
  import types

  switch = types.ModuleType("switch")
  switch.scale = 1.0
  f = primc.grad(lambda w: pnp.sum(pnp.sin(w * switch.scale)))
  f(np.ones(3))
  switch.scale = 3.0
  run = lambda: primc.jit(lambda w: f(w) * 1.0)(np.ones(3))
  np.testing.assert_allclose(run(), 3.0 * np.cos(3.0 * np.ones(3)), rtol=1e-12)
  assert "kept_staged" not in kept.stats()
  switch.scale = 1.0  # (as when kept: staged)
  np.testing.assert_allclose(run(), np.cos(np.ones(3)), rtol=1e-12)
  assert kept.stats()["kept_staged"] == 1


def test_an_array_closed_over_may_be_a_traced_value_inside_a_trace():
  """`grad(lambda x: loss(x, y))` kept with an array y: inside `jit`, y is a traced value
  of the same type, read by name, and the kept program is staged with it as its input."""
  x0 = np.array([0.3, -0.2, 0.5])
  outer = lambda y: primc.grad(lambda x: pnp.sum(pnp.tanh(x * y) ** 2))(x0)
  want = lambda y: 2 * np.tanh(x0 * y) * (1 - np.tanh(x0 * y) ** 2) * y
  y0, y1 = np.array([1.0, 2.0, -1.0]), np.array([0.5, -3.0, 2.0])
  np.testing.assert_allclose(outer(y0), want(y0), rtol=1e-12)
  np.testing.assert_allclose(primc.jit(outer)(y1), want(y1), rtol=1e-12)
  assert kept.stats()["kept_staged"] == 1, kept.stats()


def _series(x):  # sin's series summed until a term is small: a path per number of terms
  term, total = x, x
  for i in range(60):
    term = -term * x * x / ((2 * i + 3) * (2 * i + 2))
    total = total + term
    if pnp.abs(term) < 0.2:
      break
  return total


def test_nested_derivatives_of_a_function_reading_values_stage_its_kept_paths():
  """autograd's sinusoid example: `grad(grad(f))` after `grad(f)`, f's loop ending where a
  value says. Traced with values, the inner gradient takes the path kept for those values
  and its guards become the outer trace's: every second derivative is a fresh trace's."""
  d = primc.grad(_series)
  dd = primc.grad(d)
  xs = np.linspace(-4.5, 4.5, 19)
  for v in xs:
    d(v)
  got = [dd(v) for v in xs]
  assert kept.stats()["kept_staged"] >= 5, kept.stats()
  want = _unkept(lambda: [dd(v) for v in xs])
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(got[9], 0.0, atol=1e-12)  # (-sin(0))


_UNARY = [
  *UNARY,
  lambda x: x * _SCALE,  # (an array read by name)
  lambda x: pnp.cumsum(x),
  lambda x: x[::-1] * x,
  lambda x: pnp.softmax(x),
]
_SCALE = np.array([0.5, -2.0, 1.5])
_INNER = {  # a transform of a function of a (3,) array, and its result as one array
  "grad": lambda f: lambda x: primc.grad(lambda v: pnp.sum(f(v)))(x),
  "elementwise_grad": lambda f: primc.elementwise_grad(f),
  "value_and_grad": lambda f: lambda x: primc.value_and_grad(lambda v: pnp.sum(f(v)))(x)[1],
  "jacrev": lambda f: lambda x: pnp.sum(primc.jacrev(f)(x), axis=0),
  "jacfwd": lambda f: lambda x: pnp.sum(primc.jacfwd(f)(x), axis=1),
  "hessian": lambda f: lambda x: pnp.sum(primc.hessian(lambda v: pnp.sum(f(v)))(x), axis=0),
}
_OUTER = {  # an enclosing trace of the inner transform
  "jit": lambda g, x: primc.jit(lambda v: g(v) * 1.5)(x),
  "vmap": lambda g, x: primc.jit(primc.vmap(g))(np.stack([x, x[::-1]])),
  "grad": lambda g, x: primc.grad(lambda v: pnp.sum(pnp.sin(g(v))))(x),
  "elementwise_grad": lambda g, x: primc.elementwise_grad(lambda v: pnp.cos(g(v)))(x),
  "jvp": lambda g, x: primc.jvp(g, (x,), (np.array([1.0, -0.5, 2.0]),))[1],
}


@settings(max_examples=30, deadline=None)
@given(
  inner=st.sampled_from(sorted(_INNER)),
  outer=st.sampled_from(sorted(_OUTER)),
  unary=st.lists(st.integers(0, len(_UNARY) - 1), min_size=1, max_size=3),
  primed=st.integers(0, 2),
  seed=st.integers(0, 2**16),
)
def test_a_transform_in_any_trace_agrees_with_keeping_off(inner, outer, unary, primed, seed):
  """Every transform, inside every enclosing trace, after 0-2 calls outside it (kept,
  then checked: the program staged where one is kept) gives what it gives unkept."""
  kept.reset()
  f = lambda v: functools.reduce(lambda a, k: _UNARY[k](a), unary, v)
  g = _INNER[inner](f)
  x = np.random.default_rng(seed).uniform(-1.0, 1.0, 3)
  for _ in range(primed):
    g(x + 0.25)  # (outside any trace: kept)
  got = _OUTER[outer](g, x)
  want = _unkept(lambda: _OUTER[outer](g, x))
  np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_a_function_reading_primc_objects_is_kept():
  """A function whose closure reaches primc's own immutable objects, a pytree's structure
  (`flatten_func`'s `unflatten`, as autograd's gmm example reads it) or the IR's records
  (a program, an abstract value, a literal), is kept: they are keyed by value or by
  identity, never refused as unknown objects."""
  from primc.core import Lit, ShapedArray
  from primc.tree_util import flatten_func

  program = primc.make_program(lambda v: v * 2.0)(np.ones(2))
  aval, lit = ShapedArray((2,), "float64"), Lit.of(3.0)

  def objective(p):
    scale = len(program.eqns) + aval.size + float(lit.value)
    return pnp.sum(p["a"] ** 2) * scale + pnp.sum(pnp.tanh(p["b"]))

  scale = len(program.eqns) + 2 + 3.0
  flat, unflatten, x0 = flatten_func(objective, {"a": np.ones(3), "b": np.linspace(0, 1, 2)})
  for k in range(3):
    x = x0 + 0.1 * k
    want = np.concatenate([2 * x[:3] * scale, 1 - np.tanh(x[3:]) ** 2])
    np.testing.assert_allclose(primc.grad(flat)(x), want, rtol=1e-12)
    np.testing.assert_allclose(
      primc.hessian_vector_product(flat)(x, np.ones(5)),
      np.concatenate([np.full(3, 2 * scale), -2 * np.tanh(x[3:]) * (1 - np.tanh(x[3:]) ** 2)]),
      rtol=1e-12,
    )
  stats = kept.stats()
  assert "kept_not_kept" not in stats, stats.get("kept_miss_reasons")
  assert stats["kept_hits"] >= 2


def test_a_structure_seen_again_is_found_without_printing_it(monkeypatch):
  """A function drawing random numbers is kept by the structure of its trace; a call
  whose trace is the last one's up to variable names finds its program without printing
  the trace (`core.alpha_equal`); each call's own draws are used."""
  printed = []
  fingerprint = kept._fingerprint
  monkeypatch.setattr(kept, "_fingerprint", lambda p: printed.append(1) or fingerprint(p))
  rs, again = np.random.RandomState(0), np.random.RandomState(0)
  f = lambda w: pnp.sum(pnp.tanh(w * rs.standard_normal(3)))
  w = np.linspace(0.1, 0.3, 3)
  for _ in range(5):
    noise = again.standard_normal(3)
    np.testing.assert_allclose(primc.grad(f)(w), noise * (1 - np.tanh(w * noise) ** 2), rtol=1e-12)
  assert len(printed) == 1
  assert kept.stats()["kept_hits"] >= 4
