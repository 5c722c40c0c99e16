"""Eager tensors with a tape, on the compiled core (Paddle dygraph and MegEngine
GradManager styles).

A `Tensor` holds a numpy value. Every `primc.numpy` op applied to tensors runs eagerly
and, when an input requires a gradient, records a node: the op as a replayable primc
function of its input values. A backward replays the recorded subgraph as one function,
takes its `vjp` with primc's program transforms, and runs the result as compiled code
(cached by program: a training loop compiles once). Because nodes are primc functions, a
backward can itself be recorded and differentiated again (`create_graph=True`, nested
`GradManager`s).

Paddle semantics: user tensors default to `stop_gradient=True`, parameters to False;
`backward(retain_graph=False)` frees the recorded graph; gradients accumulate in `.grad`.
MegEngine semantics: a `GradManager` records the ops run inside its `with` block on
tensors it `attach`ed; its `backward` is recorded only by managers entered outside it
(so the nesting order matters), and `gm | gm2` makes two peers that cannot see each
other's backward.
"""

from __future__ import annotations

import collections
import functools
import threading
from typing import Any, Callable, Sequence

import numpy as np

from primc import api
from primc import compile as compiler
from primc import numpy as pnp
from primc.core import ConcretizationError, PrimcError
from primc.custom import custom_vjp
from primc.settings import config
from primc.trace import Tracer, as_array, make_program, plain_array, trace_path, tracing
from primc.tree import partial_over_leaves, tree_flatten, tree_unflatten


class _State(threading.local):
  def __init__(self):
    self.levels: list[list["GradManager"]] = []  # active GradManager scopes, outermost first
    self.recording = True  # False while an unobserved backward runs


_state = _State()


class Node:
  """A recorded op: `fn(*input_values)` recomputes its output(s) with primc ops."""

  __slots__ = ("fn", "inputs", "n_out", "freed", "multi")

  def __init__(self, fn, inputs, n_out, multi):
    self.fn, self.inputs, self.n_out, self.multi = fn, inputs, n_out, multi
    self.freed = False


class Tensor:
  """An eager array that can record the ops applied to it (see the module docstring)."""

  __array_priority__ = 1000

  def __init__(self, value, stop_gradient: bool = True, node: Node | None = None, index=0):
    if isinstance(value, Tensor):
      value = value.value
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
      value = plain_array(value)  # refuses a masked array
    self.value = value if isinstance(value, Tracer) else np.asarray(value)
    self.stop_gradient = stop_gradient
    self.grad: Tensor | None = None
    self.node = node
    self.index = index
    self.managers: set = set()

  # -- array protocol ------------------------------------------------------------------
  shape = property(lambda self: tuple(self.value.shape))
  dtype = property(lambda self: self.value.dtype)
  ndim = property(lambda self: len(self.value.shape))
  size = property(lambda self: int(np.prod(self.value.shape)))

  def numpy(self) -> np.ndarray:
    return np.asarray(self.value)

  def __array__(self, dtype=None, copy=None):
    return np.asarray(self.value, dtype)

  def __repr__(self):
    return f"Tensor({self.numpy()!r}, stop_gradient={self.stop_gradient})"

  def __len__(self):
    return len(self.value)

  def __iter__(self):  # rows, each a (recorded) indexing op
    if not self.shape:
      raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))

  def __float__(self):
    return float(self.numpy())

  def item(self):
    return self.numpy().item()

  def detach(self) -> "Tensor":
    return Tensor(self.value)

  # -- gradients -----------------------------------------------------------------------
  def tracks_grad(self) -> bool:
    """Whether ops on this tensor are recorded: it requires a gradient, was computed by a
    recorded op (and not cut off with `stop_gradient = True`), or an active GradManager
    has it attached."""
    if self.node is not None and self.stop_gradient:
      return any(m.active() for m in self.managers)
    return (
      (not self.stop_gradient) or self.node is not None or any(m.active() for m in self.managers)
    )

  @property
  def requires_grad(self) -> bool:
    """PyTorch's and MindSpore's name for `not stop_gradient` (settable)."""
    return not self.stop_gradient

  @requires_grad.setter
  def requires_grad(self, value: bool) -> None:
    self.stop_gradient = not value

  def backward(self, grad_tensor=None, retain_graph: bool = False) -> None:
    """Accumulates d self / d t into `t.grad` for every tensor t of the recorded graph with
    `stop_gradient=False` (leaves and intermediates); frees the graph unless
    `retain_graph`."""
    if not self.tracks_grad():
      raise PrimcError(
        "backward() of a tensor that does not require a gradient (no input had stop_gradient=False)"
      )
    nodes = _collect([self], lambda t: False)
    targets = [t for t in _graph_tensors([self], nodes) if not t.stop_gradient or t is self]
    grads = _vjp([self], targets, [grad_tensor], nodes, record=False)
    for t, g in zip(targets, grads):
      _accumulate(t, g)
    if not retain_graph:
      for n in nodes:
        n.freed = True

  def gradient(self) -> np.ndarray | None:
    return None if self.grad is None else self.grad.numpy()

  def clear_grad(self) -> None:
    if self.grad is not None:
      self.grad = Tensor(np.zeros_like(self.grad.numpy()))

  clear_gradient = clear_grad


