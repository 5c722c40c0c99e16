"""Region -> kernel source: one lowering rule per primitive and one emitter per region kind.

A kernel is the Python source of a numba `cfunc` of the same signature for every kernel,
`int64 kernel(phase, lo, hi, p)` (`codegen.runner` calls it): `p` is its table
`[words, err, inputs..., outputs..., scratch...]`, data pointers all; the arrays are
`carray`s over them, shaped from the kernel's words. It runs in phases:

  phase 0  setup (copies into scratch, whole products); returns 1 + its number of tasks,
           or -1 for an index out of bounds (`err[1:3]` set)
  phase 1  tasks [lo, hi): blocks of rows, row blocks of a product, parts of a
           contraction; tasks write disjoint memory, so the runner may run them on
           numba's thread pool or in one call
  phase 2  finish (summing contraction parts, an epilogue that is not per row)

and returns 1 from phases 1 and 2 (numba makes a failed cfunc return 0). Its source
depends on the region's structure only (ranks, dtypes, broadcast patterns, parameters
that are not sizes): every size and float constant is one of its words, so a new batch
size reuses the compiled kernel, and identical regions, in any program, give
byte-identical source. Whether a step runs threaded is the plan's choice, from its sizes.
Each kernel starts with its region's IR, sizes shown as `?`, as a comment.

Loop regions iterate over their domain in row-major order (flat when every array is read
at the loop index); reductions accumulate along the way (float32 sums in float64).
sin/cos use the fast mathlib versions and count out-of-range arguments; if any, the
task's loop runs again with libm's versions.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import re
import threading
from typing import Callable

import numpy as np

from primc import prims as P
from primc.core import Eqn, Lit, Primitive, Printer, Program, Var, pp_lit, pp_param, pp_program
from primc.codegen import kir, openblas
from primc.codegen.kir import E, S
from primc.codegen.segments import segmented_loop
from primc.passes.fusion import lazy_eqns
from primc.passes.lower import lowering_rules

lower_rules: dict[Primitive, Callable] = {}  # (ctx, eqn, *operand expressions) -> expr
SIGNATURE = "int64(int64, int64, int64, CPointer(voidptr))"
OPTIONS = {"error_model": "numpy", "fastmath": {"contract"}}
TASK_ELEMENTS = 1 << 12  # elements per task of a loop kernel
# the math library's sin/cos reduce x by k = round(x * 2/pi), which must stay small enough
# that k * (first part of pi/2) is exact: below 2**20 for float64 (33-bit part), below
# 2**13 for float32 (8-bit part, 24-bit k*p); larger arguments take libm's (see _loop_code)
SINCOS_LIMIT = {"float32": 8192.0, "float64": 1e6}
# C functions kernels call by name, their addresses given to LLVM per process
# (`codegen.loader.link_library`), so that cached machine code holds names, never
# addresses: the library's products, `GEMM_F32(ta, m, n, k, a, b, c, acc, ldn)` -> (C symbol,
# library file, its function), and scipy.special's own C functions (`cython_special`),
# `SP_J0(x, np.int32(0))` (the last argument is Cython's dispatch flag) -> (C symbol,
# scipy's name)
EXTERNALS = {
  "GEMM_F32": ("primc_gemm_f32", "blas.py", "gemm_f32"),
  "GEMM_F64": ("primc_gemm_f64", "blas.py", "gemm_f64"),
}
FOREIGN = {f"SP_{name.upper()}": (f"primc_scipy_{name}", name) for name in P.SPECIAL_ARITY}


@dataclasses.dataclass(frozen=True)
class Kernel:
  """One region's kernel as a plan uses it."""

  source: str  # `def <name>(phase, lo, hi, p):`, and `KERNEL = <name>`
  words: tuple[int, ...]  # its run-time words: sizes, float constants' bits
  threaded: bool  # worth numba's thread pool at these sizes
  finish: bool  # has a phase 2
  scratch: tuple[tuple[str, int], ...]  # (dtype, elements) per scratch array


def _np(dtype: str) -> kir.Attribute:
  return kir.np_type(dtype)


def const(value, dtype: str) -> kir.Expr:
  """A constant of `dtype` as code: `np.float32(0.5)`, `np.int64(-3)`, `True`."""
  v = np.asarray(value, dtype).reshape(-1)[0]
  if dtype == "bool":
    return kir.Const(bool(v))
  if dtype.startswith("float"):
    f = float(v)
    if f != f:
      arg = E("np.nan")
    elif not np.isfinite(f):
      arg = E("np.inf") if f > 0 else E("-np.inf")
    else:
      arg = kir.number(f)
    return kir.Call(_np(dtype), (arg,))
  return kir.Call(_np(dtype), (kir.number(int(v)),))


def _binop(op):
  return lambda ctx, e, x, y: kir.BinOp(op, x, y)


def arith(op: str, x, y, dtype: str) -> kir.Expr:
  """`x op y` in `dtype`; int64 sums, differences and products wrap on overflow as
  numpy's do (numba's own signed arithmetic may assume they never overflow)."""
  if dtype == "int64" and op in kir.WRAPPING:
    return kir.call(kir.WRAPPING[op], x, y)
  return kir.BinOp(op, x, y)


def _arith(op):
  return lambda ctx, e, x, y: arith(op, x, y, e.outputs[0].aval.dtype)


def _compare(op):
  return lambda ctx, e, x, y: kir.Compare(x, (op,), (y,))


def _math(name):
  def rule(ctx, e, x):
    dtype = e.outputs[0].aval.dtype
    if name in ("sin", "cos"):
      ctx.range_checks.append(x)
      if ctx.precise:
        return kir.Call(_np(dtype), (kir.call(f"math.{name}", x),))
    return kir.call(f"{name}_{'f32' if dtype == 'float32' else 'f64'}", x)

  return rule


for _name in ("exp", "log", "tanh", "sin", "cos"):
  lower_rules[getattr(P, f"{_name}_p")] = _math(_name)


def _libm(call: str):
  """A primitive computed by libm through numba's `math` (scalar calls: right, not
  vectorized), rounded to the result's dtype; `call` spells it, its operands `{}`."""

  def rule(ctx, e, *xs):
    return kir.Call(_np(e.outputs[0].aval.dtype), (E(call, *xs),))

  return rule


for _prim, _call in (
  (P.tan_p, "math.tan({})"),
  (P.sinh_p, "math.sinh({})"),
  (P.cosh_p, "math.cosh({})"),
  (P.arcsin_p, "math.asin({})"),
  (P.arccos_p, "math.acos({})"),
  (P.arctan_p, "math.atan({})"),
  (P.arcsinh_p, "math.asinh({})"),
  (P.arccosh_p, "math.acosh({})"),
  (P.arctanh_p, "math.atanh({})"),
  (P.log1p_p, "math.log1p({})"),
  (P.expm1_p, "math.expm1({})"),
  (P.log2_p, "math.log2({})"),
  (P.log10_p, "math.log10({})"),
  (P.exp2_p, "2.0 ** {}"),
  (P.arctan2_p, "math.atan2({}, {})"),
  (P.hypot_p, "math.hypot({}, {})"),
  (P.fmod_p, "np.fmod({}, {})"),
  (P.floor_p, "np.floor({})"),
  (P.ceil_p, "np.ceil({})"),
  (P.trunc_p, "np.trunc({})"),
  (P.rint_p, "np.rint({})"),
  # equal operands (infinities too) give x + log 2, as numpy's
  (
    P.logaddexp_p,
    "({0} + 0.6931471805599453 if {0} == {1} else "
    "({0} if {0} > {1} else {1}) + "
    "math.log1p(math.exp(-abs({0} - {1}))))",
  ),
):
  lower_rules[_prim] = _libm(_call)
for _prim, _call in (
  (P.erf_p, "math.erf({})"),
  (P.erfc_p, "math.erfc({})"),
  (P.gammaln_p, "gammaln_f64(np.float64({}))"),
  (P.gamma_p, "math.gamma({})"),
  (P.erfinv_p, "erfinv_f64(np.float64({}))"),
  (P.erfcinv_p, "erfcinv_f64(np.float64({}))"),
):
  lower_rules[_prim] = _libm(_call)
lower_rules[P.polygamma_p] = lambda ctx, e, x: E(
  "{t}(polygamma_f64({n}, np.float64({x})))", t=_np(e.outputs[0].aval.dtype), n=e.kw["n"], x=x
)
lower_rules[P.special_p] = lambda ctx, e, *xs: kir.Call(  # scipy's C function (special.py)
  _np(e.outputs[0].aval.dtype),
  (
    kir.call(
      f"SP_{e.kw['name'].upper()}", *(kir.call("np.float64", x) for x in xs), E("np.int32(0)")
    ),
  ),
)
lower_rules[P.bit_and_p] = _binop("&")
lower_rules[P.bit_or_p] = _binop("|")
lower_rules[P.bit_xor_p] = _binop("^")
lower_rules[P.bit_not_p] = lambda ctx, e, x: kir.Call(
  _np(e.outputs[0].aval.dtype), (kir.UnaryOp("~", x),)
)
lower_rules[P.shift_left_p] = lambda ctx, e, x, y: _shift(e, x, y, "<<")
lower_rules[P.shift_right_p] = lambda ctx, e, x, y: _shift(e, x, y, ">>")


def _shift(e, x, y, op):
  """numpy's shifts: counts outside [0, bits) give 0, or the sign's fill shifting right
  (LLVM's shift by such a count is undefined: never emitted)."""
  t = _np(e.outputs[0].aval.dtype)
  bits = 8 * np.dtype(e.outputs[0].aval.dtype).itemsize
  fill = E("({t}(-1) if {x} < 0 else {t}(0))", t=t, x=x) if op == ">>" else E("{t}(0)", t=t)
  shifted = kir.Call(t, (kir.BinOp(op, x, y),))
  return E("({s} if {y} >= 0 and {y} < {bits} else {fill})", s=shifted, y=y, bits=bits, fill=fill)


