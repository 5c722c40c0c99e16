"""Native entry points: one CPython function per compiled plan, generated as LLVM IR.

A module's driver is a numba `cfunc` of one argument, a table of data pointers
(`[sizes, err, inputs..., constants..., outputs..., arena views...]`, see `codegen.module`).
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
  consts: tuple[int, ...]                             # data addresses of the constants
  outputs: tuple[tuple[bool, tuple[int, ...], int], ...]  # (allocated here, shape, descr address)
  buffers: tuple[int, ...]                            # arena buffer sizes in bytes
  stack_arena: bool                                   # the arena on the stack, else arguments
  views: tuple[tuple[int, int], ...]                  # (buffer, byte offset) per arena view
  sizes: int                                          # data address of the sizes array
  driver: int                                         # the cfunc's address
  result: str                                         # "leaf" | "tuple" | "list" | "ok"
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
    return (tuple((dtype.num, len(shape)) for dtype, shape in self.inputs), len(self.consts),
            tuple((alloc, len(shape)) for alloc, shape, _ in self.outputs),
            len(self.buffers), tuple(b for b, _ in self.views), self.stack_arena, self.result)

  def words(self) -> np.ndarray:
    """The entry's data, in the order `entry_ir` reads it (see `_Words`)."""
    starts = list(itertools.accumulate((-(-n // ALIGN) * ALIGN for n in self.buffers),
                                       initial=0))
    words = [self.sizes, self.driver, self.on_error, max(starts[-1], 1)]
    for _, shape in self.inputs:
      words += shape
    words += self.consts
    for _, shape, descr in self.outputs:
      words += [descr, *shape]
    words += starts[:-1]
    words += [off for _, off in self.views]
    return np.array(words, np.uint64).view(np.int64)


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
      get(_multiarray_umath._ARRAY_API, None))
  fn = lambda name: ctypes.cast(getattr(api, name), ctypes.c_void_p).value
  return {"array_type": table[API_ARRAY_TYPE], "empty": table[API_ARRAY_EMPTY],
          "incref": fn("Py_IncRef"), "decref": fn("Py_DecRef"), "tuple_new": fn("PyTuple_New"),
          "tuple_set": fn("PyTuple_SetItem"), "list_new": fn("PyList_New"),
          "list_set": fn("PyList_SetItem"), "set_string": fn("PyErr_SetString"),
          "runtime_error": ctypes.c_void_p.in_dll(api, "PyExc_RuntimeError").value,
          "call_function": fn("PyObject_CallFunction"),
          "none": id(None), "true": id(True)}


@functools.cache
def available() -> bool:
  """Whether this process's CPython and numpy lay arrays out as the entries read them."""
  if sys.implementation.name != "cpython" or sys.maxsize < 2 ** 62:
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
    return (capi["array_type"] == id(np.ndarray) and word(a, 8, ctypes.c_void_p) == id(np.ndarray)
            and word(a, DATA, ctypes.c_void_p) == probe.ctypes.data
            and word(a, NDIM, ctypes.c_int32) == 2 and (dims[0], dims[1]) == (3, 5)
            and descr == id(probe.dtype)
            and word(descr, DESCR_TYPE_NUM, ctypes.c_int32) == np.dtype(np.float32).num
            and word(descr, DESCR_BYTEORDER, ctypes.c_char) == b"="
            and flags & C_CONTIGUOUS_ALIGNED == C_CONTIGUOUS_ALIGNED
            and word(id(odd), FLAGS, ctypes.c_int32) & 1 == 0)
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


def _address(spec: EntrySpec) -> int:
  """The compiled code of `spec`'s layout (compiled on first use)."""
  layout = spec.layout
  with _engine_lock:
    if layout not in _code:
      name = f"primc_entry_{len(_code)}"
      _code[layout] = _jit(entry_ir(spec, name), name)
    return _code[layout]


class _MethodDef(ctypes.Structure):
  _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
              ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


class _Words(np.ndarray):
  """An entry's data (`EntrySpec.words`), passed to it as its `self`; it also holds the
  method table and the objects the data points into."""


def entry(spec: EntrySpec, keep_alive) -> object:
  """The CPython function of `spec` (it holds `keep_alive`: the arrays and objects whose
  addresses the spec names)."""
  words = spec.words().view(_Words)
  words.keep = (_MethodDef(b"primc_entry", _address(spec), METH_FASTCALL, None), keep_alive)
  new = ctypes.pythonapi.PyCFunction_NewEx
  new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object,
                                                 ctypes.c_void_p]
  return new(ctypes.addressof(words.keep[0]), words, None)


