"""primc's thread pool: a threaded step's tasks, shared by the calling thread and a few
workers, a few tasks per claim, so that no step ever waits for a thread that is not
running.

A static split (OpenMP's default schedule, an OpenBLAS call) hands each thread its share
when the step starts; when the machine is busy, a worker the scheduler has not run yet
holds its share for a whole time slice (4-30 ms) while the caller, done with its own,
waits. The runtimes built for shared machines do otherwise: TBB's arenas let the calling
thread take part and idle threads steal split ranges (but numba's binding makes an arena
per call, and a range once stolen is held by its thief); XLA's CPU runtime partitions a
loop's items per worker, pops them one at a time, lets a worker whose partition is done
steal from the others', and runs one worker on the calling thread. Here, likewise, a task
belongs to no thread until one claims it: the caller publishes the step, wakes the
workers, and claims tasks itself; a worker that arrives late finds the tasks taken (or the
next step) and claims nothing. The caller then waits only for tasks already running, a
claim's time (a loop kernel's task is ~4,096 elements, a few microseconds).

  - claiming: `state` holds the step's number (its high 32 bits) and the next task (its
    low 32): a claim is a compare-and-swap of both, so a worker that read an older
    step's fields can never claim a task of a newer one. A claim takes a few tasks
    (guided: a share of what is left, at most CHUNK);
  - waiting: bounded spinning (`spin` rounds of `pause`, calibrated to SPIN_US), then
    the futex: a worker sleeps on `epoch` until a step is published, the caller on
    `done` until the last running task ends. Nothing spins without bound;
  - sharing: one step at a time; a caller that finds the pool taken (another Python
    thread's program, a kernel of a task) runs its tasks alone;
  - the pool's threads are native (pthreads, not Python threads) and sleep between
    programs; a forked child starts its own (`os.register_at_fork`).

Linux only (the futex); elsewhere `codegen.threads` uses numba's pool.

The pool is one block of memory, each field group on its own cache line (`FIELDS`); the
functions that use it are LLVM IR (`define`), compiled when threads first start
(`codegen.runner.the_pool`).
"""

from __future__ import annotations

import ctypes
import platform
import threading
import time

import numpy as np
from llvmlite import ir

LINE = 64
# byte offsets of the fields (groups written by different threads on separate lines)
FIELDS = {
  "state": (0, 64),  # step number << 32 | next task: every claim
  "done": (64, 32),  # tasks finished in this step: the caller's futex
  "caller_sleeps": (68, 32),  # the caller asleep on it (0 or 1)
  "epoch": (128, 32),  # the step number: the workers' futex
  "sleepers": (132, 32),  # workers asleep on it
  "kernel": (192, 64),
  "table": (200, 64),
  "ntasks": (208, 64),  # the step
  "status": (216, 64),  # the least result of its tasks (1: all ran)
  "spin": (224, 64),  # rounds of pause before sleeping
  "workers": (232, 64),  # worker threads running
  "busy": (256, 32),  # a caller owns the pool
}
SIZE = 320
SERIAL = 2  # pool_run's answer when the caller must run the tasks itself
SPIN_US = 30.0  # how long a thread spins for more work before it sleeps
# A claim takes 1/(CHUNK_SHARE x threads) of the tasks left, at least one, at most CHUNK
# (a task is a few microseconds: a claim per task made two threads trade the claim's
# cache line more than they computed; a long claim is what a descheduled worker holds)
CHUNK_SHARE, CHUNK = 4, 8
SYS_FUTEX = {
  "x86_64": 202,
  "amd64": 202,
  "aarch64": 98,
  "arm64": 98,
  "riscv64": 98,
  "ppc64le": 221,
  "s390x": 238,
}
FUTEX_WAIT, FUTEX_WAKE = 128, 129  # the _PRIVATE forms

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = I8.as_pointer()
KERNEL = ir.FunctionType(I64, [I64, I64, I64, PTR.as_pointer()])
RUN = ir.FunctionType(I64, [PTR, PTR, PTR.as_pointer(), I64])
WORKER = ir.FunctionType(PTR, [PTR])


