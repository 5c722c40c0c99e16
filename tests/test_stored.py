"""Kept transform programs on disk (`primc.stored`): a new process's first call loads the
program an earlier one made, bit for bit the same results, and nothing that is not plain
data, nothing of another key or environment, nothing corrupt is ever used. Oracles: the
program made in this process (printed alike, the same values), numpy, and the counters
of what was differentiated."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import ad, kept, stored
from primc.settings import config
from test_ad_random import BINARY, UNARY


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
  """A cache directory of this test's own, storing on (whatever the suite's setting)."""
  monkeypatch.setenv("PRIMC_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setattr(config, "store_transforms", True)
  stored.reset()
  kept.reset()
  yield tmp_path / "cache"
  stored.reset()
  kept.reset()


def _new_process():
  """What a new process knows: nothing kept in memory (the disk stays)."""
  kept.reset()


def _linearized(monkeypatch) -> list:
  """A list that grows at each program linearized from now on."""
  calls = []
  linearize = ad.linearize_program

  def counting(*args, **kwargs):
    calls.append(1)
    return linearize(*args, **kwargs)

  monkeypatch.setattr(ad, "linearize_program", counting)
  return calls


def _loss(w, x):
  return pnp.sum(pnp.tanh(x @ w + 1.0) ** 2)


def _entries(directory) -> list:
  if not os.path.isdir(directory):
    return []
  return sorted(p for p in os.listdir(directory) if p.startswith("t_") and p.endswith(".prog"))


def test_a_new_process_loads_the_program_and_differentiates_nothing(cache_dir, monkeypatch):
  w, x = np.linspace(-1, 1, 3), np.linspace(0, 2, 12).reshape(4, 3)
  first = primc.grad(_loss)(w, x)
  assert stored.stats()["stored"] == 1 and len(_entries(cache_dir)) == 1
  _new_process()
  calls = _linearized(monkeypatch)
  again = primc.grad(_loss)(w, x)
  assert calls == [] and stored.stats()["loaded"] == 1
  np.testing.assert_array_equal(again, first)
  want = 2 * np.tanh(x @ w + 1) * (1 - np.tanh(x @ w + 1) ** 2) @ x
  np.testing.assert_allclose(again, want, rtol=1e-12)
  for _ in range(2):  # (its next calls: the loaded program, kept; compiled once hot, where
    # its interpreted calls have cost a compile's estimate on a slow machine: native math
    # agrees with numpy's to an ulp, not bit for bit)
    np.testing.assert_allclose(primc.grad(_loss)(w, x), first, rtol=1e-14, atol=1e-15)
  assert calls == [] and stored.stats() == {"stored": 1, "loaded": 1, "bad": 0, "unmapped": 0}


FAMILY = st.tuples(
  st.sampled_from(range(len(UNARY))),
  st.sampled_from(range(len(BINARY))),
  st.sampled_from(["grad", "egrad", "value_and_grad", "hessian", "jacfwd"]),
)


def _program(case):
  u, b, how = case
  f = lambda x, y: pnp.sum(BINARY[b](UNARY[u](x), y) * 0.5)
  return {
    "grad": lambda: primc.grad(f, argnums=(0, 1)),
    "egrad": lambda: primc.elementwise_grad(lambda x, y: BINARY[b](UNARY[u](x), y)),
    "value_and_grad": lambda: primc.value_and_grad(f),
    "hessian": lambda: primc.hessian(f),
    "jacfwd": lambda: primc.jacfwd(lambda x, y: UNARY[u](x) * y),
  }[how]()


@settings(max_examples=25, deadline=None)
@given(FAMILY)
def test_loaded_programs_are_the_programs_made(case):
  """Every transform of the family, made in one "process" and loaded in the next: the
  same printed program, the same values bit for bit."""
  stored.reset()
  kept.reset()
  rng = np.random.default_rng(len(repr(case)))
  x, y = rng.uniform(0.2, 1.5, 5), rng.uniform(0.2, 1.5, 5)
  run = lambda: _program(case)(x, y)
  made = run()
  programs = [str(e.program) for e in kept._kept.values() if type(e) is kept._Entry]
  _new_process()
  loaded = run()
  if stored.stats()["stored"]:
    assert stored.stats()["loaded"] == stored.stats()["stored"]
    assert [str(e.program) for e in kept._kept.values() if type(e) is kept._Entry] == programs
  for a, b in zip(primc.tree_util.tree_leaves(made), primc.tree_util.tree_leaves(loaded)):
    np.testing.assert_array_equal(a, b)


def test_a_new_process_reads_what_an_old_one_wrote(cache_dir):
  """Two real processes: the second loads (its counters say so) and prints the same."""
  script = (
    "import numpy as np, primc, primc.numpy as pnp\n"
    "from primc import stored\n"
    "f = lambda w: pnp.sum(pnp.sin(w) * pnp.exp(0.5 * w))\n"
    "print(repr(primc.grad(primc.grad(lambda w: f(w) * f(w)))(np.float64(0.7))), "
    "stored.stats())\n"
  )
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache_dir), PRIMC_STORE_TRANSFORMS="1")
  run = lambda: subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
  ).stdout.split(" {")
  (value1, stats1), (value2, stats2) = run(), run()
  assert value1 == value2
  assert "'stored': 0" not in stats1 and "'loaded': 0" in stats1
  assert "'loaded': 0" not in stats2 and "'stored': 0" in stats2


@primc.custom_vjp
def _cube(x):
  return x * x * x


_cube.defvjp(lambda x: (_cube(x), x), lambda x, g: (2.0 * x * g,))  # (deliberately 2x: the
# rule, not the function, is what a derivative of any order differentiates)


def _scaled_clip(scale):
  """A custom_vjp whose bwd closes over `scale`: a rule that changes with a value."""

  @primc.custom_vjp
  def clip(x):
    return x

  clip.defvjp(lambda x: (x, ()), lambda res, g: (pnp.clip(g * scale, -0.5, 0.5),))
  return clip


def _autograd_style():
  from primc.extend import defvjp, primitive

  @primitive
  def logsumexp(x):
    m = pnp.max(x)
    return m + pnp.log(pnp.sum(pnp.exp(x - m)))

  defvjp(logsumexp, lambda ans, x: lambda g: pnp.full(x.shape, g) * pnp.exp(x - ans))
  return lambda x: logsumexp(x**2)


def _ruled(name):
  """Functions whose derivatives go through custom rules, with their derivative."""
  from primc.fixed_points import fixed_point
  from primc.scipy import stats

  clip = _scaled_clip(2.0)
  lse = _autograd_style()
  return {
    "custom_vjp": (lambda x: pnp.sum(_cube(x) + clip(x) * 3.0), lambda x: 2 * x + 0.5),
    "custom_jvp": (lambda x: pnp.sum(stats.poisson.logpmf(3.0, x)), lambda x: 3.0 / x - 1.0),
    "extend": (
      lambda x: lse(x),
      lambda x: 2 * x * np.exp(x**2 - np.max(x**2)) / np.sum(np.exp(x**2 - np.max(x**2))),
    ),
    "fixed_point": (
      lambda x: pnp.sum(
        fixed_point(
          lambda a: lambda z: z - 0.05 * (z * z - a),
          x,
          1.0,
          lambda u, v: pnp.max(pnp.abs(u - v)),
          1e-10,
        )
      ),
      lambda x: 0.5 / np.sqrt(x),
    ),
  }[name]


@pytest.mark.parametrize("name", ["custom_vjp", "custom_jvp", "extend", "fixed_point"])
def test_programs_through_custom_rules_are_stored_by_what_the_rules_run(
  cache_dir, name, monkeypatch
):
  """A gradient through a custom rule (custom_vjp, custom_jvp, autograd's `primitive`, a
  fixed point's loop) is stored with its functions' programs in the rules' place, keyed
  by the rules' code and what they close over: a new process loads it, differentiates
  nothing, and gives the same values, bit for bit, which are the rules'."""
  f, want = _ruled(name)
  x = np.array([0.6, 1.1, 1.7])
  made = primc.grad(f)(x)
  np.testing.assert_allclose(made, want(x), rtol=1e-7)
  assert stored.stats()["stored"] == 1, stored.stats()
  _new_process()
  calls = _linearized(monkeypatch)
  f, _ = _ruled(name)  # (the functions made again, as a new process makes them)
  loaded = primc.grad(f)(x)
  assert calls == [] and stored.stats()["loaded"] == 1, stored.stats()
  np.testing.assert_array_equal(loaded, made)


def test_a_rule_changed_is_another_key(cache_dir):
  """The rule's code, the values its functions close over and the globals they read are
  its key: a rule closing over another value is made (not the first one's loaded)."""
  x = np.array([0.1, 0.2, -0.3])
  for scale in (2.0, 1.0, 2.0):
    _new_process()
    clip = _scaled_clip(scale)
    g = primc.grad(lambda x: pnp.sum(clip(x) * 0.2))(x)
    np.testing.assert_allclose(g, np.full(3, 0.2 * scale), rtol=1e-12)  # (bwd: g * scale)
  assert stored.stats() == {"stored": 2, "loaded": 1, "bad": 0, "unmapped": 0}
  global _GLOBAL_SCALE
  for scale in (3.0, 0.5, 3.0):  # (a global the rule reads: its value is the key's)
    _new_process()
    _GLOBAL_SCALE = scale
    g = primc.grad(lambda x: pnp.sum(_global_clip(x) * 0.1))(x)
    np.testing.assert_allclose(g, np.full(3, 0.1 * scale), rtol=1e-12)
  assert stored.stats() == {"stored": 4, "loaded": 2, "bad": 0, "unmapped": 0}


_GLOBAL_SCALE = 1.0


@primc.custom_vjp
def _global_clip(x):
  return x


_global_clip.defvjp(lambda x: (x, ()), lambda res, g: (g * _GLOBAL_SCALE,))


def test_a_users_module_edited_is_another_key(cache_dir, tmp_path, monkeypatch):
  """A rule may reach the user's code by a module's attribute (`helpers.scale()`), which
  no walk of its functions sees: the user's modules' contents are in its key, so an edit
  is made again, not the old program loaded."""
  import importlib

  (tmp_path / "rule_helpers.py").write_text("def scale():\n  return 2.0\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  helpers = importlib.import_module("rule_helpers")

  @primc.custom_vjp
  def f(x):
    return x

  f.defvjp(lambda x: (x, ()), lambda res, g: (g * helpers.scale(),))
  x = np.ones(2)
  np.testing.assert_array_equal(primc.grad(lambda x: pnp.sum(f(x)))(x), [2.0, 2.0])
  (tmp_path / "rule_helpers.py").write_text("def scale():\n  return 5.0  # edited\n")
  importlib.reload(helpers)
  _new_process()
  np.testing.assert_array_equal(primc.grad(lambda x: pnp.sum(f(x)))(x), [5.0, 5.0])
  assert stored.stats()["loaded"] == 0 and stored.stats()["stored"] == 2, stored.stats()
  monkeypatch.delitem(sys.modules, "rule_helpers")


def test_the_users_modules_are_not_primcs_kernels(cache_dir, monkeypatch):
  """The user's modules in a rule's key are the user's: primc's generated kernel modules
  (files in its cache, loaded as a process compiles) are not among them, so a process
  that compiled more finds the same key."""
  from primc.codegen import loader

  monkeypatch.setenv("PRIMC_CACHE_DIR", str(cache_dir))
  before = kept._user_sources()
  module = loader.executed(loader.load("def kernel_of_this_test(x):\n  return x\n"))
  assert module.__file__.startswith(str(cache_dir)) and module.__name__ in sys.modules
  assert kept._user_sources() == before


_LEAVES = st.one_of(
  st.integers(-5, 5),
  st.floats(-2, 2, allow_nan=False),
  st.text("ab", max_size=2),
  st.booleans(),
  st.none(),
  st.lists(st.floats(-1, 1, allow_nan=False), max_size=3).map(np.array),
)
_STATES = st.recursive(
  _LEAVES,
  lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.text("xyz", max_size=2), inner, max_size=3),
    st.frozensets(st.text("abc", max_size=2), max_size=3),
  ),
  max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(_STATES)
def test_a_rules_digest_is_a_function_of_its_values(state):
  """The digest of what a rule closes over: equal for an equal state built apart (another
  process builds its own), different where a value differs, and a state holding itself
  is walked once."""
  import copy

  digest = lambda x: kept._Stable()(x)
  assert digest(state) == digest(copy.deepcopy(state))
  assert digest([state, 1]) != digest([state, 2])
  assert digest((state, np.array([1.0]))) != digest((state, np.array([1.5])))
  loop = [state]
  loop.append(loop)
  assert digest(loop) == digest(copy.deepcopy(loop))
  with pytest.raises(stored.NotPlain):
    digest([state, _Scale(1.0)])  # (an object of the user's class)


def test_a_rules_key_asks_no_modules_lazy_attributes(cache_dir, monkeypatch):
  """A module's `__getattr__` (scipy's lazy submodules, a stand-in that imports what it
  stands for) is never asked while a rule's key is made: the user's modules are read from
  their own namespaces (asking one stand-in's loaded a whole package, ~20 ms a call)."""
  import types

  asked = []

  def lazily(name):
    asked.append(name)
    raise AttributeError(name)

  lazy = types.ModuleType("lazy_standin")
  lazy.__getattr__ = lazily
  monkeypatch.setitem(sys.modules, "lazy_standin", lazy)
  clip = _scaled_clip(2.0)
  primc.grad(lambda x: pnp.sum(clip(x) * lazy.__name__.count("z")))(np.ones(2))
  del lazy.__getattr__
  assert stored.stats()["stored"] == 1 and asked == [], asked


def test_a_rule_drawing_random_numbers_is_not_stored(cache_dir):
  """A bwd that draws random numbers runs while the program is made, after its key: the
  program holds this process's numbers, so it is not stored (nor kept: each call draws)."""

  @primc.custom_vjp
  def f(x):
    return x

  f.defvjp(lambda x: (x, ()), lambda res, g: (g * np.random.standard_normal(2),))
  np.random.seed(3)
  got = [primc.grad(lambda x: pnp.sum(f(x)))(np.ones(2)) for _ in range(2)]
  np.random.seed(3)
  want = [np.random.standard_normal(2) for _ in range(2)]
  np.testing.assert_array_equal(got, want)
  assert stored.stats()["stored"] == 0 and _entries(cache_dir) == []


class _Scale:
  def __init__(self, k):
    self.k = k


def test_a_rule_reaching_a_users_object_is_not_stored(cache_dir):
  """An object of the user's class may change unseen in another process: not stored."""
  scale = _Scale(3.0)

  @primc.custom_vjp
  def f(x):
    return x

  f.defvjp(lambda x: (x, ()), lambda res, g: (g * scale.k,))
  g = primc.grad(lambda x: pnp.sum(f(x)))(np.ones(2))
  np.testing.assert_array_equal(g, np.full(2, 3.0))
  assert stored.stats()["stored"] == 0 and _entries(cache_dir) == []


def test_a_loaded_program_through_a_rule_is_not_differentiated_again(cache_dir):
  """A loaded program holds the function's program in the rule's place: a derivative of
  its value differentiates the rule (2x), never that program (x^3 -> 3x^2)."""
  x = np.array([0.5, 1.5])
  g = lambda x: pnp.sum(_cube(x))
  primc.value_and_grad(g)(x)
  _new_process()
  value, grad = primc.value_and_grad(g)(x)
  np.testing.assert_array_equal(grad, 2 * x)
  assert stored.stats()["loaded"] == 1
  outer = primc.grad(lambda x: primc.value_and_grad(g)(x)[0])(x)
  np.testing.assert_allclose(outer, 2 * x, rtol=1e-12)


def test_two_processes_agree_on_the_keys_of_rules(cache_dir):
  """Real processes, with Python's string hashing seeded apart: the rules' digests are
  alike (the second process loads every program the first stored)."""
  script = (
    "import numpy as np, primc, primc.numpy as pnp\n"
    "from primc import stored\n"
    "from primc.extend import primitive, defvjp\n"
    "from primc.scipy import stats\n"
    "@primitive\n"
    "def sq(x, opts):\n"
    "  return x * x * opts['k']\n"
    "defvjp(sq, lambda ans, x, opts: lambda g: g * 2 * x * opts['k'])\n"
    "opts = {'k': 1.5, 'names': frozenset('abc')}\n"
    "f = lambda w: pnp.sum(sq(w, opts)) + pnp.sum(stats.gamma.logpdf(w, 2.0))\n"
    "print(repr(primc.grad(f)(np.array([0.5, 2.0]))), stored.stats())\n"
  )
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache_dir), PRIMC_STORE_TRANSFORMS="1")
  run = lambda seed: subprocess.run(
    [sys.executable, "-c", script],
    env={**env, "PYTHONHASHSEED": seed},
    capture_output=True,
    text=True,
    check=True,
  ).stdout.split(" {")
  (value1, stats1), (value2, stats2) = run("1"), run("2")
  assert value1 == value2
  assert "'stored': 1" in stats1 and "'loaded': 1" in stats2 and "'stored': 0" in stats2


