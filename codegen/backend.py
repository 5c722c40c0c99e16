"""What `primc.compile` uses of code generation, imported on its first compile. numba is
imported only when something needs it: a kernel or library function to compile, a kernel
numba compiled to load, threads to start (a process that loads LLVM-compiled kernels of
serial programs from the cache never imports it).
"""

from __future__ import annotations


from primc.codegen import (
  cache,
  executor,
  kernel_workers,
  loops,
  module,
  pipeline,
  plan,
  store,
  target,
  threads,
  tiered,
)
from primc.codegen.pipeline import jit_disabled

# what primc.compile uses of code generation (`primc.compile.backend()`)
__all__ = [
  "cache",
  "executor",
  "kernel_workers",
  "loops",
  "module",
  "pipeline",
  "plan",
  "store",
  "target",
  "threads",
  "tiered",
  "jit_disabled",
]

target.configure_numba()  # numba, imported later, compiles for PRIMC_CPU's CPU too
