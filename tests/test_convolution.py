"""Convolutions and windowed reductions (primc.lax, primc.nn.functional) against their
definitions written as loops in numpy, derivatives by finite differences, the compiled path
against the interpreter. The `conv` primitive's own rules are in prim_cases (every stage's
registry tests run them)."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp
from primc import lax
from primc.core import PrimcError
from primc.nn import functional as F

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def conv_by_definition(x, w, strides, pads, lhs_d, rhs_d, groups):
  """NC* / OI* convolution: the input dilated and padded (negative pads crop) by numpy, then
  out[n, o, p] = sum_{c, k} x[n, g(o) Cg + c, p s + k d] w[o, c, k] as loops."""
  n, c, *size = x.shape
  o, cg, *win = w.shape
  dil = np.zeros((n, c, *[(m - 1) * d + 1 for m, d in zip(size, lhs_d)]))
  dil[(slice(None), slice(None), *[slice(None, None, d) for d in lhs_d])] = x
  dil = np.pad(dil, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pads])
  crop = tuple(slice(max(-lo, 0), m - max(-hi, 0)) for (lo, hi), m in zip(pads, dil.shape[2:]))
  dil = dil[(slice(None), slice(None), *crop)]
  out = [(m - (k - 1) * d - 1) // s + 1 for m, k, s, d in zip(dil.shape[2:], win, strides, rhs_d)]
  y = np.zeros((n, o, *out))
  for oc in range(o):
    g = oc // (o // groups)
    for pos in np.ndindex(*out):
      for off in np.ndindex(*win):
        at = tuple(p * s + k * d for p, s, k, d in zip(pos, strides, off, rhs_d))
        y[(slice(None), oc, *pos)] += (
          dil[(slice(None), slice(g * cg, (g + 1) * cg), *at)] @ w[(oc, slice(None), *off)]
        )
  return y


def same_pads(sizes, windows, strides):
  pads = []
  for m, k, s in zip(sizes, windows, strides):
    total = max(0, (-(-m // s) - 1) * s + k - m)
    pads.append((total // 2, total - total // 2))
  return pads


@st.composite
def conv_configs(draw):
  nd = draw(st.integers(1, 2))
  groups = draw(st.integers(1, 2))
  cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2))
  size = [draw(st.integers(1, 6)) for _ in range(nd)]
  win = [draw(st.integers(1, 3)) for _ in range(nd)]
  strides = [draw(st.integers(1, 3)) for _ in range(nd)]
  lhs_d = [draw(st.integers(1, 2)) for _ in range(nd)]
  rhs_d = [draw(st.integers(1, 2)) for _ in range(nd)]
  kind = draw(st.sampled_from(["SAME", "VALID", "pairs"]))
  dilated = [(m - 1) * d + 1 for m, d in zip(size, lhs_d)]
  spans = [(k - 1) * d + 1 for k, d in zip(win, rhs_d)]
  if kind == "pairs":
    pads = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(nd)]
  else:
    pads = same_pads(dilated, spans, strides) if kind == "SAME" else [(0, 0)] * nd
  padded = [m + lo + hi for m, (lo, hi) in zip(dilated, pads)]
  if any(p < s for p, s in zip(padded, spans)):
    kind, pads = "SAME", same_pads(dilated, spans, strides)
    padded = [m + lo + hi for m, (lo, hi) in zip(dilated, pads)]
    if any(p < s for p, s in zip(padded, spans)):
      win, spans = [1] * nd, [1] * nd
  layout = draw(st.sampled_from(["NC", "NHWC"]))
  return dict(
    x_shape=(draw(st.integers(1, 2)), groups * cg, *size),
    w_shape=(groups * og, cg, *win),
    strides=strides,
    padding=kind if kind != "pairs" else pads,
    pads=pads,
    lhs_d=lhs_d,
    rhs_d=rhs_d,
    groups=groups,
    layout=layout,
  )


def _to_last(a):
  return np.moveaxis(a, 1, -1)


def _run_conv(cfg, x, w):
  nd = x.ndim - 2
  sp = "HW"[:nd] if nd < 3 else "DHW"
  dn = None
  if cfg["layout"] == "NHWC":
    dn = (f"N{sp}C", f"{sp}IO", f"N{sp}C")
    x, w = _to_last(x), np.moveaxis(w, (0, 1), (-1, -2))
  y = lax.conv_general_dilated(
    x,
    w,
    cfg["strides"],
    cfg["padding"],
    lhs_dilation=cfg["lhs_d"],
    rhs_dilation=cfg["rhs_d"],
    dimension_numbers=dn,
    feature_group_count=cfg["groups"],
  )
  y = np.asarray(y)
  return np.moveaxis(y, -1, 1) if dn else y


@FAST
@given(conv_configs(), st.integers(0, 2**31))
def test_conv_general_dilated_is_the_definition(cfg, seed):
  rng = np.random.default_rng(seed)
  x, w = rng.standard_normal(cfg["x_shape"]), rng.standard_normal(cfg["w_shape"])
  want = conv_by_definition(
    x, w, cfg["strides"], cfg["pads"], cfg["lhs_d"], cfg["rhs_d"], cfg["groups"]
  )
  np.testing.assert_allclose(_run_conv(cfg, x, w), want, rtol=1e-10, atol=1e-10)


COMPILED = [
  dict(
    x=(2, 4, 9, 8),
    w=(6, 2, 3, 3),
    strides=(2, 1),
    padding="SAME",
    lhs_d=(1, 1),
    rhs_d=(1, 2),
    groups=2,
  ),
  dict(x=(1, 3, 7), w=(4, 3, 3), strides=(1,), padding=[(2, 1)], lhs_d=(2,), rhs_d=(1,), groups=1),
  dict(
    x=(2, 3, 4, 5, 4),
    w=(3, 1, 2, 2, 2),
    strides=(1, 2, 1),
    padding="VALID",
    lhs_d=(1, 1, 1),
    rhs_d=(1, 1, 2),
    groups=3,
  ),
  dict(
    x=(1, 2, 12, 12),
    w=(2, 2, 5, 5),
    strides=(3, 3),
    padding=[(-1, 2), (0, 0)],
    lhs_d=(1, 1),
    rhs_d=(1, 1),
    groups=1,
  ),
]


@pytest.mark.parametrize("c", COMPILED, ids=lambda c: f"{len(c['x']) - 2}d-{c['padding']}")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_compiled_matches_interpreter_and_its_gradient(c, dtype, rng):
  x = rng.standard_normal(c["x"]).astype(dtype)
  w = rng.standard_normal(c["w"]).astype(dtype)

  def f(x, w):
    y = lax.conv_general_dilated(
      x, w, c["strides"], c["padding"], c["lhs_d"], c["rhs_d"], feature_group_count=c["groups"]
    )
    return pnp.sum(pnp.tanh(y) ** 2)

  tol = 1e-4 if dtype == "float32" else 1e-11
  for fn in (f, primc.grad(f, argnums=(0, 1))):
    want = fn(x, w)
    got = primc.jit(fn)(x, w)
    for a, b in zip(
      np.atleast_1d(got) if fn is f else got, np.atleast_1d(want) if fn is f else want
    ):
      np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_conv_derivatives_of_order_two_by_finite_differences(rng):
  x, w = rng.standard_normal((2, 4, 5, 6)), rng.standard_normal((4, 2, 2, 3))

  def f(x, w):
    y = lax.conv_general_dilated(
      x, w, (2, 1), [(1, 0), (2, -1)], (1, 2), (2, 1), feature_group_count=2
    )
    return pnp.sum(pnp.sin(y))

  primc.check_grads(f, (x, w), order=2, modes=("fwd", "rev"))


def test_hessian_vector_product_of_a_cnn_loss_compiled(rng):
  x = rng.standard_normal((2, 3, 8, 8))
  w1, w2 = rng.standard_normal((4, 3, 3, 3)) * 0.3, rng.standard_normal((5, 4 * 4 * 4)) * 0.3

  def loss(w1):
    h = pnp.tanh(F.conv2d(x, w1, padding=1))
    h = F.max_pool2d(h, 2)
    return pnp.sum(pnp.tanh(pnp.matmul(F.flatten(h), w2.T)) ** 2)

  v = rng.standard_normal(w1.shape)
  hvp = lambda w: primc.jvp(primc.grad(loss), (w,), (v,))[1]
  want = hvp(w1)
  eps = 1e-5
  fd = (primc.grad(loss)(w1 + eps * v) - primc.grad(loss)(w1 - eps * v)) / (2 * eps)
  np.testing.assert_allclose(want, fd, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(primc.jit(hvp)(w1), want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(
  "padding,want",
  [("SAME", lambda n, k, s: n * s), ("VALID", lambda n, k, s: (n - 1) * s + max(k, s))],
)
def test_conv_transpose_output_sizes(padding, want, rng):
  for n, k, s in itertools.product((3, 4), (1, 2, 3), (1, 2, 3)):
    x, w = rng.standard_normal((1, 2, n)), rng.standard_normal((3, 2, k))
    assert np.shape(lax.conv_transpose(x, w, (s,), padding)) == (1, 3, want(n, k, s))


def test_conv_errors_name_the_shapes():
  with pytest.raises(PrimcError, match="groups"):
    lax.conv_general_dilated(np.ones((1, 3, 5, 5)), np.ones((4, 2, 3, 3)), (1, 1), "VALID")
  with pytest.raises(PrimcError, match="exceeds"):
    lax.conv_general_dilated(np.ones((1, 1, 2, 2)), np.ones((1, 1, 3, 3)), (1, 1), "VALID")
  with pytest.raises(PrimcError, match="padding"):
    lax.conv_general_dilated(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), (1, 1), "FULL")


# ---------------------------------------------------------------------------------------
# Windowed reductions and pooling


def windows_by_definition(x, window, strides, pads, fill, reduce):
  xp = np.pad(x, pads, constant_values=fill)
  out = [(m - k) // s + 1 for m, k, s in zip(xp.shape, window, strides)]
  y = np.empty(out)
  for pos in np.ndindex(*out):
    sl = tuple(slice(p * s, p * s + k) for p, s, k in zip(pos, strides, window))
    y[pos] = reduce(xp[sl])
  return y


@FAST
@given(
  st.lists(st.integers(1, 5), min_size=2, max_size=3),
  st.integers(0, 2**31),
  st.sampled_from(["max", "add", "min"]),
)
def test_reduce_window_is_the_definition(shape, seed, kind):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape)
  window = [int(rng.integers(1, n + 1)) for n in shape]
  strides = [int(rng.integers(1, 3)) for _ in shape]
  pads = [(int(rng.integers(0, 2)), int(rng.integers(0, 2))) for _ in shape]
  init = {"max": -np.inf, "min": np.inf, "add": 0.0}[kind]
  reduce = {"max": np.max, "min": np.min, "add": np.sum}[kind]
  want = windows_by_definition(x, window, strides, pads, init, reduce)
  got = lax.reduce_window(x, init, kind, window, strides, pads)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def _pool_oracle(x, k, s, p, ceil_mode, kind, include_pad=False):
  """PyTorch's pooling definition as loops over (n, c) planes."""
  n, c, h, w = x.shape
  outs = []
  for m in (h, w):
    span = m + 2 * p - k
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= m + p:
      o -= 1
    outs.append(o)
  y = np.empty((n, c, *outs))
  for i, j in np.ndindex(*outs):
    h0, w0 = i * s - p, j * s - p
    h1, w1 = min(h0 + k, h + p), min(w0 + k, w + p)
    pad_count = (h1 - h0) * (w1 - w0)
    hs, ws = slice(max(h0, 0), min(h1, h)), slice(max(w0, 0), min(w1, w))
    win = x[:, :, hs, ws]
    if kind == "max":
      y[:, :, i, j] = win.max((2, 3))
    else:
      y[:, :, i, j] = win.sum((2, 3)) / (pad_count if include_pad else win[0, 0].size)
  return y


