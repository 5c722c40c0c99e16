"""Compiled code against the interpreter and numpy: seed programs, every primc.numpy op,
random programs at derivative orders 0-3; NaN/inf; kernel and compile counts."""

import os
import re
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc.codegen import loader
from primc.tree import tree_flatten

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import seed_programs as seeds  # noqa: E402
from test_numpy import OPS  # noqa: E402

R = np.random.default_rng(0)
f32 = lambda *s: R.random(s, dtype=np.float32)


def check_compiled(fn, *args, rtol=2e-6, atol=2e-6):
  """jit(fn)(*args) equals the interpreter on the same traced program."""
  compiled = primc.jit(fn)(*args)
  program = primc.make_program(fn)(*args)
  want = primc.interpret(program, *tree_flatten(list(args))[0])
  got = tree_flatten(compiled)[0]
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
  return compiled


def test_seed_tanh_derivatives_from_compiled_code():
  d1, d2, d3 = check_compiled(seeds.tanh_derivatives, np.ones((1,), np.float32))
  np.testing.assert_allclose([d1[0], d2[0], d3[0]], [0.41997433, -0.6397, 0.6216267], rtol=1e-6)


def test_seed_programs_compiled_equal_interpreted():
  x, w, b = f32(2, 2), f32(2, 2), f32(2)
  check_compiled(seeds.mynet_forward, x, w, b)
  check_compiled(seeds.mynet_loss, x, w, f32(2, 2))
  args = (f32(2, 2), f32(2, 2), f32(2, 2), *[np.zeros((2, 2), np.float32)] * 4, np.float32(1))
  check_compiled(seeds.mynet_train_step, *args)
  xs, ys = f32(2, 8), f32(2, 8)
  check_compiled(seeds.multiply, xs, ys)
  check_compiled(primc.jacrev(seeds.multiply, argnums=(0, 1)), xs[0], ys[0])


@pytest.mark.parametrize("group", range(6))
def test_every_numpy_op_compiled_equals_numpy(group):
  ops = OPS[group::6]

  def many(*args):
    outs, it = [], iter(args)
    for _, op, _, op_args in ops:
      outs.append(op(*[next(it) for _ in op_args]))
    return outs

  flat_args = [a for _, _, _, op_args in ops for a in op_args]
  got = primc.jit(many)(*flat_args)
  for (name, _, ref, op_args), g in zip(ops, got):
    want = ref(*op_args)
    gl = tree_flatten(g)[0]
    wl = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
    for a, b in zip(gl, wl):
      np.testing.assert_allclose(np.asarray(a), b, rtol=3e-6, atol=3e-6, err_msg=name)


UNARY = [
  pnp.sin,
  pnp.cos,
  pnp.tanh,
  pnp.exp,
  lambda x: pnp.log(1.5 + x * x),
  pnp.sigmoid,
  lambda x: x * x,
  lambda x: pnp.sqrt(x * x + 0.5),
  pnp.abs,
]
BINARY = [pnp.add, pnp.subtract, pnp.multiply, lambda x, y: x / (2.0 + y * y), pnp.maximum]


@st.composite
def programs(draw):
  shape_a = draw(st.sampled_from([(3,), (2, 3), (1, 3), (2, 1), ()]))
  shape_b = draw(st.sampled_from([(3,), (2, 3), (1, 3), ()]))
  steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 50)), min_size=1, max_size=4))
  reduce_last = draw(st.booleans())

  def f(a, b):
    v = a
    for binary, k in steps:
      v = BINARY[k % len(BINARY)](v, b) if binary else UNARY[k % len(UNARY)](v)
    return pnp.sum(v * v) if reduce_last else v

  rng = np.random.default_rng(draw(st.integers(0, 1000)))
  return f, rng.uniform(-1, 1, shape_a), rng.uniform(-1, 1, shape_b)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 3))
def test_random_programs_compiled_at_derivative_orders(program, order):
  f, a, b = program
  g = f
  for _ in range(order):
    g = (lambda h: lambda x, y: pnp.sum(primc.grad(lambda u, w: pnp.sum(h(u, w)))(x, y)))(g)
  fn = g if order else f
  check_compiled(fn, a, b, rtol=1e-9, atol=1e-9)


def test_nan_and_inf_propagate_as_in_numpy():
  x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e-40], np.float32)
  fns = [
    pnp.exp,
    pnp.log,
    pnp.tanh,
    pnp.sin,
    pnp.cos,
    pnp.sqrt,
    pnp.sign,
    pnp.abs,
    lambda x: x / 0.0,
    lambda x: pnp.maximum(x, 0.0),
    lambda x: pnp.minimum(x, np.nan),
    lambda x: x - x,
    lambda x: x * 0.0,
    lambda x: pnp.sum(x),
    lambda x: pnp.max(x),
  ]
  got = primc.jit(lambda x: [f(x) for f in fns])(x)
  with np.errstate(all="ignore"):
    want = [
      np.exp(x),
      np.log(x),
      np.tanh(x),
      np.sin(x),
      np.cos(x),
      np.sqrt(x),
      np.sign(x),
      np.abs(x),
      x / np.float32(0),
      np.maximum(x, 0),
      np.minimum(x, np.nan),
      x - x,
      x * 0,
      np.sum(x),
      np.max(x),
    ]
  for k, (g, w) in enumerate(zip(got, want)):
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=str(k))
    np.testing.assert_array_equal(
      np.isinf(g) * np.sign(g), np.isinf(w) * np.sign(w), err_msg=str(k)
    )
    finite = np.isfinite(w)
    np.testing.assert_allclose(g[finite], w[finite], rtol=3e-7, atol=1e-37, err_msg=str(k))


