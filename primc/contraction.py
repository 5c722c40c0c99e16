"""einsum, tensordot, inner and kron as primitives: each operand's repeated indices taken
as diagonals, indices no one else needs summed at once, then pairwise `dot_general`s in
the order opt_einsum chooses (its greedy/optimal path search over the shapes), and one
transpose into the requested output order. Derivatives, batching and kernels are those
of the primitives (a product becomes a dot region: BLAS where it is large)."""

from __future__ import annotations

from primc import prims as P
from primc.core import ShapeError
from primc.trace import aval_of

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # (string.ascii_letters)


def parse(subscripts: str, shapes) -> tuple[list[str], str]:
  """Input index strings (ellipses expanded to letters) and the output index string
  (numpy's implicit output: the indices used once, in alphabetical order)."""
  spec = subscripts.replace(" ", "")
  inputs, arrow, output = spec.partition("->")
  terms = inputs.split(",")
  if len(terms) != len(shapes):
    raise ShapeError(
      f"einsum {subscripts!r}: {len(terms)} operand subscripts for {len(shapes)} operands"
    )
  used = set(spec) - set(".,->")
  free = [c for c in _LETTERS if c not in used]
  ranks = [len(s) - (len(t) - 3 if "..." in t else len(t)) for t, s in zip(terms, shapes)]
  ell = max([r for t, r in zip(terms, ranks) if "..." in t], default=0)
  ell_letters = "".join(free[:ell])
  expanded = []
  for t, s, r in zip(terms, shapes, ranks):
    if "..." in t:
      t = t.replace("...", ell_letters[ell - r :] if r else "")
    if len(t) != len(s) or any(c not in _LETTERS for c in t):
      raise ShapeError(
        f"einsum {subscripts!r}: subscripts {t!r} do not fit an operand of shape {tuple(s)}"
      )
    expanded.append(t)
  if arrow:
    output = output.replace("...", ell_letters)
  else:
    counts = {c: sum(t.count(c) for t in expanded) for c in set("".join(expanded))}
    output = ell_letters + "".join(
      sorted(c for c, n in counts.items() if n == 1 and c not in ell_letters)
    )
  if len(set(output)) != len(output) or any(c not in "".join(expanded) for c in output):
    raise ShapeError(
      f"einsum {subscripts!r}: output subscripts {output!r} repeat an index "
      f"or name one no operand has"
    )
  return expanded, output


def _sizes(terms, operands, subscripts):
  sizes: dict[str, int] = {}
  for t, x in zip(terms, operands):
    for c, n in zip(t, aval_of(x).shape):
      if sizes.get(c, n) != n and 1 not in (n, sizes[c]):
        raise ShapeError(f"einsum {subscripts!r}: index {c!r} has sizes {sizes[c]} and {n}")
      sizes[c] = n if n != 1 or c not in sizes else sizes[c]  # 1 broadcasts; 0 does not
  return sizes


def _diagonals(x, term):
  """Repeated indices of one operand become one (its diagonal along them)."""
  while len(set(term)) != len(term):
    c = next(c for c in term if term.count(c) > 1)
    a1 = term.index(c)
    a2 = term.index(c, a1 + 1)
    shape = aval_of(x).shape
    same = P.eq(P.iota(shape, a1), P.iota(shape, a2))
    x = P.reduce_sum(P.select(same, x, P.full(shape, 0, aval_of(x).dtype)), (a2,))
    term = term[:a2] + term[a2 + 1 :]
  return x, term


def _sum_out(x, term, keep):
  axes = tuple(i for i, c in enumerate(term) if c not in keep)
  if not axes:
    return x, term
  return P.reduce_sum(x, axes), "".join(c for c in term if c in keep)


def _broadcast_to(x, term, sizes):
  """Size-1 axes of an index that has another size elsewhere (numpy's broadcasting)."""
  shape = aval_of(x).shape
  want = tuple(sizes[c] for c in term)
  if shape == want:
    return x
  squeezed = P.reshape(x, [n for n, w in zip(shape, want) if n == w])
  return P.broadcast_in_dim(
    squeezed, want, tuple(i for i, (n, w) in enumerate(zip(shape, want)) if n == w)
  )