lower_rules[P.nextafter_p] = _libm("np.nextafter({}, {})")
lower_rules[P.signbit_p] = lambda ctx, e, x: E("(math.copysign(1.0, {}) < 0.0)", x)
lower_rules[P.add_p] = _arith("+")
lower_rules[P.sub_p] = _arith("-")
lower_rules[P.mul_p] = _arith("*")
lower_rules[P.div_p] = lambda ctx, e, x, y: kir.BinOp(
  "/" if e.outputs[0].aval.is_float else "//", x, y
)
lower_rules[P.pow_p] = _binop("**")
lower_rules[P.neg_p] = lambda ctx, e, x: kir.UnaryOp("-", x)
lower_rules[P.abs_p] = lambda ctx, e, x: kir.call("abs", x)
lower_rules[P.sqrt_p] = lambda ctx, e, x: kir.call("np.sqrt", x)
lower_rules[P.stop_gradient_p] = lambda ctx, e, x: x
lower_rules[P.sign_p] = lambda ctx, e, x: E(
  "({one} if {x} > 0 else ({minus} if {x} < 0 else {x}))",
  one=const(1, e.outputs[0].aval.dtype),
  minus=const(-1, e.outputs[0].aval.dtype),
  x=x,
)
# numpy's maximum/minimum propagate NaN from either side
lower_rules[P.max_p] = lambda ctx, e, x, y: E("({0} if ({0} > {1} or {0} != {0}) else {1})", x, y)
lower_rules[P.min_p] = lambda ctx, e, x, y: E("({0} if ({0} < {1} or {0} != {0}) else {1})", x, y)
for _p, _op in (
  (P.eq_p, "=="),
  (P.ne_p, "!="),
  (P.lt_p, "<"),
  (P.le_p, "<="),
  (P.gt_p, ">"),
  (P.ge_p, ">="),
):
  lower_rules[_p] = _compare(_op)
lower_rules[P.select_p] = lambda ctx, e, p, x, y: kir.IfExp(p, x, y)
lower_rules[P.convert_p] = lambda ctx, e, x: kir.Call(_np(e.outputs[0].aval.dtype), (x,))
lower_rules[P.full_p] = lambda ctx, e: ctx.value(e.kw["fill_value"], e.outputs[0].aval.dtype)
lower_rules[P.iota_p] = lambda ctx, e: kir.Call(
  _np(e.outputs[0].aval.dtype), (ctx.index[e.kw["dimension"]],)
)


# Index maps read an operand at a position derived from the loop index: a region input
# from memory, or a value the region recomputes there (`passes.fusion.lazy_eqns`). `load`
# gives the operand's element at an index (`load(k, idx, safe)`: `safe` is the index
# clamped into the operand, where `idx` may be outside it and the element is only used
# when it is not: a recomputed value is computed before the choice). Indices, sizes and
# elements are kernel IR expressions (`codegen.kir`).


def _load_broadcast(ctx, e, load):
  x = e.inputs[0].aval
  dims = e.kw["broadcast_dimensions"]
  idx = [
    (kir.Const(0) if x.shape[j] == 1 and e.outputs[0].aval.shape[d] != 1 else ctx.index[d])
    for j, d in enumerate(dims)
  ]
  return load(0, idx)


def _load_transpose(ctx, e, load):
  perm = e.kw["permutation"]
  idx = [None] * len(perm)
  for k, p in enumerate(perm):
    idx[p] = ctx.index[k]
  return load(0, idx)


def _load_reshape(ctx, e, load):
  shape = e.outputs[0].aval.shape
  view = ctx.views.get(e)
  if view is None:  # fusion reshapes region inputs only (a view of their memory)
    view = ctx.views[e] = ctx.fresh("rs")
    dims = [ctx.size(n, (e, "shape", k)) for k, n in enumerate(shape)] or [kir.Const(1)]
    if load.name(0) in ctx.entries:
      ctx.alias(view, load.name(0), dims)
    else:
      ctx.prologue.append(kir.Assign((kir.Name(view),), ctx.reshaped(load.name(0), dims)))
  return ctx.element(view, ctx.index if shape else [])


def _load_slice(ctx, e, load):
  idx = []
  for k, (lo, st) in enumerate(zip(e.kw["start_indices"], e.kw["strides"])):
    base = ctx.index[k] if st == 1 else kir.BinOp("*", ctx.index[k], kir.Const(st))
    idx.append(kir.BinOp("+", ctx.size(lo, (e, "start", k)), base))
  return load(0, idx)


def _clamped(ctx, t, n):
  """`t` clamped into an operand's `n` elements: for a load speculated before the choice
  whether to use it, so the operand must have an element (see `_nonempty`)."""
  return E("min(max({0}, 0), {1} - 1)", t, n)


def _nonempty(e):
  """An index map that loads at clamped indices (`_clamped`) has no empty operand:
  `passes.simplify.empty_arrays` removes them. A kernel reading one would read outside it."""
  if any(0 in a.aval.shape for a in e.inputs):
    shapes = ", ".join(str(a.aval.shape) for a in e.inputs)
    raise ValueError(f"{e.prim}: an operand with no elements reached a kernel ({shapes})")


def _load_pad(ctx, e, load):
  _nonempty(e)
  conds, idx, sizes = [], [], []
  shape = e.inputs[0].aval.shape
  for k, ((lo, _, interior), n) in enumerate(zip(e.kw["padding_config"], shape)):
    t = kir.BinOp("-", ctx.index[k], ctx.size(lo, (e, "low", k)))
    if interior:
      conds.append(E("{0} % {1} == 0", t, interior + 1))
      t = kir.BinOp("//", t, kir.Const(interior + 1))
    sizes.append(ctx.size(n, (e, "operand", k)))
    conds.append(E("0 <= {0} < {1}", t, sizes[-1]))
    idx.append(t)
  zero = const(0, e.outputs[0].aval.dtype)
  safe = [_clamped(ctx, t, n) for t, n in zip(idx, sizes)]
  if not conds:  # a 0-d operand: nothing to pad
    return load(0, idx, safe)
  test = conds[0] if len(conds) == 1 else kir.BoolOp("and", tuple(conds))
  return kir.IfExp(test, load(0, idx, safe), zero)


def _load_concatenate(ctx, e, load):
  _nonempty(e)
  d = e.kw["dimension"]
  expr = None
  offset = None  # (0)
  parts = []
  for k, a in enumerate(e.inputs):
    idx = list(ctx.index)
    idx[d] = kir.BinOp("-", ctx.index[d], offset) if offset is not None else ctx.index[d]
    safe = list(idx)
    n = ctx.size(a.aval.shape[d], (e, "operand", k))
    safe[d] = _clamped(ctx, idx[d], n)
    end = n if offset is None else kir.BinOp("+", offset, n)
    parts.append((end, load(k, idx, safe)))
    offset = end
  for end, value in reversed(parts):
    expr = (
      value if expr is None else kir.IfExp(kir.Compare(ctx.index[d], ("<",), (end,)), value, expr)
    )
  return expr


def _load_rev(ctx, e, load):
  shape, dims = e.inputs[0].aval.shape, e.kw["dimensions"]
  return load(
    0,
    [
      E("{0} - 1 - {1}", ctx.size(shape[k], (e, "operand", k)), i) if k in dims else i
      for k, i in enumerate(ctx.index)
    ],
  )


def _load_roll(ctx, e, load):
  """A concatenate of the operand's last `shift` elements along the dimension and its
  first n - shift: two stretches, each contiguous."""
  _nonempty(e)
  d = e.kw["dimension"]
  n = ctx.size(e.inputs[0].aval.shape[d], (e, "operand", d))
  shift = ctx.size(e.kw["shift"], (e, "shift"))
  i = ctx.index[d]
  parts = []
  for at in (kir.BinOp("+", i, kir.BinOp("-", n, shift)), kir.BinOp("-", i, shift)):
    idx, safe = list(ctx.index), list(ctx.index)
    idx[d], safe[d] = at, _clamped(ctx, at, n)
    parts.append(load(0, idx, safe))
  return kir.IfExp(kir.Compare(i, ("<",), (shift,)), *parts)


def _load_windows(ctx, e, load):
  """A window element: per spatial dim, position * stride + offset * dilation (affine in
  the loop indices: no division, and the innermost loop reads contiguous memory at
  stride 1)."""
  window = e.kw["window_dimensions"]
  nd, lead = len(window), e.inputs[0].aval.ndim - len(window)
  idx = list(ctx.index[:lead])
  for d, (st, dil) in enumerate(zip(e.kw["window_strides"], e.kw["window_dilation"])):
    k, o = ctx.index[lead + d], ctx.index[lead + nd + d]
    at = o if st == 1 else kir.BinOp("*", o, kir.Const(st))
    idx.append(kir.BinOp("+", at, k if dil == 1 else kir.BinOp("*", k, kir.Const(dil))))
  return load(0, idx)


# index maps: (ctx, eqn, load of its operands) -> the element at the loop index
INDEX_LOADS = {
  P.broadcast_in_dim_p: _load_broadcast,
  P.transpose_p: _load_transpose,
  P.reshape_p: _load_reshape,
  P.slice_p: _load_slice,
  P.pad_p: _load_pad,
  P.rev_p: _load_rev,
  P.roll_p: _load_roll,
  P.concatenate_p: _load_concatenate,
  P.windows_p: _load_windows,
}
# primitives a kernel computes by its region kind's emitter, not by a rule of their own
REGION_EMITTED = {
  "reduction": "accumulated by loop kernels (_accumulate)",
  "contraction": "emit_dot_kernel",
  "indexing": "emit_gather_kernel",
  "sorting": "emit_sort_kernel",
  "cumulative": "emit_cumulative_kernel",
  "linalg": "emit_linalg_kernel",
}


def emits(prim: Primitive) -> bool:
  """Whether kernels compute `prim`: a lowering rule, an index load, its region's emitter,
  or the primitives `passes.lower` rewrites it into."""
  return (
    prim in lower_rules
    or prim in INDEX_LOADS
    or bool(prim.traits & set(REGION_EMITTED))
    or prim in lowering_rules
  )


# what a kernel's source leaves out of its region's IR: read at run time, not code
SIZE_PARAMS = (
  "shape",
  "new_sizes",
  "start_indices",
  "limit_indices",
  "padding_config",
  "fill_value",
)
ABSTRACT = Printer(
  lit=lambda a: "?" if a.aval.is_float else pp_lit(a),
  aval=lambda a: f"{a.str_short().split('[')[0]}[{','.join('?' * a.ndim)}]",
  param=lambda name, value: "?" if name in SIZE_PARAMS else pp_param(value),
)


def abstract_ir(program: Program) -> str:
  """The region's IR with every size and float constant shown as `?`."""
  return pp_program(program, printer=ABSTRACT)


