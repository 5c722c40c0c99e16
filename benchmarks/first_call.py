"""Cold and warm first calls in a fresh process, and the steady call, for the seed MyNet
training step and a 3-layer tanh MLP Hessian. Run with the cache dir to use:
  PRIMC_CACHE_DIR=... python benchmarks/first_call.py mynet|mlp_hessian"""

import json
import sys
import time

T_START = time.perf_counter()
import os  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(
  0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
)
import primc  # noqa: E402
import primc.numpy as pnp  # noqa: E402
import seed_programs as seeds  # noqa: E402


def mlp3(x, params):
  h = x
  for w, b in params[:-1]:
    h = pnp.tanh(h @ w + b)
  w, b = params[-1]
  return pnp.sum(h @ w + b)


def workload(name):
  rng = np.random.default_rng(0)
  f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
  if name == "mynet":
    z = np.zeros((2, 2), np.float32)
    return primc.jit(seeds.mynet_train_step), (
      f32(2, 2),
      f32(2, 2),
      f32(2, 2),
      z,
      z,
      z,
      z,
      np.ones((), np.float32),
    )
  params = [(f32(8, 16) * 0.5, f32(16)), (f32(16, 16) * 0.3, f32(16)), (f32(16, 1), f32(1))]
  hess = primc.jit(primc.hessian(lambda x: mlp3(x, params)))
  return hess, (f32(8),)


if __name__ == "__main__":
  fn, args = workload(sys.argv[1])
  t0 = time.perf_counter()
  fn(*args)
  t1 = time.perf_counter()
  steady = []
  for _ in range(2000):
    t = time.perf_counter()
    fn(*args)
    steady.append(time.perf_counter() - t)
  print(
    json.dumps(
      {
        "first_call_s": t1 - t0,
        "process_start_to_result_s": t1 - T_START,
        "steady_us": 1e6 * sorted(steady)[1000],
        "compiles": primc.cache_stats().get("kernel_compiles", 0),
      }
    )
  )
