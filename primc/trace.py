"""Tracing: running user Python on tracers records a `Program`.

Every operation ends in `bind(prim, args, params)`. With no trace active it runs the
primitive's numpy implementation (eager mode). While tracing, it checks shapes with the
primitive's abstract rule and appends an equation to the innermost active `Builder`
(all operations are staged, as with JAX's omnistaging). A tracer from an enclosing trace
used inside an inner one is *captured*: it becomes an extra input of the inner program,
which the transforms treat as a constant.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import os
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np

from primc import core
from primc.core import (
  ALL_INT_DTYPES,
  ConcretizationError,
  Eqn,
  Lit,
  Primitive,
  PrimcError,
  Program,
  ShapedArray,
  ShapeError,
  SUPPORTED_DTYPES,
  Var,
  abstract_rules,
  dtype_name,
  impl_rules,
  make_params,
  results,
  run,
  without_gc,
)
from primc.tree import tree_flatten, tree_unflatten

_PKG_DIRS = tuple(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + d
  for d in ("primc", "passes", "codegen")
)


class _State(threading.local):
  def __init__(self):
    self.builders: list[Builder] = []
    self.user_ops: list[str] = []
    self.refused: PrimcError | None = None  # the last write into a numpy array refused


_state = _State()
_SUPPORTED = frozenset(SUPPORTED_DTYPES)  # (asked at every traced operation)
state = _state  # (its builders, read where a call must know at once whether it traces)


class Builder:
  """Collects the equations of one trace level."""

  def __init__(self, level: int, concrete: bool = False):
    self.level = level
    self.concrete = concrete  # values computed beside the equations (see trace_flat)
    self.inputs: list[Var] = []
    self.eqns: list[Eqn] = []
    self.captured: dict[int, tuple[Tracer, Var]] = {}  # id(outer tracer) -> (tracer, var)
    # in a trace of values: each value Python read (a branch, an index), as (var, value,
    # source line), in order; the program is valid where these come out the same
    self.guards: list[tuple[Var, np.ndarray, str]] = []
    # equations of small literals alone (`x ** 2` in a loop broadcasts its 2), staged once
    # per trace level: `constant_key` -> their outputs
    self.constants: dict = {}
    # each reshape's output -> its operand (`_unreshaped`: `a[:, None]` broadcast against a
    # matrix squeezes its new axis again; that reshape is the operand itself)
    self.reshaped: dict[Var, Var] = {}
    # in a trace of values: what computes each new equation's values (`primc.tape`'s
    # `Recording`, the forward sweep made as the trace goes), None: its implementation
    self.recorder = None

  def new_input(self, aval: ShapedArray) -> "Tracer":
    v = Var(aval)
    self.inputs.append(v)
    return Tracer(self, v)

  def atom(self, x) -> Any:
    if isinstance(x, Tracer):
      if x.builder is self:
        return x.ir_var
      if x.builder.level < self.level and x.builder in _state.builders:
        if id(x) not in self.captured:
          self.captured[id(x)] = (x, Var(x.aval))
        return self.captured[id(x)][1]
      raise PrimcError(
        f"a tracer of shape {x.aval} escaped the function that made it "
        "(it was stored outside a traced function and used later)"
      )
    return x if isinstance(x, Lit) else Lit.of(x)


class Tracer:
  """A traced array value. Operators and methods dispatch to `primc.numpy`."""

  __slots__ = ("builder", "ir_var", "weak", "base", "version", "concrete")  # (not `var`)
  __array_priority__ = 1000

  def __init__(self, builder: Builder, var: Var):
    self.builder = builder
    self.ir_var = var
    self.weak = False  # stands for a Python scalar: mixed with an array it takes its dtype
    # `x[idx] = v` rebinds `ir_var` (functionalized: primc.numpy's `_setitem`) and counts
    # in `version`; an array that numpy may make a view of another (a slice, a reshape)
    # records `base`, (that array, its version then, the view ops from it): read after
    # the array changed, `bind` takes its value again (`refresh_view`), written, the
    # array takes the write too, as numpy's views do
    self.base = None
    self.version = 0
    self.concrete = None  # its value, in a trace of concrete values (trace_flat)

  @property
  def aval(self) -> ShapedArray:
    return self.ir_var.aval

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: np.dtype(self.aval.dtype))
  ndim = property(lambda self: self.aval.ndim)
  size = property(lambda self: self.aval.size)

  def __len__(self):
    if not self.shape:
      raise TypeError("len() of a 0-d traced array")
    return self.shape[0]

  def __iter__(self):  # rows, as numpy iterates (`for row in x`, `a, b = x`)
    if not self.shape:
      raise TypeError("iteration over a 0-d traced array")
    return (self[i] for i in range(self.shape[0]))

  def __repr__(self):
    return f"Tracer<{self.aval}>"

  def _read(self):
    """This value, read by Python in a trace of values (a graph break): recorded as a
    guard of the program (`Builder.guards`)."""
    _refuse_numpy_write(self)
    if self.builder.concrete:
      self.builder.guards.append((self.ir_var, self.concrete, user_source()))
    return self.concrete

  def __bool__(self):
    if self.concrete is not None:  # a trace of values: this call takes this branch
      return bool(self._read())
    raise ConcretizationError(
      f"the truth value of a traced array {self.aval} is not known while "
      f"tracing (a Python `if` or `while` on a traced value): use "
      f"primc.lax.cond / switch / while_loop / fori_loop / scan, or "
      f"pnp.where, at {user_source()}"
    )

  def _concrete(self, kind):
    _refuse_numpy_write(self)
    raise ConcretizationError(
      f"{kind}() of a traced array {self.aval} is not known while tracing "
      f"(its value exists only when the program runs): keep it an array "
      f"(pnp.astype for a dtype, the value itself in arithmetic), at "
      f"{user_source()}"
    )

  def __float__(self):
    if self.concrete is not None and self.concrete.dtype.kind in "iub":
      return float(self._read())  # a trace of values: a count (its derivative is zero)
    self._concrete("float")

  def __int__(self):
    if self.concrete is not None:  # a trace of values: a step function (derivative zero)
      return int(self._read())
    self._concrete("int")

  def __complex__(self):
    self._concrete("complex")

  def __index__(self):
    if self.concrete is not None and self.concrete.dtype.kind in "iub":
      return int(self._read())  # a trace of values: an index (its derivative is zero)
    self._concrete("index (an int)")

  def __array__(self, *a, **k):
    if self.concrete is not None and self.concrete.dtype.kind in "iub":
      return self._read()  # a trace of values: an index array (no derivative to lose)
    _refuse_numpy_write(self)
    # an index (with values: a graph break)
    if self.aval.dtype == "bool" or self.aval.dtype in ALL_INT_DTYPES:
      raise ConcretizationError(
        f"a traced index array {self.aval} cannot index a numpy array while tracing "
        f"(numpy needs its values): pnp.take(table, idx, axis=0) is table[idx] as a "
        f"gather, at {user_source()}"
      )
    raise PrimcError(
      f"a traced array {self.aval} cannot be converted to a numpy array while "
      f"tracing, at {user_source()}"
    )

  __hash__ = object.__hash__


_STORES = {dis.opmap[name] for name in ("STORE_SUBSCR", "STORE_SLICE") if name in dis.opmap}


def _refuse_numpy_write(tracer) -> None:
  """Raises where Python converts a traced value to store it into a numpy array
  (`buf[i] = x`: numpy asks the value for its float, int or array): the caller's array
  lives outside the program, so the write cannot be functionalized (a traced array's
  `x[i] = v` is: primc.numpy's `_setitem`)."""
  frame = sys._getframe(2)
  while frame is not None and frame.f_code.co_filename.startswith(_PKG_DIRS):
    frame = frame.f_back
  if frame is None or frame.f_code.co_code[frame.f_lasti] not in _STORES:
    return
  error = PrimcError(
    f"a traced value {tracer.aval} is written into a numpy array, at "
    f"{frame.f_code.co_filename}:{frame.f_lineno}: the array is outside the "
    f"program, so the write cannot become part of it. Write into a primc "
    f"array instead (buf = pnp.zeros(...) or pnp.array(buf), then "
    f"buf[i] = value; or buf.at[i].set(value)) and return it"
  )
  _state.refused = error  # numpy replaces it by its own ValueError where a scalar is
  raise error  # stored: `trace_flat` raises this one instead


def tracing() -> bool:
  """Whether a trace is active in this thread (operations are staged, not run)."""
  return bool(_state.builders)


def user_source() -> str:
  """`file:line` of the innermost frame outside primc's own packages."""
  f = sys._getframe(1)
  while f is not None:
    fn = f.f_code.co_filename
    ours = _OURS.get(fn)
    if ours is None:
      ours = _OURS[fn] = fn.startswith(_PKG_DIRS) or "contextlib" in fn
    if not ours:
      return f"{fn}:{f.f_lineno}"
    f = f.f_back
  return "<unknown>"


_OURS: dict[str, bool] = {}  # file name -> whether it is primc's own (or contextlib's)


def _source() -> str:
  """The source line an equation staged now names: the user's (`user_source`), or, while
  a program is run equation by equation with no user code in between (a transform's
  rules: `core.running`), that of the equation it is staged for (found without walking
  the stack through the transforms' frames)."""
  return core.running.source or user_source()


def user_ops() -> list[str]:
  """This thread's stack of user-facing ops being run (`user_op`)."""
  return _state.user_ops


@contextlib.contextmanager
def user_op(name: str):
  """Names the user-facing op (e.g. `matmul`) that errors inside its primitives report."""
  _state.user_ops.append(name)
  try:
    yield
  finally:
    _state.user_ops.pop()


def locate(error: PrimcError, message: str) -> PrimcError:
  """A copy of `error` with `message` and the user's source line, marked as located."""
  out = type(error)(f"{message} at {user_source()}")
  out.located = True
  return out


def aval_of(x) -> ShapedArray:
  if isinstance(x, (Tracer, Lit)):
    return x.aval
  if isinstance(x, np.ndarray):
    return ShapedArray(x.shape, x.dtype)
  if np.isscalar(x):
    return ShapedArray(np.shape(x), np.asarray(x).dtype)
  raise locate(PrimcError(), f"expected an array, got {type(x).__name__} ({x!r:.60})")


def _describe(prim: Primitive, avals, params) -> str:
  shapes = ", ".join(str(a) for a in avals)
  op = _state.user_ops[0] if _state.user_ops else prim.name
  head = op if op == prim.name else f"{op} (primitive {prim.name})"
  extra = f" with {', '.join(f'{k}={v}' for k, v in params.items())}" if params else ""
  return f"{head} on ({shapes}){extra}"


def size_constant(value, dtype: str):
  """A scalar computed from sizes (a mean's divisor): a literal that no rewrite reads as
  a value while tracing (`core.Lit.sized`), a plain 0-d array otherwise."""
  arr = np.asarray(value, dtype)
  return Lit.of(arr, sized=True) if _state.builders else arr


def _no_views(view):
  raise PrimcError("views need primc.numpy")


refresh_view = [_no_views]  # primc.numpy's: a view's value taken again from its array


def bind(prim: Primitive, args: Sequence[Any], params: dict[str, Any]):
  avals = []
  for a in args:  # (a Lit only while tracing: `size_constant`, `literal`)
    if type(a) is Tracer:  # the common case first
      if a.base is not None and a.base[0].version != a.base[1]:
        refresh_view[0](a)  # its array changed in place since: read again, as numpy's view
      avals.append(a.ir_var.aval)
    elif isinstance(a, (Tracer, np.ndarray, Lit)):
      avals.append(aval_of(a))
    elif isinstance(a, np.generic):  # numpy's scalars: as 0-d arrays
      return bind(prim, [np.asarray(x) if isinstance(x, np.generic) else x for x in args], params)
    else:
      raise locate(PrimcError(), f"{prim.name}: expected arrays, got {type(a).__name__}")
    if avals[-1].dtype not in _SUPPORTED:
      raise locate(
        PrimcError(),
        f"unsupported dtype {avals[-1].dtype} in "
        f"{_describe(prim, [aval_of(x) for x in args], params)}"
        f" (primc supports {', '.join(SUPPORTED_DTYPES)})",
      )
  builders = _state.builders
  reshape = prim.name == "reshape"
  if builders and reshape and type(args[0]) is Tracer:
    same = _unreshaped(builders[-1], args[0], params["new_sizes"])
    if same is not None:  # (before the shape rule: a reshape back is most reshapes)
      return same
  rule = abstract_rules.get(prim)
  if rule is None:
    raise PrimcError(f"primitive {prim.name} has no shape rule")
  try:
    out_aval = rule(*avals, **params)
  except ShapeError as e:
    raise locate(e, f"{_describe(prim, avals, params)}: {e}") from None
  out_avals = list(out_aval) if prim.multiple_results else [out_aval]
  if not builders:
    out = impl_rules[prim](*args, **params)
    outs = [np.asarray(o) for o in (out if prim.multiple_results else [out])]  # 0-d: arrays
    for o, a in zip(outs, out_avals, strict=True):
      assert o.shape == a.shape and dtype_name(o.dtype) == a.dtype, (prim, o.shape, o.dtype, a)
    return outs if prim.multiple_results else outs[0]
  builder = builders[-1]
  inputs = tuple(
    [a.ir_var if type(a) is Tracer and a.builder is builder else builder.atom(a) for a in args]
  )
  items = make_params(params) if params else ()
  key = constant_key(prim, items, inputs) if _constant(inputs) else None
  outs = None if key is None else builder.constants.get(key)
  if outs is None:
    outs = tuple([Var(a) for a in out_avals])
    if reshape and type(inputs[0]) is Var:
      builder.reshaped[outs[0]] = inputs[0]
    eqn = Eqn(prim, inputs, items, outs, _source())
    builder.eqns.append(eqn)
    if key is not None:
      builder.constants[key] = outs
  else:
    eqn = None  # (a constant staged before: no new equation)
  tracers = [Tracer(builder, v) for v in outs]
  if builder.concrete:
    _compute_beside(prim, args, params, tracers, builder.recorder if eqn else None, eqn)
  return tracers if prim.multiple_results else tracers[0]


def _reshaped_back(builder: Builder, v: Var, shape: tuple) -> Var | None:
  """The operand `v` was reshaped from, where it has `shape` (a reshape of `v` to it is
  that operand, no equation: `a[:, None]` broadcast against a matrix squeezes its new
  axis again), else None."""
  source = builder.reshaped.get(v)
  return source if source is not None and source.aval.shape == shape else None


def _unreshaped(builder: Builder, x: Tracer, new_sizes: tuple) -> Tracer | None:
  """A reshape of `x` back to the shape of the operand `x` was reshaped from: that operand
  (no equation), or None."""
  if x.builder is not builder:
    return None
  source = _reshaped_back(builder, x.ir_var, tuple(new_sizes))
  if source is None:
    return None
  out = Tracer(builder, source)
  if builder.concrete and x.concrete is not None:
    out.concrete = np.reshape(x.concrete, source.aval.shape)
  return out


def _compute_beside(prim: Primitive, args, params, tracers, recorder=None, eqn=None) -> None:
  """In a trace of concrete values: each result's value, by the numpy implementation or
  by the builder's `recorder` of the new equation `eqn` (an argument without a value
  leaves the results without)."""
  values = []
  for a in args:
    value = a.concrete if isinstance(a, Tracer) else a.value if isinstance(a, Lit) else a
    if value is None:
      return
    values.append(value)
  if recorder is not None:
    out = _eagerly(lambda: recorder(eqn, values))  # (outputs, then residuals)
  else:
    out = _eagerly(lambda: impl_rules[prim](*values, **params))
    out = out if prim.multiple_results else (out,)
  for t, o in zip(tracers, out):
    t.concrete = np.asarray(o)


def _eagerly(thunk):
  """`thunk()` with no trace active (a rule running a program runs it eagerly) and numpy's
  floating-point errors ignored (IEEE results, as compiled code gives them)."""
  builders, _state.builders = _state.builders, []
  try:
    with np.errstate(all="ignore"):
      return thunk()
  finally:
    _state.builders = builders


def values_beside(program: Program, values: Sequence) -> list:
  """`program`'s outputs on `values` by each equation's numpy implementation, as `bind`
  computes each result's value beside a trace of values (`_compute_beside`)."""
  apply = lambda eqn, xs: [np.asarray(o) for o in results(eqn, impl_rules[eqn.prim](*xs, **eqn.kw))]
  return _eagerly(lambda: run(program, values, apply))


core.binder[0] = bind  # Primitive.bind calls it


def weak_leaves(leaves: Sequence) -> tuple[bool, ...]:
  """Which arguments are Python scalars (float, int, bool): traced as weak values
  (`Tracer.weak`)."""
  return tuple([type(x) in WEAK_TYPES for x in leaves])


WEAK_TYPES = (float, int, bool)


@without_gc
def trace_flat(
  fn: Callable,
  in_avals: Sequence[ShapedArray],
  weak: Sequence[bool] = (),
  concrete: Sequence | None = None,
  guards: list | None = None,
  recorder=None,
) -> tuple[Program, list, Any]:
  """Traces `fn(*flat_tracers)` (returning a pytree of arrays) into a Program; the inputs
  flagged in `weak` stand for Python scalars (`weak_leaves`). With `concrete` (the
  inputs' values), every traced value carries its value too, so Python's `if x > 0:` and
  `a[i]` take this call's branch and index: the program is this call's path, valid for
  these values (a transform of it runs once, as autograd's tape does). The values Python
  read on the way (graph breaks: `Tracer._read`) are then the program's last outputs,
  their (value, source line) appended to `guards`: the program is valid for other
  inputs where they come out the same (`lift_guards`, `primc.compile`'s paths).
  `recorder` (with `concrete`): computes each equation's values as the trace goes, and
  is given the program's equations and its outputs' values at the end (`primc.tape`'s
  `Recording`: the forward sweep of a transform run on these values once).

  Returns:
    (program, captured, out_tree): the program's inputs are the given avals followed by one
    input per captured outer tracer (`captured`, to be passed when the program is run).
  """
  builder = Builder(len(_state.builders), concrete is not None)
  _state.builders.append(builder)
  running, core.running.source = core.running.source, None  # (the function's own lines)
  try:
    args = [builder.new_input(a) for a in in_avals]
    for arg, is_weak in zip(args, weak):
      arg.weak = is_weak
    for arg, value in zip(args, concrete or ()):
      arg.concrete = None if value is None else np.asarray(value)
    if recorder is not None and concrete is not None:
      builder.recorder = recorder
      recorder.begin(builder.inputs, [arg.concrete for arg in args])
    _state.refused = None
    try:
      out = fn(*args)
    except ValueError as e:
      if _state.refused is not None and "sequence" in str(e):
        raise _state.refused from None
      raise
    leaves, out_tree = tree_flatten(out)
    out_atoms = []
    for x in leaves:
      if not isinstance(x, (Tracer, np.ndarray, Lit)) and not np.isscalar(x):
        raise PrimcError(f"a traced function returned {type(x).__name__}, expected arrays")
      out_atoms.append(builder.atom(x if isinstance(x, (Tracer, Lit)) else np.asarray(x)))
    if builder.recorder is not None:
      builder.recorder.finish(builder.eqns, _values_of(out_atoms, leaves))
    if guards is not None:
      out_atoms += [var for var, _, _ in builder.guards]
      guards += [(value, source) for _, value, source in builder.guards]
  finally:
    _state.builders.pop()
    core.running.source = running
  captured = [t for t, _ in builder.captured.values()]
  inputs = tuple(builder.inputs) + tuple(v for _, v in builder.captured.values())
  return Program(inputs, tuple(builder.eqns), tuple(out_atoms)), captured, out_tree


def _values_of(atoms: list, leaves: list) -> dict:
  """{output variable: its value} of a trace of values (those that have one)."""
  values = {}
  for a, x in zip(atoms, leaves):
    value = x.concrete if type(x) is Tracer else None
    if type(a) is Var and value is not None:
      values[a] = value
  return values


def trace_path(
  fn: Callable, args: Sequence, values: Sequence, weak: Sequence[bool] = ()
) -> tuple[Program, list, Any]:
  """`fn` traced on `args` carrying `values`: the path they take (`trace_flat(concrete=)`),
  its guards made the enclosing trace's (`lift_guards`). Returns as `trace_flat`."""
  guards = []
  program, captured, out_tree = trace_flat(fn, [aval_of(x) for x in args], weak, values, guards)
  return lift_guards(program, guards, [*args, *captured]), captured, out_tree


def lift_guards(program: Program, guards: Sequence, args: Sequence) -> Program:
  """`program` (traced with `guards=`) without its guard outputs. Inside an enclosing
  trace of values (a transform called under `jit`'s graph breaks, perhaps within a
  transform that traces without values, as jacfwd's vmap), its guards become guards of
  the innermost such trace that holds every value they read: the part of the program
  that computes them is run there on `args` (the program's inputs, captured ones
  included), so that trace's program checks them too."""
  n = len(guards)
  if not n:
    return program
  main = Program(program.inputs, program.eqns, program.outputs[:-n])
  tail = _pruned(Program(program.inputs, program.eqns, program.outputs[-n:]))
  used = {id(a) for e in tail.eqns for a in e.inputs} | {id(a) for a in tail.outputs}
  pairs = [(v, x) for v, x in zip(program.inputs, args) if id(v) in used]
  tail = Program(tuple(v for v, _ in pairs), tail.eqns, tail.outputs)
  levels = [x.builder.level for _, x in pairs if isinstance(x, Tracer)]
  target = next(
    (
      b
      for b in reversed(_state.builders)
      if b.concrete and all(level <= b.level for level in levels)
    ),
    None,
  )
  if target is None:
    if builtins.any(b.concrete for b in _state.builders):  # (no value could be read)
      raise ConcretizationError("a graph break reads a value no enclosing trace has")
    return main  # run once, as it is: nothing to check later
  stack = _state.builders
  _state.builders = stack[: target.level + 1]
  try:
    outs = eval_program(tail, *[x for _, x in pairs])
  finally:
    _state.builders = stack
  for t, (value, source) in zip(outs, guards):
    if isinstance(t, Tracer) and t.builder is target:
      target.guards.append((t.ir_var, value, source))
  return main


def _pruned(program: Program) -> Program:
  """The equations the outputs need (no equation has an effect)."""
  live = {id(v) for v in program.outputs if isinstance(v, Var)}
  kept = []
  for eqn in reversed(program.eqns):
    if any(id(v) in live for v in eqn.outputs):
      kept.append(eqn)
      live.update(id(a) for a in eqn.inputs if isinstance(a, Var))
  return Program(program.inputs, tuple(reversed(kept)), program.outputs)


def literal(a: Lit):
  """A literal of a program being run again: its value, or, while tracing, the literal
  itself where it is a size (`Lit.sized`), so the program made keeps it a size."""
  return a if a.sized and _state.builders else a.value


def eval_program(program: Program, *args) -> list:
  """Runs a program by binding each equation: eager on arrays, staged while tracing."""
  if _state.builders and not _state.builders[-1].concrete and _stageable(program, args):
    return _stage(program, args)  # (a trace of values binds: each value computed beside)
  return run(program, args, _bound, lit=literal)


def _bound(eqn: Eqn, xs: list) -> list:
  """`eqn` bound on `xs` (`eval_program`); an error its implementation raises on values
  (an index out of bounds in a loop's body) names the op, its operands and the equation's
  line, as a staged op's error does."""
  try:
    return results(eqn, eqn.prim.bind(*xs, **eqn.kw))
  except PrimcError as e:
    if getattr(e, "located", False):
      raise
    operands = ", ".join(str(aval_of(x)) for x in xs)
    out = type(e)(f"{eqn.prim.name} on ({operands}): {e} at {eqn.source or user_source()}")
    out.located = True
    raise out from None


def _stageable(program: Program, args) -> bool:
  """Whether `args` are arrays of exactly the program's input types (so every equation's
  shape rule holds again as it held when the program was made)."""
  if len(args) != len(program.inputs):
    return False
  for x, v in zip(args, program.inputs):
    if isinstance(x, Tracer):
      if x.ir_var.aval != v.aval:
        return False
    elif (
      not isinstance(x, np.ndarray)
      or x.shape != v.aval.shape
      or (dtype_name(x.dtype) != v.aval.dtype)
    ):
      return False
  return True


def _stage(program: Program, args) -> list:
  """`eval_program` into the innermost trace, for arguments of the program's own input
  types: each equation copied with fresh outputs, no shape rule run again (the program
  is typechecked as it was made, and its inputs are of the same types), keeping the
  source line it was made at. Half of a nested derivative's equations are staged this
  way (a transform's program evaluated into its caller's trace)."""
  builder = _state.builders[-1]
  env = {v: builder.atom(x) for v, x in zip(program.inputs, args)}
  eqns, n = builder.eqns, len(env)
  for eqn in program.eqns:
    inputs = tuple([a if type(a) is Lit else env[a] for a in eqn.inputs])
    outs = _fresh_outputs(eqn, env)
    eqns.append(Eqn(eqn.prim, inputs, eqn.params, outs, eqn.source or _source()))
    n += len(outs)
  if n != len(env):  # (a variable assigned twice: fewer entries than assignments)
    raise core.TypeCheckError("a variable is assigned twice in a program staged again")
  given = dict(zip(program.inputs, args))  # an input given back is the argument itself
  return [
    literal(a) if isinstance(a, Lit) else given[a] if a in given else Tracer(builder, env[a])
    for a in program.outputs
  ]


def stages_directly(x) -> bool:
  """Whether `stage_known` may stage an equation of `x`: a traced value of the innermost
  trace, one of abstract values, not a view (whose array may have changed: `bind`)."""
  return (
    type(x) is Tracer
    and x.base is None
    and bool(_state.builders)
    and x.builder is _state.builders[-1]
    and not x.builder.concrete
  )


def stage_known(prim: Primitive, x: Tracer, params: dict, out_aval: ShapedArray) -> Tracer:
  """`prim.bind(x, **params)` for an op that has checked its operand and computed the
  result's type itself (`x[i]` over a loop's i: the shape rule and bind's generality
  were most of its cost), where `stages_directly(x)`: the same equation, staged."""
  builder = x.builder
  out = Var(out_aval)
  if prim.name == "reshape":
    builder.reshaped[out] = x.ir_var
  builder.eqns.append(Eqn(prim, (x.ir_var,), make_params(params), (out,), _source()))
  return Tracer(builder, out)


def _fresh_outputs(eqn: Eqn, env: dict) -> tuple:
  """New variables for `eqn`'s outputs, entered in `env` (one output without a list)."""
  if len(eqn.outputs) == 1:
    out = env[eqn.outputs[0]] = Var(eqn.outputs[0].aval)
    return (out,)
  outs = tuple([Var(v.aval) for v in eqn.outputs])
  env.update(zip(eqn.outputs, outs))
  return outs


_PLAIN, _RESHAPE, _CONSTANT = 0, 1, 2  # `restage_kinds`


def restage_kinds(program: Program) -> tuple[int, ...]:
  """Per equation of `program`, how `restage` stages it: a reshape of an input (perhaps
  back to its operand), an equation of literals alone, or plainly."""
  return tuple(
    [
      _RESHAPE
      if eqn.prim.name == "reshape" and type(eqn.inputs[0]) is Var
      else _CONSTANT
      if _constant(eqn.inputs)
      else _PLAIN
      for eqn in program.eqns
    ]
  )


SHARED_LITERAL_BYTES = 1024  # a literal this small or smaller is compared by its bytes


def _constant(inputs: tuple) -> bool:
  """Whether an equation of these inputs is of small literals alone (or none: a generator),
  staged once per trace level (`constant_key`): a Python number broadcast in a loop is one
  equation, not one per step."""
  for a in inputs:
    if type(a) is not Lit or a.value.nbytes > SHARED_LITERAL_BYTES:
      return False
  return True  # (no inputs: a generator)


def constant_key(prim, params: tuple, inputs: tuple) -> tuple:
  """What an equation of small literals alone (`_constant`) is staged once per trace level
  by: the same key whether it is bound (`bind`) or restaged from an op's record
  (`restage`), so a trace is the same whether its ops run or are replayed."""
  return ("constant", prim, params, inputs)


def restage(
  program: Program, args: Sequence, kinds: Sequence[int], values: list | None = None
) -> list:
  """`program`'s equations staged into the innermost trace on `args` (its tracers, and
  arrays as literals), each with fresh outputs and the user's source line, as `bind`
  would stage them one by one, for a program recorded on arguments of these types
  (`primc.numpy._recorded`: no shape rule runs again; `kinds`: `restage_kinds`). As in
  `bind`, a reshape back to the shape its operand was reshaped from is that operand
  (`_unreshaped`); an equation of literals alone (a Python number broadcast) is staged
  once per trace level, as `primc.numpy._base._weak_constant` stages one. Returns the
  outputs' atoms. `values` (a list, in a trace of values whose builder records,
  `Builder.recorder`): the outputs' values are appended to it, each new equation's
  computed by the recorder, as `bind` computes them; left empty where an argument has
  no value."""
  builder = _state.builders[-1]
  env = {}
  for v, x in zip(program.inputs, args):
    env[v] = x.ir_var if type(x) is Tracer else Lit.of(x)
  known = None if values is None else _known(program, args)
  source = _source()
  stage = lambda: _restage_eqns(program, kinds, builder, env, known, source)
  if known is None:
    stage()
  else:
    _eagerly(stage)  # (one for every equation's value, not one each)
    values += [a.value if type(a) is Lit else known[a] for a in program.outputs]
  return [a if type(a) is Lit else env[a] for a in program.outputs]


def _restage_eqns(program, kinds, builder, env: dict, known: dict | None, source: str) -> None:
  """`restage`'s equations staged into `builder` (`env`: the program's variables' atoms
  there, updated), their values computed beside into `known` (where it is not None:
  inside `_eagerly`)."""
  eqns = builder.eqns
  for eqn, kind in zip(program.eqns, kinds):
    inputs = tuple([a if type(a) is Lit else env[a] for a in eqn.inputs])
    if kind == _RESHAPE:
      same = _reshaped_back(builder, inputs[0], eqn.outputs[0].aval.shape)
      if same is not None:
        env[eqn.outputs[0]] = same
        _value_beside(known, eqn)
        continue
    elif kind == _CONSTANT:
      key = constant_key(eqn.prim, eqn.params, inputs)
      outs = builder.constants.get(key)
      if outs is not None:
        env.update(zip(eqn.outputs, outs))
        _value_beside(known, eqn)
        continue
    outs = _fresh_outputs(eqn, env)
    if kind == _RESHAPE:
      builder.reshaped[outs[0]] = inputs[0]
    elif kind == _CONSTANT:
      builder.constants[key] = outs
    staged = Eqn(eqn.prim, inputs, eqn.params, outs, source)
    eqns.append(staged)
    _value_beside(known, eqn, staged, builder.recorder)


def _known(program: Program, args: Sequence) -> dict | None:
  """{input of `program`: its argument's value}, None where an argument has none."""
  known = {}
  for v, x in zip(program.inputs, args):
    known[v] = x.concrete if type(x) is Tracer else np.asarray(x)
    if known[v] is None:
      return None
  return known


def _value_beside(known: dict | None, eqn: Eqn, staged: Eqn | None = None, recorder=None):
  """`restage`'s values: `eqn`'s outputs in `known` (by the recorder of the equation it
  `staged`, else its implementation; inside restage's `_eagerly`)."""
  if known is None:
    return
  xs = [a.value if type(a) is Lit else known[a] for a in eqn.inputs]
  if recorder is not None and staged is not None:
    outs = recorder(staged, xs)
  else:
    outs = results(eqn, impl_rules[eqn.prim](*xs, **eqn.kw))
  known.update(zip(eqn.outputs, outs))


def make_program(
  fn: Callable, *, static_argnums: int | Sequence[int] = ()
) -> Callable[..., Program]:
  """`make_program(fn)(*example_args)` traces `fn` into a printable `Program`.

  Arguments may be pytrees of arrays; only shapes and dtypes of the examples matter.
  Outer tracers captured by `fn` (when called inside another trace) become extra inputs.
  """

  def build(*args) -> Program:
    static = {i: args[i] for i in static_argnums}
    dyn = [a for i, a in enumerate(args) if i not in static]
    leaves, in_tree = tree_flatten(dyn)
    weak = weak_leaves(leaves)
    leaves = [as_array(x) for x in leaves]

    def flat_fn(*xs):
      it = iter(tree_unflatten(in_tree, xs))
      full = [static[i] if i in static else next(it) for i in range(len(args))]
      return fn(*full)

    program, _, _ = trace_flat(flat_fn, [aval_of(x) for x in leaves], weak)
    return program

  return build


def plain_array(x: np.ndarray) -> np.ndarray:
  """An ndarray subclass as a plain array, where that loses nothing: a masked array is
  refused (its mask would be silently ignored), np.matrix keeps its 2-D values."""
  if isinstance(x, np.ma.MaskedArray):
    raise locate(
      PrimcError(),
      f"masked arrays are not supported (a masked array of shape "
      f"{x.shape} would lose its mask): pass np.ma.filled(x, fill) or x.data",
    )
  return x.view(np.ndarray)


# scalars of these exact types as 0-d arrays: Python floats float64, ints int64 (numpy's
# defaults; traced, they stay weak: `weak_leaves`); numpy scalars keep their dtype. The
# compiled call's fast path uses the same table.
SCALAR_ARRAYS = {
  float: lambda a: np.asarray(a, np.float64),
  int: lambda a: np.asarray(a, np.int64),
  bool: np.asarray,
  np.float32: np.asarray,
  np.float64: np.asarray,
  np.int32: np.asarray,
  np.int64: np.asarray,
  np.bool_: np.asarray,
}


def as_array(x):
  """Arguments are arrays; Python scalars become 0-d arrays (float64 / int64 / bool, as
  numpy makes them)."""
  if isinstance(x, Tracer):
    return x
  convert = SCALAR_ARRAYS.get(type(x))
  if convert is not None:
    return convert(x)
  if isinstance(x, np.ndarray):
    if type(x) is not np.ndarray:
      return as_array(plain_array(x))
    if dtype_name(x.dtype) not in _SUPPORTED:
      raise locate(
        PrimcError(),
        f"unsupported dtype {x.dtype.name} for an array of shape "
        f"{x.shape} (primc supports {', '.join(SUPPORTED_DTYPES)})",
      )
    return x
  if isinstance(x, np.generic):  # before float: np.float64 is a subclass of float
    return as_array(np.asarray(x))
  if isinstance(x, bool):
    return np.asarray(x)
  if isinstance(x, int):
    return np.asarray(x, np.int64)
  if isinstance(x, float):
    return np.asarray(x, np.float64)
  raise locate(PrimcError(), f"expected an array argument, got {type(x).__name__} ({x!r:.60})")
