"""Pytrees: nested containers of array leaves: tuples, lists, dicts, None, namedtuples,
dataclasses, and classes registered with `register_pytree_node`.

flatten/unflatten with a hashable tree definition that enters compile-cache keys (so a
registered class's auxiliary data must be hashable). `primc.tree_util` is the public face.
"""

from __future__ import annotations

import sys
from typing import Any, Callable


class TreeDef:
  """A pytree's structure: `kind` ("leaf", "none", "tuple", "list", "dict" or "node"),
  `meta` (a dict's sorted keys; a node's (class, aux data); else None) and `children`.
  Immutable, compared and hashed by value: it enters cache keys. (A plain class: a
  dataclass costs ~0.4 ms of `import primc`.)"""

  __slots__ = ("kind", "meta", "children", "_hash")

  def __init__(self, kind: str, meta: Any, children: tuple["TreeDef", ...]):
    object.__setattr__(self, "kind", kind)
    object.__setattr__(self, "meta", meta)
    object.__setattr__(self, "children", children)
    object.__setattr__(self, "_hash", None)

  def __setattr__(self, name, value):
    raise AttributeError(f"cannot assign to field {name!r} of a frozen TreeDef")

  def __delattr__(self, name):
    raise AttributeError(f"cannot delete field {name!r} of a frozen TreeDef")

  def __eq__(self, other):
    if type(other) is not TreeDef:
      return NotImplemented
    return self is other or (
      self.kind == other.kind and self.meta == other.meta and self.children == other.children
    )

  def __hash__(self):
    h = self._hash
    if h is None:
      h = hash((self.kind, self.meta, self.children))
      object.__setattr__(self, "_hash", h)
    return h

  def __repr__(self):
    return f"TreeDef(kind={self.kind!r}, meta={self.meta!r}, children={self.children!r})"

  def __reduce__(self):
    return TreeDef, (self.kind, self.meta, self.children)

  @property
  def num_leaves(self) -> int:
    if self.kind == "leaf":
      return 1
    return sum(c.num_leaves for c in self.children)


LEAF = TreeDef("leaf", None, ())


def tree_flatten(tree) -> tuple[list, TreeDef]:
  leaves: list = []
  return leaves, _flatten(tree, leaves)


# class -> (flatten: obj -> (children, aux), unflatten: (aux, children) -> obj)
_NODES: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
  """Makes instances of `cls` pytrees: `flatten(obj)` returns `(children, aux)` (children
  a sequence of pytrees, aux hashable data kept in the tree definition) and
  `unflatten(aux, children)` rebuilds the object."""
  if cls in _NODES:
    raise ValueError(f"{cls.__name__} is already registered as a pytree node")
  _NODES[cls] = (flatten, unflatten)


def _node_of(tree):
  """(flatten, unflatten) for a registered class, a namedtuple or a dataclass instance."""
  cls = type(tree)
  if cls in _NODES:
    return _NODES[cls]
  if isinstance(tree, tuple) and hasattr(tree, "_fields"):
    return (lambda t: (tuple(t), None)), (lambda aux, c: cls(*c))
  if hasattr(cls, "__dataclass_fields__"):
    return _dataclass_flatten, _dataclass_unflatten(cls)
  return None


def _dataclass_flatten(obj):
  """A dataclass's `init` fields: strings (names, modes) are auxiliary data, the rest
  children; aux = (data field names, (meta name, value) pairs)."""
  data, meta = [], []
  for f in sys.modules["dataclasses"].fields(obj):  # (loaded: obj is a dataclass's)
    if f.init:
      value = getattr(obj, f.name)
      (meta if isinstance(value, (str, bytes)) else data).append((f.name, value))
  return tuple(v for _, v in data), (tuple(n for n, _ in data), tuple(meta))


def _dataclass_unflatten(cls):
  return lambda aux, children: cls(**dict(zip(aux[0], children)), **dict(aux[1]))


def _flatten(tree, leaves) -> TreeDef:
  if tree is None:
    return TreeDef("none", None, ())
  node = _node_of(tree)
  if node is not None:
    children, aux = node[0](tree)
    return TreeDef("node", (type(tree), aux), tuple(_flatten(c, leaves) for c in children))
  if isinstance(tree, (tuple, list)):
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
  """ "leaf", "tuple" or "list" when the tree is one leaf or a flat tuple or list of
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
  if td.kind == "node":
    cls, aux = td.meta
    return _node_of_class(cls)(aux, children)
  return dict(zip(td.meta, children, strict=True))


def _node_of_class(cls: type) -> Callable:
  if cls in _NODES:
    return _NODES[cls][1]
  if issubclass(cls, tuple):  # a namedtuple
    return lambda aux, c: cls(*c)
  return _dataclass_unflatten(cls)


def tree_map(fn: Callable, tree, *rest):
  """`fn` applied to the leaves of `tree` (and the matching leaves of `rest`, of the same
  structure), in a tree of that structure."""
  leaves, td = tree_flatten(tree)
  others = [tree_flatten(r) for r in rest]
  for leaves_r, td_r in others:
    if td_r != td:
      raise ValueError(f"tree_map: trees of different structures: {td} and {td_r}")
  return tree_unflatten(td, [fn(*xs) for xs in zip(leaves, *(ls for ls, _ in others))])


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
  replay.parts = (
    fn,
    tree,
    tuple(positions),
    tuple(x for i, x in enumerate(leaves) if i not in picked),
  )
  return replay, [leaves[i] for i in positions]