class KernelContext:
  def __init__(self, name: str, program: Program):
    self.name = name
    self.program = program
    # the kernel's run-time words (its `sz`): sizes, and float constants as their bits
    self.sizes: list[int] = []
    self.size_words: list[int] = []  # which words of `sizes` are sizes (not float bits)
    self.prologue: list[str] = []
    self.index: list[str] = []
    self.range_checks: list[str] = []
    self.precise = False
    self.counter = 0
    self.table: list[str] = []  # carray lines of the kernel's table entries
    self.scratch: list[tuple[str, int]] = []
    self.err = False  # reads the error record (p[1])
    self.literals = False  # reads float constants (`kl`, the words as float64)
    self.entries: dict[str, tuple[int, list[str], str]] = {}  # table name -> (p index,
    # dims, dtype)
    self.keyed: dict[tuple, int] = {}  # (eqn, parameter, position) -> its word
    self.views: dict[Eqn, str] = {}  # reshape eqn -> the view of its operand
    self.hoisted: list[str] = []  # a loop body's statements computed before it

  def array(self, name: str, shape, dtype: str) -> str:
    """Table entry `name`: a C-contiguous array of `shape` (its sizes are words; a 0-d
    array is a 1-element one)."""
    dims = [self.size(n) for n in shape] or [kir.Const(1)]
    slot = len(self.table) + 2
    self.entries[name] = (slot, dims, _np(dtype))
    self.table.append(
      S("{0} = carray(p[{1}], {2}, {3})", name, slot, kir.Tuple(tuple(dims)), _np(dtype))[0]
    )
    return name

  def alias(self, name: str, entry: str, dims) -> str:
    """`name`: table entry `entry`'s memory seen with shape `dims` (expressions), for
    `element` and `store` only (no code, no array)."""
    slot, _, dtype = self.entries[entry]
    self.entries[name] = (slot, [kir.as_expr(d) for d in dims] or [kir.Const(1)], dtype)
    return name

  def reshaped(self, name: str, dims) -> kir.Expr:
    """`name` seen with shape `dims` (expressions; [-1]: flat): a table entry as a carray
    of its pointer (no reshape call: numba compiles those per kernel), else a reshape."""
    flat = [str(d) for d in dims] == ["-1"]
    if name in self.entries:
      index, own, dtype = self.entries[name]
      dims = [kir.product(own)] if flat else [kir.as_expr(d) for d in dims]
      return E("carray(p[{0}], {1}, {2})", index, kir.Tuple(tuple(dims)), dtype)
    return E("{0}.reshape({1})", name, kir.Tuple(tuple(kir.as_expr(d) for d in dims)))

  def arrays(self, program: Program) -> tuple[list[str], list[str]]:
    """The region's inputs and outputs as table entries `in0...`, `out0...`."""
    ins = [self.array(f"in{i}", v.aval.shape, v.aval.dtype) for i, v in enumerate(program.inputs)]
    outs = [
      self.array(f"out{i}", v.aval.shape, v.aval.dtype) for i, v in enumerate(program.outputs)
    ]
    return ins, outs

  def scratch_array(self, dtype: str, elements: int) -> str:
    """A scratch array of the plan's arena (kept between the kernel's phases)."""
    self.scratch.append((dtype, int(elements)))
    return self.array(f"s{len(self.scratch) - 1}", (elements,), dtype)

  def size(self, value: int, of=None) -> kir.Name:
    """A size of the program, read once into a local (`z3 = sz[3]`) before any loop: a
    word read from memory in a loop could change with any store the loop makes (the table
    is memory like the arrays), so an address computed from it inside the loop would keep
    the loop from vectorizing. Sizes, offsets and counts are >= 0, and said to be.

    `of`: what the size is, `(eqn, parameter, position)`: every read of that size is one
    word, so reads of a value through the same index map are the same expression (its
    equal sizes elsewhere stay words of their own: they are equal at this size only)."""
    assert value >= 0, value
    key = None if of is None else tuple(of)  # (equations hash by identity)
    if key in self.keyed:
      assert self.sizes[self.keyed[key]] == value, (of, value)
      return kir.Name(f"z{self.keyed[key]}")
    self.sizes.append(int(value))
    self.size_words.append(len(self.sizes) - 1)
    if key is not None:
      self.keyed[key] = len(self.sizes) - 1
    return kir.Name(f"z{len(self.sizes) - 1}")

  def value(self, value, dtype: str) -> kir.Expr:
    """A constant of the program: a float one is read at run time (its bits are a word of
    `sz`, read through `kl`, its float64 view), so programs that differ only in float
    constants (a mean's divisor, a learning rate) share the kernel; others are code."""
    if dtype not in ("float32", "float64"):
      return const(value, dtype)
    self.sizes.append(int(np.asarray(value, np.float64).reshape(-1)[0:1].view(np.int64)[0]))
    self.literals = True
    name = f"lit{len(self.sizes) - 1}"  # read once, before the loops
    self.prologue.append(S("{0} = {1}(kl[{2}])", name, _np(dtype), len(self.sizes) - 1)[0])
    return kir.Name(name)

  def fresh(self, prefix: str) -> str:
    self.counter += 1
    return f"{prefix}{self.counter}"

  def element(self, name: str, idx) -> kir.Expr:
    """The element of array `name` at `idx` (expressions); a table entry's is read by
    address (`LOAD`, see codegen.mathlib)."""
    if name in self.entries:
      slot, dims, dtype = self.entries[name]
      return kir.Call(kir.Name("LOAD"), (kir.Name(f"ptr{slot}"), _offset(dims, idx), dtype))
    if idx:
      return kir.Subscript(kir.Name(name), tuple(kir.as_expr(i) for i in idx))
    view = f"{name}_s"  # numba cannot index 0-d arrays: view them as (1,)
    line = S("{0} = {1}.reshape(1)", view, name)[0]
    if line not in self.prologue:
      self.prologue.append(line)
    return E("{0}[0]", view)

  def store(self, name: str, idx, value: kir.Expr):
    """The statement writing `value` at `idx` of array `name` (converted to its dtype)."""
    if name in self.entries:
      slot, dims, dtype = self.entries[name]
      return kir.ExprStmt(
        kir.Call(kir.Name("STORE"), (kir.Name(f"ptr{slot}"), _offset(dims, idx), value, dtype))
      )
    return kir.Assign((self.element(name, idx),), value)


def _offset(dims, idx) -> kir.Expr:
  """The row-major offset of index `idx` in an array of shape `dims` (expressions)."""
  if not idx:
    return kir.Const(0)  # a 0-d array, or one element
  assert len(idx) == len(dims), (idx, dims)
  offset = kir.as_expr(idx[0])
  for d, i in zip(dims[1:], idx[1:]):
    offset = kir.BinOp("+", kir.BinOp("*", offset, kir.as_expr(d)), kir.as_expr(i))
  return offset


PARALLEL_MIN = 1 << 14  # elements: below this a parallel launch costs more than it saves


_SIZE = re.compile(r"z(\d+)")  # a size read into a local (KernelContext.size)
_POINTER = re.compile(r"ptr(\d+)")  # a table entry's address


def _needed(stmts, then) -> list:
  """`stmts` without the assignments to a name that neither a later statement nor `then`
  reads: the table's arrays and views the code does not use (most arrays are read and
  written by address; each unused one still costs numba time)."""
  names = kir.names(tuple(then))
  kept = []
  for s in reversed(stmts):
    single = type(s) is kir.Assign and len(s.targets) == 1 and type(s.targets[0]) is kir.Name
    if not single or s.targets[0].id in names:
      kept.append(s)
      names |= kir.names(s)
  return kept[::-1]


def _source(ctx: KernelContext, program: Program, phases: dict[int, list]) -> str:
  """A kernel's source: its table, its prologue (run by every phase), then the phases
  (0 returns its task count, 2 is optional, 1 runs the tasks [lo, hi)), statements all.
  Written once per distinct kernel (a program at a new size emits the same nodes
  again); its nodes are kept for this process's compiles (`emitted`)."""
  source, function = _written(
    ctx.name,
    abstract_ir(program),
    len(ctx.sizes),
    tuple(ctx.size_words),
    ctx.literals,
    ctx.err,
    tuple(ctx.table),
    tuple(ctx.prologue),
    tuple((k, tuple(stmts)) for k, stmts in phases.items()),
  )
  with _emitted_lock:
    _emitted[source] = function
    _emitted.move_to_end(source)
    if len(_emitted) > EMITTED:
      _emitted.popitem(last=False)
  return source


EMITTED = 1024  # kernels whose nodes this process keeps (least recently emitted go first)
_emitted: collections.OrderedDict = collections.OrderedDict()  # source -> kir.Function
_emitted_lock = threading.Lock()


def emitted(module_source: str) -> kir.Function | None:
  """The kernel IR of a kernel module's text (which ends with its kernel's source), where
  this process emitted it; None for a module written by another process or an earlier
  one, which the LLVM renderer reads back from its Python (`translate.python_kernel`:
  the module is the kernel's persisted form)."""
  start = module_source.find("\ndef ")
  if start < 0:
    return None
  with _emitted_lock:
    return _emitted.get(module_source[start + 1 :])


@functools.lru_cache(maxsize=512)
def _written(
  name: str,
  ir_text: str,
  n_words: int,
  size_words: tuple,
  literals: bool,
  err: bool,
  table: tuple,
  prologue: tuple,
  phases: tuple,
) -> tuple[str, kir.Function]:
  """`_source` of its parts (hashable: `phases` as (phase, statements) pairs), and the
  kernel's nodes."""
  fn = _function(name, n_words, size_words, literals, err, table, prologue, dict(phases))
  return _rendered(fn, ir_text), fn


def _function(name, n_words, size_words, literals, err, table, prologue, phases) -> kir.Function:
  """The kernel function: the words it reads, its table's entries and its prologue that
  the phases read, then the phases."""
  body = tuple(s for stmts in phases.values() for s in stmts)
  # sizes the phases use are locals (see KernelContext.size); the others, read once by
  # the table and the prologue, stay words (a local each costs numba ~1% of a kernel)
  used = {int(m.group(1)) for n in kir.names(body) if (m := _SIZE.fullmatch(n))}
  words = {f"z{k}": E("sz[{0}]", k) for k in range(n_words) if k not in used}
  kept = [kir.substitute(s, words) for s in _needed(table + prologue, body)]
  pointers = sorted(
    {int(m.group(1)) for n in kir.names((*kept, *body)) if (m := _POINTER.fullmatch(n))}
  )
  one = kir.Return(kir.Const(1))
  return kir.Function(
    name,
    ("phase", "lo", "hi", "p"),
    (
      *S("sz = carray(p[0], ({0},), np.int64)", max(1, n_words)),
      *(S("{0} = NONNEG(sz[{1}])", f"z{k}", k)[0] for k in size_words if k in used),
      *(S("kl = carray(p[0], ({0},), np.float64)", n_words) if literals else ()),
      *(S("err = carray(p[1], (4,), np.int64)") if err else ()),
      *(S("{0} = p[{1}]", f"ptr{k}", k)[0] for k in pointers),
      *kept,
      kir.If(E("phase == 0"), phases[0]),
      *([kir.If(E("phase == 2"), (*phases[2], one))] if 2 in phases else []),
      *phases[1],
      one,
    ),
  )


def _rendered(fn: kir.Function, ir_text: str) -> str:
  """The kernel's module source for numba: the function (its region's IR as a comment)
  and `KERNEL`, naming it."""
  return kir.to_python(fn, comment=ir_text) + f"\n\nKERNEL = {fn.name}\n"


