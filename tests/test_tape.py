"""Reverse mode on values (`primc.tape`): its results are those of the program
`ad.vjp_program` makes, for every primitive's cases and for random compositions; a
long function's first calls outside `jit` run on it, then its kept program (`kept._Taped`),
every call's result the same as a fresh trace's."""

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import ad, kept, runners, tape
from primc.tree import tree_flatten
from primc.trace import eval_program

from prim_cases import case_id
from test_ad import DIFF_CASES
from test_ad_random import BINARY, RESHAPES, UNARY


def _by_program(program, args, wrt, cts):
  res = eval_program(
    ad.vjp_program(program, wrt, [c is not None for c in cts]),
    *args,
    *[c for c in cts if c is not None],
  )
  return res[: len(program.outputs)], res[len(program.outputs) :]


def _agree(program, args, rng, rtol=1e-10):
  wrt = [v.aval.is_float for v in program.inputs]
  cts = [
    rng.standard_normal(v.aval.shape).astype(v.aval.dtype) if v.aval.is_float else None
    for v in program.outputs
  ]
  want_outs, want_cts = _by_program(program, args, wrt, cts)
  outs, got = tape.vjp(program, args, wrt, cts)
  _same([*outs, *got], [*want_outs, *want_cts], rtol)
  # in two steps (`primc.vjp` on values): the backward sweep as often as it is called
  outs, back = tape.pullback(program, args, wrt)
  _same([*outs, *back(cts)], [*want_outs, *want_cts], rtol)
  other = [None if c is None else rng.standard_normal(c.shape).astype(c.dtype) for c in cts]
  _same(back(other), _by_program(program, args, wrt, other)[1], rtol)


def _same(got, want, rtol):
  """Equal to `rtol`, and near zero to 1e-12 of the largest value compared: a cotangent
  that cancels to zero in one program is a few rounding errors of the terms that cancel
  in the other (~1e-12 where they are ~2,500)."""
  assert len(got) == len(want)
  scale = max([float(np.max(np.abs(w))) for w in want if np.size(w)], default=1.0)
  for g, w in zip(got, want, strict=True):
    assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
    np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12 * max(1.0, scale))


def _has_float_argument(case) -> bool:
  return any(np.asarray(x).dtype.kind == "f" for x in case.make(np.random.default_rng(0)))


FLOAT_CASES = [c for c in DIFF_CASES if _has_float_argument(c)]  # (something to differentiate)


@pytest.mark.parametrize("optimize_after", [1, 10**9])  # (kinds optimized, and not)
@pytest.mark.parametrize("case", FLOAT_CASES, ids=case_id)
def test_every_primitive_on_the_tape_agrees_with_its_vjp_program(
  case, optimize_after, rng, monkeypatch
):
  monkeypatch.setattr(tape, "_KINDS", {})
  monkeypatch.setattr(tape, "OPTIMIZE_AFTER", optimize_after)
  xs = case.make(rng)
  program = primc.make_program(case.fn)(*xs)
  _agree(program, [np.asarray(x) for x in xs], rng)


@pytest.mark.parametrize("case", FLOAT_CASES, ids=case_id)
def test_generated_runners_agree_with_the_interpreter(case, rng, monkeypatch):
  """A runner past `runners.GENERATE_AFTER` calls is one generated function: its results
  are the interpreter's bit for bit, and the tape's kinds made that way agree too."""
  monkeypatch.setattr(runners, "GENERATE_AFTER", 0)
  monkeypatch.setattr(tape, "_KINDS", {})
  xs = [np.asarray(x) for x in case.make(rng)]
  program = primc.make_program(case.fn)(*xs)
  run = runners.runner(program)
  for got, want in zip(run(xs), eval_program(program, *xs), strict=True):
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)
  _agree(program, xs, rng)


def test_a_case_of_every_differentiable_primitive_is_run():
  """The float cases above cover every differentiable primitive (integer-only cases are
  left out: there is nothing to differentiate)."""
  assert {c.prim for c in FLOAT_CASES} == {c.prim for c in DIFF_CASES}


