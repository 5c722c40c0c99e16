"""Functional layers, spelled as Paddle's `paddle.nn.functional` and PyTorch's
`torch.nn.functional` spell them (NC* layouts by default; `data_format="NHWC"` for channels
last; kernels are (out, in / groups, *window) in both).

Each is composed of `primc.numpy` and `primc.lax` operations, so it runs on plain arrays,
traced values (jit, grad, vmap), eager tensors and static variables alike.

Decisions where the two frameworks differ: `avg_pool*` excludes padding from the divisor
(Paddle's `exclusive=True`; pass `count_include_pad=True` for PyTorch's default);
`batch_norm`'s `momentum` is Paddle's (running = momentum * running + (1 - momentum) *
batch), and its running variance takes the unbiased batch variance (as PyTorch's).
`dropout` needs a `key` (`primc.random`) inside a traced function: a mask drawn in Python
would be the same at every call of the compiled program.
"""

from __future__ import annotations

import math
import numpy as np

from primc import numpy as pnp
from primc import random as prandom
from primc.convolution import conv_general_dilated, padding_pairs, per_dim, reduce_window
from primc.core import PrimcError
from primc.nn.base import generator
from primc.trace import Tracer, aval_of

relu = pnp.relu
sigmoid = pnp.sigmoid
softmax = pnp.softmax
log_softmax = pnp.log_softmax
tanh = pnp.tanh

_SPATIAL = {1: "H", 2: "HW", 3: "DHW"}
_LAYOUTS = ((1, "NCL"), (2, "NCHW"), (3, "NCDHW"))  # each rank's default data_format


def _pairs(padding, n: int):
  """Padding as (low, high) pairs or "SAME"/"VALID": an int, one int per dim, Paddle's 2n
  ints (low, high per dim) or pairs."""
  if isinstance(padding, str):
    return padding.upper()
  if isinstance(padding, (int, np.integer)):
    return [(int(padding),) * 2] * n
  padding = list(padding)
  if len(padding) == n and all(np.ndim(p) == 0 for p in padding):
    return [(int(p), int(p)) for p in padding]
  if len(padding) == 2 * n and all(np.ndim(p) == 0 for p in padding):
    return [(int(padding[2 * i]), int(padding[2 * i + 1])) for i in range(n)]
  return [tuple(int(q) for q in p) for p in padding]


def _shape(x) -> tuple[int, ...]:
  """x's shape: arrays, traced values, eager tensors and static variables alike."""
  shape = getattr(x, "shape", None)
  return tuple(shape) if shape is not None else aval_of(pnp.asarray(x)).shape


def _channel_last(data_format: str, nd: int) -> bool:
  if data_format not in (f"NC{_SPATIAL[nd]}", f"N{_SPATIAL[nd]}C", "NCL", "NLC"):
    raise PrimcError(f"data_format {data_format!r} is not a {nd}-d layout")
  return data_format[-1] == "C"


def _conv(x, weight, bias, stride, padding, dilation, groups, data_format, nd):
  last = _channel_last(data_format, nd)
  sp = _SPATIAL[nd]
  dn = (f"N{sp}C", f"OI{sp}", f"N{sp}C") if last else None
  y = conv_general_dilated(
    x,
    weight,
    per_dim(stride, nd, "stride"),
    _pairs(padding, nd),
    rhs_dilation=per_dim(dilation, nd, "dilation"),
    dimension_numbers=dn,
    feature_group_count=groups,
  )
  if bias is None:
    return y
  return pnp.add(y, pnp.reshape(bias, [1] * (nd + 1) + [-1] if last else [1, -1] + [1] * nd))


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCL"):
  """1-d convolution of x (N, C, L) with weight (O, C / groups, K)."""
  return _conv(x, weight, bias, stride, padding, dilation, groups, data_format, 1)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW"):
  """2-d convolution of x (N, C, H, W) with weight (O, C / groups, KH, KW).

  Args:
    padding: an int, one per dim, (low, high) pairs, Paddle's four ints, or "same"/"valid".
  """
  return _conv(x, weight, bias, stride, padding, dilation, groups, data_format, 2)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCDHW"):
  """3-d convolution of x (N, C, D, H, W) with weight (O, C / groups, KD, KH, KW)."""
  return _conv(x, weight, bias, stride, padding, dilation, groups, data_format, 3)


