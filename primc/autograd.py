"""Paddle's `incubate.autograd` on primc: `grad`, `forward_grad`, lazy `Jacobian` and
`Hessian`, `enable_prim` / `disable_prim`.

All of them work on static variables (recorded into the program, computed by
`Executor.run`) and on arrays (computed at once). They are program transforms of the
replayed computation, so any order works.

`enable_prim()` / `disable_prim()`: primc always differentiates primitive programs, so
prim mode is on by default. With it disabled, only first-order reverse mode is served
(as in Paddle without prim): a gradient of a gradient, or `forward_grad`, raises an
error instead of silently giving a wrong answer.
"""

from __future__ import annotations

import numpy as np

from primc import api, eager, static
from primc import numpy as pnp
from primc.core import PrimcError
from primc.numpy import _expand_index, _is_array
from primc.prims import wrap_indices
from primc.static import Variable

_prim = [True]


def enable_prim():
  _prim[0] = True


def disable_prim():
  _prim[0] = False


def prim_enabled() -> bool:
  return _prim[0]


def _as_list(x):
  return list(x) if isinstance(x, (list, tuple)) else [x]


def _depends_on_grad(outputs) -> bool:
  seen = set()

  def visit(v):
    if v.id in seen or v.node is None:
      return False
    seen.add(v.id)
    return getattr(v.node, "is_grad", False) or any(visit(i) for i in v.node.inputs)

  return any(visit(v) for v in outputs)


def _transform_node(outputs, inputs, extra, compute, kind):
  """Records a node that evaluates `outputs` as a function of `inputs` and applies
  `compute(f, input_values, extra_values)`; f replays the recorded program."""
  leaves = static.leaves_of(outputs + extra)
  leaf_ids = [v.id for v in leaves]
  in_ids = [v.id for v in inputs]

  def fn(*values):
    leaf_vals, extra_vals = values[: len(leaves)], values[len(leaves) :]
    env = dict(zip(leaf_ids, leaf_vals))
    for v in inputs:
      if v.id not in env:
        env[v.id] = static.evaluate([v], env)[0]

    def f(*xs):
      env2 = {k: val for k, val in env.items() if k in leaf_ids}
      env2.update(zip(in_ids, xs))
      return static.evaluate(outputs, env2)

    return compute(f, [env[i] for i in in_ids], list(extra_vals))

  node = static.Node(fn, leaves + extra)
  node.is_grad = True
  shapes = [v for v in (inputs if kind == "grad" else outputs)]
  return [Variable(kind, v.shape, v.dtype, node, k) for k, v in enumerate(shapes)]


def grad(outputs, inputs, grad_outputs=None):
  """Reverse mode: d(outputs)/d(inputs), contracted with `grad_outputs` (ones where
  None). Returns one gradient per input (a list, or a single value for a single input)."""
  single = not isinstance(inputs, (list, tuple))
  outs, ins = _as_list(outputs), _as_list(inputs)
  cts = [None] * len(outs) if grad_outputs is None else _as_list(grad_outputs)
  if any(isinstance(v, Variable) for v in outs + ins):
    if not prim_enabled() and _depends_on_grad(outs):
      raise PrimcError(
        "a gradient of a gradient needs primitive autodiff: call primc.autograd.enable_prim() first"
      )
    ct_vars = [c for c in cts if isinstance(c, Variable)]

    def compute(f, xs, ct_vals):
      it = iter(ct_vals)
      values = f(*xs)
      cs = [
        next(it) if isinstance(c, Variable) else (pnp.ones_like(v) if c is None else pnp.asarray(c))
        for c, v in zip(cts, values)
      ]
      return list(api.vjp(lambda *a: f(*a), *xs)[1](cs))

    result = _transform_node(outs, ins, ct_vars, compute, "grad")
  else:
    result = eager.grad(outs, ins, grad_outputs, create_graph=prim_enabled())
  return result[0] if single else result


def forward_grad(outputs, inputs, grad_inputs=None):
  """Forward mode: the directional derivative of the outputs along `grad_inputs` (ones
  where None). Returns one tangent per output (a single value for a single output)."""
  if not prim_enabled():
    raise PrimcError(
      "forward_grad needs primitive autodiff: call primc.autograd.enable_prim() first"
    )
  single = not isinstance(outputs, (list, tuple))
  outs, ins = _as_list(outputs), _as_list(inputs)
  tans = [None] * len(ins) if grad_inputs is None else _as_list(grad_inputs)
  if not any(isinstance(v, Variable) for v in outs + ins):
    if all(isinstance(v, eager.Tensor) for v in outs + ins):
      result = eager.forward_grad(outs, ins, grad_inputs)
      return result[0] if single else result
    raise PrimcError(
      "forward_grad takes static variables or eager tensors; use primc.jvp on functions of arrays"
    )
  tan_vars = [t for t in tans if isinstance(t, Variable)]

  def compute(f, xs, tan_vals):
    it = iter(tan_vals)
    ts = [
      next(it) if isinstance(t, Variable) else (pnp.ones_like(x) if t is None else pnp.asarray(t))
      for t, x in zip(tans, xs)
    ]
    return list(api.jvp(lambda *a: f(*a), xs, ts)[1])

  result = _transform_node(outs, ins, tan_vars, compute, "forward_grad")
  return result[0] if single else result