def _composition(ops):
  def f(x, y):
    values = [x, y]
    for kind, k, a, b in ops:
      if kind == "unary":
        v = UNARY[k % len(UNARY)](values[a % len(values)])
      elif kind == "binary":
        v = BINARY[k % len(BINARY)](values[a % len(values)], values[b % len(values)])
      else:
        v = RESHAPES[k % len(RESHAPES)](values[a % len(values)])
        v = pnp.broadcast_to(pnp.sum(v), x.shape) + x  # (back to x's shape: fan-out)
      values.append(v)
    return pnp.sum(values[-1] ** 2) + pnp.sum(values[2] if len(values) > 2 else x)

  return f


OPS = st.lists(
  st.tuples(
    st.sampled_from(["unary", "binary", "reshape"]),
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 20),
  ),
  min_size=1,
  max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_random_compositions_on_the_tape_agree_with_the_vjp_program(ops, seed):
  rng = np.random.default_rng(seed)
  x, y = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((3, 4)) * 0.5
  program = primc.make_program(_composition(ops))(x, y)
  _agree(program, [x, y], rng, rtol=1e-9)


def test_a_primitive_without_reverse_mode_says_so_as_the_program_does():
  """The tape falls back to the program where anything fails: its error is the one."""
  from primc import lax

  f = lambda x: pnp.sum(lax.while_loop(lambda v: pnp.sum(v * v) < 50.0, lambda v: v * 1.7, x))
  with pytest.raises(primc.PrimcError, match="reverse-mode differentiation through while"):
    primc.grad(f)(np.ones(3))


def _vjp_in_a_trace(f, args, ct, has_aux):
  """`primc.vjp(f, *args)` and its pullback at `ct`, made inside `jit` (the transposed
  program staged into jit's)."""

  def both(*a):
    made = primc.vjp(f, *a, has_aux=has_aux)
    return made[0], made[1](ct), made[2:]

  return primc.jit(both)(*args)


@settings(max_examples=25, deadline=None)
@given(ops=OPS, seed=st.integers(0, 2**16), has_aux=st.booleans())
@example(ops=[("reshape", 7, 1, 0), ("reshape", 0, 2, 0)], seed=0, has_aux=False)  # (a zero
# cotangent: exact in jit's program, rounding of terms ~2,500 on the tape)
def test_vjp_on_values_is_vjp_in_a_trace(ops, seed, has_aux):
  """`primc.vjp` on values runs on the tape (no program of the function is linearized:
  `_linearized` is not called) and gives what the vjp staged into `jit` gives, for
  pytree arguments, an integer argument (its cotangent None), an auxiliary output and a
  pullback called twice."""
  from primc import api

  rng = np.random.default_rng(seed)
  x, y = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((3, 4)) * 0.5
  g = _composition(ops)

  def f(xy, n):
    out = {"v": g(xy["x"], xy["y"]) * n, "k": n + 1}
    return (out, pnp.sum(xy["x"])) if has_aux else out

  args = ({"x": x, "y": y}, np.int64(3))
  cts = [{"v": rng.standard_normal(()), "k": np.int64(0)} for _ in range(2)]
  wants = [_vjp_in_a_trace(f, args, ct, has_aux) for ct in cts]
  with pytest.MonkeyPatch.context() as m:
    m.setattr(api, "_linearized", None)  # (called: a TypeError)
    made = primc.vjp(f, *args, has_aux=has_aux)
  out, pull = made[0], made[1]
  for ct, (want_out, want_ct, want_aux) in zip(cts, wants):
    got = pull(ct)
    assert got[1] is None and want_ct[1] is None  # (the integer argument)
    _same([got[0]["x"], got[0]["y"]], [want_ct[0]["x"], want_ct[0]["y"]], 1e-9)
  _same([out["v"], out["k"], *made[2:]], [want_out["v"], want_out["k"], *want_aux], 1e-12)


