"""Programs run again and again on values: `runner(program)`, a function of the inputs'
values that calls each equation's numpy implementation in turn (its ufunc where it is
one), with no shape rule or dtype check again (they held when the program was traced).
Kept programs (`primc.kept`), the tape's one-equation programs (`primc.tape`) and control
flow on values (`bind_control`) run this way; the interpreter (`eval_program`,
`primc.interpreter`) stays the reference, and a runner's error runs it instead.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from primc.core import (
  Lit,
  Var,
  impl_rules,
  program_runner_rules,
  runner_rules,
  ufunc_rules,
)
from primc.trace import eval_program, tracing


def runner(program, guarded: bool = True) -> Callable[[list], list]:
  """`program` as a function of its inputs' values, for programs run again and again:
  each equation's numpy implementation (its ufunc, where it is one) called in turn on
  values in numbered slots, IEEE results as in compiled code; no shape rules again (they
  held when the program was traced); equations of constants computed once, here. An
  error runs the program again by `eval_program`, whose checks name the op and the
  user's line. Not `guarded`: neither that nor numpy's error state (the caller's)."""
  slots: dict = {}
  template: list = []
  known: set = set()  # slots whose value is a constant

  def slot(atom):
    if isinstance(atom, Lit):
      template.append(atom.value)
      known.add(len(template) - 1)
      return len(template) - 1
    if atom not in slots:
      slots[atom] = len(template)
      template.append(None)
    return slots[atom]

  inputs = [slot(v) for v in program.inputs]
  steps = []
  for e in program.eqns:
    impl, kw = _float_impl(e), {}
    if impl is None:
      impl, kw = impl_rules[e.prim], e.kw
      control = program_runner_rules.get(e.prim)  # (loops: their programs as runners)
      if control is not None:
        impl, kw = control(lambda p: runner(p, guarded=False), **e.kw), {}
    step = (
      impl,
      tuple(map(slot, e.inputs)),
      kw,
      tuple(map(slot, e.outputs)),
      e.prim.multiple_results,
    )
    if known.issuperset(step[1]):
      with np.errstate(all="ignore"):
        _step(template, *step)
      known.update(step[3])
    else:
      steps.append(step)
  outputs = [slot(a) for a in program.outputs]
  dead = last_reads([step[1] for step in steps], outputs) if large(program) else None

  def bare(values: list) -> list:
    env = template.copy()
    for k, x in zip(inputs, values):
      env[k] = x
    if dead is None:
      for step in steps:
        _step(env, *step)
    else:  # (a large program: each value dropped after its last read)
      for step, gone in zip(steps, dead):
        _step(env, *step)
        for k in gone:
          env[k] = None
    return [env[k] for k in outputs]

  if len(steps) <= GENERATED_STEPS:
    bare = _generating(bare, template, inputs, steps, outputs, dead)

  def run(values: list) -> list:
    try:
      with np.errstate(all="ignore"):
        return bare(values)
    except Exception:  # the reference path raises it, located (or agrees it was none)
      return eval_program(program, *values)

  return run if guarded else bare


def bind_control(prim, *args, **params) -> list:
  """`prim.bind(*args, **params)` for an equation holding programs (a loop, a branch, a
  custom call). On values outside any trace (`lax.while_loop` on arrays, a custom
  function called eagerly), its programs run as runners made once per call, not through
  `eval_program` at every step (a loop's small body: ~10x faster), in numpy's errors
  ignored as compiled code runs. Where that fails, bind runs it: the interpreter's path,
  which names the op and the user's line (or agrees nothing was wrong)."""
  if not tracing():
    try:
      with np.errstate(all="ignore"):
        run = program_runner_rules[prim](lambda p: runner(p, guarded=False), **params)
        return list(run(*args))
    except Exception:  # noqa: BLE001 - see above
      pass
  return prim.bind(*args, **params)


def _float_impl(e):
  """The equation's faster implementation on float operands (a ufunc keeps their dtypes;
  `runner_rules`), or None."""
  if not all(a.aval.dtype in ("float32", "float64") for a in (*e.inputs, *e.outputs)):
    return None
  if e.prim in ufunc_rules:
    return ufunc_rules[e.prim]
  make = runner_rules.get(e.prim)
  return None if make is None else make(*[a.aval for a in e.inputs], **e.kw)


GENERATED_STEPS = 48  # a runner of at most this many steps is one generated function...
GENERATE_AFTER = 64  # ...once it has run this many times: generating costs ~50 us a step
# and ~100 us more (Python's compile), the loop ~1 us a step more than the generated code


def _generating(loop: Callable, template: list, inputs: list, steps: list, outputs: list, dead):
  """`loop` for its first GENERATE_AFTER calls, then `_generated`'s function (ski rental:
  most programs run a few times, the tape's one-equation programs thousands)."""
  state = [0, loop]

  def bare(values: list) -> list:
    fn = state[1]
    if fn is loop:
      state[0] += 1
      if state[0] > GENERATE_AFTER:
        state[1] = fn = _generated(template, inputs, steps, outputs, dead)
    return fn(values)

  return bare


def _generated(template: list, inputs: list, steps: list, outputs: list, dead) -> Callable:
  """`runner`'s steps as one Python function, a line per step (no per-step dispatch: the
  tape's one-equation programs run ~2x faster); the same calls on the same values as its
  loop of `_step`s. Slot k is the local `s<k>`; constants and implementations are globals."""
  scope = {"_ndarray": np.ndarray, "_asarray": np.asarray}
  known = set(inputs)
  lines = [f"  s{k} = values[{i}]" for i, k in enumerate(inputs)]

  def ref(k: int) -> str:
    if k not in known:  # a constant (a literal, or folded when the runner was made)
      scope[f"s{k}"] = template[k]
      known.add(k)
    return f"s{k}"

  for i, (impl, ins, kw, outs, multiple) in enumerate(steps):
    scope[f"f{i}"], scope[f"k{i}"] = impl, kw
    call = f"f{i}({', '.join(map(ref, ins))}{', **k' + str(i) if kw else ''})"
    lines.append(f"  r = {call}")
    for j, k in enumerate(outs):
      got = f"r[{j}]" if multiple else "r"
      lines.append(f"  s{k} = {got} if type({got}) is _ndarray else _asarray({got})")
      known.add(k)
    dropped = [f"s{k}" for k in (dead[i] if dead else ()) if f"s{k}" not in scope]
    if dropped:  # (locals: `del`)
      lines.append(f"  del {', '.join(dropped)}")
  lines.append(f"  return [{', '.join(map(ref, outputs))}]")
  text = "def bare(values):\n" + "\n".join(lines)
  # (named as primc's file: `trace.user_source` skips its frames, as it skips `_step`'s)
  exec(compile(text, f"{__file__}:generated", "exec"), scope)  # noqa: S102 - our own text
  return scope["bare"]


FREEING_BYTES = 1 << 24  # a program whose values take more than this (16 MB) in all holds
# only its live ones when it runs; a smaller one holds them all (dropping costs a loop a step)


def large(program) -> bool:
  """Whether the values `program` makes take more than FREEING_BYTES in all."""
  return (
    sum(v.aval.size * np.dtype(v.aval.dtype).itemsize for e in program.eqns for v in e.outputs)
    > FREEING_BYTES
  )


def last_reads(reads: list, kept) -> list[tuple]:
  """For each step, of `reads` (what each step reads, in order), what is read there last
  and is not in `kept` (the outputs): a run drops those values after the step, so it holds
  only the live ones, not every value the program made (a 100-step fluid simulation's
  gradient: ~10^5 arrays of 100 KB)."""
  last = {k: i for i, step in enumerate(reads) for k in step}
  for k in kept:
    last.pop(k, None)
  dead = [[] for _ in reads]
  for k, i in last.items():
    dead[i].append(k)
  return [tuple(d) for d in dead]


def dead_after(program, kept=()) -> list[tuple]:
  """`last_reads` of a program's equations: for each, the variables read there last,
  never its outputs nor those of `kept`."""
  reads = [[a for a in eqn.inputs if type(a) is Var] for eqn in program.eqns]
  return last_reads(reads, [a for a in (*program.outputs, *kept) if type(a) is Var])


def _step(env, impl, ins, kw, outs, multiple) -> None:
  out = impl(*[env[k] for k in ins], **kw)
  for k, o in zip(outs, out if multiple else (out,)):
    env[k] = o if type(o) is np.ndarray else np.asarray(o)