def to_tensor(data: Any, dtype: Any = None, stop_gradient: bool = True) -> Tensor:
  """A tensor from data (Python floats become float32, ints int32, as in primc.numpy)."""
  if isinstance(data, np.ndarray) and type(data) is not np.ndarray:
    data = plain_array(data)
  value = (
    np.asarray(data, dtype)
    if dtype is not None
    else np.asarray(as_array(np.asarray(data) if isinstance(data, (list, tuple)) else data))
  )
  if value.dtype == np.float64 and dtype is None and not isinstance(data, np.ndarray):
    value = value.astype(np.float32)
  return Tensor(value, stop_gradient=stop_gradient)


# ---------------------------------------------------------------------------------------
# Applying ops


def on_values(func, args, kwargs):
  """A numpy function primc.numpy lacks, applied to tensors' values: allowed only where no
  gradient is lost (no tensor among the arguments requires one); returns numpy arrays."""
  leaves = tree_flatten((list(args), kwargs))[0]
  if any(isinstance(t, Tensor) and t.tracks_grad() for t in leaves):
    name = getattr(func, "__name__", repr(func))
    raise PrimcError(
      f"numpy.{name} of a tensor that requires a gradient would lose it: "
      f"use primc.numpy's ops, or .detach() / .numpy() first"
    )
  unwrap = lambda x: x.numpy() if isinstance(x, Tensor) else x
  args, kwargs = tree_unflatten(tree_flatten((list(args), kwargs))[1], list(map(unwrap, leaves)))
  return func(*args, **kwargs)


def apply(fn: Callable, args, kwargs):
  """Runs a primc.numpy op on tensors; records a node when an input requires a gradient."""
  replay, tensors = partial_over_leaves(fn, args, kwargs, lambda x: isinstance(x, Tensor))
  values = [t.value for t in tensors]
  if tracing():
    return _traced_apply(fn, args, kwargs, replay, tensors, values)
  out = replay(*values)
  record = (
    _state.recording
    and any(t.tracks_grad() for t in tensors)
    and not any(isinstance(v, Tracer) for v in values)
  )
  out_leaves, out_tree = tree_flatten(out)
  node = (
    Node(replay, tensors, len(out_leaves), not (len(out_leaves) == 1 and out_tree.kind == "leaf"))
    if record
    else None
  )
  # an integer or bool result (a comparison, an argmax) has no gradient: a constant of
  # the graph from there on (Paddle's stop_gradient=True), never a tensor backward must
  # differentiate
  wrapped = [
    Tensor(v, stop_gradient=not record or np.asarray(v).dtype.kind != "f", node=node, index=k)
    for k, v in enumerate(out_leaves)
  ]
  return tree_unflatten(out_tree, wrapped)


def _traced_apply(fn, args, kwargs, replay, tensors, values):
  """An op on tensors inside a trace (jit, grad, vmap of a function that calls a layer):
  tensors read as their values, the result traced. A trainable parameter's value is
  refused: the compiled program would keep it as a constant, stale after the optimizer's
  next step; `primc.nn.functional_call` passes parameters as arguments."""
  traced = any(isinstance(x, Tracer) for x in values + tree_flatten((list(args), kwargs))[0])
  if not traced:
    return replay(*values)  # no traced operand: a constant of the trace
  for t, v in zip(tensors, values):
    if not t.stop_gradient and not isinstance(v, Tracer):
      raise PrimcError(
        f"a trainable parameter {getattr(t, 'name', None) or ''} of shape "
        f"{tuple(np.shape(v))} is read inside a traced function ({getattr(fn, '__name__', fn)}): "
        f"a compiled program would keep its value as a constant, stale after the next "
        f"optimizer step; pass the parameters as arguments with "
        f"primc.nn.functional_call(model, params, *args), or call model.eval() and "
        f"primc.nn.freeze(model) for inference"
      )
  return replay(*values)


