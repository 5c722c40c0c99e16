"""Rows filled stretch by stretch (codegen.segments): the rewritten loop against the plain
one on random loop bodies (pure Python, int32 truncation included), and compiled programs
whose rows are constant between comparisons of their index against the interpreter."""

import types
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc.codegen import kir, segments
from primc.tree import tree_flatten

# --- the rewrite itself, run as Python -------------------------------------------------------


def _segmented(index, start, stop, body, fresh):
  """`segments.segmented_loop` of a body written as lines of Python: its lines, or None."""
  out = segments.segmented_loop(
    kir.Name(index), kir.E(start), kir.E(stop), kir.S("\n".join(body)), fresh
  )
  return None if out is None else kir.statements(tuple(out))


def _wrap32(x):  # numpy's int32 truncation; the result computes on as the kernels' int64
  return ((int(x) + 2**31) % 2**32) - 2**31


NP = types.SimpleNamespace(int32=_wrap32, int64=np.int64, float32=np.float32)


def _run(lines, arrays, start, stop):
  """Runs loop lines with LOAD/STORE over `arrays` (a dict of flat numpy arrays)."""
  env = dict(
    np=NP,
    F=np.float32,
    NONNEG=lambda x: x,
    abs=abs,
    min=min,
    max=max,
    LOAD=lambda p, k, dt: arrays[p][k],
    STORE=lambda p, k, v, dt: arrays[p].__setitem__(k, v),
    start=start,
    stop=stop,
    **{k: k for k in arrays},
  )
  with np.errstate(all="ignore"):
    exec("\n".join(lines), env)


ATOMS = {  # an invariant the body reads: a word, an element, a constant
  "int": st.sampled_from(["a", "b", "0", "1", "3", "c"]),
  "float": st.sampled_from(
    [
      "LOAD(x, 2, F)",
      "LOAD(x, c, F)",
      "np.float32(0.0)",
      "np.float32(-0.0)",
      "np.float32(1.5)",
      "LOAD(x, 0, F)",
    ]
  ),
}