def emit_loop_kernel(name: str, program: Program, domain: tuple[int, ...]) -> Kernel:
  """A loop region's kernel. Its tasks are blocks of rows of the domain's outermost
  dimension (about TASK_ELEMENTS elements each); with reductions, or a 0-d domain, it is
  one task."""
  ctx = KernelContext(name, program)
  ins, outs = ctx.arrays(program)
  reductions = _reductions_of(program)
  if reductions or not domain:
    init, setup, code = _loop_code(ctx, program, domain, ins, outs)
    phases = {0: S("return 2"), 1: [*init, *setup, *code]}
  else:
    outer = ctx.size(domain[0])
    inner = kir.product(ctx.size(n) for n in domain[1:])
    init, setup, code = _loop_code(ctx, program, domain, ins, outs, rows=("r0", "r1"))
    ctx.prologue += S("blk = max(1, {0} // max(1, {1}))", TASK_ELEMENTS, inner)
    phases = {
      0: S("return ({0} + blk - 1) // blk + 1", outer),
      1: [*S("r0 = lo * blk\nr1 = min({0}, hi * blk)", outer), *init, *setup, *code],
    }
  threaded = math.prod(domain) >= PARALLEL_MIN and not reductions
  return Kernel(
    _source(ctx, program, phases), tuple(ctx.sizes), threaded, False, tuple(ctx.scratch)
  )


def _nest(index, bounds, body) -> list:
  """Loops over `index` (names, outermost first), each over `range(*bounds[k])`, around
  the statements `body`."""
  for i, b in reversed(list(zip(index, bounds))):
    body = [kir.For(i.id, tuple(b), tuple(body))]
  return list(body)


def _loop_code(ctx, program, domain, ins, outs, rows=None):
  """The loops of a loop region reading the arrays named `ins` and writing `outs`:
  (accumulator setup, views, the loop nests and the reductions' finish), statements. The
  nest runs twice when the fast sin/cos meet arguments beyond their range (then with
  libm's); with `rows` (two names) it covers only those rows of the outermost dimension
  (a task, or a block of a dot epilogue). Views and constants the bodies read go to
  `ctx.prologue`."""
  reductions = _reductions_of(program)
  assert rows is None or (domain and not reductions)
  rows = None if rows is None else [kir.Name(r) for r in rows]
  out_index = {v: k for k, v in enumerate(program.outputs)}
  dims = [ctx.size(n) for n in domain]
  # flat: one loop over the elements, when every array is read and written at the index
  # (0-d arrays broadcast read their one element: no index either)
  read = {a for e in program.eqns for a in e.inputs}
  scalar = lambda e: e.prim is P.broadcast_in_dim_p and e.inputs[0].aval.ndim == 0
  flat = (
    len(domain) > 1
    and not reductions
    and all(
      (e.prim not in INDEX_LOADS or is_splat(e) or scalar(e))
      and e.prim not in (P.iota_p, P.dot_general_p)
      for e in program.eqns
    )
    and all(v.aval.shape in (domain, ()) for v in program.inputs if v in read)
  )
  if flat:
    index, setup = [kir.Name("i")], []
    in_names = [_flat_view(ctx, f"f{n}", n, setup) for n in ins]
    out_names = [_flat_view(ctx, f"g{n}", n, setup) for n in outs]
    bounds = [
      (kir.product(dims),)
      if rows is None
      else (kir.product([rows[0], *dims[1:]]), kir.product([rows[1], *dims[1:]]))
    ]
  else:
    index, in_names, out_names, setup = (
      [kir.Name(f"i{k}") for k in range(len(domain))],
      ins,
      outs,
      [],
    )
    bounds = [(d,) for d in dims] if rows is None else [tuple(rows)] + [(d,) for d in dims[1:]]
  # a loop that starts at a row block's first row: its index is said to be >= 0, or the
  # wrap-around of negative indices numba emits for every access stays in the loop and
  # it does not vectorize (W1 at 10^6: 8.4 ms -> 1.0 ms on one core)
  known = S("{0} = NONNEG({0})", index[0]) if rows is not None else ()
  nest = [*known, *_loop_body(ctx, program, domain, index, in_names, out_names, out_index)]
  checks = list(ctx.range_checks)
  limit = SINCOS_LIMIT[_dtype_of(program)]
  # a flag (an or of bools, not a count): an int64 counter made the loop vectorize at
  # half width on AVX2 (4 lanes of int64 per register, where floats take 8)
  count = lambda var: [S("{0} = {0} | (abs({1}) > {2})", var, c, limit)[0] for c in checks]
  init = _reduction_init(reductions, out_index, outs)
  code = list(S("nbig = False")) if checks else []
  code += ctx.hoisted
  # a row whose stored values change only where comparisons of its index do (an
  # identity basis, a pad's edge) is filled stretch by stretch (codegen.segments)
  rows_of = None
  if domain and not (checks or reductions or flat):
    start, stop = rows if rows is not None and len(domain) == 1 else (kir.Const(0), dims[-1])
    rows_of = segmented_loop(index[-1], start, stop, nest, ctx.fresh)
  lanes = (
    None if checks else _lanes(ctx, reductions, domain, index[-1] if domain else None, dims, nest)
  )
  if rows_of is not None:
    code += _nest(index[:-1], bounds[:-1], rows_of)
  elif lanes is not None:
    init += lanes[0]
    code += _nest(index[:-1], bounds[:-1], lanes[1])
  else:
    code += _nest(index, bounds, nest + count("nbig"))
  if checks:  # rare: arguments beyond the fast sin/cos range; run again with libm
    ctx.precise = True
    again = [*known, *_loop_body(ctx, program, domain, index, in_names, out_names, out_index)]
    code.append(kir.If(kir.Name("nbig"), (*init, *ctx.hoisted, *_nest(index, bounds, again))))
  code += _reduction_finish(ctx, reductions, out_index, outs)
  return init, setup, code


LANES = 8  # partial sums of a reduction along the innermost loop


def _lanes(ctx, reductions, domain, i, dims, nest):
  """Sums along the innermost loop in LANES partial sums: `(setup, the innermost loops)`,
  or None where the region's reductions are not all sums over that loop's axis. One sum
  is a chain of dependent adds (4 cycles each, never vectorized: LLVM keeps the order);
  LANES of them, element `i` into lane `i % LANES`, run as vector adds. The order is
  fixed (it does not depend on threads or sizes' history), and the lanes are added
  pairwise at the end of each row, as numpy's pairwise sum adds its blocks."""
  last = len(domain) - 1
  if not reductions or any(
    e.prim is not P.reduce_sum_p or last not in e.kw["axes"] for e in reductions
  ):
    return None
  accumulators = {f"r{k}": (ctx.fresh("lane"), e) for k, e in enumerate(reductions)}
  j, u, end = (kir.Name(ctx.fresh(p)) for p in ("j", "u", "n"))

  def accumulation(s):  # (target, value, its reduction) of `target += value`, or None
    if type(s) is kir.AugAssign:
      target, value = s.target, s.value
    elif type(s) is kir.Assign and type(s.value) is kir.Call and len(s.value.args) == 2:
      target, value = s.targets[0], s.value.args[1]
      if s.value.func != kir.Name(kir.WRAPPING["+"]) or s.value.args[0] != target:
        return None
    else:
      return None
    name = (target.value if type(target) is kir.Subscript else target).id
    return (target, value, accumulators[name]) if name in accumulators else None

  def into_lane(s):
    found = accumulation(s)
    if found is None:
      return s
    target, value, (lane, e) = found
    return _accumulated("+", kir.Subscript(kir.Name(lane), (u,)), value, _accumulator_dtype(e))

  totals, zeros, setup = [], [], []
  for s in nest:
    found = accumulation(s)
    if found is not None:
      target, _, (lane, e) = found
      at = [kir.Subscript(kir.Name(lane), (kir.Const(k),)) for k in range(LANES)]
      while len(at) > 1:  # pairwise
        at = [arith("+", a, b, _accumulator_dtype(e)) for a, b in zip(at[::2], at[1::2])]
      totals.append(_accumulated("+", target, at[0], _accumulator_dtype(e)))
      zeros += S("{0}[{1}] = 0", lane, u)
      setup += S("{0} = np.full({1}, 0, {2})", lane, LANES, _np(_accumulator_dtype(e)))
  inner = S(
    """
    for {u} in range({lanes}):
      {zeros}
    {end} = {stop} - {stop} % {lanes}
    for {j} in range(0, {end}, {lanes}):
      for {u} in range({lanes}):
        {i} = {j} + {u}
        {body}
    for {i} in range({end}, {stop}):
      {rest}
    {totals}
    """,
    u=u,
    j=j,
    i=i,
    end=end,
    stop=dims[-1],
    lanes=LANES,
    zeros=zeros,
    body=[into_lane(s) for s in nest],
    rest=list(nest),
    totals=totals,
  )
  return setup, list(inner)


def _flat_view(ctx, name: str, array: str, setup: list) -> str:
  """`name`: `array` seen as one dimension (a table entry's alias, else a reshape)."""
  if array in ctx.entries:
    return ctx.alias(name, array, [kir.product(ctx.entries[array][1])])
  setup.append(kir.Assign((kir.Name(name),), ctx.reshaped(array, [-1])))
  return name


def _loop_body(ctx, program, domain, index, in_names, out_names, out_index) -> list:
  """The statements computing one element of every equation of a loop region; a value
  the region recomputes (`lazy_eqns`) is computed where an index map reads it, at the
  index it reads (once per distinct index)."""
  ctx.index = index
  names = dict(zip(program.inputs, in_names))
  values: dict = {}
  lazy = lazy_eqns(program)
  producer = {v: e for e in program.eqns for v in e.outputs}
  lines: list = []
  at: dict = {}  # (lazy value, its index) -> the variable holding it
  # statements that read no loop index (nor a variable that does) are computed once,
  # before the loops (`ctx.hoisted`): besides the time, a chain of the math library's
  # functions on a value the loop does not change made LLVM's optimizer take minutes
  # (each function's branches on an invariant value, unswitched loop after loop)
  ctx.hoisted = []
  varying = kir.names(tuple(index))  # names a loop sets (and, below, names computed
  # from one)

  def emit(var, expr):
    statement = kir.Assign((kir.Name(var),), expr)
    if varying.isdisjoint(kir.names(expr)):
      ctx.hoisted.append(statement)
    else:
      varying.add(var)
      lines.append(statement)

  def lazy_value(v, idx):
    key = (v, tuple(idx))
    if key not in at:
      outer, ctx.index = ctx.index, list(idx)
      at[key] = compute(producer[v], v)
      ctx.index = outer
    return at[key]

  def read(a):
    if isinstance(a, Lit) and a.aval.shape == ():
      return ctx.value(a.value, a.aval.dtype)
    if a in names:
      return ctx.element(names[a], ctx.index)
    if a in values and ctx.index == index:
      return values[a]
    # a recomputed value, or a value computed at the loop's index read by one at another
    # index (`mul c d` under a reversal, where `d` is also used unreversed): computed here
    return lazy_value(a, ctx.index)

  def compute(e, out) -> kir.Name:
    var = ctx.fresh("v")
    if e.prim is P.dot_general_p:  # a small product: its sum, at this index
      lines.extend(_dot_sum_lines(ctx, e, [names[a] for a in e.inputs], var))
      varying.add(var)
      return kir.Name(var)
    if is_splat(e):
      expr = ctx.value(e.inputs[0].value, out.aval.dtype)
    elif e.prim in INDEX_LOADS:
      expr = INDEX_LOADS[e.prim](ctx, e, _Operands(ctx, e, names, lazy_value))
    else:
      expr = _wrapped(lower_rules[e.prim](ctx, e, *map(read, e.inputs)), out.aval.dtype)
    emit(var, expr)
    return kir.Name(var)

  for e in program.eqns:
    if e in lazy:
      continue
    out = e.outputs[0]
    if e.prim in REDUCTIONS:
      lines.extend(_accumulate(ctx, e, read(e.inputs[0]), index))
      continue
    values[out] = compute(e, out)
    if out in out_index:
      lines.append(ctx.store(out_names[out_index[out]], index, values[out]))
  return lines


