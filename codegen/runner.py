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
    kernel(1, lo, hi, t)       tasks [lo, hi): on numba's thread pool (`numba_parallel_for`,
                               through the trampoline) when the step's flags say threaded
                               and there are several tasks and threads, else in one call
    kernel(2, 0, 0, t)         finish, when the flags ask for it

It is called holding the GIL and lets it go while tasks run on the pool. It returns 1,
2 when a kernel found an index out of bounds (err[0] = the step's site),
or 3 when a kernel failed (numba printed its error). Kernels are numba `cfunc`s of
`int64(int64, int64, int64, CPointer(voidptr))`: a kernel failing returns 0.
"""
from __future__ import annotations

import ctypes
import functools

from llvmlite import ir

from primc.codegen import native, threads

THREADED, FINISH = 1, 2  # step flags
HEADER = 3               # words before the first step
STEP = 5                 # words of a step before its table indices

I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.IntType(8).as_pointer()
KERNEL = ir.FunctionType(I64, [I64, I64, I64, PTR.as_pointer()])
SAVE = ir.FunctionType(PTR, [])
RESTORE = ir.FunctionType(ir.VoidType(), [PTR])
GUFUNC = ir.FunctionType(ir.VoidType(), [PTR.as_pointer(), I64.as_pointer(),
                                         I64.as_pointer(), PTR])


def _c(n: int):
  return ir.Constant(I64, n)


def _capi(name: str) -> int:
  return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


@functools.cache
def addresses() -> tuple[int, int]:
  """(runner, trampoline) in this process (numba's thread pool started first: the runner
  calls its `numba_parallel_for` and `get_num_threads`)."""
  threads.layer()
  mod = ir.Module(name="primc_runner")
  _trampoline(mod)
  _runner(mod)
  return native.jit_functions(str(mod), ["primc_run", "primc_tasks"])


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
  parallel_for = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR] * 5 + [I64] * 3),
                             "numba_parallel_for")
  num_threads = ir.Function(mod, ir.FunctionType(I32, []), "get_num_threads")
  fn = ir.Function(mod, ir.FunctionType(I64, [PTR.as_pointer()]), "primc_run")
  (p,) = fn.args
  blocks = {name: fn.append_basic_block(name) for name in (
      "entry", "step", "load", "fill", "filled", "tasks", "threads", "serial", "finish", "next",
      "index_error", "failed", "done")}
  b = ir.IRBuilder(blocks["entry"])
  words = b.bitcast(b.load(p), I64.as_pointer())
  err = b.load(b.gep(p, [_c(1)]))
  word = lambda k: b.load(b.gep(words, [k]))
  nsteps, trampoline, longest = word(_c(0)), word(_c(1)), word(_c(2))
  table = b.alloca(PTR, longest)
  ctx = b.alloca(I64, _c(3))      # {kernel, &table, failed}: the trampoline's data
  first = b.alloca(PTR)           # parallel_for's args[0]: task 0 (null), step 1
  count, stride = b.alloca(I64), b.alloca(I64)
  table_slot = b.alloca(PTR.as_pointer())
  b.store(ir.Constant(PTR, None), first)
  b.store(_c(1), stride)
  b.store(table, table_slot)
  step_i, pos, j = b.alloca(I64), b.alloca(I64), b.alloca(I64)
  b.store(_c(0), step_i)
  b.store(_c(HEADER), pos)
  b.branch(blocks["step"])

  # one step: its kernel table, then its phases
  b.position_at_end(blocks["step"])
  b.cbranch(b.icmp_signed("<", b.load(step_i), nsteps), blocks["load"], blocks["done"])

  b.position_at_end(blocks["load"])
  at = b.load(pos)
  kernel = b.inttoptr(word(at), KERNEL.as_pointer())
  flags, site = word(b.add(at, _c(1))), word(b.add(at, _c(2)))
  offset, n = word(b.add(at, _c(3))), word(b.add(at, _c(4)))
  b.store(b.bitcast(b.gep(words, [offset]), PTR), table)
  b.store(err, b.gep(table, [_c(1)]))
  b.store(_c(0), j)
  b.branch(blocks["fill"])

  b.position_at_end(blocks["fill"])  # table[2 + j] = p[indices[j]]
  k = b.load(j)
  with b.if_then(b.icmp_signed("<", k, n)):
    index = word(b.add(b.add(at, _c(STEP)), k))
    b.store(b.load(b.gep(p, [index])), b.gep(table, [b.add(k, _c(2))]))
    b.store(b.add(k, _c(1)), j)
    b.branch(blocks["fill"])
  b.branch(blocks["filled"])

  b.position_at_end(blocks["filled"])
  r = b.call(kernel, [_c(0), _c(0), _c(0), table])
  with b.if_then(b.icmp_signed("<", r, _c(0)), likely=False):
    b.branch(blocks["index_error"])
  with b.if_then(b.icmp_signed("==", r, _c(0)), likely=False):
    b.branch(blocks["failed"])
  ntasks = b.sub(r, _c(1))
  b.cbranch(b.icmp_signed(">", ntasks, _c(0)), blocks["tasks"], blocks["finish"])

  b.position_at_end(blocks["tasks"])
  threaded = b.and_(b.icmp_unsigned("!=", b.and_(flags, _c(THREADED)), _c(0)),
                    b.icmp_signed(">", ntasks, _c(1)))
  b.cbranch(threaded, blocks["threads"], blocks["serial"])

  b.position_at_end(blocks["threads"])
  nthreads = b.sext(b.call(num_threads, []), I64)
  with b.if_then(b.icmp_signed("<", nthreads, _c(2))):
    b.branch(blocks["serial"])
  b.store(b.ptrtoint(kernel, I64), ctx)
  b.store(b.ptrtoint(table_slot, I64), b.gep(ctx, [_c(1)]))
  b.store(_c(0), b.gep(ctx, [_c(2)]))
  b.store(ntasks, count)
  # the tasks run without the GIL (a kernel that fails takes it to print its error)
  state = b.call(b.inttoptr(_c(_capi("PyEval_SaveThread")), SAVE.as_pointer()), [])
  b.call(parallel_for, [b.inttoptr(trampoline, PTR), b.bitcast(first, PTR),
                        b.bitcast(count, PTR), b.bitcast(stride, PTR), b.bitcast(ctx, PTR),
                        _c(0), _c(1), nthreads])
  b.call(b.inttoptr(_c(_capi("PyEval_RestoreThread")), RESTORE.as_pointer()), [state])
  with b.if_then(b.icmp_signed("!=", b.load(b.gep(ctx, [_c(2)])), _c(0)), likely=False):
    b.branch(blocks["failed"])
  b.branch(blocks["finish"])

  b.position_at_end(blocks["serial"])
  ok = b.call(kernel, [_c(1), _c(0), ntasks, table])
  b.cbranch(b.icmp_signed("==", ok, _c(0)), blocks["failed"], blocks["finish"])

  b.position_at_end(blocks["finish"])
  with b.if_then(b.icmp_unsigned("!=", b.and_(flags, _c(FINISH)), _c(0))):
    ok = b.call(kernel, [_c(2), _c(0), _c(0), table])
    with b.if_then(b.icmp_signed("==", ok, _c(0)), likely=False):
      b.branch(blocks["failed"])
  b.branch(blocks["next"])

  b.position_at_end(blocks["next"])
  b.store(b.add(b.load(step_i), _c(1)), step_i)
  b.store(b.add(b.add(at, _c(STEP)), n), pos)
  b.branch(blocks["step"])

  b.position_at_end(blocks["index_error"])
  b.store(site, b.bitcast(err, I64.as_pointer()))
  b.ret(_c(2))
  b.position_at_end(blocks["failed"])
  b.ret(_c(3))
  b.position_at_end(blocks["done"])
  b.ret(_c(1))