def _ceil_extra(sizes, window, strides, pairs, ceil_mode):
  """Extra high padding for ceil_mode: one more window where it starts inside the input or
  its low padding (PyTorch's and Paddle's rule)."""
  extra = []
  for n, k, s, (lo, hi) in zip(sizes, window, strides, pairs):
    span = n + lo + hi - k
    out = -(-span // s) + 1 if ceil_mode else span // s + 1
    if ceil_mode and (out - 1) * s >= n + lo:
      out -= 1
    extra.append(max(0, (out - 1) * s + k - (n + lo + hi)))
  return extra


def _pool(x, kernel_size, stride, padding, ceil_mode, data_format, nd):
  """The pool's full-rank window, strides and padding pairs, and where its spatial dims are."""
  last = _channel_last(data_format, nd)
  shape = _shape(x)
  if len(shape) != nd + 2:
    raise PrimcError(f"a {nd}-d pool takes (N, C, *{nd} dims), got shape {shape}")
  k = per_dim(kernel_size, nd, "kernel_size")
  s = k if stride is None else per_dim(stride, nd, "stride")
  spatial = list(range(1, nd + 1)) if last else list(range(2, nd + 2))
  sizes = [shape[d] for d in spatial]
  pairs = _pairs(padding, nd)
  if isinstance(pairs, str):
    pairs = padding_pairs(pairs, sizes, k, s)
  extra = _ceil_extra(sizes, k, s, pairs, ceil_mode)
  window, strides, full = [1] * (nd + 2), [1] * (nd + 2), [(0, 0)] * (nd + 2)
  for i, d in enumerate(spatial):
    window[d], strides[d], full[d] = k[i], s[i], (pairs[i][0], pairs[i][1] + extra[i])
  return window, strides, full, spatial, pairs


def _max_pool_of(nd: int, layout: str):
  def max_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False, data_format=layout):
    window, strides, full, _, _ = _pool(x, kernel_size, stride, padding, ceil_mode, data_format, nd)
    return reduce_window(x, -np.inf, "max", window, strides, full)

  max_pool.__name__ = max_pool.__qualname__ = f"max_pool{nd}d"
  max_pool.__doc__ = f"""Max over each window of a {nd}-d input (stride defaults to the
  window); padding never wins; `ceil_mode` adds a last window that starts inside the input."""
  return max_pool


def _avg_pool_of(nd: int, layout: str):
  def avg_pool(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    exclusive=True,
    divisor_override=None,
    data_format=layout,
    count_include_pad=None,
  ):
    include = (not exclusive) if count_include_pad is None else bool(count_include_pad)
    pool = _pool(x, kernel_size, stride, padding, ceil_mode, data_format, nd)
    return _avg_pool(x, pool, include, divisor_override)

  avg_pool.__name__ = avg_pool.__qualname__ = f"avg_pool{nd}d"
  avg_pool.__doc__ = f"""Mean over each window of a {nd}-d input. The divisor counts the
  window's elements inside the input (`exclusive=True`, Paddle's default) or inside the input
  and its padding (`count_include_pad=True`, PyTorch's default), or is `divisor_override`."""
  return avg_pool


max_pool1d, max_pool2d, max_pool3d = (_max_pool_of(*a) for a in _LAYOUTS)
avg_pool1d, avg_pool2d, avg_pool3d = (_avg_pool_of(*a) for a in _LAYOUTS)