def supported() -> bool:
  """Whether this platform has what the pool waits with (Linux's futex)."""
  return platform.system() == "Linux" and platform.machine().lower() in SYS_FUTEX


def _c(n: int, ty=I64):
  return ir.Constant(ty, n)


class _Builder:
  """An IRBuilder with the pool's fields and its few primitives (atomics, pause, futex)."""

  def __init__(self, fn: ir.Function, pool):
    self.fn = fn
    self.b = ir.IRBuilder(fn.append_basic_block("entry"))
    self.pool = pool
    self.mod = fn.module

  def block(self, name: str):
    return self.fn.append_basic_block(name)

  def field(self, name: str):
    offset, bits = FIELDS[name]
    return self.b.bitcast(self.b.gep(self.pool, [_c(offset)]), ir.IntType(bits).as_pointer())

  def load(self, name: str):
    offset, bits = FIELDS[name]
    return self.b.load_atomic(self.field(name), "seq_cst", bits // 8)

  def store(self, name: str, value):
    offset, bits = FIELDS[name]
    if not isinstance(value, ir.Value):
      value = _c(value, ir.IntType(bits))
    self.b.store_atomic(value, self.field(name), "seq_cst", bits // 8)

  def add(self, name: str, n: int):
    """Atomically adds n; the old value."""
    bits = FIELDS[name][1]
    return self.b.atomic_rmw("add", self.field(name), _c(n, ir.IntType(bits)), "seq_cst")

  def pause(self):
    """The CPU's spin-wait hint (x86 `pause`, Arm `yield`; nothing elsewhere)."""
    arch = platform.machine().lower()
    if arch in ("x86_64", "amd64"):
      self.b.call(self._declare("llvm.x86.sse2.pause", []), [])
    elif arch in ("aarch64", "arm64"):
      self.b.call(self._declare("llvm.aarch64.hint", [I32]), [_c(1, I32)])

  def _declare(self, name: str, args: list, ret=ir.VoidType(), var_arg=False):
    found = self.mod.globals.get(name)
    return found or ir.Function(self.mod, ir.FunctionType(ret, args, var_arg=var_arg), name)

  def futex(self, name: str, op: int, value):
    syscall = self._declare("syscall", [I64], I64, var_arg=True)
    self.b.call(
      syscall,
      [
        _c(SYS_FUTEX[platform.machine().lower()]),
        self.field(name),
        _c(op, I32),
        value,
        ir.Constant(PTR, None),
      ],
    )


def _spin_wait(w: _Builder, name: str, unchanged, sleepers: str, done_block) -> None:
  """Waits until `unchanged(w)` (an i1 built at each check) is false: `spin` rounds of
  pause, then sleeps on field `name` (counted in field `sleepers` while asleep) while it
  still holds the value read; continues in `done_block`."""
  b = w.b
  with b.goto_entry_block():
    count = b.alloca(I64)
  b.store(_c(0), count)
  check, spin, sleep = w.block("check"), w.block("spin"), w.block("sleep")
  b.branch(check)
  b.position_at_end(check)
  b.cbranch(unchanged(w), spin, done_block)
  b.position_at_end(spin)
  k = b.load(count)
  spinning = b.icmp_signed("<", k, w.load("spin"))
  with b.if_then(spinning):
    w.pause()
    b.store(b.add(k, _c(1)), count)
    b.branch(check)
  b.branch(sleep)
  b.position_at_end(sleep)
  seen = w.load(name)
  w.add(sleepers, 1)
  with b.if_then(unchanged(w)):  # seq_cst: a publisher that changed it since sees us
    w.futex(name, FUTEX_WAIT, seen)
  w.add(sleepers, -1)
  b.store(_c(0), count)
  b.branch(check)


def _clamp(b: ir.IRBuilder, v, lo: int, hi: int):
  v = b.select(b.icmp_signed("<", v, _c(lo)), _c(lo), v)
  return b.select(b.icmp_signed(">", v, _c(hi)), _c(hi), v)


def _work(mod: ir.Module) -> ir.Function:
  """`primc_pool_work(pool, epoch)`: claims and runs tasks of step `epoch` until none is
  left (or the step is over)."""
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR, I32]), "primc_pool_work")
  fn.linkage = "internal"
  pool, epoch = fn.args
  w = _Builder(fn, pool)
  b = w.b
  claim, run, leave = w.block("claim"), w.block("run"), w.block("leave")
  b.branch(claim)
  b.position_at_end(claim)
  state = w.load("state")
  current = b.icmp_unsigned("==", b.trunc(b.lshr(state, _c(32)), I32), epoch)
  task = b.and_(state, _c(0xFFFFFFFF))
  ntasks = w.load("ntasks")
  open_ = b.and_(current, b.icmp_signed("<", task, ntasks))
  with b.if_then(b.not_(open_)):
    b.branch(leave)
  # guided: a share of what is left (fewer claims of the shared line), at most CHUNK
  threads = b.add(w.load("workers"), _c(1))
  share = b.sdiv(b.sub(ntasks, task), b.mul(threads, _c(CHUNK_SHARE)))
  chunk = _clamp(b, share, 1, CHUNK)
  pair = b.cmpxchg(w.field("state"), state, b.add(state, chunk), "seq_cst", "seq_cst")
  b.cbranch(b.extract_value(pair, 1), run, claim)
  b.position_at_end(run)
  kernel = b.inttoptr(w.load("kernel"), KERNEL.as_pointer())
  table = b.inttoptr(w.load("table"), PTR.as_pointer())
  result = b.call(kernel, [_c(1), task, b.add(task, chunk), table])
  with b.if_then(b.icmp_signed("!=", result, _c(1)), likely=False):
    b.atomic_rmw("min", w.field("status"), result, "seq_cst")
  chunk32 = b.trunc(chunk, I32)
  finished = b.add(b.atomic_rmw("add", w.field("done"), chunk32, "seq_cst"), chunk32)
  last = b.icmp_signed("==", b.sext(finished, I64), ntasks)
  with b.if_then(b.and_(last, b.icmp_signed("!=", w.load("caller_sleeps"), _c(0, I32)))):
    w.futex("done", FUTEX_WAKE, _c(1, I32))
  b.branch(claim)
  b.position_at_end(leave)
  b.ret_void()
  return fn