# ---------------------------------------------------------------------------------------
# Backward: replay the recorded subgraph, vjp, compiled


def _collect(outputs: Sequence[Tensor], is_leaf) -> list[Node]:
  """Nodes between `outputs` and the leaves, in topological order."""
  order, seen = [], set()

  def visit(t):
    node = t.node
    if node is None or is_leaf(t) or _cut(t) or id(node) in seen:
      return
    seen.add(id(node))
    if node.freed:
      raise PrimcError(
        "backward through a graph that was already freed: call "
        "backward(retain_graph=True) the first time to keep it"
      )
    for i in node.inputs:
      visit(i)
    order.append(node)

  for t in outputs:
    visit(t)
  return order


def _cut(t: Tensor) -> bool:
  """A recorded tensor whose user set `stop_gradient = True`: a constant from there on."""
  return t.node is not None and t.stop_gradient


def _read(outputs, nodes, exclude_ids) -> list[Tensor]:
  """The tensors a replay of `nodes` reads (not recomputes), besides those in
  `exclude_ids`."""
  replayed = {id(n) for n in nodes}
  return [
    t
    for t in _graph_tensors(outputs, nodes)
    if id(t) not in exclude_ids
    and not (t.node is not None and not _cut(t) and id(t.node) in replayed)
  ]


def _other_leaves(outputs, nodes, exclude_ids) -> list[Tensor]:
  """The float tensors a replay reads that track a gradient: a recorded transform takes
  them as inputs."""
  return [
    t
    for t in _read(outputs, nodes, exclude_ids)
    if t.tracks_grad() and np.dtype(t.dtype).kind == "f"
  ]


def _constants(outputs, nodes, exclude_ids) -> list[Tensor]:
  """The tensors holding arrays a replay reads: the backward program takes them as
  inputs, so a new batch of data runs the program made for the last one (as `jit`
  takes its arguments)."""
  return [t for t in _read(outputs, nodes, exclude_ids) if type(t.value) is np.ndarray]


def _graph_tensors(outputs, nodes) -> list[Tensor]:
  """Every tensor of the recorded graph (outputs, intermediates, leaves), deduplicated."""
  out, seen = [], set()
  for t in list(outputs) + [i for n in nodes for i in n.inputs]:
    if id(t) not in seen:
      seen.add(id(t))
      out.append(t)
  return out


def _replay_fn(outputs, leaves, perturbed, nodes):
  """(leaf values..., perturbations...) -> output values, re-running the recorded ops;
  a zero perturbation added to an intermediate gives its gradient."""
  leaf_ids = {id(t): k for k, t in enumerate(leaves)}
  pert_ids = {(id(t.node), t.index): k for k, t in enumerate(perturbed)}

  def replay(*vals):
    leaf_vals, perts = vals[: len(leaves)], vals[len(leaves) :]
    results: dict[int, Any] = {}

    def value(t):
      if id(t) in leaf_ids:
        return leaf_vals[leaf_ids[id(t)]]
      if not _cut(t) and t.node is not None and id(t.node) in results:
        r = results[id(t.node)]
        v = tree_flatten(r)[0][t.index]
        k = pert_ids.get((id(t.node), t.index))
        return v if k is None else v + perts[k]
      return t.value

    for node in nodes:
      results[id(node)] = node.fn(*[value(i) for i in node.inputs])
    return [value(o) for o in outputs]

  return replay


# backward executables by program key, least recently used first (at most TAPE_KEYS_MAX)
# backward executables by tape key (see _tape_key): a repeated backward skips tracing
_by_tape: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()
TAPE_KEYS_MAX = 256
CONST_KEY_MAX_BYTES = 1 << 14  # constant tensors up to this size are keyed by value


