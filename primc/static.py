"""Static programs (Paddle's static graph mode): declare inputs with `data`, build the
program with primc.numpy ops on them, run it with `Executor().run(feed, fetch_list)`.

Building records each primc.numpy call on static `Variable`s into the default main
program; nothing is computed. `Executor.run` replays the recorded calls for the fetched
variables as one function and runs it through `primc.jit`: traced, transformed,
optimized and compiled per fed shape (so a `None`/-1 dimension in `data` just means the
program is specialized for each shape fed; the seed's "variable shape workaround" is
unnecessary). Parameters (`Layer.create_parameter`) live in the program's scope and
persist across runs; `optimizer.minimize(loss)` adds their update to every run.
"""

from __future__ import annotations

import itertools

import numpy as np

from primc import api
from primc import compile as compiler
from primc import numpy as pnp
from primc.core import PrimcError
from primc.trace import aval_of, trace_flat
from primc.tree import partial_over_leaves, tree_flatten, tree_unflatten

_building = [False]
_counter = itertools.count()


def enable_static():
  """Switches to building static programs (parameters become program variables)."""
  _building[0] = True


def disable_static():
  _building[0] = False


def building() -> bool:
  return _building[0]


class Variable:
  """A symbolic value of a static program: data, a parameter, or an op's result."""

  def __init__(self, kind, shape, dtype, node=None, index=0, name=None):
    self.kind, self.node, self.index = kind, node, index
    self.shape = tuple(shape) if shape is not None else None
    self.dtype = np.dtype(dtype) if dtype is not None else None
    self.name = name or f"{kind}_{next(_counter)}"
    self.id = next(_counter)

  ndim = property(lambda self: None if self.shape is None else len(self.shape))

  def __repr__(self):
    return f"Variable({self.name}, kind={self.kind}, shape={self.shape})"

  def __bool__(self):
    raise PrimcError("the truth value of a static variable is not known while building")

  def __iter__(self):
    """Rows, where the first dimension is declared; a `None` one is known only when fed,
    so iterating (`a, b = v`, `(dx,) = v`) is refused rather than stopped at the one row
    the build-time shape has."""
    if not self.shape or self.shape[0] is None or self.shape[0] < 0:
      raise PrimcError(
        f"cannot iterate static variable {self.name} of shape {self.shape}: its first "
        f"dimension is known only when fed (autograd.grad of one input returns one "
        f"variable: dx = autograd.grad(y, x))"
      )
    return (self[i] for i in range(self.shape[0]))

  __hash__ = object.__hash__


class Node:
  """A recorded call: `fn(*values)` computes the outputs from the input values."""

  def __init__(self, fn, inputs):
    self.fn, self.inputs = fn, inputs


def record(fn, args, kwargs, kind="op"):
  """Records `fn(*args, **kwargs)` on static variables; returns the result variables."""
  replay, variables = partial_over_leaves(fn, args, kwargs, lambda x: isinstance(x, Variable))
  node = Node(replay, variables)
  out_leaves, out_tree = _probe(node)
  return tree_unflatten(
    out_tree, [Variable(kind, s, d, node, k) for k, (s, d) in enumerate(out_leaves)]
  )


def _probe(node):
  """Output avals and structure of a node, traced with the declared input shapes (a
  `None` dimension traced as 1: build-time shapes are informative only)."""
  ins = [np.zeros([d if d is not None else 1 for d in v.shape], v.dtype) for v in node.inputs]
  program, _, out_tree = trace_flat(lambda *xs: node.fn(*xs), [aval_of(x) for x in ins])
  return [(a.aval.shape, a.aval.dtype) for a in program.outputs], out_tree


class Program:
  """A static program: its data variables, parameters (with values in its scope) and
  optimizers."""

  def __init__(self):
    self.params: list[Variable] = []
    self.scope: dict[int, np.ndarray] = {}
    self.initial: dict[int, np.ndarray] = {}
    self.optimizers: list = []
    self._jitted: dict = {}

  def parameters(self) -> list[Variable]:
    return list(self.params)

  def add_parameter(self, value) -> Variable:
    v = Variable("param", value.shape, value.dtype)
    self.params.append(v)
    self.scope[v.id] = np.array(value)
    self.initial[v.id] = np.array(value)
    return v

  def add_optimizer(self, optimizer, loss, params):
    self.optimizers.append((optimizer, loss, params, {}))
    self._jitted.clear()


_main = [Program()]
_startup = [Program()]


def default_main_program() -> Program:
  return _main[0]


def default_startup_program() -> Program:
  return _startup[0]


def reset():
  """A fresh default main program (tests and examples that build several programs)."""
  _main[0] = Program()


def parameter(value) -> Variable:
  return default_main_program().add_parameter(value)


def data(name: str, shape, dtype="float32") -> Variable:
  """An input of the static program, fed by name to `Executor.run`. A `None` or -1
  dimension accepts any size: the program is compiled for each fed shape."""
  shape = tuple(None if d in (None, -1) else int(d) for d in shape)
  return Variable("data", shape, dtype, name=name)


# ---------------------------------------------------------------------------------------
# Evaluation: replay recorded calls (inside a trace)