def test_vjp_on_values_refuses_what_the_traced_vjp_refuses():
  """A pullback on values checks its cotangent as the traced one does, and a primitive
  without reverse mode is named (by the program, made where the tape cannot go)."""
  from primc import lax

  out, pull = primc.vjp(lambda x: pnp.tanh(x) * 2.0, np.ones(3))
  with pytest.raises(primc.PrimcError, match="does not match output"):
    pull(np.ones(4))
  with pytest.raises(primc.PrimcError, match="structure of the output"):
    pull((np.ones(3), np.ones(3)))
  f = lambda x: pnp.sum(lax.while_loop(lambda v: pnp.sum(v * v) < 50.0, lambda v: v * 1.7, x))
  out, pull = primc.vjp(f, np.ones(3))
  np.testing.assert_allclose(out, f(np.ones(3)))
  with pytest.raises(primc.PrimcError, match="reverse-mode differentiation through while"):
    pull(1.0)


# ---------------------------------------------------------------------------------------
# A long function's first calls outside jit: on values, then its kept program


@pytest.fixture
def taped(monkeypatch):
  """Every function is long enough to run on values first; a kept program is made once
  the calls on values have cost `estimate` seconds (set per test)."""
  kept.reset()
  monkeypatch.setattr(kept, "TAPE_MIN_SECONDS", 0.0)
  yield monkeypatch
  kept.reset()


def _loss(w, data):
  a = w
  for t in range(data.shape[0]):
    a = pnp.log(pnp.sum(pnp.exp(a[:, None] + data[t]), axis=0))
  return pnp.sum(a)


def _oracle(w, data):
  return primc.jit(primc.value_and_grad(_loss))(w, data)


def test_first_calls_run_on_values_then_the_kept_program(taped):
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)  # calls on values until made... never
  rng = np.random.default_rng(0)
  data = rng.standard_normal((6, 4, 4)) * 0.3
  f = primc.value_and_grad(_loss)
  for _ in range(4):
    w = rng.standard_normal(4)
    (v, g), (v0, g0) = f(w, data), _oracle(w, data)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-10)
  s = kept.stats()
  assert s["kept_taped"] == 4 and "kept_hits" not in s and s["kept_misses"] == 1, s
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 0.0)  # they have cost enough: made now
  for _ in range(4):
    w = rng.standard_normal(4)
    (v, g), (v0, g0) = f(w, data), _oracle(w, data)
    np.testing.assert_allclose(g, g0, rtol=1e-10)
  s = kept.stats()
  assert s["kept_taped"] == 4 and s["kept_checked"] == 1 and s["kept_hits"] == 2, s


def _loss_reading(w, data):
  a = _loss(w, data)
  return a * 2.0 if a > -1e9 else a  # (Python reads a value: a path kept)


class _NeverReady:
  def ready(self):
    return False


@pytest.mark.parametrize("loss", [_loss, _loss_reading])
def test_calls_on_values_count_toward_compiling_the_program_made(taped, loss, hot_compiles):
  """The calls a function ran on values, and their time, are the program made from them
  running slowly: with HOT_CALLS 4, it is handed to the compiler at its first call after
  three on values, not at its fourth (a path of a function whose Python reads values too)."""
  for name, value in [("HOT_CALLS", 4), ("HOT_SECONDS", 0.0), ("LOAD_SECONDS", 0.0)]:
    taped.setattr(kept, name, value)
  taped.setattr(kept, "COMPILE_SECONDS", 0.0)
  rng = np.random.default_rng(3)
  data = rng.standard_normal((5, 4, 4)) * 0.3
  ws = [rng.standard_normal(4) for _ in range(4)]
  want = [primc.jit(primc.value_and_grad(loss))(w, data) for w in ws]  # (before: `jit`
  compiled = []  # sets `kept.compiler` where it is first imported)
  taped.setattr(kept, "compiler", [lambda program: compiled.append(program) or _NeverReady()])
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)  # (on values: never made)
  f = primc.value_and_grad(loss)
  for k, (w, (v0, g0)) in enumerate(zip(ws, want)):
    if k == 3:
      taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 0.0)  # (made now)
    v, g = f(w, data)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-10)
    assert len(compiled) == (1 if k == 3 else 0), k
  assert kept.stats()["kept_taped"] == 3


