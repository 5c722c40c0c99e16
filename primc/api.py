"""The functional API: grad, value_and_grad, jvp, vjp, linearize, jacfwd, jacrev, hessian,
hvp, vmap, check_grads.

Each call traces the user's function into a `Program`, transforms the program
(`primc.ad`, `primc.batching`) and runs the result by binding its equations: eagerly on
numpy arrays, or staged into an enclosing trace, so every transform composes with every
other and `make_program` prints the derivative program at any order.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from primc import ad, batching, kept, passes, replayed, tape
from primc import numpy as pnp
from primc.settings import config
from primc import prims as P
from primc.core import ConcretizationError, PrimcError, PrimcTypeError, Program, ShapedArray
from primc.trace import (
  Tracer,
  as_array,
  aval_of,
  eval_program,
  trace_flat,
  trace_path,
  tracing,
  user_source,
  weak_leaves,
)
from primc.tree import tree_flatten, tree_unflatten

ArgNums = int | Sequence[int]  # the arguments a transform differentiates (positions)

stop_gradient = pnp.stop_gradient


def optimize(program: Program) -> Program:
  """One round of the pass pipeline on a program a transform made or takes (or the
  program itself when transforms are configured raw: `primc.config`). One round keeps
  nested derivatives from growing as the fixpoint does (measured: the same equation counts
  at every order tried, W3's gradient among them) at ~60% of the time of tracing them; the
  compiled program is optimized to the fixpoint (`compile.build_plan`)."""
  return passes.optimize(program, rounds=1) if config.optimize_transforms else program


def _to_evaluate(program: Program) -> Program:
  """A transform's program about to be evaluated into its caller: optimized (one round)
  when it runs now; inside a trace (jit, an enclosing transform) as it is, its equations
  optimized with the enclosing program's (measured: the same optimized equation counts
  for W1-W7 and nested grads, hessians and vmaps; W3's trace and passes 60 -> 56 ms,
  W7's 21 -> 16 ms)."""
  return optimize(program) if not tracing() else program


def _trace(
  fn: Callable, args: Sequence, optimized: bool = True
) -> tuple[Program, list, list, Any, Any]:
  """Traces fn(*args) with every array leaf of args as a program input; the program
  `optimize`d unless not `optimized` (a program run once, on values: `primc.tape`)."""
  leaves, in_tree = tree_flatten(list(args))
  weak = weak_leaves(leaves)
  leaves = [as_array(x) for x in leaves]

  def flat_fn(*xs):
    return fn(*tree_unflatten(in_tree, xs))

  avals = [aval_of(x) for x in leaves]
  taken = None if tracing() else replayed.adopted(fn, args)  # (a trace replayed on values)
  if taken is not None:
    program, captured, out_tree = taken
    return (optimize(program) if optimized else program), leaves, captured, in_tree, out_tree
  try:
    program, captured, out_tree = trace_flat(flat_fn, avals, weak)
  except ConcretizationError:
    values = [x.concrete if isinstance(x, Tracer) else x for x in leaves]
    if any(v is None for v in values):  # (under jit, vmap: values unknown)
      raise
    # Python control flow on values (`if loss < tol:`): traced again with the values,
    # so the branches this call takes are its program (differentiated as one path, as
    # autograd's tape records it; kept per path by primc.kept, under jit by primc.breaks)
    program, captured, out_tree = trace_path(flat_fn, leaves, values, weak)
  return (optimize(program) if optimized else program), leaves, captured, in_tree, out_tree


def _named(transform: str, fun: Callable, wrapper: Callable) -> Callable:
  """`wrapper` named after what it computes (`grad(loss)`), for messages and progress;
  `__wrapped__` is the function it transforms."""
  wrapper.__qualname__ = wrapper.__name__ = f"{transform}({_name_of(fun)})"
  wrapper.__wrapped__ = fun
  return wrapper


def _kept(differentiates: bool = False, replayable: bool = True, taped: bool = False):
  """Makes a transform's functions, called outside any trace, run kept programs
  (`primc.kept`), keyed by the transform and every argument it was made with (so the
  kept program is the transform made again with those, by construction). Where it
  `differentiates` (its `argnums`, or autograd's `argnum`), Python scalars among the
  arguments are traced there only (elsewhere they are Python values, as
  `_python_values_bound` binds them). `replayable`: it calls the function on arguments
  of the arguments' own shapes (not `vmap`), so a function's trace may stand in for it
  (`primc.replayed`). `taped`: it runs on values by `primc.tape` (reverse mode), so a long
  function's first calls do that rather than make its program (`kept._Taped`)."""

  def decorate(transform):
    @functools.wraps(transform)
    def make(fun, *params, **options):
      remake = lambda f: transform(f, *params, **options)
      key = (transform.__name__, _hashable(params), _hashable(sorted(options.items())))
      scalars = None
      if differentiates:  # grad's and value_and_grad's (fun, argnums, has_aux, *, argnum)
        nums = options.get("argnum")
        nums = (params[0] if params else options.get("argnums", 0)) if nums is None else nums
        scalars = _differentiated(nums)
      plain = []  # the transform itself, made at its first use (most calls are kept)

      def kept_fn(*args, **kwargs):
        if kept.wanted():
          return kept.call(remake, key, fun, args, kwargs, scalars, replayable, taped)
        if tracing():  # (made anew, or staged from a program kept outside the trace:
          staged = kept.staged(key, fun, args, kwargs, remake)  # one kept from inside
          if staged is not kept.MISS:  # it would hold this trace's values, and the
            return staged  # function rebuilt around a later one's)
          return remake(fun)(*args, **kwargs)
        if not plain:
          plain.append(remake(fun))
        return plain[0](*args, **kwargs)

      kept_fn.__qualname__ = kept_fn.__name__ = f"{transform.__name__}({_name_of(fun)})"
      kept_fn.__wrapped__ = fun
      kept_fn._primc_transform = True
      return kept_fn

    return make

  return decorate


def _name_of(fun) -> str:
  return getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or "f"


def _hashable(x):
  """Transform parameters as a key: lists as tuples, dicts as their sorted items."""
  if isinstance(x, dict):
    return ("dict",) + tuple((k, _hashable(v)) for k, v in sorted(x.items()))
  return tuple(map(_hashable, x)) if isinstance(x, (list, tuple)) else x


def _differentiated(argnums):
  """`traced_scalars` of a transform in `argnums`: Python scalars are traced there only
  (elsewhere they are Python values, as `_python_values_bound` binds them)."""

  def at(args):
    nums, owners = _argnums(argnums, len(args)), _leaf_owners(args)
    return lambda k: k < len(owners) and owners[k] in nums

  return at


def _keywords(fun: Callable, kwargs: dict) -> Callable:
  """fun with keyword arguments bound: transforms pass them through, undifferentiated
  (as JAX and autograd do); only positional arguments are differentiated."""
  return functools.partial(fun, **kwargs) if kwargs else fun


def _is_array(x) -> bool:
  return isinstance(x, (Tracer, np.ndarray, np.generic))


def _python_values_bound(fun: Callable, args: tuple, nums) -> tuple[Callable, tuple]:
  """Positional arguments not differentiated that hold anything but arrays (a Python
  number or bool, a type, a string, a function, None) bound as Python values, as autograd
  passes them (`if flag:` works on them); in `args` each becomes an empty tuple (no
  leaves), so argument positions stay."""
  fixed = {
    i: a
    for i, a in enumerate(args)
    if i not in nums and not all(map(_is_array, tree_flatten(a)[0]))
  }
  if not fixed:
    return fun, args

  def bound(*a):
    return fun(*[fixed[i] if i in fixed else x for i, x in enumerate(a)])

  bound.primc_bound = (fun, fixed)  # (`replayed.adopted`: a replay's values kept)
  return bound, tuple(() if i in fixed else a for i, a in enumerate(args))


def _argnums(argnums, nargs) -> tuple[int, ...]:
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  for i in nums:
    if not -nargs <= i < nargs:
      raise PrimcError(f"argnums {argnums} out of range for {nargs} positional arguments")
  return tuple(i % nargs for i in nums)


def _leaf_owners(args) -> list[int]:
  return [i for i, a in enumerate(args) for _ in range(len(tree_flatten(a)[0]))]


def _split_aux(out_tree, has_aux, what):
  idx = tree_unflatten(out_tree, list(range(out_tree.num_leaves)))
  if has_aux:
    if not isinstance(idx, (tuple, list)) or len(idx) != 2:
      raise PrimcError(f"{what}(has_aux=True) needs the function to return a pair (output, aux)")
    return idx[0], idx[1]
  return idx, None


def _pick(values, idx_tree):
  leaves, td = tree_flatten(idx_tree)
  return tree_unflatten(td, [values[i] for i in leaves])


@_kept(differentiates=True, taped=True)
def value_and_grad(
  fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, *, argnum: ArgNums | None = None
) -> Callable:
  """Returns a function computing `(fun(*args), gradient of fun wrt args[argnums])`.

  Args:
    fun: a function with a one-element float output (or `(output, aux)` if has_aux).
    argnums: an int or a tuple of ints: the positional arguments to differentiate.
    has_aux: if True, fun returns `(output, aux)`; aux is returned undifferentiated,
      as `((value, aux), grads)`.
    argnum: autograd's spelling of `argnums` (`grad(f, argnum=1)`).
  Returns:
    `(value, grads)` where grads has the structure of `args[argnums]` (a tuple for tuple
    argnums).
  """
  argnums = argnums if argnum is None else argnum

  def value_and_grad_fn(*args, **kwargs):
    nums = _argnums(argnums, len(args))
    f, args = _python_values_bound(_keywords(fun, kwargs), args, nums)
    program, leaves, captured, _, out_tree = _trace(f, args, optimized=tracing())
    owners = _leaf_owners(args)
    wrt = [o in nums for o in owners] + [False] * len(captured)
    for o, leaf in zip(owners, leaves):
      if o in nums and not aval_of(leaf).is_float:
        raise PrimcTypeError(
          f"grad with respect to argument {o} of dtype "
          f"{aval_of(leaf).dtype}: only float inputs can be "
          f"differentiated, at {user_source()}"
        )
    value_idx, aux_idx = _split_aux(out_tree, has_aux, "grad")
    if not isinstance(value_idx, int):
      raise PrimcError("grad needs a function with one array output (use jacrev for several)")
    value_aval = program.out_avals[value_idx]
    if value_aval.size != 1 or not value_aval.is_float:
      raise PrimcTypeError(
        f"grad needs a function with a one-element float output, got "
        f"{value_aval} (use vjp, jacrev or primc.autograd.grad), at "
        f"{user_source()}"
      )
    one = np.ones(value_aval.shape, value_aval.dtype)
    out_cts = [one if i == value_idx else None for i in range(len(program.outputs))]
    # inside a trace, the transform's program staged into the caller's; on values, once,
    # equation by equation
    vjp = tape.by_program if tracing() else tape.vjp
    outs, cts = vjp(program, [*leaves, *captured], wrt, out_cts)
    cts = iter(cts)
    by_arg = {}  # the cotangents come in argument order, whatever the order of argnums
    for i in sorted(set(nums)):
      n = len(tree_flatten(args[i])[0])
      by_arg[i] = tree_unflatten(tree_flatten(args[i])[1], [next(cts) for _ in range(n)])
    g = by_arg[nums[0]] if isinstance(argnums, int) else tuple(by_arg[i] for i in nums)
    value = outs[value_idx]
    return ((value, _pick(outs, aux_idx)) if has_aux else value), g

  return _named("value_and_grad", fun, value_and_grad_fn)


@_kept(differentiates=True, taped=True)
def grad(
  fun: Callable, argnums: ArgNums = 0, has_aux: bool = False, *, argnum: ArgNums | None = None
) -> Callable:
  """Returns a function computing the gradient of `fun` wrt `args[argnums]`.

  Args:
    fun: a function with a one-element float output (`(output, aux)` if has_aux).
    argnums: an int or a tuple of ints.
    has_aux: if True, returns `(grads, aux)`.
    argnum: autograd's spelling of `argnums`.
  """
  vg = value_and_grad(fun, argnums, has_aux, argnum=argnum)

  def grad_fn(*args, **kwargs):
    (value_aux, g) = vg(*args, **kwargs)
    return (g, value_aux[1]) if has_aux else g

  return _named("grad", fun, grad_fn)


def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False) -> tuple:
  """Forward mode: `(fun(*primals), J @ tangents)`. Tangents match primals' structure;
  integer primals take (ignored) integer tangents; non-float outputs get zero tangents.
  With `has_aux`, fun returns `(output, aux)` and jvp `(output, tangent, aux)`."""
  if kept.wanted():
    return kept.call(
      lambda f: lambda p, t: jvp(f, p, t, has_aux),
      ("jvp", has_aux),
      fun,
      (tuple(primals), tuple(tangents)),
      {},
    )
  if has_aux:
    (out, aux), (t_out, _) = jvp(lambda *a: _checked_pair(fun(*a), "jvp"), primals, tangents)
    return out, t_out, aux
  program, leaves, captured, in_tree, out_tree = _trace(fun, primals)
  t_leaves, t_tree = tree_flatten(list(tangents))
  if t_tree != in_tree:
    raise PrimcError("jvp: tangents must have the same structure as primals")
  t_leaves = [as_array(t) for t in t_leaves]
  for x, t in zip(leaves, t_leaves):
    if aval_of(x).shape != aval_of(t).shape:
      raise PrimcError(f"jvp: tangent {aval_of(t)} does not match primal {aval_of(x)}")
  wrt = _differentiable(leaves, captured)
  jvp_p = _to_evaluate(ad.jvp_program(program, wrt))
  ts = [pnp.asarray(t, aval_of(x).dtype) for x, t in zip(leaves, t_leaves) if aval_of(x).is_float]
  res = eval_program(jvp_p, *leaves, *captured, *ts)
  n_out = len(program.outputs)
  t_it = iter(res[n_out:])
  t_outs = [next(t_it) if a.is_float else np.zeros(a.shape, a.dtype) for a in program.out_avals]
  return tree_unflatten(out_tree, res[:n_out]), tree_unflatten(out_tree, t_outs)


