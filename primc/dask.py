"""primc on Dask: compiled functions over the chunks of a `dask.array`, on one machine's
processes or a cluster's (`dask.distributed`). Dask is optional: `pip install primc[dask]`.

- `map_blocks(fn, x)`: a compiled function per chunk, its output chunks and dtype from
  primc's shape inference (Dask never calls `fn` to guess them).
- `value_and_grad(loss, params, data)`: the loss and its gradient with respect to
  `params`, summed or averaged over the chunks of `data` (rows along axis 0) with a tree
  reduction in Dask's graph; equal to the single-process result (float64: to rounding).
- `train(loss, params, data, optimizer, steps)`: a `primc.optimizer` stepped on it.

Tasks carry `primc.jit` functions, which pickle as their traced programs (not the Python
function), and workers load the compiled kernels from the cache (a directory the
processes share, PRIMC_CACHE_DIR) rather than compile them where one process already did.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

try:
  import dask
  import dask.array as da
except ImportError as e:  # pragma: no cover - exercised without dask installed
  raise ImportError("primc.dask needs Dask: pip install 'primc[dask]'") from e

from primc import api
from primc.compile import Jitted, jit
from primc.core import PrimcError
from primc.trace import make_program
from primc.tree import tree_flatten, tree_unflatten


def _jitted(fn) -> Jitted:
  return fn if isinstance(fn, Jitted) else jit(fn)


def _out_aval(fn, shape, dtype):
  program = make_program(fn)(np.empty(shape, dtype))
  if len(program.outputs) != 1:
    raise PrimcError(
      f"map_blocks needs a function of one array to one array, got {len(program.outputs)} outputs"
    )
  return program.outputs[0].aval


def map_blocks(fn: Callable, x, dtype=None):
  """`fn` (compiled with `primc.jit` unless it is already) on every chunk of the dask
  array `x`. The output's chunks and dtype come from tracing `fn` once per distinct chunk
  shape; `fn` must keep the number of axes (each output chunk's extent along an axis may
  depend only on the input chunk's extent along it)."""
  f = _jitted(fn)
  shapes = {}
  for block in itertools.product(*[range(len(c)) for c in x.chunks]):
    shape = tuple(x.chunks[a][i] for a, i in enumerate(block))
    if shape not in shapes:
      shapes[shape] = _out_aval(f, shape, x.dtype)
  for shape in shapes:  # compiled here once: the workers receive the programs, load kernels
    f.precompile(np.zeros(shape, x.dtype))
  first = next(iter(shapes.values()))
  if len(first.shape) != x.ndim:
    raise PrimcError(
      f"map_blocks: {getattr(fn, '__name__', 'the function')} maps a chunk of "
      f"rank {x.ndim} to rank {len(first.shape)}; it must keep the rank"
    )
  chunks = []
  for axis, sizes in enumerate(x.chunks):
    out = []
    for i, n in enumerate(sizes):
      block_shape = tuple(x.chunks[a][i if a == axis else 0] for a in range(x.ndim))
      out.append(shapes[block_shape].shape[axis])
    chunks.append(tuple(out))
  out_dtype = np.dtype(dtype or first.dtype)
  return da.map_blocks(
    _call_block,
    x,
    fn=f,
    dtype=out_dtype,
    chunks=tuple(chunks),
    meta=np.empty((0,) * x.ndim, out_dtype),
  )


def _call_block(block, fn):
  return fn(np.ascontiguousarray(block))


def _chunk_value_and_grad(vg, params, chunk, weight):
  value, grads = vg(params, np.ascontiguousarray(chunk))
  leaves, tree = tree_flatten(grads)
  return weight * np.asarray(value), [weight * np.asarray(g) for g in leaves], tree


def _add(a, b):
  return a[0] + b[0], [x + y for x, y in zip(a[1], b[1])], a[2]


def _tree_sum(parts: list, fan_in: int = 4):
  while len(parts) > 1:
    parts = [dask.delayed(_sum_group)(*parts[i : i + fan_in]) for i in range(0, len(parts), fan_in)]
  return parts[0]


def _sum_group(*parts):
  out = parts[0]
  for p in parts[1:]:
    out = _add(out, p)
  return out


def value_and_grad(loss: Callable, params, data, reduce: str = "mean", compute: bool = True):
  """(loss, d loss / d params) over the chunks of `data` along axis 0 (a dask array):
  `loss(params, chunk)` is evaluated per chunk by its compiled value-and-gradient, and the
  chunks' results are combined in a tree of Dask tasks: `reduce="mean"` weights each by
  its share of the rows (the full data's mean, for a loss that is a mean over rows),
  `"sum"` adds them. Returns numpy results (or the Dask delayed value, compute=False)."""
  if reduce not in ("mean", "sum"):
    raise ValueError(f"reduce must be 'mean' or 'sum', got {reduce!r}")
  if not isinstance(data, da.Array):
    data = da.from_array(np.asarray(data))
  vg = _compiled_value_and_grad(loss)
  rows = data.shape[0]
  if any(len(c) != 1 for c in data.chunks[1:]):
    raise PrimcError("value_and_grad: chunk the data along axis 0 only (one chunk per row block)")
  blocks = data.to_delayed().reshape(-1)  # one per row block
  for n in set(data.chunks[0]):  # compiled here once per chunk shape (see map_blocks)
    vg.precompile(params, np.zeros((n,) + data.shape[1:], data.dtype))
  # one key each for the function and the parameters: shipped once per worker, not per task
  token = f"{id(vg):x}-{next(_calls)}"
  vg_key = dask.delayed(vg, name=f"primc-value-and-grad-{token}", traverse=False)
  params_key = dask.delayed(params, name=f"primc-params-{token}", traverse=False)
  parts = []
  for block, n in zip(blocks, data.chunks[0]):
    weight = n / rows if reduce == "mean" else 1.0
    parts.append(dask.delayed(_chunk_value_and_grad)(vg_key, params_key, block, weight))
  total = dask.delayed(_finish)(_tree_sum(parts))
  return total.compute() if compute else total


_calls = itertools.count()
_compiled: dict = {}  # loss function -> its compiled value-and-gradient


def _compiled_value_and_grad(loss) -> Jitted:
  if loss not in _compiled:
    _compiled[loss] = jit(api.value_and_grad(loss))
  return _compiled[loss]


def train(loss: Callable, params, data, optimizer, steps: int, reduce: str = "mean"):
  """`steps` steps of `optimizer` (a `primc.optimizer` instance: SGD, Adam) on the
  gradient `value_and_grad` reduces over the chunks of `data`. Returns (params, the loss
  before each step)."""
  leaves, tree = tree_flatten(params)
  leaves = [np.asarray(p) for p in leaves]
  states = [optimizer.initial_state(p) for p in leaves]
  history = []
  for _ in range(int(steps)):
    value, grads = value_and_grad(loss, tree_unflatten(tree, leaves), data, reduce)
    stepped = [optimizer.update(p, g, s) for p, g, s in zip(leaves, tree_flatten(grads)[0], states)]
    leaves, states = [p for p, _ in stepped], [s for _, s in stepped]
    history.append(float(value))
  return tree_unflatten(tree, leaves), history


def _finish(part):
  value, leaves, tree = part
  return value, tree_unflatten(tree, leaves)
