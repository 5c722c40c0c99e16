"""primc's entry point into the later stages (passes, codegen): the only module of
`primc` that imports them, lazily, so the stages stay free of import cycles.

`config.optimize_transforms` (default True) runs the optimization pipeline on every
program a transform produces or consumes, so nested derivatives differentiate the
simplified program instead of the raw one (this keeps d^n/dx^n programs polynomial in n).
Set it to False (or use `raw_transforms()`) to see the raw transformed programs.
"""
from __future__ import annotations

import contextlib
import dataclasses

from primc.core import Program


@dataclasses.dataclass
class Config:
  optimize_transforms: bool = True


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


def optimize(program: Program) -> Program:
  """The pass pipeline (simplify, combine, CSE, DCE), or the program itself when
  transforms are configured raw."""
  if not config.optimize_transforms:
    return program
  from passes import optimize as run_passes
  return run_passes(program)