def _run_compiled(fn, args, tape_key=None) -> list:
  """Traces `fn(*args)`, compiles it (or finds it compiled: `primc.compile.executable`)
  and runs it. With a `tape_key` that ran before, runs its executable without tracing."""
  arrays = [np.asarray(a) for a in args]
  exe = None if tape_key is None else _by_tape.get(tape_key)
  if exe is None:
    try:
      program = make_program(fn)(*arrays)
    except ConcretizationError:  # Python reads values (a custom rule's loop): this path,
      # traced on these values, run once and not kept under the tape's key
      program = trace_path(lambda *xs: list(fn(*xs)), arrays, arrays)[0]
      return compiler.executable(program)(arrays)
    exe = compiler.executable(program)
    if tape_key is not None:
      _by_tape[tape_key] = exe
      if len(_by_tape) > TAPE_KEYS_MAX:
        _by_tape.popitem(last=False)
  return exe(arrays)


class _Unkeyable(Exception):
  pass


@functools.cache
def _stable_ops() -> frozenset:
  """The op functions a node may replay that live as long as the process and read no
  state: primc.numpy's ops, the tensor methods and the library ops that take front ends
  (primc.lax's convolutions, primc.scipy's functions)."""
  ops = [getattr(f, "__wrapped_op__", None) for f in vars(pnp).values()]
  ops += [m.fget if isinstance(m, property) else m for m in pnp._TRACER_METHODS.values()]
  ops += pnp._LIBRARY_OPS
  return frozenset(id(f) for f in ops if f is not None)


def _value_key(x):
  """A hashable stand-in for a value baked into a traced program (by value)."""
  if x is None or x is Ellipsis or isinstance(x, (bool, int, float, complex, str)):
    return (type(x), x)  # a NaN never equals itself: such a key only misses
  if isinstance(x, np.generic):
    return (type(x), x.item())
  if isinstance(x, slice):
    return (slice, _value_key(x.start), _value_key(x.stop), _value_key(x.step))
  if isinstance(x, np.dtype):
    return (np.dtype, x.str)
  if isinstance(x, type):
    return (type, x)
  if isinstance(x, np.ndarray) and x.nbytes <= CONST_KEY_MAX_BYTES:
    return (np.ndarray, x.shape, x.dtype.str, x.tobytes())
  raise _Unkeyable


def _tape_key(outputs, leaves, perturbed, nodes, ct_vals):
  """Everything the backward program traced from a tape depends on: each node's op and its
  static arguments (by value), how its inputs are reached (a leaf, a node output, a
  perturbed output, or a constant tensor, by value), the shapes and dtypes of leaves and
  cotangents, and the transform settings. None when some part has no safe key (a large
  constant, an unknown argument type): the backward is then traced as before."""
  stable = _stable_ops()
  leaf_of = {id(t): k for k, t in enumerate(leaves)}
  node_of = {id(n): k for k, n in enumerate(nodes)}
  pert_of = {(id(t.node), t.index): k for k, t in enumerate(perturbed)}

  def ref(t):  # mirrors _replay_fn's `value`
    if id(t) in leaf_of:
      return ("leaf", leaf_of[id(t)])
    if t.node is not None and id(t.node) in node_of:
      return ("node", node_of[id(t.node)], t.index, pert_of.get((id(t.node), t.index)))
    if isinstance(t.value, Tracer):
      raise _Unkeyable
    return ("const", _value_key(t.value))

  try:
    parts = []
    for node in nodes:
      fn, tree, positions, static = node.fn.parts
      if id(fn) not in stable:
        raise _Unkeyable
      parts.append(
        (fn, tree, positions, tuple(map(_value_key, static)), tuple(map(ref, node.inputs)))
      )
    aval = lambda t: (tuple(t.shape), np.dtype(t.dtype).str)
    return (
      tuple(parts),
      tuple(map(ref, outputs)),
      tuple(map(aval, leaves)),
      tuple(map(aval, perturbed)),
      tuple(map(aval, ct_vals)),
      config.optimize_transforms,
    )
  except (_Unkeyable, AttributeError):  # AttributeError: a node not made by `apply`
    return None


