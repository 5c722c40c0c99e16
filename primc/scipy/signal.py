"""`scipy.signal`'s convolutions of N-d real arrays (`convolve`, `correlate`, and the 2-d
`convolve2d`/`correlate2d` with zero fill), traced like `primc.numpy`'s functions.

Every output element is a sum over the kernel's positions, so a correlation is one product:
the input's windows gathered at constant positions (one row per output element, one column
per kernel position) times the flattened kernel. Derivatives in both operands follow from
the gather and the product. Other scipy.signal names raise NotSupportedError naming them.
"""

from __future__ import annotations

import numpy as np

from primc import numpy as pnp
from primc.numpy import NotSupportedError, _op
from primc.trace import aval_of
from primc.scipy._missing import missing

_MODES = ("full", "valid", "same")


def _operands(in1, in2, name):
  in1, in2 = pnp._promote_list([pnp._float(in1), pnp._float(in2)])
  s1, s2 = aval_of(in1).shape, aval_of(in2).shape
  if len(s1) != len(s2):
    raise ValueError(
      f"{name}: in1 and in2 should have the same dimensionality, got shapes {s1} and {s2}"
    )
  if 0 in s1 or 0 in s2:
    raise ValueError(f"{name}: empty input of shape {s1 if 0 in s1 else s2}")
  return in1, in2


def _valid_windows(x, kernel_shape):
  """x's windows of kernel_shape at every position where the kernel fits: (positions,
  kernel elements), from constant flat indices."""
  shape = aval_of(x).shape
  out_shape = tuple(n - m + 1 for n, m in zip(shape, kernel_shape))
  starts = np.indices(out_shape).reshape(len(shape), -1)
  offsets = np.indices(kernel_shape).reshape(len(shape), -1)
  flat = np.ravel_multi_index(tuple(starts[:, :, None] + offsets[:, None, :]), shape)
  return pnp.take(pnp.ravel(x), flat.astype(np.int64)), out_shape