def _linearized(fun, primals, has_aux, what, transposed: bool = False):
  """fun traced at primals and linearized: its primal program evaluated (`_to_evaluate`:
  inside a trace, optimized with the enclosing program's), and its linear program,
  optimized unless it is to be `transposed` (the transpose is optimized; one round before
  it too changes no equation count of nested derivatives tried, at ~15% of a nested
  gradient's first call: autograd's tanh example, four deep). Nested, neither the primal
  nor the transposed program is optimized: autograd's tanh example's fourth derivative
  16 -> 10 ms at its first call, its program at the fixpoint 203 equations either way."""
  program, leaves, captured, in_tree, out_tree = _trace(fun, primals)
  out_idx, aux_idx = _split_aux(out_tree, has_aux, what)
  primal_p, linear_p = ad.linearize_program(program, _differentiable(leaves, captured))
  primal_p = _to_evaluate(primal_p)
  linear_p = linear_p if transposed else optimize(linear_p)
  res = eval_program(primal_p, *leaves, *captured)
  n_out = len(program.outputs)
  return program, leaves, in_tree, out_idx, aux_idx, res[:n_out], res[n_out:], linear_p


def vjp(fun: Callable, *primals: Any, has_aux: bool = False) -> tuple:
  """Reverse mode: returns `(fun(*primals), vjp_fn)` (and aux if has_aux), where
  `vjp_fn(ct)` gives the cotangents of the primals (a tuple, None for integer inputs).

  On values, `fun` runs once, equation by equation, keeping what its derivative needs,
  and `vjp_fn` sweeps that back (`primc.tape.pullback`, as autograd's tape): no program
  is differentiated or optimized. Inside a trace (`jit`, an enclosing transform), its
  linear program is transposed and staged into the trace's."""
  if tracing():
    program, leaves, in_tree, out_idx, aux_idx, outs, res, linear_p = _linearized(
      fun, primals, has_aux, "vjp", transposed=True
    )
    pull = _transposed(program, out_idx, res, linear_p)
  else:  # (the function's trace kept as a transform's program is: `kept.traced`)
    found = kept.traced(fun, primals)
    if found is None:
      program, leaves, captured, in_tree, out_tree = _trace(fun, primals, optimized=False)
    else:
      program, inputs, out_tree = found
      in_tree = tree_flatten(list(primals))[1]
      leaves, captured = inputs[: in_tree.num_leaves], inputs[in_tree.num_leaves :]
    out_idx, aux_idx = _split_aux(out_tree, has_aux, "vjp")
    outs, back = tape.pullback(program, [*leaves, *captured], _differentiable(leaves, captured))
    pull = lambda by_output: back([by_output.get(i) for i in range(len(program.outputs))])
  out_leaves, out_td = tree_flatten(out_idx)
  chosen = [i for i in out_leaves if program.out_avals[i].is_float]
  float_in = [aval_of(x).is_float for x in leaves]

  def vjp_fn(ct):
    ct_leaves, ct_td = tree_flatten(ct)
    if ct_td != out_td:
      raise PrimcError("vjp_fn: the cotangent must have the structure of the output")
    cts = [
      pnp.asarray(c, program.out_avals[i].dtype)
      for c, i in zip(ct_leaves, out_leaves)
      if program.out_avals[i].is_float
    ]
    for c, i in zip(cts, chosen):
      if aval_of(c).shape != program.out_avals[i].shape:
        raise PrimcError(
          f"vjp_fn: cotangent {aval_of(c)} does not match output {program.out_avals[i]}"
        )
    in_cts = iter(pull(dict(zip(chosen, cts))))
    flat = [next(in_cts) if f else None for f in float_in]
    return tuple(tree_unflatten(in_tree, flat))

  out = _pick(outs, out_idx)
  return (out, vjp_fn, _pick(outs, aux_idx)) if has_aux else (out, vjp_fn)


