"""Tiered execution: a new program runs on the interpreter while a background process
compiles it, then on native code; the worker fills the cache; a failed worker falls back
to compiling in process."""

import collections
import itertools
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import primc
import primc.compile as compile_module
import primc.numpy as pnp
from primc import kept
from primc.codegen import loader, store, tiered
from primc.codegen.executor import Executable


def step(w, x):
  t = pnp.tanh(x @ w)
  return primc.grad(lambda w: pnp.sum(pnp.tanh(x @ w) ** 2))(w), t.T, x, pnp.ones(3, "float32")


def expected(w, x):
  t = np.tanh(x.astype(np.float64) @ w)
  return x.T @ (2 * t * (1 - t * t)), t.T, x, np.ones(3)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
  path = tmp_path / "cache"
  path.mkdir(mode=0o700)
  monkeypatch.setenv("PRIMC_CACHE_DIR", str(path))
  return path


@pytest.fixture
def args(rng):
  return (
    rng.standard_normal((3, 2)).astype(np.float32),
    rng.standard_normal((4, 3)).astype(np.float32),
  )


def executables(fn):
  return [exe for exe, _ in fn._compiled.values()]


def stop_worker(exe):
  exe.job.kill()
  exe.job.wait()


def check(results, w, x):
  for r, e in zip(results, expected(w, x), strict=True):
    assert r.dtype == np.float32 and r.shape == e.shape
    np.testing.assert_allclose(r, e, rtol=1e-5, atol=1e-6)


def test_first_calls_interpret_then_native_code_runs(fresh_cache, args):
  primc.cache_stats()  # counters are per process: compare before and after
  before = dict(primc.cache_stats())
  fn = primc.jit(step, tiered=True)
  first = fn(*args)
  check(first, *args)
  [exe] = executables(fn)
  assert isinstance(exe, tiered.Tiered)
  after = primc.cache_stats()
  for counter in ("kernel_compiles", "kernel_cache_loads"):  # nothing native ran here yet
    assert after.get(counter, 0) == before.get(counter, 0)
  assert fn.wait_compiled(timeout=300)
  assert exe.job.returncode == 0 and isinstance(exe.native, Executable)
  kernels = exe.plan.kernels  # compiled by the worker; loaded here unless other programs
  new = sum(loader.compiled_kernel(loader.load(k)) is None for k in kernels)  # already did
  native = fn(*args)
  check(native, *args)
  final = primc.cache_stats()
  assert final.get("kernel_compiles", 0) == before.get("kernel_compiles", 0)  # the worker's
  # loaded here: each of the program's kernels (the counter is the process's: a kept
  # program of another test compiled in the background may load kernels too)
  assert final.get("kernel_cache_loads", 0) >= before.get("kernel_cache_loads", 0) + new
  assert all(loader.compiled_kernel(loader.load(k)) is not None for k in kernels)
  assert all(map(store.current().sealed, kernels))
  # a new function with the same program finds native code in the cache: no tier
  again = primc.jit(step, tiered=True)
  check(again(*args), *args)
  assert isinstance(executables(again)[0], Executable)


def test_interpreted_outputs_are_the_callers_own(fresh_cache, args):
  fn = primc.jit(step, tiered=True)
  w, x = args
  first = fn(w, x)
  assert isinstance(executables(fn)[0], tiered.Tiered) and executables(fn)[0].native is None
  g, tt, x_out, ones = first
  for r in first:
    assert r.flags.c_contiguous and r.flags.writeable and r.base is None
  assert x_out is not x and not np.shares_memory(x_out, x)
  ones[:] = 7  # the program's constant is not shared with the caller
  np.testing.assert_array_equal(fn(w, x)[3], np.ones(3))
  stop_worker(executables(fn)[0])  # only the first tier is tested here


def test_out_arrays_are_written_by_the_interpreted_tier(fresh_cache, args):
  fn = primc.jit(lambda w, x: (pnp.tanh(x @ w), pnp.sum(x * x)), tiered=True)
  w, x = args
  out = (np.empty((4, 2), np.float32), np.empty((), np.float32))
  results = fn(w, x, out=out)
  assert executables(fn)[0].native is None
  assert results[0] is out[0] and results[1] is out[1]
  np.testing.assert_allclose(out[0], np.tanh(x @ w), rtol=1e-6)
  np.testing.assert_allclose(out[1], np.sum(x * x), rtol=1e-6)
  with pytest.raises(primc.PrimcError, match="out= array"):
    fn(w, x, out=(np.empty((2, 4), np.float32), out[1]))
  stop_worker(executables(fn)[0])


