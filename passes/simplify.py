"""simplify: constant folding and algebraic identities, as one-line table rows.

Every rule is an identity of the values *and* of their derivatives, because programs are
optimized between autodiff transforms; so `stop_gradient` is kept (codegen lowers it to
the identity).

NaN/inf policy: by default no rewrite changes a NaN or inf result (IEEE-safe); the sign of
a zero result may change (`x + 0 -> x` maps -0 + 0 = +0 to -0). `fast=True` also allows
rewrites that are wrong only for NaN/inf operands: `x * 0 -> 0`, `x - x -> 0`.
"""

from __future__ import annotations

import math

import numpy as np

from primc import prims as P
from primc.core import SMALL_INT, Lit, Program, Var, impl_rules
from primc.passes.rewrite import Rewriter

ELEMENTWISE = P.with_trait("elementwise")
INDEXING = P.with_trait("indexing")
FOLD_LIMIT = 64  # literal-only results up to this many elements become literals


def splat(r: Rewriter, value, aval, sized: bool = False):
  """A constant of `aval` with every element `value` (a broadcast scalar literal)."""
  return splat_like(r, Lit.of(np.asarray(value, aval.dtype), sized=sized), aval.shape)


def splat_like(r: Rewriter, lit: Lit, shape):
  """The scalar literal `lit` spread over `shape`."""
  return (
    lit
    if shape == ()
    else r.emit(P.broadcast_in_dim_p, [lit], shape=shape, broadcast_dimensions=())
  )


def compose_broadcast(r, x, *, shape, broadcast_dimensions):
  inner = r.producer(x, "broadcast_in_dim")
  if inner is None:
    return None
  dims = tuple(broadcast_dimensions[d] for d in inner.kw["broadcast_dimensions"])
  if r.read(inner.inputs[0]).aval.shape == shape:
    return inner.inputs[0]
  return r.emit(P.broadcast_in_dim_p, [inner.inputs[0]], shape=shape, broadcast_dimensions=dims)


def compose_reshape(r, x, *, new_sizes):
  inner = r.producer(x, "reshape")
  if inner is None:
    return None
  if r.read(inner.inputs[0]).aval.shape == new_sizes:
    return inner.inputs[0]
  return r.emit(P.reshape_p, [inner.inputs[0]], new_sizes=new_sizes)


def unit_moves(old: tuple, new: tuple) -> list | None:
  """For a reshape from `old` to `new` that only inserts or removes dimensions of size 1:
  each dimension of `old`'s place in `new` (None for a removed one). Else None."""
  kept_old = [d for d, n in enumerate(old) if n != 1]
  kept_new = [d for d, n in enumerate(new) if n != 1]
  if [old[d] for d in kept_old] != [new[d] for d in kept_new]:
    return None
  where = dict(zip(kept_old, kept_new))
  return [where.get(d) for d in range(len(old))]


def broadcast_of_iota(r, x, *, shape, broadcast_dimensions):
  """A broadcast of an iota is an iota (along the same dimension, not a widened unit one):
  a constant, recomputed by every region that reads it."""
  inner = r.producer(x, "iota")
  if inner is None:
    return None
  d = inner.kw["dimension"]
  if inner.kw["shape"][d] != shape[broadcast_dimensions[d]]:
    return None
  return r.emit(
    P.iota_p, [], shape=shape, dimension=broadcast_dimensions[d], dtype=inner.kw["dtype"]
  )


def reshape_of_constant(r, x, *, new_sizes):
  """A reshape of a splat is a splat; of an iota, moving only unit dimensions, an iota."""
  inner = r.producer(x, "broadcast_in_dim")
  if inner is not None and _is_splat_eqn(r, inner):
    return splat_like(r, r.read(inner.inputs[0]), new_sizes)
  inner = r.producer(x, "iota")
  moves = None if inner is None else unit_moves(inner.kw["shape"], new_sizes)
  if moves is None or moves[inner.kw["dimension"]] is None:
    return None
  return r.emit(
    P.iota_p, [], shape=new_sizes, dimension=moves[inner.kw["dimension"]], dtype=inner.kw["dtype"]
  )


