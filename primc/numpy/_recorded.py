"""Traced numpy calls kept by signature: the equations a pure op stages, recorded once per
kind of arguments and staged again at each later call.

While tracing, a `primc.numpy` function runs numpy's promotion and broadcasting rules
and each primitive's shape rule before it stages its few equations: ~10 µs per
equation (the 946-step HMM's trace: 0.15 s), where staging an equation costs ~1 µs.
For the pure ops (`_op(recorded=...)`: ufuncs, reductions, products, basic indexing),
those equations depend only on the call's *signature*: each array's shape, dtype and
weakness (and which arguments are the same object), and the values of everything else
(Python numbers, axes, indices, keywords). So a signature's equations are recorded, as
a small program of inputs for its arrays (as JAX's dispatch keeps one per signature),
and every later call of it stages them on its own arguments (`trace.restage`). The
record is read off the signature's first call where the equations it staged read only
its arguments and each other (`_observed`); otherwise the op is traced alone at the
signature's second call, on fresh inputs (`_record`).

A call is recorded from the user's code (not from inside another op), with arguments of
the kinds above, in a trace of abstract values or of concrete ones (there each replayed
result's value is computed from the record); its record is kept only where the op staged
equations and nothing else: results that are new traced arrays (not views), no value
read, nothing of an enclosing trace captured. An op that raises is not recorded (it runs
as it is, and raises in its own words).
"""

from __future__ import annotations

import types

import numpy as np

from primc.core import SUPPORTED_DTYPES, Lit, Program, ShapedArray, dtype_name
from primc.trace import Builder, Tracer, refresh_view, restage, restage_kinds, values_beside
from primc.trace import state as trace_state

MAX_RECORDS = 4096
NOT_RECORDED = object()  # `call`'s answer where the call must run as it is
_records: dict = {}  # (op, signature) -> `_Record`, or None: that signature runs as it is
_seen: dict = {}  # signatures called once (recorded at their second call)
_PLAIN = frozenset([int, bool, str, type(None), types.EllipsisType])
_SUPPORTED = frozenset(SUPPORTED_DTYPES)


class _Unrecorded(Exception):
  """An argument whose kind a signature cannot name."""


class _Record:
  """An op's equations on inputs of its array arguments' types, one per argument:
  `program`; `outs`, per result: the index of the argument it is (the same object), or
  its weakness; `kind`: tuple or list where the op returns one, else None. (`kinds`, how
  each equation is staged again, made at its first replay: most signatures read off a
  call, `x[t]` over a loop's t, are never replayed.)"""

  __slots__ = ("program", "outs", "kind", "_kinds")

  def __init__(self, program: Program, outs: tuple, kind):
    self.program, self.outs, self.kind, self._kinds = program, outs, kind, None

  @property
  def kinds(self) -> tuple:
    if self._kinds is None:
      self._kinds = restage_kinds(self.program)
    return self._kinds

  def values(self, arrays: list) -> list:
    """The outputs' values on the arguments' (`Tracer.concrete`), as `bind` computes them
    beside a trace of values."""
    return values_beside(self.program, [a.concrete if type(a) is Tracer else a for a in arrays])


def call(op, run, args: tuple, kwargs: dict, constants: bool = True):
  """`run(*args, **kwargs)` (the op `op`) by the record of its signature. A new
  signature runs as it is, and its record is read off the equations it staged where
  they are the op's alone (`_observed`); where not (they read a constant staged before,
  or the operand a reshape came from), it is recorded at its second call, traced alone
  (`_record`). `NOT_RECORDED` where this call must run as it is. Not `constants`: only
  calls whose arrays are all traced are replayed (an op that reads a constant array's
  values: indexing by one)."""
  builder = trace_state.builders[-1]
  arrays: list = []
  try:
    key = (op, *[_signature(a, arrays, builder) for a in args])
    if kwargs:
      key += (_signature(kwargs, arrays, builder),)
    record = _records.get(key, _records)
  except (_Unrecorded, TypeError):  # (TypeError: a value Python cannot hash)
    return NOT_RECORDED
  if record is _records:
    if not constants and not all(type(a) is Tracer for a in arrays):
      _bounded(_records, key, None)
      return NOT_RECORDED
    if key not in _seen:
      n, reads = len(builder.eqns), len(builder.guards)
      out = run(*args, **kwargs)
      record = None if len(builder.guards) != reads else _observed(builder.eqns[n:], arrays, out)
      if record is None:
        _bounded(_seen, key, None)  # (traced alone at its second call)
      else:
        _bounded(_records, key, record)
      return out
    record = _record(run, args, kwargs, arrays)
    _bounded(_records, key, record)
  if record is None:
    return NOT_RECORDED
  values = None if builder.recorder is None else []  # (computed by the recorder)
  atoms = restage(record.program, arrays, record.kinds, values)
  if record.kind is None and type(record.outs[0]) is not int and not builder.concrete:
    t = Tracer(builder, atoms[0])
    t.weak = record.outs[0][1]
    return t
  return _results(record, arrays, atoms, builder, values)


