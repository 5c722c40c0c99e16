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

_MODES = ("full", "valid", "same")


def _operands(in1, in2, name):
  in1, in2 = pnp._promote_list([pnp._float(in1), pnp._float(in2)])
  s1, s2 = aval_of(in1).shape, aval_of(in2).shape
  if len(s1) != len(s2):
    raise ValueError(f"{name}: in1 and in2 should have the same dimensionality, got shapes "
                     f"{s1} and {s2}")
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
      raise ValueError(f"{name}: for 'valid' mode, one input must be at least as large as "
                       f"the other in every dimension, got shapes {s1} and {s2}")
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
def convolve(in1, in2, mode="full", method="auto"):
  """scipy.signal.convolve of real N-d arrays (every `method` gives the direct sums)."""
  in1, in2 = _operands(in1, in2, "convolve")
  if mode == "valid" and not all(n >= m for n, m in zip(aval_of(in1).shape,
                                                        aval_of(in2).shape)):
    in1, in2 = in2, in1  # convolution commutes; scipy swaps for 'valid' too
  return _correlate(in1, _flip_all(in2), mode, "convolve")[0]


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
      raise NotSupportedError(f"scipy.signal.{name} with boundary={boundary!r}, "
                              f"fillvalue={fillvalue!r} (zero fill is supported)")
    if pnp.ndim(in1) != 2 or pnp.ndim(in2) != 2:
      raise ValueError(f"{name} inputs must both be 2-D arrays")
    return fn(in1, in2, mode)
  fn2d.__name__ = name
  return _op(fn2d)


convolve2d = _two_d(convolve, "convolve2d")
correlate2d = _two_d(_correlate2d_same, "correlate2d")


def __getattr__(name: str):
  import scipy.signal
  if name.startswith("__") or not hasattr(scipy.signal, name):
    raise AttributeError(f"module 'primc.scipy.signal' has no attribute {name!r}")
  raise NotSupportedError(f"primc.scipy.signal.{name} (scipy.signal.{name}) is not "
                          f"supported yet; the README's scipy section lists what is")