def reshape_of_elementwise(r, x, *, new_sizes):
  """reshape(f(a, c...)) = f(reshape(a), reshape(c)...) for an elementwise f read only
  by the reshape whose operands are constants (splats, iotas) but at most one, itself a
  reshape, and a reshape moving only unit dimensions (`x[:, None] - 3` reshaped back):
  the reshapes compose (or cancel) and the constants stay constants, instead of a
  reshape of a computed value ending a fused region."""
  x = r.read(x)
  eqn = r.defs.get(x) if type(x) is Var else None
  if (
    eqn is None
    or eqn.prim not in ELEMENTWISE
    or eqn.prim.multiple_results
    or (r.uses[x] != 1 or not eqn.inputs)
  ):
    return None
  shape = x.aval.shape
  operands = [r.read(a) for a in eqn.inputs]
  if unit_moves(shape, new_sizes) is None or any(a.aval.shape != shape for a in operands):
    return None
  constant = lambda a: r.splat(a) is not None or r.producer(a, "iota") is not None
  values = [a for a in operands if not constant(a)]
  if len(values) > 1 or (values and r.producer(values[0], "reshape") is None):
    return None  # (a value not reshaped itself: the reshape would only move)
  return r.emit(eqn.prim, [reshaped(r, a, new_sizes) for a in operands], **eqn.kw)


def reshaped(r, x, new_sizes):
  """`x` reshaped, simplified by the reshape rules now (not by the next round: a new
  size's program then reaches the known fixpoint in one round, see passes.pipeline)."""
  for rule in _RESHAPES:
    out = rule(r, x, new_sizes=new_sizes)
    if out is not None:
      return out
  return r.emit(P.reshape_p, [x], new_sizes=new_sizes)


def compose_transpose(r, x, *, permutation):
  inner = r.producer(x, "transpose")
  if inner is None:
    return None
  p1 = inner.kw["permutation"]
  perm = tuple(p1[i] for i in permutation)
  if perm == tuple(range(len(perm))):
    return inner.inputs[0]
  return r.emit(P.transpose_p, [inner.inputs[0]], permutation=perm)


def compose_rev(r, x, *, dimensions):
  """rev of a rev reverses the dims reversed an odd number of times."""
  inner = r.producer(x, "rev")
  if inner is None:
    return None
  dims = tuple(sorted(set(dimensions) ^ set(inner.kw["dimensions"])))
  return inner.inputs[0] if not dims else r.emit(P.rev_p, [inner.inputs[0]], dimensions=dims)


def compose_roll(r, x, *, dimension, shift):
  """A roll of a roll along the same dimension: one roll by the sum of the shifts."""
  inner = r.producer(x, "roll")
  if inner is None or inner.kw["dimension"] != dimension:
    return None
  total = (shift + inner.kw["shift"]) % r.read(x).aval.shape[dimension]
  return (
    r.emit(P.roll_p, [inner.inputs[0]], dimension=dimension, shift=total)
    if total
    else inner.inputs[0]
  )


def sum_of_broadcast(r, x, *, axes):
  # sum over axes that a broadcast created = the operand times their count (NaN/inf-safe)
  inner = r.producer(x, "broadcast_in_dim")
  if inner is None or set(axes) & set(inner.kw["broadcast_dimensions"]):
    return None
  shape = inner.kw["shape"]
  operand = inner.inputs[0]
  kept = [d for d in range(len(shape)) if d not in axes]
  dims = tuple(kept.index(d) for d in inner.kw["broadcast_dimensions"])
  out_shape = tuple(shape[d] for d in kept)
  y = (
    operand
    if r.read(operand).aval.shape == out_shape and dims == tuple(range(len(dims)))
    else r.emit(P.broadcast_in_dim_p, [operand], shape=out_shape, broadcast_dimensions=dims)
  )
  count = math.prod([shape[a] for a in axes])
  return r.emit(P.mul_p, [y, splat(r, count, r.read(y).aval, sized=True)])