def _wrapped(expr, dtype: str):
  """An integer result in its own width: numba computes int32 arithmetic in int64 (an
  overflow does not wrap), numpy in int32 (it does), and a wrapped intermediate decides
  what follows (`(x * y) // 7`, a comparison, a maximum): each int32 value is truncated to
  32 bits as numpy leaves it. (int64 is numba's width: it wraps as numpy's does.)"""
  return kir.call("np.int32", expr) if dtype == "int32" else expr


class _Operands:
  """The operands of an index map in a loop body: `self(k, idx, safe)` is operand k's
  element at `idx` (a region input read there, or a recomputed value computed at `safe`,
  an index always inside it); `name(k)` is a region input's name."""

  def __init__(self, ctx, e, names, lazy_value):
    self.ctx, self.e, self.names, self.lazy_value = ctx, e, names, lazy_value

  def name(self, k: int) -> str:
    return self.names[self.e.inputs[k]]

  def __call__(self, k: int, idx, safe=None):
    a = self.e.inputs[k]
    if a in self.names:
      return self.ctx.element(self.names[a], idx)
    return self.lazy_value(a, idx if safe is None else safe)


def is_splat(e) -> bool:
  """A broadcast of a one-element literal: a constant, not a load. (A larger literal is
  an array the kernel reads: `codegen.module` makes it a kernel input.)"""
  return (
    e.prim is P.broadcast_in_dim_p and isinstance(e.inputs[0], Lit) and e.inputs[0].aval.size == 1
  )


def _dtype_of(program):
  for e in program.eqns:
    if e.prim in (P.sin_p, P.cos_p):
      return e.outputs[0].aval.dtype
  return "float64"


# a reduction's accumulator: its start value, and the statement adding `value` to `target`
# (a product in its own dtype, element by element in the loop's order: numpy's order)
REDUCTIONS = {
  P.reduce_sum_p: (lambda aval: kir.Const(0), "+"),
  P.reduce_max_p: (
    lambda aval: E("-np.inf") if aval.is_float else kir.number(int(np.iinfo(aval.dtype).min)),
    "if {value} > {target} or {value} != {value}:\n  {target} = {value}",
  ),
  P.reduce_prod_p: (lambda aval: kir.Const(1), "*"),
}


def _accumulated(op: str, target, value, dtype: str) -> kir.Stmt:
  """`target op= value` (an int64 one wrapping, `arith`)."""
  if dtype == "int64":
    return kir.Assign((target,), arith(op, target, value, dtype))
  return kir.AugAssign(target, op, value)


def _accumulator_dtype(e) -> str:
  """A reduction's accumulator dtype: float64 for a float32 sum, else its output's."""
  dtype = e.outputs[0].aval.dtype
  return "float64" if dtype == "float32" and e.prim is P.reduce_sum_p else dtype


def _reduction_init(reductions, out_index, outs) -> list:
  """Accumulators: a float64 one for float32 sums; a scalar for full reductions."""
  lines = []
  for k, e in enumerate(reductions):
    out = e.outputs[0]
    acc_dtype = _accumulator_dtype(e)
    fill = REDUCTIONS[e.prim][0](out.aval)
    if out.aval.shape == ():
      lines += S("{0} = {1}({2})", f"r{k}", _np(acc_dtype), fill)
    else:
      lines += S(
        "{0} = np.full({1}.shape, {2}, {3})", f"r{k}", outs[out_index[out]], fill, _np(acc_dtype)
      )
  return lines


def _accumulate(ctx, e, value, index):
  k = next(i for i, r in enumerate(_reductions_of(ctx.program)) if r is e)
  kept = [index[d] for d in range(len(index)) if d not in e.kw["axes"]]
  target = kir.Subscript(kir.Name(f"r{k}"), tuple(kept)) if kept else kir.Name(f"r{k}")
  rule = REDUCTIONS[e.prim][1]
  if rule in ("+", "*"):
    return [_accumulated(rule, target, value, e.outputs[0].aval.dtype)]
  return list(S(rule, target=target, value=value))


def _reductions_of(program):
  return [e for e in program.eqns if e.prim in REDUCTIONS]


def _reduction_finish(ctx, reductions, out_index, outs) -> list:
  lines = []
  for k, e in enumerate(reductions):
    o = outs[out_index[e.outputs[0]]]
    dtype = _np(e.outputs[0].aval.dtype)
    if e.outputs[0].aval.shape == ():
      lines += S(
        "{o} = {view}\n{o}[0] = {t}({r})", o=f"o{k}", view=ctx.reshaped(o, [1]), t=dtype, r=f"r{k}"
      )
    else:
      lines += S(
        """
        {o} = {view}
        {s} = {r}.reshape(-1)
        for j in range({s}.size):
          {o}[j] = {t}({s}[j])
        """,
        o=f"o{k}",
        view=ctx.reshaped(o, [-1]),
        s=f"s{k}",
        r=f"r{k}",
        t=dtype,
      )
  return lines


@dataclasses.dataclass(frozen=True)
class _Matrices:
  """A dot operand as a C-contiguous (B, M, K)-like array: a view's name (for loops over
  it), its three dims and its address (expressions)."""

  view: str
  dims: list  # expressions
  address: kir.Expr


def _as_matrices(ctx, name, aval, groups, views, copies) -> _Matrices:
  """`name` (a table entry) as `_Matrices`: its dims taken in the order of `groups` and
  merged into one dimension per group. Its own memory when that order is the memory
  order, else a copy into scratch (`copies`, statements run once, in phase 0; generated
  loops: numba's np.transpose with axes is slow to compile). `views` gets the view."""
  perm = [d for g in groups for d in g]
  dims = [kir.product(ctx.size(aval.shape[d]) for d in g) for g in groups]
  view = ctx.fresh("m")
  if list(perm) == sorted(perm):
    views += S("{0} = {1}", view, ctx.reshaped(name, dims))
    return _Matrices(view, dims, kir.call("ADDRESS", f"ptr{ctx.entries[name][0]}"))
  shape = aval.shape
  size = {d: ctx.size(shape[d]) for d in range(len(shape))}
  flat = ctx.scratch_array(aval.dtype, aval.size)
  dest = kir.Const(0)
  for d in perm:  # row-major position in the permuted order
    dest = kir.BinOp("+", kir.BinOp("*", dest, size[d]), kir.Name(f"d{d}"))
  at = tuple(kir.Name(f"d{d}") for d in range(len(shape)))
  copy = kir.Assign((kir.Subscript(kir.Name(flat), (dest,)),), kir.Subscript(kir.Name(name), at))
  copies += _nest(at, [(size[d],) for d in range(len(shape))], [copy])
  views += S("{0} = {1}", view, ctx.reshaped(flat, dims))
  return _Matrices(view, dims, kir.call("ADDRESS", f"ptr{ctx.entries[flat][0]}"))


def _dot_sum_lines(ctx, e, operands, var) -> list:
  """Statements that set `var` to the dot_general's element at the loop index (batch
  dims, then lhs-free, then rhs-free): a sum over the contraction, operands read in
  place."""
  (lc, rc), (lb, rb) = e.kw["dimension_numbers"]
  x, y = e.inputs
  lf = P._dot_free(x.aval.ndim, lc, lb)
  rf = P._dot_free(y.aval.ndim, rc, rb)
  p = [kir.Name(ctx.fresh("p")) for _ in lc]
  xi = [None] * x.aval.ndim
  yi = [None] * y.aval.ndim
  for k, (dl, dr) in enumerate(zip(lb, rb)):
    xi[dl] = yi[dr] = ctx.index[k]
  for k, d in enumerate(lf):
    xi[d] = ctx.index[len(lb) + k]
  for k, d in enumerate(rf):
    yi[d] = ctx.index[len(lb) + len(lf) + k]
  for k, (dl, dr) in enumerate(zip(lc, rc)):
    xi[dl] = yi[dr] = p[k]
  dtype = e.outputs[0].aval.dtype
  term = arith("*", ctx.element(operands[0], xi), ctx.element(operands[1], yi), dtype)
  total = [_accumulated("+", kir.Name(var), term, dtype)]
  lines = [*S("{0} = {1}", var, const(0, e.outputs[0].aval.dtype))]
  lines += _nest(p, [(ctx.size(x.aval.shape[d]),) for d in lc], total)
  if e.outputs[0].aval.dtype == "int32":  # (see _wrapped)
    lines += S("{0} = {1}", var, _wrapped(kir.Name(var), "int32"))
  return lines


# Products this small (multiply-adds, and the contraction length) are summed in the loop
# over their output, with the epilogue: a BLAS call or matrix views would cost more than
# the arithmetic (measured: ~200 ns of views and calls for a 2x2 product of 8 multiply-adds).
INLINE_DOT_MACS = 2048
INLINE_DOT_K = 32
CONTRACTION_SCRATCH = 1 << 22  # elements of a threaded contraction's parts
DOT_PARALLEL_MIN = 1 << 20  # multiply-adds: smaller products (with small epilogues) run on
# one thread
# Multiply-adds per BLAS call of a product's tasks (a block of short rows, a chunk of a
# contraction). primc's own BLAS runs one thread (`codegen.openblas`): blocks of 2^20
# (~20 us), each packing its operands once (W3's 4096 x 64 x 64 products in blocks of 2^17,
# 32 rows, or contraction chunks of 32: a third of the BLAS time went to packing). A
# BLAS that threads its calls: below its threshold (2^18), so that it keeps these on one
# thread (measured: a larger call from a pool thread ran 50x slower).
BLOCK_DOT = 1 << 20 if openblas.single_threaded() else 1 << 17
DOT_BLOCKS = 16  # row blocks of a product whose rows are long (BLOCK_DOT)
DOT_BLOCK_ROWS = 64  # at least: each block packs the right operand again
DOT_BLOCK_COLUMNS = 256  # at least, in blocks of columns (each packs the left operand again)