@st.composite
def _bodies(draw, varying: bool):
  """A loop body over index `j`: a chain of index expressions (shifts, reversals, clamps,
  absolute values, int32 truncations), a comparison of it with an invariant, a float
  value chosen by that, stored; then random statements of the same kinds. With `varying`,
  also reads that move with the index (a load at it, its value as a float)."""
  lines, ints, bools, floats = [], ["j"], [], [draw(ATOMS["float"])]
  fresh = iter(f"v{k}" for k in range(100))

  def add(expr, kind):
    name = next(fresh)
    lines.append(f"{name} = {expr}")
    {"int": ints, "bool": bools, "float": floats}[kind].append(name)

  def pick(b, f):  # a float chosen by the comparison b
    return draw(
      st.sampled_from(
        [
          f"{f} if {b} else {draw(ATOMS['float'])}",
          f"np.float32({b}) * {f}",
          f"{f} + np.float32({b})",
        ]
      )
    )

  forms = {  # kind -> (its statement's expression of t, an index value, and k, an
    # invariant; the kind of value it makes)
    "shift": lambda t, k: (f"{t} {draw(st.sampled_from('+-'))} {k}", "int"),
    "rev": lambda t, k: (f"{k} - {t}", "int"),
    "clamp": lambda t, k: (f"min(max({t} - {k}, 0), b - 1)", "int"),
    "wrap": lambda t, k: (f"np.int32({t} + big)", "int"),
    "abs": lambda t, k: (f"abs({t} - {k})", "int"),
    "cmp": lambda t, k: (
      f"{t} {draw(st.sampled_from(['==', '!=', '<', '<=', '>', '>=']))} {k}",
      "bool",
    ),
    "chain": lambda t, k: (f"0 <= {t} - {k} < b", "bool"),
    "pick": lambda t, k: (pick(bools[-1], draw(st.sampled_from(floats))), "float"),
    "arith": lambda t, k: (
      f"{draw(st.sampled_from(floats))} {draw(st.sampled_from('+-*'))} "
      f"{draw(st.sampled_from(floats))}",
      "float",
    ),
    "move": lambda t, k: (
      draw(st.sampled_from([f"LOAD(x, min(max({t}, 0), 9), F)", f"np.float32({t})"])),
      "float",
    ),
  }

  def step(kind):
    if kind != "pick" or bools:
      add(*forms[kind](draw(st.sampled_from(ints[-2:])), draw(ATOMS["int"])))  # chains, mostly

  index_kinds = ["shift", "rev", "clamp", "wrap", "abs"]
  for kind in draw(st.lists(st.sampled_from(index_kinds), min_size=1, max_size=4)):
    step(kind)
  step(draw(st.sampled_from(["cmp", "chain"])))
  step("pick")
  kinds = index_kinds + ["cmp", "chain", "pick", "arith", *(["move"] if varying else [])]
  for kind in draw(st.lists(st.sampled_from(kinds), max_size=8)):
    step(kind)
  if varying:  # the stored value reads the index's value
    step("move")
    add(f"{floats[-1]} {draw(st.sampled_from('+*'))} {floats[-2]}", "float")
  lines.append(f"STORE(out, r + j, {draw(st.sampled_from(floats[-2:]))}, F)")
  if draw(st.booleans()):
    lines.append(f"STORE(out2, j, {draw(st.sampled_from(floats))}, F)")
  return lines


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
  varying=st.booleans(),
  data=st.data(),
  words=st.tuples(st.integers(-3, 40), st.integers(0, 40), st.integers(-5, 60)),
  start=st.integers(0, 5),
  length=st.integers(0, 300),
  near=st.booleans(),
  x=st.lists(st.sampled_from([1.0, -2.5, 0.0, -0.0, np.nan, np.inf]), min_size=10, max_size=10),
)
def test_a_row_filled_by_stretches_equals_the_plain_loop(
  varying, data, words, start, length, near, x
):
  # the rewrite of `for j in range(start, stop): body` stores what the plain loop stores,
  # element for element (NaN and -0.0 included), on rows of any length (the threshold
  # lowered so that short rows take the rewritten path too); an index truncated to int32
  # near its end falls back to the plain loop. A body the analysis follows and does not
  # rewrite stores one value along the row.
  body = data.draw(_bodies(varying))
  names = iter(range(1000))
  with mock.patch.object(segments, "SEGMENT_MIN", data.draw(st.sampled_from([0, 1, 8]))):
    rewritten = _segmented("j", "start", "stop", body, lambda p: f"{p}_{next(names)}")
  stop = start + length
  a, b, c = words
  plain = ["for j in range(start, stop):", *("  " + s for s in body)]
  results = []
  for lines in (plain, rewritten):
    if lines is None:
      continue
    arrays = {
      "x": np.array(x, np.float32),
      "out": np.full(stop + 50, 7, np.float32),
      "out2": np.full(stop + 50, 7, np.float32),
    }
    words_env = dict(a=a, b=b, c=c % 10, r=5, big=2**31 - 30 if near else 1000)
    _run([f"{k} = {v}" for k, v in words_env.items()] + lines, arrays, start, stop)
    results.append(arrays)
  if rewritten is not None:
    for name in ("out", "out2"):
      got, want = results[1][name], results[0][name]
      np.testing.assert_array_equal(got, want)
      assert (np.signbit(got) == np.signbit(want)).all()
  elif not varying:
    row = results[0]["out"][5 + start : 5 + stop]
    assert (row.view(np.int32) == row[:1].view(np.int32)).all() or np.isnan(row).all()


def test_which_bodies_are_rewritten():
  # an identity basis times a row's coefficient, a pad's range check: rewritten (with the
  # plain loop kept for short rows and failed checks); a load that moves with the index,
  # the index as a value, a body with nothing to split on: left as they are
  fresh = iter(range(100))
  name = lambda p: f"{p}{next(fresh)}"
  one_hot = [
    "v1 = np.int32(z1 + j) == np.int32(i + z2)",
    "v2 = np.float32(v1) * LOAD(p, i, F)",
    "STORE(q, i * n + j, v2, F)",
  ]
  lines = _segmented("j", "0", "n", one_hot, name)
  assert lines is not None and any(s.strip().startswith("while") for s in lines)
  assert lines[-4].startswith("for j in range(sj")  # the plain loop finishes the row
  padded = ["v1 = LOAD(p, i, F) if 0 <= j - z1 < z2 else 0.0", "STORE(q, j + i * n, v1, F)"]
  assert _segmented("j", "0", "n", padded, name) is not None
  for body in (
    ["v1 = LOAD(p, i * n + j, F)", "STORE(q, i * n + j, v1, F)"],
    ["v1 = np.float32(j == i) * np.float32(j)", "STORE(q, i * n + j, v1, F)"],
    ["v1 = LOAD(p, i, F) * 2.0", "STORE(q, i * n + j, v1, F)"],
    ["v1 = np.float32(j == i)", "STORE(q, i * n + 2 * j, v1, F)"],
    ["v1 = np.float32(j == i)", "STORE(q, i * n + j, v1, F)", "nbig += 1"],
  ):
    assert _segmented("j", "0", "n", body, name) is None, body