def _loss_scaled(w, data, scale, steps):
  return _loss(w, data[:steps]) * scale


@pytest.mark.parametrize("numbers", [False, True])
def test_calls_on_values_take_the_functions_trace_as_it_is(taped, numbers):
  """A call on values differentiates the function's trace itself (`replayed.adopted`),
  not a copy staged again into a new trace (the HMM's 10,400 equations: ~14 ms a call);
  also where Python numbers it does not differentiate are passed (`grad` binds them as
  Python values; one that sets a count is a value of the key)."""
  from primc import trace

  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)  # (on values at every call)
  rng = np.random.default_rng(4)
  data = rng.standard_normal((5, 4, 4)) * 0.3
  more = (0.5, 4) if numbers else ()
  f = primc.value_and_grad(_loss_scaled if numbers else _loss)
  f(rng.standard_normal(4), data, *more)
  ws = [rng.standard_normal(4) for _ in range(3)]
  scale = 0.5 if numbers else 1.0
  want = [[x * scale for x in _oracle(w, data[:4] if numbers else data)] for w in ws]
  staged = []
  stage = trace._stage
  taped.setattr(trace, "_stage", lambda *a: staged.append(1) or stage(*a))
  got = [f(w, data, *more) for w in ws]
  assert kept.stats()["kept_taped"] == 4 and not staged
  for (v, g), (v0, g0) in zip(got, want):
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-10)


@pytest.mark.parametrize(
  "transform", ["grad", "value_and_grad", "grad_aux", "argnums", "elementwise_grad"]
)
@pytest.mark.parametrize("change", ["in_place", "rebind", "none"])
def test_calls_on_values_follow_the_data_as_kept_programs_do(taped, transform, change):
  """A global array changed between calls, read by name: every call's result is that of
  the transform without keeping."""
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)
  global _DATA
  _DATA = np.array([0.5, -1.0, 2.0])
  loss = lambda w, s=1.0: pnp.sum(pnp.tanh(w * _DATA) ** 2) * s
  run = {
    "grad": lambda w: primc.grad(loss)(w),
    "value_and_grad": lambda w: primc.value_and_grad(loss)(w),
    "grad_aux": lambda w: primc.grad(lambda v: (loss(v), {"d": v * 2.0}), has_aux=True)(w),
    "argnums": lambda w: primc.grad(loss, argnums=(0, 1))(w, 1.5),
    "elementwise_grad": lambda w: primc.elementwise_grad(loss)(w),  # (vjp on values)
  }[transform]
  w = np.array([0.3, 0.2, -0.4])
  for step in range(5):
    if change == "in_place":
      _DATA[...] = step - 1.0
    elif change == "rebind":
      _DATA = np.full(3, step * 0.5)
    got = run(w)
    kept_on = primc.config.keep_transforms
    primc.config.keep_transforms = False
    try:
      want = run(w)
    finally:
      primc.config.keep_transforms = kept_on
    for g, x in zip(primc.tree_util.tree_leaves(got), primc.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(g, x, rtol=1e-12)
    want_grad = 2 * np.tanh(w * _DATA) * (1 - np.tanh(w * _DATA) ** 2) * _DATA
    first = primc.tree_util.tree_leaves(got)[1 if transform == "value_and_grad" else 0]
    np.testing.assert_allclose(
      first, want_grad * (1.5 if transform == "argnums" else 1.0), rtol=1e-10
    )
  assert kept.stats()["kept_taped"] == 5


def test_state_changed_unseen_before_the_second_call_on_values_is_seen(taped, caplog):
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)
  f = lambda w: pnp.sum(w * float(os.environ["PRIMC_TEST_SCALE"]))
  for scale in (2.0, 3.0, 5.0):
    taped.setenv("PRIMC_TEST_SCALE", str(scale))
    np.testing.assert_array_equal(primc.grad(f)(np.ones(3)), [scale] * 3)
  assert "changed between two calls" in caplog.text


