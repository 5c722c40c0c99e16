"""Reverse mode on values: a program's vector-Jacobian product evaluated one equation at a
time, as autograd's tape evaluates it, for a program that runs once.

`ad.vjp_program` differentiates a whole program into a new one: right for a program run
again and again (kept, optimized, compiled), but it costs tens of microseconds per
equation in Python before the first value comes out (the 946-step HMM's `value_and_grad`:
~3 s, autograd's 0.5 s). Evaluated on values instead, each equation is linearized by its
own rules *once per kind*: the one-equation program `prim[params](avals)` is linearized
and its linear part transposed (`ad.linearize_program`, `ad.transpose_program`), and the
two small programs are kept by that key (`_rules`), so a chain of a thousand steps of the
same shapes makes a dozen of them. A call is then two sweeps of numpy: forward, each
equation's primal program giving its outputs and the residuals its transpose needs (the
tape); backward, the transposes in reverse order on the cotangents. An equation whose
primitive has a rule on values of its own (`ad.value_vjp_rules`: a custom_vjp's, whose
fwd and bwd are the user's Python, made anew at every call) runs that instead.

The results are those of `vjp_program`'s program (the same rules, unoptimized across
equations); tests compare the two on every primitive's programs.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from typing import Callable, Sequence

import numpy as np

from primc import ad, passes
from primc.core import Eqn, Lit, Program, Var, impl_rules, results
from primc.runners import dead_after, large, runner
from primc.trace import aval_of, eval_program
from primc.settings import config

_KINDS: dict = {}  # (prim, params, input avals, active mask) -> [`_made`, uses, programs]
MAX_KINDS = 4096
OPTIMIZE_AFTER = 16  # uses of a kind before its programs are optimized: a round of the
# passes costs ~60 us a program, and most kinds of a one-off vjp (check_grads) run a few
# times; those of a long chain, thousands


def _one(eqn: Eqn) -> Program:
  """`eqn` alone, as a program of fresh inputs (literals too: the kind is by types)."""
  ins = tuple([Var(a.aval) for a in eqn.inputs])
  outs = tuple([Var(v.aval) for v in eqn.outputs])
  return Program(ins, (Eqn(eqn.prim, ins, eqn.params, outs, eqn.source),), outs)


def _programs(eqn: Eqn, active: tuple[bool, ...]):
  """The equation's primal program (inputs -> outputs, residuals) and the transpose of its
  linear part (residuals, output cotangents -> cotangents of the active inputs), and which
  outputs are floats (those a derivative flows through); None where none is."""
  floats = tuple([v.aval.is_float for v in eqn.outputs])
  if not any(floats):
    return None
  primal, linear = ad.linearize_program(_one(eqn), active)
  n_res = len(primal.outputs) - len(eqn.outputs)
  n_lin = len(linear.inputs) - n_res
  transposed = ad.transpose_program(linear, [False] * n_res + [True] * n_lin)
  return primal, transposed, floats


def _made(programs, optimized: bool):
  """`_programs`' programs as runners (`runners.runner`, unguarded: `vjp` guards the whole
  call), `optimized` (one round of the passes) where transforms are."""
  if programs is None:
    return None
  primal, transposed, floats = programs
  if optimized and config.optimize_transforms:
    primal, transposed = passes.optimize(primal, rounds=1), passes.optimize(transposed, rounds=1)
  return runner(primal, guarded=False), runner(transposed, guarded=False), floats


def _rules(eqn: Eqn, active: tuple[bool, ...], xs: Sequence = ()):
  """`_made`, kept by the equation's kind (made anew where its parameters do not hash),
  its programs optimized at the kind's OPTIMIZE_AFTER-th use; or, for a primitive of
  `ad.value_vjp_rules`, its own rule's on the values `xs`."""
  own = ad.value_vjp_rules.get(eqn.prim)
  if own is not None:
    made = _own(eqn, active, xs, own)
    if made is not None:
      return made
  key = (eqn.prim, eqn.params, tuple([a.aval for a in eqn.inputs]), active)
  try:
    kind = _KINDS.get(key)
  except TypeError:
    return _made(_programs(eqn, active), True)
  if kind is None:
    if len(_KINDS) >= MAX_KINDS:
      _KINDS.pop(next(iter(_KINDS)))
    programs = _programs(eqn, active)
    kind = _KINDS[key] = [_made(programs, False), 0, programs]
  kind[1] += 1
  if kind[1] == OPTIMIZE_AFTER:
    kind[0], kind[2] = _made(kind[2], True), None
  return kind[0]


