"""Lowering: primitives that kernels do not compute themselves, rewritten before fusion into
primitives they do (`lowering_rules`, one function per primitive, written in primitives).

  conv  its windows gathered from the flattened input (im2col: a gather at indices computed
        from iotas, one loop nest) and one dot_general with the kernel per group, so the
        product runs through BLAS: (outputs x channels * window) times (channels * window
        x positions), for the forward and for both its transposes (a kernel's gradient is a
        convolution whose window is the forward's output)

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
  out = [P.conv_out_size(*a) for a in zip(size, win, window_strides, rhs_dilation)]
  k, s = math.prod(win), math.prod(out)
  # (c, n * size) rows: each channel's examples side by side, so the windows of every
  # example are one matrix's columns and the product is one GEMM per group
  rows = P.reshape(P.transpose(x, (1, 0, *range(2, 2 + len(size)))), (c, n * math.prod(size)))
  cols = P.gather(rows, _window_offsets(n, size, win, out, window_strides, rhs_dilation), 1)
  cols = P.reshape(cols, (g, cg * k, n * s))  # (c, k, n * s): the windows (im2col)
  y = P.dot_general(P.reshape(w, (g, o // g, cg * k)), cols, (((2,), (1,)), ((0,), (0,))))
  y = P.transpose(P.reshape(y, (g, o // g, n, s)), (2, 0, 1, 3))
  return P.reshape(y, (n, o, *out))


def _window_offsets(n, size, win, out, strides, dilation):
  """(k, n * s) int32 indices into the (channel, example * position) rows: window offset k
  of example e at output position s reads position * stride + offset * dilation, per dim,
  of example e. The index is separable, (where the window starts) + (the offset in it),
  each computed once on its own iota (n * s and k elements) and added by broadcasting: one
  add per element, where computing each element's digits took ~10 integer operations."""
  shape = (math.prod(win), n * math.prod(out))
  dtype = "int32" if n * math.prod(size) < 2**31 else "int64"
  k, t = P.iota(shape[:1], 0, dtype), P.iota(shape[1:], 0, dtype)
  start = _digit(t, math.prod(out), n)  # the example
  offset = None
  inner_k, inner_s = math.prod(win), math.prod(out)
  for d in range(len(size)):
    inner_k, inner_s = inner_k // win[d], inner_s // out[d]
    kd, sd = _digit(k, inner_k, win[d]), _digit(t, inner_s, out[d])
    start = P.add(P.mul(start, P.scalar_like(size[d], t)), P.mul(sd, P.scalar_like(strides[d], t)))
    at = P.mul(kd, P.scalar_like(dilation[d], k))
    offset = at if offset is None else P.add(P.mul(offset, P.scalar_like(size[d], k)), at)
  return P.add(P.broadcast_in_dim(offset, shape, (0,)), P.broadcast_in_dim(start, shape, (1,)))


def _digit(i, inner: int, base: int):
  """(i // inner) % base for non-negative i, as integer division and a product."""
  q = P.div(i, P.scalar_like(inner, i)) if inner > 1 else i
  return P.sub(q, P.mul(P.div(q, P.scalar_like(base, i)), P.scalar_like(base, i)))


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