def test_a_long_function_runs_on_values_first_by_default():
  """Without any setting: a 60-step chain's first call runs on values, a 2-step one's
  makes its program."""
  kept.reset()
  rng = np.random.default_rng(1)
  long_data = rng.standard_normal((60, 4, 4)) * 0.3
  w = rng.standard_normal(4)
  v, g = primc.value_and_grad(_loss)(w, long_data)
  assert kept.stats().get("kept_taped") == 1
  program = primc.make_program(_loss)(w, long_data)
  (v0,), (g0, _) = _by_program(program, [w, long_data], [True, True], [np.ones(())])
  np.testing.assert_allclose(v, v0, rtol=1e-12)
  np.testing.assert_allclose(g, g0, rtol=1e-9)
  kept.reset()
  primc.value_and_grad(_loss)(w, long_data[:2])
  assert "kept_taped" not in kept.stats()
  kept.reset()


# ---------------------------------------------------------------------------------------
# Functions whose Python reads values: a long path's first calls on values, then made


def _grows(w, limit):
  x, n = w, 0
  while pnp.sum(x * x) < limit and n < 30:  # Python reads a value: one path per count
    x = x * 1.3 + pnp.sin(x)
    n += 1
  return pnp.sum(pnp.tanh(x) ** 2) + 0.1 * n


def _by_programs(thunk, monkeypatch):
  """The call without keeping, its derivative by `ad.vjp_program` (not the tape)."""
  with monkeypatch.context() as m:
    m.setattr(tape, "vjp", tape.by_program)
    m.setattr(primc.config, "keep_transforms", False)
    return thunk()


@pytest.mark.parametrize("made_after", ["never", "at_once"])
def test_paths_run_on_values_then_made_agree_with_the_vjp_program(taped, made_after):
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0 if made_after == "never" else 0.0)
  rng = np.random.default_rng(3)
  starts = [rng.uniform(0.2, 1.5, 4) * scale for scale in (0.1, 0.3, 1.0, 2.0)]  # 4 paths
  f = primc.value_and_grad(_grows)
  for w in starts + starts[::-1] + starts:  # new paths, then each path again
    (v, g), (v0, g0) = f(w, 40.0), _by_programs(lambda: f(w, 40.0), taped)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-10)
  s = kept.stats()
  assert s["kept_taped"] >= 4, s
  if made_after == "at_once":  # each path made at its second call, checked once
    assert s["kept_taped"] == 4 and s["kept_checked"] == 4 and s["kept_hits"] == 11, s


def test_a_long_first_call_reads_arrays_by_name_as_numpy_does(monkeypatch):
  """A long function's first call traces the arrays it reads by name as they are (their
  numpy work stays numpy's: one equation a step here, not four), runs on values, and
  agrees with the program; its later calls, with the arrays changed, follow them."""
  kept.reset()
  rng = np.random.default_rng(2)
  xs, u = rng.standard_normal((120, 4)), rng.standard_normal((4, 4)) * 0.5

  def loss(w):
    h = np.zeros(4)
    for t in range(xs.shape[0]):
      h = pnp.tanh(h @ w + xs[t] @ u)
    return pnp.sum(h * h)

  staged = []
  real = kept._on_values
  monkeypatch.setattr(kept, "_on_values", lambda *a: staged.append(len(a[1].eqns)) or real(*a))
  w = rng.standard_normal((4, 4)) * 0.5
  for step in range(4):
    got = primc.value_and_grad(loss)(w)
    want = _by_programs(lambda: primc.value_and_grad(loss)(w), monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10)
    xs[...] = rng.standard_normal(xs.shape)  # (read by name: a kept program's input)
  assert kept.stats()["kept_taped"] == 4
  assert staged[0] <= 4 * 120 < staged[1], staged  # first: xs[t] @ u computed by numpy
  kept.reset()