def _own(eqn: Eqn, active: tuple[bool, ...], xs: Sequence, rule: Callable):
  """An `ad.value_vjp_rules` rule as `_made`'s three: its outputs (already computed: the
  primal returns them), its backward, and which outputs are floats; None where the rule
  declines."""
  found = rule(xs, active, **eqn.kw)
  if found is None:
    return None
  outs, backward = found
  for o, v in zip(outs, eqn.outputs, strict=True):
    if aval_of(o) != v.aval:  # (the sweep fails: the program's way says what is wrong)
      raise TypeError(f"{eqn.prim.name}'s rule gave {aval_of(o)} for {v.aval}")
  return (lambda _: outs), backward, tuple([v.aval.is_float for v in eqn.outputs])


def _sweeps(program: Program, args: Sequence, wrt: Sequence[bool], out_cts: Sequence):
  """Both sweeps, unguarded (`vjp`)."""
  outs, tape, active = _swept(program, args, wrt)
  return outs, _backward(program, wrt, tape, active, out_cts)


def _forward(program: Program, args: Sequence, wrt: Sequence[bool]):
  """The forward sweep: (the program's outputs, the tape, the variables a derivative
  flows through)."""
  env = dict(zip(program.inputs, args, strict=True))
  active = {v for v, w in zip(program.inputs, wrt) if w}
  tape = []
  dead = _last_reads(program)
  for eqn, gone in zip(program.eqns, dead or itertools.repeat(())):
    outs = _step(eqn, [a.value if type(a) is Lit else env[a] for a in eqn.inputs], active, tape)
    if len(eqn.outputs) == 1:
      env[eqn.outputs[0]] = outs[0]
    else:
      for v, x in zip(eqn.outputs, outs):
        env[v] = x
    for v in gone:  # (what the backward sweep needs, the tape holds)
      del env[v]
  outs = [np.asarray(a.value if type(a) is Lit else env[a]) for a in program.outputs]
  return outs, tape, active


def _step(eqn: Eqn, xs: list, active: set, tape: list) -> list:
  """One equation of the forward sweep on its inputs' values `xs`: its outputs (then its
  residuals, where it has any). Where a derivative flows through it (an input in
  `active`), its entry is appended to `tape` and its float outputs made active."""
  mask = tuple([a in active for a in eqn.inputs])
  made = _rules(eqn, mask, xs) if True in mask else None
  if made is None:
    return results(eqn, impl_rules[eqn.prim](*xs, **eqn.kw))
  primal, transposed, floats = made
  outs = primal(xs)
  n = len(floats)
  tape.append((eqn, [a for a, m in zip(eqn.inputs, mask) if m], transposed, outs[n:]))
  if n == 1:
    active.add(eqn.outputs[0])
  else:
    active.update([v for v, f in zip(eqn.outputs, floats) if f])
  return outs