def evaluate(outputs, env: dict):
  """Values of `outputs`, computing recorded nodes from `env` (id(variable) -> value)."""
  results: dict[int, list] = {}

  def value(v):
    if v.id in env:
      return env[v.id]
    if v.node is None:
      raise PrimcError(f"{v.name} has no value: feed it (missing from feed?)")
    key = id(v.node)
    if key not in results:
      results[key] = tree_flatten(v.node.fn(*[value(i) for i in v.node.inputs]))[0]
    return results[key][v.index]

  return [value(v) for v in outputs]


def leaves_of(outputs) -> list[Variable]:
  """The data and parameter variables the outputs depend on."""
  seen, out = set(), []

  def visit(v):
    if v.id in seen:
      return
    seen.add(v.id)
    if v.node is None:
      out.append(v)
      return
    for i in v.node.inputs:
      visit(i)

  for v in outputs:
    visit(v)
  return out


class Executor:
  """Runs static programs: `run(program=None, feed=None, fetch_list=None)`."""

  def __init__(self, place=None):
    self.place = place

  def run(self, program: Program | None = None, feed=None, fetch_list=None):
    if program is default_startup_program():
      main = default_main_program()
      for k, v in main.initial.items():
        main.scope[k] = np.array(v)
      return []
    program = program or default_main_program()
    feed = dict(feed or {})
    fetch = tree_flatten(list(fetch_list or []))[0]  # nested lists are flattened
    for f in fetch:
      if not isinstance(f, Variable):
        raise PrimcError(f"fetch_list entries must be static variables, got {type(f).__name__}")
    updates = list(program.optimizers)
    targets = fetch + [loss for _, loss, _, _ in updates]
    leaves = leaves_of(targets)
    datas = [v for v in leaves if v.kind == "data"]
    params = program.params
    for v in leaves:
      if v.kind == "param" and v.id not in program.scope:
        raise PrimcError(f"fetching {v.name}: it belongs to another program")
    feed_vals = []
    for v in datas:
      if v.name not in feed:
        raise PrimcError(f"missing feed for data {v.name!r} (shape {v.shape}, {v.dtype})")
      x = np.asarray(feed[v.name])
      if x.dtype != v.dtype:
        raise PrimcError(f"feed {v.name!r} has dtype {x.dtype}, but data() declared {v.dtype}")
      if len(x.shape) != len(v.shape) or any(
        d is not None and d != n for d, n in zip(v.shape, x.shape)
      ):
        raise PrimcError(
          f"feed {v.name!r} has shape {x.shape}, but data() declared "
          f"{tuple('None' if d is None else d for d in v.shape)}"
        )
      feed_vals.append(x)
    step = self._step(program, fetch, datas, params, updates)
    states = [s for opt, _, ps, st in updates for s in self._states(program, opt, st, ps)]
    fetched, new_params, new_states = step(
      *feed_vals, *[program.scope[p.id] for p in params], *states
    )
    if updates:
      for p, value in zip(params, new_params):
        program.scope[p.id] = np.asarray(value)
      it = iter(new_states)
      for _, _, ps, st in updates:
        for p in ps:
          st[p.id] = tuple(np.asarray(next(it)) for _ in st[p.id])
    return [np.asarray(f) for f in fetched]

  def _states(self, program, opt, state, params):
    """The optimizer's state arrays for `params` (initialized on first use)."""
    out = []
    for p in params:
      if p.id not in state:
        state[p.id] = tuple(opt._initial_state(program.scope[p.id]))
      out += list(state[p.id])
    return out

  def _step(self, program, fetch, datas, params, updates):
    key = (tuple(v.id for v in fetch), tuple(v.id for v in datas), len(updates))
    if key in program._jitted:
      return program._jitted[key]

    def step(feed_vals, param_vals, states):
      env = {v.id: x for v, x in zip(datas, feed_vals)}
      env.update({p.id: x for p, x in zip(params, param_vals)})
      fetched = evaluate(fetch, env)
      new_params = list(param_vals)
      new_states = []
      it = iter(states)
      for opt, loss, ps, st in updates:
        ids = [p.id for p in ps]

        def loss_of(values):
          env2 = dict(env)
          env2.update(dict(zip(ids, values)))
          return evaluate([loss], env2)[0]

        grads = api.grad(lambda vals: _scalar(loss_of(vals)))([env[i] for i in ids])
        for p, g in zip(ps, grads):
          k = next(k for k, q in enumerate(params) if q is p)
          state = tuple(next(it) for _ in st[p.id])  # initialized by _states
          new, state = opt._update(new_params[k], g, state)
          new_params[k] = new
          new_states += list(state)
      return fetched, new_params, new_states

    # flat array arguments: a steady call takes jit's native fast path
    n_data, n_params = len(datas), len(params)
    program._jitted[key] = compiler.jit(
      lambda *xs: step(
        list(xs[:n_data]), list(xs[n_data : n_data + n_params]), list(xs[n_data + n_params :])
      )
    )
    return program._jitted[key]


def _scalar(x):
  return pnp.sum(x)


pnp.register_front_end(Variable, record, pnp.refuse_numpy("a static program variable"))
