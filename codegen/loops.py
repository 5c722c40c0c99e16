"""Loops of compiled bodies run natively: `while` and `scan` equations (primc.lax) whose
cond and body are compiled programs loop in one native function (generated as LLVM IR,
compiled once per process) that calls the runner (`codegen.runner`) on the bodies' pointer
tables, with no Python between steps.

The tables are built once per loop: the loop-carried values live in two sets of buffers
the steps alternate between (a step reads set t and writes set 1 - t), so there are two
tables per program, one per direction. A scan's rows of `xs` and `ys` are addresses the
loop writes into both body tables before each step (`patches`: table, slot, base address,
row stride). The loop's data, an int64 array `d`:

    d[0] runner    d[1] kind (0 while, 1 scan)    d[2] length    d[3] reverse
    d[4:6] the cond's tables    d[6:8] the body's tables    d[8] the cond's flag address
    d[9] (out) which program stopped the loop: 0 cond, 1 body    d[10] (out) the set
    holding the result    d[11] number of patches    d[12:] patches, four words each

`primc_loop(d)` returns the runner's status (1, or 2 for an index out of bounds with the
program's error record set, 3 for a failure). A loop whose programs the native loop cannot
take (nested control flow, an interpreted tier, outputs that are inputs or literals) gets
None here and runs in Python (`codegen.segmented`), with the same results.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np
from llvmlite import ir

from primc.codegen import native, runner
from primc.codegen.executor import BLOCKS, Executable

WHILE, SCAN = 0, 1
FIRST_PATCH = 12

I8, I64 = ir.IntType(8), ir.IntType(64)
PTR = I8.as_pointer()
RUN = ir.FunctionType(I64, [PTR.as_pointer()])


@functools.cache
def _loop() -> ctypes._CFuncPtr:
  """The native loop of this process, called holding the GIL (the runner releases it
  while a step's tasks run on the thread pool)."""
  mod = ir.Module(name="primc_loops")
  _loop_ir(mod)
  (address,) = native.jit_functions(str(mod), ["primc_loop"])
  return ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(address)


def _loop_ir(mod: ir.Module) -> None:
  fn = ir.Function(mod, ir.FunctionType(I64, [I64.as_pointer()]), "primc_loop")
  (d,) = fn.args
  blocks = {
    n: fn.append_basic_block(n)
    for n in (
      "entry",
      "head",
      "cond",
      "test",
      "scan",
      "patch",
      "patched",
      "body",
      "stopped",
      "done",
    )
  }
  b = ir.IRBuilder(blocks["entry"])
  c = lambda n: ir.Constant(I64, n)
  word = lambda k: b.load(b.gep(d, [k]))
  run = b.inttoptr(word(c(0)), RUN.as_pointer())
  t, i, k = b.alloca(I64), b.alloca(I64), b.alloca(I64)
  status, which = b.alloca(I64), b.alloca(I64)
  b.store(c(0), t)
  b.store(c(0), i)
  b.branch(blocks["head"])

  b.position_at_end(blocks["head"])
  b.cbranch(b.icmp_signed("==", word(c(1)), c(WHILE)), blocks["cond"], blocks["scan"])

  b.position_at_end(blocks["cond"])  # while: the cond on set t, its flag
  st = b.call(run, [b.inttoptr(word(b.add(c(4), b.load(t))), PTR.as_pointer())])
  b.store(st, status)
  b.store(c(0), which)
  b.cbranch(b.icmp_signed("!=", st, c(1)), blocks["stopped"], blocks["test"])
  b.position_at_end(blocks["test"])
  flag = b.load(b.inttoptr(word(c(8)), PTR))
  b.cbranch(b.icmp_unsigned("==", flag, ir.Constant(I8, 0)), blocks["done"], blocks["body"])

  b.position_at_end(blocks["scan"])  # scan: step i, at row i (or length - 1 - i)
  length = word(c(2))
  b.store(c(0), k)
  b.cbranch(b.icmp_signed("<", b.load(i), length), blocks["patch"], blocks["done"])
  b.position_at_end(blocks["patch"])
  row = b.select(
    b.icmp_signed("!=", word(c(3)), c(0)), b.sub(b.sub(length, c(1)), b.load(i)), b.load(i)
  )
  kk = b.load(k)
  with b.if_then(b.icmp_signed("<", kk, word(c(11)))):
    at = b.add(c(FIRST_PATCH), b.mul(kk, c(4)))
    table = b.inttoptr(word(at), I64.as_pointer())
    slot, base, stride = (word(b.add(at, c(n))) for n in (1, 2, 3))
    b.store(b.add(base, b.mul(row, stride)), b.gep(table, [slot]))
    b.store(b.add(kk, c(1)), k)
    b.branch(blocks["patch"])
  b.branch(blocks["patched"])
  b.position_at_end(blocks["patched"])
  b.branch(blocks["body"])

  b.position_at_end(blocks["body"])  # the body from set t into set 1 - t
  tt = b.load(t)
  st = b.call(run, [b.inttoptr(word(b.add(c(6), tt)), PTR.as_pointer())])
  b.store(st, status)
  b.store(c(1), which)
  with b.if_then(b.icmp_signed("!=", st, c(1)), likely=False):
    b.branch(blocks["stopped"])
  b.store(b.sub(c(1), tt), t)
  b.store(b.add(b.load(i), c(1)), i)
  b.branch(blocks["head"])

  b.position_at_end(blocks["stopped"])
  b.store(b.load(which), b.gep(d, [c(9)]))
  b.store(b.load(t), b.gep(d, [c(10)]))
  b.ret(b.load(status))

  b.position_at_end(blocks["done"])
  b.store(b.load(t), b.gep(d, [c(10)]))
  b.ret(c(1))


def _takes(*exes) -> bool:
  """Whether the native loop can run these programs: compiled executables (their kernels
  ready) whose outputs the driver writes, in order."""
  for exe in exes:
    if type(exe) is not Executable or not exe.native_loop_ready():
      return False
  return True


def _address(x: np.ndarray) -> int:
  return x.__array_interface__["data"][0]


def _arrays(values, avals) -> list[np.ndarray] | None:
  """The values as C-contiguous arrays of the avals' dtypes (copied only where they are
  not), or None where a shape differs."""
  out = []
  for v, a in zip(values, avals, strict=True):
    x = np.asarray(v, np.dtype(a.dtype), order="C")  # (ascontiguousarray makes 0-d 1-d)
    if x.shape != a.shape:
      return None
    out.append(x)
  return out


class _Prepared:
  """A loop's native state, built once and reused by its later calls (one caller at a
  time: `_states` hands each concurrent call its own): the two carry sets, a block of
  arena memory per program, the tables and the loop's data. A call writes the addresses of
  its loop-invariant inputs into the tables (`const_slots`) and of its rows into the
  patches (`row_words`), and its initial carry into set 0."""

  def __init__(self, kind, programs, carry_avals, length=0, reverse=False):
    self.kind, self.programs = kind, programs
    self.sets = [[np.empty(a.shape, np.dtype(a.dtype)) for a in carry_avals] for _ in (0, 1)]
    self.blocks = {id(p): BLOCKS.take(p.arena_bytes) for p in programs}
    self.errs = {id(p): np.zeros(4, np.int64) for p in programs}
    self.const_slots = []  # (table, slot, k): table[slot] = the address of constant k
    self.length, self.reverse = length, reverse

  def table(self, exe: Executable, n_consts: int, inputs, outputs, const_base=0):
    t = exe.pointer_table(
      [0] * n_consts + [_address(a) for a in inputs],
      [_address(a) for a in outputs],
      _address(self.blocks[id(exe)].memory),
      _address(self.errs[id(exe)]),
    )
    self.const_slots += [(t, exe.input_slot(j), const_base + j) for j in range(n_consts)]
    return t

  def finish(self, tables_c, tables_b, flag, patches) -> None:
    runner_address, _ = runner.addresses()
    self.tables = (*tables_c, *tables_b)
    d = [
      runner_address,
      self.kind,
      self.length,
      int(self.reverse),
      *[_address(t) for t in tables_c],
      *[_address(t) for t in tables_b],
      flag,
      0,
      0,
      len(patches),
    ]
    assert len(d) == FIRST_PATCH
    self.row_words = []  # (word index, which row array) for each patch's base
    for p, (table, slot, which, stride) in enumerate(patches):
      d += [_address(table), slot, 0, stride]
      self.row_words.append((FIRST_PATCH + 4 * p + 2, which))
    self.d = np.array(d, np.int64)

  def run(self, consts, carry, rows=()) -> int:
    """Runs the loop from `carry` with these constants and row arrays (the arrays must
    stay alive until it returns); the set holding the result."""
    for table, slot, k in self.const_slots:
      table[slot] = _address(consts[k])
    for x, c in zip(self.sets[0], carry, strict=True):
      np.copyto(x, c)
    for word, which in self.row_words:
      self.d[word] = _address(rows[which])
    status = _loop()(_address(self.d))
    if status == 2:
      exe = self.programs[int(self.d[9])]
      raise exe.plan.index_error(*self.errs[id(exe)][:3].tolist())
    if status != 1:
      raise RuntimeError("a compiled primc program failed (numba printed its error above)")
    return int(self.d[10])


_states: dict[tuple, list[_Prepared]] = {}  # a loop's key -> its prepared states not in use
_states_lock = threading.Lock()


def _prepared(key, build) -> _Prepared:
  with _states_lock:
    free = _states.get(key)
    if free:
      return free.pop()
  return build()


STATES_KEPT = 256  # loops whose prepared states are kept (then all are dropped, and rebuilt)


def _release(key, state: _Prepared) -> None:
  with _states_lock:
    if key not in _states and len(_states) >= STATES_KEPT:
      _states.clear()  # a state holds its programs: their ids cannot be reused meanwhile
    _states.setdefault(key, []).append(state)


def run_while(cond: Executable, body: Executable, consts_c, consts_b, carry):
  """The final carry of `while cond(consts_c, carry): carry = body(consts_b, carry)`, or
  None when the native loop does not take these programs."""
  if not _takes(cond, body):
    return None
  n_c, n_b = len(consts_c), len(consts_b)
  consts = _arrays([*consts_c, *consts_b], (*cond.plan.in_avals[:n_c], *body.plan.in_avals[:n_b]))
  carry = _arrays(carry, body.plan.in_avals[n_b:])
  if consts is None or carry is None:
    return None
  key = (WHILE, id(cond), id(body), n_c, n_b)

  def build():
    state = _Prepared(WHILE, (cond, body), body.plan.in_avals[n_b:])
    flag = state.flag = np.zeros((), np.bool_)
    sets = state.sets
    tables_c = [state.table(cond, n_c, sets[t], [flag]) for t in (0, 1)]
    tables_b = [state.table(body, n_b, sets[t], sets[1 - t], const_base=n_c) for t in (0, 1)]
    state.finish(tables_c, tables_b, _address(flag), [])
    return state

  state = _prepared(key, build)
  try:
    return [np.array(x) for x in state.sets[state.run(consts, carry)]]
  finally:
    _release(key, state)


def run_scan(body: Executable, consts, carry, xs, length: int, reverse: bool):
  """(final carry, ys) of a scan whose step is `carry, y = body(consts, carry, x)` over
  the rows of xs, or None when the native loop does not take the body."""
  if not _takes(body):
    return None
  n_consts, n_carry = len(consts), len(carry)
  in_avals, out_avals = body.plan.in_avals, body.plan.out_avals
  x_avals = in_avals[n_consts + n_carry :]
  consts = _arrays(consts, in_avals[:n_consts])
  carry = _arrays(carry, in_avals[n_consts : n_consts + n_carry])
  rows = [np.asarray(x, np.dtype(a.dtype), order="C") for x, a in zip(xs, x_avals, strict=True)]
  if (
    consts is None
    or carry is None
    or any(x.shape != (length, *a.shape) for x, a in zip(rows, x_avals))
  ):
    return None
  ys = [np.empty((length, *a.shape), np.dtype(a.dtype)) for a in out_avals[n_carry:]]
  key = (SCAN, id(body), n_consts, n_carry, length, reverse)

  def build():
    state = _Prepared(SCAN, (body, body), in_avals[n_consts : n_consts + n_carry], length, reverse)
    row = lambda a: np.empty(a.shape, np.dtype(a.dtype))  # stand-ins: patched every step
    x0, y0 = [row(a) for a in x_avals], [row(a) for a in out_avals[n_carry:]]
    tables = [
      state.table(body, n_consts, state.sets[t] + x0, state.sets[1 - t] + y0) for t in (0, 1)
    ]
    itemsize = lambda a: int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
    patches = []
    for table in tables:
      patches += [
        (table, body.input_slot(n_consts + n_carry + j), j, itemsize(a))
        for j, a in enumerate(x_avals)
      ]
      patches += [
        (table, body.output_slot(n_carry + j), len(x_avals) + j, itemsize(a))
        for j, a in enumerate(out_avals[n_carry:])
      ]
    state.finish(tables, tables, 0, patches)
    return state

  state = _prepared(key, build)
  try:
    t = state.run(consts, carry, [*rows, *ys])
    return [np.array(x) for x in state.sets[t]], ys
  finally:
    _release(key, state)
