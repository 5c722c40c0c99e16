"""Lowering: primitives that kernels do not compute themselves, rewritten before fusion into
primitives they do (`lowering_rules`, one function per primitive, written in primitives).

  conv  its windows (`windows`, an index map: im2col by a loop kernel that computes each
        element's address from its loop indices) and one dot_general with the kernel per
        group, so the product runs through BLAS: (outputs x channels * window) times
        (channels * window x positions), for the forward and for both its transposes (a
        kernel's gradient is a convolution whose window is the forward's output)

Transforms never see the lowered form: derivatives, batching and the interpreter keep the
one `conv` equation (its rules are convolutions); only code generation lowers it.
"""

from __future__ import annotations

import math
from typing import Callable

from primc import prims as P
from primc.core import Primitive, Program, results, run
from primc.trace import aval_of, literal, trace_flat


def _conv_windows(x, w, *, window_strides, rhs_dilation, feature_group_count):
  g = feature_group_count
  n, c, *size = aval_of(x).shape
  o, cg, *win = aval_of(w).shape
  nd = len(size)
  out = [P.conv_out_size(*a) for a in zip(size, win, window_strides, rhs_dilation)]
  k, s = math.prod(win), math.prod(out)
  # (c, *window, n, *out): each channel's window offsets are rows, every example's output
  # positions columns, so the product is one GEMM per group; the windows are an index
  # map, read where the rows are written (no index array, no bounds to check)
  cols = P.windows(x, win, window_strides, rhs_dilation)  # (n, c, *window, *out)
  cols = P.transpose(cols, (1, *range(2, 2 + nd), 0, *range(2 + nd, 2 + 2 * nd)))
  cols = P.reshape(cols, (g, cg * k, n * s))
  y = P.dot_general(P.reshape(w, (g, o // g, cg * k)), cols, (((2,), (1,)), ((0,), (0,))))
  y = P.transpose(P.reshape(y, (g, o // g, n, s)), (2, 0, 1, 3))
  return P.reshape(y, (n, o, *out))


lowering_rules: dict[Primitive, Callable] = {P.conv_p: _conv_windows}


def lower(program: Program) -> Program:
  """`program` with every equation of a primitive in `lowering_rules` replaced by its rule's
  equations (the program itself when it has none)."""
  if not any(e.prim in lowering_rules for e in program.eqns):
    return program

  def apply(eqn, xs):
    rule = lowering_rules.get(eqn.prim)
    return results(eqn, rule(*xs, **eqn.kw) if rule else eqn.prim.bind(*xs, **eqn.kw))

  def fn(*args):
    return run(program, args, apply, lit=literal)

  return trace_flat(fn, list(program.in_avals))[0]