def _differentiable(leaves, captured) -> list[bool]:
  """Which inputs of a traced program a derivative is taken in: the float leaves (not
  the arrays it captured)."""
  return [aval_of(x).is_float for x in leaves] + [False] * len(captured)


def _transposed(program: Program, out_idx, res, linear_p: Program) -> Callable:
  """A vjp's pullback inside a trace: the linear program of the outputs `out_idx` names
  transposed, as a function of their cotangents ({output index: cotangent}) staging it."""
  out_leaves = tree_flatten(out_idx)[0]
  float_outs = [a.is_float for a in program.out_avals]
  lin_pos = {i: k for k, i in enumerate(j for j, f in enumerate(float_outs) if f)}
  chosen = [i for i in out_leaves if float_outs[i]]
  linear = Program(
    linear_p.inputs, linear_p.eqns, tuple(linear_p.outputs[lin_pos[i]] for i in chosen)
  )
  n_res = len(res)
  transposed = _to_evaluate(  # (vjp_fn runs in the trace its residuals belong to)
    ad.transpose_program(linear, [False] * n_res + [True] * (len(linear.inputs) - n_res))
  )
  return lambda by_output: eval_program(transposed, *res, *[by_output[i] for i in chosen])


def linearize(fun: Callable, *primals: Any) -> tuple:
  """Returns `(fun(*primals), f_jvp)` where `f_jvp(*tangents)` evaluates the linear map
  (the linear program, with residuals computed once)."""
  program, leaves, in_tree, out_idx, _, outs, res, linear_p = _linearized(
    fun, primals, False, "linearize"
  )
  float_in = [aval_of(x).is_float for x in leaves]
  float_outs = [a.is_float for a in program.out_avals]

  def f_jvp(*tangents):
    t_leaves, t_tree = tree_flatten(list(tangents))
    if t_tree != in_tree:
      raise PrimcError("linearize: tangents must have the same structure as primals")
    ts = [pnp.asarray(t, aval_of(x).dtype) for t, x, f in zip(t_leaves, leaves, float_in) if f]
    t_it = iter(eval_program(linear_p, *res, *ts))
    t_outs = [
      next(t_it) if f else np.zeros(a.shape, a.dtype) for f, a in zip(float_outs, program.out_avals)
    ]
    return _pick(t_outs, out_idx)

  return _pick(outs, out_idx), f_jvp


