"""`make demo`: trace, differentiate, optimize, compile and run the seeds' programs,
printing each optimized program, its results (checked against the interpreter) and
timings. Compiled kernels are cached on disk: the second run is much faster."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import primc  # noqa: E402
import seed_programs as seeds  # noqa: E402


def show(title, fn, *args, print_program=True):
  """Traces, optimizes, compiles and runs `fn`; prints the program, results and timings."""
  t0 = time.perf_counter()
  jitted = primc.jit(fn)
  lowered = jitted.lower(*args)
  t1 = time.perf_counter()
  result = jitted(*args)
  t2 = time.perf_counter()
  steady = []
  for _ in range(200):
    t = time.perf_counter()
    jitted(*args)
    steady.append(time.perf_counter() - t)
  flat = result if isinstance(result, (list, tuple)) else [result]
  interpreted = primc.interpret(lowered.traced, *args)
  agree = all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(flat, interpreted))
  print(f"== {title}")
  print(
    f"   {len(lowered.traced.eqns)} equations traced, {len(lowered.optimized.eqns)} after "
    f"passes, {len(lowered.fused.eqns)} kernels; trace+passes+codegen "
    f"{1e3 * (t1 - t0):.0f} ms, first call {1e3 * (t2 - t1):.0f} ms, steady "
    f"{1e6 * sorted(steady)[100]:.1f} µs; compiled == interpreter: {agree}"
  )
  if print_program:
    print(lowered.optimized)
  for r in flat:
    print("  ->", np.array2string(np.asarray(r), precision=7))
  print()
  return flat


def main():
  rng = np.random.default_rng(0)
  x1 = np.ones((1,), np.float32)
  x = rng.random((2, 2), dtype=np.float32)
  w = rng.standard_normal((2, 2)).astype(np.float32)
  b = np.zeros((2, 2), np.float32)
  show("tanh", seeds.tanh, x1)
  d = show(
    "tanh 1st-3rd derivatives at x=1 (seed prints [0.41997433] [-0.6397] [0.6216267])",
    seeds.tanh_derivatives,
    x1,
  )
  print("  seed check:", " ".join(str(v) for v in d), "\n")
  show("MyNet forward tanh(x @ W + b)", seeds.mynet_forward, x, w, b)
  show("MyNet loss norm(grad(grad(y, x), x))", seeds.mynet_loss, x, w, b)
  zeros = np.zeros((2, 2), np.float32)
  show(
    "MyNet training step: loss, grads wrt (W, b), Adam update",
    seeds.mynet_train_step,
    x,
    w,
    b,
    zeros,
    zeros,
    zeros,
    zeros,
    np.ones((), np.float32),
    print_program=False,
  )
  xs, ys = (
    rng.standard_normal((2, 8)).astype(np.float32),
    rng.standard_normal((2, 8)).astype(np.float32),
  )
  show("multiply", seeds.multiply, xs, ys)
  jac = primc.jacrev(seeds.multiply, argnums=(0, 1))
  show("Jacobian of multiply wrt (x, y)", lambda x, y: jac(x[0], y[0]), xs, ys)


def seed_styles():
  """The seeds' four ways to differentiate, each from its own example file, and the
  dynamic-graph seed's convolutional network."""
  import convnet
  import eager_tape
  import functional
  import grad_manager
  import static_programs

  for module in (static_programs, eager_tape, functional, grad_manager, convnet):
    t0 = time.perf_counter()
    module.main()
    print(f"({module.__name__} took {time.perf_counter() - t0:.2f} s)\n")


def control_flow_and_custom_rules():
  """primc.lax loops and a custom derivative rule, compiled."""
  from primc import lax

  def newton_sqrt(a):  # 8 Newton steps for sqrt(a): a loop, differentiable in reverse
    return lax.fori_loop(0, 8, lambda i, x: 0.5 * (x + a / x), a)

  a = np.array([2.0, 9.0])
  t0 = time.perf_counter()
  print("== fori_loop: Newton's sqrt and its gradient (1 / (2 sqrt a)), compiled")
  print(
    "  ->",
    primc.jit(newton_sqrt)(a),
    primc.jit(primc.grad(lambda a: primc.numpy.sum(newton_sqrt(a))))(a),
    f"({time.perf_counter() - t0:.2f} s)\n",
  )


def on_dask():
  """primc.dask on a LocalCluster of 2 worker processes: a data-parallel gradient."""
  import dask.array as da
  from distributed import Client, LocalCluster
  from primc import dask as pdask

  pnp = primc.numpy
  rng = np.random.default_rng(1)
  data = rng.uniform(-1, 1, (4096, 3))
  w = rng.standard_normal(2)
  loss = lambda w, chunk: pnp.mean((pnp.tanh(chunk[:, :2] @ w) - chunk[:, 2]) ** 2)
  t0 = time.perf_counter()
  with (
    LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
    Client(cluster),
  ):
    value, grad = pdask.value_and_grad(loss, w, da.from_array(data, chunks=(1024, 3)))
  one_value, one_grad = primc.value_and_grad(loss)(w, data)
  print("== primc.dask: loss and gradient over 4 chunks on 2 worker processes")
  print(
    "  ->",
    value,
    grad,
    "(one process:",
    one_value,
    one_grad,
    ")",
    f"({time.perf_counter() - t0:.2f} s)\n",
  )


if __name__ == "__main__":
  main()
  seed_styles()
  control_flow_and_custom_rules()
  on_dask()