def entry_ir(spec: EntrySpec, name: str) -> str:
  """The LLVM IR of the entry `name` for `spec`'s layout: straight-line code reading its
  shapes and addresses from its `self`, an array of `spec.words()`."""
  from llvmlite import ir
  i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
  ptr = i8.as_pointer()
  capi = _capi()
  mod = ir.Module(name=name)
  fn = ir.Function(mod, ir.FunctionType(ptr, [ptr, ptr.as_pointer(), i64]), name)
  self_, args, nargs = fn.args
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  miss = fn.append_basic_block("miss")

  def const_ptr(address):
    return ir.Constant(i64, address).inttoptr(ptr)

  def call(fname, restype, *argv):
    fty = ir.FunctionType(restype, [a.type for a in argv])
    return b.call(b.inttoptr(ir.Constant(i64, capi[fname]), fty.as_pointer()), argv)

  def field(obj, offset, ty):
    return b.load(b.bitcast(b.gep(obj, [ir.Constant(i64, offset)]), ty.as_pointer()))

  words = b.bitcast(field(self_, DATA, ptr), i64.as_pointer())
  position = [0]

  def word_ptr(n=1):  # the address of the next word of the spec's data (and skip n)
    address = b.gep(words, [ir.Constant(i64, position[0])])
    position[0] += n
    return address

  def word():
    return b.load(word_ptr())

  def word_as_ptr():
    return b.inttoptr(word(), ptr)

  def require(cond):  # continue in a new block when `cond`, else miss
    ok = fn.append_basic_block()
    b.cbranch(cond, ok, miss)
    b.position_at_end(ok)

  def arg(k):
    return b.load(b.gep(args, [ir.Constant(i64, k)]))

  sizes, driver, on_error, arena_bytes = word_as_ptr(), word(), word_as_ptr(), word()
  require(b.icmp_signed("==", nargs, ir.Constant(i64, spec.n_args)))
  data = []
  for k, (dtype, shape) in enumerate(spec.inputs):
    obj = arg(k)
    require(b.icmp_unsigned("==", b.ptrtoint(field(obj, 8, ptr), i64),
                            ir.Constant(i64, capi["array_type"])))
    flags = field(obj, FLAGS, i32)
    descr = field(obj, DESCR, ptr)
    conds = [b.icmp_unsigned("==", b.and_(flags, ir.Constant(i32, C_CONTIGUOUS_ALIGNED)),
                             ir.Constant(i32, C_CONTIGUOUS_ALIGNED)),
             b.icmp_signed("==", field(obj, NDIM, i32), ir.Constant(i32, len(shape))),
             b.icmp_signed("==", field(descr, DESCR_TYPE_NUM, i32), ir.Constant(i32, dtype.num)),
             b.icmp_unsigned("!=", field(descr, DESCR_BYTEORDER, i8), ir.Constant(i8, ord(">")))]
    if shape:
      dims = b.bitcast(field(obj, DIMS, ptr), i64.as_pointer())
      conds += [b.icmp_signed("==", b.load(b.gep(dims, [ir.Constant(i64, d)])), word())
                for d in range(len(shape))]
    require(functools.reduce(b.and_, conds))
    data.append(field(obj, DATA, ptr))
  consts = [word_as_ptr() for _ in spec.consts]
  # every check passed: from here on the entry succeeds or fails with an exception
  given = iter(range(len(spec.inputs), spec.n_args))
  outs, owned = [], []  # owned: the outputs allocated here, released on a failure

  def fail(message=None):
    for o in owned:
      call("decref", ir.VoidType(), o)
    if message is not None:
      text = bytearray(message.encode() + b"\0")
      g = ir.GlobalVariable(mod, ir.ArrayType(i8, len(text)), f"msg{len(mod.globals)}")
      g.global_constant, g.initializer = True, ir.Constant(ir.ArrayType(i8, len(text)), text)
      call("set_string", ir.VoidType(), const_ptr(capi["runtime_error"]), b.bitcast(g, ptr))
    b.ret(ir.Constant(ptr, None))

  def check_not_null(obj):
    bad, ok = fn.append_basic_block(), fn.append_basic_block()
    b.cbranch(b.icmp_unsigned("==", obj, ir.Constant(ptr, None)), bad, ok)
    b.position_at_end(bad)
    fail()
    b.position_at_end(ok)

  for alloc, shape, _ in spec.outputs:
    descr = word_as_ptr()
    dims = word_ptr(len(shape))  # the output's dims are the next words
    if not alloc:
      outs.append(arg(next(given)))
      continue
    call("incref", ir.VoidType(), descr)  # PyArray_Empty steals it
    o = call("empty", ptr, ir.Constant(i32, len(shape)), dims, descr, ir.Constant(i32, 0))
    check_not_null(o)
    outs.append(o)
    owned.append(o)
  starts = [word() for _ in spec.buffers]
  if spec.stack_arena:
    arena = b.alloca(i8, arena_bytes)
    arena.align = ALIGN
    bases = [b.gep(arena, [s]) for s in starts]
  else:
    bases = [field(arg(next(given)), DATA, ptr) for _ in spec.buffers]
  err = b.alloca(i64, ir.Constant(i64, 4))  # the driver's error record (see codegen.module)
  entries = ([sizes, b.bitcast(err, ptr)] + data + consts + [field(o, DATA, ptr) for o in outs]
             + [b.gep(bases[buf], [word()]) for buf, _ in spec.views])
  table = b.alloca(ptr, ir.Constant(i64, len(entries)))
  for k, e in enumerate(entries):
    b.store(e, b.gep(table, [ir.Constant(i64, k)]))
  driver_ty = ir.FunctionType(i64, [ptr.as_pointer()])
  status = b.call(b.inttoptr(driver, driver_ty.as_pointer()), [table])
  failed, done = fn.append_basic_block("failed"), fn.append_basic_block("done")
  b.cbranch(b.icmp_signed("==", status, ir.Constant(i64, 1)), done, failed)
  b.position_at_end(failed)
  bad_index, crashed = fn.append_basic_block("bad_index"), fn.append_basic_block("crashed")
  b.cbranch(b.icmp_signed("==", status, ir.Constant(i64, 2)), bad_index, crashed)
  b.position_at_end(bad_index)  # the handler raises the IndexError (it returns NULL)
  fmt = bytearray(b"LLL\0")
  g = ir.GlobalVariable(mod, ir.ArrayType(i8, len(fmt)), "fmt_lll")
  g.global_constant, g.initializer = True, ir.Constant(ir.ArrayType(i8, len(fmt)), fmt)
  record = [b.load(b.gep(err, [ir.Constant(i64, k)])) for k in range(3)]
  call_ty = ir.FunctionType(ptr, [ptr, ptr], var_arg=True)
  b.call(b.inttoptr(ir.Constant(i64, capi["call_function"]), call_ty.as_pointer()),
         [on_error, b.bitcast(g, ptr)] + record)
  fail()
  b.position_at_end(crashed)
  fail("a compiled primc program failed (numba printed its error above)")
  b.position_at_end(done)
  if spec.result == "ok":
    call("incref", ir.VoidType(), const_ptr(capi["true"]))
    b.ret(const_ptr(capi["true"]))
  elif spec.result == "leaf":
    b.ret(outs[0])
  else:
    new, put = ("tuple_new", "tuple_set") if spec.result == "tuple" else ("list_new", "list_set")
    res = call(new, ptr, ir.Constant(i64, len(outs)))
    check_not_null(res)
    for k, o in enumerate(outs):  # steals each reference
      call(put, i32, res, ir.Constant(i64, k), o)
    b.ret(res)
  b = ir.IRBuilder(miss)
  call("incref", ir.VoidType(), const_ptr(capi["none"]))
  b.ret(const_ptr(capi["none"]))
  return str(mod)