def _vjp(outputs, targets, cts, nodes, record: bool) -> list[Tensor | None]:
  """d(outputs) / d(targets) contracted with `cts` (ones where None). Recorded (`record`),
  the backward is itself an op of the tape whose inputs are the targets and every other
  tensor of the graph that tracks a gradient, so that a later backward differentiates it
  with respect to any of them (a gradient penalty reaches the weights; mixed partials)."""
  out_ids = {id(o) for o in outputs}
  replayed = {id(n) for n in nodes}
  # recomputed by the replay (a cut tensor is a constant of it)
  inner = lambda t: t.node is not None and not _cut(t) and id(t.node) in replayed
  root_targets = [t for t in targets if id(t) in out_ids and inner(t)]
  root_ids = {id(t) for t in root_targets}
  leaves = [t for t in targets if not inner(t) and id(t) not in root_ids]
  perturbed = [t for t in targets if inner(t) and id(t) not in out_ids]
  extra = _other_leaves(outputs, nodes, {id(t) for t in targets}) if record else []
  ct_vals = [
    np.ones(o.shape, o.dtype)
    if c is None
    else (c.value if isinstance(c, Tensor) else np.asarray(c, o.dtype))
    for o, c in zip(outputs, cts)
  ]
  n_in = len(leaves) + len(perturbed)
  float_ok = all(np.dtype(t.dtype).kind == "f" for t in leaves + perturbed)
  if not float_ok:
    raise PrimcError("gradients need float tensors; got an integer tensor with stop_gradient=False")
  if not n_in:
    result = []
  else:
    known = {id(t) for t in targets} | {id(t) for t in extra}
    consts = _constants(outputs, nodes, known)
    try:
      result = _backward(outputs, leaves, extra + consts, perturbed, nodes, cts, ct_vals, record)
    except PrimcError:  # an op that needs a constant's value while traced: baked in
      if not consts:
        raise
      result = _backward(outputs, leaves, extra, perturbed, nodes, cts, ct_vals, record)
  by_id = {id(t): g for t, g in zip(leaves + perturbed, result)}
  for t, c in zip(outputs, ct_vals):
    if id(t) in root_ids:
      by_id[id(t)] = Tensor(c)
  return [by_id.get(id(t)) for t in targets]


def _backward(outputs, leaves, extra, perturbed, nodes, cts, ct_vals, record):
  """The cotangents of `leaves` and `perturbed` (Tensors), by a backward program whose
  inputs are also `extra` (tensors read, not differentiated); recorded (`record`), it is
  an op of the tape itself."""
  replay = _replay_fn(outputs, leaves + extra, perturbed, nodes)
  n_t, n_e = len(leaves), len(extra)

  def grads_fn(*args):
    ins = args[:n_t] + args[n_t + n_e : n_t + n_e + len(perturbed)]
    others, cs = args[n_t : n_t + n_e], args[n_t + n_e + len(perturbed) :]
    _, pull = api.vjp(lambda *v: replay(*v[:n_t], *others, *v[n_t:]), *ins)
    return list(pull(list(cs)))

  zeros = [np.zeros(t.shape, t.dtype) for t in perturbed]
  values = [t.value for t in leaves + extra] + zeros + ct_vals
  if record:  # the backward itself becomes a recorded op (differentiable again)
    ct_tensors = [c if isinstance(c, Tensor) else Tensor(v) for c, v in zip(cts, ct_vals)]
    inputs = leaves + extra + [Tensor(z) for z in zeros] + ct_tensors
    node = Node(lambda *v: grads_fn(*v), inputs, n_t + len(perturbed), True)
    out = _run_compiled(grads_fn, values)
    return [Tensor(v, stop_gradient=False, node=node, index=k) for k, v in enumerate(out)]
  previous = _state.recording
  _state.recording = False
  try:
    key = _tape_key(outputs, leaves + extra, perturbed, nodes, ct_vals)
    return [Tensor(v) for v in _run_compiled(grads_fn, values, key)]
  finally:
    _state.recording = previous


def _accumulate(t: Tensor, g: Tensor | None) -> None:
  if g is None:
    return
  if t.grad is None:
    t.grad = g
  else:
    t.grad = (
      pnp.add(t.grad, g)
      if g.node is not None or t.grad.node is not None
      else Tensor(t.grad.numpy() + g.numpy())
    )


