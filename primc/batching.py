"""Batching: `batch_program` adds a leading batch dimension to chosen program inputs.

Each primitive has a rule in `batch_rules`: `(args, dims, **params) -> (out, out_dim)`,
where each dim is 0 (batched along its leading axis) or None (unbatched). Values are kept
batched at axis 0, so every rule only handles the leading-axis case. An equation none of
whose inputs is batched is re-bound unchanged.
"""

from __future__ import annotations

from typing import Callable, Sequence

from primc import prims as P
from primc.core import Primitive, Program, ShapedArray, results, run
from primc.trace import aval_of, literal, trace_flat

batch_rules: dict[Primitive, Callable] = {}


def moveaxis(x, src: int, dst: int):
  nd = aval_of(x).ndim
  perm = [d for d in range(nd) if d != src]
  perm.insert(dst, src)
  return x if perm == list(range(nd)) else P.transpose(x, perm)


def materialize(x, d, size: int):
  """x with a leading batch axis (broadcast if it had none)."""
  if d is not None:
    return x
  shape = aval_of(x).shape
  return P.broadcast_in_dim(x, (size,) + shape, range(1, len(shape) + 1))


def _size(args, dims) -> int:
  return next(aval_of(x).shape[0] for x, d in zip(args, dims) if d is not None)


def materialize_all(args, dims) -> tuple[list, int]:
  """Every argument with a leading batch axis (the rules of equations holding programs,
  which batch those programs with every input batched), and the batch size."""
  size = _size(args, dims)
  return [materialize(x, d, size) for x, d in zip(args, dims)], size


def elementwise(prim):
  def rule(args, dims, **params):
    n = _size(args, dims)
    return prim.bind(*(materialize(x, d, n) for x, d in zip(args, dims)), **params), 0

  batch_rules[prim] = rule


for _p in P.with_trait("elementwise"):
  elementwise(_p)

batch_rules[P.broadcast_in_dim_p] = lambda args, dims, *, shape, broadcast_dimensions: (
  P.broadcast_in_dim(
    args[0], (aval_of(args[0]).shape[0],) + shape, (0,) + tuple(d + 1 for d in broadcast_dimensions)
  ),
  0,
)
batch_rules[P.reshape_p] = lambda args, dims, *, new_sizes: (
  P.reshape(args[0], (aval_of(args[0]).shape[0],) + new_sizes),
  0,
)
batch_rules[P.transpose_p] = lambda args, dims, *, permutation: (
  P.transpose(args[0], (0,) + tuple(p + 1 for p in permutation)),
  0,
)
batch_rules[P.slice_p] = lambda args, dims, *, start_indices, limit_indices, strides: (
  P.slice_(
    args[0], (0,) + start_indices, (aval_of(args[0]).shape[0],) + limit_indices, (1,) + strides
  ),
  0,
)
batch_rules[P.rev_p] = lambda args, dims, *, dimensions: (
  P.rev(args[0], tuple(d + 1 for d in dimensions)),
  0,
)
batch_rules[P.roll_p] = lambda args, dims, *, dimension, shift: (
  P.roll(args[0], shift, dimension + 1),
  0,
)
batch_rules[P.windows_p] = lambda args, dims, **params: (  # (over trailing dims)
  P.windows_p.bind(args[0], **params),
  0,
)
batch_rules[P.pad_p] = lambda args, dims, *, padding_config: (
  P.pad(args[0], ((0, 0, 0),) + padding_config),
  0,
)
batch_rules[P.reduce_sum_p] = lambda args, dims, *, axes: (
  P.reduce_sum(args[0], tuple(a + 1 for a in axes)),
  0,
)
batch_rules[P.reduce_max_p] = lambda args, dims, *, axes: (
  P.reduce_max(args[0], tuple(a + 1 for a in axes)),
  0,
)
batch_rules[P.reduce_prod_p] = lambda args, dims, *, axes: (
  P.reduce_prod(args[0], tuple(a + 1 for a in axes)),
  0,
)


# No operands, so never batched: the rule just re-binds (the registry asks every primitive).
batch_rules[P.full_p] = lambda args, dims, **params: (P.full_p.bind(**params), None)
batch_rules[P.iota_p] = lambda args, dims, **params: (P.iota_p.bind(**params), None)


def _concatenate_rule(args, dims, *, dimension):
  n = _size(args, dims)
  return P.concatenate([materialize(x, d, n) for x, d in zip(args, dims)], dimension + 1), 0


batch_rules[P.concatenate_p] = _concatenate_rule


def _gather_rule(args, dims, *, axis, batch_dims):
  (x, idx), (dx, di) = args, dims
  if di is None and batch_dims == 0:  # the same indices for every item
    return P.gather(x, idx, axis + 1), 0
  if dx is None and batch_dims == 0:  # every item's indices into the same x
    return moveaxis(P.gather(x, idx, axis), axis, 0), 0
  n = _size(args, dims)  # the batch becomes one more batch dim of the gather
  return P.gather(materialize(x, dx, n), materialize(idx, di, n), axis + 1, batch_dims + 1), 0