POOLS = [(2, 2, 0, False), (3, 2, 1, False), (3, 2, 1, True), (2, 1, 0, False), (3, 3, 1, True)]


@pytest.mark.parametrize("k,s,p,ceil_mode", POOLS)
def test_max_and_avg_pool_are_pytorchs_definition(k, s, p, ceil_mode, rng):
  x = rng.standard_normal((2, 3, 7, 6))
  got = F.max_pool2d(x, k, s, p, ceil_mode)
  np.testing.assert_allclose(got, _pool_oracle(x, k, s, p, ceil_mode, "max"))
  got = F.avg_pool2d(x, k, s, p, ceil_mode)  # Paddle's default: padding not counted
  np.testing.assert_allclose(got, _pool_oracle(x, k, s, p, ceil_mode, "avg"), rtol=1e-12)
  got = F.avg_pool2d(x, k, s, p, ceil_mode, count_include_pad=True)
  np.testing.assert_allclose(got, _pool_oracle(x, k, s, p, ceil_mode, "avg", True), rtol=1e-12)
  nhwc = F.max_pool2d(np.moveaxis(x, 1, -1), k, s, p, ceil_mode, data_format="NHWC")
  np.testing.assert_allclose(
    np.moveaxis(np.asarray(nhwc), -1, 1), _pool_oracle(x, k, s, p, ceil_mode, "max")
  )


