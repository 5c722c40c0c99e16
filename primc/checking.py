"""`check_grads`: a function's derivatives against finite differences, at every order.

The directions it checks along are drawn by `Directions`, a counter-based generator
(splitmix64 over numpy's wrapping uint64 arithmetic), not by `numpy.random`: the values
are the same on every machine and numpy version, and a check costs no import of
`numpy.random` (~12 ms, more than the check of a small function).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from primc import kept
from primc.api import jvp, vjp
from primc.trace import as_array, aval_of, trace_flat, weak_leaves
from primc.tree import tree_flatten, tree_unflatten

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


class Directions:
  """A stream of directions: `draw(shape, dtype)` gives values uniform in [-1, 1) (a
  direction's distribution does not matter to the checks, only that it is generic),
  the same for the same seed and draws in order."""

  def __init__(self, seed: int):
    self.next = (int(seed) & 0xFFFFFFFF) << 32  # (each seed its own 2^32 counters)

  def draw(self, shape, dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    z = (np.arange(self.next, self.next + n, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
    self.next += n
    z = (z ^ (z >> np.uint64(30))) * _MIX[0]
    z = (z ^ (z >> np.uint64(27))) * _MIX[1]
    z ^= z >> np.uint64(31)
    unit = (z >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return (2.0 * unit - 1.0).reshape(shape).astype(dtype)


def _float_leaves(tree):
  return [
    np.asarray(x, np.float64) for x in tree_flatten(tree)[0] if np.asarray(x).dtype.kind == "f"
  ]


def _fd_jvp(f, args, tangents, eps):
  plus = f(*[a + eps * t if t is not None else a for a, t in zip(args, tangents)])
  minus = f(*[a - eps * t if t is not None else a for a, t in zip(args, tangents)])
  return [(p - m) / (2 * eps) for p, m in zip(_float_leaves(plus), _float_leaves(minus))]


def _close(what, got, want, atol, rtol):
  for k, (g, w) in enumerate(zip(got, want, strict=True)):
    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
    bad = ~np.isclose(g, w, atol=atol, rtol=rtol, equal_nan=True)
    if bad.any():
      err = np.max(np.abs(g - w)[bad])
      rows = "\n".join(
        f"  at {tuple(int(i) for i in at)}: got {g[tuple(at)]:.9g}, want "
        f"{w[tuple(at)]:.9g} (error {abs(g[tuple(at)] - w[tuple(at)]):.3g})"
        for at in np.argwhere(bad)[:5]
      )
      raise AssertionError(
        f"{what} mismatch in output {k} (shape {g.shape}): {int(bad.sum())} "
        f"of {g.size} entries differ, max abs error {err:.3g}; the first:\n"
        f"{rows}"
      )


def check_grads(
  f: Callable,
  args: Sequence,
  order: int = 1,
  modes: Sequence[str] = ("fwd", "rev"),
  eps: float | None = None,
  atol: float | None = None,
  rtol: float | None = None,
  seed: int = 0,
) -> None:
  """Checks derivatives of `f` at `args` against central finite differences.

  `fwd` compares `jvp` with finite differences along a direction (`Directions(seed)`:
  the same at every run); `rev` checks the transpose identity <ct, J v> = <J^T ct, v>.
  For `order > 1`, the same checks are applied to the derivative functions themselves.
  Arguments may be pytrees (tuples, lists, dicts of arrays). The step and tolerances
  default by the arguments' precision, as JAX's: eps 1e-6, atol = rtol = 1e-5 where every
  float argument is float64; eps 1e-3, atol = rtol = 2e-2 where one is lower (float32:
  finite differences in it are coarse).

  Raises:
    AssertionError: naming the mode and order that disagree.
  """
  # (its transforms run once each, or a few times: none kept, `kept.plainly`)
  try:
    return kept.plainly(lambda: _checked(f, args, order, modes, eps, atol, rtol, seed))
  except AssertionError as e:
    note = _precision_note(f, args) if eps is None else ""
    if not note:
      raise
    raise AssertionError(f"{e}\n{note}") from None


LOW_FLOATS = ("float32", "float16", "bfloat16")


def _precision_note(f, args) -> str:
  """Why a check at float64's step failed where the function computes in a lower
  precision although every float argument is float64 (an array made float32, then
  written into): '' where it does not."""
  leaves, in_tree = tree_flatten(list(args))
  kinds = [np.asarray(x).dtype for x in leaves if np.asarray(x).dtype.kind == "f"]
  if not kinds or any(d != np.float64 for d in kinds):
    return ""
  try:
    program = trace_flat(
      lambda *xs: f(*tree_unflatten(in_tree, list(xs))),
      [aval_of(as_array(x)) for x in leaves],
      weak_leaves(leaves),
      [as_array(x) for x in leaves],
    )[0]
  except Exception:  # noqa: BLE001 - a note only: the check's own error stands
    return ""
  low = next((e for e in program.eqns if e.outputs[0].aval.dtype in LOW_FLOATS), None)
  if low is None:
    return ""
  return (
    f"note: every float argument is float64, but the function computes in "
    f"{low.outputs[0].aval.dtype} from {low.prim.name} at {low.source} on: finite "
    f"differences at float64's step cannot check that (make that array with "
    f"dtype='float64', or pass eps, atol and rtol for float32)"
  )


def _checked(f, args, order, modes, eps, atol, rtol, seed) -> None:
  rng = Directions(seed)
  leaves, in_tree = tree_flatten(list(args))
  low = any(np.asarray(x).dtype.kind == "f" and np.asarray(x).dtype.itemsize < 8 for x in leaves)
  eps = (1e-3 if low else 1e-6) if eps is None else eps
  atol = (2e-2 if low else 1e-5) if atol is None else atol
  rtol = (2e-2 if low else 1e-5) if rtol is None else rtol
  if (
    len(leaves) != len(args)
    or in_tree.kind != "list"
    or any(c.kind != "leaf" for c in in_tree.children)
  ):  # pytree arguments: check the flat function

    def flat_f(*xs):
      return f(*tree_unflatten(in_tree, list(xs)))

    return _checked(flat_f, leaves, order, modes, eps, atol, rtol, seed)
  args = tuple(np.asarray(a) for a in args)
  tangents = [rng.draw(a.shape, a.dtype) if a.dtype.kind == "f" else None for a in args]
  tan_args = [t if t is not None else np.zeros_like(a) for a, t in zip(args, tangents)]
  fd = _fd_jvp(f, args, tangents, eps)
  if "fwd" in modes:
    _, t_out = jvp(f, args, tan_args)
    _close(f"order-{order} forward mode", _float_leaves(t_out), fd, atol, rtol)
  out = f(*args)
  out_leaves, out_td = tree_flatten(out)
  cts = [rng.draw(np.shape(o), np.asarray(o).dtype) for o in out_leaves]
  if "rev" in modes:
    _, pullback = vjp(f, *args)
    in_cts = pullback(tree_unflatten(out_td, cts))
    lhs = sum(
      float(np.sum(np.asarray(c, np.float64) * w))
      for c, w in zip([c for c, o in zip(cts, out_leaves) if np.asarray(o).dtype.kind == "f"], fd)
    )
    rhs = sum(
      float(np.sum(np.asarray(c, np.float64) * t))
      for c, t in zip(in_cts, tangents)
      if c is not None
    )
    _close(f"order-{order} reverse mode <ct, J v> vs <J^T ct, v>", [rhs], [lhs], atol, rtol)
  if order > 1:
    if "fwd" in modes:
      _checked(
        lambda *a: jvp(f, a, tan_args)[1], args, order - 1, ("fwd",), eps, atol, rtol, seed + 1
      )
    if "rev" in modes:
      ct_tree = tree_unflatten(out_td, cts)
      _checked(
        lambda *a: [c for c in vjp(f, *a)[1](ct_tree) if c is not None],
        args,
        order - 1,
        ("rev",),
        eps,
        atol,
        rtol,
        seed + 1,
      )
