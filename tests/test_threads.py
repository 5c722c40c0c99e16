"""Threads: primc's pool (every task runs once, on whichever thread claims it; a worker
that never arrives costs nothing; a taken pool runs the tasks on the caller), the thread
count (affinity and cgroup quotas), fork, and numba's pool where it is chosen."""

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from primc.codegen import native, pool, runner, threads

needs_pool = pytest.mark.skipif(not pool.supported(), reason="primc's pool is Linux's")

KERNEL = ctypes.CFUNCTYPE(
  ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
)
RUN = ctypes.CFUNCTYPE(
  ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
)


class Recorder:
  """A kernel (a ctypes callback) that records which thread ran each task, and answers
  `results[task]` (default 1)."""

  def __init__(self, ntasks, results=None):
    self.ran = [[] for _ in range(ntasks)]
    self.results = results or {}
    self.fn = KERNEL(self._task)

  def _task(self, phase, lo, hi, table):
    assert phase == 1 and lo < hi
    result = 1
    for task in range(lo, hi):
      self.ran[task].append(threading.get_ident())
      result = min(result, self.results.get(task, 1))
    return result


def _run(p: pool.Pool, kernel: Recorder, ntasks: int) -> int:
  table = (ctypes.c_void_p * 4)()
  return RUN(p.run_address)(p.address, ctypes.cast(kernel.fn, ctypes.c_void_p), table, ntasks)


def _started_pool():
  runner.enable_threads()
  return runner.the_pool()


@needs_pool
def test_every_task_runs_once_and_results_combine():
  p = _started_pool()
  for ntasks in (1, 2, 3, 17, 200):
    for _ in range(20):
      rec = Recorder(ntasks)
      assert _run(p, rec, ntasks) == 1
      assert [len(r) for r in rec.ran] == [1] * ntasks
  rec = Recorder(50, {7: 0})  # a failed task: 0
  assert _run(p, rec, 50) == 0
  rec = Recorder(50, {3: -1, 9: 0})  # an index error wins over a failure
  assert _run(p, rec, 50) == -1
  assert all(len(r) == 1 for r in rec.ran)  # the other tasks still ran


@needs_pool
def test_workers_take_tasks_when_they_can():
  if threads.num_threads() < 2:
    pytest.skip("one CPU: no workers")
  p = _started_pool()
  assert p.workers == threads.num_threads() - 1
  me = threading.get_ident()
  others = 0
  for _ in range(200):
    rec = Recorder(64)
    assert _run(p, rec, 64) == 1
    others += sum(r[0] != me for r in rec.ran)
  assert others > 0, "no task ever ran on a worker"


def _threadless_pool(workers: int):
  """A pool that says it has `workers` workers but starts none: each worker is one the
  scheduler never runs."""
  runner.the_pool()  # its functions compiled into the engine
  names = ["primc_pool_run", "primc_pool_worker", "primc_pool_pauses"]
  p = pool.Pool(*(native.function_address(n) for n in names))
  p._word("spin").value = 100
  p._word("workers").value = workers
  return p


@needs_pool
def test_the_caller_runs_what_no_worker_takes():
  """Workers that never arrive (descheduled, a busy machine) cost nothing: the caller
  claims every task and returns, without waiting for them."""
  p = _threadless_pool(3)
  me = threading.get_ident()
  for ntasks in (1, 2, 9):
    rec = Recorder(ntasks)
    assert _run(p, rec, ntasks) == 1
    assert rec.ran == [[me]] * ntasks


@needs_pool
def test_a_pool_in_use_or_without_workers_sends_the_caller_back():
  p = _threadless_pool(0)
  assert _run(p, Recorder(4), 4) == pool.SERIAL
  p = _threadless_pool(2)
  p._word("busy").value = 1  # another caller's step
  rec = Recorder(4)
  assert _run(p, rec, 4) == pool.SERIAL
  assert rec.ran == [[]] * 4  # nothing ran: the runner runs the tasks itself


def _threaded_program():
  import primc
  import primc.numpy as pnp
  from primc.codegen import kernels

  f = primc.jit(lambda x: pnp.tanh(x) * 2.0 + 1.0)
  x = np.linspace(-1, 1, 64 * kernels.PARALLEL_MIN, dtype=np.float32)
  return f, x, np.tanh(x) * 2 + 1


