"""Code generation: fused regions to numba kernels, the disk cache and the executor.

  kernels.py   region -> kernel source (one lowering rule per primitive)
  mathlib.py   vectorizable float32/float64 exp, log, tanh, sin, cos
  blas.py      shared batched matmul (loops for small products, BLAS for large)
  module.py    fused program -> one module (kernels + driver) and its run plan
  loader.py    content-addressed module files under the cache directory; the driver cfunc
  native.py    the native entry: a CPython function (LLVM IR) that checks the inputs,
               allocates the outputs and fills the driver's pointer table
  executor.py  runs a plan: arena buffers, outputs, one call into the driver
  kernel_workers.py  a new module's threaded kernels compiled by one process per core
  tiered.py    first calls on the interpreter while a background process compiles (and
               every call, under NUMBA_DISABLE_JIT=1)
  store.py     the disk cache: layout, verified reads, atomic writes, eviction
  cache.py     cache keys and this process's counters

  threads.py   numba's threading layer for the threaded kernels: TBB, which survives fork

Threads: big loop regions run a `prange` loop under numba's threading layer, prepared by
`threads.prepare()` when primc first needs it (nothing is set at import).
"""
