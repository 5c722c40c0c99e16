"""The disk cache in normal use, across fresh processes: a warm process compiles nothing
and skips the passes; concurrent processes compile each kernel once; copied caches hit;
a program's new kernels compile in parallel processes. (Faults: test_cache_faults.py.)"""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import primc
import primc.numpy as pnp

CHILD = os.path.join(os.path.dirname(__file__), "cache_child.py")


def run_child(cache_dir, *args, check=True, **env_vars):
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache_dir), **env_vars)
  proc = subprocess.run(
    [sys.executable, CHILD, *args], env=env, capture_output=True, text=True, timeout=300
  )
  if check:
    assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
  return out, proc.stderr


def expected_grad():
  x = np.linspace(-1, 1, 12).reshape(4, 3)
  w = np.linspace(0.5, -0.5, 6).reshape(3, 2)
  t = np.tanh(x @ w)
  return x.T @ (2 * t * (1 - t * t))


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
  path = tmp_path_factory.mktemp("cache")
  os.chmod(path, 0o700)
  cold, _ = run_child(path)
  return path, cold


def test_second_process_compiles_nothing_and_skips_passes(warm_cache):
  path, cold = warm_cache
  stats = cold["stats"]
  assert stats["kernel_compiles"] >= 1 and stats["plan_misses"] == 1
  # each kernel compiled here or by a worker (then loaded from the cache)
  assert stats["kernel_compiles"] + stats.get("kernel_cache_loads", 0) == cold["kernels"]
  warm, _ = run_child(path)
  assert warm["stats"].get("kernel_compiles", 0) == 0
  assert warm["stats"]["kernel_cache_loads"] == cold["kernels"]
  assert warm["stats"]["plan_hits"] == 1
  assert warm["stats"].get("plan_misses", 0) == 0
  np.testing.assert_allclose(warm["grad"], expected_grad(), rtol=1e-5)


def test_threaded_kernels_run_when_loaded_from_the_cache(tmp_path):
  # threaded steps need numba's thread pool, also when every kernel comes from the cache
  path = tmp_path / "threaded"
  path.mkdir(mode=0o700)
  x = np.linspace(-3, 3, 1 << 16).reshape(256, 256)
  want = (1 - np.tanh(x) ** 2)[::64, ::64]
  for cold in (True, False):
    out, _ = run_child(path, "threaded")
    assert (out["stats"].get("kernel_compiles", 0) > 0) == cold
    np.testing.assert_allclose(out["grad"], want, rtol=1e-5, atol=1e-6)


def test_copied_cache_still_hits(warm_cache, tmp_path):
  moved = tmp_path / "elsewhere"
  shutil.copytree(warm_cache[0], moved, copy_function=shutil.copy)  # fresh mtimes
  os.chmod(moved, 0o700)
  out, _ = run_child(moved)
  assert out["stats"].get("kernel_compiles", 0) == 0 and out["stats"]["plan_hits"] == 1


