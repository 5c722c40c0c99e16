"""primc.random: bit for bit numpy's Philox stream, in every path; the distributions by
statistical tests (deterministic: a fixed key)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

import primc
from primc import random as R
from primc.core import PrimcError


def numpy_philox(seed):
  return np.random.Generator(np.random.Philox(key=seed))


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**40 + 7, 2**63 + 5])
def test_bits_and_uniforms_are_numpys_philox_stream(seed):
  k = R.key(seed)
  np.testing.assert_array_equal(
    np.asarray(R.bits(k, (11,))).view(np.uint64), np.random.Philox(key=seed).random_raw(11)
  )
  np.testing.assert_array_equal(R.uniform(k, (13,), "float64"), numpy_philox(seed).random(13))
  np.testing.assert_array_equal(
    R.uniform(k, (2, 7), "float32"), numpy_philox(seed).random(14, dtype=np.float32).reshape(2, 7)
  )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_draws_compiled_and_vmapped_equal_eager_ones(dtype):
  draw = lambda k: R.uniform(k, (5, 3), dtype)
  keys = R.split(R.key(3), 4)
  eager = np.stack([draw(k) for k in keys])
  np.testing.assert_array_equal(primc.jit(draw)(keys[0]), eager[0])
  np.testing.assert_array_equal(primc.vmap(draw)(keys), eager)
  np.testing.assert_array_equal(primc.jit(primc.vmap(draw))(keys), eager)


def test_derived_keys_differ_from_each_other_and_their_parent():
  k = R.key(0)
  derived = np.concatenate([R.split(k, 3), R.fold_in(k, 1)[None], R.fold_in(k, 2)[None]])
  assert len({tuple(r) for r in derived.tolist()} | {tuple(k.tolist())}) == 6
  np.testing.assert_array_equal(R.split(k, 3), R.split(k, 3))  # a pure function


def test_distributions_pass_statistical_tests():
  n = 20000
  for dtype in ("float32", "float64"):
    u = np.asarray(R.uniform(R.key(1), (n,), dtype), np.float64)
    assert 0 <= u.min() and u.max() < 1
    assert scipy.stats.kstest(u, "uniform").pvalue > 1e-3
    z = np.asarray(R.normal(R.key(2), (n,), dtype), np.float64)
    assert np.isfinite(z).all() and scipy.stats.kstest(z, "norm").pvalue > 1e-3
  b = np.asarray(R.bernoulli(R.key(3), 0.3, (n,)))
  assert b.dtype == bool and abs(b.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / n)
  r = np.asarray(R.randint(R.key(4), (n,), -3, 7))
  assert r.dtype == np.int32 and r.min() == -3 and r.max() == 6
  assert scipy.stats.chisquare(np.bincount(r + 3)).pvalue > 1e-3
  p = np.asarray(R.permutation(R.key(5), 50))
  np.testing.assert_array_equal(np.sort(p), np.arange(50))
  rows = np.asarray(R.permutation(R.key(5), np.arange(50.0)[:, None] * [1, 1]))
  np.testing.assert_array_equal(rows[:, 0], p)


def test_a_key_of_another_type_is_refused():
  with pytest.raises(PrimcError, match="int64"):
    R.uniform(np.zeros(2, np.uint32), (3,))


def test_draws_are_the_same_in_another_process_through_the_cache(tmp_path):
  code = (
    "import numpy as np, primc\n"
    "from primc import random as R\n"
    "f = primc.jit(lambda k: R.normal(R.fold_in(k, 3), (4,), 'float64'))\n"
    "print(repr(f(R.key(9)).tolist())); print(repr(f(R.key(9)).tolist()))\n"
  )
  env = {**os.environ, "PRIMC_CACHE_DIR": str(tmp_path)}
  runs = [
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    for _ in range(2)
  ]  # the second process loads what the first compiled
  here = np.asarray(R.normal(R.fold_in(R.key(9), 3), (4,), "float64")).tolist()
  draws = []
  for r in runs:
    assert r.returncode == 0, r.stderr[-500:]
    draws += [eval(line) for line in r.stdout.splitlines()]
  assert len(draws) == 4 and all(d == draws[0] for d in draws)  # bit for bit
  # compiled against numpy's erfinv: the last bits may differ (uniforms do not)
  np.testing.assert_allclose(draws[0], here, rtol=1e-14)