def grad(
  outputs,
  inputs,
  grad_outputs=None,
  create_graph: bool = False,
  retain_graph: bool | None = None,
  allow_unused: bool = False,
):
  """Gradients of `outputs` wrt `inputs`, returned (not accumulated), Paddle's
  `paddle.grad`. With `create_graph=True` the result is recorded, so it can be
  differentiated again.

  Returns:
    a list with one gradient per input (None for an unused input when allow_unused).
  """
  single = isinstance(inputs, Tensor)
  outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
  inputs = [inputs] if single else list(inputs)
  cts = (
    [None] * len(outputs)
    if grad_outputs is None
    else ([grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs))
  )
  input_ids = {id(t) for t in inputs}
  nodes = _collect(outputs, lambda t: id(t) in input_ids)
  grads = _vjp(outputs, inputs, cts, nodes, record=create_graph)
  reachable = _reachable(outputs, nodes)
  if not allow_unused:
    _check_used(outputs, inputs, nodes)
  grads = [g if id(t) in reachable else None for t, g in zip(inputs, grads)]
  if not (retain_graph if retain_graph is not None else create_graph):
    for n in nodes:
      n.freed = True
  return grads


def _reachable(outputs, nodes) -> set[int]:
  """The ids of the tensors the outputs were recorded from (and the outputs)."""
  return {id(t) for n in nodes for t in n.inputs} | {id(o) for o in outputs}


def _check_used(outputs, inputs, nodes=None) -> None:
  """Refuses an input the outputs were not recorded from (`grad`'s and `forward_grad`'s
  rule: a tensor with `stop_gradient=True` is not recorded)."""
  if nodes is None:
    ids = {id(t) for t in inputs}
    nodes = _collect(outputs, lambda t: id(t) in ids)
  reachable = _reachable(outputs, nodes)
  if any(id(t) not in reachable for t in inputs):
    raise PrimcError(
      "an input is not used by the outputs (pass allow_unused=True; a "
      "tensor with stop_gradient=True is not recorded)"
    )


def forward_grad(outputs, inputs, grad_inputs=None, allow_unused: bool = False):
  """Forward mode on the tape: the derivative of `outputs` along `grad_inputs` (ones where
  None), one tensor per output, recorded (differentiable again) like any op. An input the
  outputs were not recorded from (one with `stop_gradient=True`, or not used) is an
  error, as in `grad`, unless `allow_unused` (its tangent then contributes nothing)."""
  outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
  inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
  if not allow_unused:
    _check_used(outputs, inputs)
  tans = (
    [None] * len(inputs)
    if grad_inputs is None
    else ([grad_inputs] if isinstance(grad_inputs, Tensor) else list(grad_inputs))
  )
  tans = [
    Tensor(np.ones(x.shape, x.dtype))
    if t is None
    else (t if isinstance(t, Tensor) else Tensor(np.asarray(t, x.dtype)))
    for t, x in zip(tans, inputs, strict=True)
  ]
  input_ids = {id(t) for t in inputs}
  nodes = _collect(outputs, lambda t: id(t) in input_ids)
  extra = _other_leaves(outputs, nodes, input_ids)
  replay = _replay_fn(outputs, inputs + extra, [], nodes)
  n, n_e = len(inputs), len(extra)

  def tangents_fn(*args):
    ins, others, ts = args[:n], args[n : n + n_e], args[n + n_e :]
    return list(api.jvp(lambda *v: replay(*v, *others), ins, ts)[1])

  return apply(tangents_fn, [*inputs, *extra, *tans], {})


# ---------------------------------------------------------------------------------------
# Paddle's PyLayer: a function with its own backward (a `custom_vjp`)


class PyLayerContext:
  """What `forward` leaves for `backward`: `save_for_backward(*tensors)` /
  `saved_tensor()`, and any attribute set on it (functions, numbers)."""

  def save_for_backward(self, *tensors):
    self._saved = tensors

  def saved_tensor(self):
    return getattr(self, "_saved", ())