def test_a_failed_worker_falls_back_to_compiling_in_process(fresh_cache, args, monkeypatch, caplog):
  start = tiered.start
  monkeypatch.setattr(tiered, "start", lambda key, plan: start("0" * 32, plan))  # no such plan
  fn = primc.jit(step, tiered=True)
  check(fn(*args), *args)
  exe = executables(fn)[0]
  exe.job.wait()
  with caplog.at_level(logging.WARNING, logger="primc.tiered"):
    check(fn(*args), *args)
  assert "failed (exit 2" in caplog.text
  with open(tiered.worker_log("0" * 32)) as f:
    assert "no cached plan" in f.read()
  assert isinstance(exe.native, Executable) and not exe.native._first


def test_tiering_follows_the_environment_variable(fresh_cache, args):
  code = "import primc; print(primc.config.tiered)"
  for value, want in (("1", "True"), ("0", "False"), ("", "None"), ("auto", "None")):
    env = dict(os.environ, PRIMC_TIERED=value)
    out = subprocess.run(
      [sys.executable, "-c", code], env=env, capture_output=True, text=True
    ).stdout.strip()
    assert out == want, (value, out)


# -- the default policy: the first call interpreted where cheaper, every later one native --


def test_calls_are_interpreted_while_they_cost_less_than_the_compile():
  x = np.ones((64, 8), np.float32)
  small = primc.make_program(lambda x: pnp.tanh(x @ x.T).sum())(x)
  calls = tiered.interpreted_calls(small, new_kernels=5, cores=2)
  assert calls > 1  # ~0.1 ms a call against ~0.5 s of compile
  assert tiered.interpreted_calls(small, new_kernels=10, cores=2) >= 2 * calls - 1
  assert tiered.interpreted_calls(small, new_kernels=5, cores=5) < calls  # 5 compilers
  assert tiered.interpreted_calls(small, new_kernels=0, cores=2) == 0
  big = primc.make_program(lambda x: pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x))(
    np.ones(10**7, np.float32)
  )  # W5's size: ~0.5 s interpreted, one kernel
  assert tiered.interpreted_calls(big, new_kernels=1, cores=2) == 0


@pytest.fixture
def default_policy(monkeypatch):
  monkeypatch.setattr(primc.config, "tiered", None)


def test_default_interprets_its_count_of_calls_then_native(fresh_cache, args, default_policy):
  w, x = args
  fn = primc.jit(step)
  first = fn(w, x)
  [exe] = executables(fn)
  assert isinstance(exe, tiered.Tiered) and exe.calls >= 1 and exe.native is None
  program = exe.program
  exe.job.wait(timeout=300)  # done early: the count decides, not the timing
  for k in range(exe.calls):
    got = first if k == 0 else fn(w, x)
    for g, want in zip(got, primc.interpret(program, w, x), strict=True):
      np.testing.assert_array_equal(g, want)  # the reference interpreter's, exactly
    assert exe.native is None
  second = fn(w, x)  # native from here, compiled beside the worker if it was not done
  assert isinstance(exe.native, Executable) and not exe.native._first
  native = Executable.load(exe.plan)
  for got, want in zip(second, native([w, x]), strict=True):
    np.testing.assert_array_equal(got, want)  # native code's, exactly
  check(second, w, x)
  exe.job.wait(timeout=300)
  assert exe.job.returncode == 0
  assert all(map(store.current().sealed, exe.plan.kernels))


def test_default_compiles_first_where_interpreting_costs_more(fresh_cache, default_policy):
  x = np.linspace(-3, 3, 10**7).astype(np.float32)
  fn = primc.jit(lambda x: pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x))
  np.testing.assert_allclose(
    fn(x)[::1000], (np.sin(x) * np.exp(-x * x) + np.tanh(x))[::1000], rtol=1e-5, atol=1e-6
  )
  assert isinstance(executables(fn)[0], Executable)


def test_precompile_finishes_a_tiered_compile(fresh_cache, args, default_policy):
  fn = primc.jit(step).precompile(*args)
  [exe] = executables(fn)
  assert isinstance(exe, tiered.Tiered) and isinstance(exe.native, Executable)
  check(fn(*args), *args)


