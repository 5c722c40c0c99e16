"""User derivative rules: `custom_jvp` and `custom_vjp` (JAX's spellings; Paddle's PyLayer
and MindSpore's bprop are the same idea).

A call of a decorated function is one equation of the program, `custom_jvp_call` or
`custom_vjp_call`, holding the function's own program (`fun`, closed: values it reads from
an enclosing trace are extra inputs) and the user's rule (a Python function, called when a
transform reaches the equation, on that transform's values):

  custom_jvp_call  JVP: the user's rule on the primals and tangents (it calls the function
                   again, so every order differentiates the rule, as in JAX); reverse mode
                   transposes the rule's linear part like any other program.
  custom_vjp_call  JVP: the user's `fwd` on the primals gives the outputs and residuals;
                   the tangents of the outputs are one `custom_lin` equation, linear in the
                   tangents, whose transpose runs the user's `bwd`. Forward mode has no rule
                   to run (`custom_lin` refuses to be evaluated), as in JAX.

Batching batches the function's program and the rules (traced over one example, batched
like any program). Codegen never sees these equations: `inline_calls` replaces each by its
function's program before a program is compiled or keyed in the cache.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from primc import ad, batching, breaks, lax
from primc import numpy as pnp
from primc.core import (
  ConcretizationError,
  NamedFunction,
  Primitive,
  PrimcError,
  Program,
  ShapedArray,
  program_runner_rules,
  results,
  run,
)
from primc.runners import bind_control
from primc.prims import abstract_rules, impl_rules
from primc.trace import (
  Tracer,
  as_array,
  aval_of,
  eval_program,
  literal,
  trace_flat,
  trace_path,
  user_source,
)
from primc.trace import state as trace_state
from primc.tree import tree_flatten, tree_unflatten

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)
custom_vjp_call_p = Primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = Primitive("custom_lin", multiple_results=True, linear="all")


# a user's rule as a function of flat arrays (`fn(*leaves) -> list of leaves`)
Rule = NamedFunction


def _batched(rule: Rule, in_avals: Sequence[ShapedArray], size: int) -> Rule:
  """`rule` over a leading batch axis of every argument: traced on one example's shapes,
  then batched as a program, when first called. Not before: a rule that calls its own
  function (`return f(x), ...`) holds that function's call, whose batching batches the
  rule again (eagerly, without end)."""
  batched = []

  def run(*xs):
    if not batched:
      program = trace_flat(lambda *a: list(rule(*a)), list(in_avals))[0]
      batched.append(batching.batch_program(program, [True] * len(in_avals), size))
    return eval_program(batched[0], *xs)

  return Rule(run, f"vmap({rule.name})")


# ---------------------------------------------------------------------------------------
# Shape rules and evaluation (the function's program)


def _out_avals(fun: Program) -> tuple[ShapedArray, ...]:
  return tuple(a.aval for a in fun.outputs)


abstract_rules[custom_jvp_call_p] = lambda *avals, fun, **_: _out_avals(fun)
abstract_rules[custom_vjp_call_p] = lambda *avals, fun, **_: _out_avals(fun)
abstract_rules[custom_lin_p] = lambda *avals, out_avals, **_: tuple(out_avals)
impl_rules[custom_jvp_call_p] = lambda *args, fun, **_: eval_program(fun, *args)
impl_rules[custom_vjp_call_p] = lambda *args, fun, **_: eval_program(fun, *args)


def _call_runner(sub, *, fun, **_):
  run_fun = sub(fun)
  return lambda *args: run_fun(list(args))


program_runner_rules[custom_jvp_call_p] = _call_runner
program_runner_rules[custom_vjp_call_p] = _call_runner


def _no_forward_mode(*args, bwd, **_):
  raise PrimcError(
    f"forward mode (jvp, jacfwd, hessian's inner jvp) reached a custom_vjp "
    f"function ({bwd.name}): it has a reverse-mode rule only; define a "
    f"custom_jvp rule, or differentiate it in reverse mode"
  )


impl_rules[custom_lin_p] = _no_forward_mode


# ---------------------------------------------------------------------------------------
# Derivative rules


def _check_closure(tangents, n_args: int, name: str):
  if any(not isinstance(t, ad.Zero) for t in tangents[n_args:]):
    raise PrimcError(
      f"{name} reads a value being differentiated from its enclosing scope "
      f"(a closure): pass it as an argument, so its rule sees it"
    )


def _custom_jvp_jvp(primals, tangents, *, fun, rule, n_args):
  _check_closure(tangents, n_args, rule.name)
  if all(isinstance(t, ad.Zero) for t in tangents):
    outs = custom_jvp_call_p.bind(*primals, fun=fun, rule=rule, n_args=n_args)
    return outs, [ad.Zero(aval_of(o)) for o in outs]
  ts = [ad.instantiate(t) for t in tangents[:n_args]]
  both = rule(*primals[:n_args], *ts)
  n_out = len(fun.outputs)
  outs, t_outs = both[:n_out], both[n_out:]
  for o, t, want in zip(outs, t_outs, _out_avals(fun)):
    if aval_of(o) != want or aval_of(t) != want:
      raise PrimcError(
        f"the custom_jvp rule {rule.name} returned a primal {aval_of(o)} and "
        f"a tangent {aval_of(t)} for an output {want}"
      )
  return outs, t_outs


def _custom_vjp_jvp(primals, tangents, *, fun, fwd, bwd, n_args):
  _check_closure(tangents, n_args, fwd.name)
  if all(isinstance(t, ad.Zero) for t in tangents):
    outs = custom_vjp_call_p.bind(*primals, fun=fun, fwd=fwd, bwd=bwd, n_args=n_args)
    return outs, [ad.Zero(aval_of(o)) for o in outs]
  n_out = len(fun.outputs)
  both = fwd(*primals[:n_args])
  outs, residuals = both[:n_out], both[n_out:]
  ts = [ad.instantiate(t) for t in tangents[:n_args]]
  t_outs = custom_lin_p.bind(
    *residuals, *ts, bwd=bwd, n_res=len(residuals), out_avals=tuple(_out_avals(fun))
  )
  return outs, t_outs


def _custom_lin_transpose(cts, *invals, bwd, n_res, out_avals):
  cts = [ad.instantiate(c) for c in cts]
  args = [*invals[:n_res], *cts]
  try:
    in_cts = bwd(*args)
  except ConcretizationError:  # bwd loops on values (a fixed point's adjoint): it runs
    # on the values each call brings, between compiled segments
    in_cts = lax.python_call(_bwd_on_values(bwd), args, [x.aval for x in invals[n_res:]], bwd.name)
  return [None] * n_res + list(in_cts)


def _bwd_on_values(bwd: Rule) -> Callable:
  """`bwd` run on values: traced on them, the path its Python takes kept with the values
  it read as guards (`breaks.Paths`, as `jit`'s graph breaks), so a later call whose
  guards come out the same evaluates the kept path without tracing bwd again."""
  paths: dict = {}  # by the arguments' shapes and dtypes

  def make(arrays):
    guards: list = []
    program, captured, _ = trace_flat(
      lambda *xs: list(bwd(*xs)), _avals(arrays), (), arrays, guards
    )
    run = lambda leaves, out: eval_program(program, *leaves, *captured)
    return run, [value for value, _ in guards], None

  def run(*values):
    arrays = [np.asarray(v) for v in values]
    key = tuple((a.shape, a.dtype.str) for a in arrays)
    if key not in paths:
      paths[key] = breaks.Paths(make)
    return paths[key].run(arrays)[0]

  return run


def _custom_vjp_on_values(xs, active, *, fun, fwd, bwd, n_args):
  """A custom_vjp call on the tape (`primc.tape`: reverse mode on values): the user's fwd
  on the values now, their bwd on the cotangents at the backward sweep, as autograd runs
  its rules; none of them traced. None where a value the function captured is
  differentiated (the transform's rule says what is wrong)."""
  if True in active[n_args:]:
    return None
  n_out = len(fun.outputs)
  both = fwd(*xs[:n_args])
  outs, residuals = [np.asarray(o) for o in both[:n_out]], both[n_out:]
  out_avals = _out_avals(fun)

  def backward(given):
    given = iter(given)  # (of the float outputs: the others' are zeros)
    cts = [next(given) if a.is_float else np.zeros(a.shape, a.dtype) for a in out_avals]
    in_cts = bwd(*residuals, *cts)
    return [np.array(c) for c, on in zip(in_cts, active) if on]

  return outs, backward


ad.jvp_rules[custom_jvp_call_p] = _custom_jvp_jvp
ad.jvp_rules[custom_vjp_call_p] = _custom_vjp_jvp
ad.transpose_rules[custom_lin_p] = _custom_lin_transpose
ad.value_vjp_rules[custom_vjp_call_p] = _custom_vjp_on_values


# ---------------------------------------------------------------------------------------
# Batching: every input batched (unbatched ones broadcast), the programs and rules batched


def _unbatched(avals):
  return [ShapedArray(aval_of(a).shape[1:], aval_of(a).dtype) for a in avals]


def _batch_jvp_call(args, dims, *, fun, rule, n_args):
  args, size = batching.materialize_all(args, dims)
  one = _unbatched(args)
  fun_b = batching.batch_program(fun, [True] * len(args), size)
  rule_b = _batched(rule, one[:n_args] * 2, size)
  outs = custom_jvp_call_p.bind(*args, fun=fun_b, rule=rule_b, n_args=n_args)
  return [(o, 0) for o in outs]


def _batch_vjp_call(args, dims, *, fun, fwd, bwd, n_args):
  args, size = batching.materialize_all(args, dims)
  one = _unbatched(args)
  fun_b = batching.batch_program(fun, [True] * len(args), size)
  fwd_b = _batched(fwd, one[:n_args], size)
  res = trace_flat(lambda *xs: list(fwd(*xs)), one[:n_args])[0].out_avals[len(fun.outputs) :]
  bwd_b = _batched(bwd, list(res) + list(_out_avals(fun)), size)
  outs = custom_vjp_call_p.bind(*args, fun=fun_b, fwd=fwd_b, bwd=bwd_b, n_args=n_args)
  return [(o, 0) for o in outs]


def _batch_lin(args, dims, *, bwd, n_res, out_avals):
  args, size = batching.materialize_all(args, dims)
  one = _unbatched(args)
  bwd_b = _batched(bwd, one[:n_res] + list(out_avals), size)
  batched_avals = tuple(ShapedArray((size,) + a.shape, a.dtype) for a in out_avals)
  outs = custom_lin_p.bind(*args, bwd=bwd_b, n_res=n_res, out_avals=batched_avals)
  return [(o, 0) for o in outs]


batching.batch_rules[custom_jvp_call_p] = _batch_jvp_call
batching.batch_rules[custom_vjp_call_p] = _batch_vjp_call
batching.batch_rules[custom_lin_p] = _batch_lin


# ---------------------------------------------------------------------------------------
# Before codegen


def inline_calls(program: Program) -> Program:
  """`program` with every custom call replaced by its function's program (recursively);
  a `custom_lin` left (forward mode through a custom_vjp function) is refused."""
  if not any(e.prim in _CALLS for e in program.eqns):
    return program

  def apply(eqn, xs):
    if eqn.prim is custom_lin_p:
      _no_forward_mode(**eqn.kw)
    if eqn.prim in _CALLS:
      return eval_program(inline_calls(eqn.kw["fun"]), *xs)
    return results(eqn, eqn.prim.bind(*xs, **eqn.kw))

  def fn(*args):
    return run(program, args, apply, lit=literal)

  return trace_flat(fn, list(program.in_avals))[0]


_CALLS = (custom_jvp_call_p, custom_vjp_call_p, custom_lin_p)


# ---------------------------------------------------------------------------------------
# The decorators


def _avals(values) -> list[ShapedArray]:
  return [aval_of(v) for v in values]


def _full_args(args, nondiff_argnums, in_tree, leaves):
  diff = iter(tree_unflatten(in_tree, list(leaves)))
  return [args[i] if i in nondiff_argnums else next(diff) for i in range(len(args))]


def _values_of(leaves) -> list:
  """The values of arrays and of tracers in a trace of values (else ConcretizationError
  again: the values are not known)."""
  values = [x.concrete if isinstance(x, Tracer) else x for x in leaves]
  if any(v is None for v in values):
    raise ConcretizationError(
      "a custom rule's function reads traced values (a Python `if` "
      "or loop on them) where their values are not known (under "
      f"vmap or a trace of types), at {user_source()}"
    )
  return values


def _on_values(rule: Callable, values) -> Callable:
  """A rule of a function traced on values (`trace_path`): the rule's path for the same
  values, run on its arguments (it is called by a transform of that same path, whose
  guards the function's trace recorded: its own are the same reads)."""

  def run(*xs):
    program, captured, _ = trace_flat(lambda *a: list(rule(*a)), _avals(xs), (), values)
    return eval_program(program, *xs, *captured)

  return run


class _CustomFunction:
  """What custom_jvp and custom_vjp share: the function, its non-differentiable argument
  positions, and a call that binds one equation (handed to a front end on its values)."""

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
    self.fun, self.nondiff_argnums = fun, tuple(nondiff_argnums)
    functools.update_wrapper(self, fun)

  def _missing_rule(self) -> str | None:
    raise NotImplementedError

  def _trace(self, args):
    """(name, flat array leaves of the differentiable arguments, their tree, the program
    of the function over them, the values it read from an enclosing trace (its extra
    inputs), the output tree, the non-differentiable arguments, and the leaves' values
    where the function reads them in Python: the program is then their path)."""
    name = getattr(self.fun, "__qualname__", f"a {type(self).__name__} function")
    nondiff = self.nondiff_argnums
    leaves, in_tree = tree_flatten([a for i, a in enumerate(args) if i not in nondiff])
    leaves = [as_array(x) for x in leaves]
    fun = lambda *xs: self.fun(*_full_args(args, nondiff, in_tree, xs))
    values = None
    try:
      program, captured, out_tree = trace_flat(fun, _avals(leaves))
    except ConcretizationError:  # Python reads values (a loop to convergence): their path
      values = _values_of(leaves)
      program, captured, out_tree = trace_path(fun, leaves, values)
    return (name, leaves, in_tree, program, captured, out_tree, [args[i] for i in nondiff], values)

  def __call__(self, *args):
    missing = self._missing_rule()
    if missing:
      raise PrimcError(f"{type(self).__name__} function {self.__name__} has no rule: {missing}")
    if not trace_state.builders and not _holds_tracers_or_front_ends(args):
      return self.fun(*args)  # plain values: nothing differentiates it, so no rule applies
    return pnp.on_front_ends(self._bind, args, {})


def _holds_tracers_or_front_ends(args) -> bool:
  """Whether a traced value or a front end's value (an eager tensor) is among `args`, at
  any depth of their pytrees: a call on none is the function's own (JAX's custom_jvp
  outside every transform runs the function; here it once traced it at every call, ~0.9
  ms for scipy.stats' densities on values, whose `xlogy` is one)."""
  leaves = tree_flatten(list(args))[0]
  return any(isinstance(x, Tracer) for x in leaves) or pnp.front_end_of(args, {}) is not None


class custom_jvp(_CustomFunction):
  """A function with its own forward-mode rule (JAX's `jax.custom_jvp`):

      @primc.custom_jvp
      def log1pexp(x):
        return pnp.log1p(pnp.exp(x))

      @log1pexp.defjvp
      def log1pexp_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return log1pexp(x), t * pnp.tanh(x / 2) * 0.5 + t * 0.5

  The rule returns (outputs, output tangents), as pytrees like the function's; it must be
  linear in the tangents (reverse mode transposes it). Every transform and order uses it
  (`jit`, `grad`, `jacfwd`, `vmap`, the eager tape). `nondiff_argnums` are arguments that
  are not arrays (Python values), passed to the rule first, as in JAX.
  """

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
    super().__init__(fun, nondiff_argnums)
    self.jvp = None

  def defjvp(self, jvp: Callable) -> Callable:
    self.jvp = jvp
    return jvp

  def _missing_rule(self) -> str | None:
    return None if self.jvp else f"decorate one with @{self.__name__}.defjvp"

  def _bind(self, *args):
    name, leaves, in_tree, program, captured, out_tree, nondiff, _ = self._trace(args)

    def rule(*xs):
      n = len(xs) // 2
      primals = tree_unflatten(in_tree, list(xs[:n]))
      tangents = tree_unflatten(in_tree, list(xs[n:]))
      out, t_out = self.jvp(*nondiff, tuple(primals), tuple(tangents))
      outs, tree = tree_flatten(out)
      t_outs, t_tree = tree_flatten(t_out)
      if tree != out_tree or t_tree != out_tree:
        raise PrimcError(
          f"the custom_jvp rule of {name} returned outputs shaped {tree} and "
          f"tangents {t_tree}; the function returns {out_tree}"
        )
      return [as_array(o) for o in outs] + [as_array(t) for t in t_outs]

    outs = bind_control(
      custom_jvp_call_p,
      *leaves,
      *captured,
      fun=program,
      rule=Rule(rule, f"{name}'s jvp", parts=("jvp", self, tuple(nondiff), in_tree, out_tree)),
      n_args=len(leaves),
    )
    return tree_unflatten(out_tree, outs)


class custom_vjp(_CustomFunction):
  """A function with its own reverse-mode rule (JAX's `jax.custom_vjp`; Paddle's PyLayer):

      @primc.custom_vjp
      def clip_gradient(x):
        return x

      def fwd(x):
        return x, ()           # the output, and residuals for bwd

      def bwd(residuals, g):
        return (pnp.clip(g, -1, 1),)   # one cotangent per argument

      clip_gradient.defvjp(fwd, bwd)

  `grad`, `vjp`, `jacrev` and every order of them use it (a gradient of a gradient
  differentiates `bwd`); forward mode (`jvp`, `jacfwd`) raises a clear error, as there is
  no forward rule. `bwd` may return None for an argument: a zero cotangent.
  """

  def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
    super().__init__(fun, nondiff_argnums)
    self.fwd = self.bwd = None

  def defvjp(self, fwd: Callable, bwd: Callable) -> None:
    self.fwd, self.bwd = fwd, bwd

  def _missing_rule(self) -> str | None:
    return None if self.fwd else f"call {self.__name__}.defvjp(fwd, bwd)"

  def _bind(self, *args):
    name, leaves, in_tree, program, captured, out_tree, nondiff, values = self._trace(args)
    n_out = len(program.outputs)
    res_trees = []
    diff_args = [a for i, a in enumerate(args) if i not in self.nondiff_argnums]
    arg_avals = [[aval_of(as_array(x)) for x in tree_flatten(a)[0]] for a in diff_args]

    def fwd(*xs):
      out, res = self.fwd(*_full_args(args, self.nondiff_argnums, in_tree, xs))
      outs, tree = tree_flatten(out)
      if tree != out_tree:
        raise PrimcError(
          f"the custom_vjp fwd of {name} returned outputs shaped {tree}; the "
          f"function returns {out_tree}"
        )
      res_leaves, res_tree = tree_flatten(res)
      res_trees.append(res_tree)
      return [as_array(o) for o in outs] + [as_array(r) for r in res_leaves]

    def bwd(*xs):
      n_res = len(xs) - n_out
      res = tree_unflatten(res_trees[-1], list(xs[:n_res]))
      cts = tree_unflatten(out_tree, list(xs[n_res:]))
      in_cts = self.bwd(*nondiff, res, cts)
      if not isinstance(in_cts, (tuple, list)) or len(in_cts) != len(arg_avals):
        raise PrimcError(
          f"the custom_vjp bwd of {name} must return a tuple of one "
          f"cotangent per argument ({len(arg_avals)}), got "
          f"{type(in_cts).__name__}"
        )
      flat = []
      for ct, avals in zip(in_cts, arg_avals):
        ct_leaves = [None] * len(avals) if ct is None else tree_flatten(ct)[0]
        if len(ct_leaves) != len(avals):
          raise PrimcError(
            f"the custom_vjp bwd of {name} returned a cotangent of another "
            f"structure than its argument"
          )
        for c, a in zip(ct_leaves, avals):
          flat.append(
            pnp.zeros(a.shape, a.dtype)
            if c is None
            else pnp.broadcast_to(pnp.asarray(c, a.dtype), a.shape)
          )
      return flat

    if values is not None:  # fwd loops on values as the function did
      fwd = _on_values(fwd, values)
    parts = (self, tuple(nondiff), in_tree, out_tree)  # (what the rules run: their key)
    outs = bind_control(
      custom_vjp_call_p,
      *leaves,
      *captured,
      fun=program,
      fwd=Rule(fwd, f"{name}'s fwd", parts=("fwd", *parts, values)),
      bwd=Rule(bwd, f"{name}'s bwd", parts=("bwd", *parts)),
      n_args=len(leaves),
    )
    return tree_unflatten(out_tree, outs)
