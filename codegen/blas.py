"""The products generated kernels call (compiled once per process or cache, not once per
kernel). `codegen.loader` runs this file as a module of the cache with `CACHE = True`,
so numba keeps their machine code there, sealed and verified like every module's;
imported as a package module it caches nothing.

Float kernels call `gemm_f32` / `gemm_f64` as C functions by name
(`codegen.kernels.EXTERNALS`: compiled by LLVM from this source, `codegen.translate`, or
numba `cfunc`s; `codegen.loader.link_library` gives LLVM their addresses), with the
addresses of C-contiguous matrices: a kernel then holds a call, not a copy of the
product's code, and compiles in a fraction of the time.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from primc.codegen.mathlib import LOAD, STORE
from primc.codegen.translate import link_blas, xxgemm_call

CACHE = globals().get("CACHE", False)  # set by codegen.loader when it runs this file

SMALL_DOT = 4096  # below this many multiply-adds per matrix, loops beat a BLAS call


@njit(cache=CACHE, error_model="numpy", fastmath={"reassoc", "contract"})
def matmul_loops(a, b, c, acc):
  """c = a @ b, or (acc) c += a @ b, for 2-D views, by loops (integer products; float
  ones call `_gemm`, whose small products are these loops on addresses).

  The loop order follows the shapes, so the innermost loop is long: rows of c when b is
  wide (n >= 8); else dot products along the rows of a (a single column of b, or a few,
  read in place). Sums are reassociated (as in BLAS), which lets them vectorize. Nothing
  is allocated (no copies of b: these products are small).
  """
  m, k = a.shape
  n = b.shape[1]
  if n >= 8:
    for i in range(m):
      if not acc:
        for j in range(n):
          c[i, j] = 0
      for p in range(k):
        aip = a[i, p]
        for j in range(n):
          c[i, j] += aip * b[p, j]
  else:
    for i in range(m):
      for j in range(n):
        if not acc:
          c[i, j] = 0
        s = c[i, j]
        for p in range(k):
          s += a[i, p] * b[p, j]
        c[i, j] = s


@intrinsic
def _blas_gemm(typingctx, dtype, ta, m, n, k, a, b, c, beta, ldn):
  """BLAS `?gemm` through `translate.GEMM_SYMBOL` (numba's helper's signature; column-major:
  row-major c = A @ B + beta c is, read column-major, c^T = B^T A^T). A is the (m, k) matrix at `a`,
  or (ta) the transpose of the (k, m) matrix there; B the (k, n) matrix at `b`, its rows
  and c's `ldn` elements apart."""
  float_type = dtype.dtype

  def codegen(context, builder, signature, args):
    link_blas()  # the call's symbol, before numba links the code that makes it
    _, ta, m, n, k, a, b, c, beta, ldn = args
    value = context.get_value_type(float_type)
    one, scale = cgutils.alloca_once(builder, value), cgutils.alloca_once(builder, value)
    xxgemm_call(builder, value, one, scale, ta, m, n, k, a, b, c, beta, ldn)
    return context.get_dummy_value()

  return types.none(dtype, *[types.int64] * 9), codegen


@njit(cache=CACHE, error_model="numpy", fastmath={"reassoc", "contract"})
def _small_gemm(ta, m, n, k, a, b, c, acc, ldn, dtype):
  """`matmul_loops` on matrices given by address (as `_gemm`): one function for both
  layouts of A (its element (i, p) is at i * si + p * sp), elements read and written by
  address, which numba compiles in a fraction of the time views take."""
  si, sp = (1, m) if ta else (k, 1)
  if n >= 8:
    for i in range(m):
      if not acc:
        for j in range(n):
          STORE(c, i * ldn + j, 0, dtype)
      for p in range(k):
        aip = LOAD(a, i * si + p * sp, dtype)
        for j in range(n):
          cij = LOAD(c, i * ldn + j, dtype) + aip * LOAD(b, p * ldn + j, dtype)
          STORE(c, i * ldn + j, cij, dtype)
  else:
    for i in range(m):
      for j in range(n):
        s = LOAD(c, i * ldn + j, dtype) if acc else dtype(0)
        for p in range(k):
          s += LOAD(a, i * si + p * sp, dtype) * LOAD(b, p * ldn + j, dtype)
        STORE(c, i * ldn + j, s, dtype)