def test_the_eager_tape_follows_the_configuration(fresh_cache, monkeypatch):
  from primc import compile as compiler

  monkeypatch.setattr(primc.config, "tiered", True)
  monkeypatch.setattr(compiler, "_executables", collections.OrderedDict())
  x = primc.to_tensor(np.array([0.5, -1.5, 2.0], np.float32), stop_gradient=False)
  pnp.sum(pnp.sin(x) * x).backward()
  xv = np.array([0.5, -1.5, 2.0])
  np.testing.assert_allclose(x.grad.numpy(), np.cos(xv) * xv + np.sin(xv), rtol=1e-6)
  [exe] = compiler._executables.values()
  assert isinstance(exe, tiered.Tiered) and exe.native is None
  stop_worker(exe)


def test_reusing_dead_intermediates_matches_the_interpreter(rng):
  def f(x, y):
    t = pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x)
    u = primc.stop_gradient(t) * y  # an identity impl: two names, one array
    v = pnp.reshape(u, (4, 6)).T * 2.0  # views of an intermediate
    g = primc.grad(lambda x: pnp.sum(pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x)))(x)
    return g, v, u * u, t

  x, y = (rng.standard_normal((6, 4)).astype(np.float32) for _ in range(2))
  program = primc.make_program(f)(x, y)
  spare = {}
  expect = primc.interpret(program, x, y)
  for _ in range(3):  # later calls write into the arrays the first one left behind
    got = tiered.interpret_reusing(program, [x, y], spare)
    for a, b in zip(got, expect, strict=True):
      np.testing.assert_array_equal(a, b)
      assert not any(a is s for pool in spare.values() for s in pool)
  assert spare and all(pool for pool in spare.values())


def test_reusing_keeps_no_more_arrays_than_a_call_holds_at_once(rng):
  # arrays that no ufunc writes into (gathers' outputs, integers) went back to the pools at
  # every call, which grew without bound (a fluid simulation's gradient: 10 GB in 30 s)
  def f(x, i):
    y = x
    for _ in range(20):
      y = pnp.take(pnp.sin(y), i) * 2.0  # a gather (no ufunc), then ufuncs
      i = (i + 1) % 64
    return pnp.sum(y)

  x, i = rng.standard_normal(64), np.arange(64)
  program = primc.make_program(f)(x, i)
  spare, sizes = {}, []
  for _ in range(6):
    got = tiered.interpret_reusing(program, [x, i], spare)
    np.testing.assert_allclose(got[0], primc.interpret(program, x, i)[0])
    sizes.append(sum(len(pool) for pool in spare.values()))
  assert sizes[-1] == sizes[1] and sizes[-1] <= 4, sizes


# --- hot kept programs (`primc.kept`): a long one compiled whole in a worker -------------


@pytest.fixture
def hot_at_once(monkeypatch, hot_compiles):
  """A kept program hot at its second call, compiled in a worker however short."""
  monkeypatch.setattr(kept, "HOT_CALLS", 2)
  monkeypatch.setattr(kept, "HOT_SECONDS", 0.0)
  monkeypatch.setattr(kept, "LOAD_SECONDS", 0.0)
  monkeypatch.setattr(kept, "COMPILE_SECONDS", 0.0)
  monkeypatch.setattr(compile_module, "WORKER_EQUATIONS", 1)
  monkeypatch.setattr(compile_module, "_idle_core", lambda: True)  # (whatever the load)
  kept.reset()
  yield
  kept.reset()


def _hot_grad(w):
  return primc.grad(lambda w: pnp.sum(pnp.tanh(1.5 * w - 0.25) ** 2))(w)


def _hot_grad_expected(w):
  t = np.tanh(1.5 * w - 0.25)
  return 3.0 * t * (1 - t * t)


def _background_job(calls: int, w):
  for _ in range(calls):
    np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)
  (entry,) = kept._kept.values()
  assert isinstance(entry.executable, compile_module._Background)
  return entry, entry.executable


def test_a_long_hot_kept_program_compiles_whole_in_a_worker(fresh_cache, hot_at_once, rng):
  """The worker makes the plan and the kernels; this process only loads them (a plan hit,
  no module written here) and runs native code from then on, the worker's file removed."""
  w = rng.standard_normal(9)
  entry, job = _background_job(2, w)
  assert job.job.wait(timeout=300) == 0
  before = primc.cache_stats()
  for _ in range(3):
    np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)
  after = primc.cache_stats()
  assert after.get("plan_hits", 0) == before.get("plan_hits", 0) + 1
  assert after.get("plan_misses", 0) == before.get("plan_misses", 0)
  assert after.get("modules_written", 0) == before.get("modules_written", 0)
  assert entry.executable is job.native and isinstance(job.native, Executable)
  assert not os.path.exists(job.path)