def test_large_sin_cos_arguments_take_the_precise_path():
  x = np.array([0.5, 3e5, 1e7, 1e20, -4e30], np.float32)
  s, c = primc.jit(lambda x: (pnp.sin(x), pnp.cos(x)))(x)
  np.testing.assert_allclose(s, np.sin(x), atol=1e-6)
  np.testing.assert_allclose(c, np.cos(x), atol=1e-6)
  xd = x.astype(np.float64) * 1e3
  np.testing.assert_allclose(primc.jit(pnp.sin)(xd), np.sin(xd), atol=1e-14)


def test_kernel_counts_for_known_programs():
  plan = lambda f, *a: primc.jit(f).lower(*a)
  kernels = lambda low: re.findall(r"def (k_\w+)\(", low.source)
  steps = lambda low: re.findall(r"^  .* = (k_\w+)#\d+\(", low.source, re.M)
  low = plan(seeds.mynet_forward, f32(2, 2), f32(2, 2), f32(2))
  # kernels in program order, named after what they compute
  assert kernels(low) == ["k_dot", "k_add_tanh"] and steps(low) == ["k_dot", "k_add_tanh"]
  low = plan(lambda x: pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(x), f32(10))
  assert len(kernels(low)) == 1
  # same-shape siblings fuse into one region ...
  low = plan(lambda x, y: (pnp.tanh(x) * 2.0, pnp.tanh(y) * 2.0), f32(6), f32(6))
  assert kernels(low) == ["k_tanh_mul"]
  # ... and identical regions over other shapes share one kernel, run twice
  low = plan(lambda x, y: (pnp.tanh(x) * 2.0, pnp.tanh(y) * 2.0), f32(6), f32(7))
  assert kernels(low) == ["k_tanh_mul"] and steps(low) == ["k_tanh_mul"] * 2


def test_identical_regions_give_byte_identical_source():
  f = lambda x: pnp.tanh(x @ x.T) * 2.0
  a = primc.jit(f).lower(f32(3, 4)).source
  b = primc.jit(f).lower(f32(3, 4)).source
  c = primc.jit(f).lower(f32(5, 7)).source  # other sizes: same code
  assert a == b == c
  assert "# { lambda a:f32[?,?]" in a  # each kernel starts with its region's IR


def test_signatures_kept_bound_the_programs_kept_too(monkeypatch):
  """A loop over ever-new shapes keeps at most SIGNATURES_KEPT executables and the traced
  programs behind them (what a pickled function carries)."""
  monkeypatch.setattr("primc.compile.SIGNATURES_KEPT", 2)
  f = primc.jit(lambda x: pnp.tanh(x) * 2.0)
  for n in range(1, 6):
    x = f32(n)
    np.testing.assert_allclose(f(x), np.tanh(x) * 2.0, rtol=1e-6)
  assert len(f._compiled) == 2 and set(f._programs) == set(f._compiled)


def test_a_batch_size_change_compiles_nothing_new():
  f = primc.jit(lambda x, w: pnp.sum(pnp.tanh(x @ w), axis=0))
  w = f32(3, 5)
  f(f32(4, 3), w)
  before, numba_before = primc.cache_stats(), _numba_counts()
  y = f(f32(9, 3), w)
  after = primc.cache_stats()
  for count in ("modules_loaded", "modules_written"):
    assert after.get(count, 0) == before.get(count, 0)
  assert len(f._compiled) == 2  # re-traced for the new shape ...
  exes = [e for e, _ in f._compiled.values()]
  assert exes[0].kernels == exes[1].kernels  # ... but runs the same compiled kernels
  assert _numba_counts() == numba_before  # neither compiled nor loaded again
  assert y.shape == (5,)


def test_float_constants_are_not_code():
  """A mean over a new batch size divides by another constant: the same kernels run."""
  f = primc.jit(lambda x, w: pnp.mean(pnp.tanh(x @ w) * 0.5 + 1.0, axis=0))
  w = f32(3, 5)
  f(f32(4, 3), w)
  numba_before = _numba_counts()
  for n in (2, 3, 5, 7, 9, 16, 31, 33, 64, 100):  # (1 would simplify x / 1)
    x = f32(n, 3)
    np.testing.assert_allclose(f(x, w), np.mean(np.tanh(x @ w) * 0.5 + 1, axis=0), rtol=2e-6)
  assert _numba_counts() == numba_before  # ten new batch sizes, nothing compiled
  a = primc.jit(lambda x: x * 0.25 - 3.0).lower(f32(4)).source
  b = primc.jit(lambda x: x * 1e30 - 7.5).lower(f32(4)).source
  assert a == b


def _mlp_loss(params, x, y):
  h = x
  for w, b in params[:-1]:
    h = pnp.tanh(h @ w + b)
  w, b = params[-1]
  return pnp.mean((h @ w + b - y) ** 2)


