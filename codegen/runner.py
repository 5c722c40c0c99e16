"""The runner: one native function, the same for every program, that runs a compiled
program's kernels in order (generated as LLVM IR, compiled once per process).

A program is data. The runner takes the pointer table of a call
`[words, err, inputs..., constants..., outputs..., arena views...]` (filled by the
native entry, `codegen.native`); `words` (int64) starts with the program's steps:

    words[0] = number of steps, words[1] = the trampoline's address,
    words[2] = the longest kernel table, then per step:
    [kernel address, flags, site, offset of its words, n, n indices into the table]

and holds each kernel's own words (sizes, float constants) after them. For each step the
runner points a kernel table `[words + offset, err, its arrays...]` at the call's arrays
and runs the kernel's phases (`codegen.kernels`):

    r = kernel(0, 0, 0, t)     setup: returns 1 + its number of tasks, -1 for an index
                               out of bounds (err[1:3] set), 0 if it failed
    kernel(1, lo, hi, t)       tasks [lo, hi) (serial ones may return -1, err[1:3] set,
                               as setup): task by task on the thread pool (primc's,
                               `codegen.pool`, or numba's `numba_parallel_for` through the
                               trampoline) when the step's flags say threaded and there
                               are several tasks and threads, else in one call
    kernel(2, 0, 0, t)         finish, when the flags ask for it

It is called holding the GIL and lets it go while tasks run on the pool. It returns 1,
2 when a kernel found an index out of bounds (err[0] = the step's site),
or 3 when a kernel failed (numba printed its error). Kernels are numba `cfunc`s of
`int64(int64, int64, int64, CPointer(voidptr))`: a kernel failing returns 0.
"""

from __future__ import annotations

import ctypes
import functools
import os

from llvmlite import ir

from primc.codegen import native, pool, threads

THREADED, FINISH = 1, 2  # step flags
HEADER = 3  # words before the first step
STEP = 5  # words of a step before its table indices

I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.IntType(8).as_pointer()
KERNEL = ir.FunctionType(I64, [I64, I64, I64, PTR.as_pointer()])
SAVE = ir.FunctionType(PTR, [])
RESTORE = ir.FunctionType(ir.VoidType(), [PTR])
GUFUNC = ir.FunctionType(ir.VoidType(), [PTR.as_pointer(), I64.as_pointer(), I64.as_pointer(), PTR])


def _c(n: int):
  return ir.Constant(I64, n)


def _capi(name: str) -> int:
  return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


THREAD_POOL = ("numba_parallel_for", "get_num_threads")  # numba's, the runner calls by pointer


@functools.cache
def addresses() -> tuple[int, int]:
  """(runner, trampoline) in this process. The runner reaches a thread pool through
  pointers it holds (`primc_pool` and `primc_pool_entry`, primc's own pool and its run
  function, or numba's `primc_<name>` functions), null until `enable_threads` sets them:
  till then every step runs on the calling thread, and neither the pool's code nor numba
  is loaded."""
  mod = ir.Module(name="primc_runner")
  for name in ("pool", "pool_entry", *THREAD_POOL):
    pointer = ir.GlobalVariable(mod, PTR, f"primc_{name}")
    pointer.initializer = ir.Constant(PTR, None)
  _trampoline(mod)
  _runner(mod)
  return native.jit_functions(str(mod), ["primc_run", "primc_tasks"])


@functools.cache
def enable_threads() -> None:
  """Starts the thread pool and points the runner at it: before the first program with
  threaded steps runs. primc's own pool (`codegen.pool`) where `threads.own_pool()`, with
  `threads.num_threads() - 1` workers (none: every step runs on the caller); else
  numba's (`threads.pool`)."""
  addresses()
  if threads.own_pool():
    the_pool().start(threads.num_threads() - 1)
    _set_global("pool_entry", the_pool().run_address)
    _set_global("pool", the_pool().address)
    threads.prepare_numba_layer()  # numba's own parallel code beside it: on TBB
    return
  numba_pool = threads.pool()
  for name, address in zip(
    THREAD_POOL, (numba_pool.parallel_for, numba_pool.get_num_threads), strict=True
  ):
    _set_global(name, address)


@functools.cache
def the_pool() -> pool.Pool:
  """This process's pool (its functions compiled, its threads started in
  `enable_threads`: a process that runs no threaded step compiles neither)."""
  mod = ir.Module(name="primc_pool")
  pool.define(mod)
  found = pool.Pool(
    *native.jit_functions(str(mod), ["primc_pool_run", "primc_pool_worker", "primc_pool_pauses"])
  )
  os.register_at_fork(after_in_child=found.after_fork)
  return found


def _set_global(name: str, value: int) -> None:
  ctypes.c_void_p.from_address(native.global_address(f"primc_{name}")).value = value


