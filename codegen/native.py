"""Native entry points: one CPython function per compiled plan, generated as LLVM IR.

A plan's driver (`codegen.runner`) is a native function of one argument, a table of data
pointers (`[words, err, inputs..., constants..., outputs..., arena views...]`).
The entry is the CPython function (`METH_FASTCALL`) in front of it: it checks each input
(exactly an ndarray, C-contiguous and aligned, of the plan's dtype and shape), allocates
the outputs with numpy's `PyArray_Empty`, points the table at the arrays and at a stack
arena, calls the driver and returns the outputs. A steady call then costs one vectorcall
and one allocation per output: no Python frame, no numba dispatch (type fingerprints and
a meminfo per array argument) and no arena views built at run time.

An argument the entry does not take returns `None` (a miss: the caller takes its general
path, which converts the arguments). A driver that found an index out of bounds (status 2,
its `err` record on the entry's stack) makes the entry call the plan's error handler,
which raises the IndexError; a driver that raised (numba prints the error; a cfunc cannot
pass it on) returns NULL with a RuntimeError.

The entry reads `PyArrayObject` and `PyArray_Descr` fields at fixed offsets and calls
numpy's C API through its table (indices fixed by numpy's ABI). `available()` checks the
offsets against a probe array once per process; where they differ the executor calls the
driver through ctypes instead (slower, same results).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import itertools
import sys
import threading

import numpy as np
from llvmlite import ir

METH_FASTCALL = 0x80
# numpy C-API table indices (part of numpy's ABI)
API_ARRAY_TYPE, API_ARRAY_EMPTY = 2, 184
# PyArrayObject_fields and PyArray_Descr field offsets on 64-bit CPython (checked by `available`)
DATA, NDIM, DIMS, DESCR, FLAGS = 16, 24, 32, 56, 64
DESCR_BYTEORDER, DESCR_TYPE_NUM = 26, 28
C_CONTIGUOUS_ALIGNED = 0x1 | 0x100  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED
STACK_ARENA_MAX = 1 << 16  # bytes: larger arenas come from the executor's pool
ALIGN = 64


@dataclasses.dataclass(frozen=True)
class EntrySpec:
  """What one entry does, all of it fixed when the plan is compiled. Its `layout` decides
  the machine code (shared by every spec of that layout); the rest (shapes, addresses,
  offsets) is data the code reads from `words()` at run time."""

  inputs: tuple[tuple[np.dtype, tuple[int, ...]], ...]  # (dtype, shape)
  consts: tuple[int, ...]  # data addresses of the constants
  outputs: tuple[tuple[bool, tuple[int, ...], int], ...]  # (allocated here, shape, descr address)
  buffers: tuple[int, ...]  # arena buffer sizes in bytes
  stack_arena: bool  # the arena on the stack, else arguments
  views: tuple[tuple[int, int], ...]  # (buffer, byte offset) per arena view
  sizes: int  # data address of the sizes array
  driver: int  # the runner's address
  result: str  # "leaf" | "tuple" | "list" | "ok"
  on_error: int = 0  # address of a callable(site, index, size) that raises the index error

  def __post_init__(self):
    # an entry returns the outputs it allocated, or True over outputs it was given
    assert self.result in ("leaf", "tuple", "list", "ok")
    assert self.result == "ok" or all(alloc for alloc, _, _ in self.outputs)
    assert self.result != "leaf" or len(self.outputs) == 1

  @property
  def n_args(self) -> int:
    given_outs = sum(not alloc for alloc, _, _ in self.outputs)
    return len(self.inputs) + given_outs + (0 if self.stack_arena else len(self.buffers))

  @property
  def layout(self) -> tuple:
    """Everything the entry's code depends on: counts, dtypes, ranks, which buffer each
    view is in, where outputs and the arena come from, the result's form."""
    return (
      tuple((dtype.num, len(shape)) for dtype, shape in self.inputs),
      len(self.consts),
      tuple((alloc, len(shape)) for alloc, shape, _ in self.outputs),
      len(self.buffers),
      tuple(b for b, _ in self.views),
      self.stack_arena,
      self.result,
    )

  def words(self) -> np.ndarray:
    """The entry's data, in the order `entry_ir` reads it (see `_Words`)."""
    starts = arena_starts(self.buffers)
    words = [self.sizes, self.driver, self.on_error, max(starts[-1], 1)]
    for _, shape in self.inputs:
      words += shape
    words += self.consts
    for _, shape, descr in self.outputs:
      words += [descr, *shape]
    words += starts[:-1]
    words += [off for _, off in self.views]
    return np.array(words, np.uint64).view(np.int64)