@pytest.mark.parametrize(
  "sizes", [(64, 100, 7, 1, 33, 256, 2, 17, 1000, 5), (3, 1, 7, 2, 17, 33, 64, 100, 150, 5)]
)
def test_ten_batch_sizes_of_a_training_step_compile_once(sizes):
  # a training step (mean over the batch, whose gradient's 2/n is 1 at n = 2; products
  # that are small at some sizes and not at others, in both directions): only the first
  # size compiles; every size is right. (A product first summed inline compiles its
  # product variant past 2^17 multiply-adds, at 228 rows here: see docs/guide/compiling.md.)
  params = [(f32(a, b) * 0.5, f32(b)) for a, b in [(2, 24), (24, 24), (24, 1)]]
  step = primc.jit(primc.value_and_grad(_mlp_loss))
  compiles = lambda: sum(
    primc.cache_stats().get(k, 0) for k in ("kernel_compiles", "worker_compiles")
  )
  for i, n in enumerate(sizes):
    x, y = f32(n, 2), f32(n, 1)
    before = compiles()
    value, grads = step(params, x, y)
    if i:
      assert compiles() == before, f"batch size {n} compiled a kernel"
    want_value, want_grads = primc.value_and_grad(_mlp_loss)(
      [(w.astype(np.float64), b.astype(np.float64)) for w, b in params],
      x.astype(np.float64),
      y.astype(np.float64),
    )
    np.testing.assert_allclose(value, want_value, rtol=1e-4)
    for got, want in zip(tree_flatten(grads)[0], tree_flatten(want_grads)[0]):
      np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-5)


def test_a_training_step_shares_the_kernels_of_its_gradient():
  # kernels are cached by their own structure: the step (gradient + SGD update) compiles
  # only what the gradient did not have
  params = [(f32(a, b) * 0.5, f32(b)) for a, b in [(2, 24), (24, 24), (24, 1)]]
  x, y = f32(40, 2), f32(40, 1)
  grad = primc.jit(primc.grad(_mlp_loss))
  grad(params, x, y)

  def step(params, x, y):
    g = primc.grad(_mlp_loss)(params, x, y)
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]

  compiles = lambda: sum(
    primc.cache_stats().get(k, 0) for k in ("kernel_compiles", "worker_compiles")
  )
  before = compiles()
  step_jit = primc.jit(step)
  new = step_jit(params, x, y)
  np.testing.assert_allclose(
    new[0][0], params[0][0] - 0.1 * grad(params, x, y)[0][0], rtol=1e-5, atol=1e-6
  )
  ((g_exe, _),) = grad._compiled.values()
  ((s_exe, _),) = step_jit._compiled.values()
  shared = set(g_exe.plan.kernels) & set(s_exe.plan.kernels)
  assert len(shared) >= len(g_exe.plan.kernels) // 2, (len(shared), len(g_exe.plan.kernels))
  assert compiles() - before <= len(s_exe.plan.kernels) - len(shared)


def _numba_counts():
  from primc.codegen import cache

  counts = cache.stats()
  return counts.get("kernel_compiles", 0), counts.get("kernel_cache_loads", 0)


def test_jit_composes_with_transforms():
  x = np.array([0.3, -0.7, 1.1])
  f = lambda x: pnp.sum(pnp.sin(x) * pnp.tanh(x))
  d1 = lambda x: pnp.sum(primc.grad(f)(x))
  d2 = lambda x: pnp.sum(primc.grad(d1)(x))
  d3 = primc.grad(d2)
  np.testing.assert_allclose(primc.jit(d3)(x), d3(x), rtol=1e-12)
  np.testing.assert_allclose(primc.jit(primc.hessian(f))(x), primc.hessian(f)(x), rtol=1e-12)
  np.testing.assert_allclose(
    primc.jit(primc.vmap(f))(np.stack([x, 2 * x])), [f(x), f(2 * x)], rtol=1e-12
  )
  np.testing.assert_allclose(primc.grad(primc.jit(f))(x), primc.grad(f)(x), rtol=1e-12)


def test_out_argument_and_fresh_outputs():
  f = primc.jit(lambda x: (x * 2.0, pnp.tanh(x)))
  x = f32(4)
  a1, b1 = f(x)
  a2, _ = f(x + 1)
  assert not np.shares_memory(a1, a2)
  np.testing.assert_allclose(a1, x * 2)
  o1, o2 = np.empty(4, np.float32), np.empty(4, np.float32)
  r1, r2 = f(x, out=(o1, o2))
  assert r1 is o1 and r2 is o2
  np.testing.assert_allclose(o2, np.tanh(x), rtol=1e-6)
  with pytest.raises(primc.PrimcError, match="out="):
    f(x, out=(np.empty(3, np.float32), o2))


def test_concurrent_calls_use_separate_arenas():
  f = primc.jit(lambda x: pnp.sum(pnp.tanh(x) * pnp.exp(-x), axis=1) + pnp.max(x, axis=1))
  inputs = [f32(50, 40) for _ in range(8)]
  want = [f(x) for x in inputs]
  results = [None] * len(inputs)

  def work(k):
    for _ in range(20):
      results[k] = f(inputs[k])

  threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  for g, w in zip(results, want):
    np.testing.assert_array_equal(g, w)


def test_lower_and_print_after_show_each_stage(capsys, monkeypatch):
  low = primc.jit(seeds.mynet_forward).lower(f32(2, 2), f32(2, 2), f32(2))
  assert "tanh" in low.stage("traced") and "region[kind='dot']" in low.stage("fused")
  assert "def k_dot(phase, lo, hi, p):" in low.stage("source")
  monkeypatch.setenv("PRIMC_PRINT_AFTER", "codegen")
  primc.jit(lambda x: x * 5.0).lower(f32(3))
  assert "--- after codegen" in capsys.readouterr().err