def dot_of_transpose(r, x, y, *, dimension_numbers):
  """dot_general(transpose(a), b) reads `a` directly with permuted dimension numbers,
  when the permutation keeps the order of the free dims (so the output is unchanged)."""
  (lc, rc), (lb, rb) = dimension_numbers
  for side in (0, 1):
    t = r.producer((x, y)[side], "transpose")
    if t is None:
      continue
    perm = t.kw["permutation"]
    contract, batch = (lc, lb) if side == 0 else (rc, rb)
    free = P._dot_free(len(perm), contract, batch)
    if [perm[d] for d in free] != sorted(perm[d] for d in free):
      continue
    new = (tuple(perm[d] for d in contract), tuple(perm[d] for d in batch))
    dn = ((new[0], rc), (new[1], rb)) if side == 0 else ((lc, new[0]), (lb, new[1]))
    args = [t.inputs[0], y] if side == 0 else [x, t.inputs[0]]
    return r.emit(P.dot_general_p, args, dimension_numbers=dn)
  return None


def dot_of_scalar(r, x, y, *, dimension_numbers):
  """A product with a 0-d operand (nothing to contract) is an elementwise product."""
  ax, ay = r.read(x).aval, r.read(y).aval
  if ax.ndim and ay.ndim:
    return None
  scalar, other = (x, y) if not ax.ndim else (y, x)
  shape = r.read(other).aval.shape
  wide = r.emit(P.broadcast_in_dim_p, [scalar], shape=shape, broadcast_dimensions=())
  return r.emit(P.mul_p, [x, wide] if scalar is y else [wide, y])


def transpose_of_dot(r, x, *, permutation):
  """transpose(dot_general(a, b)) that swaps the lhs-free and rhs-free blocks is
  dot_general(b, a)."""
  d = r.producer(x, "dot_general")
  if d is None:
    return None
  (lc, rc), (lb, rb) = d.kw["dimension_numbers"]
  a, b = d.inputs
  nb = len(lb)
  na = len(P._dot_free(r.read(a).aval.ndim, lc, lb))
  nf = len(permutation) - nb - na
  swapped = tuple(range(nb)) + tuple(range(nb + na, nb + na + nf)) + tuple(range(nb, nb + na))
  if permutation != swapped:
    return None
  return r.emit(P.dot_general_p, [b, a], dimension_numbers=((rc, lc), (rb, lb)))


def int_pow(r, x, y):
  k = r.splat(y)
  if k is None or k not in (0, 1, 2, 3, -1):
    return None
  aval = r.read(x).aval
  if k == 0:  # pow(x, 0) = 1 for every x, NaN included
    return splat(r, 1, aval)
  if k == 1:
    return x
  if k == -1:
    return r.emit(P.div_p, [splat(r, 1, aval), x])
  sq = r.emit(P.mul_p, [x, x])
  return sq if k == 2 else r.emit(P.mul_p, [sq, x])


def fold_splats(r, eqn):
  """An elementwise op of constants is a constant."""
  if eqn.prim not in ELEMENTWISE or not eqn.inputs:
    return None
  values = [r.splat(a) for a in eqn.inputs]
  if any(v is None for v in values):
    return None
  scalars = [np.asarray(v, r.read(a).aval.dtype) for v, a in zip(values, eqn.inputs)]
  with np.errstate(all="ignore"):
    value = np.asarray(impl_rules[eqn.prim](*scalars, **eqn.kw))
  return splat(r, value[()], eqn.outputs[0].aval)