class Recording:
  """The forward sweep of a function, made while it is traced with values (a path of a
  function whose Python reads values: `trace_flat(concrete=, recorder=)` computes each
  equation's values by `_step`, not by its implementation alone), so that `vjp` or
  `pullback` of that program on the same arguments, inside `recorded(...)`, runs only
  the backward sweep: one forward computation per call, as autograd's tape, not the
  trace's and then the tape's. A derivative may flow from the float inputs among the
  first `leading` (the function's arguments; not the arrays it reads by name). An
  equation the trace made without `__call__` (its values computed otherwise), or one
  whose rules failed, leaves the recording unused: the sweep is made as before."""

  def __init__(self, leading: int):
    self.leading, self.eqns, self.tape, self.broken = leading, [], [], False
    self.inputs, self.values, self.active, self.outputs = (), (), set(), {}
    self.sources: frozenset = frozenset()  # the inputs a derivative may flow from

  def begin(self, inputs: Sequence[Var], values: Sequence) -> None:
    self.inputs, self.values = tuple(inputs), tuple(values)
    self.active = {v for v in self.inputs[: self.leading] if v.aval.is_float}
    self.sources = frozenset(self.active)

  def __call__(self, eqn: Eqn, xs: list) -> list:
    """`eqn`'s outputs on `xs` (then residuals), recorded; by its implementation alone
    where its rules fail (the recording is then not used)."""
    if not self.broken:
      try:
        outs = _step(eqn, xs, self.active, self.tape)
        self.eqns.append(eqn)
        return outs
      except Exception:  # noqa: BLE001 - the implementation says what is wrong, if anything
        self.broken = True
    return results(eqn, impl_rules[eqn.prim](*xs, **eqn.kw))

  def finish(self, eqns: Sequence[Eqn], outputs: dict) -> None:
    """The trace's equations (each must have been recorded) and its outputs' values."""
    self.outputs = outputs
    self.broken = self.broken or len(eqns) != len(self.eqns)
    self.broken = self.broken or any(a is not b for a, b in zip(eqns, self.eqns))

  def moved(self, program: Program) -> "Recording | None":
    """This recording as one of `program`, a trace of the same equations (`alpha_equal`
    or of the same fingerprint: another trace of the same path), its variables matched
    by position; None where it cannot be (broken, or of another length)."""
    if self.broken or len(program.eqns) != len(self.eqns):
      return None
    names = dict(zip(self.inputs, program.inputs, strict=True))
    at = {}
    for old, new in zip(self.eqns, program.eqns):
      names.update(zip(old.outputs, new.outputs, strict=True))
      at[id(old)] = new
    rename = lambda a: a if type(a) is Lit else names[a]
    out = Recording(self.leading)
    out.inputs, out.values, out.eqns = program.inputs, self.values, list(program.eqns)
    out.active, out.sources = {rename(v) for v in self.active}, {rename(v) for v in self.sources}
    out.tape = [(at[id(e)], [rename(a) for a in ins], t, r) for e, ins, t, r in self.tape]
    out.outputs = {names[v]: x for v, x in self.outputs.items() if v in names}
    return out

  def taken(self, program: Program, args: Sequence, wrt: Sequence[bool]):
    """`_forward`'s (outputs, tape, active) for `program` on `args`, where this is its
    recording (the same equations; its inputs perhaps in another order: `replayed.
    adopted`) on those arguments and `wrt` takes derivatives it recorded; else None."""
    if self.broken or len(program.eqns) != len(self.eqns):
      return None
    if any(a is not b for a, b in zip(program.eqns, self.eqns)):
      return None
    given = dict(zip(program.inputs, args))
    if any(
      v not in given or not _same_value(given[v], x) for v, x in zip(self.inputs, self.values)
    ):
      return None
    if any(w and v not in self.sources for v, w in zip(program.inputs, wrt)):
      return None
    try:
      outs = [np.asarray(a.value if type(a) is Lit else self.outputs[a]) for a in program.outputs]
    except KeyError:
      return None
    return outs, self.tape, self.active


def _same_value(x, y) -> bool:
  if x is y:
    return True
  x, y = np.asarray(x), np.asarray(y)
  return x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


class _Slot(threading.local):
  recording: "Recording | None" = None


_slot = _Slot()


@contextlib.contextmanager
def recorded(recording: "Recording | None"):
  """Within it, the first `vjp` or `pullback` of `recording`'s program on its arguments
  takes its forward sweep (`Recording.taken`) instead of making one."""
  _slot.recording = recording
  try:
    yield
  finally:
    _slot.recording = None


def _swept(program: Program, args: Sequence, wrt: Sequence[bool]):
  """`_forward`'s sweep, or the recording's (`recorded`: consumed) where it is this one."""
  recording = _slot.recording
  if recording is not None:
    found = recording.taken(program, args, wrt)
    if found is not None:
      _slot.recording = None
      return found
  return _forward(program, args, wrt)


_DEAD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # program -> _last_reads