def test_hot_loops_are_vectorized():
  f = primc.jit(lambda x: pnp.tanh(x) * pnp.exp(-x * x))
  f(f32(1000))
  exe = next(iter(f._compiled.values()))[0]
  (module,) = exe.modules
  from primc.codegen import translate  # the kernel as LLVM compiled it (the default)

  asm = translate.assembly(translate.kernel_ir(module.SOURCE, vars(loader.executed(module)), "k"))
  packed = re.findall(r"\bv\w+ps\s+[^\n]*%[yz]mm", asm)
  assert len(packed) > 10, "expected packed (ymm/zmm) float32 instructions"


@pytest.mark.parametrize("case", ["flat", "rows_with_bias", "three_outputs"])
def test_row_block_loops_read_memory_in_order(case):
  # a task's loop starts at a run-time row: its index must be known >= 0, or numba's
  # wrap-around of negative indices turns every contiguous read into a gather (the loop
  # "vectorizes" and runs 8x slower); each kernel compiled here, its optimized IR read
  import numba
  from primc.codegen import kernels, translate

  x, b = f32(256, 64), f32(64)
  fn, args = {
    "flat": (lambda x: pnp.tanh(x) * 2.0 - x, (x.reshape(-1),)),
    "rows_with_bias": (lambda x, b: pnp.tanh(x + b) * x, (x, b)),
    "three_outputs": (lambda x: (pnp.exp(x) - x, x * x + 1.0, pnp.tanh(x) * x), (x,)),
  }[case]
  sources = primc.jit(fn).lower(*args).source.split("# generated by primc")[1:]
  assert sources
  for source in sources:
    source = "# generated by primc" + source[: source.index("\nKERNEL = ")]
    name = source.split("def ")[1].split("(")[0]
    module = loader.executed(loader.load(source + f"\nKERNEL = {name}\n", in_memory=True))
    for compiler, ir in [  # both compilers' optimized IR
      ("numba", numba.cfunc(kernels.SIGNATURE, **kernels.OPTIONS)(module.KERNEL).inspect_llvm()),
      ("llvm", str(translate.optimized(translate.kernel_ir(module.SOURCE, vars(module), "k")))),
    ]:
      assert "vector.body" in ir, f"{name} ({compiler}): no vectorized loop"
      assert "gather" not in ir, f"{name} ({compiler}): contiguous reads became gathers"


def test_concatenate_of_many_operands():
  parts = [f32(2, k, 3) for k in (1, 2, 1, 3)]
  check_compiled(lambda *p: pnp.concatenate(p, axis=1) * 2.0, *parts)
  check_compiled(lambda *p: pnp.stack(p, axis=0) + 1.0, *[f32(4) for _ in range(5)])


@pytest.mark.parametrize("n", [20_000, 100_000])
def test_threaded_loops_compute_every_element(n):
  # regions of at least PARALLEL_MIN elements take the prange path: with and without a
  # sin/cos range counter (a parallel reduction), one and several outputs
  x = R.uniform(-3, 3, n).astype(np.float32)
  y = primc.jit(lambda x: pnp.tanh(x) * 2.0)(x)
  np.testing.assert_allclose(y, 2 * np.tanh(x), rtol=1e-6, atol=1e-6)
  a, b = primc.jit(lambda x: (pnp.exp(-x * x), pnp.sin(x) + 1.0))(x)
  np.testing.assert_allclose(a, np.exp(-x * x), rtol=2e-6, atol=1e-7)
  np.testing.assert_allclose(b, np.sin(x) + 1, rtol=2e-6, atol=1e-6)
  m = primc.jit(lambda x: pnp.tanh(x) + 1.0)(x.reshape(-1, 100))
  np.testing.assert_allclose(m, np.tanh(x.reshape(-1, 100)) + 1, rtol=1e-6, atol=1e-6)


def _dot_reference(a, b, dims):
  """dot_general by numpy's einsum, in float64."""
  (lc, rc), (lb, rb) = dims
  letters = "abcdefgh"
  left = letters[: a.ndim]
  right = [None] * b.ndim
  for i, j in zip(lc + lb, rc + rb):
    right[j] = left[i]
  right = "".join(r or letters[a.ndim + k] for k, r in enumerate(right))
  out = "".join(
    [left[i] for i in lb]
    + [c for i, c in enumerate(left) if i not in lc + lb]
    + [c for j, c in enumerate(right) if j not in rc + rb]
  )
  return np.einsum(f"{left},{right}->{out}", a.astype(np.float64), b.astype(np.float64))