def _observed(eqns: list, arrays: list, out) -> _Record | None:
  """The record of a call read off the equations it staged (`eqns`) and its result, or
  None where those read anything but its traced arguments, literals and each other
  (an array argument's literal, a constant or a reshape's operand staged before)."""
  defined = set()
  for a in arrays:
    if type(a) is not Tracer or a.ir_var in defined:
      return None
    defined.add(a.ir_var)
  for eqn in eqns:
    for x in eqn.inputs:
      if type(x) is not Lit and x not in defined:
        return None
    defined.update(eqn.outputs)
  kind = type(out) if type(out) in (tuple, list) else None
  outs = out if kind else (out,)
  spec = []
  for o in outs:
    if type(o) is not Tracer or o.base is not None or o.ir_var not in defined:
      return None
    same = [k for k, a in enumerate(arrays) if a is o]
    spec.append(same[0] if same else ("weak", o.weak))
  inputs = tuple([a.ir_var for a in arrays])
  return _Record(Program(inputs, tuple(eqns), tuple([o.ir_var for o in outs])), tuple(spec), kind)


def clear() -> None:
  """Forgets every signature seen and recorded."""
  _records.clear()
  _seen.clear()


def _bounded(table: dict, key, value) -> None:
  """`table[key] = value`, the oldest entry dropped past `MAX_RECORDS` (tolerating
  another thread's entries coming and going meanwhile: traces run in several)."""
  if len(table) >= MAX_RECORDS:
    try:
      table.pop(next(iter(table)), None)
    except (RuntimeError, StopIteration):  # (changed size while read: another thread's)
      pass
  table[key] = value


def _signature(x, arrays: list, builder: Builder):
  """What of `x` its op's equations may depend on; its arrays appended to `arrays`."""
  t = type(x)
  if t is Tracer:
    if x.builder is not builder or (x.concrete is None) is builder.concrete:
      raise _Unrecorded  # (in a trace of values, one whose value is unknown)
    if x.base is not None and x.base[0].version != x.base[1]:
      refresh_view[0](x)  # (a view whose array changed since: as `bind` reads it)
    for k, a in enumerate(arrays):
      if a is x:
        return ("same", k)
    arrays.append(x)
    aval = x.ir_var.aval
    return (aval.shape, aval.dtype, x.weak)
  if t is np.ndarray:
    dtype = dtype_name(x.dtype)
    if dtype not in _SUPPORTED:
      raise _Unrecorded
    for k, a in enumerate(arrays):
      if a is x:
        return ("same", k)
    arrays.append(x)
    return ("array", x.shape, dtype)
  if t is float:
    return (float, x.hex())  # (-0.0 and 0.0 apart; NaN equal to itself)
  if t in _PLAIN:
    return (t, x)
  if t is tuple or t is list:
    return (t, tuple([_signature(item, arrays, builder) for item in x]))
  if t is dict:
    return tuple([(k, _signature(v, arrays, builder)) for k, v in sorted(x.items())])
  if t is slice:
    return (slice, *[_signature(v, arrays, builder) for v in (x.start, x.stop, x.step)])
  if isinstance(x, np.generic):
    return (t, x.tobytes())
  if t is np.dtype or (t is type and issubclass(x, np.generic)):
    return (t, x)
  raise _Unrecorded


def _record(run, args: tuple, kwargs: dict, arrays: list) -> _Record | None:
  """The op traced alone on fresh inputs in place of `arrays` (a trace level of its
  own), or None where it does anything but stage equations."""
  sub = Builder(len(trace_state.builders))
  fresh = {}
  for a in arrays:
    t = fresh[id(a)] = sub.new_input(_aval(a))
    t.weak = type(a) is Tracer and a.weak
  swap = lambda x: _swapped(x, fresh)
  trace_state.builders.append(sub)
  try:
    out = run(*swap(args), **swap(kwargs))
  except Exception:  # noqa: BLE001 - the op runs again as it is, and raises there
    return None
  finally:
    trace_state.builders.pop()
  kind = type(out) if type(out) in (tuple, list) else None
  outs = out if kind else (out,)
  if sub.captured or sub.guards or not all(_fresh_result(o, sub) for o in outs):
    return None
  given = {id(t): k for k, t in enumerate(fresh.values())}
  spec = []
  for o in outs:
    if id(o) in given:
      spec.append(given[id(o)])  # the argument itself
    elif o.ir_var in sub.inputs and type(arrays[sub.inputs.index(o.ir_var)]) is not Tracer:
      return None  # (a traced array of an array argument's value: not a program's atom)
    else:
      spec.append(("weak", o.weak))
  program = Program(tuple(sub.inputs), tuple(sub.eqns), tuple(o.ir_var for o in outs))
  return _Record(program, tuple(spec), kind)


def _aval(a) -> ShapedArray:
  return a.ir_var.aval if type(a) is Tracer else ShapedArray(a.shape, dtype_name(a.dtype))


def _swapped(x, fresh: dict):
  t = type(x)
  if (t is Tracer or t is np.ndarray) and id(x) in fresh:
    return fresh[id(x)]
  if t is tuple or t is list:
    return t([_swapped(item, fresh) for item in x])
  if t is dict:
    return {k: _swapped(v, fresh) for k, v in x.items()}
  return x


def _fresh_result(o, sub: Builder) -> bool:
  return type(o) is Tracer and o.builder is sub and o.base is None and o.concrete is None


def _results(record: _Record, arrays: list, atoms: list, builder: Builder, values=None):
  """The call's results (in a trace of values, each new one with its value: `values`,
  where `restage` computed them)."""
  if builder.concrete and not values:
    values = record.values(arrays)
  results = []
  for k, (spec, atom) in enumerate(zip(record.outs, atoms)):
    if type(spec) is int:
      results.append(arrays[spec])
    else:
      t = Tracer(builder, atom)
      if values is not None:
        t.concrete = values[k]
      t.weak = spec[1]
      results.append(t)
  return record.kind(results) if record.kind else results[0]