def _trampoline(mod: ir.Module) -> None:
  """`primc_tasks(args, dims, steps, data)`: numba's parallel_for calls it with
  `args[0]` = the first task (as a pointer) and `dims[0]` = the number of tasks; `data`
  is `{kernel, kernel table, failed flag}`."""
  fn = ir.Function(mod, GUFUNC, "primc_tasks")
  args, dims, _, data = fn.args
  b = ir.IRBuilder(fn.append_basic_block())
  ctx = b.bitcast(data, I64.as_pointer())
  kernel = b.inttoptr(b.load(ctx), KERNEL.as_pointer())
  table = b.inttoptr(b.load(b.gep(ctx, [_c(1)])), PTR.as_pointer().as_pointer())
  lo = b.ptrtoint(b.load(args), I64)
  hi = b.add(lo, b.load(dims))
  ok = b.call(kernel, [_c(1), lo, hi, b.load(table)])
  with b.if_then(b.icmp_signed("==", ok, _c(0)), likely=False):
    b.store(_c(1), b.gep(ctx, [_c(2)]))
  b.ret_void()


def _runner(mod: ir.Module) -> None:
  """`primc_run(p)`: the loop over the steps described in the module docstring."""
  w = _RunnerWriter(mod)
  w.next_step()
  w.load_step()
  w.fill_table()
  w.setup()
  w.tasks()
  w.threads()
  w.serial()
  w.finish()
  w.exits()