@_kept(replayable=False)
def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0) -> Callable:
  """Vectorizes `fun` over an axis of its arguments.

  Args:
    in_axes: an int or None for all arguments, or a tuple with one entry per argument:
      an int or None for every array in it, or a pytree prefix of it (a dict, tuple or
      list of ints and Nones).
    out_axes: where the batch axis goes: an int for every output, or a pytree prefix of
      the output; an axis outside the output's dimensions is an error (as in JAX).
  """

  def vmapped(*args):
    axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
    if len(axes) != len(args):
      raise PrimcError(f"vmap: in_axes has {len(axes)} entries for {len(args)} arguments")
    moved, dims, size = [], [], None
    for a, spec in zip(args, axes):
      leaves, td = tree_flatten(a)
      new = []
      for x, ax in zip(leaves, _leaf_axes(spec, a, "in_axes")):
        x = as_array(x)
        if ax is not None:
          shape = aval_of(x).shape
          if not -len(shape) <= ax < len(shape):
            raise PrimcError(f"vmap: in_axes {ax} out of range for an argument of shape {shape}")
          n = shape[ax]
          if size is not None and n != size:
            raise PrimcError(f"vmap: inconsistent sizes {size} and {n} along the mapped axes")
          size = n
          x = batching.moveaxis(x, ax % len(shape), 0)
        new.append(x)
        dims.append(ax is not None)
      moved.append(tree_unflatten(td, new))
    if size is None:
      raise PrimcError("vmap needs at least one mapped argument")
    avals = [
      ShapedArray(aval_of(x).shape[1:] if d else aval_of(x).shape, aval_of(x).dtype)
      for x, d in zip(tree_flatten(moved)[0], dims)
    ]
    leaves, in_tree = tree_flatten(moved)

    def flat_fn(*xs):
      return fun(*tree_unflatten(in_tree, xs))

    program, captured, out_tree = trace_flat(flat_fn, avals)
    batched = _to_evaluate(
      batching.batch_program(optimize(program), list(dims) + [False] * len(captured), size)
    )
    outs = eval_program(batched, *leaves, *captured)
    shaped = tree_unflatten(out_tree, outs)
    moved_out = []
    for o, ax in zip(outs, _leaf_axes(out_axes, shaped, "out_axes")):
      ndim = aval_of(o).ndim
      if ax is None or not isinstance(ax, (int, np.integer)) or not -ndim <= ax < ndim:
        raise PrimcError(
          f"vmap: out_axes {ax!r} for an output of {ndim - 1} dimensions "
          f"(batched: {ndim}); it must be an int in [{-ndim}, {ndim})"
        )
      moved_out.append(batching.moveaxis(o, 0, ax % ndim))
    return tree_unflatten(out_tree, moved_out)

  return _named("vmap", fun, vmapped)