# ---------------------------------------------------------------------------------------
# Lazy Jacobian and Hessian


class Jacobian:
  """The Jacobian of `func` at `xs`, computed lazily one row at a time.

  Inputs and outputs are flattened and concatenated: shape (M, N), or (B, M, N) with
  `is_batched=True` (the first axis of every input and output is a batch of independent
  problems). It indexes like the matrix it stands for (numpy's rules: `J[:, 0]` is column
  0, negative indices count from the end, out of bounds is an IndexError) and computes only
  the rows an index needs, reusing rows computed before; `evaluations` counts computed
  rows. On static variables, rows are recorded into the program; on eager tensors, each
  row is a recorded op (differentiable again).
  """

  def __init__(self, func, xs, is_batched: bool = False):
    self.func = func
    self.xs = _as_list(xs)
    self.is_batched = is_batched
    self.static = any(isinstance(x, Variable) for x in self.xs)
    self.eager = any(isinstance(x, eager.Tensor) for x in self.xs)
    self._rows: dict[int, object] = {}
    self.evaluations = 0
    if self.static:  # shapes by tracing (func may be a transform: not run on variables)
      ys = _as_list(static.record(func, self.xs, {}))
    else:
      ys = _as_list(func(*[x.value if isinstance(x, eager.Tensor) else x for x in self.xs]))
    size = lambda v: int(np.prod(v.shape[1:] if is_batched else v.shape, dtype=np.int64))
    self.m = sum(size(y) for y in ys)
    self.n = sum(size(x) for x in self.xs)
    self.batch = self.xs[0].shape[0] if is_batched else None

  @property
  def shape(self):
    return (self.batch, self.m, self.n) if self.is_batched else (self.m, self.n)

  def _flat(self, values):
    if self.is_batched:
      return pnp.concatenate([pnp.reshape(v, (v.shape[0], -1)) for v in values], axis=1)
    return pnp.concatenate([pnp.reshape(v, (-1,)) for v in values])

  def _row_fn(self, i):
    def row(*xs):
      flat_f = lambda *a: self._flat(_as_list(self.func(*a)))
      out, pull = api.vjp(flat_f, *xs)
      ct = pnp.astype(pnp.equal(pnp.arange(self.m), i), out.dtype)
      ct = pnp.broadcast_to(ct, out.shape)
      return self._flat(list(pull(ct)))

    return row

  def _row(self, i):
    if i not in self._rows:
      self.evaluations += 1
      fn = self._row_fn(i)
      if self.static:
        self._rows[i] = static.record(fn, self.xs, {})
      elif self.eager:
        self._rows[i] = eager.apply(fn, self.xs, {})
      else:
        self._rows[i] = fn(*self.xs)
    return self._rows[i]

  def __getitem__(self, index):
    row_axis = 1 if self.is_batched else 0
    entries = [e for e in _expand_index(index, len(self.shape), self.shape) if e is not Ellipsis]
    at = [k for k, e in enumerate(entries) if e is not None][row_axis]
    sel = entries[at]
    if isinstance(sel, slice):
      rows, entries[at] = list(range(self.m))[sel], slice(None)
    elif _is_array(sel):
      picked = wrap_indices(np.asarray(sel), self.m, row_axis)
      rows = sorted(set(picked.reshape(-1).tolist()))
      entries[at] = np.searchsorted(rows, picked)  # positions among the computed rows
    else:
      rows = wrap_indices(np.asarray(sel), self.m, row_axis).reshape(1).tolist()
      entries[at] = 0
    if not rows:  # nothing to compute: an empty selection of the right shape
      empty = np.zeros(self.shape[:row_axis] + (0,) + self.shape[row_axis + 1 :], self.xs[0].dtype)
      return empty[tuple(entries)]
    stacked = pnp.stack([self._row(i) for i in rows], axis=row_axis)
    return stacked[tuple(entries)]


class Hessian(Jacobian):
  """The Hessian of a scalar (per batch item, with `is_batched`) `func`: the lazy
  Jacobian of its gradient."""

  def __init__(self, func, xs, is_batched: bool = False):
    xs = _as_list(xs)

    def gradient(*a):
      return list(api.grad(lambda *b: pnp.sum(func(*b)), argnums=tuple(range(len(a))))(*a))

    super().__init__(gradient, xs, is_batched)