def _correlate(in1, in2, mode, name):
  """sum_j in1[i + j] in2[j] over the positions of `mode` (scipy's: 'full' pads in1 by the
  kernel less one, 'same' is the middle of 'full' at in1's shape, 'valid' where in2 fits;
  for 'valid', in2 may instead contain in1, and the two are swapped as scipy does)."""
  if mode not in _MODES:
    raise ValueError(f"{name}: mode must be one of {_MODES}, got {mode!r}")
  s1, s2 = aval_of(in1).shape, aval_of(in2).shape
  if mode == "valid":
    if not all(n >= m for n, m in zip(s1, s2)):
      if all(m >= n for n, m in zip(s1, s2)):
        return _correlate(in2, in1, mode, name)[0], True
      raise ValueError(
        f"{name}: for 'valid' mode, one input must be at least as large as "
        f"the other in every dimension, got shapes {s1} and {s2}"
      )
    x = in1
  else:
    x = pnp.pad(in1, [(m - 1, m - 1) for m in s2])
  windows, out_shape = _valid_windows(x, s2)
  out = pnp.reshape(pnp.matmul(windows, pnp.ravel(in2)), out_shape)
  if mode == "same":
    out = out[tuple(slice((m - 1) // 2, (m - 1) // 2 + n) for n, m in zip(s1, s2))]
  return out, False


def _flip_all(x):
  return pnp.flip(x, tuple(range(aval_of(x).ndim)))


@_op
def convolve(in1, in2, mode="full", method="auto", *, axes=None, dot_axes=None):
  """scipy.signal.convolve of real N-d arrays (every `method` gives the direct sums).

  `axes=(axes1, axes2)` (autograd's generalization): convolve in1's axes `axes1[i]` with
  in2's `axes2[i]` only, summing over the pairs `dot_axes=(dots1, dots2)` as `tensordot`
  does; the result's axes are in1's others, then in2's others, then one per convolved pair
  (its length by `mode`, 'same' giving in1's)."""
  if axes is not None or dot_axes is not None:
    return _convolve_axes(in1, in2, mode, axes, dot_axes)
  in1, in2 = _operands(in1, in2, "convolve")
  if mode == "valid" and not all(n >= m for n, m in zip(aval_of(in1).shape, aval_of(in2).shape)):
    in1, in2 = in2, in1  # convolution commutes; scipy swaps for 'valid' too
  return _correlate(in1, _flip_all(in2), mode, "convolve")[0]


def _axis_pairs(pairs, nd1, nd2, what):
  if pairs is None:
    return (), ()
  try:
    first, second = (tuple(int(a) for a in side) for side in pairs)
  except (TypeError, ValueError):
    raise ValueError(f"convolve: {what} must be a pair of sequences of axes, got {pairs!r}")
  if len(first) != len(second):
    raise ValueError(f"convolve: {what} pairs {len(first)} axes of in1 with {len(second)} of in2")
  for axis, nd in [(a, nd1) for a in first] + [(a, nd2) for a in second]:
    if not -nd <= axis < nd:
      raise ValueError(f"convolve: {what} names axis {axis} of an array of {nd} dimensions")
  return tuple(a % nd1 for a in first), tuple(a % nd2 for a in second)


def _convolve_axes(in1, in2, mode, axes, dot_axes):
  """The generalized convolution: the full one from in2 padded by in1's sizes less one and
  gathered in windows (one row per position, one column per in1 element), times in1
  reversed, contracted over the windows and the dot axes; 'valid' and 'same' are slices of
  it (scipy's: 'same' centred at in1's size)."""
  if mode not in _MODES:
    raise ValueError(f"convolve: mode must be one of {_MODES}, got {mode!r}")
  if axes is None:
    raise ValueError("convolve: dot_axes needs axes (the pairs to convolve)")
  in1, in2 = pnp._promote_list([pnp._float(in1), pnp._float(in2)])
  s1, s2 = aval_of(in1).shape, aval_of(in2).shape
  conv1, conv2 = _axis_pairs(axes, len(s1), len(s2), "axes")
  dot1, dot2 = _axis_pairs(dot_axes, len(s1), len(s2), "dot_axes")
  for used, nd, which in ((conv1 + dot1, len(s1), "in1"), (conv2 + dot2, len(s2), "in2")):
    if len(set(used)) != len(used):
      raise ValueError(f"convolve: an axis of {which} is named twice in axes/dot_axes")
  for a, b in zip(dot1, dot2):
    if s1[a] != s2[b]:
      raise ValueError(
        f"convolve: dot axes {a} of in1 and {b} of in2 differ in size ({s1[a]} vs {s2[b]})"
      )
  n, m = [s1[a] for a in conv1], [s2[b] for b in conv2]
  if mode == "valid" and not (
    all(x >= y for x, y in zip(n, m)) or all(y >= x for x, y in zip(n, m))
  ):
    raise ValueError(
      f"convolve: for 'valid' mode, one input must be at least as large as "
      f"the other along every convolved axis, got {n} and {m}"
    )
  rest1 = [a for a in range(len(s1)) if a not in conv1 + dot1]
  rest2 = [b for b in range(len(s2)) if b not in conv2 + dot2]
  a = pnp.transpose(in1, rest1 + list(dot1) + list(conv1))
  b = pnp.transpose(in2, rest2 + list(dot2) + list(conv2))
  b = pnp.pad(b, [(0, 0)] * (len(rest2) + len(dot2)) + [(x - 1, x - 1) for x in n])
  full = [x + y - 1 for x, y in zip(n, m)]
  padded = [y + 2 * (x - 1) for x, y in zip(n, m)]
  starts = np.indices(full).reshape(len(n), int(np.prod(full)))
  offsets = np.indices(n).reshape(len(n), int(np.prod(n)))
  flat = np.ravel_multi_index(tuple(starts[:, :, None] + offsets[:, None, :]), padded)
  flat = flat.reshape(starts.shape[1], offsets.shape[1])  # (positions, in1's elements)
  lead2 = [s2[x] for x in rest2 + list(dot2)]
  windows = pnp.take(pnp.reshape(b, lead2 + [-1]), flat.astype(np.int64), axis=len(lead2))
  kernel = pnp.reshape(
    pnp.flip(a, tuple(range(len(rest1) + len(dot1), len(s1)))),
    [s1[x] for x in rest1 + list(dot1)] + [-1],
  )
  k = len(dot1)
  out = pnp.tensordot(
    kernel,
    windows,
    axes=(
      list(range(len(rest1), len(rest1) + k + 1)),
      list(range(len(rest2), len(rest2) + k)) + [len(lead2) + 1],
    ),
  )
  out = pnp.reshape(out, [s1[x] for x in rest1] + [s2[x] for x in rest2] + full)
  if mode == "full":
    return out
  if mode == "valid":
    keep = [slice(min(x, y) - 1, max(x, y)) for x, y in zip(n, m)]
  else:
    keep = [slice((y - 1) // 2, (y - 1) // 2 + x) for x, y in zip(n, m)]
  return out[tuple([slice(None)] * (len(rest1) + len(rest2)) + keep)]


@_op
def correlate(in1, in2, mode="full", method="auto"):
  """scipy.signal.correlate of real N-d arrays; for 'valid' with in2 the larger, scipy's
  result: the correlation of in2 with in1, reversed."""
  in1, in2 = _operands(in1, in2, "correlate")
  out, swapped = _correlate(in1, in2, mode, "correlate")
  return _flip_all(out) if swapped else out


def _correlate2d_same(in1, in2, mode):
  """scipy.signal.correlate2d's 'same' is centered otherwise than correlate's: the middle
  of 'full' from m // 2 (correlate: (m - 1) // 2), m the kernel's size on each axis."""
  if mode != "same":
    return correlate(in1, in2, mode)
  full = correlate(in1, in2, "full")
  return full[tuple(slice(m // 2, m // 2 + n) for n, m in zip(pnp.shape(in1), pnp.shape(in2)))]


def _two_d(fn, name):
  def fn2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    if boundary != "fill" or fillvalue != 0:
      raise NotSupportedError(
        f"scipy.signal.{name} with boundary={boundary!r}, "
        f"fillvalue={fillvalue!r} (zero fill is supported)"
      )
    if pnp.ndim(in1) != 2 or pnp.ndim(in2) != 2:
      raise ValueError(f"{name} inputs must both be 2-D arrays")
    return fn(in1, in2, mode)

  fn2d.__name__ = name
  return _op(fn2d)


convolve2d = _two_d(convolve, "convolve2d")
correlate2d = _two_d(_correlate2d_same, "correlate2d")


def __getattr__(name: str):
  raise missing("signal", name)


pnp.wrap_public_functions(globals(), __name__)  # eager tensors and static variables too