def _leaf_axes(spec, tree, what: str) -> list:
  """One axis per array leaf of `tree` from `spec`, an int or None for all of them, or a
  pytree prefix of `tree` (a tuple, list or dict of such specs), as JAX reads `in_axes`
  and `out_axes`."""
  if spec is None or isinstance(spec, (int, np.integer)):
    return [spec] * len(tree_flatten(tree)[0])
  if isinstance(spec, (tuple, list)) and isinstance(tree, (tuple, list)) and len(spec) == len(tree):
    return [ax for s, t in zip(spec, tree) for ax in _leaf_axes(s, t, what)]
  if isinstance(spec, dict) and isinstance(tree, dict) and set(spec) == set(tree):
    return [ax for k in sorted(tree) for ax in _leaf_axes(spec[k], tree[k], what)]
  raise PrimcError(
    f"vmap: {what} {spec!r} does not match the structure of {type(tree).__name__}"
    f" {tree_flatten(tree)[1]}: give an int, None, or a tuple, list or dict "
    f"with the same structure"
  )


def _with_arg(fun, args, i):
  return lambda x: fun(*args[:i], x, *args[i + 1 :])


def _checked_pair(out, what):
  if not isinstance(out, (tuple, list)) or len(out) != 2:
    raise PrimcError(f"{what}(has_aux=True) needs the function to return a pair (output, aux)")
  return tuple(out)


