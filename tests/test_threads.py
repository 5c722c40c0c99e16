"""Threaded kernels and fork: after a threaded kernel has run, `os.fork()` children and a
fork-started `multiprocessing.Pool` run compiled code (GNU OpenMP kills such children)."""
import os
import subprocess
import sys
import textwrap

import pytest

from primc.codegen import threads

CHILD = textwrap.dedent("""
    import multiprocessing, os, sys
    import numpy as np
    import primc, primc.numpy as pnp
    from primc.codegen import kernels, threads
    f = primc.jit(lambda x: pnp.tanh(x) * 2.0 + 1.0)
    x = np.linspace(-1, 1, 2 * kernels.PARALLEL_MIN, dtype=np.float32)  # a threaded kernel
    want = np.tanh(x) * 2 + 1
    np.testing.assert_allclose(f(x), want, rtol=1e-6, atol=1e-6)
    print("layer", threads.layer(), flush=True)
    pid = os.fork()
    if pid == 0:
        ok = np.allclose(f(x), want, rtol=1e-6, atol=1e-6)
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
def test_fork_after_a_threaded_kernel(tmp_path):
  env = dict(os.environ)
  env.pop("NUMBA_THREADING_LAYER", None)
  proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "fork ok" in proc.stdout
  if threads.libtbb_path() is not None:  # installed with primc where wheels exist
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
      assert numba.threading_layer() == threads.layer(), (numba.threading_layer(), threads.layer())
      assert numba.get_num_threads() == threads.num_threads()
      np.testing.assert_allclose(f(x), np.tanh(x) * 2 + 1, rtol=1e-6, atol=1e-6)
    print("ok", threads.layer(), flush=True)
""")


def test_a_warm_process_starts_the_pool_without_numba_and_numba_shares_it(tmp_path):
  """Warm, a threaded program starts numba's TBB pool without importing numba; numba,
  imported after, runs its own parallel code on that pool (one layer, one thread count)
  and primc's kernels keep running."""
  env = dict(os.environ, PRIMC_CACHE_DIR=str(tmp_path))
  env.pop("NUMBA_THREADING_LAYER", None)
  for mode in ("cold", "warm"):
    proc = subprocess.run([sys.executable, "-c", WARM_CHILD, mode], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
  if threads.libtbb_path() is not None:
    assert "ok tbb" in proc.stdout


def test_a_layer_the_user_chose_is_numbas_to_start(tmp_path):
  """NUMBA_THREADING_LAYER set: numba starts its pool on that layer, as the user asked."""
  env = dict(os.environ, PRIMC_CACHE_DIR=str(tmp_path), NUMBA_THREADING_LAYER="workqueue")
  proc = subprocess.run([sys.executable, "-c", WARM_CHILD, "cold"], env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "ok workqueue" in proc.stdout

