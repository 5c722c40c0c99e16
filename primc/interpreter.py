"""The reference interpreter: runs a Program with the numpy `impl_rules`.

It is the oracle for every later stage (passes, codegen), so it is deliberately simple
and checks as it goes: single assignment, and every result's shape and dtype against the
equation's declared output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from primc.core import Program, impl_rules, results, run


def interpret(program: Program, *args: Any) -> list[np.ndarray]:
  """Runs `program` on numpy arrays.

  Args:
    program: the program to run.
    *args: one array per program input (shape and dtype must match).
  Returns:
    the list of output arrays.
  """
  if len(args) != len(program.inputs):
    raise TypeError(f"program takes {len(program.inputs)} inputs, got {len(args)}")
  for v, x in zip(program.inputs, args, strict=True):
    x = np.asarray(x)
    if x.shape != v.aval.shape or x.dtype.name != v.aval.dtype:
      raise TypeError(f"input {v.aval} got an array {x.dtype.name}{list(x.shape)}")

  def apply(eqn, xs):
    outs = [np.asarray(o) for o in results(eqn, impl_rules[eqn.prim](*xs, **eqn.kw))]
    for v, o in zip(eqn.outputs, outs, strict=True):
      assert o.shape == v.aval.shape and o.dtype.name == v.aval.dtype, (
        f"{eqn.prim.name}: impl gave {o.dtype.name}{list(o.shape)}, expected {v.aval}"
      )
    return outs

  return [np.asarray(o) for o in run(program, [np.asarray(x) for x in args], apply)]