def _last_reads(program: Program) -> list | None:
  """For each equation, the variables read there last (never an output): the forward
  sweep drops their values after it, so it holds only the live ones. None for a program
  whose values are small (`large`): it holds them all. Kept per program."""
  if program in _DEAD:
    return _DEAD[program]
  dead = _DEAD[program] = dead_after(program) if large(program) else None
  return dead


def _backward(program: Program, wrt, tape: list, active: set, out_cts: Sequence) -> list:
  """The backward sweep over `tape` (which it leaves as it is): the cotangents of the
  inputs marked in `wrt`."""
  cts: dict = {}
  for a, ct in zip(program.outputs, out_cts, strict=True):
    if ct is not None and a in active:
      _accumulate(cts, a, np.asarray(ct, a.aval.dtype))
  for eqn, inputs, transposed, res in reversed(tape):
    if len(eqn.outputs) == 1:
      ct = cts.pop(eqn.outputs[0], None)
      if ct is None:
        continue
      given = [ct]
    else:
      given = _given(cts, eqn)
      if given is None:
        continue
    for a, c in zip(inputs, transposed([*res, *given])):
      _accumulate(cts, a, c)
  return [
    np.asarray(cts[v]) if v in cts else np.zeros(v.aval.shape, v.aval.dtype)
    for v, w in zip(program.inputs, wrt)
    if w
  ]


def _given(cts: dict, eqn: Eqn) -> list | None:
  """The cotangents of an equation's float outputs (zeros for those that took none), or
  None where none took one."""
  floats = [v for v in eqn.outputs if v.aval.is_float]
  given = [cts.pop(v, None) for v in floats]
  if all(c is None for c in given):
    return None
  return [np.zeros(v.aval.shape, v.aval.dtype) if c is None else c for c, v in zip(given, floats)]


def _accumulate(cts: dict, v: Var, ct) -> None:
  cts[v] = cts[v] + ct if v in cts else ct


def vjp(
  program: Program, args: Sequence, wrt: Sequence[bool], out_cts: Sequence
) -> tuple[list, list]:
  """`program`'s outputs on `args` and the cotangents of the inputs marked in `wrt` (in
  order) for the output cotangents `out_cts` (one per output; None for an output that
  takes none): the values of `ad.vjp_program(program, wrt, ...)`'s program, IEEE results
  as in compiled code. Where anything fails, that program is made and run instead, whose
  checks name the op and the user's line (or which agrees there was nothing wrong)."""
  try:
    with np.errstate(all="ignore"):
      return _sweeps(program, args, wrt, out_cts)
  except Exception:  # noqa: BLE001 - see above
    return by_program(program, args, wrt, out_cts)


def pullback(program: Program, args: Sequence, wrt: Sequence[bool]) -> tuple[list, Callable]:
  """`vjp` in two steps, as autograd's tape runs (`primc.vjp` on values): the program's
  outputs on `args` now (the forward sweep), and a function of the output cotangents
  giving those of the inputs marked in `wrt` (the backward sweep, as often as it is
  called). Where a sweep fails, `vjp`'s program is made and run instead."""
  try:
    with np.errstate(all="ignore"):
      outs, tape, active = _swept(program, args, wrt)
  except Exception:  # noqa: BLE001 - the program's evaluation names what is wrong
    outs = [np.asarray(x) for x in eval_program(program, *args)]
    return outs, lambda out_cts: by_program(program, args, wrt, out_cts)[1]

  def back(out_cts: Sequence) -> list:
    try:
      with np.errstate(all="ignore"):
        return _backward(program, wrt, tape, active, out_cts)
    except Exception:  # noqa: BLE001 - as above
      return by_program(program, args, wrt, out_cts)[1]

  return outs, back


def by_program(program: Program, args, wrt, out_cts) -> tuple[list, list]:
  """`vjp`'s results by `ad.vjp_program`'s program, evaluated (staged into the caller's
  program while tracing)."""
  mask = [ct is not None for ct in out_cts]
  vjp_p = ad.vjp_program(program, wrt, mask)
  res = eval_program(vjp_p, *args, *[ct for ct in out_cts if ct is not None])
  return res[: len(program.outputs)], res[len(program.outputs) :]