def fold_literals(r, eqn):
  """An equation of literals is a literal (up to FOLD_LIMIT elements); so is a single
  element made from nothing (iota, full), which lets the rules see through unit shapes."""
  if not eqn.inputs and eqn.outputs[0].aval.size != 1:
    return None
  if not all(isinstance(r.read(a), Lit) for a in eqn.inputs):
    return None
  out = eqn.outputs[0].aval
  if (
    out.size > FOLD_LIMIT or max(out.shape, default=0) >= SMALL_INT or (eqn.prim.multiple_results)
  ):  # (a size decides nothing: see core.SMALL_INT)
    return None
  if eqn.outputs[0].aval.size > 1 and all(r.read(a).aval.ndim == 0 for a in eqn.inputs):
    return None  # scalars spread over a shape stay a splat: else small sizes fold, large
    # ones do not, and a new size changes the program
  with np.errstate(all="ignore"):
    value = impl_rules[eqn.prim](*(r.read(a).value for a in eqn.inputs), **eqn.kw)
  return Lit.of(
    np.asarray(value, eqn.outputs[0].aval.dtype), sized=any(r.read(a).sized for a in eqn.inputs)
  )


def _neg_of(r, a):
  e = r.producer(a, "neg")
  return None if e is None else e.inputs[0]


_RESHAPES = (
  lambda r, x, *, new_sizes: x if r.read(x).aval.shape == new_sizes else None,
  compose_reshape,
  reshape_of_constant,
  reshape_of_elementwise,
)

# (primitive, rule): rule(rewriter, *inputs, **params) -> replacement atom or None.
RULES = [
  (P.add_p, lambda r, x, y: x if r.is_splat(y, 0) else None),
  (P.add_p, lambda r, x, y: y if r.is_splat(x, 0) else None),
  (P.add_p, lambda r, x, y: r.emit(P.sub_p, [x, _neg_of(r, y)]) if _neg_of(r, y) else None),
  (P.add_p, lambda r, x, y: r.emit(P.sub_p, [y, _neg_of(r, x)]) if _neg_of(r, x) else None),
  (P.sub_p, lambda r, x, y: x if r.is_splat(y, 0) else None),
  (P.sub_p, lambda r, x, y: r.emit(P.neg_p, [y]) if r.is_splat(x, 0) else None),
  (P.sub_p, lambda r, x, y: r.emit(P.add_p, [x, _neg_of(r, y)]) if _neg_of(r, y) else None),
  (P.mul_p, lambda r, x, y: x if r.is_splat(y, 1) else None),
  (P.mul_p, lambda r, x, y: y if r.is_splat(x, 1) else None),
  (P.mul_p, lambda r, x, y: r.emit(P.neg_p, [x]) if r.is_splat(y, -1) else None),
  (P.mul_p, lambda r, x, y: r.emit(P.neg_p, [y]) if r.is_splat(x, -1) else None),
  (
    P.mul_p,
    lambda r, x, y: (
      r.emit(P.mul_p, [_neg_of(r, x), _neg_of(r, y)]) if _neg_of(r, x) and _neg_of(r, y) else None
    ),
  ),
  (P.div_p, lambda r, x, y: x if r.is_splat(y, 1) else None),
  (P.neg_p, lambda r, x: _neg_of(r, x)),
  (P.pow_p, int_pow),
  (P.convert_p, lambda r, x, *, new_dtype: x if r.read(x).aval.dtype == new_dtype else None),
  (P.select_p, lambda r, p, x, y: x if r.read(x) is r.read(y) else None),
  (P.select_p, lambda r, p, x, y: {True: x, False: y}.get(_bool(r.splat(p)))),
  (
    P.broadcast_in_dim_p,
    lambda r, x, *, shape, broadcast_dimensions: x if r.read(x).aval.shape == shape else None,
  ),
  (P.broadcast_in_dim_p, compose_broadcast),
  (P.broadcast_in_dim_p, broadcast_of_iota),
  *((P.reshape_p, rule) for rule in _RESHAPES),
  (
    P.transpose_p,
    lambda r, x, *, permutation: x if permutation == tuple(range(len(permutation))) else None,
  ),
  (P.transpose_p, compose_transpose),
  (P.transpose_p, transpose_of_dot),
  (P.dot_general_p, dot_of_transpose),
  (P.dot_general_p, dot_of_scalar),
  (
    P.rev_p,
    lambda r, x, *, dimensions: (
      x if all(r.read(x).aval.shape[d] <= 1 for d in dimensions) else None
    ),
  ),
  (P.rev_p, compose_rev),
  (P.roll_p, compose_roll),
  (
    P.slice_p,
    lambda r, x, *, start_indices, limit_indices, strides: (
      x
      if r.read(x).aval.shape == tuple(limit_indices)
      and not any(start_indices)
      and set(strides) <= {1}
      else None
    ),
  ),
  (P.reduce_sum_p, lambda r, x, *, axes: x if not axes else None),
  (P.reduce_prod_p, lambda r, x, *, axes: x if not axes else None),
  (P.reduce_sum_p, sum_of_broadcast),
]