def _run(mod: ir.Module, work: ir.Function) -> None:
  """`primc_pool_run(pool, kernel, table, ntasks)`: runs tasks [0, ntasks) of a kernel on
  the pool and this thread; the least task result (1: all ran), or SERIAL when the pool
  has no workers or another caller owns it."""
  fn = ir.Function(mod, RUN, "primc_pool_run")
  pool, kernel, table, ntasks = fn.args
  w = _Builder(fn, pool)
  b = w.b
  no_workers = b.icmp_signed("==", w.load("workers"), _c(0))
  with b.if_then(no_workers, likely=False):
    b.ret(_c(SERIAL))
  pair = b.cmpxchg(w.field("busy"), _c(0, I32), _c(1, I32), "seq_cst", "seq_cst")
  with b.if_then(b.not_(b.extract_value(pair, 1)), likely=False):
    b.ret(_c(SERIAL))
  w.store("kernel", b.ptrtoint(kernel, I64))
  w.store("table", b.ptrtoint(table, I64))
  w.store("ntasks", ntasks)
  w.store("status", 1)
  w.store("done", 0)
  epoch = b.add(w.load("epoch"), _c(1, I32))
  w.store("state", b.shl(b.zext(epoch, I64), _c(32)))
  w.store("epoch", epoch)
  with b.if_then(b.icmp_signed(">", w.load("sleepers"), _c(0, I32))):
    w.futex("epoch", FUTEX_WAKE, b.trunc(w.load("workers"), I32))
  b.call(work, [pool, epoch])
  done = w.block("done")
  _spin_wait(
    w,
    "done",
    lambda w: w.b.icmp_signed("!=", w.b.sext(w.load("done"), I64), ntasks),
    "caller_sleeps",
    done,
  )
  b.position_at_end(done)
  status = w.load("status")
  w.store("busy", 0)
  b.ret(status)


