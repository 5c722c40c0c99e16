"""Fusion: region counts for known programs, a reason for every boundary, fused programs
equal to the originals, DCE of unused region outputs."""

import os
import sys

import numpy as np
import pytest

from primc import passes
import primc
import primc.numpy as pnp
from primc.core import Var
from primc.passes import dce, fuse, fusion
from primc.passes.fusion import region_p
from primc.tree import tree_flatten

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import seed_programs as seeds  # noqa: E402

R = np.random.default_rng(0)
f32 = lambda *s: R.random(s, dtype=np.float32)


def fused(fn, *args):
  program = passes.optimize(primc.make_program(fn)(*args))
  out = fuse(program)
  primc.typecheck(out)
  flat = tree_flatten(list(args))[0]
  got = primc.interpret(out, *flat)
  want = primc.interpret(program, *flat)
  for g, w in zip(got, want, strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
  assert len(out.reasons) == len(out.regions)  # every region boundary has a reason
  return out


def test_elementwise_chain_is_one_region():
  out = fused(lambda x, y: pnp.sin(x) * pnp.exp(-x * x) + pnp.tanh(y), f32(100), f32(100))
  assert out.region_kinds == ("loop",)


def test_reduction_ends_a_region_and_siblings_fuse():
  # two reductions of the same domain fuse horizontally; their consumer starts a region
  out = fused(lambda x: pnp.sum(pnp.tanh(x), 1) / pnp.max(x, 1), f32(8, 5))
  assert out.region_kinds == ("loop", "loop")
  assert "div iterates over [8], the region over [8, 5]" in out.reasons[1]
  # ... and a consumer of the same domain is still blocked by the reduction itself
  out = fused(lambda x: pnp.sum(x, keepdims=True) + 1.0, f32(1))
  assert len(out.regions) == 2 and "reads a reduction computed in the region" in out.reasons[1]


def test_broadcast_of_a_computed_value_is_a_boundary():
  out = fused(lambda x: pnp.tanh(x)[:, None] + pnp.ones((4, 3)), f32(4))
  assert len(out.regions) == 2
  assert "iterates over [4, 3], the region over [4]" in out.reasons[1]


def test_mynet_forward_is_a_dot_and_a_loop():
  out = fused(seeds.mynet_forward, f32(2, 2), f32(2, 2), f32(2))
  assert out.region_kinds == ("dot", "loop")
  assert "dot_general" in str(out.regions[0]) and "tanh" in str(out.regions[1])


def test_seed_mynet_training_step_regions():
  args = (f32(2, 2), f32(2, 2), f32(2, 2), *[np.zeros((2, 2), np.float32)] * 4, np.float32(1))
  out = fused(seeds.mynet_train_step, *args)
  kinds = out.region_kinds
  # seven distinct 2x2 contractions (forward, the nested double gradient, the W gradient
  # through it) and the elementwise work between them, ending with the Adam update
  assert kinds.count("dot") == 7 and kinds.count("loop") == 3, kinds
  contractions = set()
  for eqn in out.eqns:
    for e in eqn.kw["program"].eqns:
      if e.prim.name == "dot_general":
        key = (
          e.kw["dimension_numbers"],
          tuple(
            eqn.inputs[eqn.kw["program"].inputs.index(a)] if a in eqn.kw["program"].inputs else a
            for a in e.inputs
          ),
        )
        assert key not in contractions, "a contraction is computed twice"
        contractions.add(key)


def test_tanh_mlp_forward_backward_regions():
  params = [(f32(2, 16), f32(16)), (f32(16, 16), f32(16)), (f32(16, 1), f32(1))]
  out = fused(primc.value_and_grad(seeds.mlp_loss), params, f32(32, 2))
  kinds = out.region_kinds
  # 3 forward + 5 backward matmuls (no transposes left); one loop region per layer's
  # elementwise work, with bias gradients fused as reductions into dot epilogues
  assert kinds.count("dot") == 8, kinds
  assert kinds.count("loop") <= 4, kinds
  text = str(out)
  assert "transpose" not in text


def test_opaque_ops_get_their_own_region():
  idx = np.array([0, 2, 1], np.int32)
  out = fused(lambda x: pnp.take(pnp.sin(x), idx, 0) * 2.0, f32(4, 3))
  assert out.region_kinds == ("loop", "gather", "loop")
  assert "gather gets a region of its own" in out.reasons[1]


def test_constants_are_recomputed_not_loaded():
  out = fused(lambda x, y: (x * 3.0, pnp.sum(y, 0) * 3.0), f32(5), f32(4, 5))
  for region in out.regions:
    assert all(v.aval.shape != (5,) or v in region.inputs for v in region.inputs)
  assert all(len(r.inputs) == 1 for r in out.regions)  # only x / y, no splat arrays


def test_broadcasts_are_recomputed_where_read_not_written_out():
  """A convolution, batch norm, ReLU and max pool, and their gradient: the per-channel
  statistics broadcast over every element are recomputed in each region that reads them
  (from the small vectors), never written out whole by one region for the others (two
  were, 8 MB each at W14's sizes); values as the interpreter's."""
  from primc import lax
  from primc import prims as P

  def loss(w, g, b, x):
    h = lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)])
    mean = pnp.mean(h, axis=(0, 2, 3), keepdims=True)
    var = pnp.mean((h - mean) ** 2, axis=(0, 2, 3), keepdims=True)
    h = (h - mean) / pnp.sqrt(var + 1e-5) * g[None, :, None, None] + b[None, :, None, None]
    h = lax.reduce_window(pnp.maximum(h, 0.0), -np.inf, "max", (1, 1, 2, 2), (1, 1, 2, 2))
    return pnp.sum(h**2)

  args = (f32(4, 3, 3, 3), f32(4), f32(4), f32(2, 3, 6, 6))
  program = passes.optimize(primc.make_program(primc.grad(loss, argnums=(0, 1, 2)))(*args))
  out = fuse(passes.lower(program))
  flat = tree_flatten(list(args))[0]
  for got, want in zip(primc.interpret(out, *flat), primc.interpret(program, *flat), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  written = [
    v
    for region in out.regions
    for e in region.eqns
    for v in e.outputs
    if v in region.outputs and e.prim is P.broadcast_in_dim_p
  ]
  assert not written and len(out.regions) > 10
  assert not _written_copies(out)  # (the gradient's -dz beside dz: 8 MB each at W14's)


def _written_copies(out) -> list:
  """Region outputs that are a copy of one other written value (its negation, conversion,
  or it times a constant): a region that reads one can recompute it."""
  written = {v for region in out.regions for v in region.outputs}
  copies = []
  for region in out.regions:
    defs = {v: e for e in region.eqns for v in e.outputs}
    for v in region.outputs:
      e = defs.get(v)
      if e is not None and fusion._copy_of_one(e, defs):
        (operand,) = [
          a
          for a in e.inputs
          if isinstance(a, Var) and not (a in defs and fusion._is_constant(defs[a]))
        ]
        if operand in written or operand in region.inputs:
          copies.append(v)
  return copies


@pytest.mark.parametrize("copy", [lambda z: -z, lambda z: z * 2.0, lambda z: z.astype("f8")])
def test_copies_of_one_value_are_recomputed_where_read(copy):
  """A value and a copy of it (negated, scaled, converted) both read by a later region:
  the reader recomputes the copy from the value instead of reading it written out
  beside the value; values as the interpreter's."""

  def f(x):
    z = pnp.sin(x)
    s = pnp.sum(z)  # (a reduction ends the region: what reads it is another)
    return z, copy(z) * s

  program = passes.optimize(primc.make_program(f)(f32(4, 5)))
  out = fuse(program)
  assert len(out.regions) == 2 and not _written_copies(out)
  x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(4, 5)
  for got, want in zip(primc.interpret(out, x), primc.interpret(program, x), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_dce_drops_unused_region_outputs():
  program = passes.optimize(primc.make_program(lambda x: (pnp.sin(x), pnp.cos(x)))(f32(3)))
  out = fuse(program)
  (region_eqn,) = out.eqns
  assert len(region_eqn.outputs) == 2
  only_sin = primc.Program(out.inputs, out.eqns, out.outputs[:1])
  pruned = dce(only_sin)
  (eqn,) = pruned.eqns
  assert eqn.prim is region_p and len(eqn.outputs) == 1
  assert [e.prim.name for e in eqn.kw["program"].eqns] == ["sin"]
  np.testing.assert_allclose(primc.interpret(pruned, np.ones(3, np.float32))[0], np.sin(1.0))


def test_fused_program_prints_regions_as_programs():
  text = str(
    fuse(passes.optimize(primc.make_program(seeds.mynet_forward)(f32(2, 2), f32(2, 2), f32(2))))
  )
  assert text.count("region[kind='") == 2 and text.count("{ lambda") == 3


def test_expensive_work_is_never_duplicated():
  params = [(f32(2, 8), f32(8)), (f32(8, 1), f32(1))]
  program = passes.optimize(primc.make_program(primc.grad(seeds.mlp_loss))(params, f32(16, 2)))
  out = fuse(program)
  expensive = {"tanh", "exp", "sin", "cos", "log", "dot_general", "reduce_sum"}
  count = lambda eqns: sum(e.prim.name in expensive for e in eqns)
  assert sum(count(r.eqns) for r in out.regions) == count(program.eqns)


# --- values recomputed through index maps (`fusion.lazy_eqns`) ---------------------------


def _index_map_steps():
  """Random chains: an elementwise step (cheap or not), then an index map of its result
  (slice, pad, transpose, rev, roll, reshape, concatenate, broadcast), repeated; every shape."""
  from hypothesis import strategies as st
  from primc import prims as P

  @st.composite
  def steps(draw):
    out = []
    for _ in range(draw(st.integers(1, 4))):
      elementwise = draw(st.sampled_from(["mul", "tanh", "iota", "none"]))
      kind = draw(
        st.sampled_from(
          ["slice", "pad", "transpose", "rev", "roll", "reshape", "concatenate", "broadcast"]
        )
      )
      out.append((elementwise, kind, draw(st.integers(0, 10**6))))
    return out

  def apply(x, chain):
    for elementwise, kind, seed in chain:
      r = np.random.default_rng(seed)
      shape = x.aval.shape if hasattr(x, "aval") else np.shape(x)
      if elementwise == "mul":
        x = x * 1.5 + 0.25
      elif elementwise == "tanh":
        x = pnp.tanh(x) - x
      elif elementwise == "iota":  # an identity-like pattern, built from indices
        x = x * P.convert(
          P.iota(shape, len(shape) - 1, "int32") >= P.iota(shape, 0, "int32"), "float32"
        )
      if kind == "slice":
        starts = [int(r.integers(0, max(1, n - 1))) for n in shape]
        steps = [int(r.integers(1, 3)) for _ in shape]
        x = P.slice_(x, starts, list(shape), steps)
      elif kind == "pad":
        x = P.pad(
          x, [(int(r.integers(0, 3)), int(r.integers(0, 3)), int(r.integers(0, 2))) for _ in shape]
        )
      elif kind == "transpose":
        x = P.transpose(x, list(r.permutation(len(shape))))
      elif kind == "roll":
        d = int(r.integers(0, len(shape)))
        x = P.roll(x, int(r.integers(0, shape[d])), d)
      elif kind == "rev":
        x = P.rev(x, [d for d in range(len(shape)) if r.integers(0, 2)])
      elif kind == "reshape":
        x = P.reshape(x, (int(np.prod(shape)),)) if len(shape) > 1 else P.reshape(x, (1, *shape))
      elif kind == "concatenate":
        d = int(r.integers(0, len(shape)))
        x = P.concatenate([x, P.rev(x * 2.0, [d])], d)
      else:
        x = P.broadcast_in_dim(x, (2, *shape), tuple(range(1, len(shape) + 1)))
    return x

  return steps(), apply


_STEPS, _APPLY = _index_map_steps()


def test_index_maps_of_computed_values_compile_to_the_interpreters_values():
  """The class of programs where a region's values are read only through index maps by
  one other region and are recomputed there: every chain computes what the interpreter
  does, its gradient too (whose transposes are pads, slices and reversals)."""
  from hypothesis import HealthCheck, example, given, settings

  @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
  @given(_STEPS)
  @example([("iota", "rev", 0), ("iota", "slice", 1), ("mul", "slice", 1)])
  def run(chain):
    x = R.standard_normal((3, 4)).astype(np.float32)
    f = lambda x: _APPLY(x, chain)
    fused(f, x)  # the fused program (interpreted) equals the optimized one
    program = primc.make_program(f)(x)
    want = primc.interpret(program, x)[0]
    np.testing.assert_allclose(primc.jit(f)(x), want, rtol=2e-6, atol=2e-6)
    w = R.standard_normal(want.shape).astype(np.float32)
    g = primc.grad(lambda x: pnp.sum(f(x) * w))
    want_g = primc.interpret(primc.make_program(g)(x), x)[0]
    np.testing.assert_allclose(primc.jit(g)(x), want_g, rtol=2e-5, atol=2e-5)

  run()


def _shape_keeping_maps():
  """Index maps that keep an n x n shape: reversals, a transpose, rolls (the primitive,
  and a concatenate of two slices) and shifts (a pad of a slice), by hypothesis."""
  from hypothesis import strategies as st
  from primc import prims as P

  def shift(v, d, k):  # v moved k places along d, zeros in front
    n = v.aval.shape[d]
    limits = [n - k if j == d else v.aval.shape[j] for j in range(2)]
    config = [(k, 0, 0) if j == d else (0, 0, 0) for j in range(2)]
    return P.pad(P.slice_(v, [0, 0], limits, [1, 1]), config)

  def roll(v, d, k):
    n = v.aval.shape[d]
    at = lambda lo, hi: P.slice_(
      v, [lo if j == d else 0 for j in range(2)], [hi if j == d else n for j in range(2)], [1, 1]
    )
    return P.concatenate([at(n - k, n), at(0, n - k)], d)

  maps = {
    "rev": lambda v, d, k: P.rev(v, [d] if k % 2 else [0, 1]),
    "roll_p": lambda v, d, k: P.roll(v, k, d),
    "transpose": lambda v, d, k: P.transpose(v, [1, 0]),
    "roll": roll,
    "shift": shift,
  }
  step = st.tuples(st.sampled_from(sorted(maps)), st.integers(0, 1), st.integers(1, 3))
  return st.lists(step, min_size=1, max_size=3), maps


def test_a_value_read_at_two_indices_in_one_region():
  """The family of the chain below: a value a region computes at its loop's index (it is
  also used there) and that a recomputed value reads through an index map, at another
  index: `rev(x * m) * m`. The kernel once took the value at the loop's index in both
  places (a masked gradient read its mask unreversed)."""
  from hypothesis import HealthCheck, example, given, settings
  from hypothesis import strategies as st

  chains, maps = _shape_keeping_maps()

  @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
  @given(chains, st.integers(4, 6), st.sampled_from(["mask", "exp"]))
  @example([("rev", 0, 2)], 4, "mask")
  def run(chain, n, kind):
    def f(x, y):
      m = pnp.asarray(y > 0, "float32") if kind == "mask" else pnp.exp(y)
      v = x
      for name, d, k in chain:
        v = maps[name](v * m, d, min(k, n - 1)) * m
      return v

    x, y = R.standard_normal((2, n, n)).astype(np.float32)
    want = primc.interpret(primc.make_program(f)(x, y), x, y)[0]
    np.testing.assert_allclose(primc.jit(f)(x, y), want, rtol=2e-6, atol=2e-6)

  run()


def test_recomputed_work_counts_values_read_at_another_index():
  """In `rev(x * exp(y)) * exp(y)` as one region, the kernel computes `x * exp(y)` at the
  reversed index, and `exp(y)` there too (besides at the loop's index): two evaluations,
  the exponential's work among them."""
  from primc import prims as P

  program = primc.make_program(lambda x, y: P.rev(x * pnp.exp(y), [0]) * pnp.exp(y))(
    f32(4, 3), f32(4, 3)
  )
  eqns = list(passes.optimize(program).eqns)
  work, evaluations = fusion._recomputed_work(eqns)
  exp, product = (next(e for e in eqns if e.prim.name == n) for n in ("exp", "mul"))
  assert evaluations == 2 and work == fusion._work(exp) + fusion._work(product)


def test_a_region_reshaping_a_constant_compiles():
  """Found by the test above: the gradient of a padded chain against a constant weight is
  a reshape of that constant, a region without inputs (it crashed codegen)."""
  chain = [("mul", "pad", 0), ("mul", "pad", 0), ("none", "reshape", 0)]
  x = R.standard_normal((3, 4)).astype(np.float32)
  w = R.standard_normal(72).astype(np.float32)
  g = primc.grad(lambda x: pnp.sum(_APPLY(x, chain) * w))
  want = primc.interpret(primc.make_program(g)(x), x)[0]
  np.testing.assert_allclose(primc.jit(g)(x), want, rtol=2e-5, atol=2e-5)


def test_an_identity_sliced_padded_and_transposed_is_one_kernel():
  # the Hessian of a chain (Rosenbrock): its identity basis, the tangents' slices, the
  # pads of the transposed products and the final transpose are recomputed where read
  rosen = lambda x: pnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
  x = R.uniform(-1, 2, 50).astype(np.float32)
  out = fused(primc.hessian(rosen), x)
  assert [r.outputs[0].aval.shape for r in out.regions][-1] == (50, 50)
  assert (
    sum(
      r.outputs[0].aval.shape == (50, 50)
      or any(
        e.outputs[0].aval.shape[:1] == (50,) and len(e.outputs[0].aval.shape) == 2 for e in r.eqns
      )
      for r in out.regions
    )
    == 1
  )  # one region touches the 50x50 values
  h = primc.jit(primc.hessian(rosen))(x).astype(np.float64)
  x64 = x.astype(np.float64)
  want = np.zeros((50, 50))  # the Rosenbrock Hessian, by hand
  want[np.arange(49), np.arange(49)] += 1200 * x64[:-1] ** 2 - 400 * x64[1:] + 2
  want[np.arange(1, 50), np.arange(1, 50)] += 200
  want[np.arange(49), np.arange(1, 50)] = want[np.arange(1, 50), np.arange(49)] = -400 * x64[:-1]
  np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-3)


def test_a_value_read_again_through_the_same_index_maps_is_computed_once():
  # the Hessian kernel reads the identity's slices through each pad several times: one
  # word per size of each index map, so equal reads are one expression (4 comparisons
  # per element, not 6), and the kernel serves other sizes unchanged
  rosen = lambda x: pnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
  hess = primc.jit(primc.hessian(rosen))
  source = hess.lower(R.uniform(-1, 2, 50).astype(np.float32)).source
  kernel = source[source.index("def k_eq") :]
  body = kernel[kernel.index("for i1 in") : kernel.index("return 1")]
  assert body.count(" == ") == 4, body
  for n in (5, 50, 300):
    x = R.uniform(-1, 2, n).astype(np.float64)
    want = np.zeros((n, n))
    want[np.arange(n - 1), np.arange(n - 1)] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    want[np.arange(1, n), np.arange(1, n)] += 200
    want[np.arange(n - 1), np.arange(1, n)] = want[np.arange(1, n), np.arange(n - 1)] = (
      -400 * x[:-1]
    )
    np.testing.assert_allclose(hess(x), want, rtol=1e-12, atol=1e-9)


def _stencil(n):
  """n Jacobi steps of a 5-point stencil on a periodic grid (rolls: slices and concats),
  as a fluid simulation's pressure solve, and its gradient."""

  def loss(p0):
    p = p0
    for _ in range(n):
      p = (p0 + sum(pnp.roll(p, s, axis=a) for s in (1, -1) for a in (0, 1))) / 4.0
    return pnp.sum(p * p)

  return passes.optimize(primc.make_program(primc.grad(loss))(f32(6, 6)))


def _python_calls(thunk) -> int:
  calls = [0]

  def count(frame, event, arg):
    if event == "call":
      calls[0] += 1

  sys.setprofile(count)
  try:
    thunk()
  finally:
    sys.setprofile(None)
  return calls[0]


def test_fusion_work_grows_linearly_with_program_length():
  """Fusing 8x the steps of a stencil's gradient (regions merged into the regions that
  read them through index maps, thousands of times) makes ~8x the Python calls (19x when
  merging removed each region from a list by value, comparing regions field by field: a
  fluid simulation's 67,000 equations spent 8.0 s of their 9.8 s of fusion there)."""
  small, large = _stencil(20), _stencil(160)
  ratio = _python_calls(lambda: fuse(large)) / _python_calls(lambda: fuse(small))
  assert 7.5 < len(large.eqns) / len(small.eqns) < 8.5
  assert ratio < 9, ratio
