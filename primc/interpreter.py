"""The reference interpreter: runs a Program with the numpy `impl_rules`.

It is the oracle for every later stage (passes, codegen), so it is deliberately simple
and checks as it goes: single assignment, and every result's shape and dtype against the
equation's declared output.
"""
from __future__ import annotations

import numpy as np

from primc.core import Lit, Program, Var, impl_rules


def interpret(program: Program, *args) -> list[np.ndarray]:
  """Runs `program` on numpy arrays.

  Args:
    program: the program to run.
    *args: one array per program input (shape and dtype must match).
  Returns:
    the list of output arrays.
  """
  if len(args) != len(program.inputs):
    raise TypeError(f"program takes {len(program.inputs)} inputs, got {len(args)}")
  env: dict[Var, np.ndarray] = {}
  for v, x in zip(program.inputs, args, strict=True):
    x = np.asarray(x)
    if x.shape != v.aval.shape or x.dtype.name != v.aval.dtype:
      raise TypeError(f"input {v.aval} got an array {x.dtype.name}{list(x.shape)}")
    env[v] = x

  def read(a):
    return a.value if isinstance(a, Lit) else env[a]

  for eqn in program.eqns:
    out = impl_rules[eqn.prim](*map(read, eqn.inputs), **eqn.kw)
    outs = [np.asarray(o) for o in out] if eqn.prim.multiple_results else [np.asarray(out)]
    for v, o in zip(eqn.outputs, outs, strict=True):
      assert v not in env, f"{eqn.prim.name}: variable assigned twice"
      assert o.shape == v.aval.shape and o.dtype.name == v.aval.dtype, (
          f"{eqn.prim.name}: impl gave {o.dtype.name}{list(o.shape)}, expected {v.aval}")
      env[v] = o
  return [np.asarray(read(a)) for a in program.outputs]
