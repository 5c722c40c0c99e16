"""Pytree utilities, as JAX's `jax.tree_util` spells them: every transform (`grad`,
`value_and_grad`, `jacrev`, `jacfwd`, `jvp`, `vjp`, `vmap`, `jit`) takes and returns
pytrees: tuples, lists, dicts, None, namedtuples, dataclasses and registered classes."""

from __future__ import annotations

from primc.api import ravel_pytree
from primc.tree import TreeDef, register_pytree_node, tree_flatten, tree_map, tree_unflatten


def tree_leaves(tree) -> list:
  return tree_flatten(tree)[0]


def tree_structure(tree) -> TreeDef:
  return tree_flatten(tree)[1]


def register_dataclass(cls: type) -> type:
  """A no-op decorator kept for JAX's spelling: dataclass instances are pytrees without
  registration (their `init` fields the children; fields holding strings are auxiliary
  data, part of the tree definition)."""
  return cls


def flatten_func(func, example):
  """autograd's `flatten_func`: `func` of a pytree like `example` as a function of one
  flat vector. Returns (the flat function, `unflatten`, `example` raveled); the flat
  function's value is its result raveled."""
  flat_example, unflatten = ravel_pytree(example)
  flat = lambda v, *args: ravel_pytree(func(unflatten(v), *args))[0]
  return flat, unflatten, flat_example


__all__ = [
  "TreeDef",
  "flatten_func",
  "ravel_pytree",
  "register_pytree_node",
  "register_dataclass",
  "tree_flatten",
  "tree_leaves",
  "tree_map",
  "tree_structure",
  "tree_unflatten",
]
