"""Structured control flow (`primc.lax`, JAX's spellings): `cond`, `switch`, `while_loop`,
`fori_loop`, `scan`; and (from `primc.convolution`) `conv_general_dilated`, `conv`,
`conv_transpose`, `reduce_window`.

Each is one equation holding the programs of its branches or body, traced once (values a
branch or body reads from an enclosing trace become extra operands):

  cond   (index, *operands; branches)                     one branch runs
  while  (*cond_consts, *body_consts, *carry; cond, body)  carry while cond(carry)
  scan   (*consts, *carry, *xs; body, length, reverse)     carry, y = body(carry, x) per
                                                           row of xs; ys stacked

Derivatives: forward mode for all three; reverse mode for `cond` (its tangent equation is a
`cond` of the branches' tangent programs, transposed branch by branch) and for `scan` (its
JVP is split into a primal scan that also stacks the residuals of every step and a linear
scan over them, transposed into a scan running the other way), hence for `fori_loop` with
constant bounds, which is a scan. A `while_loop`'s trip count is not known ahead, so its
reverse mode raises (as in JAX). Batching: a batched predicate turns `cond` into a
select of every branch and `while_loop` into a loop until no example continues.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from primc import ad, batching
from primc import numpy as pnp
from primc.convolution import (  # noqa: F401  (primc.lax's names)
  conv,
  conv_general_dilated,
  conv_transpose,
  reduce_window,
)
from primc import prims as P
from primc.core import (
  NamedFunction,
  Primitive,
  PrimcError,
  PrimcIndexError,
  Program,
  ShapedArray,
  Var,
  program_runner_rules,
)
from primc.runners import bind_control
from primc.prims import abstract_rules, impl_rules
from primc.trace import Tracer, as_array, aval_of, eval_program, locate, trace_flat, user_source
from primc.tree import tree_flatten, tree_unflatten

cond_p = Primitive("cond", multiple_results=True)
while_p = Primitive("while", multiple_results=True)
scan_p = Primitive("scan", multiple_results=True)
# a Python function run on its operands' values between compiled segments (a custom rule
# that decides in Python on values: see `python_call`)
python_call_p = Primitive("python_call", multiple_results=True)
CONTROL_FLOW = (cond_p, while_p, scan_p, python_call_p)


# ---------------------------------------------------------------------------------------
# Programs of branches and bodies


def _closed(fn: Callable, avals: Sequence[ShapedArray]) -> tuple[Program, list, object]:
  """fn traced over `avals`: its program with the values it read from an enclosing trace
  as extra leading inputs, those values, and its output tree."""
  program, captured, out_tree = trace_flat(fn, list(avals))
  n = len(avals)
  program = Program(program.inputs[n:] + program.inputs[:n], program.eqns, program.outputs)
  return program, captured, out_tree


def _with_inputs(
  program: Program, before: Sequence[ShapedArray] = (), after: Sequence[ShapedArray] = ()
) -> Program:
  """`program` taking unused inputs of `before` avals first and of `after` avals last."""
  return Program(
    tuple(Var(a) for a in before) + program.inputs + tuple(Var(a) for a in after),
    program.eqns,
    program.outputs,
  )


def _reordered(program: Program, order: Sequence[int]) -> Program:
  return Program(tuple(program.inputs[i] for i in order), program.eqns, program.outputs)


def _outputs(program: Program, keep: Sequence[int]) -> Program:
  return Program(program.inputs, program.eqns, tuple(program.outputs[i] for i in keep))


def _avals(values) -> list[ShapedArray]:
  return [aval_of(v) for v in values]


def _check_same(what: str, got, want):
  if got != want:
    raise PrimcError(f"{what}: {got} differs from {want}")


def _check_carry(what: str, got, want, skip: int = 0) -> None:
  """A loop body's carry out against its carry in: the message names the loop, the
  leaves that differ, the user's line, and where a dtype alone differs, the fix (start
  it in the body's dtype). `skip`: leading leaves the
  loop adds (fori_loop's counter)."""
  bad = [(k, g, w) for k, (g, w) in enumerate(zip(got[skip:], want[skip:])) if g != w]
  if not bad:
    return
  k, g, w = bad[0]
  hint = ""
  if g.shape == w.shape and g.dtype != w.dtype:
    hint = (
      f": the loop starts with {w.dtype} and its body gives {g.dtype}. Start it in "
      f"the dtype the body computes (pnp.zeros(shape, '{g.dtype}'), or "
      f"pnp.zeros_like(x) of the data)"
    )
  raise locate(
    PrimcError(),
    f"{what}: carry leaf {k} comes out as {g.str_short()} but goes in as {w.str_short()}{hint}",
  )


# ---------------------------------------------------------------------------------------
# Shape rules and evaluation


def _cond_rule(index, *operands, branches):
  _check_same("cond's index", (index.shape, index.dtype in ("int32", "int64")), ((), True))
  return tuple(a.aval for a in branches[0].outputs)


def _scan_rule(*avals, body, length, reverse, n_consts, n_carry):
  outs = [a.aval for a in body.outputs]
  return tuple(outs[:n_carry]) + tuple(
    ShapedArray((length,) + a.shape, a.dtype) for a in outs[n_carry:]
  )


# How control flow runs on values: `sub(program)` runs one of its programs (a list of
# values -> a list of values). The interpreter evaluates them at every step (`impl_rules`),
# kept runners make each a runner once (`program_runner_rules`).


def _evaluated(program: Program) -> Callable:
  return lambda values: eval_program(program, *values)


def _cond_runner(sub, *, branches):
  runs = [sub(b) for b in branches]

  def run(index, *operands):
    k = int(index)
    if not 0 <= k < len(runs):
      raise PrimcIndexError(f"switch: branch index {k} is out of range for {len(runs)} branches")
    return runs[k](list(operands))

  return run


def _while_runner(sub, *, cond, body, n_cond, n_body):
  run_cond, run_body = sub(cond), sub(body)

  def run(*args):
    consts_c, consts_b = list(args[:n_cond]), list(args[n_cond : n_cond + n_body])
    carry = list(args[n_cond + n_body :])
    while bool(run_cond(consts_c + carry)[0]):
      carry = run_body(consts_b + carry)
    return carry

  return run


def _scan_runner(sub, *, body, length, reverse, n_consts, n_carry):
  run_body = sub(body)
  y_avals = [a.aval for a in body.outputs[n_carry:]]

  def run(*args):
    consts, carry = list(args[:n_consts]), list(args[n_consts : n_consts + n_carry])
    xs, ys = args[n_consts + n_carry :], [None] * length
    for i in range(length - 1, -1, -1) if reverse else range(length):
      outs = run_body(consts + carry + [np.asarray(x[i]) for x in xs])
      carry, ys[i] = list(outs[:n_carry]), outs[n_carry:]
    return list(carry) + [
      np.stack([np.asarray(y[k]) for y in ys]) if length else np.zeros((0,) + a.shape, a.dtype)
      for k, a in enumerate(y_avals)
    ]

  return run


program_runner_rules[cond_p] = _cond_runner
program_runner_rules[while_p] = _while_runner
program_runner_rules[scan_p] = _scan_runner
abstract_rules[cond_p] = _cond_rule
abstract_rules[while_p] = lambda *avals, cond, body, n_cond, n_body: tuple(avals[n_cond + n_body :])
abstract_rules[scan_p] = _scan_rule
impl_rules[cond_p] = lambda *args, **params: _cond_runner(_evaluated, **params)(*args)
impl_rules[while_p] = lambda *args, **params: _while_runner(_evaluated, **params)(*args)
impl_rules[scan_p] = lambda *args, **params: _scan_runner(_evaluated, **params)(*args)


# ---------------------------------------------------------------------------------------
# Forward mode


def _float_mask(values, tangents):
  return [aval_of(v).is_float and not isinstance(t, ad.Zero) for v, t in zip(values, tangents)]


def _cond_jvp(primals, tangents, *, branches):
  index, ops, t_ops = primals[0], primals[1:], tangents[1:]
  outs = cond_p.bind(index, *ops, branches=branches)
  wrt = _float_mask(ops, t_ops)
  out_avals = [a.aval for a in branches[0].outputs]
  zeros = [ad.Zero(a) for a in out_avals]
  if not any(wrt):
    return outs, zeros
  n_out = len(out_avals)
  tangent_branches = []
  for b in branches:
    jvp = ad.jvp_program(b, wrt)
    tangent_branches.append(_outputs(jvp, range(n_out, len(jvp.outputs))))
  t_in = [t for t, w in zip(t_ops, wrt) if w]
  t_float = cond_p.bind(index, *ops, *t_in, branches=tuple(tangent_branches))
  it = iter(t_float)
  return outs, [next(it) if a.is_float else z for a, z in zip(out_avals, zeros)]


def _cond_transpose(cts, index, *operands, branches):
  linear = [ad.is_undefined(x) for x in operands]
  known = [x for x in operands if not ad.is_undefined(x)]
  transposed = tuple(ad.transpose_program(b, linear) for b in branches)
  cts = [ad.instantiate(c) for c in cts]
  in_cts = iter(cond_p.bind(index, *known, *cts, branches=transposed))
  return [None] + [next(in_cts) if lin else None for lin in linear]


def _while_jvp(primals, tangents, *, cond, body, n_cond, n_body):
  consts_c = primals[:n_cond]
  consts_b, t_consts_b = primals[n_cond : n_cond + n_body], tangents[n_cond : n_cond + n_body]
  carry = primals[n_cond + n_body :]
  wrt_b = _float_mask(consts_b, t_consts_b)
  wrt_k = [aval_of(c).is_float for c in carry]
  if not any(wrt_b) and all(isinstance(t, ad.Zero) for t in tangents[n_cond + n_body :]):
    outs = while_p.bind(*primals, cond=cond, body=body, n_cond=n_cond, n_body=n_body)
    return outs, [ad.Zero(aval_of(o)) for o in outs]
  jvp = ad.jvp_program(body, wrt_b + wrt_k)
  nb, nk, ntb = n_body, len(carry), sum(wrt_b)
  # jvp inputs: consts_b, carry, t_consts_b, t_carry -> consts_b, t_consts_b, carry, t_carry
  order = (
    list(range(nb))
    + list(range(nb + nk, nb + nk + ntb))
    + list(range(nb, nb + nk))
    + list(range(nb + nk + ntb, len(jvp.inputs)))
  )
  t_carry_avals = [aval_of(c) for c, w in zip(carry, wrt_k) if w]
  new_cond = _with_inputs(cond, after=t_carry_avals)
  t_carry = [ad.instantiate(t) for t, w in zip(tangents[n_cond + n_body :], wrt_k) if w]
  t_cb = [t for t, w in zip(t_consts_b, wrt_b) if w]
  outs = while_p.bind(
    *consts_c,
    *consts_b,
    *t_cb,
    *carry,
    *t_carry,
    cond=new_cond,
    body=_reordered(jvp, order),
    n_cond=n_cond,
    n_body=nb + ntb,
  )
  it = iter(outs[nk:])
  return outs[:nk], [next(it) if w else ad.Zero(aval_of(c)) for c, w in zip(carry, wrt_k)]


def _while_transpose(cts, *args, **params):
  raise PrimcError(
    "reverse-mode differentiation through while (a while_loop) is not "
    "supported (its trip count is not known ahead): use scan, or fori_loop "
    "with constant bounds, or forward mode (jvp, jacfwd)"
  )


def _scan_jvp(primals, tangents, *, body, length, reverse, n_consts, n_carry):
  """A primal scan that also stacks each step's residuals, and a linear scan over them."""
  consts, carry = primals[:n_consts], primals[n_consts : n_consts + n_carry]
  xs = primals[n_consts + n_carry :]
  t_consts, t_xs = tangents[:n_consts], tangents[n_consts + n_carry :]
  wrt_c = _float_mask(consts, t_consts)
  wrt_k = [aval_of(c).is_float for c in carry]
  wrt_x = _float_mask(xs, t_xs)
  params = dict(length=length, reverse=reverse)
  if not any(wrt_c + wrt_x) and all(
    isinstance(t, ad.Zero) for t in tangents[n_consts : n_consts + n_carry]
  ):
    outs = scan_p.bind(*primals, body=body, n_consts=n_consts, n_carry=n_carry, **params)
    return outs, [ad.Zero(aval_of(o)) for o in outs]
  primal_body, linear_body = ad.linearize_program(body, wrt_c + wrt_k + wrt_x)
  n_out = len(body.outputs)
  n_res = len(primal_body.outputs) - n_out
  outs = scan_p.bind(*primals, body=primal_body, n_consts=n_consts, n_carry=n_carry, **params)
  residuals = outs[len(outs) - n_res :]
  outs = outs[: len(outs) - n_res]
  # linear body inputs: residuals, t_consts, t_carry, t_xs -> t_consts, t_carry, res, t_xs
  ntc, ntk = sum(wrt_c), sum(wrt_k)
  order = (
    list(range(n_res, n_res + ntc + ntk))
    + list(range(n_res))
    + list(range(n_res + ntc + ntk, len(linear_body.inputs)))
  )
  t_in = (
    [t for t, w in zip(t_consts, wrt_c) if w]
    + [ad.instantiate(t) for t, w in zip(tangents[n_consts : n_consts + n_carry], wrt_k) if w]
    + list(residuals)
    + [t for t, w in zip(t_xs, wrt_x) if w]
  )
  t_float = iter(
    scan_p.bind(*t_in, body=_reordered(linear_body, order), n_consts=ntc, n_carry=ntk, **params)
  )
  return outs, [next(t_float) if aval_of(o).is_float else ad.Zero(aval_of(o)) for o in outs]


def _scan_transpose(cts, *args, body, length, reverse, n_consts, n_carry):
  """The scan of the transposed body, run the other way: the carries' cotangents flow back
  step by step, the constants' are summed over the steps, the xs' are stacked."""
  consts, carry, xs = (
    args[:n_consts],
    args[n_consts : n_consts + n_carry],
    args[n_consts + n_carry :],
  )
  lin_c = [ad.is_undefined(c) for c in consts]
  lin_x = [ad.is_undefined(x) for x in xs]
  mask = lin_c + [True] * n_carry + lin_x  # a known carry (zeros) is linear all the same
  transposed = ad.transpose_program(body, mask)
  known_c = [c for c, lin in zip(consts, lin_c) if not lin]
  known_x = [x for x, lin in zip(xs, lin_x) if not lin]
  c_avals = [c.aval for c, lin in zip(consts, lin_c) if lin]
  k_avals = [aval_of(c) if not ad.is_undefined(c) else c.aval for c in carry]
  cts = [ad.instantiate(c) for c in cts]
  ct_carry, ct_ys = cts[:n_carry], cts[n_carry:]
  n_kc, n_kx = len(known_c), len(known_x)

  def step(*vals):  # (known consts; acc, ct_carry; known x_i, ct_y_i) -> (acc', ct_carry'; ct_x_i)
    kc, acc = vals[:n_kc], vals[n_kc : n_kc + len(c_avals)]
    ct_k = vals[n_kc + len(c_avals) : n_kc + len(c_avals) + n_carry]
    rest = vals[n_kc + len(c_avals) + n_carry :]
    kx, ct_y = rest[:n_kx], rest[n_kx:]
    out = eval_program(transposed, *kc, *kx, *ct_k, *ct_y)
    ct_c, ct_k2, ct_x = (
      out[: len(c_avals)],
      out[len(c_avals) : len(c_avals) + n_carry],
      out[len(c_avals) + n_carry :],
    )
    return [P.add(a, c) for a, c in zip(acc, ct_c)] + list(ct_k2) + list(ct_x)

  x_avals = [ShapedArray(aval_of(x).shape[1:], aval_of(x).dtype) for x in known_x]
  y_avals = [ShapedArray(aval_of(c).shape[1:], aval_of(c).dtype) for c in ct_ys]
  step_program = trace_flat(step, _avals(known_c) + c_avals + k_avals + x_avals + y_avals)[0]
  outs = scan_p.bind(
    *known_c,
    *[P.zeros(a) for a in c_avals],
    *ct_carry,
    *known_x,
    *ct_ys,
    body=step_program,
    length=length,
    reverse=not reverse,
    n_consts=n_kc,
    n_carry=len(c_avals) + n_carry,
  )
  ct_c = iter(outs[: len(c_avals)])
  ct_k = outs[len(c_avals) : len(c_avals) + n_carry]
  ct_x = iter(outs[len(c_avals) + n_carry :])
  return (
    [next(ct_c) if lin else None for lin in lin_c]
    + [ct if ad.is_undefined(c) else None for ct, c in zip(ct_k, carry)]
    + [next(ct_x) if lin else None for lin in lin_x]
  )


ad.jvp_rules[cond_p] = _cond_jvp
ad.jvp_rules[while_p] = _while_jvp
ad.jvp_rules[scan_p] = _scan_jvp
ad.transpose_rules[cond_p] = _cond_transpose
ad.transpose_rules[while_p] = _while_transpose
ad.transpose_rules[scan_p] = _scan_transpose


# ---------------------------------------------------------------------------------------
# Batching (values batched at axis 0; every operand materialized batched)


def _batched_program(program: Program, size: int) -> Program:
  return batching.batch_program(program, [True] * len(program.inputs), size)


def _cond_batch(args, dims, *, branches):
  size = batching._size(args, dims)
  ops_b = [batching.materialize(x, d, size) for x, d in zip(args[1:], dims[1:])]
  batched = tuple(_batched_program(b, size) for b in branches)
  if dims[0] is None:
    return [(o, 0) for o in cond_p.bind(args[0], *ops_b, branches=batched)]
  # a batched index: every branch runs, each example takes its own branch's results
  outs = [eval_program(b, *ops_b) for b in batched]
  chosen = outs[0]
  for k in range(1, len(batched)):
    chosen = [
      _select_rows(P.eq(args[0], P.full((size,), k, aval_of(args[0]).dtype)), o, c)
      for o, c in zip(outs[k], chosen)
    ]
  return [(c, 0) for c in chosen]


def _select_rows(mask, on_true, on_false):
  shape = aval_of(on_true).shape
  return P.select(P.broadcast_in_dim(mask, shape, (0,)), on_true, on_false)


def _while_batch(args, dims, *, cond, body, n_cond, n_body):
  args, size = batching.materialize_all(args, dims)
  cond_b, body_b = _batched_program(cond, size), _batched_program(body, size)
  consts_c = args[:n_cond]
  cond_avals = _avals(consts_c) + _avals(args[n_cond + n_body :])

  def any_cond(*vals):  # the loop runs while any example's condition holds
    go = eval_program(cond_b, *vals)[0]
    return [P.gt(P.reduce_max(P.convert(go, "int32"), (0,)), P.full((), 0, "int32"))]

  def guarded_body(*vals):  # an example whose condition fails keeps its carry
    kc, kb, carry = vals[:n_cond], vals[n_cond : n_cond + n_body], vals[n_cond + n_body :]
    go = eval_program(cond_b, *kc, *carry)[0]
    new = eval_program(body_b, *kb, *carry)
    return [_select_rows(go, n, c) for n, c in zip(new, carry)]

  new_cond = trace_flat(any_cond, cond_avals)[0]
  new_body = trace_flat(guarded_body, _avals(args))[0]  # reads the cond's constants too
  outs = while_p.bind(
    *consts_c, *args, cond=new_cond, body=new_body, n_cond=n_cond, n_body=n_cond + n_body
  )
  return [(o, 0) for o in outs]


def _scan_batch(args, dims, *, body, length, reverse, n_consts, n_carry):
  args, size = batching.materialize_all(args, dims)
  n_fixed = n_consts + n_carry
  xs = [batching.moveaxis(x, 0, 1) for x in args[n_fixed:]]  # scanned axis first
  outs = scan_p.bind(
    *args[:n_fixed],
    *xs,
    body=_batched_program(body, size),
    length=length,
    reverse=reverse,
    n_consts=n_consts,
    n_carry=n_carry,
  )
  return [(o, 0) for o in outs[:n_carry]] + [
    (batching.moveaxis(y, 1, 0), 0) for y in outs[n_carry:]
  ]


batching.batch_rules[cond_p] = _cond_batch
batching.batch_rules[while_p] = _while_batch
batching.batch_rules[scan_p] = _scan_batch


# ---------------------------------------------------------------------------------------
# Python on values: a function that reads its operands' values in Python (a loop to
# convergence) is one equation; the program is cut there (`segmented`), as at a graph
# break, and the function runs on the values each call brings. It has no derivative of
# its own.


def python_call(fn: Callable, args: Sequence, out_avals: Sequence[ShapedArray], name: str) -> Any:
  """`fn(*values) -> list of arrays` bound as one equation on `args`, giving `out_avals`."""
  return python_call_p.bind(*args, fn=NamedFunction(fn, name, "python"), out_avals=tuple(out_avals))


def _python_call_impl(*values, fn, out_avals):
  outs = list(fn(*values))
  checked = []
  for k, (o, aval) in enumerate(zip(outs, out_avals, strict=True)):
    o = np.asarray(o)
    if o.shape != aval.shape or o.dtype != np.dtype(aval.dtype):
      raise PrimcError(
        f"{fn.name} returned {o.dtype.name}{list(o.shape)} for output {k}, "
        f"where its trace expects {aval.dtype}{list(aval.shape)}"
      )
    checked.append(o)
  return checked


def _python_call_jvp(primals, tangents, *, fn, out_avals):
  if all(isinstance(t, ad.Zero) for t in tangents):
    outs = python_call_p.bind(*primals, fn=fn, out_avals=out_avals)
    return outs, [ad.Zero(aval_of(o)) for o in outs]
  raise PrimcError(
    f"{fn.name} decides in Python on values, so it has no derivative of its "
    f"own (a derivative of this order through it): write its loop with "
    f"primc.lax.while_loop / fori_loop, at {user_source()}"
  )


def _python_call_batch(args, dims, *, fn, out_avals):
  args, size = batching.materialize_all(args, dims)

  def each(*values):  # one call per example, the results stacked
    runs = [fn(*[v[i] for v in values]) for i in range(size)]
    return [np.stack([np.asarray(r[k]) for r in runs]) for k in range(len(out_avals))]

  batched = tuple(ShapedArray((size,) + a.shape, a.dtype) for a in out_avals)
  outs = python_call_p.bind(*args, fn=NamedFunction(each, fn.name, "python"), out_avals=batched)
  return [(o, 0) for o in outs]


abstract_rules[python_call_p] = lambda *avals, fn, out_avals: tuple(out_avals)
impl_rules[python_call_p] = _python_call_impl
ad.jvp_rules[python_call_p] = _python_call_jvp
batching.batch_rules[python_call_p] = _python_call_batch


# ---------------------------------------------------------------------------------------
# On a front end's values: eager tensors have values as they go, so the control flow runs
# as Python's, each op recorded on the tape (as autograd's and PyTorch's tapes record a
# loop, and as JAX runs these under disable_jit): closed-over tensors are differentiated
# too. A static program's variables have no values yet: the whole op is recorded.


def _value(x):
  """A known value now: a front end's (its reader), else the array's."""
  cls = pnp.front_end_of([x], {})
  read = pnp.front_end_value(cls) if cls is not None else np.asarray
  if read is None:
    raise PrimcError(
      f"a bound or length of a loop on static program variables must be a number, got {x!r:.80}"
    )
  return np.asarray(read(x))


def _on_front_ends(python: Callable, unrolled: bool = False):
  """The decorated op, or `python` (the same op in Python's control flow) where a value
  of a front end with values is among the arguments, or of any front end where the op
  is `unrolled` (a loop of known length: static programs record its steps' ops, so
  closed-over variables are read as any op reads them)."""

  def decorate(fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
      cls = pnp.front_end_of(args, kwargs)
      if cls is None:
        return fn(*args, **kwargs)
      if unrolled or pnp.front_end_value(cls) is not None:
        return python(*args, **kwargs)
      return pnp.front_end_apply(cls)(fn, args, kwargs)  # recorded whole

    wrapped._takes_front_ends = True  # (a library op: `primc.kept` keys it by identity)
    return wrapped

  return decorate


def _python_switch(index, branches, *operands):
  k = int(_value(index))
  if not 0 <= k < len(branches):
    raise PrimcIndexError(f"switch: branch index {k} is out of range for {len(branches)} branches")
  return branches[k](*operands)


def _python_cond(pred, true_fun, false_fun, *operands):
  value = _value(pred)
  if value.shape != ():
    raise PrimcError(f"cond needs a scalar predicate, got shape {value.shape}")
  return (true_fun if value != 0 else false_fun)(*operands)


def _python_while(cond_fun, body_fun, init_val):
  val = init_val
  while _value(cond_fun(val)) != 0:
    val = body_fun(val)
  return val


def _python_fori(lower, upper, body_fun, init_val):
  val = init_val
  for i in range(int(_value(lower)), int(_value(upper))):
    val = body_fun(i, val)
  return val


def _python_scan(f, init, xs=None, length=None, reverse=False):
  x_leaves, x_tree = tree_flatten(xs) if xs is not None else ([], None)
  lengths = {x.shape[0] if hasattr(x, "shape") else len(x) for x in x_leaves} | (
    set() if length is None else {int(length)}
  )
  if len(lengths) != 1 or 0 in lengths or None in lengths:
    raise PrimcError(
      f"scan on eager tensors or static variables needs one known length "
      f"above 0: xs' leading axes and length give {lengths}"
    )
  (n,) = lengths
  carry, ys = init, []
  for i in range(n - 1, -1, -1) if reverse else range(n):
    x = tree_unflatten(x_tree, [leaf[i] for leaf in x_leaves]) if x_tree else None
    carry, y = f(carry, x)
    ys.append(tree_flatten(y))
  if reverse:
    ys.reverse()
  stacked = [pnp.stack([leaves[k] for leaves, _ in ys]) for k in range(len(ys[0][0]))]
  return carry, tree_unflatten(ys[0][1], stacked)


# ---------------------------------------------------------------------------------------
# The user's functions


def _leaves(tree):
  leaves, treedef = tree_flatten(tree)
  return [as_array(x) for x in leaves], treedef


def _traced(x) -> bool:
  return isinstance(x, Tracer)


@_on_front_ends(_python_switch)
def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
  """`branches[index](*operands)`: one branch runs. An index outside [0, len(branches)) is an
  error (JAX clamps it). Every branch returns the same structure, shapes and dtypes."""
  branches = list(branches)
  if not branches:
    raise PrimcError("switch needs at least one branch")
  if not _traced(index):  # known now: the branch is chosen here
    k = int(np.asarray(index))
    if not 0 <= k < len(branches):
      raise PrimcIndexError(
        f"switch: branch index {k} is out of range for {len(branches)} branches"
      )
    return branches[k](*operands)
  leaves, in_tree = _leaves(list(operands))
  avals = _avals(leaves)
  traced = []
  for k, fn in enumerate(branches):
    program, captured, out_tree = _closed(
      lambda *xs, fn=fn: fn(*tree_unflatten(in_tree, list(xs))), avals
    )
    traced.append((program, captured, out_tree))
  out_tree = traced[0][2]
  for k, (program, _, tree) in enumerate(traced):
    _check_same(f"branch {k}'s output structure", tree, out_tree)
    _check_same(f"branch {k}'s outputs", program.out_avals, traced[0][0].out_avals)
  captured = [c for _, cs, _ in traced for c in cs]
  cap_avals = [[aval_of(c) for c in cs] for _, cs, _ in traced]
  programs = []
  for k, (program, cs, _) in enumerate(traced):
    before = [a for j in range(k) for a in cap_avals[j]]
    after = [a for j in range(k + 1, len(traced)) for a in cap_avals[j]]
    # inputs: operands, then every branch's captured values in branch order
    p = _reordered(program, list(range(len(cs), len(program.inputs))) + list(range(len(cs))))
    programs.append(
      Program(
        p.inputs[: len(leaves)]
        + tuple(Var(a) for a in before)
        + p.inputs[len(leaves) :]
        + tuple(Var(a) for a in after),
        p.eqns,
        p.outputs,
      )
    )
  index = pnp.asarray(index)
  if aval_of(index).shape != ():
    raise PrimcError(f"cond/switch needs a scalar predicate or index, got {aval_of(index)}")
  index = P.convert(index, "int32") if aval_of(index).dtype != "int32" else index
  outs = bind_control(cond_p, index, *leaves, *captured, branches=tuple(programs))
  return tree_unflatten(out_tree, outs)


@_on_front_ends(_python_cond)
def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
  """true_fun(*operands) if pred else false_fun(*operands), with one branch running (a
  traced `pred` is a scalar; its truth is `pred != 0`)."""
  pred = pnp.asarray(pred)
  if aval_of(pred).shape != ():
    raise PrimcError(f"cond needs a scalar predicate, got {aval_of(pred)}")
  return switch(_truth(pred), [false_fun, true_fun], *operands)


def _truth(x):
  """A scalar's truth (x != 0) as a bool, traced or known."""
  return x if aval_of(x).dtype == "bool" else pnp.not_equal(x, 0)


@_on_front_ends(_python_while)
def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
  """val = body_fun(val) while cond_fun(val); the carry keeps its structure, shapes and
  dtypes. Forward-mode differentiable; reverse mode needs `scan` or `fori_loop` with
  constant bounds."""
  leaves, tree = _leaves(init_val)
  avals = _avals(leaves)
  unflat = lambda xs: tree_unflatten(tree, list(xs))
  cond_prog, cond_cap, _ = _closed(lambda *xs: [_truth(pnp.asarray(cond_fun(unflat(xs))))], avals)
  if cond_prog.out_avals[0].shape != ():
    raise PrimcError(f"while_loop's cond_fun must return a scalar, got {cond_prog.out_avals[0]}")
  body_prog, body_cap, body_tree = _closed(lambda *xs: body_fun(unflat(xs)), avals)
  _check_same("while_loop body's output structure", body_tree, tree)
  _check_carry("while_loop body", body_prog.out_avals, tuple(avals))
  outs = bind_control(
    while_p,
    *cond_cap,
    *body_cap,
    *leaves,
    cond=cond_prog,
    body=body_prog,
    n_cond=len(cond_cap),
    n_body=len(body_cap),
  )
  return unflat(outs)


@_on_front_ends(_python_scan, unrolled=True)
def scan(
  f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False
) -> tuple:
  """carry, y = f(carry, x) for each x along the leading axis of xs (a pytree; None with
  `length` for no xs); returns (final carry, ys stacked along a new leading axis).
  Differentiable in both modes, batchable."""
  return _scan(f, init, xs, length, reverse, "scan")


def _scan(f, init, xs, length, reverse, name):
  x_leaves, x_tree = _leaves(xs) if xs is not None else ([], None)
  lengths = {aval_of(x).shape[0] if aval_of(x).shape else None for x in x_leaves}
  if None in lengths:
    raise PrimcError("scan's xs must have a leading axis to scan over")
  if length is not None:
    lengths.add(int(length))
  if len(lengths) != 1:
    raise PrimcError(f"scan needs one length: xs' leading axes and length give {sorted(lengths)}")
  (n,) = lengths
  c_leaves, c_tree = _leaves(init)
  x_avals = [ShapedArray(aval_of(x).shape[1:], aval_of(x).dtype) for x in x_leaves]
  y_tree = []

  def body(*vals):
    carry = tree_unflatten(c_tree, list(vals[: len(c_leaves)]))
    x = tree_unflatten(x_tree, list(vals[len(c_leaves) :])) if x_tree is not None else None
    new, y = f(carry, x)
    new_leaves, new_tree = tree_flatten(new)
    _check_same("scan body's carry structure", new_tree, c_tree)
    y_leaves, tree = tree_flatten(y)
    y_tree.append(tree)
    return [pnp.asarray(v) for v in new_leaves] + [pnp.asarray(v) for v in y_leaves]

  program, captured, _ = _closed(body, _avals(c_leaves) + x_avals)
  _check_carry(
    f"{name} body",
    program.out_avals[: len(c_leaves)],
    tuple(_avals(c_leaves)),
    1 if name == "fori_loop" else 0,
  )
  outs = bind_control(
    scan_p,
    *captured,
    *c_leaves,
    *x_leaves,
    body=program,
    length=n,
    reverse=bool(reverse),
    n_consts=len(captured),
    n_carry=len(c_leaves),
  )
  return (
    tree_unflatten(c_tree, outs[: len(c_leaves)]),
    tree_unflatten(y_tree[-1], outs[len(c_leaves) :]),
  )


@_on_front_ends(_python_fori, unrolled=True)
def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
  """val = body_fun(i, val) for i in range(lower, upper). Constant bounds make it a scan
  (differentiable in both modes); traced bounds a while_loop (forward mode only)."""
  if not _traced(lower) and not _traced(upper):
    lo, hi = int(np.asarray(lower)), int(np.asarray(upper))

    def step(carry, _):
      i, val = carry
      return (P.add(i, P.full((), 1, "int32")), body_fun(i, val)), None

    (_, out), _ = _scan(
      step, (np.asarray(lo, np.int32), init_val), None, max(hi - lo, 0), False, "fori_loop"
    )
    return out
  upper = pnp.asarray(upper)
  _, _, out = while_loop(
    lambda c: pnp.less(c[0], c[1]),
    lambda c: (pnp.add(c[0], 1), c[1], body_fun(c[0], c[2])),
    (pnp.asarray(lower, aval_of(upper).dtype), upper, init_val),
  )
  return out