class _RunnerWriter:
  """Writes `primc_run` block by block; a step's values (loaded in `load_step`, the task
  count in `setup`) are kept here for the blocks after them."""

  BLOCKS = (
    "entry",
    "step",
    "load",
    "fill",
    "filled",
    "tasks",
    "threads",
    "serial",
    "finish",
    "next",
    "index_error",
    "failed",
    "done",
  )

  def __init__(self, mod: ir.Module):
    self.parallel_for = mod.globals["primc_numba_parallel_for"]
    self.num_threads = mod.globals["primc_get_num_threads"]
    self.pool = mod.globals["primc_pool"]
    self.pool_run = mod.globals["primc_pool_entry"]
    fn = ir.Function(mod, ir.FunctionType(I64, [PTR.as_pointer()]), "primc_run")
    (self.p,) = fn.args
    self.blocks = {name: fn.append_basic_block(name) for name in self.BLOCKS}
    b = self.b = ir.IRBuilder(self.blocks["entry"])
    self.words = b.bitcast(b.load(self.p), I64.as_pointer())
    self.err = b.load(b.gep(self.p, [_c(1)]))
    self.nsteps, self.trampoline, longest = (self.word(_c(k)) for k in range(3))
    self.table = b.alloca(PTR, longest)
    self.ctx = b.alloca(I64, _c(3))  # {kernel, &table, failed}: the trampoline's data
    self.first = b.alloca(PTR)  # parallel_for's args[0]: task 0 (null), step 1
    self.count, self.stride = b.alloca(I64), b.alloca(I64)
    self.table_slot = b.alloca(PTR.as_pointer())
    b.store(ir.Constant(PTR, None), self.first)
    b.store(_c(1), self.stride)
    b.store(self.table, self.table_slot)
    self.step_i, self.pos, self.j = b.alloca(I64), b.alloca(I64), b.alloca(I64)
    b.store(_c(0), self.step_i)
    b.store(_c(HEADER), self.pos)
    b.branch(self.blocks["step"])

  def word(self, k):
    return self.b.load(self.b.gep(self.words, [k]))

  def at(self, name: str) -> ir.IRBuilder:
    self.b.position_at_end(self.blocks[name])
    return self.b

  def next_step(self) -> None:
    b = self.at("step")
    b.cbranch(
      b.icmp_signed("<", b.load(self.step_i), self.nsteps), self.blocks["load"], self.blocks["done"]
    )

  def load_step(self) -> None:
    """The step's kernel, flags, site, words and table size; the table's first entries."""
    b = self.at("load")
    self.pos_now = at = b.load(self.pos)
    self.kernel = b.inttoptr(self.word(at), KERNEL.as_pointer())
    self.flags, self.site = self.word(b.add(at, _c(1))), self.word(b.add(at, _c(2)))
    offset, self.n = self.word(b.add(at, _c(3))), self.word(b.add(at, _c(4)))
    b.store(b.bitcast(b.gep(self.words, [offset]), PTR), self.table)
    b.store(self.err, b.gep(self.table, [_c(1)]))
    b.store(_c(0), self.j)
    b.branch(self.blocks["fill"])

  def fill_table(self) -> None:
    """table[2 + j] = p[indices[j]] for the step's n arrays."""
    b = self.at("fill")
    k = b.load(self.j)
    with b.if_then(b.icmp_signed("<", k, self.n)):
      index = self.word(b.add(b.add(self.pos_now, _c(STEP)), k))
      b.store(b.load(b.gep(self.p, [index])), b.gep(self.table, [b.add(k, _c(2))]))
      b.store(b.add(k, _c(1)), self.j)
      b.branch(self.blocks["fill"])
    b.branch(self.blocks["filled"])

  def setup(self) -> None:
    """Phase 0: the task count, or an index error, or a failure."""
    b = self.at("filled")
    r = b.call(self.kernel, [_c(0), _c(0), _c(0), self.table])
    with b.if_then(b.icmp_signed("<", r, _c(0)), likely=False):
      b.branch(self.blocks["index_error"])
    with b.if_then(b.icmp_signed("==", r, _c(0)), likely=False):
      b.branch(self.blocks["failed"])
    self.ntasks = b.sub(r, _c(1))
    b.cbranch(b.icmp_signed(">", self.ntasks, _c(0)), self.blocks["tasks"], self.blocks["finish"])

  def tasks(self) -> None:
    b = self.at("tasks")
    threaded = b.and_(
      b.icmp_unsigned("!=", b.and_(self.flags, _c(THREADED)), _c(0)),
      b.icmp_signed(">", self.ntasks, _c(1)),
    )
    b.cbranch(threaded, self.blocks["threads"], self.blocks["serial"])

  def threads(self) -> None:
    """Phase 1 on primc's pool, else numba's, without the GIL (a kernel that fails takes
    it to print its error); on this thread alone where neither runs or the pool is
    taken."""
    b = self.at("threads")
    own = b.load(self.pool)
    with b.if_then(b.icmp_unsigned("!=", own, ir.Constant(PTR, None)), likely=True):
      run = b.bitcast(b.load(self.pool_run), pool.RUN.as_pointer())
      state = b.call(b.inttoptr(_c(_capi("PyEval_SaveThread")), SAVE.as_pointer()), [])
      status = b.call(run, [own, b.bitcast(self.kernel, PTR), self.table, self.ntasks])
      b.call(b.inttoptr(_c(_capi("PyEval_RestoreThread")), RESTORE.as_pointer()), [state])
      with b.if_then(b.icmp_signed("==", status, _c(pool.SERIAL))):
        b.branch(self.blocks["serial"])
      with b.if_then(b.icmp_signed("<", status, _c(0)), likely=False):
        b.branch(self.blocks["index_error"])
      b.cbranch(b.icmp_signed("==", status, _c(0)), self.blocks["failed"], self.blocks["finish"])
    parallel_for = b.load(self.parallel_for)
    with b.if_then(b.icmp_unsigned("==", parallel_for, ir.Constant(PTR, None)), likely=False):
      b.branch(self.blocks["serial"])  # no thread pool (yet): see enable_threads
    num_threads = b.bitcast(b.load(self.num_threads), ir.FunctionType(I32, []).as_pointer())
    parallel_for = b.bitcast(
      parallel_for, ir.FunctionType(ir.VoidType(), [PTR] * 5 + [I64] * 3).as_pointer()
    )
    nthreads = b.sext(b.call(num_threads, []), I64)
    with b.if_then(b.icmp_signed("<", nthreads, _c(2))):
      b.branch(self.blocks["serial"])
    b.store(b.ptrtoint(self.kernel, I64), self.ctx)
    b.store(b.ptrtoint(self.table_slot, I64), b.gep(self.ctx, [_c(1)]))
    b.store(_c(0), b.gep(self.ctx, [_c(2)]))
    b.store(self.ntasks, self.count)
    state = b.call(b.inttoptr(_c(_capi("PyEval_SaveThread")), SAVE.as_pointer()), [])
    b.call(
      parallel_for,
      [
        b.inttoptr(self.trampoline, PTR),
        b.bitcast(self.first, PTR),
        b.bitcast(self.count, PTR),
        b.bitcast(self.stride, PTR),
        b.bitcast(self.ctx, PTR),
        _c(0),
        _c(1),
        nthreads,
      ],
    )
    b.call(b.inttoptr(_c(_capi("PyEval_RestoreThread")), RESTORE.as_pointer()), [state])
    with b.if_then(b.icmp_signed("!=", b.load(b.gep(self.ctx, [_c(2)])), _c(0)), likely=False):
      b.branch(self.blocks["failed"])
    b.branch(self.blocks["finish"])

  def serial(self) -> None:
    b = self.at("serial")
    ok = b.call(self.kernel, [_c(1), _c(0), self.ntasks, self.table])
    with b.if_then(b.icmp_signed("<", ok, _c(0)), likely=False):  # a linalg failure
      b.branch(self.blocks["index_error"])
    b.cbranch(b.icmp_signed("==", ok, _c(0)), self.blocks["failed"], self.blocks["finish"])

  def finish(self) -> None:
    """Phase 2 where the flags ask for it, then the next step."""
    b = self.at("finish")
    with b.if_then(b.icmp_unsigned("!=", b.and_(self.flags, _c(FINISH)), _c(0))):
      ok = b.call(self.kernel, [_c(2), _c(0), _c(0), self.table])
      with b.if_then(b.icmp_signed("==", ok, _c(0)), likely=False):
        b.branch(self.blocks["failed"])
    b.branch(self.blocks["next"])
    b = self.at("next")
    b.store(b.add(b.load(self.step_i), _c(1)), self.step_i)
    b.store(b.add(b.add(self.pos_now, _c(STEP)), self.n), self.pos)
    b.branch(self.blocks["step"])

  def exits(self) -> None:
    b = self.at("index_error")
    b.store(self.site, b.bitcast(self.err, I64.as_pointer()))
    b.ret(_c(2))
    self.at("failed").ret(_c(3))
    self.at("done").ret(_c(1))
