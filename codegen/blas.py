"""Shared, disk-cached numba helpers called by generated kernels (compiled once per dtype
and layout, not once per kernel)."""
from __future__ import annotations

import numpy as np
from numba import njit

SMALL_DOT = 4096  # below this many multiply-adds per matrix, loops beat a BLAS call
# Multiply-adds per BLAS call made from a kernel's threads: below OpenBLAS's own threading
# threshold, so a call never wakes BLAS threads to fight the kernel's (measured: a larger
# call from a prange thread runs 50x slower).
BLOCK_DOT = 1 << 17


@njit(cache=True, error_model="numpy")
def matmul_loops(a, b, c):
  """c = a @ b for 2-D views, by loops (small products, integer dtypes)."""
  m, k = a.shape
  n = b.shape[1]
  for i in range(m):
    for j in range(n):
      c[i, j] = 0
    for p in range(k):
      aip = a[i, p]
      for j in range(n):
        c[i, j] += aip * b[p, j]


@njit(cache=True, error_model="numpy")
def matmul(a, b, c):
  """c = a @ b for 2-D float views (C or F layout; c C-contiguous): loops for small
  products, BLAS otherwise."""
  m, k = a.shape
  if m * b.shape[1] * k <= SMALL_DOT:
    matmul_loops(a, b, c)
  else:
    np.dot(a, b, c)


@njit(cache=True, error_model="numpy")
def matmul_acc(a, b, c, tmp):
  """c += a @ b for 2-D float views, through `tmp` (same shape as c)."""
  matmul(a, b, tmp)
  for i in range(c.shape[0]):
    for j in range(c.shape[1]):
      c[i, j] += tmp[i, j]