DOT_CASES = {  # name: (lhs shape, rhs shape, dimension numbers): each takes another path
  "row_blocks": ((700, 64), (64, 48), (((1,), (0,)), ((), ()))),
  "row_blocks_rhs_transposed": ((700, 64), (48, 64), (((1,), (1,)), ((), ()))),
  "wide_rows": ((40, 300), (300, 200), (((1,), (0,)), ((), ()))),
  "wide_rows_in_blocks": ((400, 300), (300, 200), (((1,), (0,)), ((), ()))),
  "contraction_parts": ((3000, 24), (3000, 40), (((0,), (0,)), ((), ()))),
  "batched": ((6, 200, 32), (6, 32, 48), (((2,), (1,)), ((0,), (0,)))),
  "batched_lhs_transposed": ((6, 96, 200), (6, 96, 48), (((1,), (1,)), ((0,), (0,)))),
  # rows too few for two blocks: blocks of columns (the last one shorter)
  "column_blocks": ((32, 300), (300, 2000), (((1,), (0,)), ((), ()))),
  "column_blocks_batched": ((3, 48, 200), (3, 200, 1500), (((2,), (1,)), ((0,), (0,)))),
  "column_blocks_many_rows": ((200, 100), (100, 3000), (((1,), (0,)), ((), ()))),
  "one_row": ((1, 3000), (3000, 700), (((1,), (0,)), ((), ()))),
  # one row times a transposed matrix: swapped (c^T = B A^T), B read in place
  "one_row_rhs_transposed": ((1, 3000), (700, 3000), (((1,), (1,)), ((), ()))),
  "one_row_rhs_transposed_batched": ((4, 1, 500), (4, 900, 500), (((2,), (2,)), ((0,), (0,)))),
}


@pytest.mark.parametrize("name", DOT_CASES)
@pytest.mark.parametrize("epilogue", ["none", "elementwise", "reduction"])
def test_threaded_products_compute_every_element(name, epilogue):
  # products of at least DOT_PARALLEL_MIN multiply-adds run in blocks (row blocks with
  # their epilogue rows, contraction parts summed in order, batch items): against numpy
  from primc import prims as P
  from primc.codegen import kernels

  ls, rs, dims = DOT_CASES[name]
  a = R.uniform(-1, 1, ls).astype(np.float32)
  b = R.uniform(-1, 1, rs).astype(np.float32)
  (lc, rc), (lb, rb) = dims
  want = _dot_reference(a, b, dims)
  assert want.size * np.prod([ls[i] for i in lc]) >= kernels.DOT_PARALLEL_MIN
  tail = {
    "none": lambda p: p,
    "elementwise": lambda p: (pnp.tanh(p) * 2.0, p + 1.0),
    "reduction": lambda p: (p * p, pnp.sum(p, axis=0)),
  }[epilogue]
  got = primc.jit(lambda x, y: tail(P.dot_general(x, y, dims)))(a, b)
  expect = {
    "none": lambda p: p,
    "elementwise": lambda p: (np.tanh(p) * 2, p + 1),
    "reduction": lambda p: (p * p, p.sum(axis=0)),
  }[epilogue](want)
  for g, w in zip(tree_flatten(got)[0], tree_flatten(expect)[0]):
    np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * np.abs(w).max())


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
  batch=st.sampled_from([0, 1, 3]),
  m=st.sampled_from([1, 2, 7, 64, 130]),
  k=st.sampled_from([1, 5, 64, 300, 3000]),
  n=st.sampled_from([1, 3, 40, 600, 2000]),
  lhs_transposed=st.booleans(),
  rhs_transposed=st.booleans(),
  dtype=st.sampled_from(["float32", "float64"]),
)
@example(0, 1, 300, 600, False, True, "float32")  # one row, B transposed: swapped, rows summed
@example(3, 1, 300, 600, False, True, "float64")  # ... batched
@example(0, 1, 3000, 600, False, False, "float32")  # one row: loops that stream B
@example(0, 64, 300, 2000, False, False, "float64")  # column blocks
@example(0, 130, 64, 600, True, False, "float32")  # a transposed left operand in place
def test_products_of_every_layout_and_size(batch, m, k, n, lhs_transposed, rhs_transposed, dtype):
  """Compiled products against numpy over the paths the sizes and layouts choose: loops
  (small, one row, one column), BLAS in row blocks, column blocks or contraction parts,
  a transposed left operand in place, a transposed right one copied or (one row) swapped,
  with and without batch dims."""
  from primc import prims as P

  assume(m * k * n * max(batch, 1) <= 4_000_000)
  lead = (batch,) if batch else ()
  nb = len(lead)
  ls = lead + ((k, m) if lhs_transposed else (m, k))
  rs = lead + ((n, k) if rhs_transposed else (k, n))
  lc, rc = (nb if lhs_transposed else nb + 1), (nb + 1 if rhs_transposed else nb)
  dims = (((lc,), (rc,)), (tuple(range(nb)), tuple(range(nb))))
  a = R.uniform(-1, 1, ls).astype(dtype)
  b = R.uniform(-1, 1, rs).astype(dtype)
  got = primc.jit(lambda x, y: P.dot_general(x, y, dims))(a, b)
  want = _dot_reference(a, b, dims)
  tol = 1e-4 if dtype == "float32" else 1e-11
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.parametrize("shapes", [((300, 70), (70, 60)), ((40, 300), (300, 2000))])
def test_integer_products_use_loops(shapes):
  a = R.integers(-5, 5, shapes[0]).astype(np.int32)
  b = R.integers(-5, 5, shapes[1]).astype(np.int32)
  got = primc.jit(lambda x, y: x @ y + 1)(a, b)
  np.testing.assert_array_equal(got, a @ b + 1)