def test_threaded_programs_called_from_many_threads():
  """Python threads running threaded programs at once: one owns the pool, the others
  run their tasks alone; every result is right."""
  f, x, want = _threaded_program()
  f(x)
  errors = []

  def call(k):
    try:
      for _ in range(20):
        np.testing.assert_allclose(f(x * k), np.tanh(x * k) * 2 + 1, rtol=1e-6, atol=1e-6)
    except Exception as e:  # noqa: BLE001 (reported below)
      errors.append(e)

  ts = [threading.Thread(target=call, args=(k,)) for k in (1.0, 0.5, 2.0, -1.0)]
  for t in ts:
    t.start()
  for t in ts:
    t.join()
  assert not errors, errors


CHILD = textwrap.dedent("""
    import multiprocessing, os, sys
    import numpy as np
    import primc, primc.numpy as pnp
    from primc.codegen import kernels, runner, threads
    f = primc.jit(lambda x: pnp.tanh(x) * 2.0 + 1.0)
    x = np.linspace(-1, 1, 2 * kernels.PARALLEL_MIN, dtype=np.float32)  # a threaded kernel
    want = np.tanh(x) * 2 + 1
    np.testing.assert_allclose(f(x), want, rtol=1e-6, atol=1e-6)
    print("layer", threads.layer(), flush=True)
    own = threads.layer() == "primc"
    pid = os.fork()
    if pid == 0:
        ok = np.allclose(f(x), want, rtol=1e-6, atol=1e-6)
        if own:  # the child's own workers (the parent's are not there)
            ok = ok and runner.the_pool().workers == threads.num_threads() - 1
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"forked child exited with status {status}"
    def work(k):
        return float(f(x * k).sum())
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map_async(work, [1, 2, 3]).get(timeout=120)
    np.testing.assert_allclose(got, [float((np.tanh(x * k) * 2 + 1).sum()) for k in (1, 2, 3)],
                               rtol=1e-5)
    print("fork ok", flush=True)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("choice", ["primc", "numba"])
def test_fork_after_a_threaded_kernel(choice):
  env = dict(os.environ, PRIMC_THREADS=choice)
  env.pop("NUMBA_THREADING_LAYER", None)
  proc = subprocess.run(
    [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "fork ok" in proc.stdout
  if choice == "primc" and pool.supported():
    assert "layer primc" in proc.stdout
  elif threads.libtbb_path() is not None:  # numba's pool on TBB where the wheel exists
    assert "layer tbb" in proc.stdout


WARM_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import primc, primc.numpy as pnp
    from primc.codegen import kernels, threads
    f = primc.jit(lambda x: pnp.tanh(x) * 2.0 + 1.0)
    x = np.linspace(-1, 1, 2 * kernels.PARALLEL_MIN, dtype=np.float32)  # a threaded kernel
    np.testing.assert_allclose(f(x), np.tanh(x) * 2 + 1, rtol=1e-6, atol=1e-6)
    if sys.argv[1] == "warm":
      assert "numba" not in sys.modules, "a warm threaded program imported numba"
      import numba
      @numba.njit(parallel=True)
      def total(a):
        s = 0.0
        for i in numba.prange(a.size):
          s += a[i]
        return s
      assert total(np.ones(10000)) == 10000.0
      if threads.layer() != "primc":  # numba's pool is shared with primc's kernels
        assert numba.threading_layer() == threads.layer()
        assert numba.get_num_threads() == threads.num_threads()
      np.testing.assert_allclose(f(x), np.tanh(x) * 2 + 1, rtol=1e-6, atol=1e-6)
    print("ok", threads.layer(), flush=True)
""")


