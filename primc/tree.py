"""Pytrees: nested tuples, lists and dicts (and None) of array leaves.

A small local implementation: primc only needs flatten/unflatten over the standard
containers, with a hashable tree definition that enters compile-cache keys.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class TreeDef:
  kind: str                 # "leaf" | "none" | "tuple" | "list" | "dict"
  meta: Any                 # dict keys (sorted) or None
  children: tuple["TreeDef", ...]

  @property
  def num_leaves(self) -> int:
    if self.kind == "leaf":
      return 1
    return sum(c.num_leaves for c in self.children)


LEAF = TreeDef("leaf", None, ())


def tree_flatten(tree) -> tuple[list, TreeDef]:
  leaves: list = []
  return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves) -> TreeDef:
  if tree is None:
    return TreeDef("none", None, ())
  if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
    kind = "tuple" if isinstance(tree, tuple) else "list"
    return TreeDef(kind, None, tuple(_flatten(c, leaves) for c in tree))
  if isinstance(tree, dict):
    keys = tuple(sorted(tree))
    return TreeDef("dict", keys, tuple(_flatten(tree[k], leaves) for k in keys))
  leaves.append(tree)
  return LEAF


def tree_unflatten(treedef: TreeDef, leaves) -> Any:
  it = iter(leaves)
  out = _unflatten(treedef, it)
  assert next(it, it) is it, "too many leaves"
  return out


def flat_form(treedef: TreeDef) -> str | None:
  """"leaf", "tuple" or "list" when the tree is one leaf or a flat tuple or list of
  leaves, else None."""
  if treedef.kind == "leaf":
    return "leaf"
  if treedef.kind in ("tuple", "list") and all(c.kind == "leaf" for c in treedef.children):
    return treedef.kind
  return None


def unflattener(treedef: TreeDef):
  """`tree_unflatten(treedef, .)` as a function, specialized for the flat forms (see
  `flat_form`): the compiled-call fast path uses it."""
  form = flat_form(treedef)
  if form == "leaf":
    return lambda leaves: leaves[0]
  if form is not None:
    return tuple if form == "tuple" else list
  return lambda leaves: tree_unflatten(treedef, leaves)


def _unflatten(td: TreeDef, it):
  if td.kind == "leaf":
    return next(it)
  if td.kind == "none":
    return None
  children = [_unflatten(c, it) for c in td.children]
  if td.kind == "tuple":
    return tuple(children)
  if td.kind == "list":
    return children
  return dict(zip(td.meta, children, strict=True))



def partial_over_leaves(fn, args, kwargs, select):
  """Splits a call `fn(*args, **kwargs)` into the leaves `select` picks and a function of
  them: returns `(replay, picked)` with `replay(*values)` calling `fn` with the picked
  leaves replaced by `values` (the tapes record ops this way)."""
  leaves, tree = tree_flatten((list(args), kwargs))
  positions = [i for i, x in enumerate(leaves) if select(x)]

  def replay(*values):
    new = list(leaves)
    for i, v in zip(positions, values, strict=True):
      new[i] = v
    a, k = tree_unflatten(tree, new)
    return fn(*a, **k)

  # what the replay does besides its picked values (the eager tape keys its programs by it)
  picked = set(positions)
  replay.parts = (fn, tree, tuple(positions),
                  tuple(x for i, x in enumerate(leaves) if i not in picked))
  return replay, [leaves[i] for i in positions]