_READ = np.array([0.5, -1.0, 2.0])


def _reads(w):
  s = pnp.sum(w * _READ)
  if _READ.sum() > 0:  # Python reads the named array's value (numpy's own, at a first call)
    s = s * 2.0
  if pnp.sum(w) > 0:  # and a traced value (a path)
    s = s + pnp.sum(w**2)
  return s


def test_a_first_call_on_values_then_paths_follow_the_named_array(taped):
  """A long function reading both an array it names and a traced value: its first call
  on values (the array as it is), its later ones by paths, the array changed between
  calls; every call's result is the transform's without keeping."""
  for step in range(5):
    _READ[...] = [0.5, -1.0, 2.0] if step % 2 == 0 else [-3.0, 1.0, 0.5]
    w = np.array([0.3, -0.2, 0.4]) * (1 if step < 3 else -1)
    got = primc.grad(_reads)(w)
    primc.config.keep_transforms = False
    try:
      want = primc.grad(_reads)(w)
    finally:
      primc.config.keep_transforms = True
    np.testing.assert_allclose(got, want, rtol=1e-12)
  assert kept.stats()["kept_taped"] >= 1


# ---------------------------------------------------------------------------------------
# A path's first calls: the forward sweep recorded while the path is traced with values


def _sweeps_and_traces(monkeypatch):
  """Counts of fresh forward sweeps (`tape._forward`), recordings taken, and traces of
  the function alone with values (`kept._traced_alone`)."""
  counts = {"sweeps": 0, "taken": 0, "traces": 0}

  def counted(name, real, test=lambda result: True):
    def wrapper(*a, **k):
      result = real(*a, **k)
      counts[name] += bool(test(result))
      return result

    return wrapper

  monkeypatch.setattr(tape, "_forward", counted("sweeps", tape._forward))
  real_taken = tape.Recording.taken
  monkeypatch.setattr(
    tape.Recording, "taken", lambda self, *a: counted("taken", real_taken, bool)(self, *a)
  )
  monkeypatch.setattr(kept, "_traced_alone", counted("traces", kept._traced_alone))
  return counts


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "grad argnums=(0, 1)"])
def test_a_paths_first_calls_compute_the_function_once(taped, transform):
  """A long function whose Python reads values: its first call traces it with values,
  its second traces it again (the check of its path): each of those traces computes the
  forward sweep the tape runs back (no second forward computation, as autograd's one),
  and each call's result is the transform's without keeping (`ad.vjp_program`)."""
  taped.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)  # (on values at every call)
  counts = _sweeps_and_traces(taped)
  name, _, argnums = transform.partition(" argnums=")
  kw = {"argnums": (0, 1)} if argnums else {}
  f = getattr(primc, name)(_grows, **kw)
  rng = np.random.default_rng(5)
  w = rng.uniform(0.2, 0.6, 4)
  for call in range(3):
    got = f(w, 40.0)  # (a Python float: a value of the key, or differentiated by argnums)
    want = _by_programs(lambda: f(w, 40.0), taped)
    for g, v in zip(tree_flatten(got)[0], tree_flatten(want)[0], strict=True):
      np.testing.assert_allclose(g, v, rtol=1e-10)
    assert counts["sweeps"] == max(0, call - 1) and counts["taken"] == min(call + 1, 2), counts
  assert kept.stats()["kept_checked"] == 1


def _reading(ops, table):
  """`_composition(ops)` with Python reading values on the way: a branch on a value and a
  numpy array indexed by a traced position (neither differentiable)."""
  inner = _composition(ops)

  def f(x, y):
    out = inner(x, y)
    i = int(pnp.argmax(pnp.abs(x[0])))
    out = out + table[i] * pnp.sum(y)
    return out * 1.5 if out > 0 else out - pnp.sum(x * x)

  return f