@pytest.mark.parametrize("choice", ["primc", "numba"])
def test_a_warm_process_runs_threads_without_numba_and_numba_beside(tmp_path, choice):
  """Warm, a threaded program starts its pool without importing numba; numba, imported
  after, runs its own parallel code (on the same pool where numba's is primc's) and
  primc's kernels keep running."""
  env = dict(
    os.environ, PRIMC_CACHE_DIR=str(tmp_path), PRIMC_THREADS=choice, PRIMC_KERNEL_COMPILER="llvm"
  )
  env.pop("NUMBA_THREADING_LAYER", None)
  for mode in ("cold", "warm"):
    proc = subprocess.run(
      [sys.executable, "-c", WARM_CHILD, mode], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
  if choice == "primc" and pool.supported():
    assert "ok primc" in proc.stdout
  elif threads.libtbb_path() is not None:
    assert "ok tbb" in proc.stdout


def test_a_layer_the_user_chose_is_numbas_to_start(tmp_path):
  """numba's pool chosen and NUMBA_THREADING_LAYER set: numba starts its pool on that
  layer, as the user asked."""
  env = dict(
    os.environ,
    PRIMC_CACHE_DIR=str(tmp_path),
    NUMBA_THREADING_LAYER="workqueue",
    PRIMC_THREADS="numba",
  )
  proc = subprocess.run(
    [sys.executable, "-c", WARM_CHILD, "cold"], env=env, capture_output=True, text=True, timeout=600
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "ok workqueue" in proc.stdout


def test_products_call_a_blas_of_their_own_on_one_thread():
  """primc's products run on its pool, each task one call of a single-threaded BLAS of
  primc's own; the user's numpy keeps its BLAS threads."""
  import primc
  from threadpoolctl import threadpool_info
  from primc.codegen import openblas

  numpy_blas = lambda: {
    (i["filepath"], i["num_threads"])
    for i in threadpool_info()
    if i["user_api"] == "blas" and "numpy" in i["filepath"]
  }
  before = numpy_blas()
  a = np.random.default_rng(0).standard_normal((512, 600)).astype(np.float32)
  got = primc.jit(lambda a, b: a @ b)(a, a.T)
  np.testing.assert_allclose(got, a.astype(np.float64) @ a.T, rtol=1e-4, atol=1e-3)
  assert numpy_blas() == before
  if not openblas.single_threaded():
    pytest.skip("no OpenBLAS of primc's own here: numpy's is called")
  assert openblas.library()[0] == openblas.LIBRARIES[0][0]
  assert openblas.threads() == 1


# -- how many threads -------------------------------------------------------------------


def _files(files: dict):
  return lambda path: files.get(path)


@pytest.mark.parametrize(
  "files, want",
  [
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 2),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "100000 100000\n"}, 1),
    (
      {
        "/proc/self/cgroup": "0::/ci/job\n",
        "/sys/fs/cgroup/ci/job/cpu.max": "max 100000",
        "/sys/fs/cgroup/ci/cpu.max": "300000 100000",
        "/sys/fs/cgroup/cpu.max": "max 100000",
      },
      3,
    ),  # a parent's quota binds its children
    (
      {
        "/proc/self/cgroup": "0::/a\n",
        "/sys/fs/cgroup/a/cpu.max": "50000 100000",
        "/sys/fs/cgroup/cpu.max": "400000 100000",
      },
      1,
    ),  # half a CPU: one thread
    (
      {
        "/proc/self/cgroup": "2:cpu,cpuacct:/docker/x\n1:memory:/docker/x\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us": "200000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n",
      },
      2,
    ),  # v1
    (
      {
        "/proc/self/cgroup": "1:cpu:/\n",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
      },
      None,
    ),
    ({}, None),  # no cgroups (not Linux)
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "garbage"}, None),
  ],
)
def test_cgroup_cpu_quota(files, want):
  assert threads.cgroup_cpu_quota(_files(files)) == want


def test_thread_count_follows_affinity_quota_and_settings(monkeypatch):
  monkeypatch.delenv("PRIMC_NUM_THREADS", raising=False)
  monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
  if hasattr(os, "sched_getaffinity"):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
  else:
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
  monkeypatch.setattr(threads, "_quota", lambda: None)
  assert threads.num_threads() == 6
  monkeypatch.setattr(threads, "_quota", lambda: 2)
  assert threads.num_threads() == 2
  monkeypatch.setenv("NUMBA_NUM_THREADS", "3")
  assert threads.num_threads() == 3
  monkeypatch.setenv("PRIMC_NUM_THREADS", "1")
  assert threads.num_threads() == 1