def _contract(a, ta, b, tb, keep):
  """a[ta] * b[tb] summed over the indices in both that `keep` does not need."""
  batch = [c for c in ta if c in tb and c in keep]
  summed = [c for c in ta if c in tb and c not in keep]
  dims = (
    ([ta.index(c) for c in summed], [tb.index(c) for c in summed]),
    ([ta.index(c) for c in batch], [tb.index(c) for c in batch]),
  )
  out = P.dot_general(a, b, dims)
  shared = set(batch) | set(summed)
  return out, "".join(batch) + "".join(c for c in ta if c not in shared) + "".join(
    c for c in tb if c not in shared
  )


def einsum(subscripts: str, *operands, optimize="greedy"):
  """numpy.einsum (explicit or implicit output, ellipses, repeated indices, broadcasting
  of size-1 axes). `optimize` is opt_einsum's path strategy ("greedy", "optimal", ...)."""
  import opt_einsum

  shapes = [aval_of(x).shape for x in operands]
  terms, output = parse(subscripts, shapes)
  sizes = _sizes(terms, operands, subscripts)
  ops = [_broadcast_to(x, t, sizes) for x, t in zip(operands, terms)]
  pairs = [_diagonals(x, t) for x, t in zip(ops, terms)]
  if len(pairs) > 2:
    spec = ",".join(t for _, t in pairs) + "->" + output
    path, _ = opt_einsum.contract_path(
      spec, *[aval_of(x).shape for x, _ in pairs], shapes=True, optimize=optimize or "greedy"
    )
  else:
    path = [tuple(range(len(pairs)))]
  for step in path:
    taken = [pairs[i] for i in step]
    pairs = [p for i, p in enumerate(pairs) if i not in step]
    keep = set(output) | {c for _, t in pairs for c in t}
    if len(taken) == 1:
      pairs.append(_sum_out(*taken[0], keep))
      continue
    (a, ta), (b, tb) = taken[0], taken[1]
    a, ta = _sum_out(a, ta, keep | set(tb))
    b, tb = _sum_out(b, tb, keep | set(ta))
    x, t = _contract(a, ta, b, tb, keep)
    for c_op, c_t in taken[2:]:  # a step over more than two: one at a time
      c_op, c_t = _sum_out(c_op, c_t, keep | set(t))
      x, t = _contract(x, t, c_op, c_t, keep)
    pairs.append((x, t))
  ((x, t),) = pairs
  x, t = _sum_out(x, t, set(output))
  return x if t == output else P.transpose(x, [t.index(c) for c in output])


def tensordot(a, b, axes=2):
  """numpy.tensordot: `axes` an int (the last n of a with the first n of b) or a pair of
  axis sequences."""
  na, nb = aval_of(a).ndim, aval_of(b).ndim
  if isinstance(axes, int):
    la, lb = list(range(na - axes, na)), list(range(axes))
  else:
    la, lb = (
      [axes[0]] if isinstance(axes[0], int) else list(axes[0]),
      [axes[1]] if isinstance(axes[1], int) else list(axes[1]),
    )
  la, lb = [i % na for i in la], [i % nb for i in lb]
  for i, j in zip(la, lb, strict=True):
    if aval_of(a).shape[i] != aval_of(b).shape[j]:
      raise ShapeError(
        f"tensordot: axis {i} of {aval_of(a).shape} and axis {j} of {aval_of(b).shape} differ"
      )
  return P.dot_general(a, b, ((la, lb), ((), ())))


def kron(a, b):
  """numpy.kron: block (i, j) of the result is a[i, j] * b."""
  sa, sb = aval_of(a).shape, aval_of(b).shape
  nd = max(len(sa), len(sb))
  sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
  wide = tuple(n for pair in zip(sa, sb) for n in pair)
  a2 = P.broadcast_in_dim(P.reshape(a, sa), wide, tuple(range(0, 2 * nd, 2)))
  b2 = P.broadcast_in_dim(P.reshape(b, sb), wide, tuple(range(1, 2 * nd, 2)))
  product = P.select(a2, b2, a2) if aval_of(a).dtype == "bool" else P.mul(a2, b2)  # (numpy's
  return P.reshape(product, [x * y for x, y in zip(sa, sb)])  # of bools: and)