def ravel_pytree(tree: Any) -> tuple[Any, Callable]:
  """A pytree's leaves as one flat array (numpy's promotion of their dtypes), and the
  function that makes such a flat array a pytree of that structure again: JAX's
  `jax.flatten_util.ravel_pytree`, autograd's `misc.flatten`. Traced or not, and
  differentiable both ways."""
  leaves, treedef = tree_flatten(tree)
  shapes = [tuple(aval_of(as_array(x)).shape) for x in leaves]
  sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
  flat = pnp.concatenate([pnp.ravel(x) for x in leaves]) if leaves else pnp.zeros(0)

  def unravel(flat):
    parts, start = [], 0
    for shape, size in zip(shapes, sizes):
      parts.append(pnp.reshape(flat[start : start + size], shape))
      start += size
    return tree_unflatten(treedef, parts)

  return flat, unravel


def _tree_jacobian(jac_one, f, x):
  """`jac_one(f, x)` for a pytree `x` or pytree outputs: both raveled, the Jacobian of the
  flat function split into JAX's layout, a tree of the outputs' structure whose leaves are
  trees of x's structure, leaf (i, j) of shape output_i.shape + x_j.shape."""
  flat_in, unravel_in = ravel_pytree(x)
  in_leaves, in_tree = tree_flatten(x)
  out_info = []

  def flat_f(v):
    out = f(unravel_in(v))
    leaves, tree = tree_flatten(out)
    out_info[:] = [tree, [aval_of(as_array(y)).shape for y in leaves]]
    return ravel_pytree(out)[0]

  jac = jac_one(flat_f, flat_in)  # (output size, input size)
  out_tree, out_shapes = out_info
  in_shapes = [aval_of(as_array(y)).shape for y in in_leaves]
  rows, r = [], 0
  for oshape in out_shapes:
    m = int(np.prod(oshape, dtype=np.int64))
    blocks, c = [], 0
    for ishape in in_shapes:
      n = int(np.prod(ishape, dtype=np.int64))
      blocks.append(pnp.reshape(jac[r : r + m, c : c + n], tuple(oshape) + tuple(ishape)))
      c += n
    rows.append(tree_unflatten(in_tree, blocks))
    r += m
  return tree_unflatten(out_tree, rows)


