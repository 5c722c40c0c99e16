"""Pytree utilities, as JAX's `jax.tree_util` spells them: every transform (`grad`,
`value_and_grad`, `jacrev`, `jacfwd`, `jvp`, `vjp`, `vmap`, `jit`) takes and returns
pytrees: tuples, lists, dicts, None, namedtuples, dataclasses and registered classes."""
from __future__ import annotations

import math

from primc import numpy as pnp
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


def ravel_pytree(tree):
  """A pytree's leaves as one flat array (numpy's promotion of their dtypes), and the
  function that makes such a flat array a pytree of that structure again: JAX's
  `jax.flatten_util.ravel_pytree`, autograd's `misc.flatten`. Traced or not, and
  differentiable both ways."""
  leaves, treedef = tree_flatten(tree)
  shapes = [tuple(pnp.shape(x)) for x in leaves]
  sizes = [math.prod(shape) for shape in shapes]
  flat = pnp.concatenate([pnp.ravel(x) for x in leaves]) if leaves else pnp.zeros(0)

  def unravel(flat):
    parts, start = [], 0
    for shape, size in zip(shapes, sizes):
      parts.append(pnp.reshape(flat[start:start + size], shape))
      start += size
    return tree_unflatten(treedef, parts)
  return flat, unravel


__all__ = ["TreeDef", "ravel_pytree", "register_pytree_node", "register_dataclass",
           "tree_flatten", "tree_leaves", "tree_map", "tree_structure", "tree_unflatten"]