def test_max_pool_gradient_goes_to_each_windows_maximum(rng):
  x = rng.permutation(64).reshape(1, 1, 8, 8).astype(float)
  g = primc.grad(lambda x: pnp.sum(F.max_pool2d(x, 2)))(x)
  want = np.zeros_like(x)
  for i, j in np.ndindex(4, 4):
    win = x[0, 0, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
    a, b = np.unravel_index(np.argmax(win), win.shape)
    want[0, 0, 2 * i + a, 2 * j + b] = 1
  np.testing.assert_array_equal(g, want)
  np.testing.assert_array_equal(
    primc.jit(primc.grad(lambda x: pnp.sum(F.max_pool2d(x, 2))))(x), want
  )


@pytest.mark.parametrize("size,out", [(7, 3), (6, 3), (5, 7), (4, 1)])
def test_adaptive_avg_pool_uses_floor_and_ceil_bins(size, out, rng):
  x = rng.standard_normal((2, 3, size, size + 1))
  got = np.asarray(F.adaptive_avg_pool2d(x, out))
  want = np.empty((2, 3, out, out))
  for i, j in np.ndindex(out, out):
    h0, h1 = (i * size) // out, -(-((i + 1) * size) // out)
    w0, w1 = (j * (size + 1)) // out, -(-((j + 1) * (size + 1)) // out)
    want[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean((2, 3))
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_pooling_derivatives_by_finite_differences(rng):
  x = rng.standard_normal((1, 2, 6, 5))
  f = lambda x: (
    pnp.sum(pnp.sin(F.avg_pool2d(x, 3, 2, 1)))
    + pnp.sum(F.adaptive_avg_pool2d(x, (4, 2)) ** 2)
    + pnp.sum(F.max_pool2d(x, 3, 2, 1, ceil_mode=True) ** 3)
  )
  primc.check_grads(f, (x,), order=2, modes=("fwd", "rev"))