def _one_jacobian(jac_one, f, x):
  """jac_one(f, x) for an array x and one array output; else by raveling (pytrees)."""
  if isinstance(x, (Tracer, np.ndarray, np.generic, float, int)):
    try:
      return jac_one(f, as_array(x))
    except _SingleOutput:  # tuple or dict outputs: raveled
      pass
  return _tree_jacobian(jac_one, f, x)


class _SingleOutput(PrimcError):
  """jacrev's basis pullback needs one array output (others are raveled)."""


def _per_argnum(jac_one, argnums, name, has_aux=False):
  """The Jacobians of `jac_one.fun` for `argnums`; with `has_aux` the function returns
  `(output, aux)`: the Jacobians are of the output, and `(jacobians, aux)` is returned
  (aux from the function's value at the arguments)."""

  def jac(*args, **kwargs):
    nums = _argnums(argnums, len(args))
    base = _keywords(jac_one.fun, kwargs)
    fun = (lambda *a: _checked_pair(base(*a), name)[0]) if has_aux else base
    jacs = [_one_jacobian(jac_one, _with_arg(fun, args, i), args[i]) for i in nums]
    out = jacs[0] if isinstance(argnums, int) else tuple(jacs)
    return (out, _checked_pair(base(*args), name)[1]) if has_aux else out

  return _named(name, jac_one.fun, jac)