@settings(max_examples=25, deadline=None)
@given(ops=OPS, seed=st.integers(0, 2**16), both=st.booleans())
def test_recorded_sweeps_agree_with_the_vjp_program(ops, seed, both):
  """Random compositions that read values, under `value_and_grad` on values: the first
  three calls (recorded while traced, recorded while checked, a fresh sweep) give the
  results of `ad.vjp_program`'s program, for either argument set."""
  kept.reset()
  try:
    with pytest.MonkeyPatch.context() as m:
      m.setattr(kept, "TAPE_MIN_SECONDS", 0.0)
      m.setattr(kept, "TAPE_SECONDS_PER_EQN", 1.0)
      counts = _sweeps_and_traces(m)
      rng = np.random.default_rng(seed)
      table = rng.standard_normal(4)
      f = primc.value_and_grad(_reading(ops, table), argnums=(0, 1) if both else 0)
      x, y = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((3, 4)) * 0.5
      for _ in range(3):
        got = f(x, y)
        want = _by_programs(lambda: f(x, y), m)
        _same(tree_flatten(got)[0], tree_flatten(want)[0], rtol=1e-9)
      assert counts["taken"] == 2 and counts["sweeps"] == 1, counts
  finally:
    kept.reset()


# ---------------------------------------------------------------------------------------
# Control flow run again and again on values: its programs as runners


def _softclip(x):
  return pnp.tanh(x) * 2.0


_softclip = primc.custom_jvp(_softclip)
_softclip.defjvp(lambda p, t: (_softclip(p[0]), 2.0 * (1 - pnp.tanh(p[0]) ** 2) * t[0]))


def _scaled(x):
  return x * 3.0


_scaled = primc.custom_vjp(_scaled)
_scaled.defvjp(lambda x: (x * 3.0, None), lambda res, g: (g * 3.0,))

CONTROL = {
  "while": lambda x, k: primc.lax.while_loop(lambda v: pnp.sum(v * v) < 40.0, lambda v: v * 1.3, x),
  "fori traced bounds": lambda x, k: primc.lax.fori_loop(0, k, lambda i, v: v + pnp.sin(v) * i, x),
  "scan": lambda x, k: primc.lax.scan(lambda c, r: (c * r, c + r), x[0], x),
  "scan reversed": lambda x, k: primc.lax.scan(
    lambda c, r: (c + r, c * 2.0), x[0], x, reverse=True
  ),
  "switch": lambda x, k: primc.lax.switch(k, [lambda v: v - 1.0, pnp.exp, pnp.cos], x),
  "cond in scan in while": lambda x, k: primc.lax.while_loop(
    lambda v: v[0, 0] < 5.0,
    lambda v: (
      primc.lax.scan(
        lambda c, r: (primc.lax.cond(pnp.sum(r) > 0, lambda a: a + r, lambda a: a - r, c), c),
        v[0] + 1.0,
        v,
      )[1]
      + 1.0
    ),
    x,
  ),
  "custom_jvp": lambda x, k: _softclip(x) + k,
  "custom_vjp": lambda x, k: _scaled(x) * k,
}