class PyLayer:
  """Paddle's PyLayer: subclass it with static `forward(ctx, *args, **kwargs)` and
  `backward(ctx, *output_grads)`, and call `apply`:

      class CusTanh(PyLayer):
        @staticmethod
        def forward(ctx, x):
          y = pnp.tanh(x)
          ctx.save_for_backward(y)
          return y

        @staticmethod
        def backward(ctx, dy):
          (y,) = ctx.saved_tensor()
          return dy * (1 - pnp.square(y))

      z = CusTanh.apply(x)

  Array arguments (tensors, arrays) are differentiated; the others (functions, numbers)
  pass through to `forward`. `backward` returns one gradient per array argument (None: a
  zero one). It is a `primc.custom_vjp`, so the eager tape, `jit`, `grad` and higher
  reverse orders use it; forward mode raises, as for any custom_vjp."""

  @staticmethod
  def forward(ctx, *args, **kwargs):
    raise NotImplementedError("a PyLayer defines forward(ctx, *args)")

  @staticmethod
  def backward(ctx, *grads):
    raise NotImplementedError("a PyLayer defines backward(ctx, *output_grads)")

  @classmethod
  def apply(cls, *args, **kwargs):
    arrays = [i for i, a in enumerate(args) if isinstance(a, (Tensor, np.ndarray, Tracer))]
    static = tuple(i for i in range(len(args)) if i not in arrays)
    contexts = []

    def run_forward(*full):
      ctx = PyLayerContext()
      contexts.append(ctx)
      return ctx, cls.forward(ctx, *full, **kwargs)

    def fwd(*full):
      ctx, out = run_forward(*full)
      return out, tuple(ctx.saved_tensor())

    def bwd(*rest):
      saved, grads = rest[-2], rest[-1]
      ctx = contexts[-1]
      ctx._saved = saved
      got = cls.backward(ctx, *(grads if isinstance(grads, (tuple, list)) else (grads,)))
      got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
      if len(got) != len(arrays):
        raise PrimcError(
          f"{cls.__name__}.backward returned {len(got)} gradients for "
          f"{len(arrays)} tensor arguments"
        )
      return got

    def forward(*full):
      return run_forward(*full)[1]

    forward.__qualname__ = forward.__name__ = cls.__name__
    fn = custom_vjp(forward, nondiff_argnums=static)
    fn.defvjp(fwd, bwd)
    return fn(*args)


# ---------------------------------------------------------------------------------------
# MegEngine's GradManager


class GradManager:
  """Records the ops run inside `with gm:` on the tensors it `attach`es; `backward(y, dy)`
  accumulates their gradients into `.grad` (and returns them)."""

  def __init__(self):
    self.attached: list[Tensor] = []

  def attach(self, tensors) -> "GradManager":
    for t in [tensors] if isinstance(tensors, Tensor) else tensors:
      if not isinstance(t, Tensor):
        raise PrimcError("GradManager.attach takes tensors")
      t.managers.add(self)
      if not any(a is t for a in self.attached):  # attaching twice changes nothing
        self.attached.append(t)
    return self

  def level(self) -> int | None:
    return next((k for k, lv in enumerate(_state.levels) if self in lv), None)

  def active(self) -> bool:
    return self.level() is not None

  def __enter__(self):
    _state.levels.append([self])
    return self

  def __exit__(self, *exc):
    _state.levels.pop()
    return False

  def __or__(self, other: "GradManager") -> "_Union":
    return _Union([self, other])

  def backward(self, y, dy=None):
    """Gradients of y (contracted with dy, ones by default) wrt the attached tensors,
    accumulated into their `.grad`; returns this backward's gradients (one tensor, or a
    list; None for a tensor y does not depend on)."""
    if y is None:  # nothing recorded to differentiate (e.g. a gradient this manager never saw)
      return None
    ys = [y] if isinstance(y, Tensor) else list(y)
    dys = [dy] if dy is None or isinstance(dy, Tensor) else list(dy)
    level = self.level()
    if level is None:
      raise PrimcError("GradManager.backward outside its `with` block")
    mine = {id(t) for t in self.attached}
    nodes = _collect(ys, lambda t: id(t) in mine)
    reachable = {id(t) for n in nodes for t in n.inputs}
    targets = [t for t in self.attached if id(t) in reachable]
    observed = level > 0  # managers entered outside this one record its backward
    previous = _state.recording
    _state.recording = observed
    try:
      grads = _vjp(ys, targets, dys * len(ys) if len(dys) == 1 else dys, nodes, record=observed)
    finally:
      _state.recording = previous
    for t, g in zip(targets, grads):
      _accumulate(t, g)
    # this backward's gradients (MegEngine: `x_grad = gm.backward(y)`), not the
    # accumulated `.grad`
    mine = {id(t): g for t, g in zip(targets, grads)}
    result = [mine.get(id(t)) for t in self.attached]
    return result[0] if len(result) == 1 else result


class _Union:
  """`gm | gm2`: managers on one level, invisible to each other's backward."""

  def __init__(self, managers):
    self.managers = managers

  def __or__(self, other):
    return _Union(self.managers + [other])

  def __enter__(self):
    _state.levels.append(list(self.managers))
    return self

  def __exit__(self, *exc):
    _state.levels.pop()
    return False


pnp.register_front_end(Tensor, apply, on_values, lambda t: t.value)