def _lhs_view(ctx, name, aval, groups, swapped, views, copies):
  """The left operand as `_as_matrices`, or `(view, True)` without a copy when its memory
  holds the `swapped` (batch, cols, rows) order (each matrix is then used as `view[q].T`)."""
  natural, other = [d for g in groups for d in g], [d for g in swapped for d in g]
  if natural != sorted(natural) and other == sorted(other):
    return _as_matrices(ctx, name, aval, swapped, views, copies), True
  return _as_matrices(ctx, name, aval, groups, views, copies), False


def _product(program: Program) -> tuple[Eqn, int, int]:
  """A dot region's dot_general, its contraction length and its multiply-adds."""
  dot = next(e for e in program.eqns if e.prim is P.dot_general_p)
  (lc, _), _ = dot.kw["dimension_numbers"]
  k = math.prod([dot.inputs[0].aval.shape[d] for d in lc])
  return dot, k, dot.outputs[0].aval.size * k


def _inline_dot(program: Program) -> bool | None:
  """Whether the sizes prefer the region's product summed inline (small products); None
  when it cannot be (an operand is computed in the region)."""
  dot, k, macs = _product(program)
  if not all(isinstance(a, Var) and a in program.inputs for a in dot.inputs):
    return None
  return k <= INLINE_DOT_K and macs <= INLINE_DOT_MACS


# A product of more multiply-adds never runs summed inline (slower than product calls
# there): a program that ran it inline at smaller sizes compiles its product variant.
INLINE_FALLBACK_MACS = 1 << 17


def dot_variants(name: str, program: Program):
  """The kernels that may compute a dot region at its sizes, the one the sizes prefer
  first: summed inline (small products), or by product calls. Each is right at every
  size, so a program keeps the variant it first ran when its sizes change
  (`codegen.module.build`'s `prefer`) and compiles nothing, unless that would run a large
  product inline. Generated one at a time (a caller content with the first emits one)."""
  inline = _inline_dot(program)
  if inline is None:
    yield emit_dot_kernel(name, program, False)
    return
  yield emit_dot_kernel(name, program, inline)
  if inline or _product(program)[2] <= INLINE_FALLBACK_MACS:
    yield emit_dot_kernel(name, program, not inline)


def emit_dot_kernel(name: str, program: Program, inline: bool | None = None) -> Kernel:
  """A dot region: dot_general as a batch of matrix products, then the epilogue over the
  product's domain.

  Operands are used in place when their memory is a (batch, rows, cols) matrix or its
  transpose (else copied into scratch in phase 0). The tasks split the work into blocks
  of at most BLOCK_DOT multiply-adds: row blocks, each followed by its rows of the
  epilogue while they are in cache, or blocks of columns where the rows are few (a
  convolution's output channels); or parts of the contraction, summed in a fixed order
  in phase 2, where the left operand is transposed. The plan threads products of at
  least DOT_PARALLEL_MIN multiply-adds (and large epilogues).

  Small products (INLINE_DOT_MACS, INLINE_DOT_K: `inline` None asks the sizes) are a
  loop kernel over the product's output instead, each element summed in place
  (`_dot_sum_lines`)."""
  dot = _product(program)[0]
  (lc, _), (lb, _) = dot.kw["dimension_numbers"]
  x, y = dot.inputs
  out = dot.outputs[0]
  if inline is None:
    inline = bool(_inline_dot(program))
  if inline:
    return emit_loop_kernel(name, program, out.aval.shape)
  ctx = KernelContext(name, program)
  ins, outs = ctx.arrays(program)
  names = dict(zip(program.inputs, ins))
  lf = P._dot_free(x.aval.ndim, lc, lb)
  blas = out.aval.is_float  # integer products are loops (numba's np.dot is float only)
  epilogue = [e for e in program.eqns if e is not dot]
  threaded = blas and _dot_threaded(program, bool(epilogue))
  views, copies = [], []  # statements: the prologue's views, phase 0's copies
  out_index = {v: k for k, v in enumerate(program.outputs)}
  c = outs[out_index[out]] if out in out_index else ctx.scratch_array(out.aval.dtype, out.aval.size)
  a, ta, b, swapped = _dot_operands(ctx, dot, [names[x], names[y]], c, blas, views, copies)
  gemm = _Gemm(out.aval.dtype) if blas else None
  sub = Program(
    program.inputs + (out,), tuple(epilogue), tuple(v for v in program.outputs if v is not out)
  )
  sub_ins = ins + ["cv"]
  sub_outs = [outs[i] for i, v in enumerate(program.outputs) if v is not out]
  # row blocks carry their epilogue rows when the product's leading dim is the matrix row
  fuse_rows = bool(
    epilogue and not lb and len(lf) == 1 and not ta and not swapped and not _reductions_of(sub)
  )
  if ta:
    nb = math.prod([x.aval.shape[d] for d in lb])
    parts = 8 if threaded and nb == 1 and out.aval.size * 8 <= CONTRACTION_SCRATCH else 1
    phases = _contraction_parts(ctx, gemm, out.aval.dtype, parts, parts * out.aval.size, views)
  else:
    rows_code = (
      _loop_code(ctx, sub, out.aval.shape, sub_ins, sub_outs, rows=("r0", "r1"))
      if fuse_rows
      else None
    )
    phases = _row_blocks(_rows_product(gemm, a.view, b.view), views, rows_code)
  phases[0] = copies + phases[0]
  if epilogue and not fuse_rows:
    init, setup, code = _loop_code(ctx, sub, out.aval.shape, sub_ins, sub_outs)
    phases[2] = phases.get(2, []) + [*init, *setup, *code]
  ctx.prologue[:0] = views  # before the epilogue's views (which may read cv)
  return Kernel(
    _source(ctx, program, phases), tuple(ctx.sizes), threaded, 2 in phases, tuple(ctx.scratch)
  )


def _dot_operands(ctx, dot, names, c, blas, views, copies):
  """The product's operands as matrices (`_Matrices`: the left one, whether it is used
  transposed, the right one, whether they are swapped) and the views of them and of the
  result `c` (`nb`, `mr`, `kc`, `nc`, `c3`, and with BLAS their addresses `pa`, `pb`,
  `pc`) added to `views`. One row times a right operand whose memory is transposed (a
  vector times a matrix's transpose: a layer's input gradient at batch 1) is computed
  swapped, c^T = B A^T, each element a sum along one of B's rows: the same memory for c,
  and B read in place instead of copied."""
  (lc, rc), (lb, rb) = dot.kw["dimension_numbers"]
  x, y = dot.inputs
  lf = P._dot_free(x.aval.ndim, lc, lb)
  rf = P._dot_free(y.aval.ndim, rc, rb)
  groups = [list(lb), lf, list(lc)]
  swapped = (
    blas
    and math.prod(x.aval.shape[d] for d in lf) == 1
    and [*rb, *rc, *rf] != sorted([*rb, *rc, *rf])
    and [*rb, *rf, *rc] == sorted([*rb, *rf, *rc])
  )
  if swapped:
    a, ta = _as_matrices(ctx, names[1], y.aval, [list(rb), rf, list(rc)], views, copies), False
    b = _as_matrices(ctx, names[0], x.aval, [list(lb), list(lc), lf], views, copies)
  else:
    a, ta = (
      _lhs_view(ctx, names[0], x.aval, groups, [list(lb), list(lc), lf], views, copies)
      if blas
      else (_as_matrices(ctx, names[0], x.aval, groups, views, copies), False)
    )
    # the right operand is read as (batch, contraction, cols): BLAS runs a transposed
    # right operand half as fast (measured), and copying it costs one pass over it
    b = _as_matrices(ctx, names[1], y.aval, [list(rb), list(rc), rf], views, copies)
  views += S(
    "nb = {0}\nmr = {1}\nkc = {2}\nnc = {3}\nc3 = {4}",
    a.dims[0],
    a.dims[2 if ta else 1],
    a.dims[1 if ta else 2],
    b.dims[2],
    ctx.reshaped(c, ["nb", "mr", "nc"]),
  )
  ctx.alias("cv", c, [ctx.size(n) for n in dot.outputs[0].aval.shape])
  if blas:
    views += S(
      "pa = {0}\npb = {1}\npc = ADDRESS({2})", a.address, b.address, f"ptr{ctx.entries[c][0]}"
    )
  return a, ta, b, swapped


def _dot_threaded(program: Program, epilogue: bool) -> bool:
  """Whether a float product region's step runs threaded: at least DOT_PARALLEL_MIN
  multiply-adds (or a large epilogue), and BLAS calls that run on one thread: primc's
  own BLAS (`codegen.openblas`), else calls below BLOCK_DOT multiply-adds (short rows,
  or one matrix cut into parts), which a BLAS that threads its calls keeps on one thread
  (a threaded step whose tasks made threaded BLAS calls would run one pool inside
  another)."""
  dot, k, macs = _product(program)
  (x, y), out = dot.inputs, dot.outputs[0]
  (_, rc), (lb, rb) = dot.kw["dimension_numbers"]
  n = math.prod(y.aval.shape[d] for d in P._dot_free(y.aval.ndim, rc, rb))
  if macs < DOT_PARALLEL_MIN and not (epilogue and out.aval.size >= 4 * PARALLEL_MIN):
    return False
  return (
    openblas.single_threaded()
    or n * k * 4 <= BLOCK_DOT
    or math.prod(x.aval.shape[d] for d in lb) == 1
  )


def _rows_product(gemm, a: str, b: str) -> kir.Expr:
  """The call that computes rows r0:r1, columns j0:j1 of the q-th product (c3[q] = a[q] @
  b[q])."""
  if gemm is None:  # integer products: loops over views
    return E("matmul_loops({0}[q, r0:r1], {1}[q, :, j0:j1], c3[q, r0:r1, j0:j1], False)", a, b)
  return gemm(
    0,
    E("r1 - r0"),
    E("j1 - j0"),
    "kc",
    ("pa", E("(q * mr + r0) * kc")),
    ("pb", E("q * kc * nc + j0")),
    ("pc", E("(q * mr + r0) * nc + j0")),
    ld="nc",
  )


class _Gemm:
  """Calls of the library's float product by address (`blas.gemm_f32`/`gemm_f64`): offsets
  are given in elements and scaled to bytes here."""

  def __init__(self, dtype):
    self.name = {"float32": "GEMM_F32", "float64": "GEMM_F64"}[np.dtype(dtype).name]
    self.itemsize = np.dtype(dtype).itemsize

  def __call__(self, ta, m, n, k, a, b, c, acc=False, ld=None) -> kir.Expr:
    """The call (c = A @ B, or c += A @ B: `acc`, a bool or an expression); each matrix
    given as (address, offset in elements), expressions; B's and c's rows `ld` elements
    apart (None: n, C-contiguous)."""
    at = lambda base, offset: E("{0} + ({1}) * {2}", base, offset, self.itemsize)
    acc = int(acc) if isinstance(acc, bool) else acc  # a constant, or an expression
    return kir.call(self.name, ta, m, n, k, at(*a), at(*b), at(*c), acc, n if ld is None else ld)