# --- compiled programs -----------------------------------------------------------------------


def _compiled_equals_interpreted(fn, *args, rtol=1e-6):
  compiled = tree_flatten(primc.jit(fn)(*args))[0]
  program = primc.make_program(fn)(*args)
  want = primc.interpret(program, *tree_flatten(list(args))[0])
  for g, w in zip(compiled, want, strict=True):
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(
      g, w, rtol=rtol, atol=rtol * np.abs(w[np.isfinite(w)]).max(initial=1), equal_nan=True
    )
    zero = (g == 0) & (w == 0)
    assert (np.signbit(g[zero]) == np.signbit(w[zero])).all()


def _rewritten(fn, *args) -> bool:
  return "while sj" in primc.jit(fn).lower(*args).source


SPECIALS = st.sampled_from([0.5, -1.25, 2.0, 0.0, -0.0, np.nan, np.inf, -np.inf])
ONE_HOT_FORMS = {
  "shifted eye": lambda x, k: pnp.where(
    pnp.arange(x.shape[0])[:, None] + k == pnp.arange(300)[None, :], x[:, None], -0.0
  ),
  "reversed eye": lambda x, k: pnp.flip(pnp.eye(x.shape[0], 300, k=k), axis=1) * x[:, None],
  "band": lambda x, k: pnp.where(
    pnp.abs(pnp.arange(x.shape[0])[:, None] - pnp.arange(300)[None, :]) <= k,
    x[:, None] * 2.0,
    x[:, None] * 0.0,
  ),
  "padded eye": lambda x, k: pnp.pad(pnp.eye(x.shape[0], 280) * x[:, None], ((0, 0), (k, 20 - k))),
  "eye times a row": lambda x, k: (
    pnp.eye(x.shape[0], 300, k=k) * pnp.exp(x)[:, None]
    + pnp.eye(x.shape[0], 300, k=-k) * x[:, None]
  ),
  "concatenated": lambda x, k: pnp.concatenate(
    [pnp.eye(x.shape[0], 150, k=k) * x[:, None], pnp.eye(x.shape[0], 150) / x[:, None]], axis=1
  ),
  "triangle": lambda x, k: pnp.where(
    pnp.arange(x.shape[0])[:, None] >= pnp.arange(300)[None, :] - k, x[:, None], 1.0
  ),
}


@pytest.mark.parametrize("form", sorted(ONE_HOT_FORMS))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=st.lists(SPECIALS, min_size=1, max_size=40), k=st.integers(0, 12))
def test_rows_constant_between_comparisons_compiled(form, x, k):
  # every family of one-hot and banded rows (shifts, reversals, pads, concatenations,
  # triangles, signed zeros, NaN and inf in the row's value): compiled equals the
  # interpreter, and the compiled kernel fills its rows by stretches
  fn = lambda x: ONE_HOT_FORMS[form](x, k)
  x = np.array(x, np.float32)
  _compiled_equals_interpreted(fn, x)


@pytest.mark.parametrize("form", sorted(ONE_HOT_FORMS))
def test_each_one_hot_family_is_filled_by_stretches(form):
  x = np.linspace(-1, 1, 8).astype(np.float32)
  assert _rewritten(lambda x: ONE_HOT_FORMS[form](x, 3), x)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(150, 400), special=SPECIALS, where=st.integers(0, 149))
def test_dense_hessians_and_jacobians_filled_by_stretches(n, special, where):
  # Rosenbrock's Hessian, a diagonal Jacobian and a batched one, with a NaN/inf/-0 in the
  # input: compiled equals the interpreter (the NaN spreads through the rows numpy's
  # arithmetic spreads it to, no further)
  rosen = lambda x: pnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
  x = np.random.default_rng(n).uniform(-1, 2, n).astype(np.float32)
  x[where] = special
  _compiled_equals_interpreted(primc.hessian(rosen), x, rtol=1e-5)  # float32 cancellation
  _compiled_equals_interpreted(primc.jacfwd(pnp.sin), x)
  _compiled_equals_interpreted(primc.vmap(primc.jacrev(pnp.tanh)), x.reshape(1, -1).repeat(2, 0))


def test_a_hessian_kernel_is_filled_by_stretches():
  rosen = lambda x: pnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
  assert _rewritten(primc.hessian(rosen), np.ones(200, np.float32))
