"""Convolutions and windowed reductions (JAX's `lax` spellings, re-exported by `primc.lax`).

  conv_general_dilated  N-d convolution: strides, padding (explicit pairs, "SAME",
                        "SAME_LOWER", "VALID"), lhs and rhs dilation, feature groups,
                        dimension numbers ("NCHW"/"OIHW"/"NCHW", "NHWC"/"HWIO"/"NHWC", or
                        index tuples)
  conv                  conv_general_dilated with default dilations and layouts
  conv_transpose        the gradient of a strided convolution as a layer (up-sampling)
  reduce_window         a binary computation (max, min, add, or any traceable function)
                        folded over each window, padded with its initial value

A convolution is one `conv` primitive (VALID, NC*/OI* layouts) between transposes and a pad
(lhs dilation is the pad's interior): its derivatives of every order are convolutions.
A windowed reduction is a fold of strided slices of its operand (one slice per window
offset), so its derivatives, batching and fusion are those of slices and elementwise ops; a
max pool's derivative goes to the window's maximum (ties: see `primc.prims`' max rule).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import numpy as np

from primc import numpy as pnp
from primc import prims as P
from primc.core import PrimcError
from primc.trace import aval_of


def per_dim(value, n: int, what: str, default: int = 1) -> tuple[int, ...]:
  """`value` as n ints: None (the default), one int for every dim, or n of them."""
  if value is None:
    return (default,) * n
  if isinstance(value, (int, np.integer)):
    return (int(value),) * n
  value = tuple(int(v) for v in value)
  if len(value) != n:
    raise PrimcError(f"{what} needs {n} entries (one per spatial dim), got {value}")
  return value


def _specs(dimension_numbers, ndim: int) -> tuple[tuple[int, ...], ...]:
  """(lhs, rhs, out) permutations to (N, C, *spatial), (O, I, *spatial), (N, C, *spatial)."""
  if dimension_numbers is None:
    return (tuple(range(ndim)),) * 3
  lhs, rhs, out = dimension_numbers
  if not isinstance(lhs, str):
    return tuple(tuple(int(d) for d in spec) for spec in (lhs, rhs, out))
  if not (len(lhs) == len(rhs) == len(out) == ndim):
    raise PrimcError(f"dimension numbers {dimension_numbers} need {ndim} letters each")
  spatial = [ch for ch in rhs if ch not in "OI"]

  def perm(spec: str, first: str, second: str) -> tuple[int, ...]:
    if sorted(spec) != sorted(first + second + "".join(spatial)):
      raise PrimcError(
        f"dimension numbers {dimension_numbers}: {spec!r} needs {first!r}, {second!r} and "
        f"the kernel's spatial letters {''.join(spatial)!r}"
      )
    return (spec.index(first), spec.index(second), *(spec.index(ch) for ch in spatial))

  return perm(lhs, "N", "C"), perm(rhs, "O", "I"), perm(out, "N", "C")


def padding_pairs(padding, sizes, windows, strides) -> list[tuple[int, int]]:
  """Explicit (low, high) pairs of `padding` ("VALID", "SAME", "SAME_LOWER" or pairs) for
  inputs of `sizes` and (dilated) windows: SAME keeps ceil(size / stride) outputs, its odd
  pad at the high end (SAME_LOWER: at the low end)."""
  n = len(sizes)
  if isinstance(padding, str):
    kind = padding.upper()
    if kind == "VALID":
      return [(0, 0)] * n
    if kind not in ("SAME", "SAME_LOWER"):
      raise PrimcError(f"padding {padding!r}: expected 'SAME', 'SAME_LOWER', 'VALID' or pairs")
    pairs = []
    for size, k, s in zip(sizes, windows, strides):
      total = max(0, (-(-size // s) - 1) * s + k - size)
      lo = total // 2 if kind == "SAME" else total - total // 2
      pairs.append((lo, total - lo))
    return pairs
  pairs = [(int(p), int(p)) if np.ndim(p) == 0 else tuple(int(q) for q in p) for p in padding]
  if len(pairs) != n or any(len(p) != 2 for p in pairs):
    raise PrimcError(f"padding {padding} needs one (low, high) pair per spatial dim ({n})")
  return pairs


def _pad_and_crop(x, pairs, interior, first: int):
  """x padded with zeros by `pairs` (negative entries crop) on the dims from `first` on,
  `interior` zeros between its elements there."""
  nd = aval_of(x).ndim
  lead = [(0, 0, 0)] * first
  config = lead + [(max(lo, 0), max(hi, 0), i - 1) for (lo, hi), i in zip(pairs, interior)]
  if any(c != (0, 0, 0) for c in config):
    x = P.pad(x, config)
  if any(lo < 0 or hi < 0 for lo, hi in pairs):
    shape = aval_of(x).shape
    start = [0] * first + [max(-lo, 0) for lo, _ in pairs]
    limit = list(shape[:first]) + [n - max(-hi, 0) for n, (_, hi) in zip(shape[first:], pairs)]
    x = P.slice_(x, start, limit, [1] * nd)
  return x


@pnp.takes_front_ends  # eager tensors and static variables too
def conv_general_dilated(
  lhs: Any,
  rhs: Any,
  window_strides: Sequence[int] | None = None,
  padding: Any = "VALID",
  lhs_dilation: Sequence[int] | None = None,
  rhs_dilation: Sequence[int] | None = None,
  dimension_numbers: Any = None,
  feature_group_count: int = 1,
  batch_group_count: int = 1,
  precision: Any = None,
  preferred_element_type: Any = None,
) -> Any:
  """An N-d convolution (cross-correlation, as in every framework), JAX's
  `lax.conv_general_dilated`.

  Args:
    lhs: the input, (N, C, *spatial) unless `dimension_numbers` say otherwise.
    rhs: the kernel, (O, C // feature_group_count, *window).
    window_strides: the stride per spatial dim (default 1).
    padding: "VALID", "SAME", "SAME_LOWER" or a (low, high) pair per spatial dim (negative
      entries crop).
    lhs_dilation: spaces between the input's elements (a transposed convolution).
    rhs_dilation: spaces between the kernel's elements (atrous convolution).
    dimension_numbers: None (NC*, OI*, NC*), three layout strings such as
      ("NHWC", "HWIO", "NHWC"), or three tuples of dim indices.
    feature_group_count: groups of input channels, each convolved with its own outputs
      (C for a depthwise convolution).
    batch_group_count: only 1.
    precision, preferred_element_type: accepted for JAX's signature; the result has the
      operands' (promoted) dtype.

  Returns:
    The output, (N, O, *out) in the layout `dimension_numbers` name.
  """
  if batch_group_count != 1:
    raise PrimcError("conv_general_dilated: batch_group_count other than 1 is not supported")
  lhs, rhs = _operands(lhs, rhs)
  ndim = aval_of(lhs).ndim
  if ndim < 3 or aval_of(rhs).ndim != ndim:
    raise PrimcError(
      f"conv_general_dilated of {aval_of(lhs).shape} and {aval_of(rhs).shape}: needs an input "
      f"and a kernel of one rank, at least 3 (batch, channels, spatial dims)"
    )
  nd = ndim - 2
  lhs_spec, rhs_spec, out_spec = _specs(dimension_numbers, ndim)
  x, w = P.transpose(lhs, lhs_spec), P.transpose(rhs, rhs_spec)
  strides = per_dim(window_strides, nd, "window_strides")
  lhs_d = per_dim(lhs_dilation, nd, "lhs_dilation")
  rhs_d = per_dim(rhs_dilation, nd, "rhs_dilation")
  sizes = [(n - 1) * d + 1 if n else 0 for n, d in zip(aval_of(x).shape[2:], lhs_d)]
  windows = [(k - 1) * d + 1 for k, d in zip(aval_of(w).shape[2:], rhs_d)]
  pairs = padding_pairs(padding, sizes, windows, strides)
  x = _pad_and_crop(x, pairs, lhs_d, 2)
  y = P.conv(x, w, strides, rhs_d, feature_group_count)
  return P.transpose(y, np.argsort(out_spec))


def _operands(lhs, rhs):
  lhs, rhs = pnp.asarray(lhs), pnp.asarray(rhs)
  dtype = np.result_type(aval_of(lhs).dtype, aval_of(rhs).dtype).name
  if dtype not in ("float32", "float64", "float16"):
    dtype = "float64"
  return pnp.asarray(lhs, dtype), pnp.asarray(rhs, dtype)


@pnp.takes_front_ends  # eager tensors and static variables too
def conv(lhs: Any, rhs: Any, window_strides: Sequence[int], padding: Any, **kwargs) -> Any:
  """`conv_general_dilated` in the NC* / OI* layouts (JAX's `lax.conv`)."""
  return conv_general_dilated(lhs, rhs, window_strides, padding, **kwargs)


@pnp.takes_front_ends  # eager tensors and static variables too
def conv_transpose(
  lhs: Any,
  rhs: Any,
  strides: Sequence[int],
  padding: Any,
  rhs_dilation: Sequence[int] | None = None,
  dimension_numbers: Any = None,
) -> Any:
  """A transposed convolution (JAX's `lax.conv_transpose` without kernel flipping): the
  input dilated by the strides, convolved with stride 1. `padding` "SAME" gives size x
  stride outputs, "VALID" (size - 1) x stride + window."""
  nd = aval_of(pnp.asarray(lhs)).ndim - 2
  _, rhs_spec, _ = _specs(dimension_numbers, nd + 2)
  window = [aval_of(pnp.asarray(rhs)).shape[d] for d in rhs_spec[2:]]
  strides = per_dim(strides, nd, "strides")
  rhs_d = per_dim(rhs_dilation, nd, "rhs_dilation")
  if isinstance(padding, str):
    spans = [(k - 1) * d + 1 for k, d in zip(window, rhs_d)]
    padding = [_transpose_pads(padding, k, s) for k, s in zip(spans, strides)]
  return conv_general_dilated(
    lhs, rhs, (1,) * nd, padding, strides, rhs_d, dimension_numbers=dimension_numbers
  )


def _transpose_pads(padding: str, k: int, s: int) -> tuple[int, int]:
  """The padding of a transposed convolution's dilated input: "SAME" gives size x stride
  outputs, "VALID" (size - 1) x stride + max(window, stride)."""
  kind = padding.upper()
  if kind == "SAME":
    total = k + s - 2
    lo = k - 1 if s > k - 1 else -(-total // 2)
  elif kind == "VALID":
    total, lo = k + s - 2 + max(k - s, 0), k - 1
  else:
    raise PrimcError(f"conv_transpose: padding {padding!r}: expected 'SAME', 'VALID' or pairs")
  return lo, total - lo


_FOLDS = {"max": pnp.maximum, "min": pnp.minimum, "add": pnp.add, "sum": pnp.add}


@pnp.takes_front_ends  # eager tensors and static variables too
def reduce_window(
  operand: Any,
  init_value: Any,
  computation: Callable | str,
  window_dimensions: Sequence[int],
  window_strides: Sequence[int] | None = None,
  padding: Any = "VALID",
  base_dilation: Sequence[int] | None = None,
  window_dilation: Sequence[int] | None = None,
) -> Any:
  """`computation` folded over each window of `operand` (JAX's `lax.reduce_window`), every
  window starting from `init_value`; padding and base dilation read as `init_value`.

  Args:
    operand: the array; the window spans all its dims (1 where a dim is not reduced).
    init_value: the fold's start (-inf for a max, 0 for a sum).
    computation: a binary function of arrays (`primc.numpy.maximum`, `add`, ...) or one of
      "max", "min", "add".
    window_dimensions, window_strides, padding, base_dilation, window_dilation: as in
      `conv_general_dilated`, one entry per dim of `operand`.
  """
  x = pnp.asarray(operand)
  shape, dtype = aval_of(x).shape, aval_of(x).dtype
  nd = len(shape)
  fold = _FOLDS[computation] if isinstance(computation, str) else computation
  fold = {np.maximum: pnp.maximum, np.minimum: pnp.minimum, np.add: pnp.add}.get(fold, fold)
  window = per_dim(window_dimensions, nd, "window_dimensions")
  strides = per_dim(window_strides, nd, "window_strides")
  base_d = per_dim(base_dilation, nd, "base_dilation")
  win_d = per_dim(window_dilation, nd, "window_dilation")
  sizes = [(n - 1) * d + 1 if n else 0 for n, d in zip(shape, base_d)]
  spans = [(k - 1) * d + 1 for k, d in zip(window, win_d)]
  pairs = padding_pairs(padding, sizes, spans, strides)
  init = pnp.asarray(init_value, dtype)
  xp = _pad_and_crop(x, pairs, base_d, 0)
  if aval_of(xp).shape != shape and not _zero(init_value):  # padding reads as init
    inside = _pad_and_crop(P.full(shape, True, "bool"), pairs, base_d, 0)
    xp = pnp.where(inside, xp, init)
  padded = aval_of(xp).shape
  out = [P.conv_out_size(n, k, s, d) for n, k, s, d in zip(padded, window, strides, win_d)]
  if any(o < 1 for o in out):
    raise PrimcError(f"reduce_window: window {window} exceeds the padded operand {padded}")
  acc = None
  for offset in itertools.product(*map(range, window)):
    start = [k * d for k, d in zip(offset, win_d)]
    limit = [a + (m - 1) * s + 1 for a, m, s in zip(start, out, strides)]
    part = P.slice_(xp, start, limit, strides)
    acc = part if acc is None else fold(acc, part)
  return acc if _neutral(init_value, fold) else fold(init, acc)


def _zero(value) -> bool:
  return isinstance(value, (int, float, np.number)) and value == 0


def _neutral(init, fold) -> bool:
  """Whether folding `init` in changes nothing: -inf for max, inf for min, 0 for add."""
  if not isinstance(init, (int, float, np.number)):
    return False
  return (
    (fold is pnp.maximum and init == -np.inf)
    or (fold is pnp.minimum and init == np.inf)
    or (fold is pnp.add and init == 0)
  )
