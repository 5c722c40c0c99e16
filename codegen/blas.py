"""Shared, disk-cached numba helpers called by generated kernels (compiled once per
dtype, not once per kernel)."""
from __future__ import annotations

import numpy as np
from numba import njit

SMALL_DOT = 4096  # below this many multiply-adds per matrix, loops beat a BLAS call


@njit(cache=True, error_model="numpy")
def matmul3(a, b, c):
  """c[q] = a[q] @ b[q] for C-contiguous a (B, M, K), b (B, K, N), c (B, M, N)."""
  nb, m, k = a.shape
  n = b.shape[2]
  if m * n * k <= SMALL_DOT:
    for q in range(nb):
      for i in range(m):
        for j in range(n):
          c[q, i, j] = 0
        for p in range(k):
          aip = a[q, i, p]
          for j in range(n):
            c[q, i, j] += aip * b[q, p, j]
  else:
    for q in range(nb):
      np.dot(a[q], b[q], c[q])
