"""A function's transform kept by the shape of its trace: for functions `primc.kept` cannot
key by what they read.

`primc.kept` keys a transform's program by what the function reads (its code, closure,
globals). A function that reads something the walk cannot compare (a `RandomState` in
its closure, an object's state) or that draws random numbers while traced cannot be kept
that way: every call traced the function, differentiated and optimized it again
(autograd's black-box variational inference: 22 ms a call, autograd's 2 ms).

Such a function is traced alone at every call instead (`forward`: what it computes this
time, the numbers it drew baked in as literals), its literal arrays become inputs
(`lifted`), and the transform is kept per *structure*: two calls whose traces differ
only in their literal arrays' values share one kept program, the transform of
replaying that structure (`replaying`), run on this call's arguments and literals.

Replaying a function's trace in its place gives the same transform only where the
transform calls the function on arguments of the arguments' own shapes (`grad`,
`value_and_grad`, `jacfwd`, `jacrev`, `elementwise_grad`: `replayable`), not `vmap`
(one example at a time).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from primc.core import Eqn, Lit, Program, Var
from primc.trace import as_array, aval_of, eval_program, trace_flat
from primc.tree import tree_flatten, tree_unflatten


def _unflatten(tree, values):
  return (tuple(values), {}) if type(tree) is int else tree_unflatten(tree, values)


def called(fun: Callable, leaves: list, tree, traced: list[int]) -> Callable:
  """`fun` as a function of its traced leaves (the others are the call's values)."""

  def flat(*xs):
    values = list(leaves)
    for k, x in zip(traced, xs):
      values[k] = x
    args, kwargs = _unflatten(tree, values)
    return fun(*args, **kwargs)

  return flat


def forward(
  fun: Callable, leaves: list, tree, traced: list[int], arrays: list, weak: tuple
) -> tuple[Program, Any]:
  """`fun` traced alone on the call's traced leaves (`arrays`): (program, out_tree).
  Raises what tracing raises (values read by Python: a ConcretizationError)."""
  program, captured, out_tree = trace_flat(
    called(fun, leaves, tree, traced), [aval_of(x) for x in arrays], weak
  )
  assert not captured
  return program, out_tree


def lifted(program: Program) -> tuple[Program, list[np.ndarray]]:
  """`program` with its literal arrays (more than one element, not computed from sizes)
  as inputs after its own, and their values, in order. Literals inside the programs of
  control flow's parameters stay (they are part of the structure)."""
  inputs: dict[int, Var] = {}
  values: list[np.ndarray] = []

  def atom(a):
    if type(a) is not Lit or a.value.size <= 1 or a.sized:
      return a
    v = inputs.get(id(a))
    if v is None:
      v = inputs[id(a)] = Var(a.aval)
      values.append(a.value)
    return v

  eqns = []
  for e in program.eqns:
    ins = tuple([atom(a) for a in e.inputs])
    eqns.append(
      e
      if all(x is y for x, y in zip(ins, e.inputs))
      else Eqn(e.prim, ins, e.params, e.outputs, e.source)
    )
  outputs = tuple([atom(a) for a in program.outputs])
  if not values:
    return program, []
  return Program(program.inputs + tuple(inputs.values()), tuple(eqns), outputs), values


def replaying(
  transform: Callable, structure: Program, out_tree, leaves: list, tree, traced: list[int]
) -> Callable:
  """`transform(f)(*args, **kwargs)` as a function of the traced leaves, then the lifted
  literals, where `f` replays `structure` (the function's trace, literals lifted) on
  the leaves it is called with: the transform of the function, by the trace it made."""
  n = len(traced)

  def flat(*xs):
    consts = list(xs[n:])

    def replay(*args, **kwargs):
      ins, _ = tree_flatten((args, kwargs)) if type(tree) is not int else (list(args), None)
      return tree_unflatten(out_tree, eval_program(structure, *[ins[k] for k in traced], *consts))

    replay.primc_replays = (structure, out_tree, consts, traced, len(leaves))  # (`adopted`)
    return called(transform(replay), leaves, tree, traced)(*xs[:n])

  return flat


def adopted(fn: Callable, args: Sequence) -> tuple[Program, list, Any] | None:
  """(program, captured, out_tree) of tracing `fn` on `args` (positional), where `fn`
  replays a trace (`replaying`) of inputs of exactly their leaves' types: that trace
  itself, its literal arrays the captured inputs, without tracing it again (a long
  function's calls on values: the HMM's 10,400 equations staged again cost ~14 ms a
  call). `fn` may hold some arguments bound as Python values (`primc_bound`: (the
  replay, {position: value}), as `grad` binds a number it does not differentiate): in
  `args` those are empty, and their leaves come first among the captured inputs. None
  otherwise."""
  fixed = {}
  bound = getattr(fn, "primc_bound", None)
  if bound is not None:
    fn, fixed = bound
  spec = getattr(fn, "primc_replays", None)
  if spec is None:
    return None
  structure, out_tree, consts, traced, n = spec
  leaves = []  # (position among all leaves, value, whether bound)
  for i, a in enumerate(args):
    leaves += [(len(leaves), as_array(x), i in fixed) for x in tree_flatten(fixed.get(i, a))[0]]
  if len(leaves) != n:
    return None
  var = dict(zip(traced, structure.inputs))  # (a leaf not traced is a value of the key:
  # the replay reads it as it was, as `replaying`'s `replay` does)
  if any(k in var and aval_of(x) != var[k].aval for k, x, _ in leaves):
    return None
  if not fixed and len(traced) == n:
    return structure, consts, out_tree
  free = [var[k] if k in var else Var(aval_of(x)) for k, x, held in leaves if not held]
  held = [(var[k], x) for k, x, h in leaves if h and k in var]
  inputs = (*free, *[v for v, _ in held], *structure.inputs[len(traced) :])
  program = Program(inputs, structure.eqns, structure.outputs)
  return program, [x for _, x in held] + list(consts), out_tree
