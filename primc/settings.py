"""primc's process-wide settings (`primc.config`), read by the transforms and by `jit`.

- `optimize_transforms` (default True): run the optimization pipeline on every program a
  transform produces or consumes, so nested derivatives differentiate the simplified
  program instead of the raw one (this keeps d^n/dx^n programs polynomial in n). False
  (or `raw_transforms()`) shows the raw transformed programs.
- `tiered` (PRIMC_TIERED=1): run new programs on the interpreter while a background
  process compiles them (`jit(tiered=...)` overrides it per function).
- `interpret` (PRIMC_INTERPRET=1): `jit` runs every new signature on the reference
  interpreter instead of compiling it (tests run programs both ways with it).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os


@dataclasses.dataclass
class Config:
  optimize_transforms: bool = True
  tiered: bool = os.environ.get("PRIMC_TIERED") == "1"
  interpret: bool = os.environ.get("PRIMC_INTERPRET") == "1"


config = Config()


@contextlib.contextmanager
def raw_transforms():
  """Within this block, transforms return unoptimized programs."""
  old = config.optimize_transforms
  config.optimize_transforms = False
  try:
    yield
  finally:
    config.optimize_transforms = old
