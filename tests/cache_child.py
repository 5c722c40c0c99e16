"""Run in a fresh process by test_cache.py: compiles a small program (with `threaded`, an
elementwise one large enough for a threaded kernel), prints its cache statistics and
results as JSON."""
import json
import sys

import numpy as np

import primc
import primc.numpy as pnp


def loss(w, x):
  return pnp.sum(pnp.tanh(x @ w) ** 2)


def main():
  if sys.argv[1:] == ["threaded"]:
    x = np.linspace(-3, 3, 1 << 16, dtype=np.float32).reshape(256, 256)
    g = primc.jit(primc.grad(lambda x: pnp.sum(pnp.tanh(x))))(x)[::64, ::64]
  else:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    w = np.linspace(0.5, -0.5, 6, dtype=np.float32).reshape(3, 2)
    g = primc.jit(primc.grad(loss))(w, x)
  stats = primc.cache_stats()
  stats.pop("load_seconds", None)
  print(json.dumps({"stats": stats, "grad": g.tolist()}))


if __name__ == "__main__":
  sys.exit(main())