def test_a_hot_kept_program_compiles_here_where_no_core_is_idle(
  fresh_cache, hot_at_once, rng, monkeypatch, caplog
):
  """Beside busy processes a worker would share the caller's core: the program is
  compiled in this process at once (no worker, no interpreted calls after), and is right."""
  monkeypatch.setattr(compile_module, "_idle_core", lambda: False)
  w = rng.standard_normal(7)
  with caplog.at_level(logging.INFO, logger="primc"):
    for _ in range(2):
      np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)
  (entry,) = kept._kept.values()
  assert type(entry.executable) is Executable  # (not a worker's, not tiered)
  assert "no core stands idle" in caplog.text
  for _ in range(2):
    np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)


def test_idle_cpus_count_the_affinitys_idle_ticks(monkeypatch):
  """/proc/stat's idle and iowait ticks of the CPUs this process may run on, over the
  window: 2 * HZ * window ticks of idle (of two CPUs) read as two idle CPUs; other CPUs'
  ticks, and an unreadable file, count nothing."""
  from primc.codegen import threads

  hz, window = os.sysconf("SC_CLK_TCK"), 1.0
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
  monkeypatch.setattr(threads, "available_cpus", lambda: 4)
  texts = iter([0, 1])

  def read(path):
    if path != "/proc/stat":
      return None  # (no cgroup files: no quota)
    k = next(texts) * 2 * hz * window  # (each of cpu0, cpu1: an idle and an iowait part)
    line = lambda n, t: f"cpu{n} 5 0 5 {t / 2 + 100:.0f} {t / 2:.0f} 0 0 0 0 0"
    return "\n".join(["cpu  1 2 3 4 5", line(0, k / 2), line(1, k / 2), line(7, 10**6 * k)])

  clock = itertools.cycle([0.0, window])
  fake = lambda: None
  fake.perf_counter, fake.sleep = (lambda: next(clock)), (lambda s: None)
  monkeypatch.setattr(threads, "time", fake)
  assert threads.idle_cpus(window, read) == pytest.approx(2.0, rel=0.02)
  assert threads.idle_cpus(window, lambda path: None) is None
  assert threads.idle_cpus(window, lambda path: "cpu0 1 2 3\n") is None


@pytest.mark.parametrize(
  "files, usage, want",
  [
    # v2: a quota of 1.5 CPUs, of which the group used 1 over the window: 0.5 left,
    # although the host's two CPUs stood idle
    (
      {"/proc/self/cgroup": "0::/box\n", "/sys/fs/cgroup/box/cpu.max": "150000 100000"},
      ("/sys/fs/cgroup/box/cpu.stat", "usage_usec {}\nuser_usec 1\n", 1e6),
      0.5,
    ),
    # the group used nothing: the host's idle CPUs (two) bound it
    (
      {"/proc/self/cgroup": "0::/box\n", "/sys/fs/cgroup/box/cpu.max": "300000 100000"},
      ("/sys/fs/cgroup/box/cpu.stat", "usage_usec {}\n", 0),
      2.0,
    ),
    # v1: cpuacct.usage in nanoseconds beside the quota; the group used more than it: 0
    (
      {
        "/proc/self/cgroup": "3:cpu,cpuacct:/d/x\n",
        "/sys/fs/cgroup/cpu,cpuacct/d/x/cpu.cfs_quota_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/d/x/cpu.cfs_period_us": "100000\n",
      },
      ("/sys/fs/cgroup/cpu,cpuacct/d/x/cpuacct.usage", "{}\n", 1.2e9),
      0.0,
    ),
    # a quota whose use cannot be read: the host's idle CPUs alone
    (
      {"/proc/self/cgroup": "0::/box\n", "/sys/fs/cgroup/box/cpu.max": "150000 100000"},
      ("/sys/fs/cgroup/box/cpu.stat", "nothing here\n", 5),
      2.0,
    ),
  ],
)
def test_idle_cpus_leave_out_what_the_cgroup_used_of_its_quota(monkeypatch, files, usage, want):
  """In a container with a CPU quota (and the host's CPUs in its affinity) the host's
  idle CPUs say nothing of the quota's use: another busy process of the group takes it."""
  from primc.codegen import threads

  hz, window = os.sysconf("SC_CLK_TCK"), 1.0
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
  monkeypatch.setattr(threads, "available_cpus", lambda: 4)
  stat = iter([0, hz * window])  # each of two CPUs idle over the window
  used_path, template, used = usage
  uses = iter([10**9, 10**9 + used])

  def read(path):
    if path == "/proc/stat":
      t = next(stat)
      return f"cpu0 1 0 1 {t:.0f} 0 0\ncpu1 1 0 1 {t:.0f} 0 0"
    if path == used_path:
      return template.format(int(next(uses)))
    return files.get(path)

  clock = itertools.cycle([0.0, window])
  fake = lambda: None
  fake.perf_counter, fake.sleep = (lambda: next(clock)), (lambda s: None)
  monkeypatch.setattr(threads, "time", fake)
  assert threads.idle_cpus(window, read) == pytest.approx(want, abs=0.02)