def test_large_outputs_are_reused_only_when_nothing_refers_to_them():
  x = R.uniform(-1, 1, 100_000).astype(np.float32)  # 400 KB: a pooled output
  f = primc.jit(lambda x: x * 2.0)
  kept = f(x)
  view = f(x + 1.0)[::2]
  buffer = memoryview(f(x + 2.0))
  for k in range(3, 9):  # more calls than the pool keeps arrays
    np.testing.assert_array_equal(f(x + float(k)), (x + np.float32(k)) * 2)
  np.testing.assert_array_equal(kept, x * 2)
  np.testing.assert_array_equal(view, ((x + 1) * 2)[::2])
  np.testing.assert_array_equal(np.asarray(buffer), (x + 2) * 2)
  y = f(x)
  address = y.ctypes.data
  del y
  assert f(x).ctypes.data == address  # dropped, so the next call writes into it again


def test_reshape_regions_are_views_whose_buffer_stays_live():
  # reshape-only regions become views of their operand's arena buffer, which must not be
  # reused while a view of it is still to be read (here: `t` is dead after its product,
  # its view is read by the last region)
  from primc.codegen import module

  w1, w2, w3 = f32(12, 5), f32(6, 7), f32(7, 3)

  def f(x):
    t = pnp.tanh(x)
    y = t.reshape(16, 12) @ w1
    z = pnp.exp(t @ w2) @ w3
    return y.reshape(-1)[:48].reshape(16, 3) + pnp.sum(z) + t.reshape(16, 12)[:, :3]

  x = f32(32, 6)
  low = primc.jit(f).lower(x)
  views = [e for e in low.fused.eqns if module._is_view(e, ())]
  assert len(views) == 2
  calls = [line for line in low.source.splitlines() if re.match(r"  .* = k_\w+#\d+\(", line)]
  assert len(calls) == len(low.fused.eqns) - len(views)
  check_compiled(f, x, rtol=1e-5, atol=1e-5)


SMALL_DOT_CASES = {  # products small enough to be summed in the loop over their output
  "matrix": ((2, 3), (3, 2), (((1,), (0,)), ((), ()))),
  "vectors": ((5,), (5,), (((0,), (0,)), ((), ()))),
  "matrix_vector": ((4, 6), (6,), (((1,), (0,)), ((), ()))),
  "both_transposed": ((3, 2), (4, 3), (((0,), (1,)), ((), ()))),
  "batched": ((2, 3, 4), (2, 4, 3), (((2,), (1,)), ((0,), (0,)))),
  "batch_inside": ((3, 2, 4), (4, 2), (((2,), (0,)), ((1,), (1,)))),
  "two_contractions": ((2, 3, 4), (4, 3, 5), (((1, 2), (1, 0)), ((), ()))),
}