@pytest.mark.parametrize("name", list(CONTROL))
def test_eager_control_flow_runs_by_runners_as_the_interpreter(name, monkeypatch):
  """Called on values outside any trace, a loop, a branch or a custom function runs by
  runners of its programs (`runners.bind_control`: no equation holding programs is bound),
  with the values bind gives (the interpreter's path) bit for bit; an index out of range
  is the interpreter's error, naming the op and the line."""
  from primc import core

  rng = np.random.default_rng(3)
  cases = [(rng.uniform(0.5, 1.5, (3, 2)), np.int64(k)) for k in (0, 1, 2)]
  bound = []
  binder = core.binder[0]

  def counting(prim, args, params):
    if prim in core.program_runner_rules and not primc.trace.tracing():  # (run, not staged)
      bound.append(prim.name)
    return binder(prim, args, params)

  monkeypatch.setattr(core, "binder", [counting])
  got = [CONTROL[name](*case) for case in cases]
  assert bound == []
  with monkeypatch.context() as m:  # bound: the interpreter's path
    for module in (primc.lax, primc.custom):
      m.setattr(module, "bind_control", lambda prim, *a, **k: prim.bind(*a, **k))
    want = [CONTROL[name](*case) for case in cases]
  # (a known index chooses its branch in Python; a custom function on plain values runs
  # as it is: no rule applies, nothing is bound)
  assert bound or name in ("switch", "custom_jvp", "custom_vjp")
  for g, w in zip(got, want, strict=True):
    for a, b in zip(tree_flatten(g)[0], tree_flatten(w)[0], strict=True):
      assert np.asarray(a).dtype == np.asarray(b).dtype
      np.testing.assert_array_equal(a, b)
  x = cases[0][0]
  with pytest.raises(primc.PrimcIndexError, match=r"gather on .*out of bounds.*test_tape.py:\d+"):
    primc.lax.fori_loop(0, np.int64(2), lambda i, v: v + v[i + 5], x)


@pytest.mark.parametrize("generated", [False, True])
@pytest.mark.parametrize("name", list(CONTROL))
def test_control_flow_runners_agree_with_the_interpreter(name, generated, monkeypatch):
  """A program with loops, branches and custom rules, run by `runners.runner` (its programs'
  runners made once: `program_runner_rules`), gives the interpreter's values bit for bit,
  for several inputs of one runner; an index out of range is the interpreter's error."""
  if generated:
    monkeypatch.setattr(runners, "GENERATE_AFTER", 0)
  rng = np.random.default_rng(7)
  x = rng.uniform(0.5, 1.5, (3, 2))
  program = primc.make_program(CONTROL[name])(x, np.int64(2))
  run = runners.runner(program)
  for k in (0, 1, 2, 2):
    xs = [rng.uniform(0.5, 1.5, (3, 2)), np.asarray(np.int64(k))]
    for got, want in zip(run(xs), eval_program(program, *xs), strict=True):
      assert np.asarray(got).dtype == np.asarray(want).dtype
      np.testing.assert_array_equal(got, want)
  if name == "switch":
    with pytest.raises(primc.PrimcIndexError, match="out of range for 3 branches"):
      run([x, np.asarray(np.int64(3))])


@pytest.mark.parametrize("sweep", ["runner", "generated runner", "tape"])
def test_a_long_program_holds_only_its_live_values(sweep):
  # a chain of 300 steps on a 0.8 MB array: a run drops each value after its last read
  # (a 100-step fluid simulation's gradient held ~10^5 such arrays, 10 GB, and more)
  import tracemalloc

  n = 100_000
  steps = 20 if sweep == "generated runner" else 300  # (at most GENERATED_STEPS)

  def chain(y):
    for _ in range(steps):
      y = y * 0.5 + 1.0
    return pnp.sum(y)

  x = np.linspace(0.0, 1.0, n)
  program = primc.make_program(chain)(x)
  if sweep == "tape":
    run = lambda: tape.vjp(program, [x], [True], [1.0])
  else:
    fast = runners.runner(program)
    for _ in range(runners.GENERATE_AFTER + 1 if sweep == "generated runner" else 0):
      fast([x])  # (then generated: one function, its locals dropped by `del`)
    run = lambda: fast([x])
    assert len(program.eqns) <= runners.GENERATED_STEPS or sweep == "runner"
  want = run()
  tracemalloc.start()
  try:
    got = run()
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  np.testing.assert_allclose(got[0], want[0])
  assert peak < 12 * 8 * n, f"{peak / 1e6:.1f} MB at the peak"