def _worker(mod: ir.Module, work: ir.Function) -> None:
  """`primc_pool_worker(pool)`: a worker thread's body, for the life of the process: waits
  for a new step, works on it, waits again."""
  fn = ir.Function(mod, WORKER, "primc_pool_worker")
  (pool,) = fn.args
  w = _Builder(fn, pool)
  b = w.b
  seen = b.alloca(I32)
  b.store(w.load("epoch"), seen)
  wait, got = w.block("wait"), w.block("got")
  b.branch(wait)
  b.position_at_end(wait)
  _spin_wait(
    w, "epoch", lambda w: w.b.icmp_unsigned("==", w.load("epoch"), w.b.load(seen)), "sleepers", got
  )
  b.position_at_end(got)
  epoch = w.load("epoch")
  b.store(epoch, seen)
  b.call(work, [pool, epoch])
  b.branch(wait)


def _pause_loop(mod: ir.Module) -> None:
  """`primc_pool_pauses(n)`: n rounds of pause (to time them)."""
  fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64]), "primc_pool_pauses")
  w = _Builder(fn, None)
  b = w.b
  k = b.alloca(I64)
  b.store(_c(0), k)
  loop, body, end = w.block("loop"), w.block("body"), w.block("end")
  b.branch(loop)
  b.position_at_end(loop)
  b.cbranch(b.icmp_signed("<", b.load(k), fn.args[0]), body, end)
  b.position_at_end(body)
  w.pause()
  b.store(b.add(b.load(k), _c(1)), k)
  b.branch(loop)
  b.position_at_end(end)
  b.ret_void()


def define(mod: ir.Module) -> None:
  """Adds the pool's functions to `mod`: `primc_pool_run`, `primc_pool_worker`,
  `primc_pool_pauses`."""
  work = _work(mod)
  _run(mod, work)
  _worker(mod, work)
  _pause_loop(mod)


class Pool:
  """The pool's memory and threads in this process (one per process: `the_pool`)."""

  def __init__(self, run: int, worker: int, pauses: int):
    self.run_address = run
    self._worker = worker
    self._pauses = ctypes.CFUNCTYPE(None, ctypes.c_int64)(pauses)
    self._memory = np.zeros(SIZE + LINE, np.uint8)
    self.address = self._memory.ctypes.data + (-self._memory.ctypes.data) % LINE
    self._threads: list[ctypes.c_ulong] = []
    self._lock = threading.Lock()

  def _word(self, name: str):
    offset, bits = FIELDS[name]
    kind = ctypes.c_int64 if bits == 64 else ctypes.c_int32
    return kind.from_address(self.address + offset)

  @property
  def workers(self) -> int:
    return self._word("workers").value

  def start(self, count: int) -> None:
    """Runs `count` worker threads (the caller is one more); at most once per process."""
    with self._lock:
      if self._threads or count < 1:
        return
      self._word("spin").value = self._spin_rounds(SPIN_US)
      libc = ctypes.CDLL(None, use_errno=True)
      for k in range(count):
        tid = ctypes.c_ulong()
        if (
          libc.pthread_create(
            ctypes.byref(tid), None, ctypes.c_void_p(self._worker), ctypes.c_void_p(self.address)
          )
          != 0
        ):
          break
        libc.pthread_detach(tid)
        if hasattr(libc, "pthread_setname_np"):
          libc.pthread_setname_np(tid, b"primc-worker")
        self._threads.append(tid)
      self._word("workers").value = len(self._threads)

  def _spin_rounds(self, microseconds: float) -> int:
    """How many rounds of pause take about `microseconds` here."""
    n = 20_000
    t = time.perf_counter()
    self._pauses(n)
    per_round = max(time.perf_counter() - t, 1e-9) / n
    return max(16, int(microseconds * 1e-6 / per_round))

  def after_fork(self) -> None:
    """In a forked child: the parent's workers are gone (only the forking thread
    survives fork); the pool starts again, with as many of its own."""
    count = len(self._threads)
    ctypes.memset(self.address, 0, SIZE)
    self._threads = []
    self._lock = threading.Lock()
    self.start(count)