def _avg_pool(x, pool, include: bool, divisor):
  window, strides, full, spatial, pairs = pool
  total = reduce_window(x, 0.0, "add", window, strides, full)
  if divisor is not None:
    return pnp.divide(total, float(divisor))
  shape = _shape(x)
  ones, cut = [], []
  for d, n in enumerate(shape):
    lo, hi = pairs[spatial.index(d)] if d in spatial else (0, 0)
    # the input and its explicit padding count, or the input alone; ceil_mode's extra never
    ones.append(n + lo + hi if include and d in spatial else n if d in spatial else 1)
    cut.append((0, full[d][1] - hi) if include else full[d])
  counts = _window_sums(np.ones(ones), window, strides, cut)
  return pnp.divide(total, counts.astype(str(total.dtype)))


def _window_sums(a: np.ndarray, window, strides, pads) -> np.ndarray:
  """The sums over each window of a zero-padded numpy array (a constant: computed here, not
  staged, even inside a trace)."""
  a = np.pad(a, pads)
  views = np.lib.stride_tricks.sliding_window_view(a, window)
  views = views[tuple(slice(None, None, s) for s in strides)]
  return views.sum(tuple(range(a.ndim, 2 * a.ndim)))


def _bins(n: int, out: int) -> np.ndarray:
  """(out, n) averaging matrix of adaptive pooling: bin i spans floor(i n / out) to
  ceil((i + 1) n / out)."""
  a = np.zeros((out, n))
  for i in range(out):
    lo, hi = (i * n) // out, -(-((i + 1) * n) // out)
    a[i, lo:hi] = 1.0 / (hi - lo)
  return a


def adaptive_avg_pool2d(x, output_size, data_format="NCHW"):
  """Mean over PyTorch's and Paddle's adaptive bins, to `output_size` (an int, a pair, None
  entries keep a size)."""
  return _adaptive_avg_pool(x, output_size, data_format, 2)


def adaptive_avg_pool1d(x, output_size, data_format="NCL"):
  return _adaptive_avg_pool(x, output_size, data_format, 1)


def _adaptive_avg_pool(x, output_size, data_format, nd):
  last = _channel_last(data_format, nd)
  shape = _shape(x)
  spatial = list(range(1, nd + 1)) if last else list(range(2, nd + 2))
  outs = [output_size] * nd if output_size is None or np.ndim(output_size) == 0 else output_size
  for d, out in zip(spatial, outs):
    n = shape[d]
    out = n if out is None else int(out)
    if out == n:
      continue
    bins = np.asarray(_bins(n, out).T, str(x.dtype))  # (n, out)
    x = pnp.moveaxis(pnp.matmul(pnp.moveaxis(x, d, -1), bins), -1, d)
  return x


def flatten(x, start_axis=1, stop_axis=-1):
  """x with dims start_axis..stop_axis merged into one (Paddle's and PyTorch's flatten)."""
  shape = _shape(x)
  nd = len(shape)
  a, b = start_axis % nd, stop_axis % nd
  return pnp.reshape(x, shape[:a] + (math.prod(shape[a : b + 1]),) + shape[b + 1 :])


def linear(x, weight, bias=None):
  """x @ weight + bias, weight (in, out) as Paddle's (PyTorch's is its transpose)."""
  y = pnp.matmul(x, weight)
  return y if bias is None else pnp.add(y, bias)


def cross_entropy(
  input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1
):
  """Softmax cross entropy of logits against integer class labels (or probabilities with
  `soft_label=True`)."""
  if weight is not None or ignore_index != -100:
    raise PrimcError("cross_entropy: weight and ignore_index are not supported yet")
  return pnp.cross_entropy(input, label, axis=axis, soft_label=soft_label, reduction=reduction)