def _row_blocks(rows_call, views, rows_code) -> dict[int, list]:
  """Row blocks, one product call each (and the block's rows of the epilogue,
  `rows_code`), all in tasks: blocks of at most BLOCK_DOT multiply-adds (at least 4 rows)
  where a row is short, else about DOT_BLOCKS blocks of at least DOT_BLOCK_ROWS rows (primc's
  BLAS runs on one thread: the pool runs the blocks side by side). Each block packs the
  operand it shares with the others again, so a product with more columns than rows (a
  convolution's channels times its positions) is cut into blocks of columns instead, of
  at least DOT_BLOCK_COLUMNS (the left operand, the smaller, packed again), unless the
  epilogue follows each block's rows."""
  views += S(
    """
    small = nc * kc * 4 <= {block}
    rows = max(1, {block} // max(1, nc * kc)) if small else max({least}, (mr + {more}) // {blocks})
    cols = nc
    """,
    block=BLOCK_DOT,
    least=DOT_BLOCK_ROWS,
    more=DOT_BLOCKS - 1,
    blocks=DOT_BLOCKS,
  )
  if rows_code is None:  # (else each block's rows are whole, for their epilogue)
    views += S(
      """
      if not small and nc > mr and nc >= 2 * {least_cols}:
        rows = mr
        cols = max({least_cols}, (nc + {blocks} * 16 - 1) // ({blocks} * 16) * 16)
      """,
      blocks=DOT_BLOCKS,
      least_cols=DOT_BLOCK_COLUMNS,
    )
  views += S(
    """
    nblk = (mr + rows - 1) // rows
    ncb = (nc + cols - 1) // cols
    """
  )
  rows = [] if rows_code is None else [s for part in rows_code for s in part]
  tasks = S(
    """
    for task in range(lo, hi):
      q = task // (nblk * ncb)
      r0 = (task // ncb % nblk) * rows
      r1 = min(mr, r0 + rows)
      j0 = task % ncb * cols
      j1 = min(nc, j0 + cols)
      {call}
      {rows}
    """,
    call=[kir.ExprStmt(rows_call)],
    rows=rows,
  )
  return {0: list(S("return nb * nblk * ncb + 1")), 1: list(tasks)}


def _contraction_parts(ctx, gemm, dtype, parts, elements, views) -> dict[int, list]:
  """A transposed left operand (float products only): up to `parts` parts of the
  contraction (a word: 1 unless the plan threads a single product), each a sum of product
  calls into its scratch (`elements` = parts x the product's size), added in a fixed
  order in phase 2 (results do not depend on the thread count); else one task per
  matrix of the batch."""
  maxparts = ctx.size(parts)
  acc = ctx.scratch_array(dtype, elements if parts > 1 else 0)
  views += S(
    """
    step = {block} // max(1, mr * nc)
    split = nb == 1 and {maxparts} > 1 and step >= 16 and kc > step
    nparts = max(1, min({maxparts}, (kc + step - 1) // max(1, step))) if split else 1
    per = (kc + nparts - 1) // nparts
    """,
    block=BLOCK_DOT,
    maxparts=maxparts,
  )
  view_acc = S("acc = {0}", ctx.reshaped(acc, [maxparts, "mr", "nc"]))
  whole = gemm(
    1,
    "mr",
    "nc",
    "kc",
    ("pa", E("q * kc * mr")),
    ("pb", E("q * kc * nc")),
    ("pc", E("q * mr * nc")),
  )
  chunk = gemm(
    1,
    "mr",
    "nc",
    E("k1 - k0"),
    ("pa", E("k0 * mr")),
    ("pb", E("k0 * nc")),
    ("pacc", E("part * mr * nc")),
    acc=E("1 if k0 > part * per else 0"),
  )
  tasks = S(
    """
    if not split:
      for q in range(lo, hi):
        {whole}
      return 1
    {view_acc}
    pacc = ADDRESS({pacc})
    for part in range(lo, hi):
      for k0 in range(part * per, min(kc, (part + 1) * per), step):
        k1 = min(kc, k0 + step, (part + 1) * per)
        {chunk}
    """,
    whole=[kir.ExprStmt(whole)],
    view_acc=view_acc,
    pacc=f"ptr{ctx.entries[acc][0]}",
    chunk=[kir.ExprStmt(chunk)],
  )
  finish = S(
    """
    if split:
      {view_acc}
      for i in range(mr):
        for j in range(nc):
          s = acc[0, i, j]
          for part in range(1, nparts):
            s += acc[part, i, j]
          c3[0, i, j] = s
    """,
    view_acc=view_acc,
  )
  return {0: list(S("return (nparts if split else nb) + 1")), 1: list(tasks), 2: list(finish)}


# a gather's or scatter's kernel: its views, then every index checked before any is used
_GATHER_CHECK = """
nb = {nb}
pre = {pre}
na = {na}
post = {post}
ni = {ni}
x4 = {x4}
ix = {ix}
for q in range(nb):
  for j in range(ni):
    k = ix[q, j]
    if k < -na or k >= na:
      err[1] = k
      err[2] = na
      return -1
"""
# each index's rows (`k`, counted from the end where negative) moved by `{move}`: a gather
# reads them, a scatter adds into them (in order: repeats add up)
_EACH_INDEX = """
for q in range(nb):
  for p_ in range(pre):
    for j in range(ni):
      k = ix[q, j]
      if k < 0:
        k += na
      for s in range(post):
        {move}
"""
_GATHER = "o4[q, p_, j, s] = x4[q, p_, k, s]"
_SCATTER = "o4[q, p_, k, s] += u4[q, p_, j, s]"
# the operand copied first, then the updates added
_SCATTER_VIEWS = """
u4 = {u4}
o4 = {o4}
xf = {xf}
of = {of}
for t in range(nb * pre * na * post):
  of[t] = xf[t]
"""


def emit_gather_kernel(name: str, program: Program) -> Kernel:
  """gather / scatter_add along one axis (with batch dims), all in phase 0.

  Every index is checked first (numpy's rule: negatives count from the end, anything
  outside [-n, n) is out of bounds); the kernel returns -1 with the first bad index and
  the axis size in `err[1]`, `err[2]` before it reads or writes anything."""
  ctx = KernelContext(name, program)
  (e,) = program.eqns
  ins, _ = ctx.arrays(program)
  ctx.err = True
  names = dict(zip(program.inputs, ins))
  x, idx = e.inputs[:2]
  axis, nbd = e.kw["axis"], e.kw["batch_dims"]
  shape = x.aval.shape
  size = lambda dims: kir.product(ctx.size(n) for n in dims)
  code = S(
    _GATHER_CHECK,
    nb=size(shape[:nbd]),
    pre=size(shape[nbd:axis]),
    na=ctx.size(shape[axis]),
    post=size(shape[axis + 1 :]),
    ni=size(idx.aval.shape[nbd:]),
    x4=ctx.reshaped(names[x], ["nb", "pre", "na", "post"]),
    ix=ctx.reshaped(names[idx], ["nb", "ni"]),
  )
  if e.prim is P.gather_p:
    code += S("o4 = {0}", ctx.reshaped("out0", ["nb", "pre", "ni", "post"]))
    code += S(_EACH_INDEX, move=S(_GATHER))
  else:
    code += S(
      _SCATTER_VIEWS,
      u4=ctx.reshaped(names[e.inputs[2]], ["nb", "pre", "ni", "post"]),
      o4=ctx.reshaped("out0", ["nb", "pre", "na", "post"]),
      xf=ctx.reshaped(names[x], [-1]),
      of=ctx.reshaped("out0", [-1]),
    )
    code += S(_EACH_INDEX, move=S(_SCATTER))
  code += S("return 1")
  return Kernel(
    _source(ctx, program, {0: list(code), 1: []}),
    tuple(ctx.sizes),
    False,
    False,
    tuple(ctx.scratch),
  )


# A stable sort of row q's indices, NaNs last (numpy's kind='stable'): insertion sort of
# runs of RUN, then bottom-up merges of runs of `wd` between the row and the scratch `tmp`
# by turns, first within blocks of BLOCK (in cache: merging the whole row pass after pass
# was 20-30% slower than numba's recursive sort at 10^6), then across them. An element goes
# before another only when it sorts strictly before it: b < a, or a is NaN and b is not.
RUN, BLOCK = 32, 4096


def _merge_pass(src: str, dst: str, lo: str, hi: str) -> list[str]:
  """One merge pass of runs of `wd` over [lo, hi) from `src` into `dst` (element
  templates)."""
  return [
    f"a0 = {lo}",
    f"while a0 < {hi}:",
    f"  mid = min(a0 + wd, {hi})",
    f"  b1 = min(a0 + 2 * wd, {hi})",
    "  i1 = a0",
    "  j1 = mid",
    "  t1 = a0",
    "  while i1 < mid and j1 < b1:",
    f"    ia = {src.format('i1')}",
    f"    jb = {src.format('j1')}",
    "    xa = x2[q, ia]",
    "    xb = x2[q, jb]",
    "    if xb < xa or (xa != xa and xb == xb):",
    f"      {dst.format('t1')} = jb",
    "      j1 += 1",
    "    else:",
    f"      {dst.format('t1')} = ia",
    "      i1 += 1",
    "    t1 += 1",
    "  while i1 < mid:",
    f"    {dst.format('t1')} = {src.format('i1')}",
    "    i1 += 1",
    "    t1 += 1",
    "  while j1 < b1:",
    f"    {dst.format('t1')} = {src.format('j1')}",
    "    j1 += 1",
    "    t1 += 1",
    "  a0 = b1",
  ]


def _merge_passes(limit: str, lo: str, hi: str) -> list[str]:
  """Merge passes over [lo, hi) while `wd < limit`, alternating the buffers."""
  row, tmp = "o2[q, {}]", "tmp[{}]"
  return (
    [f"while wd < {limit}:", "  if in_row:"]
    + ["    " + line for line in _merge_pass(row, tmp, lo, hi)]
    + ["  else:"]
    + ["    " + line for line in _merge_pass(tmp, row, lo, hi)]
    + ["  in_row = not in_row", "  wd *= 2"]
  )


