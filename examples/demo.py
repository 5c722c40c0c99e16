"""`make demo`: trace, differentiate and run the seeds' programs, printing each program,
its result and the time taken."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import primc  # noqa: E402
import seed_programs as seeds  # noqa: E402


def show(title, fn, *args):
  t0 = time.perf_counter()
  program = primc.make_program(fn)(*args)
  t1 = time.perf_counter()
  result = primc.interpret(program, *args)
  t2 = time.perf_counter()
  print(f"== {title}: {len(program.eqns)} equations "
        f"(trace {1e3 * (t1 - t0):.1f} ms, interpret {1e3 * (t2 - t1):.2f} ms)")
  print(program)
  for r in result:
    print("  ->", np.array2string(r, precision=7))
  print()
  return result


def main():
  rng = np.random.default_rng(0)
  x1 = np.ones((1,), np.float32)
  x = rng.random((2, 2), dtype=np.float32)
  w = rng.standard_normal((2, 2)).astype(np.float32)
  b = np.zeros((2, 2), np.float32)
  show("tanh", seeds.tanh, x1)
  d = show("tanh 1st-3rd derivatives at x=1 (seed prints [0.41997433] [-0.6397] [0.6216267])",
           seeds.tanh_derivatives, x1)
  print("  seed check:", " ".join(str(v) for v in d), "\n")
  show("MyNet forward tanh(x @ W + b)", seeds.mynet_forward, x, w, b)
  show("MyNet loss norm(grad(grad(y, x), x))", seeds.mynet_loss, x, w, b)
  xs, ys = rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((2, 8)).astype(np.float32)
  show("multiply", seeds.multiply, xs, ys)
  jac = primc.jacrev(seeds.multiply, argnums=(0, 1))
  show("Jacobian of multiply wrt (x, y)", lambda x, y: jac(x[0], y[0]), xs, ys)


if __name__ == "__main__":
  main()