# Allowed only with fast=True: wrong when an operand is NaN or inf.
FAST_RULES = [
  (
    P.mul_p,
    lambda r, x, y: splat(r, 0, r.read(x).aval) if r.is_splat(x, 0) or r.is_splat(y, 0) else None,
  ),
  (P.sub_p, lambda r, x, y: splat(r, 0, r.read(x).aval) if r.read(x) is r.read(y) else None),
]


def empty_arrays(r, eqn, inputs):
  """An equation over arrays with no elements: a result with none is a constant, a pad
  of an empty operand is all padding, and a concatenate drops its empty operands. So no
  kernel reads an empty operand: a pad's or a concatenate's loads are speculated at a
  clamped index, which an empty operand does not have. (A gather or scatter with indices
  stays: they are checked against the axis even where nothing is read or written.)"""
  out = eqn.outputs[0].aval
  if 0 in out.shape:
    checked = eqn.prim in INDEXING and inputs[1].aval.size
    return None if checked else splat(r, 0, out)
  if eqn.prim is P.pad_p and 0 in inputs[0].aval.shape:
    return splat(r, 0, out)
  if eqn.prim is P.concatenate_p:
    kept = [a for a in inputs if 0 not in a.aval.shape]
    if len(kept) < len(inputs):
      return kept[0] if len(kept) == 1 else r.emit(P.concatenate_p, kept, **eqn.kw)
  return None


def _bool(v):
  return None if v is None else bool(v)


def _table(rows):
  table = {}
  for prim, rule in rows:
    table.setdefault(prim, []).append(rule)
  return table


_SAFE = _table(RULES)
_FAST = _table(RULES + FAST_RULES)


def _is_splat_eqn(r, eqn):
  return (
    eqn.prim is P.broadcast_in_dim_p
    and isinstance(r.read(eqn.inputs[0]), Lit)
    and r.read(eqn.inputs[0]).aval.shape == ()
  )


def simplify(program: Program, fast: bool = False) -> Program:
  """Applies the identity table and constant folding once over the program.

  Args:
    program: the program to simplify.
    fast: also apply rewrites that are exact only for finite operands.
  Returns:
    an equivalent program (same inputs and outputs).
  """
  table = _FAST if fast else _SAFE
  r = Rewriter(program)
  for eqn in program.eqns:
    inputs = [r.read(a) for a in eqn.inputs]
    out = None
    if not eqn.prim.multiple_results and not _is_splat_eqn(r, eqn):
      out = empty_arrays(r, eqn, inputs) or fold_literals(r, eqn)
      if out is None and eqn.prim in ELEMENTWISE:
        out = fold_splats(r, eqn)
      for rule in table.get(eqn.prim, ()):
        if out is not None:
          break
        out = rule(r, *inputs, **eqn.kw)
    if out is None:
      r.keep(eqn)
    else:
      r.replace(eqn.outputs[0], out)
  return r.finish()
