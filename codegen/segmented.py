"""Compiled programs with control flow (`primc.lax`): the program is cut at its `cond`,
`while` and `scan` equations into straight-line segments, each compiled as any program
is (fused kernels, cached); a control-flow equation runs its loop or branch choice here,
calling the compiled programs of its branches or body (each compiled once, nested control
flow the same way). Loops are real loops, never unrolled: where cond and body are
compiled programs, the whole loop runs natively (`codegen.loops`: the runner called on the
bodies' pointer tables, no Python between steps); otherwise each step is one call of a
compiled body from here.
"""

from __future__ import annotations

import types
from typing import Callable

import numpy as np

from primc.core import Lit, impl_rules, PrimcIndexError, Program, Var
from primc.lax import CONTROL_FLOW, cond_p, python_call_p, scan_p, while_p


def has_control_flow(program: Program) -> bool:
  return any(e.prim in CONTROL_FLOW for e in program.eqns)


def _segments(program: Program) -> list:
  """The program's equations as runs of straight-line equations (as Programs over the
  values they read and the values read after them) and single control-flow equations."""
  used_later: list[set] = [set() for _ in program.eqns]
  live = {a for a in program.outputs if isinstance(a, Var)}
  for i in range(len(program.eqns) - 1, -1, -1):
    used_later[i] = set(live)
    live.update(a for a in program.eqns[i].inputs if isinstance(a, Var))
  pieces, run = [], []

  def close(end: int):
    if not run:
      return
    defined = {v for e in run for v in e.outputs}
    inputs = list(
      dict.fromkeys(a for e in run for a in e.inputs if isinstance(a, Var) and a not in defined)
    )
    outputs = [v for e in run for v in e.outputs if v in used_later[end - 1]]
    pieces.append(Program(tuple(inputs), tuple(run), tuple(outputs)))
    run.clear()

  for i, eqn in enumerate(program.eqns):
    if eqn.prim in CONTROL_FLOW:
      close(i)
      pieces.append(eqn)
    else:
      run.append(eqn)
  close(len(program.eqns))
  return pieces


class Segmented:
  """The executable of a program with control flow (see the module docstring). `loops`:
  the native loops (`codegen.loops`: run_while, run_scan), which run a loop whose cond and
  body are compiled programs without Python between steps; None: every loop steps here."""

  def __init__(self, program: Program, load: Callable, loops=None):
    self.program = program
    self._load = load
    self._loops = loops
    self._steps = [self._step(p) for p in _segments(program)]
    kernels = set()
    for exe in self._executables:
      kernels.update(exe.plan.kernels)
    self.plan = types.SimpleNamespace(
      kernels=tuple(sorted(kernels)),
      program_outputs=tuple(("out", k) for k in range(len(program.outputs))),
      out_specs=tuple((a.aval.shape, np.dtype(a.aval.dtype)) for a in program.outputs),
    )

  @property
  def _executables(self):
    for kind, exe, _ in self._steps:
      yield from (exe if isinstance(exe, (list, tuple)) else [exe])

  def _step(self, piece):
    if isinstance(piece, Program):
      return ("segment", self._load(piece), piece)
    kw = piece.kw
    if piece.prim is cond_p:
      return ("cond", [self._load(b) for b in kw["branches"]], piece)
    if piece.prim is while_p:
      return ("while", [self._load(kw["cond"]), self._load(kw["body"])], piece)
    if piece.prim is python_call_p:
      return ("python", [], piece)
    assert piece.prim is scan_p
    return ("scan", [self._load(kw["body"])], piece)

  def __call__(self, inputs, out=None) -> list[np.ndarray]:
    env = dict(zip(self.program.inputs, inputs, strict=True))
    read = lambda a: a.value if isinstance(a, Lit) else env[a]
    for kind, exe, piece in self._steps:
      if kind == "segment":
        env.update(zip(piece.outputs, exe([read(a) for a in piece.inputs], None)))
      else:
        outs = _RUN[kind](exe, piece, [read(a) for a in piece.inputs], self._loops)
        env.update(zip(piece.outputs, outs, strict=True))
    results = [np.array(read(a), order="C") for a in self.program.outputs]
    if out is None:
      return results
    for o, r in zip(out, results):
      np.copyto(o, r)
    return list(out)

  def compile(self) -> None:
    for exe in self._executables:
      if hasattr(exe, "compile"):
        exe.compile()

  def runner(self, tree=None):
    return None  # no single native entry: calls take the general path


def _run_cond(exes, eqn, args, loops):
  k = int(args[0])
  if not 0 <= k < len(exes):
    raise PrimcIndexError(
      f"switch: branch index {k} is out of range for {len(exes)} branches (in a compiled program)"
    )
  return exes[k](list(args[1:]), None)


def _run_while(exes, eqn, args, loops):
  cond, body = exes
  n_cond, n_body = eqn.kw["n_cond"], eqn.kw["n_body"]
  consts_c, consts_b = args[:n_cond], args[n_cond : n_cond + n_body]
  carry = list(args[n_cond + n_body :])
  done = loops.run_while(cond, body, consts_c, consts_b, carry) if loops else None
  if done is not None:
    return done
  while bool(cond([*consts_c, *carry], None)[0]):
    carry = body([*consts_b, *carry], None)
  return carry


def _run_scan(exes, eqn, args, loops):
  (body,) = exes
  kw = eqn.kw
  n_consts, n_carry, length = kw["n_consts"], kw["n_carry"], kw["length"]
  consts, carry = args[:n_consts], list(args[n_consts : n_consts + n_carry])
  xs = [np.ascontiguousarray(x) for x in args[n_consts + n_carry :]]
  done = loops.run_scan(body, consts, carry, xs, length, kw["reverse"]) if loops else None
  if done is not None:
    return list(done[0]) + list(done[1])
  ys = [np.empty(a.aval.shape, a.aval.dtype) for a in eqn.outputs[n_carry:]]
  for i in range(length - 1, -1, -1) if kw["reverse"] else range(length):
    outs = body([*consts, *carry, *[x[i] for x in xs]], None)
    carry = outs[:n_carry]
    for y, v in zip(ys, outs[n_carry:]):
      y[i] = v
  return list(carry) + ys


def _run_python(exes, eqn, args, loops):
  return impl_rules[python_call_p](*args, **eqn.kw)


_RUN = {"cond": _run_cond, "while": _run_while, "scan": _run_scan, "python": _run_python}
