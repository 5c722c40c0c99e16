"""The native entry (codegen.native): the steady call of a compiled program. It must take
exactly the arguments the driver can read (anything else goes to the general path, which
converts it), count references right, and report a failed driver instead of returning
garbage; the ctypes fallback must give the same results."""

import sys

import numpy as np
import pytest
from numba import carray, cfunc

import primc
import primc.numpy as pnp
from primc.codegen import native
from primc.tree import LEAF

R = np.random.default_rng(7)
f32 = lambda *s: R.uniform(-1, 1, s).astype(np.float32)


def program(x, y):
  return pnp.tanh(x) * y, pnp.sum(x * y, axis=1)


def reference(x, y):
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  return np.tanh(x) * y, np.sum(x * y, axis=1)


def check(got, x, y):
  dtype = np.result_type(np.asarray(x).dtype.newbyteorder("="), y)
  for g, w in zip(got, reference(x, y), strict=True):
    assert type(g) is np.ndarray and g.dtype == dtype and g.flags.c_contiguous
    np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6)


def test_small_programs_run_on_the_native_entry():
  assert native.available()  # CPython on a 64-bit machine with numpy's usual layout
  f = primc.jit(program)
  x, y = f32(3, 4), f32(3, 4)
  check(f(x, y), x, y)
  check(f(x, y), x, y)
  assert type(f._hot).__name__ == "builtin_function_or_method"
  out = f(x, y)
  assert type(out) is tuple and all(o.flags.owndata and o.base is None for o in out)


