"""primc on Dask (a LocalCluster of 2 worker processes): compiled functions per chunk, a
data-parallel value-and-gradient equal to the single-process one, jitted functions that
travel as programs, and workers that load kernels instead of compiling them."""

import pickle

import numpy as np
import pytest

import primc
import primc.numpy as pnp

dask_array = pytest.importorskip("dask.array", reason="make test installs primc[dask]")
distributed = pytest.importorskip("distributed")
from primc import dask as pdask  # noqa: E402


@pytest.fixture(scope="module")
def client():
  cluster = distributed.LocalCluster(
    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
  )
  with distributed.Client(cluster) as c:
    yield c
  cluster.close()


def _loss(params, batch):
  """A small tanh network's mean squared error (the PINN's shape of computation)."""
  x, y = batch[:, :2], batch[:, 2:]
  h = pnp.tanh(x @ params["w1"] + params["b1"])
  return pnp.mean((h @ params["w2"] - y) ** 2)


def _params(rng):
  return {
    "w1": rng.standard_normal((2, 16)) * 0.5,
    "b1": np.zeros(16),
    "w2": rng.standard_normal((16, 1)) * 0.5,
  }


def _data(rng, n):
  x = rng.uniform(-1, 1, (n, 2))
  return np.concatenate([x, np.sin(x[:, :1] * 3) * x[:, 1:]], 1)


def test_map_blocks_declares_chunks_from_shape_inference(client):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1000, 3))
  dx = dask_array.from_array(x, chunks=(300, 3))
  y = pdask.map_blocks(lambda b: pnp.sum(pnp.tanh(b) * 2.0, axis=1, keepdims=True), dx)
  assert y.chunks == ((300, 300, 300, 100), (1,)) and y.dtype == np.float64
  np.testing.assert_allclose(y.compute(), np.sum(np.tanh(x) * 2.0, 1, keepdims=True), rtol=1e-12)
  with pytest.raises(primc.PrimcError, match="keep the rank"):
    pdask.map_blocks(lambda b: pnp.sum(b), dx)


def test_data_parallel_gradient_equals_the_single_process_one(client):
  rng = np.random.default_rng(1)
  params, data = _params(rng), _data(rng, 2000)
  want_value, want_grads = primc.jit(primc.value_and_grad(_loss))(params, data)
  chunks = dask_array.from_array(data, chunks=(512, 3))  # unequal last chunk
  value, grads = pdask.value_and_grad(_loss, params, chunks)
  np.testing.assert_allclose(value, want_value, rtol=1e-10)
  for k in params:
    np.testing.assert_allclose(grads[k], want_grads[k], rtol=1e-10, atol=1e-14)
  total, _ = pdask.value_and_grad(_loss, params, chunks, reduce="sum")
  np.testing.assert_allclose(
    total, sum(float(_loss(params, data[i : i + 512])) for i in range(0, 2000, 512)), rtol=1e-10
  )
  stats = client.run(primc.cache_stats)  # this process compiled; the workers loaded
  for worker, s in stats.items():
    assert s.get("kernel_compiles", 0) == 0, (worker, s)
    assert s.get("plan_hits", 0) >= 1, (worker, s)


def test_jitted_functions_travel_as_programs(client):
  f = primc.jit(lambda x: pnp.sum(pnp.sin(x) ** 2))  # a lambda: pickle cannot name it
  x = np.linspace(0, 1, 7)
  want = f(x)
  g = pickle.loads(pickle.dumps(f))
  assert g(x) == want
  with pytest.raises(primc.PrimcError, match="without its Python code"):
    g(np.ones(3))
  assert client.submit(lambda fn, v: fn(v), f, x).result() == want
  # transforms of a received function trace its program (its code is not there)
  np.testing.assert_allclose(primc.grad(g)(x), np.sin(2 * x), rtol=1e-12)
  np.testing.assert_allclose(primc.vmap(g)(np.stack([x, 2 * x])), [want, f(2 * x)], rtol=1e-12)
  vg = client.submit(lambda fn, v: primc.jit(primc.value_and_grad(fn))(v), f, x).result()
  np.testing.assert_allclose(vg[1], np.sin(2 * x), rtol=1e-12)


def test_bad_input_gives_the_local_error(client):
  rng = np.random.default_rng(2)
  params = _params(rng)
  bad = dask_array.from_array(np.ones((100, 1)), chunks=(50, 1))  # 1 column, not 3
  with pytest.raises(primc.PrimcError) as local:
    primc.value_and_grad(_loss)(params, np.ones((50, 1)))
  with pytest.raises(primc.PrimcError) as remote:
    pdask.value_and_grad(_loss, params, bad)
  assert str(remote.value).split(" at ")[0] == str(local.value).split(" at ")[0]


def test_import_primc_does_not_import_dask():
  import subprocess
  import sys

  code = "import sys, primc; print('dask' in sys.modules, 'distributed' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.split() == ["False", "False"]


def test_training_steps_match_single_process_training(client):
  rng = np.random.default_rng(3)
  params, data = _params(rng), _data(rng, 600)
  chunks = dask_array.from_array(data, chunks=(256, 3))
  got, history = pdask.train(_loss, params, chunks, primc.optimizer.Adam(0.05), steps=4)
  opt, want = primc.optimizer.Adam(0.05), dict(params)
  states = {k: opt.initial_state(v) for k, v in want.items()}
  vg = primc.jit(primc.value_and_grad(_loss))
  for step in range(4):
    value, grads = vg(want, data)
    np.testing.assert_allclose(history[step], value, rtol=1e-10)
    for k in want:
      want[k], states[k] = opt.update(want[k], grads[k], states[k])
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-12)
  assert history[-1] < history[0]


def _chunk_that_kills_its_worker_once(marker, n, seed):
  """A chunk whose first computation ends its worker process (as a crash would)."""
  import os

  if not os.path.exists(marker):
    open(marker, "w").close()
    os._exit(1)
  return _data(np.random.default_rng(seed), n)


def test_a_worker_killed_mid_step_is_retried_and_the_result_is_right(client, tmp_path):
  import dask

  rng = np.random.default_rng(4)
  params = _params(rng)
  marker = str(tmp_path / "killed-once")
  blocks = [
    dask_array.from_delayed(
      dask.delayed(_chunk_that_kills_its_worker_once)(
        marker if i == 1 else str(tmp_path / "never"), 200, i
      ),
      (200, 3),
      np.float64,
    )
    for i in range(3)
  ]
  open(tmp_path / "never", "w").close()
  data = dask_array.concatenate(blocks)
  value, grads = pdask.value_and_grad(_loss, params, data)
  whole = np.concatenate([_data(np.random.default_rng(i), 200) for i in range(3)])
  want_value, want_grads = primc.value_and_grad(_loss)(params, whole)
  np.testing.assert_allclose(value, want_value, rtol=1e-10)
  for k in params:
    np.testing.assert_allclose(grads[k], want_grads[k], rtol=1e-10, atol=1e-14)
  import os

  assert os.path.exists(marker)  # the kill happened