def _scatter_add_rule(args, dims, *, axis, batch_dims):
  (x, idx, upd), (dx, di, du) = args, dims
  n = _size(args, dims)
  x, upd = materialize(x, dx, n), materialize(upd, du, n)
  if di is None and batch_dims == 0:
    return P.scatter_add(x, idx, upd, axis + 1), 0
  return P.scatter_add(x, materialize(idx, di, n), upd, axis + 1, batch_dims + 1), 0


elementwise(P.argsort_p)  # the batch is a leading axis; the sorted axis stays last
elementwise(P.cumsum_p)  # (as argsort: the accumulated axis stays last)
elementwise(P.cumprod_p)
batch_rules[P.gather_p] = _gather_rule
batch_rules[P.scatter_add_p] = _scatter_add_rule


def _dot_general_rule(args, dims, *, dimension_numbers):
  (x, y), (dx, dy) = args, dims
  (lc, rc), (lb, rb) = dimension_numbers
  up = lambda ds: tuple(d + 1 for d in ds)
  if dx is not None and dy is not None:
    return P.dot_general(x, y, ((up(lc), up(rc)), ((0,) + up(lb), (0,) + up(rb)))), 0
  if dx is not None:
    out = P.dot_general(x, y, ((up(lc), rc), (up(lb), rb)))
    return moveaxis(out, len(lb), 0), 0
  out = P.dot_general(x, y, ((lc, up(rc)), (lb, up(rb))))
  n_xfree = len(P._dot_free(aval_of(x).ndim, lc, lb))
  return moveaxis(out, len(lb) + n_xfree, 0), 0


batch_rules[P.dot_general_p] = _dot_general_rule


def _conv_rule(args, dims, *, window_strides, rhs_dilation, feature_group_count):
  """The batch folded into the examples (input batched), the output channels (kernel
  batched: each group's channels of every example kept together), or both as more groups."""
  (x, w), (dx, dw) = args, dims
  g = feature_group_count
  conv = lambda a, b, groups: P.conv(a, b, window_strides, rhs_dilation, groups)
  if dw is None:
    b, n, *rest = aval_of(x).shape
    out = conv(P.reshape(x, (b * n, *rest)), w, g)
    return P.reshape(out, (b, n, *aval_of(out).shape[1:])), 0
  b, o, *kernel = aval_of(w).shape
  nd = len(kernel) - 1
  spatial = tuple(range(4, 4 + nd))
  if dx is None:
    wt = P.transpose(P.reshape(w, (b, g, o // g, *kernel)), (1, 0, 2, 3) + spatial)
    out = conv(x, P.reshape(wt, (g * b * o // g, *kernel)), g)
    n, _, *sp = aval_of(out).shape
    out = P.transpose(P.reshape(out, (n, g, b, o // g, *sp)), (2, 0, 1, 3) + spatial)
    return P.reshape(out, (b, n, o, *sp)), 0
  _, n, c, *size = aval_of(x).shape
  xt = P.reshape(P.transpose(x, (1, 0, 2) + tuple(range(3, 3 + nd))), (n, b * c, *size))
  out = conv(xt, P.reshape(w, (b * o, *kernel)), b * g)
  _, _, *sp = aval_of(out).shape
  out = P.transpose(P.reshape(out, (n, b, o, *sp)), (1, 0, 2) + tuple(range(3, 3 + nd)))
  return out, 0


batch_rules[P.conv_p] = _conv_rule


def batch_program(program: Program, batched: Sequence[bool], size: int) -> Program:
  """Vectorizes `program` over a leading axis of size `size` of the `batched` inputs.

  Returns:
    A program taking the batched inputs with a leading axis and returning every output
    with a leading axis of size `size`.
  """
  batched = tuple(batched)

  def apply(eqn, pairs):
    xs, ds = zip(*pairs) if pairs else ((), ())
    if all(d is None for d in ds):  # nothing batched: the equation as it is
      return [(x, None) for x in results(eqn, eqn.prim.bind(*xs, **eqn.kw))]
    return results(eqn, batch_rules[eqn.prim](xs, ds, **eqn.kw))

  def fn(*args):
    pairs = [(x, 0 if b else None) for x, b in zip(args, batched, strict=True)]
    outs = run(program, pairs, apply, lit=lambda a: (literal(a), None))
    return [materialize(x, d, size) for x, d in outs]

  avals = [
    ((size,) + v.aval.shape if b else v.aval.shape, v.aval.dtype)
    for v, b in zip(program.inputs, batched)
  ]
  return trace_flat(fn, [ShapedArray(*a) for a in avals])[0]


# linear algebra (leading axes are a batch already): the elementwise rule's shape
for _p in P.with_trait("linalg"):
  elementwise(_p)