@_kept()
def jacfwd(fun: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
  """The Jacobian by forward mode, all basis tangents pushed through one batched program.
  Shape: output shape + input shape (a tuple of Jacobians for tuple argnums); with
  `has_aux`, fun returns `(output, aux)` and so does the Jacobian function."""

  def one(f, x):
    n = aval_of(x).size
    shape = aval_of(x).shape

    def pushfwd(t):
      return jvp(f, (x,), (P.reshape(t, shape),))[1]

    basis = pnp.eye(n, dtype=aval_of(x).dtype)
    ys = vmap(pushfwd)(basis)
    return tree_unflatten(
      tree_flatten(ys)[1],
      [
        pnp.reshape(pnp.moveaxis(y, 0, -1), aval_of(y).shape[1:] + shape)
        for y in tree_flatten(ys)[0]
      ],
    )

  one.fun = fun
  return _per_argnum(one, argnums, "jacfwd", has_aux)


@_kept()
def jacrev(fun: Callable, argnums: ArgNums = 0, has_aux: bool = False) -> Callable:
  """The Jacobian by reverse mode, all basis cotangents pulled back in one batched program.
  Shape: output shape + input shape (single-array outputs); with `has_aux`, fun returns
  `(output, aux)` and so does the Jacobian function."""

  def one(f, x):
    y, pullback = vjp(f, x)
    if not isinstance(y, (Tracer, np.ndarray)):
      raise _SingleOutput("jacrev of a function with several outputs")
    yshape = aval_of(y).shape
    m = aval_of(y).size

    def pullrow(ct):
      return pullback(P.reshape(ct, yshape))[0]

    if m == 1:  # a single cotangent: pulled back as it is, with no batch dimension
      rows = pullrow(pnp.ones((1,), dtype=aval_of(y).dtype))
    else:
      rows = vmap(pullrow)(pnp.eye(m, dtype=aval_of(y).dtype))
    return pnp.reshape(rows, yshape + aval_of(x).shape)

  one.fun = fun
  return _per_argnum(one, argnums, "jacrev", has_aux)


def hessian(fun: Callable, argnums: ArgNums = 0) -> Callable:
  """The Hessian, `jacfwd(jacrev(fun))`: shape input shape + input shape for scalar fun."""
  return jacfwd(jacrev(fun, argnums), argnums)


def hvp(fun: Callable, primals: Sequence, tangents: Sequence) -> Any:
  """The Hessian-vector product `H(primals) @ tangents` (forward-over-reverse), without
  forming the Hessian. Returns the structure of the primals (a tuple)."""
  return jvp(grad(fun, argnums=tuple(range(len(primals)))), primals, tangents)[1]


# ---------------------------------------------------------------------------------------
# autograd's spellings (`argnum`: one positional argument), over the transforms above


def _at_argnum(fun: Callable, args, argnum: int, kwargs=None):
  """`fun` as a function of its argument `argnum` alone (the others and the keyword
  arguments fixed), and that argument."""
  args = list(args)
  kwargs = kwargs or {}

  def of_one(x):
    return fun(*args[:argnum], x, *args[argnum + 1 :], **kwargs)

  return of_one, args[argnum]


def jacobian(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.jacobian: the Jacobian in argument `argnum`, shape output + input."""
  return jacrev(fun, argnums=argnum)


@_kept(taped=True)
def elementwise_grad(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.elementwise_grad (and `deriv`): the vector-Jacobian product with ones, the
  sum of each column of the Jacobian; the derivative itself for elementwise functions."""

  def grad_fn(*args, **kwargs):
    pullback, out = make_vjp(fun, argnum)(*args, **kwargs)
    return pullback(pnp.ones_like(out))

  return _named("elementwise_grad", fun, grad_fn)


deriv = elementwise_grad


def grad_and_aux(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.grad_and_aux: fun returns (value, aux); gives (gradient, aux)."""

  def grad_fn(*args, **kwargs):
    (_, aux), g = value_and_grad(fun, argnums=argnum, has_aux=True)(*args, **kwargs)
    return g, aux

  return grad_fn


def make_vjp(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.make_vjp: `make_vjp(f)(x)` is `(vjp_fn, f(x))`, vjp_fn(v) the cotangent of
  argument `argnum`."""

  def at(*args, **kwargs):
    f, x = _at_argnum(fun, args, argnum, kwargs)
    out, pullback = vjp(f, x)
    return (lambda v: pullback(v)[0]), out

  return at


def make_jvp(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.make_jvp: `make_jvp(f)(x)(v)` is `(f(x), J v)` in argument `argnum`."""

  def at(*args, **kwargs):
    f, x = _at_argnum(fun, args, argnum, kwargs)
    return lambda v: jvp(f, (x,), (v,))

  return at


def tensor_jacobian_product(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.tensor_jacobian_product (and `vector_jacobian_product`): `(*args, v)` ->
  v contracted with the Jacobian's leading output axes, `tensordot(v, J, v.ndim)`: shape
  the output's remaining axes + the input's (the vjp when v has the output's shape)."""

  def product(*args_and_v, **kwargs):
    *args, v = args_and_v
    v = as_array(v)

    def v_dot_fun(*a):
      return pnp.tensordot(v, fun(*a, **kwargs), axes=aval_of(v).ndim)

    return jacobian(v_dot_fun, argnum)(*args)

  return product


vector_jacobian_product = tensor_jacobian_product


def hessian_tensor_product(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.hessian_tensor_product (and `hessian_vector_product`): `(*args, v)` -> the
  Hessian in argument `argnum` contracted with v (forward over reverse: `hvp`)."""

  def product(*args_and_v, **kwargs):
    *args, v = args_and_v
    f, x = _at_argnum(fun, args, argnum, kwargs)
    return hvp(f, (x,), (v,))[0]

  return product


hessian_vector_product = hessian_tensor_product


def make_hvp(fun: Callable, argnum: int = 0) -> Callable:
  """autograd.make_hvp: `make_hvp(f)(x)` is `(hvp_fn, f(x))`."""

  def at(*args, **kwargs):
    return (
      (lambda v: hessian_tensor_product(fun, argnum)(*args, v, **kwargs)),
      fun(*args, **kwargs),
    )

  return at


def make_ggnvp(f: Callable, g: Callable = None, f_argnum: int = 0) -> Callable:
  """autograd.make_ggnvp: the Gauss-Newton product J_f^T H_g J_f v of g(f(x)) (g by
  default sum(y^2, axis=-1) / 2)."""
  g = g or (lambda y: pnp.multiply(0.5, pnp.sum(pnp.multiply(y, y), -1)))

  def at(*args):
    f_x, x = _at_argnum(f, args, f_argnum)
    y, pull_f = vjp(f_x, x)

    def product(v):
      _, jv = jvp(f_x, (x,), (v,))
      hjv = hessian_tensor_product(g)(y, jv)
      return pull_f(hjv)[0]

    return product

  return at


def checkpoint(fun: Callable) -> Callable:
  """autograd.checkpoint: the same values and derivatives (its purpose, recomputing
  intermediates in the backward pass to save memory, is the compiled program's: primc's
  passes and fusion decide what is stored)."""
  return fun