@pytest.mark.parametrize(
  "damage",
  ["flip a payload byte", "truncate", "another key's entry", "another environment", "empty"],
)
def test_a_bad_entry_is_refused_logged_once_and_made_again(cache_dir, damage, caplog):
  w, x = np.linspace(-1, 1, 3), np.linspace(0, 2, 12).reshape(4, 3)
  want = primc.grad(_loss)(w, x)
  primc.grad(lambda w, x: pnp.sum(pnp.sin(x @ w)))(w, x)  # (a second entry)
  names = _entries(cache_dir)
  originals = {name: (cache_dir / name).read_bytes() for name in names}
  for k, name in enumerate(names):  # (each entry damaged alike: whichever a call reads)
    data = originals[name]
    if damage == "flip a payload byte":
      data = data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]
    elif damage == "truncate":
      data = data[: len(data) // 2]
    elif damage == "another key's entry":
      data = originals[names[1 - k]]
    elif damage == "another environment":
      data = data.replace(b"primc=", b"primc=9", 1)
    else:
      data = b""
    (cache_dir / name).write_bytes(data)
  _new_process()
  with caplog.at_level(logging.WARNING, logger="primc"):
    got = primc.grad(_loss)(w, x)
    _new_process()
    primc.grad(_loss)(w, x)
  np.testing.assert_array_equal(got, want)
  assert stored.stats()["bad"] == 1 and stored.stats()["loaded"] == 1  # (made again, kept)
  assert sum("bad stored program" in r.getMessage() for r in caplog.records) == 1


def test_another_environment_is_another_key(cache_dir, monkeypatch):
  w, x = np.linspace(-1, 1, 3), np.ones((4, 3))
  primc.grad(_loss)(w, x)
  monkeypatch.setattr(stored, "environment", lambda: "primc=edited")
  _new_process()
  primc.grad(_loss)(w, x)
  assert stored.stats() == {"stored": 2, "loaded": 0, "bad": 0, "unmapped": 0}


def _lines_of(program) -> set:
  return {int(e.source.rsplit(":", 1)[1]) for e in program.eqns if e.source}


def test_the_same_trace_elsewhere_loads_and_names_its_own_lines(cache_dir):
  """Source lines are not in the key (a script copied elsewhere finds its programs); a
  loaded program names the lines of this call's function and call site, never those of
  the function it was made for."""
  w, x = np.linspace(-1, 1, 3), np.ones((4, 3))
  f = lambda w, x: pnp.sum(pnp.tanh(x @ w + 1.0) ** 2)
  g = lambda w, x: pnp.sum(pnp.tanh(x @ w + 1.0) ** 2)
  want = primc.grad(f)(w, x)
  _new_process()
  here = sys._getframe().f_lineno + 1
  np.testing.assert_array_equal(primc.grad(g)(w, x), want)
  assert stored.stats()["loaded"] == 1 and len(_entries(cache_dir)) == 1
  (entry,) = [e for e in kept._kept.values() if type(e) is kept._Entry]
  assert _lines_of(entry.program) == {g.__code__.co_firstlineno, here}


def _on_one_line(x):
  return pnp.sum(pnp.sin(x) * 2.0)


def _on_two_lines(x):
  y = pnp.sin(x)
  return pnp.sum(y * 2.0)


def test_a_trace_spread_over_other_lines_is_made_again(cache_dir):
  """One stored line standing for two lines now cannot name them apart: made again."""
  x = np.linspace(0, 1, 4)
  want = primc.grad(_on_one_line)(x)
  _new_process()
  np.testing.assert_array_equal(primc.grad(_on_two_lines)(x), want)
  assert stored.stats() == {"stored": 2, "loaded": 0, "bad": 0, "unmapped": 1}
  (entry,) = [e for e in kept._kept.values() if type(e) is kept._Entry]
  first = _on_two_lines.__code__.co_firstlineno
  assert {first + 1, first + 2} <= _lines_of(entry.program)


def test_storing_off_writes_nothing(cache_dir, monkeypatch):
  monkeypatch.setattr(config, "store_transforms", False)
  primc.grad(_loss)(np.ones(3), np.ones((4, 3)))
  assert _entries(cache_dir) == []


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_directory_others_may_write_is_refused(cache_dir, caplog):
  cache_dir.mkdir(parents=True)
  os.chmod(cache_dir, 0o777)
  with caplog.at_level(logging.WARNING, logger="primc"):
    g = primc.grad(_loss)(np.ones(3), np.ones((4, 3)))
  np.testing.assert_allclose(g, primc.grad(_loss)(np.ones(3), np.ones((4, 3))))
  assert _entries(cache_dir) == [] and "writable by group or others" in caplog.text


def test_plain_refuses_what_is_not_data():
  assert stored.plain((1, 2.5, "a", None, (True, b"x"))) == (1, 2.5, "a", None, (True, b"x"))
  for bad in ([1], (1, [2]), np.float64(1.0), {"a": 1}, (1, (2, object()))):
    with pytest.raises(stored.NotPlain):
      stored.plain(bad)


def test_stored_programs_are_entries_of_the_bounded_cache(cache_dir):
  """`primc cache` lists them and evicts them as it evicts plans (least recently used)."""
  from primc.codegen.store import Store

  primc.grad(_loss)(np.ones(3), np.ones((4, 3)))
  left = cache_dir / ".tmp-1-0.prog"  # (a write a killed process left)
  left.write_bytes(b"partial")
  os.utime(left, (1, 1))
  cache = Store(str(cache_dir))
  assert [e["kind"] for e in cache.entries()] == ["program", "program"]
  assert cache.check_all() == []
  size = os.path.getsize(cache_dir / _entries(cache_dir)[0])
  assert cache.prune(size) == (1, len(b"partial")) and not left.exists()  # (oldest first)
  assert cache.prune(0) == (1, size) and _entries(cache_dir) == []


def _branchy(x):
  if pnp.sum(x) > 0:  # Python reads a value: one kept program per path
    return pnp.sum(x**3)
  return pnp.sum(pnp.sin(x))


def test_a_path_of_python_control_flow_is_stored_with_its_guards(monkeypatch):
  """A function whose Python reads values: each path's program is stored with the guards
  it was traced with; a new process takes the stored path only where its values take it."""
  up, down = np.array([0.5, 1.0, 2.0]), np.array([-0.5, -1.0, 0.2])
  run = lambda x: primc.grad(_branchy)(x)  # (one call site)
  first = run(up)
  assert stored.stats()["stored"] == 1
  _new_process()
  calls = _linearized(monkeypatch)
  np.testing.assert_array_equal(run(up), first)
  assert calls == [] and stored.stats()["loaded"] == 1
  np.testing.assert_allclose(run(down), np.cos(down), rtol=1e-14)  # (the other path: made)
  np.testing.assert_allclose(run(up * 2), 3 * (up * 2) ** 2, rtol=1e-14)
  assert calls and stored.stats()["stored"] == 2


def test_a_function_run_on_the_tape_first_is_looked_for_when_made(cache_dir, monkeypatch):
  """A long function's first calls run on values (`primc.tape`), without its key (the
  trace written out); its program, made once those calls cost enough, is stored, and a
  new process loads it at that point instead of making it."""
  monkeypatch.setattr(kept, "TAPE_MIN_SECONDS", 0.0)  # (every function "long")
  monkeypatch.setattr(kept, "TAPE_SECONDS_PER_EQN", 1e-9)  # (made at its second call)
  keys = []
  real = stored.key
  monkeypatch.setattr(stored, "key", lambda parts: keys.append(1) or real(parts))
  w, x = np.linspace(-1, 1, 3), np.ones((4, 3))
  run = lambda: primc.grad(_loss)(w, x)
  np.testing.assert_allclose(run(), _unstored(w, x), rtol=1e-12)
  assert kept.stats()["kept_taped"] == 1 and keys == []  # (the first call: no key)
  for _ in range(2):
    np.testing.assert_allclose(run(), _unstored(w, x), rtol=1e-12)
  assert "calls on values cost enough: made" in kept.stats()["kept_miss_reasons"]
  assert stored.stats()["stored"] == 1
  _new_process()
  made, make = [], kept._make
  monkeypatch.setattr(kept, "_make", lambda *a, **k: made.append(1) or make(*a, **k))
  for _ in range(3):
    np.testing.assert_allclose(run(), _unstored(w, x), rtol=1e-12)
  assert made == [] and stored.stats()["loaded"] == 1


def _unstored(w, x):
  t = np.tanh(x @ w + 1.0)
  return (2 * t * (1 - t * t)) @ x
