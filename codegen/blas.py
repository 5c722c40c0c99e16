"""Shared numba helpers called by generated kernels (compiled once per dtype and layout, not
once per kernel). `codegen.loader` runs this file as a module of the cache with
`CACHE = True`, so numba keeps their machine code there, sealed and verified like every
module's; imported as a package module it caches nothing."""
from __future__ import annotations

import numpy as np
from numba import njit

CACHE = globals().get("CACHE", False)  # set by codegen.loader when it runs this file

SMALL_DOT = 4096  # below this many multiply-adds per matrix, loops beat a BLAS call
# Multiply-adds per BLAS call made from a kernel's threads: below OpenBLAS's own threading
# threshold, so a call never wakes BLAS threads to fight the kernel's (measured: a larger
# call from a prange thread runs 50x slower).
BLOCK_DOT = 1 << 17


@njit(cache=CACHE, error_model="numpy", fastmath={"reassoc", "contract"})
def matmul_loops(a, b, c):
  """c = a @ b for 2-D views, by loops (small products, integer dtypes).

  The loop order follows the shapes, so the innermost loop is long and reads memory in
  order: rows of c when b is wide (n >= 8); dot products along the rows of a when b is
  narrow (its columns copied to rows first, unless it is a single column); columns of c
  when b is narrow and a is read by columns (a transposed view). Sums are reassociated
  (as in BLAS), which lets the dot products vectorize.
  """
  m, k = a.shape
  n = b.shape[1]
  if n >= 8:
    for i in range(m):
      for j in range(n):
        c[i, j] = 0
      for p in range(k):
        aip = a[i, p]
        for j in range(n):
          c[i, j] += aip * b[p, j]
  elif a.strides[1] == a.itemsize or m < 8:
    bt = b.T if n == 1 or k < 16 else np.ascontiguousarray(b.T)
    for i in range(m):
      for j in range(n):
        c[i, j] = 0
        s = c[i, j]
        for p in range(k):
          s += a[i, p] * bt[j, p]
        c[i, j] = s
  else:
    col = np.empty(m, c.dtype)
    for j in range(n):
      col[:] = 0
      for p in range(k):
        bpj = b[p, j]
        for i in range(m):
          col[i] += a[i, p] * bpj
      for i in range(m):
        c[i, j] = col[i]


@njit(cache=CACHE, error_model="numpy")
def matmul(a, b, c):
  """c = a @ b for 2-D float views (C or F layout; c C-contiguous): loops for small
  products, BLAS otherwise."""
  m, k = a.shape
  if m * b.shape[1] * k <= SMALL_DOT:
    matmul_loops(a, b, c)
  else:
    np.dot(a, b, c)


@njit(cache=CACHE, error_model="numpy")
def matmul_acc(a, b, c, tmp):
  """c += a @ b for 2-D float views, through `tmp` (same shape as c)."""
  matmul(a, b, tmp)
  for i in range(c.shape[0]):
    for j in range(c.shape[1]):
      c[i, j] += tmp[i, j]
