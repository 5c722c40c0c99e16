"""Counter-based random numbers (JAX's `jax.random` spellings): a key and a counter in,
bits out, by Philox-4x64-10 written in primc's integer operations.

A draw is a pure function of its key and its shape: jitted, vmapped, differentiated and
cached programs draw the same numbers for the same key in every process, and a key is an
ordinary input (pass a new one for new numbers). Bits and uniforms are the same compiled
and interpreted; normals go through erfinv, whose compiled and numpy forms may differ in
the last bits. Keys are int64[2], the two 64-bit words of
Philox's key as two's-complement bit patterns; `key(seed)` is (seed, 0).

The stream is numpy's: `uniform(key(s), (n,), "float64")` equals
`np.random.Generator(np.random.Philox(key=s)).random(n)` bit for bit, and float32 draws
equal `random(n, dtype=np.float32)` (numpy's Philox starts at counter 1; so does a draw).
`split` and `fold_in` derive keys from other counters (their second word 1 and 2), so a
derived key's stream does not overlap its parent's draws.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from primc import numpy as pnp
from primc import prims as P
from primc.core import PrimcError
from primc.trace import aval_of

_M32 = 0xFFFFFFFF
_MUL = (0xD2E7470EE14C6C93, 0xCA5A826395121157)  # the round multipliers
_WEYL = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)  # the key schedule's increments
ROUNDS = 10


def _word(v: int) -> np.int64:
  """An unsigned 64-bit value as the int64 of its bits."""
  v &= (1 << 64) - 1
  return np.int64(v - (1 << 64) if v >= 1 << 63 else v)


def _high(x):
  """x's upper 32 bits (a logical shift: the sign's copies masked off)."""
  return pnp.bitwise_and(pnp.right_shift(x, np.int64(32)), np.int64(_M32))


def _low(x):
  return pnp.bitwise_and(x, np.int64(_M32))


def _mulhilo(m: int, x):
  """(high, low) 64-bit words of the 128-bit product m * x, from 32-bit halves (int64
  products wrap modulo 2^64, which is what the low words need)."""
  m0, m1 = np.int64(m & _M32), np.int64(m >> 32)
  x0, x1 = _low(x), _high(x)
  p00, p01 = pnp.multiply(x0, m0), pnp.multiply(x0, m1)
  p10, p11 = pnp.multiply(x1, m0), pnp.multiply(x1, m1)
  mid = pnp.add(pnp.add(_high(p00), _low(p01)), _low(p10))
  hi = pnp.add(pnp.add(p11, _high(p01)), pnp.add(_high(p10), _high(mid)))
  return hi, pnp.multiply(x, _word(m))


def philox(counter: Sequence[Any], key: Sequence[Any]) -> list:
  """Philox-4x64-10 of four counter words and two key words (int64 arrays that broadcast):
  the four output words."""
  c, k = list(counter), list(key)
  xor = pnp.bitwise_xor
  for r in range(ROUNDS):
    hi0, lo0 = _mulhilo(_MUL[0], c[0])
    hi1, lo1 = _mulhilo(_MUL[1], c[2])
    c = [xor(xor(hi1, c[1]), k[0]), lo1, xor(xor(hi0, c[3]), k[1]), lo0]
    if r < ROUNDS - 1:
      k = [pnp.add(k[0], _word(_WEYL[0])), pnp.add(k[1], _word(_WEYL[1]))]
  return c


def _key_words(key) -> tuple:
  key = pnp.asarray(key)
  a = aval_of(key)
  if a.shape != (2,) or a.dtype != "int64":
    raise PrimcError(
      f"a random key is int64[2] (primc.random.key(seed), split, fold_in), got "
      f"{a.dtype}{list(a.shape)}"
    )
  return key[0], key[1]


def _words(key, n: int, stream: int = 0):
  """n 64-bit words (int64) of key's stream: counters (1, stream, 0, 0), (2, stream, 0, 0), ..."""
  blocks = max(1, -(-n // 4))
  k0, k1 = _key_words(key)
  ctr = pnp.add(P.iota((blocks,), 0, "int64"), np.int64(1))
  zero = np.zeros((), np.int64)
  out = philox([ctr, np.int64(stream), zero, zero], [k0, k1])
  words = pnp.reshape(pnp.stack([pnp.broadcast_to(w, (blocks,)) for w in out], 1), (-1,))
  return words[:n]


def key(seed: int) -> np.ndarray:
  """A key from an integer seed: Philox's key words (seed mod 2^64, 0)."""
  return np.array([_word(int(seed)), 0], np.int64)


PRNGKey = key


def split(key: Any, num: int = 2) -> Any:
  """`num` new keys (num, 2) from `key`."""
  return pnp.reshape(_words(key, 2 * int(num), stream=1), (int(num), 2))


def fold_in(key: Any, data: int) -> Any:
  """A new key from `key` and an integer (a step number, a worker's index)."""
  k0, k1 = _key_words(key)
  zero = np.zeros((), np.int64)
  out = philox([pnp.asarray(data, "int64"), np.int64(2), zero, zero], [k0, k1])
  return pnp.stack([out[0], out[1]])


def bits(key: Any, shape: Sequence[int] = ()) -> Any:
  """Random 64-bit words (int64 bit patterns) of `shape`."""
  shape = _shape(shape)
  return pnp.reshape(_words(key, math.prod(shape)), shape)


def _shape(shape) -> tuple[int, ...]:
  return (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)


def _unit(key, shape, dtype: str, half: float = 0.0):
  """Uniform floats in [0, 1) (`half` = 0.5: in (0, 1)) from numpy's bits: 53 bits of a word
  for float64, 24 bits of each half word (low half first) for float32."""
  n = math.prod(shape)
  if dtype == "float64":
    mant = pnp.bitwise_and(pnp.right_shift(_words(key, n), np.int64(11)), np.int64(2**53 - 1))
    scale = 2.0**-53
  elif dtype == "float32":
    words = _words(key, -(-n // 2))
    halves = pnp.reshape(pnp.stack([_low(words), _high(words)], 1), (-1,))[:n]
    mant, scale = pnp.right_shift(halves, np.int64(8)), 2.0**-24
  else:
    raise PrimcError(f"random floats are float32 or float64, got {dtype}")
  u = pnp.multiply(pnp.add(pnp.asarray(mant, dtype), half), np.asarray(scale, dtype))
  return pnp.reshape(u, shape)


def uniform(key: Any, shape: Sequence[int] = (), dtype: Any = "float32", minval=0.0, maxval=1.0):
  """Uniform floats in [minval, maxval)."""
  dtype = np.dtype(dtype).name
  u = _unit(key, _shape(shape), dtype)
  if minval == 0.0 and maxval == 1.0:
    return u
  lo = pnp.asarray(minval, dtype)
  return pnp.add(pnp.multiply(u, pnp.subtract(pnp.asarray(maxval, dtype), lo)), lo)


def normal(key: Any, shape: Sequence[int] = (), dtype: Any = "float32"):
  """Standard normal floats, by the inverse CDF of uniforms in (0, 1)."""
  dtype = np.dtype(dtype).name
  u = _unit(key, _shape(shape), dtype, half=0.5)
  two = np.asarray(2.0, dtype)
  z = P.erfinv_p.bind(pnp.subtract(pnp.multiply(u, two), np.asarray(1.0, dtype)))
  return pnp.multiply(np.asarray(np.sqrt(2.0), dtype), z)


def bernoulli(key: Any, p: Any = 0.5, shape: Sequence[int] | None = None):
  """Booleans, True with probability p (shape: p's shape when None)."""
  p = pnp.asarray(p, "float64")
  shape = aval_of(p).shape if shape is None else _shape(shape)
  return pnp.less(uniform(key, shape, "float64"), p)


def randint(key: Any, shape: Sequence[int], minval: int, maxval: int, dtype: Any = "int32"):
  """Integers in [minval, maxval) (a word's top 63 bits modulo the range: a bias below
  range / 2^63)."""
  span = int(maxval) - int(minval)
  if span <= 0:
    raise PrimcError(f"randint: empty range [{minval}, {maxval})")
  shape = _shape(shape)
  w = pnp.right_shift(_words(key, math.prod(shape)), np.int64(1))
  out = pnp.add(pnp.remainder(w, np.int64(span)), np.int64(minval))
  return pnp.asarray(pnp.reshape(out, shape), np.dtype(dtype).name)


def permutation(key: Any, x: Any):
  """A random permutation of range(x) (x an int) or of x's rows."""
  if np.ndim(x) == 0 and isinstance(x, (int, np.integer)):
    return pnp.argsort(bits(key, (int(x),)))
  x = pnp.asarray(x)
  return pnp.take(x, pnp.argsort(bits(key, (aval_of(x).shape[0],))), axis=0)