_STABLE_SORT = [
  "for t1 in range(n):",
  "  o2[q, t1] = t1",
  f"lim = min({BLOCK}, n)",  # every block takes as many passes: one parity after them
  f"wd = {RUN}",
  "in_row = True",
  f"for c0 in range(0, n, {BLOCK}):",
  f"  c1 = min(c0 + {BLOCK}, n)",
  f"  for a0 in range(c0, c1, {RUN}):",
  f"    b1 = min(a0 + {RUN}, c1)",
  "    for i1 in range(a0 + 1, b1):",
  "      v = o2[q, i1]",
  "      xv = x2[q, v]",
  "      j1 = i1 - 1",
  "      while j1 >= a0:",
  "        xa = x2[q, o2[q, j1]]",
  "        if not (xv < xa or (xa != xa and xv == xv)):",
  "          break",
  "        o2[q, j1 + 1] = o2[q, j1]",
  "        j1 -= 1",
  "      o2[q, j1 + 1] = v",
  f"  wd = {RUN}",
  "  in_row = True",
  *("  " + line for line in _merge_passes("lim", "c0", "c1")),
  *_merge_passes("n", "0", "n"),
  "if not in_row:",
  "  for t1 in range(n):",
  "    o2[q, t1] = tmp[t1]",
]


def emit_sort_kernel(name: str, program: Program) -> Kernel:
  """argsort along the last axis, one row per task: a stable merge sort with NaNs last,
  as numpy's (written out, so that the kernel is in the translated subset)."""
  ctx = KernelContext(name, program)
  (e,) = program.eqns
  rows = _last_axis_rows(ctx, program)
  tmp = ctx.scratch_array(e.outputs[0].aval.dtype, e.inputs[0].aval.shape[-1])
  ctx.prologue += [*rows, *S("tmp = {0}", tmp)]
  return _per_item_kernel(ctx, program, "rows", S("\n".join(_STABLE_SORT)))


def _last_axis_rows(ctx: KernelContext, program: Program) -> list:
  """Prologue statements of a one-equation kernel over rows of its last axis: `rows` (the
  leading axes), `n` (the last), its operand and result as `x2`, `o2` of (rows, n)."""
  (e,) = program.eqns
  ins, outs = ctx.arrays(program)
  shape = e.inputs[0].aval.shape
  rows = kir.product([ctx.size(m) for m in shape[:-1]])  # (its words first)
  n = ctx.size(shape[-1])
  return list(
    S(
      "rows = {0}\nn = {1}\nx2 = {2}\no2 = {3}",
      rows,
      n,
      ctx.reshaped(ins[0], ["rows", n]),
      ctx.reshaped(outs[0], ["rows", n]),
    )
  )


def emit_cumulative_kernel(name: str, program: Program) -> Kernel:
  """cumsum / cumprod along the last axis, one row per task, left to right as numpy
  accumulates (each partial result rounded in the array's dtype)."""
  ctx = KernelContext(name, program)
  (e,) = program.eqns
  ctx.prologue += _last_axis_rows(ctx, program)
  body = S(
    """
    if n > 0:
      acc = x2[q, 0]
      o2[q, 0] = acc
      for i in range(1, n):
        acc = {step}
        o2[q, i] = acc
    """,
    step=kir.BinOp("+" if e.prim is P.cumsum_p else "*", kir.Name("acc"), E("x2[q, i]")),
  )
  return _per_item_kernel(ctx, program, "rows", body)


def _per_item_kernel(ctx, program, count: str, body) -> Kernel:
  """A serial kernel of `count` tasks, task q running `body` (statements)."""
  tasks = S("for q in range(lo, hi):\n  {body}", body=list(body))
  return Kernel(
    _source(ctx, program, {0: list(S("return {0} + 1", count)), 1: list(tasks)}),
    tuple(ctx.sizes),
    False,
    False,
    tuple(ctx.scratch),
  )


def emit_linalg_kernel(name: str, program: Program) -> Kernel:
  """One linalg primitive (prims.with_trait("linalg")) of each matrix of the batch (the
  leading axes), one matrix per task: numba's LAPACK calls, and substitution loops for
  triangular_solve (serial: one call already uses BLAS). A matrix it fails on (singular,
  not positive definite, not finite: numba's LAPACK calls refuse infs and nans) returns -1
  with the failure in err[1] and the matrix's index in the batch in err[2]."""
  ctx = KernelContext(name, program)
  (e,) = program.eqns
  ins, outs = ctx.arrays(program)
  names = dict(zip(program.inputs, ins))  # solve(a, a) reads one input twice
  a = e.inputs[0].aval
  m, n = ctx.size(a.shape[-2]), ctx.size(a.shape[-1])
  ctx.prologue += S(
    "nb = {0}\na3 = {1}",
    kir.product(ctx.size(d) for d in a.shape[:-2]),
    ctx.reshaped(names[e.inputs[0]], ["nb", m, n]),
  )
  if e.prim in (P.solve_p, P.triangular_solve_p):
    k = ctx.size(e.inputs[1].aval.shape[-1])
    ctx.prologue += S("b3 = {0}", ctx.reshaped(names[e.inputs[1]], ["nb", n, k]))
  out_shape = [ctx.size(d) for d in e.outputs[0].aval.shape[len(a.shape) - 2 :]]
  ctx.prologue += S("o = {0}", ctx.reshaped(outs[0], ["nb", *out_shape]))
  ctx.err = True
  finite = E("np.all(np.isfinite(a3[q]))")
  if e.prim is P.solve_p:
    finite = kir.BoolOp("and", (finite, E("np.all(np.isfinite(b3[q]))")))
  # err[1]: 1 the op's own failure, 2 a matrix not finite; numpy's answer to a matrix
  # with infs or nans is NaNs for some ops (`_NAN_ANSWERS`)
  otherwise = (
    S("o[q] = np.nan") if e.prim in _NAN_ANSWERS else S("err[1] = 2\nerr[2] = q\nreturn -1")
  )
  body = S(
    """
    try:
      {body}
    except Exception:
      if {finite}:
        err[1] = 1
        err[2] = q
        return -1
      {otherwise}
    """,
    body=list(_LINALG_BODIES[e.prim](e, m, n)),
    finite=finite,
    otherwise=list(otherwise),
  )
  return _per_item_kernel(ctx, program, "nb", body)


# The ops numpy answers with NaNs (not an error) where a matrix holds infs or nans, which
# numba's LAPACK calls refuse: the kernel gives numpy's answer (the interpreter's)
_NAN_ANSWERS = (P.inv_p, P.solve_p, P.det_p)


def _column_sign(entry, n) -> tuple:
  """`sg`: the sign prims.column_signs gives column j, whose entry i is `entry(i)` (an
  expression): the sign of its first largest-magnitude entry."""
  return S(
    """
    big = 0
    for i in range({n}):
      if abs({at_i}) > abs({at_big}):
        big = i
    sg = -1.0 if {at_big} < 0 else 1.0
    """,
    n=n,
    at_i=entry(kir.Name("i")),
    at_big=entry(kir.Name("big")),
  )


def _eigh_body(e, m, n):
  """Eigenvalues in row 0, eigenvectors below, signs as prims.column_signs sets them."""
  return S(
    """
    w, v = np.linalg.eigh(a3[q])
    o[q, 0, :] = w
    for j in range({n}):
      {sign}
      for i in range({n}):
        o[q, 1 + i, j] = sg * v[i, j]
    """,
    n=n,
    sign=list(_column_sign(lambda i: E("v[{0}, j]", i), n)),
  )


def _qr_body(e, m, n):
  """Q then R, along the axis prims.qr_shapes names (the source differs between the two,
  so a kernel never serves the other case)."""
  if P.qr_shapes(*e.inputs[0].aval.shape[-2:])[2] == -2:
    template = "qq, rr = np.linalg.qr(a3[q])\no[q, :{m}, :] = qq\no[q, {m}:, :] = rr"
  else:
    template = "qq, rr = np.linalg.qr(a3[q])\no[q, :, :{m}] = qq\no[q, :, {m}:] = rr"
  return S(template, m=m)


def _triangular_solve_body(e, m, n):
  """Forward or back substitution over b's columns, reading one triangle of a (a^T when
  transpose_a: its element (i, j) is a[j, i]); a zero pivot raises as LAPACK's solve."""
  lower, trans = e.kw["lower"], e.kw["transpose_a"]
  at = lambda i, j: E("a3[q, {0}, {1}]", *((j, i) if trans else (i, j)))
  rows, inner = ("{n}", "i") if lower != trans else ("{n} - 1, -1, -1", "i + 1, {n}")
  template = f"""
    for i in range({rows}):
      d = {{diagonal}}
      if d == 0:
        raise np.linalg.LinAlgError('Singular matrix')
      for c in range(b3.shape[2]):
        s = b3[q, i, c]
        for j in range({inner}):
          s -= {{entry}} * o[q, j, c]
        o[q, i, c] = s / d
    """
  return S(template, n=n, diagonal=at("i", "i"), entry=at("i", "j"))


def _pinv_cutoff(e, m, n) -> kir.Expr:
  """prims.pinv_cutoff in the kernel: numpy's default from the sizes, not a literal of
  them (a kernel serves every size)."""
  rcond = e.kw["rcond"]
  eps = float(np.finfo(e.inputs[0].aval.dtype).eps)
  return kir.number(float(rcond)) if rcond is not None else E("max({0}, {1}) * {2}", m, n, eps)


def _svd_body(e, m, n):
  """U, the singular values, V: each pair of singular vectors with the sign
  prims.column_signs gives V's column."""
  return S(
    """
    uu, ss, vh = np.linalg.svd(a3[q], full_matrices=False)
    for j in range(ss.shape[0]):
      {sign}
      for i in range({m}):
        o[q, i, j] = sg * uu[i, j]
      o[q, {m}, j] = ss[j]
      for i in range({n}):
        o[q, {m} + 1 + i, j] = sg * vh[j, i]
    """,
    m=m,
    n=n,
    sign=list(_column_sign(lambda i: E("vh[j, {0}]", i), n)),
  )


_LINALG_BODIES = {
  P.inv_p: lambda e, m, n: S("o[q, :, :] = np.linalg.inv(a3[q])"),
  P.solve_p: lambda e, m, n: S("o[q, :, :] = np.linalg.solve(a3[q], b3[q])"),
  P.det_p: lambda e, m, n: S("o[q] = np.linalg.det(a3[q])"),
  P.slogdet_p: lambda e, m, n: S("sg, la = np.linalg.slogdet(a3[q])\no[q, 0] = sg\no[q, 1] = la"),
  P.cholesky_p: lambda e, m, n: S("o[q, :, :] = np.linalg.cholesky(a3[q])"),
  P.eigh_p: _eigh_body,
  P.qr_p: _qr_body,
  P.triangular_solve_p: _triangular_solve_body,
  P.svd_p: _svd_body,
  P.pinv_p: lambda e, m, n: S("o[q, :, :] = np.linalg.pinv(a3[q], {0})", _pinv_cutoff(e, m, n)),
}
