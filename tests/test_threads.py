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