def arena_starts(buffers) -> list[int]:
  """Where each arena buffer (sizes in bytes) starts in one block, ALIGN-aligned; the
  block's size last."""
  return list(itertools.accumulate((-(-n // ALIGN) * ALIGN for n in buffers), initial=0))


def pointer_table(sizes: int, err: int, inputs, consts, outputs, bases, views) -> list[int]:
  """The driver's table `[words, err, inputs..., constants..., outputs..., arena
  views...]` (views: (buffer, byte offset) into the buffers at `bases`)."""
  return [sizes, err, *inputs, *consts, *outputs, *(bases[k] + off for k, off in views)]


@functools.cache
def _capi() -> dict[str, int]:
  api = ctypes.pythonapi
  get = api.PyCapsule_GetPointer
  get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
  try:
    from numpy._core import _multiarray_umath
  except ImportError:  # numpy 1
    from numpy.core import _multiarray_umath
  table = (ctypes.c_void_p * (API_ARRAY_EMPTY + 1)).from_address(
    get(_multiarray_umath._ARRAY_API, None)
  )
  fn = lambda name: ctypes.cast(getattr(api, name), ctypes.c_void_p).value
  return {
    "array_type": table[API_ARRAY_TYPE],
    "empty": table[API_ARRAY_EMPTY],
    "incref": fn("Py_IncRef"),
    "decref": fn("Py_DecRef"),
    "tuple_new": fn("PyTuple_New"),
    "tuple_set": fn("PyTuple_SetItem"),
    "list_new": fn("PyList_New"),
    "list_set": fn("PyList_SetItem"),
    "set_string": fn("PyErr_SetString"),
    "runtime_error": ctypes.c_void_p.in_dll(api, "PyExc_RuntimeError").value,
    "call_function": fn("PyObject_CallFunction"),
    "none": id(None),
    "true": id(True),
  }


@functools.cache
def available() -> bool:
  """Whether this process's CPython and numpy lay arrays out as the entries read them."""
  if sys.implementation.name != "cpython" or sys.maxsize < 2**62:
    return False
  try:
    capi = _capi()
    probe = np.zeros((3, 5), np.float32)
    word = lambda addr, off, kind: kind.from_address(addr + off).value
    a = id(probe)
    dims = ctypes.cast(word(a, DIMS, ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64))
    descr = word(a, DESCR, ctypes.c_void_p)
    flags = word(a, FLAGS, ctypes.c_int32)
    odd = np.zeros((5, 3), np.float32).T  # not C-contiguous
    return (
      capi["array_type"] == id(np.ndarray)
      and word(a, 8, ctypes.c_void_p) == id(np.ndarray)
      and word(a, DATA, ctypes.c_void_p) == probe.ctypes.data
      and word(a, NDIM, ctypes.c_int32) == 2
      and (dims[0], dims[1]) == (3, 5)
      and descr == id(probe.dtype)
      and word(descr, DESCR_TYPE_NUM, ctypes.c_int32) == np.dtype(np.float32).num
      and word(descr, DESCR_BYTEORDER, ctypes.c_char) == b"="
      and flags & C_CONTIGUOUS_ALIGNED == C_CONTIGUOUS_ALIGNED
      and word(id(odd), FLAGS, ctypes.c_int32) & 1 == 0
    )
  except Exception:  # any surprise: the ctypes path
    return False


_engine_lock = threading.Lock()
_engine = None
_code: dict[tuple, int] = {}  # layout -> the address of its compiled entry


def _jit(ir_text: str, name: str) -> int:
  """Compiles one IR module into this process's engine (one MCJIT engine, shared; its
  code stays for the process's life, a few kB per layout); the function's address."""
  import llvmlite.binding as llvm

  global _engine
  if _engine is None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # straight-line code: no optimization needed (measured: same call time, 2.3 ms per
    # entry instead of 5)
    target = llvm.Target.from_default_triple().create_target_machine(opt=0)
    _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target)
  mod = llvm.parse_assembly(ir_text)
  mod.verify()
  _engine.add_module(mod)
  _engine.finalize_object()
  return _engine.get_function_address(name)


def jit_functions(ir_text: str, names: list[str]) -> tuple[int, ...]:
  """Compiles one IR module into this process's engine; the addresses of `names`."""
  with _engine_lock:
    first = _jit(ir_text, names[0])
    return (first, *(_engine.get_function_address(n) for n in names[1:]))


def function_address(name: str) -> int:
  """The address of a function of a module `jit_functions` compiled."""
  with _engine_lock:
    return _engine.get_function_address(name)


def global_address(name: str) -> int:
  """The address of a global variable of a module `jit_functions` compiled."""
  with _engine_lock:
    return _engine.get_global_value_address(name)


def _address(spec: EntrySpec) -> int:
  """The compiled code of `spec`'s layout (compiled on first use)."""
  layout = spec.layout
  with _engine_lock:
    if layout not in _code:
      name = f"primc_entry_{len(_code)}"
      _code[layout] = _jit(entry_ir(spec, name), name)
    return _code[layout]


class _MethodDef(ctypes.Structure):
  _fields_ = [
    ("ml_name", ctypes.c_char_p),
    ("ml_meth", ctypes.c_void_p),
    ("ml_flags", ctypes.c_int),
    ("ml_doc", ctypes.c_char_p),
  ]


class _Words(np.ndarray):
  """An entry's data (`EntrySpec.words`), passed to it as its `self`; it also holds the
  method table and the objects the data points into."""


def entry(spec: EntrySpec, keep_alive) -> object:
  """The CPython function of `spec` (it holds `keep_alive`: the arrays and objects whose
  addresses the spec names)."""
  words = spec.words().view(_Words)
  words.keep = (_MethodDef(b"primc_entry", _address(spec), METH_FASTCALL, None), keep_alive)
  new = ctypes.pythonapi.PyCFunction_NewEx
  new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
  return new(ctypes.addressof(words.keep[0]), words, None)


I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = I8.as_pointer()
VOID = ir.VoidType()


def _i64(n: int):
  return ir.Constant(I64, n)


def entry_ir(spec: EntrySpec, name: str) -> str:
  """The LLVM IR of the entry `name` for `spec`'s layout: straight-line code reading its
  shapes and addresses from its `self`, an array of `spec.words()`. In order: the inputs'
  checks (any failure is a miss), the outputs, the driver's pointer table, the call and
  its status, the result."""
  e = _EntryWriter(spec, name)
  sizes, driver, on_error, arena_bytes = e.word_as_ptr(), e.word(), e.word_as_ptr(), e.word()
  e.require(e.b.icmp_signed("==", e.nargs, _i64(spec.n_args)))
  data = [e.checked_input(k, dtype, len(shape)) for k, (dtype, shape) in enumerate(spec.inputs)]
  consts = e.word_ptr(len(spec.consts))  # (their addresses: copied by a loop, below)
  # every check passed: from here on the entry succeeds or fails with an exception
  given = iter(range(len(spec.inputs), spec.n_args))
  outs = [e.output(alloc, len(shape), given) for alloc, shape, _ in spec.outputs]
  bases = e.arena(arena_bytes, given)
  err = e.b.alloca(I64, _i64(4))  # the driver's error record (see codegen.module)
  head = [sizes, e.b.bitcast(err, PTR), *data]
  table = e.b.alloca(PTR, _i64(len(head) + len(spec.consts) + len(outs) + len(spec.views)))
  e.store_all(table, 0, head)
  e.loop(len(spec.consts), lambda k: e.copy_word(consts, k, table, len(head)))
  at = len(head) + len(spec.consts)
  e.store_all(table, at, [e.field(o, DATA, PTR) for o in outs])
  e.views(table, at + len(outs), bases)
  e.call_driver(driver, table, err, on_error)
  e.result(outs)
  e.miss_returns_none()
  return str(e.mod)


class _EntryWriter:
  """One entry function being written: its IR builder, its reading position in the
  spec's words, the outputs it owns (released on a failure) and the helpers of
  `entry_ir`. Each method leaves the builder at the end of the block where the entry
  goes on."""

  def __init__(self, spec: EntrySpec, name: str):
    self.spec, self.capi = spec, _capi()
    self.mod = ir.Module(name=name)
    self.fn = ir.Function(self.mod, ir.FunctionType(PTR, [PTR, PTR.as_pointer(), I64]), name)
    self.self_, self.args, self.nargs = self.fn.args
    self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
    self.miss = self.fn.append_basic_block("miss")
    self.words = self.b.bitcast(self.field(self.self_, DATA, PTR), I64.as_pointer())
    self.position = 0
    self.owned = []

  # -- reading --------------------------------------------------------------------------
  def field(self, obj, offset: int, ty):
    b = self.b
    return b.load(b.bitcast(b.gep(obj, [_i64(offset)]), ty.as_pointer()))

  def word_ptr(self, n: int = 1):
    """The address of the next word of the spec's data (then skips `n` words)."""
    address = self.b.gep(self.words, [_i64(self.position)])
    self.position += n
    return address

  def word(self):
    return self.b.load(self.word_ptr())

  def word_as_ptr(self):
    return self.b.inttoptr(self.word(), PTR)

  def arg(self, k: int):
    return self.b.load(self.b.gep(self.args, [_i64(k)]))

  # -- calls and control ----------------------------------------------------------------
  def call(self, fname: str, restype, *argv):
    fty = ir.FunctionType(restype, [a.type for a in argv])
    return self.b.call(self.b.inttoptr(_i64(self.capi[fname]), fty.as_pointer()), argv)

  def const_ptr(self, address: int):
    return ir.Constant(I64, address).inttoptr(PTR)

  def string(self, text: bytes, name: str):
    data = bytearray(text + b"\0")
    g = ir.GlobalVariable(self.mod, ir.ArrayType(I8, len(data)), name)
    g.global_constant, g.initializer = True, ir.Constant(ir.ArrayType(I8, len(data)), data)
    return self.b.bitcast(g, PTR)

  def require(self, cond):
    """Goes on in a new block when `cond`, else misses."""
    ok = self.fn.append_basic_block()
    self.b.cbranch(cond, ok, self.miss)
    self.b.position_at_end(ok)

  def branch(self, cond, name: str):
    """Opens the block taken when `cond` (returned) and goes on after it in another."""
    taken, rest = self.fn.append_basic_block(name), self.fn.append_basic_block()
    self.b.cbranch(cond, taken, rest)
    return taken, rest

  def fail(self, message: str | None = None):
    """Releases the owned outputs and returns NULL (with a RuntimeError of `message`, or
    the exception already set)."""
    for o in self.owned:
      self.call("decref", VOID, o)
    if message is not None:
      self.call(
        "set_string",
        VOID,
        self.const_ptr(self.capi["runtime_error"]),
        self.string(message.encode(), f"msg{len(self.mod.globals)}"),
      )
    self.b.ret(ir.Constant(PTR, None))

  def check_not_null(self, obj):
    bad, ok = self.branch(self.b.icmp_unsigned("==", obj, ir.Constant(PTR, None)), "null")
    self.b.position_at_end(bad)
    self.fail()
    self.b.position_at_end(ok)

  # -- the parts of an entry ------------------------------------------------------------
  def checked_input(self, k: int, dtype: np.dtype, ndim: int):
    """Argument `k`'s data pointer, after checking it is exactly an ndarray, C-contiguous
    and aligned, native-endian, of `dtype` and of the shape in the next `ndim` words."""
    b, obj = self.b, self.arg(k)
    self.require(
      b.icmp_unsigned("==", b.ptrtoint(self.field(obj, 8, PTR), I64), _i64(self.capi["array_type"]))
    )
    flags, descr = self.field(obj, FLAGS, I32), self.field(obj, DESCR, PTR)
    aligned = ir.Constant(I32, C_CONTIGUOUS_ALIGNED)
    conds = [
      b.icmp_unsigned("==", b.and_(flags, aligned), aligned),
      b.icmp_signed("==", self.field(obj, NDIM, I32), ir.Constant(I32, ndim)),
      b.icmp_signed("==", self.field(descr, DESCR_TYPE_NUM, I32), ir.Constant(I32, dtype.num)),
      b.icmp_unsigned("!=", self.field(descr, DESCR_BYTEORDER, I8), ir.Constant(I8, ord(">"))),
    ]
    self.require(functools.reduce(b.and_, conds))
    if ndim:  # read only once the rank matches (a 0-d array may have no dims at all)
      dims = b.bitcast(self.field(obj, DIMS, PTR), I64.as_pointer())
      self.require(
        functools.reduce(
          b.and_,
          [b.icmp_signed("==", b.load(b.gep(dims, [_i64(d)])), self.word()) for d in range(ndim)],
        )
      )
    return self.field(obj, DATA, PTR)

  def output(self, alloc: bool, ndim: int, given):
    """An output array: the next given argument, or a new one (owned) of the descr and
    dims in the next words."""
    descr = self.word_as_ptr()
    dims = self.word_ptr(ndim)
    if not alloc:
      return self.arg(next(given))
    self.call("incref", VOID, descr)  # PyArray_Empty steals it
    o = self.call("empty", PTR, ir.Constant(I32, ndim), dims, descr, ir.Constant(I32, 0))
    self.check_not_null(o)
    self.owned.append(o)
    return o

  def arena(self, arena_bytes, given):
    """The base address of each arena buffer: on this entry's stack, or given arrays."""
    starts = [self.word() for _ in self.spec.buffers]
    if not self.spec.stack_arena:
      return [self.field(self.arg(next(given)), DATA, PTR) for _ in self.spec.buffers]
    arena = self.b.alloca(I8, arena_bytes)
    arena.align = ALIGN
    return [self.b.gep(arena, [s]) for s in starts]

  def store_all(self, table, at: int, values):
    for k, v in enumerate(values):
      self.b.store(v, self.b.gep(table, [_i64(at + k)]))

  def loop(self, n: int, body):
    """`body(k)` for k in range(n), as a loop (`body` adds no blocks): the code's size
    does not grow with n. Straight-line code did, and LLVM's time with it, faster than
    linearly: 21 s for the entry of a plan of 16,000 views."""
    if n == 0:
      return
    b, before = self.b, self.b.block
    body_block, after = self.fn.append_basic_block("loop"), self.fn.append_basic_block()
    b.branch(body_block)
    b.position_at_end(body_block)
    k = b.phi(I64)
    k.add_incoming(_i64(0), before)
    body(k)
    following = b.add(k, _i64(1))
    k.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, _i64(n)), body_block, after)
    b.position_at_end(after)

  def copy_word(self, words, k, table, at: int):
    """table[at + k] = words[k], as a pointer."""
    b = self.b
    word = b.load(b.gep(words, [k]))
    b.store(b.inttoptr(word, PTR), b.gep(table, [b.add(k, _i64(at))]))

  def views(self, table, at: int, bases):
    """table[at + k] = the k-th arena view: its buffer's base (which buffer: a constant
    array of the layout) plus its byte offset (the next words), by a loop."""
    views = self.spec.views
    if not views:
      return
    b = self.b
    base_of = b.alloca(PTR, _i64(len(bases)))
    self.store_all(base_of, 0, bases)
    kind = ir.ArrayType(I32, len(views))
    which = ir.GlobalVariable(self.mod, kind, "view_buffers")
    which.global_constant = True
    which.initializer = ir.Constant(kind, [buf for buf, _ in views])
    offsets = self.word_ptr(len(views))

    def view(k):
      buf = b.load(b.gep(which, [_i64(0), k]))
      base = b.load(b.gep(base_of, [b.zext(buf, I64)]))
      pointer = b.gep(base, [b.load(b.gep(offsets, [k]))])
      b.store(pointer, b.gep(table, [b.add(k, _i64(at))]))

    self.loop(len(views), view)

  def call_driver(self, driver, table, err, on_error):
    """Calls the driver on `table`; on status 2 the plan's error handler raises the
    IndexError of the `err` record, on any other failure a RuntimeError."""
    b = self.b
    driver_ty = ir.FunctionType(I64, [PTR.as_pointer()])
    status = b.call(b.inttoptr(driver, driver_ty.as_pointer()), [table])
    failed, done = self.branch(b.icmp_signed("!=", status, _i64(1)), "failed")
    b.position_at_end(failed)
    bad_index, crashed = self.branch(b.icmp_signed("==", status, _i64(2)), "bad_index")
    b.position_at_end(bad_index)  # the handler raises the IndexError (it returns NULL)
    record = [b.load(b.gep(err, [_i64(k)])) for k in range(3)]
    call_ty = ir.FunctionType(PTR, [PTR, PTR], var_arg=True)
    b.call(
      b.inttoptr(_i64(self.capi["call_function"]), call_ty.as_pointer()),
      [on_error, self.string(b"LLL", "fmt_lll")] + record,
    )
    self.fail()
    b.position_at_end(crashed)
    self.fail("a compiled primc program failed (numba printed its error above)")
    b.position_at_end(done)

  def result(self, outs):
    """Returns the spec's result: True, the one output, or a tuple or list of them."""
    result = self.spec.result
    if result == "ok":
      self.call("incref", VOID, self.const_ptr(self.capi["true"]))
      self.b.ret(self.const_ptr(self.capi["true"]))
      return
    if result == "leaf":
      self.b.ret(outs[0])
      return
    new, put = ("tuple_new", "tuple_set") if result == "tuple" else ("list_new", "list_set")
    res = self.call(new, PTR, _i64(len(outs)))
    self.check_not_null(res)
    for k, o in enumerate(outs):  # steals each reference
      self.call(put, I32, res, _i64(k), o)
    self.b.ret(res)

  def miss_returns_none(self):
    self.b = ir.IRBuilder(self.miss)
    self.call("incref", VOID, self.const_ptr(self.capi["none"]))
    self.b.ret(self.const_ptr(self.capi["none"]))


def ctypes_entry(spec: EntrySpec, keep_alive, driver, on_error):
  """The general entry (`result="ok"`, outputs and arena passed in) through ctypes, for a
  process where `available()` is False: the same checks and table, built in Python
  (`driver`: the address of the function that takes the table)."""
  assert spec.result == "ok" and not spec.stack_arena
  call = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(driver)  # holding the GIL
  n_in, n_out = len(spec.inputs), len(spec.outputs)
  table_type = ctypes.c_void_p * (2 + n_in + len(spec.consts) + n_out + len(spec.views))

  def run(*args):
    if len(args) != spec.n_args:
      return None
    for x, (dtype, shape) in zip(args, spec.inputs):
      if (
        type(x) is not np.ndarray
        or x.dtype != dtype
        or x.shape != shape
        or not (x.flags.c_contiguous and x.flags.aligned)
      ):
        return None
    data = [a.ctypes.data for a in args]
    bases = data[n_in + n_out :]
    err = np.zeros(4, np.int64)
    table = table_type(
      *pointer_table(
        spec.sizes,
        err.ctypes.data,
        data[:n_in],
        spec.consts,
        data[n_in : n_in + n_out],
        bases,
        spec.views,
      )
    )
    status = call(table)
    if status == 2:
      on_error(*err[:3].tolist())
    if status != 1:
      raise RuntimeError("a compiled primc program failed (numba printed its error above)")
    return True

  run.keep_alive = keep_alive  # the arrays the spec's addresses point into
  return run
