"""What `primc.compile` uses of code generation, imported on its first compile. numba is
imported only when something needs it: a kernel or library function to compile, a kernel
numba compiled to load, threads to start (a process that loads LLVM-compiled kernels of
serial programs from the cache never imports it).
"""

from __future__ import annotations

import os
import sys

from primc.codegen import (
  cache,
  executor,
  kernel_workers,
  loops,
  module,
  plan,
  store,
  target,
  tiered,
)

# what primc.compile uses of code generation (`primc.compile.backend()`)
__all__ = [
  "cache",
  "executor",
  "kernel_workers",
  "loops",
  "module",
  "plan",
  "store",
  "target",
  "tiered",
  "jit_disabled",
]

target.configure_numba()  # numba, imported later, compiles for PRIMC_CPU's CPU too


def jit_disabled() -> bool:
  """numba's NUMBA_DISABLE_JIT (its config once numba is imported, else the environment):
  then programs run on the reference interpreter."""
  config = sys.modules.get("numba.core.config")
  if config is not None:
    return bool(config.DISABLE_JIT)
  return os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
