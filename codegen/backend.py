"""What `primc.compile` uses of code generation, imported on its first compile (this
imports numba; the rest of primc, and `primc.codegen.store` for the command line, does not).
"""
from __future__ import annotations

from primc.codegen import cache, executor, loops, module, plan, store, tiered  # noqa: F401


def jit_disabled() -> bool:
  """numba's NUMBA_DISABLE_JIT: then programs run on the reference interpreter."""
  from numba.core import config
  return bool(config.DISABLE_JIT)
