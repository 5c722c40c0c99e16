"""Run in a fresh process by the cache tests: compiles programs, prints its cache
statistics and results as JSON (last line of stdout).

  python cache_child.py [threaded | two | shapes N | many | blas]

PRIMC_TEST_FAULT injects a fault first: `nospace` (every write fails with ENOSPC: primc's
and numba's), `nospace-kernels` (writes of compiled kernels fail, object files and numba's
cache files: the disk filled up during a compile)."""

import errno
import json
import os
import sys

import numpy as np

import primc
import primc.numpy as pnp


def loss(w, x):
  return pnp.sum(pnp.tanh(x @ w) ** 2)


def inject(fault):
  def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

  if fault in ("nospace", "nospace-kernels"):
    from numba.core import caching
    from primc.codegen import loader

    caching.IndexDataCacheFile._save_data = no_space
    caching.IndexDataCacheFile._save_index = no_space
    loader.write_object = no_space
  if fault == "nospace":
    from primc.codegen import store

    store.write_atomic = no_space


def main():
  inject(os.environ.get("PRIMC_TEST_FAULT"))
  args = sys.argv[1:]
  out = {}
  x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
  w = np.linspace(0.5, -0.5, 6, dtype=np.float32).reshape(3, 2)
  if args == ["threaded"]:
    x = np.linspace(-3, 3, 1 << 16, dtype=np.float32).reshape(256, 256)
    f = primc.jit(primc.grad(lambda x: pnp.sum(pnp.tanh(x))))
    out["grad"] = f(x)[::64, ::64].tolist()
  elif args[:1] == ["shapes"]:
    f = primc.jit(lambda v: pnp.sum(pnp.tanh(v) * 2.0))
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096
    for k in range(20):
      f(np.ones(10 + k, np.float32))
    before = rss()
    for k in range(int(args[1])):
      v = np.ones(100 + k, np.float32)
      assert abs(f(v) - 2 * np.tanh(1.0) * v.size) < 1e-3 * v.size
    out["rss_growth"] = rss() - before
    out["signatures"] = len(f._compiled)
  elif args == ["blas"]:  # a serial program whose product calls BLAS (64^3 multiply-adds)
    a = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    b = np.linspace(0.5, -0.5, 64 * 64, dtype=np.float32).reshape(64, 64)
    f = primc.jit(lambda x, w: pnp.tanh(x @ w))
    out["grad"] = f(a, b).tolist()
    out["want"] = np.tanh(a.astype(np.float64) @ b).tolist()
  elif args == ["many"]:  # a program of several kernels, one of them threaded
    a = np.linspace(-1, 1, 256 * 128, dtype=np.float32).reshape(256, 128)
    b = np.linspace(0.02, -0.01, 128 * 128, dtype=np.float32).reshape(128, 128)
    f = primc.jit(lambda x, w: (pnp.exp(pnp.tanh(x) @ w) - 0.25, pnp.sum(x * x, axis=1)))
    out["grad"] = [r.tolist() for r in f(a, b)]
  else:
    f = primc.jit(primc.grad(loss))
    out["grad"] = f(w, x).tolist()
    if args == ["two"]:
      second = primc.jit(lambda a: pnp.exp(a) * 3.0)
      out["second"] = second(x).tolist()
  if args[:1] != ["shapes"]:  # the programs' region kernels, each compiled or loaded once
    kernels = {
      k
      for g in (f, locals().get("second"))
      if g
      for exe, _ in g._compiled.values()
      for k in exe.plan.kernels
    }
    out["kernels"] = len(kernels)
  stats = primc.cache_stats()
  stats.pop("load_seconds", None)
  print(
    json.dumps(
      {
        "stats": stats,
        "numba_imported": "numba" in sys.modules,
        "scipy_imported": "scipy" in sys.modules,
        **out,
      }
    )
  )


if __name__ == "__main__":
  sys.exit(main())