def _traced(x) -> bool:
  return isinstance(x, Tracer)


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", key=None):
  """Zeroes each element with probability p while training. `upscale_in_train` scales the
  kept ones by 1 / (1 - p) (PyTorch's and Paddle's default); `downscale_in_infer` scales by
  1 - p at inference instead. The mask comes from `key` (`primc.random`), else from the
  generator `primc.seed` resets, which a traced function may not use."""
  if mode not in ("upscale_in_train", "downscale_in_infer"):
    raise PrimcError(f"dropout: mode {mode!r} is not upscale_in_train or downscale_in_infer")
  if not 0.0 <= p <= 1.0:
    raise PrimcError(f"dropout: p must be in [0, 1], got {p}")
  if not training:
    return x if mode == "upscale_in_train" else pnp.multiply(x, 1.0 - p)
  if p == 0.0:
    return x
  shape = _shape(x)
  mask_shape = (
    shape
    if axis is None
    else [
      n if d in ((axis,) if np.ndim(axis) == 0 else tuple(axis)) else 1 for d, n in enumerate(shape)
    ]
  )
  if key is not None:
    keep = prandom.bernoulli(key, 1.0 - p, mask_shape)
  elif _traced(x):
    raise PrimcError(
      "dropout in a traced function (jit, grad, vmap) needs key= (primc.random.key): a mask "
      "drawn in Python would be the same at every call of the compiled program"
    )
  else:
    keep = generator().random(mask_shape) >= p
  scale = 1.0 / (1.0 - p) if mode == "upscale_in_train" and p < 1.0 else 1.0
  return pnp.where(keep, pnp.multiply(x, scale), 0.0)


def batch_norm(
  x,
  running_mean,
  running_var,
  weight=None,
  bias=None,
  training=False,
  momentum=0.9,
  epsilon=1e-5,
  data_format="NCHW",
  use_global_stats=None,
):
  """Batch normalization over every dim but the channels'. Training normalizes by the
  batch's statistics; inference (or `use_global_stats=True`) by the running ones. Returns
  the output only; `batch_statistics` gives what a layer folds into its running values."""
  shape, axes = _per_channel(x, data_format)
  use_batch = training if use_global_stats is None else not use_global_stats
  if use_batch:
    return _normalized(x, axes, epsilon, weight, bias, shape)
  mean, var = pnp.reshape(running_mean, shape), pnp.reshape(running_var, shape)
  return _scaled(pnp.subtract(x, mean), var, epsilon, weight, bias, shape)


def _per_channel(x, data_format):
  """(the shape a channel's values broadcast from, the axes reduced over): every dim but
  the channels' (the second, or the last for channels-last layouts)."""
  full = _shape(x)
  nd = len(full)
  c = 1 if data_format[1] == "C" or nd == 2 else nd - 1
  return [full[d] if d == c else 1 for d in range(nd)], tuple(d for d in range(nd) if d != c)


def _normalized(x, axes, epsilon, weight, bias, shape=None):
  """(x - mean) / sqrt(var + epsilon) over `axes`, then scaled and shifted."""
  mean = pnp.mean(x, axis=axes, keepdims=True)
  centered = pnp.subtract(x, mean)
  var = pnp.mean(pnp.square(centered), axis=axes, keepdims=True)
  return _scaled(centered, var, epsilon, weight, bias, shape)


def _scaled(centered, var, epsilon, weight, bias, shape):
  """centered / sqrt(var + epsilon) * weight + bias (weight and bias reshaped to `shape`)."""
  y = pnp.multiply(centered, pnp.reciprocal(pnp.sqrt(pnp.add(var, epsilon))))
  fit = (lambda v: v) if shape is None else (lambda v: pnp.reshape(v, shape))
  if weight is not None:
    y = pnp.multiply(y, fit(weight))
  return y if bias is None else pnp.add(y, fit(bias))


def batch_statistics(x, data_format="NCHW"):
  """(mean, unbiased variance) per channel of x: what running statistics are updated with."""
  _, axes = _per_channel(x, data_format)
  count = math.prod(_shape(x)[d] for d in axes)
  mean = pnp.mean(x, axis=axes)
  var = pnp.var(x, axis=axes)
  return mean, pnp.multiply(var, count / max(count - 1, 1))


def layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-5):
  """Normalization over the last len(normalized_shape) dims."""
  n = 1 if np.ndim(normalized_shape) == 0 else len(normalized_shape)
  return _normalized(x, tuple(range(-n, 0)), epsilon, weight, bias)