@njit(cache=CACHE, error_model="numpy")
def _row_sums(m, k, a, b, c, acc, ldn, dtype):
  """c = A @ b, or (acc) c += A @ b, for one column b (its elements, and c's, `ldn`
  apart) and A the (m, k) matrix at `a`: each row's sum in 8 partial sums (a fixed order,
  in float64; packed multiply-adds), added pairwise, then the row's tail. (Eight named
  sums, not an array: the LLVM renderer allocates no array in a library function.)"""
  whole = k - k % 8
  for i in range(m):
    row = i * k
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    s5 = 0.0
    s6 = 0.0
    s7 = 0.0
    for p in range(0, whole, 8):
      s0 += np.float64(LOAD(a, row + p, dtype)) * LOAD(b, p * ldn, dtype)
      s1 += np.float64(LOAD(a, row + p + 1, dtype)) * LOAD(b, (p + 1) * ldn, dtype)
      s2 += np.float64(LOAD(a, row + p + 2, dtype)) * LOAD(b, (p + 2) * ldn, dtype)
      s3 += np.float64(LOAD(a, row + p + 3, dtype)) * LOAD(b, (p + 3) * ldn, dtype)
      s4 += np.float64(LOAD(a, row + p + 4, dtype)) * LOAD(b, (p + 4) * ldn, dtype)
      s5 += np.float64(LOAD(a, row + p + 5, dtype)) * LOAD(b, (p + 5) * ldn, dtype)
      s6 += np.float64(LOAD(a, row + p + 6, dtype)) * LOAD(b, (p + 6) * ldn, dtype)
      s7 += np.float64(LOAD(a, row + p + 7, dtype)) * LOAD(b, (p + 7) * ldn, dtype)
    total = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    for p in range(whole, k):
      total += np.float64(LOAD(a, row + p, dtype)) * LOAD(b, p * ldn, dtype)
    if acc:
      total += LOAD(c, i * ldn, dtype)
    STORE(c, i * ldn, total, dtype)


@njit(cache=CACHE, error_model="numpy")
def _gemm(ta, m, n, k, a, b, c, acc, ldn, dtype):
  """c = A @ B, or (acc) c += A @ B, where B is the (k, n) matrix at `b`, A the (m, k)
  matrix at `a`, or (ta) the transpose of the (k, m) matrix there, given by address; A is
  C-contiguous, B's and c's rows are `ldn` >= n elements apart (n: C-contiguous; more:
  columns of wider matrices). Loops up to SMALL_DOT multiply-adds, and for one row or
  one column (a vector times a matrix: loops read the matrix once, where BLAS would pack
  all of it first), BLAS above."""
  if m == 0 or n == 0:
    return
  if n == 1 and not ta and m * k > SMALL_DOT:
    _row_sums(m, k, a, b, c, acc, ldn, dtype)
  elif m * n * k > SMALL_DOT and m > 1:
    _blas_gemm(dtype, ta, m, n, k, a, b, c, acc, ldn)
  else:
    _small_gemm(ta, m, n, k, a, b, c, acc, ldn, dtype)


def gemm_f32(ta, m, n, k, a, b, c, acc, ldn):
  _gemm(ta, m, n, k, a, b, c, acc, ldn, np.float32)


def gemm_f64(ta, m, n, k, a, b, c, acc, ldn):
  _gemm(ta, m, n, k, a, b, c, acc, ldn, np.float64)


# what kernels call (GEMM_F32(ta, m, n, k, a, b, c, acc, ldn), see
# codegen.kernels.EXTERNALS): gemm_f32 / gemm_f64 compiled as C functions of this signature
EXTERNAL_SIGNATURE = "void(int64, int64, int64, int64, int64, int64, int64, int64, int64)"
GEMM_F32 = types.ExternalFunction("primc_gemm_f32", types.void(*[types.int64] * 9))
GEMM_F64 = types.ExternalFunction("primc_gemm_f64", types.void(*[types.int64] * 9))