def ctypes_entry(spec: EntrySpec, keep_alive, driver, on_error):
  """The general entry (`result="ok"`, outputs and arena passed in) through ctypes, for a
  process where `available()` is False: the same checks and table, built in Python."""
  assert spec.result == "ok" and not spec.stack_arena
  n_in, n_out = len(spec.inputs), len(spec.outputs)
  table_type = ctypes.c_void_p * (2 + n_in + len(spec.consts) + n_out + len(spec.views))
  def run(*args):
    if len(args) != spec.n_args:
      return None
    for x, (dtype, shape) in zip(args, spec.inputs):
      if (type(x) is not np.ndarray or x.dtype != dtype or x.shape != shape
          or not (x.flags.c_contiguous and x.flags.aligned)):
        return None
    data = [a.ctypes.data for a in args]
    bases = data[n_in + n_out:]
    err = np.zeros(4, np.int64)
    table = table_type(spec.sizes, err.ctypes.data, *data[:n_in], *spec.consts,
                       *data[n_in:n_in + n_out], *(bases[k] + off for k, off in spec.views))
    status = driver.ctypes(table)
    if status == 2:
      on_error(*err[:3].tolist())
    if status != 1:
      raise RuntimeError("a compiled primc program failed (numba printed its error above)")
    return True

  run.keep_alive = keep_alive  # the arrays the spec's addresses point into
  return run