def test_two_processes_at_once_compile_each_kernel_once(tmp_path):
  path = tmp_path / "shared"
  path.mkdir(mode=0o700)
  # no compile workers: every compile is counted by one of the two processes
  env = dict(os.environ, PRIMC_CACHE_DIR=str(path), PRIMC_COMPILE_WORKERS="1")
  procs = [
    subprocess.Popen(
      [sys.executable, CHILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for _ in range(2)
  ]
  outs = []
  for p in procs:
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    outs.append(json.loads(stdout.strip().splitlines()[-1]))
  assert sum(o["stats"].get("kernel_compiles", 0) for o in outs) == outs[0]["kernels"]
  for o in outs:
    np.testing.assert_allclose(o["grad"], expected_grad(), rtol=1e-5)


def test_a_process_killed_while_compiling_leaves_a_usable_cache(tmp_path):
  path = tmp_path / "killed"
  path.mkdir(mode=0o700)
  env = dict(os.environ, PRIMC_CACHE_DIR=str(path))
  proc = subprocess.Popen(
    [sys.executable, CHILD, "threaded"],
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  import time

  deadline = time.time() + 120
  while time.time() < deadline and not list(path.glob("m_*.py")):
    time.sleep(0.05)
  time.sleep(0.5)  # inside numba's compile
  proc.kill()
  proc.wait()
  out, _ = run_child(path, "threaded")  # whatever was left: right results
  x = np.linspace(-3, 3, 1 << 16).reshape(256, 256)
  np.testing.assert_allclose(out["grad"], (1 - np.tanh(x) ** 2)[::64, ::64], rtol=1e-5, atol=1e-6)
  again, _ = run_child(path, "threaded")
  assert again["stats"].get("kernel_compiles", 0) == 0


@pytest.mark.parametrize("setting,frozen", [(None, True), ("0", False)])
@pytest.mark.parametrize(
  "first,walked",
  [
    ("primc.jit(lambda x: x * 2.0)(np.ones(2, np.float32))", 10_000),
    ("primc.grad(lambda x: (x * 2.0).sum())(np.ones(2))", 5_000),
  ],
)
def test_import_is_light_and_the_first_program_freezes_the_collector(
  first, walked, setting, frozen, tmp_path
):
  # nothing happens at import; the first program built (a compile, or a transform without
  # jit) freezes what the imports left, unless PRIMC_GC_FREEZE=0
  env = {k: v for k, v in os.environ.items() if k != "PRIMC_GC_FREEZE"}
  env["PRIMC_CACHE_DIR"] = str(tmp_path / "c")
  if setting is not None:
    env["PRIMC_GC_FREEZE"] = setting
  code = (
    "import gc, sys, numpy as np, primc, primc.numpy as pnp; "
    "pnp.tanh(np.ones(3)); "  # (a numpy call on values builds no program)
    "before = ('numba' in sys.modules, gc.get_freeze_count()); "
    f"{first}; "
    "print(*before, gc.get_freeze_count())"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0, proc.stderr
  numba_at_import, frozen_at_import, frozen_after = proc.stdout.split()
  assert numba_at_import == "False" and frozen_at_import == "0"  # no side effects at import
  assert (int(frozen_after) > walked) == frozen


def test_new_kernels_compile_in_parallel_processes(tmp_path):
  # a program's new kernels are shared among one process per core (each compiles what
  # no other has taken into the cache), then loaded; the results must not change
  from primc.codegen import kernel_workers

  out, _ = run_child(tmp_path / "many", "many")
  stats = out["stats"]
  used = kernel_workers.workers() >= 2 and out["kernels"] >= 2
  assert stats.get("parallel_kernel_compiles", 0) == (1 if used else 0)
  # each kernel compiled once: here, or by a worker and loaded here
  assert stats["kernel_compiles"] + stats.get("worker_compiles", 0) == out["kernels"]
  assert stats.get("kernel_cache_loads", 0) == stats.get("worker_compiles", 0)
  x = np.linspace(-1, 1, 256 * 128).reshape(256, 128)
  w = np.linspace(0.02, -0.01, 128 * 128).reshape(128, 128)
  np.testing.assert_allclose(out["grad"][0], np.exp(np.tanh(x) @ w) - 0.25, rtol=2e-5)
  np.testing.assert_allclose(out["grad"][1], np.sum(x * x, axis=1), rtol=1e-5)
  again, _ = run_child(tmp_path / "many", "many")
  assert again["stats"].get("kernel_compiles", 0) == 0


def test_a_failed_kernel_worker_is_logged_not_fatal(caplog, monkeypatch):
  import types
  from primc.codegen import kernel_workers

  f = primc.jit(lambda x, w: pnp.exp(pnp.tanh(x) @ w) - 0.25)
  x, w = np.ones((256, 128), np.float32), np.ones((128, 128), np.float32) / 128
  f(x, w)
  ((exe, _),) = f._compiled.values()
  monkeypatch.setenv("PRIMC_COMPILE_WORKERS", "2")
  # both modules are compiled in this process already; the worker starts with the one
  # no file has
  missing = types.SimpleNamespace(
    DIRECTORY=exe.modules[0].DIRECTORY, KEY="0" * 32, _primc_cfunc=exe.kernels[0]
  )
  modules = [exe.modules[0], missing]
  with caplog.at_level("WARNING"):
    assert kernel_workers.finish(modules, kernel_workers.start(modules)) == 1
    kernel_workers.reap()  # workers are collected after the kernels are loaded
  assert "kernel compile worker failed" in caplog.text and "No such file" in caplog.text


def test_programs_compiled_by_llvm_never_import_numba(tmp_path, monkeypatch):
  """A process whose kernels LLVM compiles (from their source, read against numba's
  stand-ins) or loads from the cache runs them without numba (its import and CPU target
  cost ~0.2-0.5 s), threaded steps included (numba's thread pool started by itself);
  with numba compiling the kernels, it is needed."""
  monkeypatch.setenv("PRIMC_KERNEL_COMPILER", "llvm")  # (whatever the suite's default)
  cold, _ = run_child(tmp_path / "llvm", "two", PRIMC_COMPILE_WORKERS="1")
  warm, _ = run_child(tmp_path / "llvm", "two")
  np.testing.assert_allclose(warm["grad"], expected_grad(), rtol=1e-5)
  np.testing.assert_allclose(cold["grad"], expected_grad(), rtol=1e-5)
  assert cold["stats"].get("kernel_compiles", 0) >= 2 and not cold["numba_imported"]
  assert not warm["numba_imported"] and warm["stats"].get("kernel_compiles", 0) == 0
  x = np.linspace(-3, 3, 1 << 16).reshape(256, 256)
  for _ in range(2):
    threaded, _ = run_child(tmp_path / "llvm", "threaded")
    np.testing.assert_allclose(threaded["grad"], (1 - np.tanh(x) ** 2)[::64, ::64], rtol=1e-5)
  assert not threaded["numba_imported"]
  for _ in range(2):  # a BLAS product: numpy's own OpenBLAS, neither numba nor scipy
    blas, _ = run_child(tmp_path / "llvm", "blas")
    np.testing.assert_allclose(blas["grad"], blas["want"], rtol=2e-5, atol=2e-6)
    assert not blas["numba_imported"]
    assert not blas["scipy_imported"] or not _numpy_has_openblas()
  run_child(tmp_path / "numba", "two", PRIMC_KERNEL_COMPILER="numba")
  warm, _ = run_child(tmp_path / "numba", "two", PRIMC_KERNEL_COMPILER="numba")
  np.testing.assert_allclose(warm["grad"], expected_grad(), rtol=1e-5)
  assert warm["numba_imported"]


def _numpy_has_openblas() -> bool:
  from primc.codegen import installed, openblas

  return installed.file_path("numpy", openblas.LIBRARIES[-1][1], prefix=True) is not None


def _openblas_entries() -> list[int]:
  """`translate.GEMM_SYMBOL` over each OpenBLAS installed: primc's own, numpy's."""
  import ctypes
  from primc.codegen import installed, openblas, translate

  entries = []
  for dist, prefix in openblas.LIBRARIES:
    path = installed.file_path(dist, prefix, prefix=True)
    if path:
      lib = ctypes.CDLL(path)
      entries.append(
        translate.gemm_entry(
          {
            kind: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            for kind, name in openblas.GEMM.items()
          }
        )
      )
  return entries


def test_the_blas_entries_agree():
  """`translate.GEMM_SYMBOL` over primc's OpenBLAS, numpy's and numba's helper (over
  scipy's BLAS) compute the same products, transposed or not, with beta 0 and 1, in both
  precisions."""
  import ctypes
  from primc.codegen import installed

  if not _numpy_has_openblas():
    pytest.skip("this numpy has no OpenBLAS of its own: numba's helper is the entry")
  entries = _openblas_entries() + [installed.extension("numba._helperlib").c_helpers["xxgemm"]]
  proto = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    *[ctypes.c_char] * 3,
    *[ctypes.c_int64] * 3,
    *[ctypes.c_void_p] * 2,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
    *[ctypes.c_void_p] * 2,
    ctypes.c_int64,
  )
  rng = np.random.default_rng(3)
  for dtype, kind in ((np.float32, b"s"), (np.float64, b"d")):
    for m, n, k, transposed, beta in (
      (5, 7, 3, False, 0.0),
      (17, 4, 9, True, 1.0),
      (64, 65, 66, False, 1.0),
      (1, 1, 1, True, 0.0),
    ):
      a = rng.standard_normal((k, m) if transposed else (m, k)).astype(dtype)
      b = rng.standard_normal((k, n)).astype(dtype)
      c0 = rng.standard_normal((m, n)).astype(dtype)
      results = []
      for address in entries:
        c, one, scale = c0.copy(), np.ones(1, dtype), np.full(1, beta, dtype)
        # row-major c = op(a) @ b + beta c, as xxgemm_call asks for it (column-major)
        proto(address)(
          kind,
          b"n",
          b"t" if transposed else b"n",
          n,
          m,
          k,
          one.ctypes.data,
          b.ctypes.data,
          n,
          a.ctypes.data,
          m if transposed else k,
          scale.ctypes.data,
          c.ctypes.data,
          n,
        )
        results.append(c)
      want = (a.T if transposed else a).astype(np.float64) @ b + beta * c0
      for got in results:
        np.testing.assert_allclose(
          got,
          want,
          rtol=1e-4 if dtype == np.float32 else 1e-12,
          atol=1e-4 if dtype == np.float32 else 1e-12,
        )


def test_numba_compiles_the_same_program_to_the_same_results(tmp_path):
  """PRIMC_KERNEL_COMPILER=numba (every kernel and the products' entries by numba) and the
  default (LLVM) agree on a program with a BLAS product, a threaded step and a reduction."""
  llvm, _ = run_child(tmp_path / "llvm", "many")
  by_numba, _ = run_child(tmp_path / "numba", "many", PRIMC_KERNEL_COMPILER="numba")
  assert (
    by_numba["stats"].get("kernel_compiles", 0) + by_numba["stats"].get("worker_compiles", 0) >= 2
  )
  for a, b in zip(llvm["grad"], by_numba["grad"]):
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
  assert list(os.scandir(tmp_path / "numba" / "__pycache__")) and not [
    f for f in os.listdir(tmp_path / "numba" / "__pycache__") if f.endswith(".o")
  ]


def test_numba_cache_dir_is_honoured(tmp_path):
  path, numba_cache = tmp_path / "primc", tmp_path / "numba"
  env = dict(NUMBA_CACHE_DIR=str(numba_cache))
  out, _ = run_child(path, **env)
  np.testing.assert_allclose(out["grad"], expected_grad(), rtol=1e-5)
  compiled = lambda f: f.endswith((".nbi", ".kernel.o"))  # numba's files, object files
  files = [f for _, _, fs in os.walk(numba_cache) for f in fs if compiled(f)]
  assert files and not [f for f in os.listdir(path / "__pycache__") if compiled(f)]
  warm, _ = run_child(path, **env)
  assert warm["stats"].get("kernel_compiles", 0) == 0
  cli = subprocess.run(
    [sys.executable, "-m", "primc.cli", "cache", "clear"],
    capture_output=True,
    text=True,
    env=dict(os.environ, PRIMC_CACHE_DIR=str(path), **env),
  )
  assert cli.returncode == 0, cli.stderr
  assert not [f for _, _, fs in os.walk(numba_cache) for f in fs if f.startswith("m_")]


def test_numba_cache_dir_naming_matches_numba(tmp_path, monkeypatch):
  from numba.core import config
  from numba.core.caching import _CacheLocator
  from primc.codegen import store

  monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
  directory = str(tmp_path / "primc")
  want = os.path.join(
    config.CACHE_DIR, _CacheLocator.get_suitable_cache_subpath(os.path.join(directory, "m.py"))
  )
  assert store.Store.numba_dir(directory) == want


def test_numba_disable_jit_runs_the_interpreter(tmp_path):
  code = (
    "import json, numpy as np, primc, primc.numpy as pnp; "
    "f = primc.jit(lambda x: pnp.sum(pnp.tanh(x) * x)); x = np.linspace(-1, 1, 5); "
    "print(json.dumps([float(f(x)), primc.cache_stats().get('kernel_compiles', 0)]))"
  )
  env = dict(os.environ, NUMBA_DISABLE_JIT="1", PRIMC_CACHE_DIR=str(tmp_path / "c"))
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0, proc.stderr
  value, compiles = json.loads(proc.stdout)
  x = np.linspace(-1, 1, 5)
  assert compiles == 0 and abs(value - np.sum(np.tanh(x) * x)) < 1e-12


def test_a_process_scans_the_cache_size_only_when_it_may_be_near_the_cap(tmp_path, monkeypatch):
  """A directory scan costs ~13 µs a file: a process's first write scans only when the
  last scan (`usage`) is older than SCAN_INTERVAL or found more than half the cap; the
  scan records what it found. Past the cap it evicts, as before."""
  from primc.codegen import store as st

  root = tmp_path / "c"
  root.mkdir(mode=0o700)
  monkeypatch.setenv("PRIMC_CACHE_MAX_BYTES", "100000")
  scans = []
  real = st.Store.entries
  monkeypatch.setattr(st.Store, "entries", lambda self, d=None: scans.append(1) or real(self, d))
  usage = root / st.USAGE

  def first_write(name):
    s = st.Store(str(root))
    assert s.write("plan", name, b"x" * 1000)
    return s

  first_write("a")  # no record: scan, and record it
  assert len(scans) == 1 and int(usage.read_text()) == 1000
  first_write("b")  # a recent record far below the cap: no scan
  assert len(scans) == 1
  os.utime(usage, (time.time() - st.SCAN_INTERVAL - 1,) * 2)
  first_write("c")  # an old record: scan again
  assert len(scans) == 2 and int(usage.read_text()) == 3000
  usage.write_text("60000\n")  # past half the cap: scan
  s = first_write("d")
  assert len(scans) == 3 and int(usage.read_text()) == 4000
  for k in range(120):  # every twentieth of the cap written: a scan, evicting past the cap
    s.write("plan", f"e{k}", b"y" * 1000)
  size = sum(f.stat().st_size for f in root.glob("p_*.plan"))
  assert len(scans) > 3 and size <= 100000
  usage.write_text("not a number")  # a damaged record: scan
  first_write("f")
  assert int(usage.read_text()) == sum(f.stat().st_size for f in root.glob("p_*.plan"))


def test_workers_ignore_a_primc_in_the_working_directory(tmp_path):
  """Compile workers (`python -m ...`) import the primc this process runs, not a `primc`
  folder in the working directory (another checkout: its kernels would be compiled under
  another environment, then purged and compiled again here)."""
  cwd = tmp_path / "elsewhere"
  (cwd / "primc").mkdir(parents=True)
  (cwd / "primc" / "__init__.py").write_text("raise ImportError('a foreign primc')\n")
  env = dict(os.environ, PRIMC_CACHE_DIR=str(tmp_path / "c"), PRIMC_COMPILE_WORKERS="2")
  proc = subprocess.run(
    [sys.executable, CHILD, "many"], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0, proc.stderr
  # a worker that imported the foreign primc fails (logged when this process collects it)
  assert "worker failed" not in proc.stderr and "another module or environment" not in proc.stderr


def _several_kernels(np_, a, b, c):
  """A program of several regions (a product with its epilogue, reductions) made of the
  elementwise functions a, b, c of `np_` (distinct ones make kernels no test compiled)."""
  return lambda x, w: (
    np_.sum(getattr(np_, a)(x @ w) ** 2, axis=1)
    + np_.max(getattr(np_, b)(x * 0.5), axis=1) * np_.sum(getattr(np_, c)(x), axis=0)[:1]
  )


def _compile_new_kernels(monkeypatch, *functions) -> list:
  """Runs a program of several kernels made of `functions` (checked against numpy); the
  arguments of each worker process started meanwhile."""
  from primc.codegen import kernel_workers

  spawned = []
  spawn = kernel_workers._spawn
  monkeypatch.setattr(
    kernel_workers, "_spawn", lambda args, stdin: spawned.append(list(args)) or spawn(args, stdin)
  )
  rng = np.random.default_rng(5)
  x = rng.standard_normal((64, 32))
  w = rng.standard_normal((32, 32)) / 8
  f = primc.jit(_several_kernels(pnp, *functions))
  np.testing.assert_allclose(f(x, w), _several_kernels(np, *functions)(x, w), rtol=1e-10)
  return spawned


def test_prestarted_workers_take_the_keys(tmp_path, monkeypatch):
  """A function's first plan not in the cache starts the compile workers before the
  passes run; the first call then hands them their kernels (no process started for
  them), and the result is right."""
  from primc.codegen import kernel_workers

  monkeypatch.setenv("PRIMC_CACHE_DIR", str(tmp_path / "c"))
  monkeypatch.setenv("PRIMC_COMPILE_WORKERS", "2")
  spawned = _compile_new_kernels(monkeypatch, "tanh", "exp", "sin")
  assert spawned == [["--wait"]]  # prestarted, then handed its keys
  kernel_workers.reap()
  assert not kernel_workers._running


def test_a_worker_that_stopped_waiting_is_replaced(tmp_path, monkeypatch):
  """A prestarted worker that is gone when the keys come (it waited too long, or was
  killed) is dropped: a new process takes them, and the result is right."""
  from primc.codegen import kernel_workers

  monkeypatch.setenv("PRIMC_CACHE_DIR", str(tmp_path / "c"))
  monkeypatch.setenv("PRIMC_COMPILE_WORKERS", "2")
  kernel_workers.prestart()
  for job, _ in kernel_workers._waiting:
    job.kill()
    job.wait()
  monkeypatch.setattr(kernel_workers, "prestart", lambda: None)  # keep the dead one
  spawned = _compile_new_kernels(monkeypatch, "cos", "arctan", "sinh")
  assert len(spawned) == 1 and spawned[0] != ["--wait"]  # the keys, to a new process
  assert not kernel_workers._waiting
  kernel_workers.reap()


def test_a_forked_child_forgets_the_parents_workers(tmp_path, monkeypatch):
  from primc.codegen import kernel_workers

  monkeypatch.setenv("PRIMC_CACHE_DIR", str(tmp_path / "c"))
  monkeypatch.setenv("PRIMC_COMPILE_WORKERS", "2")
  kernel_workers.prestart()
  assert kernel_workers._waiting
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child: none of the parent's workers to hand keys to
    os.write(write, b"%d" % len(kernel_workers._waiting))
    os._exit(0)
  os.waitpid(pid, 0)
  assert os.read(read, 16) == b"0"
  assert kernel_workers._waiting  # the parent's still wait


def test_prestarted_workers_are_stopped_when_one_kernel_is_new(tmp_path, monkeypatch):
  """A first plan of one new kernel: this process compiles it; the prestarted workers are
  stopped at once rather than left waiting beside the run (they would take its cores)."""
  from primc.codegen import kernel_workers

  monkeypatch.setenv("PRIMC_CACHE_DIR", str(tmp_path / "c"))
  monkeypatch.setenv("PRIMC_COMPILE_WORKERS", "2")
  started = []
  prestart = kernel_workers.prestart
  monkeypatch.setattr(
    kernel_workers, "prestart", lambda: (prestart(), started.extend(kernel_workers._waiting))
  )
  x = np.linspace(-2, 2, 50)
  f = primc.jit(lambda x: pnp.arcsinh(x) * pnp.cbrt(x) - 0.5)
  np.testing.assert_allclose(f(x), np.arcsinh(x) * np.cbrt(x) - 0.5, rtol=1e-12)
  assert started and not kernel_workers._waiting
  assert all(job.poll() is not None for job, _ in started)  # stopped, and collected