def test_a_failed_hot_worker_compiles_in_process(
  fresh_cache, hot_at_once, rng, monkeypatch, caplog
):
  worker = tiered.worker
  monkeypatch.setattr(tiered, "worker", lambda m, name, path: worker(m, name, path + ".gone"))
  w = rng.standard_normal(5)
  entry, job = _background_job(2, w)
  assert job.job.wait(timeout=300) != 0
  with caplog.at_level(logging.WARNING, logger="primc"):
    np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)
  assert "background compile of a transform called often failed" in caplog.text
  with open(tiered.worker_log(job.name)) as f:
    assert "FileNotFoundError" in f.read()
  assert entry.executable is job.native and not os.path.exists(job.path)
  np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)


def test_a_worker_compiles_programs_with_control_flow(fresh_cache):
  """The worker decodes and compiles what a kept program may hold: loops and branches
  (their primitives are known there although `primc`'s `__init__` never runs)."""

  def f(x):
    y = primc.lax.fori_loop(0, 3, lambda i, c: pnp.tanh(c) * 1.5, x)
    return primc.lax.cond(pnp.sum(y) > 0, lambda v: v * 2.0, lambda v: -v, y)

  x = np.linspace(-1, 2, 6)
  job = compile_module._Background.start(primc.make_program(f)(x))
  assert job.job.wait(timeout=300) == 0
  assert job.ready()
  want = x
  for _ in range(3):
    want = np.tanh(want) * 1.5
  want = want * 2.0 if want.sum() > 0 else -want
  np.testing.assert_allclose(job.native([x])[0], want, rtol=1e-12)


def test_two_workers_compile_one_program_at_once(fresh_cache):
  """Two functions (or processes) hot with the same program: each worker has its file."""
  x = np.linspace(-1, 1, 5)
  program = primc.make_program(lambda x: pnp.sum(pnp.tanh(3.0 * x) ** 2))(x)
  jobs = [compile_module._Background.start(program) for _ in range(2)]
  assert jobs[0].path != jobs[1].path
  for job in jobs:
    assert job.job.wait(timeout=300) == 0 and job.ready()
    np.testing.assert_allclose(job.native([x])[0], np.sum(np.tanh(3.0 * x) ** 2), rtol=1e-12)


@pytest.mark.parametrize("fails", ["write", "start"])
def test_a_hot_program_compiles_here_where_no_worker_can_start(
  fresh_cache, hot_at_once, rng, monkeypatch, caplog, fails
):
  """A program file that cannot be written (a full disk) or a worker that cannot start:
  said once, compiled in the calling thread, no file left behind, results right."""

  def refuse(*args, **kwargs):
    raise OSError(28, "No space left on device")

  if fails == "write":
    monkeypatch.setattr(compile_module.os, "replace", refuse)
  else:
    monkeypatch.setattr(tiered, "worker", refuse)
  w = rng.standard_normal(4)
  with caplog.at_level(logging.WARNING, logger="primc"):
    for _ in range(4):
      np.testing.assert_allclose(_hot_grad(w), _hot_grad_expected(w), rtol=1e-12)
  assert "cannot compile a transform called often in the background" in caplog.text
  (entry,) = kept._kept.values()
  assert entry.executable is not None and not isinstance(
    entry.executable, compile_module._Background
  )
  assert not [f for f in os.listdir(fresh_cache) if f.startswith("hot_")]