@pytest.mark.parametrize("name", SMALL_DOT_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_small_products_are_summed_in_their_epilogue_loop(name, dtype):
  from primc import prims as P

  ls, rs, dims = SMALL_DOT_CASES[name]
  a = R.integers(-4, 5, ls).astype(dtype)
  b = R.integers(-4, 5, rs).astype(dtype)
  want = _dot_reference(a, b, dims).astype(dtype)
  f = lambda x, y: (
    P.dot_general(x, y, dims),
    P.dot_general(x, y, dims) * 3 + 1,
    pnp.sum(P.dot_general(x, y, dims) * 2),
  )
  source = primc.jit(f).lower(a, b).source
  assert "matmul(" not in source and "matmul_loops(" not in source
  got = primc.jit(f)(a, b)
  for g, w in zip(got, (want, want * 3 + 1, np.sum(want * 2))):
    assert g.dtype == np.asarray(w).dtype  # (numpy sums int32 in int64)
    np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
  "shape", [(64, 64, 1), (64, 64, 4), (2, 2, 2), (1, 64, 64), (9, 20, 3), (16, 16, 16), (3, 0, 2)]
)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_product_loops_choose_an_order_and_stay_exact(shape, transposed, dtype):
  # each loop order of blas.matmul_loops (wide right operand; narrow one against rows of
  # the left operand, read in place or transposed) against numpy, set and accumulated
  from primc.codegen.blas import matmul_loops

  m, k, n = shape
  a = R.integers(-8, 9, (k, m) if transposed else (m, k)).astype(dtype)
  a = a.T if transposed else a
  b = R.integers(-8, 9, (k, n)).astype(dtype)
  c = np.full((m, n), 7, dtype)  # every element must be written
  matmul_loops(a, b, c, False)
  np.testing.assert_array_equal(c, a @ b)
  matmul_loops(a, b, c, True)
  np.testing.assert_array_equal(c, 2 * (a @ b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_by_address_against_numpy(dtype):
  # the C entry kernels call (loops up to SMALL_DOT multiply-adds, BLAS above): every
  # operand layout, set and accumulate, columns of wider matrices (the columns beside
  # untouched), empty and degenerate sizes
  import numba
  from primc.codegen import blas

  name = {np.float32: "gemm_f32", np.float64: "gemm_f64"}[dtype]
  gemm = numba.cfunc(blas.EXTERNAL_SIGNATURE, error_model="numpy")(getattr(blas, name)).ctypes
  tol = 1e-5 if dtype == np.float32 else 1e-12
  for m, k, n in [
    (3, 4, 5),
    (64, 64, 1),
    (1, 1, 1),
    (40, 50, 60),
    (300, 7, 2),
    (1, 500, 40),  # one row: loops that stream B, at any size
    (300, 50, 1),  # one column: rows summed in lanes
    (5, 0, 3),
    (0, 4, 3),
    (200, 200, 200),
  ]:
    for ta in (0, 1):
      for acc in (0, 1):
        for wider in (0, 3):  # B and c: columns 2 .. n + 2 of matrices n + wider wide
          stored = R.standard_normal((k, m) if ta else (m, k)).astype(dtype)
          a = stored.T if ta else stored
          b_all = R.standard_normal((k, n + wider)).astype(dtype)
          c_all = R.standard_normal((m, n + wider)).astype(dtype)
          j0 = 2 if wider else 0
          b, c = b_all[:, j0 : j0 + n], c_all[:, j0 : j0 + n]
          want = a.astype(np.float64) @ b + (c if acc else 0)
          outside = np.delete(c_all, np.s_[j0 : j0 + n], axis=1).copy()
          address = lambda x: x.ctypes.data + j0 * x.itemsize
          gemm(ta, m, n, k, stored.ctypes.data, address(b_all), address(c_all), acc, n + wider)
          np.testing.assert_allclose(
            c, want, rtol=tol, atol=tol * max(1, k), err_msg=f"{m}x{k}x{n} ta={ta} acc={acc}"
          )
          np.testing.assert_array_equal(np.delete(c_all, np.s_[j0 : j0 + n], axis=1), outside)


def test_steady_calls_take_other_arguments_through_the_general_path():
  # after a first call, calls skip the signature lookup: the native entry rejects other
  # dtypes, ranks, shapes and layouts; each must still be right
  f = primc.jit(lambda x, y: x * y + 1.0)
  a = R.uniform(-1, 1, (3, 4)).astype(np.float32)
  for _ in range(3):
    np.testing.assert_allclose(f(a, a), a * a + 1, rtol=1e-6)
  frozen = a.copy()
  frozen.flags.writeable = False
  others = [
    (a[:, :3], a[:, 1:]),
    (a.astype(np.float64), a.astype(np.float64)),
    (a.reshape(12), a.reshape(12)),
    (np.asfortranarray(a), a),
    (a[:, ::2], a[:, :2]),
    (frozen, a),
    (a, np.float32(2.0)),
    (a, 2.0),
    (a[:2], a[:2]),
  ]
  for x, y in others:
    got = f(x, y)
    want = np.asarray(x) * np.asarray(y) + 1
    assert got.shape == want.shape and got.dtype == np.result_type(x, y, np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(f(a, a), a * a + 1, rtol=1e-6)  # and back again
  with pytest.raises(TypeError):
    f(a)
  assert primc.grad(lambda x: pnp.sum(f(x, x)))(a).shape == a.shape  # a tracer argument


def test_constants_reach_the_driver_as_one_type():
  # a plan loaded from the cache unpickles writeable constants; the driver, compiled once
  # with compilation then turned off, must take them as it took the read-only originals
  import dataclasses
  from primc.codegen.executor import Executable

  f = primc.jit(lambda x: x * np.arange(1.0, 4.0, dtype=np.float32))
  x = R.uniform(-1, 1, (2, 3)).astype(np.float32)
  np.testing.assert_array_equal(f(x), x * np.arange(1.0, 4.0, dtype=np.float32))
  ((executable, _),) = f._compiled.values()
  assert executable.plan.const_arrays
  unpickled = dataclasses.replace(
    executable.plan, const_arrays=tuple(np.array(c) for c in executable.plan.const_arrays)
  )
  again = Executable.load(unpickled)
  np.testing.assert_array_equal(again([x])[0], x * np.arange(1.0, 4.0, dtype=np.float32))
  assert again.kernels == executable.kernels
  frozen = np.empty((2, 3), np.float32)
  frozen.flags.writeable = False
  with pytest.raises(primc.PrimcError, match="writeable"):
    f(x, out=frozen)


@pytest.mark.primc_both
def test_the_plugin_runs_a_test_compiled_and_interpreted(primc_mode):
  from primc.codegen.executor import Executable

  f = primc.jit(lambda x: pnp.tanh(x) * 2.0)
  x = f32(5)
  np.testing.assert_allclose(f(x), np.tanh(x) * 2, rtol=2e-6)
  ((exe, _),) = f._compiled.values()
  assert isinstance(exe, Executable) == (primc_mode == "compiled")


def test_the_check_grads_fixture_shows_the_first_mismatches(check_grads):
  check_grads(lambda x: pnp.sum(pnp.sin(x) * x), (np.linspace(-1, 1, 4),), order=2)
  # a derivative that is not the function's: jvp sees x*t, finite differences 2*x*t
  bad = lambda x: primc.stop_gradient(x) * x
  with pytest.raises(AssertionError, match=r"entries differ.*\n  at \(0,\): got"):
    check_grads(bad, (np.array([1.0, 2.0]),))


@pytest.mark.parametrize("n", [0, 1, 2, 31, 32, 33, 4095, 4096, 4097, 9000])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_argsort_is_numpys_stable_sort(n, dtype):
  """The sort kernel (insertion-sorted runs, merges within blocks, then across them) on
  row lengths around its run and block sizes, with ties, NaNs, infinities and -0.0:
  numpy's stable order exactly, for rows of every count."""
  rng = np.random.default_rng(n)
  rows = 3
  x = rng.integers(-3, 4, (rows, n)).astype(dtype)
  special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype)
  mask = rng.random((rows, n)) < 0.2
  x[mask] = rng.choice(special, mask.sum())
  f = primc.jit(lambda v: (pnp.argsort(v, axis=1), pnp.sort(v, axis=1), pnp.argsort(v, axis=0)))
  order, values, columns = f(x)
  np.testing.assert_array_equal(order, np.argsort(x, axis=1, kind="stable"))
  np.testing.assert_array_equal(values, np.sort(x, axis=1))
  np.testing.assert_array_equal(columns, np.argsort(x, axis=0, kind="stable"))


def test_equal_regions_of_a_program_are_emitted_once(monkeypatch):
  # three layers of one shape: their regions repeat, and each distinct one is emitted
  # once; the plan is the one emitting every region gives
  from primc.codegen import module
  from primc import passes

  def loss(ws, x):
    for w in ws:
      x = pnp.tanh(x @ w)
    return pnp.mean(x * x)

  ws = [f32(16, 16) for _ in range(3)]
  traced = primc.make_program(primc.value_and_grad(loss))(ws, f32(50, 16))
  fused = passes.fuse(passes.optimize(traced))
  emitted = []
  real = module._kernel
  monkeypatch.setattr(module, "_kernel", lambda *a: emitted.append(1) or real(*a))
  shared = module.build(fused)
  shared_count = len(emitted)
  keys = iter(range(10**6))
  monkeypatch.setattr(module, "region_key", lambda region, kind: next(keys))
  each = module.build(fused)
  regions = len(fused.eqns) - _views(fused)
  assert len(emitted) - shared_count == regions  # each emitted on its own
  assert shared_count <= regions - 2  # regions that repeat: emitted once
  assert shared.to_bytes() == each.to_bytes()


def _views(fused):
  from primc.codegen import module

  out_vars = [a for a in fused.outputs if not isinstance(a, primc.core.Lit)]
  return sum(module._is_view(e, out_vars) for e in fused.eqns)


def test_what_a_loop_does_not_change_is_computed_before_it():
  # a chain of the math library's functions on a broadcast scalar: computed once before
  # the loop (in the loop, LLVM's optimizer took minutes unswitching its branches)
  def f(x):
    v = pnp.sigmoid(-pnp.sigmoid(x) / 2.03)
    v = pnp.exp(pnp.tanh(v)) * 0.21
    v = pnp.expand_dims(pnp.sigmoid(v), 0) * pnp.ones((2,))
    return pnp.max(pnp.exp(pnp.tanh(pnp.cumsum(v, 0))), 0)

  x = np.float32(0.3)
  source = primc.jit(f).lower(x).source
  looped = 0
  for kernel in source.split("def k_")[1:]:
    kernel = kernel[: kernel.index("KERNEL = ")]
    loop = re.search(r"^\s*for \w+ in range", kernel, re.M)
    if loop and "LOAD(ptr2, 0" in kernel:
      looped += 1
      assert "exp_f" not in kernel[loop.start() :] and "tanh_f" not in kernel[loop.start() :], (
        kernel
      )
  assert looped  # (a loop that reads the scalar)
  check_compiled(f, x, rtol=2e-6, atol=2e-6)
  xs = R.uniform(-1, 1, (3, 4)).astype(np.float32)
  check_compiled(lambda x: pnp.exp(pnp.tanh(x[:, :1])) * x + pnp.exp(pnp.sum(x[0])), xs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
  shape=st.lists(st.integers(1, 19), min_size=1, max_size=4),
  axes_seed=st.integers(0, 15),
  dtype=st.sampled_from(["float32", "float64", "int32", "int64"]),
)
def test_sums_along_the_innermost_axis_run_in_lanes_and_stay_right(shape, axes_seed, dtype):
  """A sum over the innermost axis (and any others) adds LANES partial sums, rows of any
  length (the tail below a multiple of LANES included): float sums agree with float64
  sums to rounding, integer sums exactly (wrapping as numpy's), and the kernel runs the
  lanes vectorized."""
  from primc.codegen import kernels

  nd = len(shape)
  axes = tuple(sorted({nd - 1} | {d for d in range(nd - 1) if axes_seed >> d & 1}))
  x = (np.random.default_rng(axes_seed).standard_normal(shape) * 1e3).astype(dtype)
  f = primc.jit(lambda x: pnp.sum(x, axis=axes))
  got = f(x)
  if dtype.startswith("int"):
    np.testing.assert_array_equal(got, np.sum(x, axis=axes, dtype=dtype))
  else:
    want = np.sum(x.astype(np.float64), axis=axes)
    scale = np.sum(np.abs(x.astype(np.float64)), axis=axes) + 1
    assert np.all(np.abs(got - want) <= 4 * np.finfo(dtype).eps * scale)
  if shape[-1] >= kernels.LANES:  # (a sum of shorter rows may be simplified otherwise)
    exe = next(iter(f._compiled.values()))[0]
    assert any("lane" in m.SOURCE for m in exe.modules)


def test_lanes_vectorize():
  f = primc.jit(lambda x: pnp.sum(x, axis=(0, 2)))
  f(f32(16, 8, 300))
  exe = next(iter(f._compiled.values()))[0]
  from primc.codegen import translate

  (module,) = [m for m in exe.modules if "lane" in m.SOURCE]
  asm = translate.assembly(translate.kernel_ir(module.SOURCE, vars(loader.executed(module)), "k"))
  assert len(re.findall(r"\bvaddpd\s", asm)) >= 4, "expected packed float64 adds (the lanes)"