def test_arguments_the_entry_does_not_take_still_give_right_results():
  f = primc.jit(program)
  x, y = f32(3, 4), f32(3, 4)
  f(x, y), f(x, y)

  class Sub(np.ndarray):
    pass

  raw = np.zeros(3 * 4 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(3, 4)  # unaligned
  raw[...] = x
  assert not raw.flags.aligned
  others = [
    (x.astype(">f4"), y),
    (x.view(Sub), y),
    (raw, y),
    (np.asfortranarray(x), y),
    (x[:, ::-1], y),
    (x.astype(np.float64), y),
  ]
  for a, b in others:
    check(f(a, b), a, b)
    check(f(x, y), x, y)  # and the entry again
  assert f._hot(x.astype(">f4"), y) is None and f._hot(raw, y) is None
  assert f._hot(x) is None and f._hot(x, y, y) is None and f._hot(x, 1.0) is None
  assert f._hot(x[:2], y[:2]) is None and f._hot(x.reshape(12), y.reshape(12)) is None


def test_steady_calls_keep_reference_counts():
  f = primc.jit(program)
  x, y = f32(5, 2), f32(5, 2)
  f(x, y)
  out = f(x, y)
  float32 = np.dtype(np.float32)
  counts = sys.getrefcount(x), sys.getrefcount(y), sys.getrefcount(float32)
  for _ in range(2000):
    out = f(x, y)
  assert (sys.getrefcount(x), sys.getrefcount(y)) == counts[:2]
  # each live output holds one reference to its dtype; nothing else may stay behind
  assert sys.getrefcount(float32) == counts[2]
  assert [sys.getrefcount(out[k]) for k in range(2)] == [2, 2]  # the tuple and the argument
  del out
  assert sys.getrefcount(float32) == counts[2] - 2


def _failing_driver():
  from numba import types

  @cfunc(types.int64(types.CPointer(types.voidptr)))
  def driver(p):
    sz = carray(p[0], (1,), np.int64)
    if sz[0] < 0:
      raise ValueError("negative size")
    out = carray(p[3], (2,), np.float32)  # p[1]: the error record
    x = carray(p[2], (2,), np.float32)
    out[0], out[1] = x[1], x[0]
    return 1

  return driver


@pytest.mark.parametrize("result", ["leaf", "tuple", "list"])
def test_a_failed_driver_raises_and_releases_its_outputs(result, monkeypatch):
  unraisable = []
  monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
  driver = _failing_driver()
  for size, fails in ((2, False), (-1, True)):
    sizes = np.array([size], np.int64)
    float32 = np.dtype(np.float32)
    spec = native.EntrySpec(
      inputs=((float32, (2,)),),
      consts=(),
      outputs=((True, (2,), id(float32)),),
      buffers=(),
      stack_arena=True,
      views=(),
      sizes=sizes.ctypes.data,
      driver=driver.address,
      result=result,
    )
    run = native.entry(spec, (sizes, float32, driver))
    x = np.array([1.0, 2.0], np.float32)
    before = sys.getrefcount(float32)
    if fails:
      with pytest.raises(RuntimeError, match="failed"):
        run(x)
      assert "negative size" in str(unraisable[-1].exc_value)  # numba reported the cause
      assert sys.getrefcount(float32) == before
    else:
      got = run(x)
      got = got if result == "leaf" else got[0]
      assert type(run(x)) is {"leaf": np.ndarray, "tuple": tuple, "list": list}[result]
      np.testing.assert_array_equal(got, [2.0, 1.0])


def test_the_ctypes_fallback_gives_the_same_results(monkeypatch):
  monkeypatch.setattr(native, "available", lambda: False)
  f = primc.jit(lambda x, y: (pnp.exp(x) - y, pnp.max(x * y)))  # not the same program
  x, y = f32(4, 3), f32(4, 3)
  for _ in range(3):
    a, m = f(x, y)
    np.testing.assert_allclose(a, np.exp(x) - y, rtol=2e-6)
    np.testing.assert_allclose(m, np.max(x * y), rtol=2e-6)
  assert type(f._hot).__name__ == "function"  # the generated Python runner
  assert f._hot(x.astype(">f4"), y) is None and f._hot(x[:2], y[:2]) is None


def test_large_outputs_and_arenas_take_the_pooled_runner():
  f = primc.jit(lambda x: pnp.tanh(pnp.tanh(x) * 2.0 + pnp.sum(x)))
  x = f32(200, 200)  # 160 kB: a pooled output and an arena above the stack limit
  for _ in range(3):
    np.testing.assert_allclose(f(x), np.tanh(np.tanh(x) * 2 + x.sum()), rtol=1e-5, atol=2e-6)
  assert type(f._hot).__name__ == "function"


def test_flat_forms():
  from primc.codegen.executor import _flat_form
  from primc.tree import TreeDef

  tup = TreeDef("tuple", None, (LEAF, LEAF))
  assert _flat_form(LEAF, 1) == "leaf" and _flat_form(tup, 2) == "tuple"
  assert _flat_form(None, 3) == "list" and _flat_form(LEAF, 0) is None
  assert _flat_form(TreeDef("tuple", None, (LEAF, tup)), 3) is None
  assert _flat_form(TreeDef("dict", ("a",), (LEAF,)), 1) is None


def test_integer_arrays_of_an_equal_but_distinct_c_type():
  # numpy's int64 is C long here; an array of C long long has an equal dtype but another
  # type number, which the entry checks
  f = primc.jit(lambda i, x: pnp.take(x, i) * 2.0)
  x = f32(6)
  for idx in (
    np.array([0, 5, 2], np.int64),
    np.array([0, 5, 2], dtype="q"),
    np.array([3, 1], np.int32),
  ):
    np.testing.assert_allclose(f(idx, x), x[idx] * 2, rtol=1e-6)
  longlong = np.array([0, 5, 2], dtype="q")
  exe = next(e for e, _ in f._compiled.values() if e.plan.in_avals[0].dtype == "int64")
  np.testing.assert_allclose(exe([longlong, x])[0], x[longlong] * 2, rtol=1e-6)


def _argument_forms():
  """Every kind of argument a caller may pass one after another: arrays of each rank
  (0-d included) and of equal sizes in other shapes, dtypes, strided and byte-swapped
  views, numpy and Python scalars."""
  from hypothesis import strategies as st

  shapes = st.sampled_from([(), (1,), (3,), (1, 3), (3, 1), (2, 3), (1, 1, 1)])
  dtypes = st.sampled_from([np.float32, np.float64, np.int32])
  arrays = st.builds(
    lambda s, d, seed: np.random.default_rng(seed).uniform(-3, 3, s).astype(d),
    shapes,
    dtypes,
    st.integers(0, 9),
  )
  views = arrays.map(lambda a: np.repeat(a[..., None], 2, -1)[..., 0] if a.ndim else a)
  swapped = arrays.map(lambda a: a.astype(a.dtype.newbyteorder(">")))
  scalars = st.one_of(
    st.floats(-3, 3).map(np.float32),
    st.floats(-3, 3).map(np.float64),
    st.floats(-3, 3),
    st.integers(-3, 3),
    st.integers(-3, 3).map(np.int32),
  )
  return st.one_of(arrays, views, swapped, scalars)


_SEQUENCE_FN = primc.jit(lambda x: (x * x + x, pnp.sum(x * 2)))


def test_any_sequence_of_argument_forms_gives_numpys_results():
  """The hot entry of one call meets the next call's arguments, whatever they are (a 0-d
  array after a (1,) one used to crash the entry reading dims it does not have)."""
  from hypothesis import HealthCheck, given, settings
  from hypothesis import strategies as st

  @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
  @given(st.lists(_argument_forms(), min_size=2, max_size=6))
  def run(args):
    for x in args:
      a = np.asarray(x).astype(np.asarray(x).dtype.newbyteorder("="))
      want_dtype = primc.trace.as_array(x).dtype.newbyteorder("=")
      for _ in range(2):  # the second call takes the fast path
        y, s = _SEQUENCE_FN(x)
        assert type(y) is np.ndarray and y.shape == a.shape and y.dtype == want_dtype
        w = a.astype(np.float64)
        np.testing.assert_allclose(y, w * w + w, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(s, np.sum(w * 2), rtol=1e-5, atol=1e-4)

  run()


@pytest.mark.parametrize(
  "x",
  [np.float32(0.5), np.float64(0.5), 0.5, np.array(0.5)],
  ids=["np.float32", "np.float64", "float", "0-d"],
)
def test_scalars_and_0d_arrays_take_the_native_entry(x, monkeypatch):
  f = primc.jit(primc.grad(primc.grad(lambda t: pnp.tanh(t * 1.0))))
  want = f(x)
  f(np.ones((1,), np.asarray(want).dtype))  # another signature's entry in between
  f(x)
  monkeypatch.setattr(f, "_call", lambda *a: pytest.fail("took the general path"))
  for _ in range(3):
    got = f(x)
    assert type(got) is np.ndarray and got.shape == () and got.dtype == want.dtype
    assert got == want


def test_arenas_are_shared_across_sizes_and_distinct_across_threads():
  """A program at a new size runs in an arena block an earlier size gave back (no fresh
  pages); concurrent calls each take their own block and get their own right results."""
  import threading
  from primc.codegen import executor

  f = primc.jit(lambda x, w: pnp.sum(pnp.tanh(pnp.tanh(x @ w) @ w.T) ** 2, axis=1))
  w = R.standard_normal((64, 64)).astype(np.float32) / 8
  want = lambda x: np.sum(np.tanh(np.tanh(x @ w) @ w.T) ** 2, axis=1)
  x = R.standard_normal((4096, 64)).astype(np.float32)
  np.testing.assert_allclose(f(x, w), want(x), rtol=2e-5)
  free = {id(b) for b in executor.BLOCKS._free}
  for n in (4000, 3000, 1):
    np.testing.assert_allclose(f(x[:n], w), want(x[:n]), rtol=2e-5)
    assert {id(b) for b in executor.BLOCKS._free} == free  # the same blocks, none new
  results = {}

  def call(k):
    xs = x[k * 512 : (k + 1) * 512] * (k + 1)
    for _ in range(20):
      got = f(xs, w)
    results[k] = np.allclose(got, want(xs), rtol=2e-5)

  threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert results == {k: True for k in range(4)}


def test_a_larger_size_reuses_the_memory_of_smaller_blocks(monkeypatch):
  """A size no free block fits drops the smaller free blocks (nothing else holds them, so
  their pages go back for the new block) and takes a block of the next size class, which
  then serves slightly larger sizes too; results stay right throughout."""
  import gc
  import weakref
  from primc.codegen import executor

  monkeypatch.setattr(executor, "BLOCKS", executor.ArenaBlocks())  # this test's pool
  f = primc.jit(lambda x, w: pnp.sum(pnp.tanh(pnp.tanh(x @ w) @ w.T) ** 2, axis=1))
  w = R.standard_normal((64, 64)).astype(np.float32) / 8
  want = lambda x: np.sum(np.tanh(np.tanh(x @ w) @ w.T) ** 2, axis=1)
  x = R.standard_normal((6000, 64)).astype(np.float32)
  np.testing.assert_allclose(f(x[:1000], w), want(x[:1000]), rtol=2e-5)
  small = [weakref.ref(b) for b in executor.BLOCKS._free]
  np.testing.assert_allclose(f(x[:5000], w), want(x[:5000]), rtol=2e-5)
  need = max(exe.arena_bytes for exe, _ in f._compiled.values())
  gc.collect()
  assert all(r() is None or r().size >= need for r in small)  # the smaller ones freed
  blocks = {id(b) for b in executor.BLOCKS._free}
  for n in (5001, 5050, 5100):  # within the size class: the same block
    np.testing.assert_allclose(f(x[:n], w), want(x[:n]), rtol=2e-5)
    assert {id(b) for b in executor.BLOCKS._free} == blocks


def test_arena_size_classes():
  from primc.codegen.executor import ArenaBlocks

  size_class = ArenaBlocks.size_class
  for n in list(range(0, 70000, 97)) + [2**k + d for k in range(12, 40) for d in (-1, 0, 1)]:
    c = size_class(n)
    assert n <= c <= max(n * 1.125, 4096)
    assert size_class(c) == c  # a class is its own class


def test_an_arena_block_the_system_refuses_is_a_memory_error():
  from primc.codegen.executor import Block

  with pytest.raises(MemoryError, match="cannot map"):
    Block(1 << 60)
  assert Block(0).size == 0 and Block(4096).memory.size == 4096


@pytest.mark.parametrize("n_views", [3, 2000])
def test_an_entry_fills_its_table_by_loops_whatever_its_size(n_views):
  # the constants' addresses and the arena views are written by loops: the entry's code
  # has the same size for 3 views as for 2,000 (straight-line code took LLVM 21 s for a
  # plan of 16,000); the table the driver gets is the one `pointer_table` describes
  import ctypes

  seen = []
  table_size = 2 + 1 + 3 + 1 + n_views

  @ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))
  def driver(p):
    seen.append([p[k] or 0 for k in range(table_size)])
    return 1

  consts = [np.arange(3.0) + k for k in range(3)]
  buffers = (256, 64)
  views = tuple((k % 2, 8 * (k % 7)) for k in range(n_views))
  sizes = np.zeros(1, np.int64)
  float32 = np.dtype(np.float32)
  spec = native.EntrySpec(
    inputs=((float32, (2,)),),
    consts=tuple(c.ctypes.data for c in consts),
    outputs=((True, (2,), id(float32)),),
    buffers=buffers,
    stack_arena=True,
    views=views,
    sizes=sizes.ctypes.data,
    driver=ctypes.cast(driver, ctypes.c_void_p).value,
    result="leaf",
  )
  ir_text = native.entry_ir(spec, "probe")
  assert ir_text.count("getelementptr") < 100, ir_text.count("getelementptr")
  run = native.entry(spec, (sizes, float32, driver, consts))
  x = np.ones(2, np.float32)
  out = run(x)
  assert out.shape == (2,) and out.dtype == float32
  [table] = seen
  assert table[0] == sizes.ctypes.data and table[2] == x.ctypes.data
  assert table[3:6] == [c.ctypes.data for c in consts]
  assert table[6] == out.ctypes.data
  starts = native.arena_starts(buffers)
  base = table[7] - starts[views[0][0]] - views[0][1]  # the arena's start on the stack
  assert table[7:] == native.pointer_table(0, 0, [], [], [], [base + s for s in starts], views)[2:]
