"""The LLVM renderer: kernels in the kernel IR (`codegen.kir`) compiled by LLVM directly.

A kernel's nodes are a small part of Python over scalars: assignments, `if`, `for ...
in range`, `while`, arithmetic and comparisons, element access by address (`LOAD`,
`STORE`, the words through `carray`), the math library's functions and C functions by
symbol. numba compiles the same kernel rendered as Python (`kir.to_python`) in 0.05-0.5
s, most of it numba's own typing and lowering in Python; this module types the nodes as
numba types that Python and emits the LLVM IR itself, so a kernel costs LLVM's
optimization and code generation only. Library functions (the math library, the
products: Python under `njit`) become nodes by `kir.from_python`, once per function;
`kernel_ir` takes a kernel's Python the same way, `render_kernel` its nodes.

Typing follows numba: integer arithmetic in int64 (numba's at-least-intp rule; a negation
in the operand's width), numpy's promotion between types elsewhere (an int and a float32
give a float64; comparisons and `min`/`max` in the operands' common type, two int32s as
int32s), Python literals int64/float64, `/` of integers a float64, `//` and `%` of
integers with Python's signs (0 for a zero divisor: numba's numpy error model),
comparisons that are false for NaN but `!=`, `min`/`max` as numba's (`b if b > a else a`),
`and`/`or`/conditional expressions that evaluate what Python evaluates, negative indices
of views wrapped, float arithmetic with the function's fastmath flags (kernels:
`contract`), math functions from the same libm entries or LLVM intrinsics numba calls,
`np.full` arrays on the heap (freed when the function returns). The library's functions
(plain Python under `njit`: the math library, the products) are translated the same way,
once per argument types (a dtype argument bound as a constant), inlined. A source that
steps outside the subset, or where numba's choices are odd (a power with an integer
operand, numpy's loops for mixed types), raises Unsupported, and numba compiles it.

A kernel compiles to an object file, kept by the cache beside its module (one of the
module's files that its seal lists and loading verifies), and loaded into one MCJIT engine
of this process.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import itertools
import math
import threading

import numpy as np
from llvmlite import ir

from primc.codegen import installed, kir, openblas, standins, target

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
I8P = I8.as_pointer()
LL = {
  "bool": I1,
  "int32": I32,
  "int64": I64,
  "float32": F32,
  "float64": F64,
  "ptr": I8P,
  "table": I8P.as_pointer(),
}
INTS = ("bool", "int32", "int64")
FLOATS = ("float32", "float64")
NUMPY_TYPES = {
  np.float32: "float32",
  np.float64: "float64",
  np.int32: "int32",
  np.int64: "int64",
  np.bool_: "bool",
  float: "float64",
  int: "int64",
  bool: "bool",
}
FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}
INT_OPS = {
  "+": "add",
  "-": "sub",
  "*": "mul",
  "&": "and_",
  "|": "or_",
  "^": "xor",
  "<<": "shl",
  ">>": "ashr",
}
# math functions: (float32 symbol, float64 symbol) of libm, or an LLVM intrinsic ("llvm.")
MATH = {
  "exp": "llvm.exp",
  "log": "llvm.log",
  "log10": "llvm.log10",
  "sin": "llvm.sin",
  "cos": "llvm.cos",
  "sqrt": "llvm.sqrt",
  "fabs": "llvm.fabs",
  "log2": ("log2f", "log2"),
  "log1p": ("log1pf", "log1p"),
  "expm1": ("expm1f", "expm1"),
  "erf": ("erff", "erf"),
  "erfc": ("erfcf", "erfc"),
  "tan": ("tanf", "tan"),
  "asin": ("asinf", "asin"),
  "acos": ("acosf", "acos"),
  "atan": ("atanf", "atan"),
  "asinh": ("asinhf", "asinh"),
  "acosh": ("acoshf", "acosh"),
  "atanh": ("atanhf", "atanh"),
  "sinh": ("sinhf", "sinh"),
  "cosh": ("coshf", "cosh"),
  "tanh": ("tanhf", "tanh"),
  "gamma": ("tgammaf", "tgamma"),
  "lgamma": ("lgammaf", "lgamma"),
  "atan2": ("atan2f", "atan2"),
  "hypot": ("hypotf", "hypot"),
  "copysign": "llvm.copysign",
  "floor": "llvm.floor",
  "ceil": "llvm.ceil",
  "trunc": "llvm.trunc",
  "pow": "llvm.pow",
}
FLOAT_TYPES = {"float32": np.float32, "float64": np.float64}
NUMPY = {
  "nextafter": ("nextafterf", "nextafter"),
  "sqrt": "llvm.sqrt",
  "floor": "llvm.floor",
  "ceil": "llvm.ceil",
  "trunc": "llvm.trunc",
  "rint": "llvm.rint",
  "abs": "llvm.fabs",
  "absolute": "llvm.fabs",
  "fabs": "llvm.fabs",
  "copysign": "llvm.copysign",
}
BITCASTS = {
  "f32_from_bits": ("int32", "float32"),
  "f32_to_bits": ("float32", "int32"),
  "f64_from_bits": ("int64", "float64"),
  "f64_to_bits": ("float64", "int64"),
}


class Unsupported(Exception):
  """The source steps outside the subset this module translates (numba compiles it)."""


class _Retype(Exception):
  """A variable of function `key` takes values of two types: translate again with `ty`."""

  def __init__(self, key, name: str, ty: str):
    super().__init__(key, name, ty)
    self.key, self.name, self.ty = key, name, ty


@dataclasses.dataclass(frozen=True)
class Val:
  ty: str  # a scalar type (LL), "ptr" or "table"
  v: ir.Value


@dataclasses.dataclass(frozen=True)
class Tup:
  items: tuple


@dataclasses.dataclass(frozen=True)
class View:  # carray(pointer, shape, dtype): elements by index, as numba's arrays
  ptr: ir.Value
  dtype: str
  shape: tuple  # i64 values


@dataclasses.dataclass(frozen=True)
class Static:  # a Python object the source names (a module, a function, a constant)
  obj: object


def unify(a: str, b: str) -> str:
  """The type numba gives a variable assigned values of types a and b (numpy's
  promotion: bool and int32 give int32, int64 and float32 float64)."""
  if a == b:
    return a
  if a in LL and b in LL and a not in ("ptr", "table") and b not in ("ptr", "table"):
    return str(np.promote_types(a, b))
  raise Unsupported(f"values of types {a} and {b} in one variable")


def arith(a: str, b: str) -> str:
  """The type of an arithmetic result of operands of types a and b."""
  if a in INTS and b in INTS:
    return "int64"
  return unify(a, b)


class Function:
  """One Python function translated into its compiler's module for argument types
  `arg_types`: returning `ret` (an LLVM type), or, when `ret` is None, a probe that only
  collects the types of what it returns (`returned`)."""

  def __init__(
    self,
    compiler: "Compiler",
    key,
    fn_kir: kir.Function,
    globals_: dict,
    arg_types: tuple,
    name: str,
    ret=None,
    linkage: str = "internal",
    fastmath=("contract",),
    params=None,
  ):
    self.c, self.key, self.kir, self.globals = compiler, key, fn_kir, globals_
    self.var_types = compiler.var_types.setdefault(key, {})
    self.arg_types, self.name, self.ret, self.linkage = arg_types, name, ret, linkage
    self.fastmath = tuple(fastmath)  # LLVM's flags on float arithmetic (numba's fastmath)
    self.params = params if params is not None else list(fn_kir.params)
    self.returned: list = []

  def build(self) -> ir.Function:
    ret = ir.VoidType() if self.ret is None else self.ret
    fn = ir.Function(
      self.c.module, ir.FunctionType(ret, [LL[t] for t in self.arg_types]), self.name
    )
    fn.linkage = self.linkage
    if self.linkage == "internal":
      fn.attributes.add("alwaysinline")
    self.fn = fn
    self.entry = fn.append_basic_block("entry")  # the variables' allocas, then `start`
    start = fn.append_basic_block("start")
    self.b, self.allocas = ir.IRBuilder(start), ir.IRBuilder(self.entry)
    self.exit = fn.append_basic_block("exit")
    void = isinstance(ret, ir.VoidType)
    self.ret_slot = None if void else self.alloca(ret)
    self.slots, self.loops, self.heap = {}, [], {}
    for name, ty, a in zip(self.params, self.arg_types, fn.args):
      self.assign(name, Val(ty, a))
    self.body(self.kir.body)
    if not self.b.block.is_terminated:
      if not void:
        raise Unsupported(f"{self.kir.name} may end without a value")
      self.b.branch(self.exit)
    self.b.position_at_end(self.exit)
    for slot in self.heap.values():  # the arrays np.full allocated
      self.b.call(self.c.libc("free"), [self.b.load(slot)])
    if self.ret_slot is None:
      self.b.ret_void()
    else:
      self.b.ret(self.b.load(self.ret_slot))
    self.allocas.branch(start)
    return fn

  # -- variables -----------------------------------------------------------------------
  # A variable is an alloca (a view: of its pointer and of each dim). A name given a value
  # of another kind (a view, then an integer) starts a new variable from there on, as
  # numba's versions of a name do; numba rejects sources where both could reach a use.
  def assign(self, name: str, value) -> None:
    if isinstance(value, (Tup, Static)):
      raise Unsupported(f"{name}: a tuple or a Python object in a variable")
    slot = self.slots.get(name)
    if isinstance(value, View):
      rank = len(value.shape)
      if slot is None or slot[0] != ("view", value.dtype, rank):
        slot = self.slots[name] = (
          ("view", value.dtype, rank),
          self.alloca(I8P),
          tuple(self.alloca(I64) for _ in range(rank)),
        )
      _, ptr, dims = slot
      self.b.store(value.ptr, ptr)
      for d, v in zip(dims, value.shape):
        self.b.store(v, d)
      return
    if slot is None or isinstance(slot[0], tuple):
      ty = self.var_types.get(name, value.ty)
      if ty != value.ty and unify(ty, value.ty) != ty:
        raise _Retype(self.key, name, unify(ty, value.ty))
      slot = self.slots[name] = (ty, self.alloca(LL[ty]))
    ty, ptr = slot
    if value.ty != ty:
      if unify(ty, value.ty) != ty:
        raise _Retype(self.key, name, unify(ty, value.ty))
      value = self.cast(value, ty)
    self.b.store(value.v, ptr)

  def lookup(self, name: str):
    if name in self.slots:
      slot = self.slots[name]
      if isinstance(slot[0], tuple):
        (_, dtype, _), ptr, dims = slot
        return View(self.b.load(ptr), dtype, tuple(self.b.load(d) for d in dims))
      ty, ptr = slot
      return Val(ty, self.b.load(ptr))
    if name in self.globals:
      return Static(self.globals[name])
    if name in ("min", "max", "abs", "range", "float", "int", "bool"):
      return Static(getattr(builtins, name))
    raise Unsupported(f"unknown name {name}")

  # -- statements ----------------------------------------------------------------------
  def body(self, stmts) -> None:
    for s in stmts:
      if self.b.block.is_terminated:
        return  # code after a return, break or continue
      self.stmt(s)

  def stmt(self, s) -> None:
    kind = type(s)
    if kind is kir.Assign:
      value = self.expr(s.value)
      for target in s.targets:
        self.store(target, value)
    elif kind is kir.AugAssign:
      self.store(s.target, self.binop(s.op, self.expr(s.target), self.expr(s.value)))
    elif kind is kir.ExprStmt:
      self.expr(s.value)
    elif kind is kir.If:
      self.if_(s)
    elif kind is kir.For:
      self.for_(s)
    elif kind is kir.While:
      self.while_(s)
    elif kind is kir.Return:
      self.return_(s)
    elif kind is kir.Break or kind is kir.Continue:
      if not self.loops:
        raise Unsupported("break outside a loop")
      self.b.branch(self.loops[-1][kind is kir.Continue])
    elif kind is kir.Outside:
      raise Unsupported(s.what)
    elif kind is not kir.Pass:
      raise Unsupported(f"statement {kind.__name__}")

  def store(self, target, value) -> None:
    if isinstance(target, kir.Name):
      self.assign(target.id, value)
    elif isinstance(target, kir.Tuple) and isinstance(value, Tup):
      if len(target.elts) != len(value.items):
        raise Unsupported("unpacking of another length")
      for t, v in zip(target.elts, value.items):
        self.store(t, v)
    elif isinstance(target, kir.Subscript):
      view = self.expr(target.value)
      if not isinstance(view, View):
        raise Unsupported("item assignment to a non-view")
      at, count = self.element(view, target.index, partial=True)
      value = self.cast(value, view.dtype).v
      if count is None:
        self.b.store(value, at)
      else:  # a[i] = x of a view of higher rank: every element of a[i]
        self.fill(at, count, value)
    else:
      raise Unsupported(f"assignment to {type(target).__name__}")

  def if_(self, s) -> None:
    cond = self.truth(self.expr(s.test))
    then, other, after = (self.fn.append_basic_block(n) for n in ("then", "else", "endif"))
    self.b.cbranch(cond, then, other)
    for block, stmts in ((then, s.body), (other, s.orelse)):
      self.b.position_at_end(block)
      self.body(stmts)
      if not self.b.block.is_terminated:
        self.b.branch(after)
    self.b.position_at_end(after)

  def for_(self, s) -> None:
    if self.static(kir.Name("range")) is not range:
      raise Unsupported("a for loop over another range than Python's")
    args = [self.cast(self.expr(a), "int64").v for a in s.bounds]
    if len(args) == 1:
      args = [ir.Constant(I64, 0)] + args
    start, stop = args[0], args[1]
    step = args[2] if len(args) == 3 else ir.Constant(I64, 1)
    try:
      sign = self.constant(s.bounds[2]) if len(args) == 3 else 1
    except Unsupported:  # a computed step: its sign at run time; 0 fails the kernel
      if self.key != "kernel":  # (numba raises; a kernel reports a failure by returning 0)
        raise
      sign = None
      zero, fail, go = (
        ir.Constant(I64, 0),
        *(self.fn.append_basic_block(n) for n in ("step0", "stepok")),
      )
      self.b.cbranch(self.b.icmp_signed("==", step, zero), fail, go)
      self.b.position_at_end(fail)
      self.b.store(zero, self.ret_slot)
      self.b.branch(self.exit)
      self.b.position_at_end(go)
    if sign == 0:
      raise Unsupported("range with step 0")
    counter = self.alloca(I64)
    self.b.store(start, counter)
    head, body, step_block, after = (
      self.fn.append_basic_block(n) for n in ("for", "body", "step", "endfor")
    )
    self.b.branch(head)
    self.b.position_at_end(head)
    i = self.b.load(counter)
    if sign is None:
      going = self.b.select(
        self.b.icmp_signed(">", step, ir.Constant(I64, 0)),
        self.b.icmp_signed("<", i, stop),
        self.b.icmp_signed(">", i, stop),
      )
    else:
      going = self.b.icmp_signed(">" if sign < 0 else "<", i, stop)
    self.b.cbranch(going, body, after)
    self.b.position_at_end(body)
    self.assign(s.target, Val("int64", i))
    self.loop_body(s.body, after, step_block)
    self.b.position_at_end(step_block)
    self.b.store(self.b.add(self.b.load(counter), step), counter)
    self.b.branch(head)
    self.b.position_at_end(after)

  def while_(self, s) -> None:
    head, body, after = (self.fn.append_basic_block(n) for n in ("while", "wbody", "endwhile"))
    self.b.branch(head)
    self.b.position_at_end(head)
    self.b.cbranch(self.truth(self.expr(s.test)), body, after)
    self.b.position_at_end(body)
    self.loop_body(s.body, after, head)
    self.b.position_at_end(after)

  def loop_body(self, stmts, after, again) -> None:
    """A loop's body: `break` goes to `after`, `continue` and its end to `again`."""
    self.loops.append((after, again))
    self.body(stmts)
    self.loops.pop()
    if not self.b.block.is_terminated:
      self.b.branch(again)

  def return_(self, s) -> None:
    if s.value is None:
      if self.ret_slot is not None:
        raise Unsupported("return without a value")
      self.b.branch(self.exit)
      return
    value = self.expr(s.value)
    if self.ret_slot is None:  # a probe: what it returns
      self.returned.append(value)
      self.b.branch(self.exit)
      return
    self.b.store(self.packed(value, self.ret), self.ret_slot)
    self.b.branch(self.exit)

  def packed(self, value, lltype):
    if isinstance(value, Tup):
      if not isinstance(lltype, ir.LiteralStructType) or len(lltype.elements) != len(value.items):
        raise Unsupported("returns of different shapes")
      out = ir.Constant(lltype, ir.Undefined)
      for k, (item, ty) in enumerate(zip(value.items, lltype.elements)):
        out = self.b.insert_value(out, self.packed(item, ty), k)
      return out
    if not isinstance(value, Val):
      raise Unsupported("returns a Python object")
    target = next((t for t, ll in LL.items() if ll == lltype and t != "table"), None)
    if target is None:
      raise Unsupported("returns of different shapes")
    return self.cast(value, target).v

  # -- expressions ---------------------------------------------------------------------
  def static(self, node):
    """The Python object a name or attribute stands for, or None if it is a value."""
    if isinstance(node, kir.Name):
      if node.id in self.slots:
        return None
      value = self.lookup(node.id)
      return value.obj
    if isinstance(node, kir.Attribute):
      base = self.static(node.value)
      if base is None or not inspect.ismodule(base):
        return None
      return getattr(base, node.attr, None)
    return None

  def constant(self, node):
    """A Python value for a node of constants only (literals, `1 / 6`, `np.inf`, `-x`)."""
    if isinstance(node, kir.Const) and isinstance(node.value, (int, float, bool)):
      return node.value
    if isinstance(node, kir.UnaryOp) and node.op == "-":
      return -self.constant(node.operand)
    if isinstance(node, kir.BinOp) and node.op in ("+", "-", "*", "/"):
      a, b = self.constant(node.left), self.constant(node.right)
      if type(a) not in (int, float) or type(b) not in (int, float):
        raise Unsupported("numpy scalars in a constant expression")  # numpy's rules differ
      if node.op == "/" and b == 0:
        raise Unsupported("a constant division by zero")
      return {"+": a + b, "-": a - b, "*": a * b}[node.op] if node.op != "/" else a / b
    obj = self.static(node) if isinstance(node, (kir.Name, kir.Attribute)) else None
    if isinstance(obj, (bool, int, float, np.floating, np.integer, np.bool_)):
      return obj
    raise Unsupported("not a constant")

  def literal(self, value) -> Val:
    if isinstance(value, (bool, np.bool_)):
      return Val("bool", ir.Constant(I1, int(bool(value))))
    if isinstance(value, (int, np.integer)):
      ty = NUMPY_TYPES.get(type(value), "int64")
      if ty not in INTS:
        raise Unsupported(f"an integer constant of type {type(value).__name__}")
      if not -(2**63) <= int(value) < 2**63:
        raise Unsupported("an integer constant beyond int64")
      return Val(ty, ir.Constant(LL[ty], int(value)))
    if isinstance(value, (float, np.floating)):
      ty = NUMPY_TYPES.get(type(value))
      if ty is None:
        raise Unsupported(f"a float constant of type {type(value).__name__}")
      return Val(ty, ir.Constant(LL[ty], float(value)))
    raise Unsupported(f"a constant {value!r}")

  def expr(self, node):
    kind = type(node)
    if kind is kir.Const:
      return self.literal(node.value)
    if kind is kir.Name:
      value = self.lookup(node.id)
      if isinstance(value, Static) and isinstance(
        value.obj, (bool, int, float, np.floating, np.integer, np.bool_)
      ):
        return self.literal(value.obj)
      return value
    if kind is kir.Attribute:
      if isinstance(node.value, kir.Name) and node.value.id in self.slots:
        return self.view_attribute(self.lookup(node.value.id), node.attr)
      obj = self.static(node)
      if isinstance(obj, (bool, int, float, np.floating, np.integer)):
        return self.literal(obj)
      if obj is None:
        raise Unsupported(f"attribute {kir.expr(node)}")
      return Static(obj)
    if kind is kir.BinOp or kind is kir.UnaryOp:
      try:  # constants only (`-1`, `1 / 6`): folded, as numba folds them
        return self.literal(self.constant(node))
      except Unsupported:
        pass
      if kind is kir.UnaryOp:
        return self.unary(node.op, self.expr(node.operand))
      if node.op == "**":
        return self.power(node)
      return self.binop(node.op, self.expr(node.left), self.expr(node.right))
    if kind is kir.Compare:
      return self.compare(node)
    if kind is kir.BoolOp:
      return self.boolop(node)
    if kind is kir.IfExp:
      return self.ifexp(node)
    if kind is kir.Call:
      return self.call(node)
    if kind is kir.Subscript:
      return self.subscript(node)
    if kind is kir.Tuple:
      return Tup(tuple(self.expr(e) for e in node.elts))
    if kind is kir.Outside:
      raise Unsupported(node.what)
    raise Unsupported(f"expression {kind.__name__}")

  def scalar(self, value) -> Val:
    if isinstance(value, Static) and isinstance(
      value.obj, (bool, int, float, np.floating, np.integer, np.bool_)
    ):
      return self.literal(value.obj)
    if not isinstance(value, Val) or value.ty not in INTS + FLOATS:
      raise Unsupported("arithmetic on a non-number")
    return value

  def cast(self, value, ty: str) -> Val:
    value = self.scalar(value) if ty != "ptr" or not isinstance(value, Val) else value
    src, b, v = value.ty, self.b, value.v
    if src == ty:
      return value
    if ty == "bool":
      return Val("bool", self.truth(value))
    if src == "bool":
      return Val(ty, b.zext(v, LL[ty]) if ty in INTS else b.uitofp(v, LL[ty]))
    if src in INTS and ty in INTS:
      wider = LL[ty].width > LL[src].width
      return Val(ty, b.sext(v, LL[ty]) if wider else b.trunc(v, LL[ty]))
    if src in INTS and ty in FLOATS:
      return Val(ty, b.sitofp(v, LL[ty]))
    if src in FLOATS and ty in INTS:
      return Val(ty, b.fptosi(v, LL[ty]))
    if src in FLOATS and ty in FLOATS:
      return Val(ty, b.fpext(v, F64) if ty == "float64" else b.fptrunc(v, F32))
    raise Unsupported(f"a cast from {src} to {ty}")

  def truth(self, value) -> ir.Value:
    value = self.scalar(value)
    if value.ty == "bool":
      return value.v
    if value.ty in INTS:
      return self.b.icmp_signed("!=", value.v, ir.Constant(LL[value.ty], 0))
    return self.b.fcmp_unordered("!=", value.v, ir.Constant(LL[value.ty], 0.0))

  def flags(self, instr):
    instr.flags.extend(self.fastmath)
    return instr

  def binop(self, op, x, y) -> Val:
    x, y, b, kind = self.scalar(x), self.scalar(y), self.b, op
    if kind == "/":
      ty = "float64" if x.ty in INTS and y.ty in INTS else arith(x.ty, y.ty)
      return Val(ty, self.flags(b.fdiv(self.cast(x, ty).v, self.cast(y, ty).v)))
    if kind in ("&", "|", "^") and x.ty == y.ty == "bool":
      return Val("bool", getattr(b, INT_OPS[kind])(x.v, y.v))
    ty = arith(x.ty, y.ty)
    xv, yv = self.cast(x, ty).v, self.cast(y, ty).v
    if ty in FLOATS:
      if kind in FLOAT_OPS:
        return Val(ty, self.flags(getattr(b, FLOAT_OPS[kind])(xv, yv)))
      if kind == "**" and x.ty in FLOATS and y.ty in FLOATS:  # (x **= y)
        return Val(ty, self.intrinsic("llvm.pow", [xv, yv]))
      raise Unsupported(f"{kind} of floats")
    if kind in INT_OPS:
      return Val(ty, getattr(b, INT_OPS[kind])(xv, yv))
    if kind in ("//", "%"):
      return Val(ty, self.int_divmod(xv, yv, kind == "%"))
    raise Unsupported(f"{kind} of integers")

  def power(self, node) -> Val:
    """`x ** y` as numba computes it: a float exponent by `pow` (an int base converted); an
    integer one by products, unrolled for a constant exponent (numba's static power),
    else numba's loop (`_float_power`, `_int_power`, translated like library functions)."""
    x = self.scalar(self.expr(node.left))
    try:
      n = self.constant(node.right)
    except Unsupported:
      n = None
    if type(n) is int and abs(n) <= 0x10000 and x.ty in ("int32", "int64") + FLOATS:
      return self.static_power(x, n)
    y = self.scalar(self.expr(node.right))
    if x.ty in ("int32", "int64") + FLOATS and y.ty in FLOATS:
      ty = arith(x.ty, y.ty)
      return Val(ty, self.intrinsic("llvm.pow", [self.cast(x, ty).v, self.cast(y, ty).v]))
    if y.ty not in ("int32", "int64") or x.ty not in ("int32", "int64") + FLOATS:
      raise Unsupported(f"a power of {x.ty} and {y.ty}")
    if x.ty in FLOATS:
      fn = self.c.function_for(
        _plain(_float_power, self.fastmath), (x.ty, y.ty), (("tp", FLOAT_TYPES[x.ty]),), ["a", "b"]
      )
    else:
      fn = self.c.function_for(_plain(_int_power, self.fastmath), (x.ty, y.ty), (), ["a", "b"])
    result = self.b.call(fn, [x.v, y.v])
    return Val(x.ty if x.ty in FLOATS else "int64", result)

  def static_power(self, x: Val, n: int) -> Val:
    """numba's unrolled power for a constant integer exponent `n` (an inverse by a float64
    division, or for integers: INT64_MIN for 0, 0 unless the base is 1 or -1)."""
    ty = x.ty if x.ty in FLOATS else "int64"
    val = self.cast(x, ty).v
    mul = (lambda a, b: self.flags(self.b.fmul(a, b))) if ty in FLOATS else self.b.mul
    res, k = ir.Constant(LL[ty], 1.0 if ty in FLOATS else 1), abs(n)
    while k:
      if k & 1:
        res = mul(res, val)
      k >>= 1
      val = mul(val, val) if k else val
    if n >= 0:
      return Val(ty, res)
    if ty in FLOATS:
      inverse = self.flags(self.b.fdiv(ir.Constant(F64, 1.0), self.cast(Val(ty, res), "float64").v))
      return self.cast(Val("float64", inverse), ty)
    b, zero = self.b, ir.Constant(I64, 0)
    unit = b.or_(
      b.icmp_signed("==", res, ir.Constant(I64, 1)), b.icmp_signed("==", res, ir.Constant(I64, -1))
    )
    out = b.select(unit, res, zero)
    return Val("int64", b.select(b.icmp_signed("==", res, zero), ir.Constant(I64, -(2**63)), out))

  def int_divmod(self, x, y, mod: bool) -> ir.Value:
    """Python's x // y or x % y (signs of the divisor's side), 0 for y == 0."""
    b, zero, one = self.b, ir.Constant(I64, 0), ir.Constant(I64, 1)
    is_zero = b.icmp_signed("==", y, zero)
    safe = b.select(is_zero, one, y)
    # INT64_MIN // -1 overflows sdiv: numba's result wraps; avoid the trap with y = 1
    overflow = b.and_(
      b.icmp_signed("==", x, ir.Constant(I64, -(2**63))),
      b.icmp_signed("==", safe, ir.Constant(I64, -1)),
    )
    safe = b.select(overflow, one, safe)
    q, r = b.sdiv(x, safe), b.srem(x, safe)
    q = b.select(overflow, b.sub(zero, x), q)
    r = b.select(overflow, zero, r)
    adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, safe), zero))
    q = b.select(adjust, b.sub(q, one), q)
    r = b.select(adjust, b.add(r, safe), r)
    return b.select(is_zero, zero, r if mod else q)

  def unary(self, op, x) -> Val:
    x, b = self.scalar(x), self.b
    if op == "not":
      return Val("bool", b.xor(self.truth(x), ir.Constant(I1, 1)))
    if op == "+":
      return x if x.ty != "bool" else self.cast(x, "int64")
    if op == "-":
      if x.ty in FLOATS:
        return Val(x.ty, self.flags(b.fneg(x.v)))
      if x.ty == "bool":
        x = self.cast(x, "int64")
      # numba negates in the operand's own width, then widens (-INT32_MIN stays negative)
      return self.cast(Val(x.ty, b.sub(ir.Constant(LL[x.ty], 0), x.v)), "int64")
    if op == "~" and x.ty == "bool":
      return Val("bool", b.xor(x.v, ir.Constant(I1, 1)))
    if op == "~" and x.ty in ("int32", "int64"):
      x = self.cast(x, "int64")
      return Val("int64", b.xor(x.v, ir.Constant(I64, -1)))
    raise Unsupported(f"unary {op} of {x.ty}")

  def compare_pair(self, op, x, y) -> ir.Value:
    x, y, sym = self.scalar(x), self.scalar(y), op
    if x.ty == y.ty == "bool":
      return self.b.icmp_unsigned(sym, x.v, y.v)
    ty = unify(x.ty, y.ty)  # numba compares two int32s as int32s (vectors twice as wide)
    xv, yv = self.cast(x, ty).v, self.cast(y, ty).v
    if ty in FLOATS:
      return (self.b.fcmp_unordered if sym == "!=" else self.b.fcmp_ordered)(sym, xv, yv)
    return self.b.icmp_signed(sym, xv, yv)

  def compare(self, node) -> Val:
    left = self.expr(node.left)
    if len(node.ops) == 1:
      return Val("bool", self.compare_pair(node.ops[0], left, self.expr(node.comparators[0])))
    # a < b < c: each comparison only if the ones before it held, b evaluated once
    result = self.alloca(I1)
    after = self.fn.append_basic_block("endcmp")
    for k, (op, right) in enumerate(zip(node.ops, node.comparators)):
      right = self.expr(right)
      c = self.compare_pair(op, left, right)
      self.b.store(c, result)
      if k + 1 < len(node.ops):
        more = self.fn.append_basic_block("cmp")
        self.b.cbranch(c, more, after)
        self.b.position_at_end(more)
      left = right
    self.b.branch(after)
    self.b.position_at_end(after)
    return Val("bool", self.b.load(result))

  def alloca(self, ty):
    return self.allocas.alloca(ty)

  def boolop(self, node) -> Val:
    result = self.alloca(I1)
    after = self.fn.append_basic_block("endbool")
    is_and = node.op == "and"
    for k, operand in enumerate(node.values):
      value = self.scalar(self.expr(operand))
      if value.ty != "bool":
        raise Unsupported("and/or of non-booleans")
      self.b.store(value.v, result)
      if k + 1 < len(node.values):
        more = self.fn.append_basic_block("bool")
        self.b.cbranch(value.v, more, after) if is_and else self.b.cbranch(value.v, after, more)
        self.b.position_at_end(more)
    self.b.branch(after)
    self.b.position_at_end(after)
    return Val("bool", self.b.load(result))

  def ifexp(self, node):
    """`a if cond else c`: one branch evaluated, as in Python (numbers, or tuples of them)."""
    cond = self.truth(self.expr(node.test))
    then, other, after = (self.fn.append_basic_block(n) for n in ("ifx", "elsex", "endifx"))
    self.b.cbranch(cond, then, other)
    self.b.position_at_end(then)
    a = self.expr(node.body)
    a_end = self.b.block
    self.b.position_at_end(other)
    c = self.expr(node.orelse)
    items_a, items_c = self.numbers(a), self.numbers(c)
    if len(items_a) != len(items_c) or isinstance(a, Tup) != isinstance(c, Tup):
      raise Unsupported("a conditional expression of two shapes")
    tys = [unify(x.ty, y.ty) for x, y in zip(items_a, items_c)]
    c_vs = [self.cast(x, t).v for x, t in zip(items_c, tys)]
    c_end = self.b.block
    self.b.branch(after)
    self.b.position_at_end(a_end)
    a_vs = [self.cast(x, t).v for x, t in zip(items_a, tys)]
    a_end = self.b.block
    self.b.branch(after)
    self.b.position_at_end(after)
    out = []
    for t, x, y in zip(tys, a_vs, c_vs):
      phi = self.b.phi(LL[t])
      phi.add_incoming(x, a_end)
      phi.add_incoming(y, c_end)
      out.append(Val(t, phi))
    return Tup(tuple(out)) if isinstance(a, Tup) else out[0]

  def numbers(self, value) -> list:
    """A number, or a flat tuple of numbers, as a list of Vals."""
    if isinstance(value, Tup):
      return [self.scalar(v) for v in value.items]
    return [self.scalar(value)]

  def subscript(self, node):
    base = self.expr(node.value)
    if isinstance(base, View):
      at, _ = self.element(base, node.index)
      return Val(base.dtype, self.b.load(at))
    if isinstance(base, Tup):  # a.shape[k]
      if len(node.index) != 1:
        raise Unsupported("a tuple indexed by a tuple")
      k = self.constant(node.index[0])
      if not isinstance(k, int) or not -len(base.items) <= k < len(base.items):
        raise Unsupported("a tuple index that is not a constant in range")
      return base.items[k]
    if isinstance(base, Val) and base.ty == "table":
      if len(node.index) != 1:
        raise Unsupported("a table indexed by a tuple")
      index = self.cast(self.expr(node.index[0]), "int64").v
      return Val("ptr", self.b.load(self.b.gep(base.v, [index], inbounds=True)))
    raise Unsupported(f"subscript of {kir.expr(node.value)}")

  def element(self, view: View, indices: tuple, partial: bool = False):
    """The address of `view[indices]`, and None; with `partial`, an index of fewer
    dimensions gives the address of the first element of that part and its size."""
    if len(indices) > len(view.shape) or len(indices) < len(view.shape) and not partial:
      raise Unsupported("an index of another rank than the view")
    b, flat = self.b, ir.Constant(I64, 0)
    for node, n in zip(indices, view.shape):
      if isinstance(node, kir.Slice):
        raise Unsupported("a slice of a view")
      i = self.cast(self.expr(node), "int64").v
      i = b.select(b.icmp_signed("<", i, ir.Constant(I64, 0)), b.add(i, n), i)  # numba wraps
      flat = b.add(b.mul(flat, n), i)
    count = None
    if len(indices) < len(view.shape):
      count = self.product(view.shape[len(indices) :])
      flat = b.mul(flat, count)
    base = b.bitcast(view.ptr, LL[view.dtype].as_pointer())
    return b.gep(base, [flat], inbounds=True), count

  def product(self, dims) -> ir.Value:
    out = ir.Constant(I64, 1)
    for d in dims:
      out = self.b.mul(out, d)
    return out

  def fill(self, at, count, value) -> None:
    """Stores `value` in `count` elements from `at`."""
    b = self.b
    i = self.alloca(I64)
    b.store(ir.Constant(I64, 0), i)
    head, body, after = (self.fn.append_basic_block(n) for n in ("fill", "fillbody", "endfill"))
    b.branch(head)
    b.position_at_end(head)
    k = b.load(i)
    b.cbranch(b.icmp_signed("<", k, count), body, after)
    b.position_at_end(body)
    b.store(value, b.gep(at, [k], inbounds=True))
    b.store(b.add(k, ir.Constant(I64, 1)), i)
    b.branch(head)
    b.position_at_end(after)

  def view_attribute(self, view, attr: str):
    if not isinstance(view, View) or attr not in ("shape", "size"):
      raise Unsupported(f"attribute {attr}")
    if attr == "size":
      return Val("int64", self.product(view.shape))
    return Tup(tuple(Val("int64", d) for d in view.shape))

  def dims(self, value) -> tuple:
    items = value.items if isinstance(value, Tup) else (value,)
    return tuple(self.cast(v, "int64").v for v in items)

  def reshape(self, view: View, args) -> View:
    """`view.reshape(shape)`: the same elements with the dims of `shape` (one -1: the rest)."""
    values = [self.expr(a) for a in args]
    if len(values) == 1 and isinstance(values[0], Tup):
      values = list(values[0].items)
    dims = list(self.dims(Tup(tuple(values))))
    unknown = [
      k for k, a in enumerate(values) if isinstance(a.v, ir.Constant) and a.v.constant == -1
    ]
    if len(unknown) > 1:
      raise Unsupported("reshape with two -1")
    if unknown:
      rest = self.product([d for k, d in enumerate(dims) if k != unknown[0]])
      dims[unknown[0]] = self.b.sdiv(
        self.product(view.shape),
        self.b.select(
          self.b.icmp_signed("==", rest, ir.Constant(I64, 0)), ir.Constant(I64, 1), rest
        ),
      )
    return View(view.ptr, view.dtype, tuple(dims))

  def full(self, node, args) -> View:
    """np.full(shape, value, dtype): an array on the heap, freed when the kernel returns or
    when this call runs again (kernels never keep an older one under another name; a
    library function might, so it is refused there)."""
    if self.linkage != "external":  # an inlined library function
      raise Unsupported("np.full in a library function")
    if len(args) != 3:
      raise Unsupported("np.full without a dtype")
    dims = self.dims(self.expr(args[0]))
    value, dtype = self.scalar(self.expr(args[1])), self.dtype_arg(args[2])
    slot = self.heap.get(id(node))  # (by the call, not by its text: two calls, two arrays)
    if slot is None:
      slot = self.heap[id(node)] = self.alloca(I8P)
      self.allocas.store(ir.Constant(I8P, None), slot)
    b, count = self.b, self.product(dims)
    b.call(self.c.libc("free"), [b.load(slot)])
    size = b.mul(count, ir.Constant(I64, np.dtype(dtype).itemsize))
    data = b.call(
      self.c.libc("malloc"),
      [b.select(b.icmp_signed("<", size, ir.Constant(I64, 1)), ir.Constant(I64, 1), size)],
    )
    b.store(data, slot)
    self.fill(b.bitcast(data, LL[dtype].as_pointer()), count, self.cast(value, dtype).v)
    return View(data, dtype, dims)

  def intrinsic(self, name: str, args):
    ty = args[0].type
    fn = self.c.module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * len(args)))
    return self.b.call(fn, args)

  def extern(self, symbol: str, ret, args):
    mod = self.c.module
    fn = mod.globals.get(symbol)
    if fn is None:
      fn = ir.Function(mod, ir.FunctionType(ret, [a.type for a in args]), symbol)
    return self.b.call(fn, args)

  def dtype_arg(self, node) -> str:
    obj = self.static(node)
    if obj not in NUMPY_TYPES:
      raise Unsupported(f"dtype {kir.expr(node)}")
    return NUMPY_TYPES[obj]

  def call(self, node):
    if node.keywords:
      raise Unsupported("keyword arguments")
    fn_node, args = node.func, node.args
    name = fn_node.id if isinstance(fn_node, kir.Name) else None
    if name in INTRINSICS and name not in self.slots:
      if name in BITCASTS:
        return self.bitcast(name, args)
      if name in WRAPPING:  # int64 arithmetic that wraps (no `nsw`), as numba's intrinsic
        x, y = (self.cast(self.expr(a), "int64").v for a in args)
        return Val("int64", getattr(self.b, WRAPPING[name])(x, y))
      return getattr(self, f"call_{name}")(args)
    if (
      isinstance(fn_node, kir.Attribute)
      and isinstance(fn_node.value, kir.Name)
      and fn_node.value.id in self.slots
      and fn_node.attr == "reshape"
    ):
      view = self.lookup(fn_node.value.id)
      if isinstance(view, View):
        return self.reshape(view, args)
    obj = self.static(fn_node)
    if obj is None:
      raise Unsupported(f"call of {kir.expr(fn_node)}")
    if obj is np.full:
      return self.full(node, args)
    if obj is np.fmod and len(args) == 2:
      x, y = (self.scalar(self.expr(a)) for a in args)
      if x.ty != y.ty or x.ty not in FLOATS:
        raise Unsupported("np.fmod of mixed or integer operands (numpy's loop choice)")
      return Val(x.ty, self.flags(self.b.frem(x.v, y.v)))
    if isinstance(obj, type) and obj in NUMPY_TYPES:
      if len(args) != 1:
        raise Unsupported(f"{obj.__name__} of {len(args)} arguments")
      (arg,) = args
      ty = NUMPY_TYPES[obj]
      try:  # a constant: converted in Python, as numba folds it
        value = self.constant(arg)
      except Unsupported:
        x = self.scalar(self.expr(arg))
        if obj is float:  # numba: a float32 stays one; bools are refused
          if x.ty == "bool":
            raise Unsupported("float of a bool") from None
          ty = x.ty if x.ty in FLOATS else "float64"
        elif obj is int:  # numba: an int32 stays one
          ty = "int32" if x.ty == "int32" else "int64"
        return self.cast(x, ty)
      try:
        return self.literal(obj(value))
      except (OverflowError, ValueError) as e:
        raise Unsupported(f"constant {value!r} as {ty}") from e
    if name in ("min", "max") and obj in (min, max) and len(args) >= 2:
      return self.minmax(obj is max, [self.scalar(self.expr(a)) for a in args])
    if obj is abs and len(args) == 1:
      x = self.scalar(self.expr(args[0]))
      if x.ty in FLOATS:
        return Val(x.ty, self.intrinsic("llvm.fabs", [x.v]))
      if x.ty == "bool":
        raise Unsupported("abs of a bool (numba: an int8)")
      zero = ir.Constant(LL[x.ty], 0)
      neg = self.b.icmp_signed("<", x.v, zero)
      return Val(x.ty, self.b.select(neg, self.b.sub(zero, x.v), x.v))
    if inspect.isbuiltin(obj) and getattr(math, getattr(obj, "__name__", ""), None) is obj:
      return self.math_call(obj.__name__, args, MATH)
    if isinstance(obj, np.ufunc) and getattr(np, obj.__name__, None) is obj:
      return self.math_call(obj.__name__, args, NUMPY)
    if hasattr(obj, "py_func"):
      return self.inline(obj, args)
    symbol, sig = getattr(obj, "symbol", None), getattr(obj, "sig", None)
    if symbol is not None and sig is not None and type(obj).__name__ == "ExternalFunction":
      return self.external(symbol, sig, args)
    raise Unsupported(f"call of {kir.expr(fn_node)}")

  def minmax(self, is_max: bool, values) -> Val:
    acc = values[0]
    for v in values[1:]:
      ty = unify(acc.ty, v.ty)
      a, x = self.cast(acc, ty), self.cast(v, ty)
      pred = self.compare_pair(">" if is_max else "<", x, a)
      acc = Val(ty, self.b.select(pred, x.v, a.v))
    return acc

  def math_call(self, fname: str, args, table) -> Val:
    entry = table.get(fname)
    if entry is None:
      raise Unsupported(f"function {fname}")
    values = [self.scalar(self.expr(a)) for a in args]
    if table is NUMPY:  # numpy's loops: one float type only (ints keep odd types)
      if any(v.ty != values[0].ty or v.ty not in FLOATS for v in values):
        raise Unsupported(f"np.{fname} of integers or mixed types")
      ty = values[0].ty
    else:  # math: the operands' common type, a float (ints and bools alone: float64)
      ty = values[0].ty
      for v in values[1:]:
        ty = unify(ty, v.ty)
      ty = ty if ty in FLOATS else "float64"
    vs = [self.cast(v, ty).v for v in values]
    if fname in ("floor", "ceil", "trunc") and table is MATH:  # numba: an int64 result
      return self.cast(Val(ty, self.intrinsic(entry, vs)), "int64")
    if isinstance(entry, str):
      return Val(ty, self.intrinsic(entry, vs))
    return Val(ty, self.extern(entry[ty == "float64"], LL[ty], vs))

  def external(self, symbol: str, sig, args):
    names = [str(t) for t in sig.args]
    ret = str(sig.return_type)
    if any(t not in LL for t in names) or ret not in LL and ret != "none":
      raise Unsupported(f"external {symbol} of signature {sig}")
    vs = [self.cast(self.expr(a), t).v for a, t in zip(args, names)]
    result = self.extern(symbol, ir.VoidType() if ret == "none" else LL[ret], vs)
    return Val("int64", ir.Constant(I64, 0)) if ret == "none" else Val(ret, result)

  def inline(self, dispatcher, args):
    """A call of a library function: translated for these argument types (arguments that
    are Python objects, a dtype, bound as constants of that translation), inlined."""
    names = parsed(dispatcher.py_func)[0].params
    if len(names) != len(args):
      raise Unsupported(f"call of {dispatcher.py_func.__name__} with other arguments")
    values, statics = [], []
    for name, a in zip(names, args):
      value = self.expr(a)
      if isinstance(value, Static) and value.obj in NUMPY_TYPES:
        statics.append((name, value.obj))
      else:
        values.append((name, self.scalar(value)))
    fn = self.c.function_for(
      dispatcher, tuple(v.ty for _, v in values), tuple(statics), [n for n, _ in values]
    )
    result = self.b.call(fn, [v.v for _, v in values])
    if isinstance(fn.function_type.return_type, ir.VoidType):
      return Val("int64", ir.Constant(I64, 0))
    return self.c.unpacked(result, fn.function_type.return_type, self.b)

  # -- the kernels' intrinsics ---------------------------------------------------------
  def call_LOAD(self, args):
    ptr, offset, dtype = args
    ty = self.dtype_arg(dtype)
    base = self.b.bitcast(self.pointer(self.expr(ptr)), LL[ty].as_pointer())
    at = self.b.gep(base, [self.cast(self.expr(offset), "int64").v], inbounds=True)
    return Val(ty, self.b.load(at))

  def call_STORE(self, args):
    ptr, offset, value, dtype = args
    ty = self.dtype_arg(dtype)
    base = self.b.bitcast(self.pointer(self.expr(ptr)), LL[ty].as_pointer())
    at = self.b.gep(base, [self.cast(self.expr(offset), "int64").v], inbounds=True)
    self.b.store(self.cast(self.expr(value), ty).v, at)
    return Val("int64", ir.Constant(I64, 0))

  def pointer(self, value) -> ir.Value:
    if isinstance(value, Val) and value.ty == "ptr":
      return value.v
    if isinstance(value, Val) and value.ty in ("int64",):
      return self.b.inttoptr(value.v, I8P)
    raise Unsupported("an address that is not a pointer")

  def call_NONNEG(self, args):
    (x,) = args
    x = self.scalar(self.expr(x))
    if x.ty not in ("int32", "int64"):
      raise Unsupported("NONNEG of a non-integer")
    assume = self.c.module.declare_intrinsic(
      "llvm.assume", fnty=ir.FunctionType(ir.VoidType(), [I1])
    )
    self.b.call(assume, [self.b.icmp_signed(">=", x.v, ir.Constant(x.v.type, 0))])
    return x

  def call_ADDRESS(self, args):
    (x,) = args
    return Val("int64", self.b.ptrtoint(self.pointer(self.expr(x)), I64))

  def call_carray(self, args):
    ptr, shape, dtype = args
    if not isinstance(shape, kir.Tuple):
      raise Unsupported("carray with a shape that is not a tuple")
    dims = tuple(self.cast(self.expr(d), "int64").v for d in shape.elts)
    return View(self.pointer(self.expr(ptr)), self.dtype_arg(dtype), dims)

  def bitcast(self, name, args):
    (x,) = args
    src, dst = BITCASTS[name]
    return Val(dst, self.b.bitcast(self.cast(self.expr(x), src).v, LL[dst]))

  def call__blas_gemm(self, args):
    """codegen.blas's `_blas_gemm(dtype, ta, m, n, k, a, b, c, beta, ldn)`: BLAS through
    numba's `GEMM_SYMBOL` (column-major: the row-major c = A @ B + beta c is c^T = B^T
    A^T), as the numba intrinsic of that name emits it."""
    if len(args) != 10:
      raise Unsupported("_blas_gemm with other arguments")
    ty = self.dtype_arg(args[0])
    if ty not in FLOATS:
      raise Unsupported("_blas_gemm of integers")
    ta, m, n, k, a, b, c, beta, ldn = (self.cast(self.expr(x), "int64").v for x in args[1:])
    fl = LL[ty]
    xxgemm_call(self.b, fl, self.alloca(fl), self.alloca(fl), ta, m, n, k, a, b, c, beta, ldn)
    return Val("int64", ir.Constant(I64, 0))


WRAPPING = {kir.WRAPPING[op]: ll for op, ll in (("+", "add"), ("-", "sub"), ("*", "mul"))}
INTRINSICS = ("LOAD", "STORE", "NONNEG", "ADDRESS", "carray", "_blas_gemm", *BITCASTS, *WRAPPING)


def xxgemm_call(b: ir.IRBuilder, fl, one, scale, ta, m, n, k, a, b_, c, beta, ldn) -> None:
  """Emits the row-major c = A @ B + beta c by the BLAS entry `GEMM_SYMBOL` (`link_blas`)
  (column-major: c^T = B^T A^T), A the (m, k) matrix at address `a` or (ta) the transpose
  of the (k, m) one there, B (k, n) at `b_`, B's and c's rows `ldn` elements apart; `one`
  and `scale` are allocas of the float type `fl` (the helper takes alpha and beta by
  address). For codegen.blas's numba intrinsic and its translation alike."""
  char, i64 = I8, I64
  fn = b.module.globals.get(GEMM_SYMBOL) or ir.Function(
    b.module,
    ir.FunctionType(I32, [char] * 3 + [i64] * 3 + [I8P, I8P, i64, I8P, i64, I8P, I8P, i64]),
    GEMM_SYMBOL,
  )
  b.store(ir.Constant(fl, 1.0), one)
  b.store(b.sitofp(beta, fl), scale)
  transposed = b.icmp_signed("!=", ta, ir.Constant(i64, 0))
  transb = b.select(transposed, ir.Constant(char, ord("t")), ir.Constant(char, ord("n")))
  ldb = b.select(transposed, m, k)
  at_least_1 = lambda v: b.select(
    b.icmp_signed("<", v, ir.Constant(i64, 1)), ir.Constant(i64, 1), v
  )
  ptr = lambda v: b.inttoptr(v, I8P)
  kind = ir.Constant(char, ord("s" if isinstance(fl, ir.FloatType) else "d"))
  b.call(
    fn,
    [
      kind,
      ir.Constant(char, ord("n")),
      transb,
      n,
      m,
      k,
      b.bitcast(one, I8P),
      ptr(b_),
      at_least_1(ldn),
      ptr(a),
      at_least_1(ldb),
      b.bitcast(scale, I8P),
      ptr(c),
      at_least_1(ldn),
    ],
  )


def _plain(fn, fastmath) -> standins.Dispatcher:
  """A plain Python function of this module, translated as a library function is."""
  return standins.Dispatcher(fn, {"error_model": "numpy", "fastmath": set(fastmath)})


# numba's int_power_impl, for a float base of type tp and an integer exponent; and for an
# integer base (numba's numpy error model: 0 ** -n is INT64_MIN). An exponent of -2**63
# takes pow (numba raises OverflowError there).
def _float_power(a, b, tp):
  r = tp(1)
  a = tp(a)
  invert = b < 0
  exp = -b if invert else b
  if exp > 65536 or exp < 0:
    return tp(math.pow(a, float(b)))
  while exp != 0:
    if exp & 1:
      r *= a
    exp >>= 1
    a *= a
  return tp(1.0 / r) if invert else r


def _int_power(a, b):
  r = np.int64(1)
  a = np.int64(a)
  invert = b < 0
  exp = -b if invert else b
  if invert:
    if a == 0:
      return np.int64(-9223372036854775808)
    if a != 1 and a != -1:
      return np.int64(0)
  if exp > 65536 or exp < 0:
    return np.int64(math.pow(a, float(b)))
  while exp != 0:
    if exp & 1:
      r *= a
    exp >>= 1
    a *= a
  return np.int64(1.0 / r) if invert else r


class Compiler:
  """One LLVM module: a kernel and the library functions it calls. `var_types` and
  `returns` (per function and argument types) carry over between attempts."""

  def __init__(self, name: str, var_types: dict, returns: dict):
    self.module = ir.Module(name=name)
    self.var_types, self.returns = var_types, returns
    self.functions: dict[tuple, ir.Function] = {}

  def libc(self, name: str) -> ir.Function:
    fn = self.module.globals.get(name)
    if fn is None:
      fnty = (
        ir.FunctionType(I8P, [I64]) if name == "malloc" else ir.FunctionType(ir.VoidType(), [I8P])
      )
      fn = ir.Function(self.module, fnty, name)
    return fn

  def lltype_of(self, values):
    first = values[0]
    if isinstance(first, Tup):
      if any(not isinstance(v, Tup) or len(v.items) != len(first.items) for v in values):
        raise Unsupported("returns of different shapes")
      return ir.LiteralStructType(
        [self.lltype_of([v.items[k] for v in values]) for k in range(len(first.items))]
      )
    if any(not isinstance(v, Val) or v.ty not in INTS + FLOATS for v in values):
      raise Unsupported("returns something other than numbers")
    ty = values[0].ty
    for v in values[1:]:
      ty = unify(ty, v.ty)
    return LL[ty]

  def unpacked(self, value, lltype, b):
    if isinstance(lltype, ir.LiteralStructType):
      return Tup(
        tuple(self.unpacked(b.extract_value(value, k), t, b) for k, t in enumerate(lltype.elements))
      )
    ty = next(t for t, ll in LL.items() if ll == lltype)
    return Val(ty, value)

  def function_for(self, dispatcher, arg_types: tuple, statics=(), params=None):
    """The module's translation of a library function (numba's dispatcher) for these
    argument types and constant arguments `statics` ((name, object) pairs); its return
    type (none: void) found first by a probe into a scratch module."""
    py_func = dispatcher.py_func
    options = getattr(dispatcher, "targetoptions", {})
    if options.get("error_model") != "numpy":  # numba's python model raises on x / 0
      raise Unsupported(f"{py_func.__name__} is not compiled with error_model='numpy'")
    fastmath = options.get("fastmath") or ()
    fastmath = ("fast",) if fastmath is True else tuple(sorted(fastmath))
    key = (py_func, arg_types, statics)
    fn = self.functions.get(key)
    if fn is None:
      fn_kir, globals_ = parsed(py_func)
      globals_ = {**globals_, **dict(statics)}
      make = lambda c, name, ret=None: Function(
        c, key, fn_kir, globals_, arg_types, name, ret, fastmath=fastmath, params=params
      )
      if key not in self.returns:
        f = make(Compiler("probe", self.var_types, self.returns), py_func.__name__)
        f.build()
        self.returns[key] = self.lltype_of(f.returned) if f.returned else ir.VoidType()
      fn = make(self, f"{py_func.__name__}.{len(self.functions)}", self.returns[key]).build()
      self.functions[key] = fn
    return fn


@functools.lru_cache(maxsize=16)
def _functions(source: str) -> dict[str, kir.Function | None]:
  """The functions of a library module's source as kernel IR (None: a signature or
  decorators outside the subset)."""
  out: dict[str, kir.Function | None] = {}
  for n in ast.parse(source).body:
    if isinstance(n, ast.FunctionDef):
      try:
        out[n.name] = kir.from_python(n) if len(n.decorator_list) <= 1 else None
      except ValueError:
        out[n.name] = None
  return out


def parsed(py_func) -> tuple[kir.Function, dict]:
  """A library function's kernel IR and its globals: from its module's SOURCE (the
  library runs as modules of the cache, from source) or its file."""
  globals_ = py_func.__globals__
  source = globals_.get("SOURCE")
  if not isinstance(source, str):
    try:
      source = inspect.getsource(inspect.getmodule(py_func))
    except (OSError, TypeError) as e:
      raise Unsupported(f"no source for {py_func.__name__}") from e
  fn = _functions(source).get(py_func.__name__)
  if fn is None:
    raise Unsupported(f"function {py_func.__name__}")
  return fn, globals_


def python_kernel(source: str) -> kir.Function:
  """The kernel function of a module's Python source (`KERNEL = name` names it) as kernel
  IR; raises Unsupported for a module of another shape."""
  tree = ast.parse(source)
  defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
  kernel = next(
    (
      n.value.id
      for n in tree.body
      if isinstance(n, ast.Assign)
      and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["KERNEL"]
      and isinstance(n.value, ast.Name)
    ),
    None,
  )
  if kernel not in defs or len(defs) != 1:
    raise Unsupported("a module other than one kernel function")
  for n in tree.body:
    if not isinstance(n, (ast.FunctionDef, ast.Assign, ast.Import, ast.ImportFrom, ast.Expr)):
      raise Unsupported(f"module statement {type(n).__name__}")
  try:
    return kir.from_python(defs[kernel])
  except ValueError as e:
    raise Unsupported(str(e)) from None


def kernel_ir(source: str, globals_: dict, symbol: str) -> str:
  """The LLVM IR of a generated module's kernel, as the C function `symbol`
  (`int64 symbol(int64 phase, int64 lo, int64 hi, void **p)`); raises Unsupported."""
  return render_kernel(python_kernel(source), globals_, symbol)


def render_kernel(fn: kir.Function, globals_: dict, symbol: str) -> str:
  """The LLVM IR of a kernel given as kernel IR (`globals_`: what its names stand for,
  besides `math` and `np`), as the C function `symbol`; raises Unsupported."""
  names = {**globals_, "math": math, "np": np}
  return _module(
    symbol,
    lambda c: Function(
      c,
      "kernel",
      fn,
      names,
      ("int64", "int64", "int64", "table"),
      symbol,
      I64,
      linkage="external",
    ).build(),
  )


def function_ir(
  source: str, name: str, arg_types: tuple, globals_: dict, symbol: str, fastmath=("contract",)
) -> tuple[str, str | None]:
  """The LLVM IR of the function `name` of `source` for scalar arguments `arg_types`, as
  the C function `symbol`, and its return type (numba's for the same arguments; None: it
  returns nothing); raises Unsupported. (The library's C entries, and tests holding the
  translator to numba's semantics.)"""
  fn_kir = _functions(source).get(name)
  if fn_kir is None:
    raise Unsupported(f"no function {name}")
  ret = []

  def build(c):
    probe = Function(
      Compiler("probe", c.var_types, c.returns),
      "f",
      fn_kir,
      globals_,
      arg_types,
      name,
      linkage="external",
      fastmath=fastmath,
    )
    probe.build()
    ret[:] = [c.lltype_of(probe.returned) if probe.returned else ir.VoidType()]
    Function(
      c, "f", fn_kir, globals_, arg_types, symbol, ret[0], linkage="external", fastmath=fastmath
    ).build()

  text = _module(symbol, build)
  return text, next((t for t, ll in LL.items() if ll == ret[0]), None)


def _module(symbol: str, build) -> str:
  """The IR of the module `build(compiler)` fills, translated again with a variable's
  wider type each time numba would have unified two (`_Retype`)."""
  var_types, returns = {}, {}
  for _ in range(50):
    c = Compiler(symbol, var_types, returns)
    try:
      build(c)
      return str(c.module)
    except _Retype as r:
      var_types.setdefault(r.key, {})[r.name] = r.ty
      returns.clear()
  raise Unsupported("variable types do not settle")


# -- machine code --------------------------------------------------------------------------

_lock = threading.Lock()  # the engine
_engine = None


@functools.cache
def target_machine():
  """The kernels' CPU (`codegen.target`: this machine's, as numba targets it, or the one
  PRIMC_CPU names), optimizing. (llvmlite
  runs one LLVM call at a time in a process: kernels compile in parallel in processes,
  see codegen.kernel_workers.)"""
  import llvmlite.binding as llvm

  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  name, features = target.cpu()
  return llvm.Target.from_default_triple().create_target_machine(
    cpu=name, features=features, opt=3, reloc="default", codemodel="jitdefault", jit=True
  )


def cross_machine(triple: str, cpu: str, features: str = ""):
  """A target machine for another CPU or architecture (`triple`, e.g.
  "aarch64-unknown-linux-gnu"), to read what kernels become there (`optimized(..., tm)`,
  `emit_assembly`): nothing compiled for it runs here."""
  import llvmlite.binding as llvm

  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3)


def optimized(ir_text: str, tm=None):
  """A module of IR parsed, verified and optimized for this machine (or target machine
  `tm`; llvmlite's module)."""
  import llvmlite.binding as llvm

  tm = tm or target_machine()
  mod = llvm.parse_assembly(ir_text)
  mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
  mod.verify()
  # O2 with both vectorizers: the kernels' steady times as at O3 (side by side, W1-W6
  # and the Hessians within 1-3%), compiled 20% faster (W2 cold 1.0 -> 0.79 s)
  options = llvm.create_pipeline_tuning_options(speed_level=2)
  options.loop_vectorization = options.slp_vectorization = True
  builder = llvm.create_pass_builder(tm, options)
  builder.getModulePassManager().run(mod, builder)
  return mod


def object_code(ir_text: str) -> bytes:
  """LLVM's optimized machine code for a module of IR, as an object file."""
  return target_machine().emit_object(optimized(ir_text))


def assembly(ir_text: str) -> str:
  """The machine code of a module of IR as assembly (as numba's `inspect_asm`)."""
  return target_machine().emit_assembly(optimized(ir_text))


_counter = itertools.count()


def compile_function(source: str, name: str, arg_types: tuple, globals_: dict):
  """`function_ir` compiled and loaded: (the C function's address, its return type)."""
  symbol = f"primc_function_{next(_counter)}"
  text, ret = function_ir(source, name, arg_types, globals_, symbol)
  if ret is None:
    raise Unsupported(f"{name} returns nothing")
  return load(object_code(text), symbol), ret


# The product's BLAS entry (`xxgemm_call`'s callee): numba's helper's signature, `kind`
# ("s"/"d") first. LLVM is given its address by `link_blas`.
GEMM_SYMBOL = "primc_xxgemm"
_blas_lock = threading.Lock()


def link_blas() -> None:
  """Gives LLVM the address of `GEMM_SYMBOL`, once per process: a wrapper over the
  OpenBLAS `codegen.openblas` chooses (primc's own, on one thread, else numpy's); else
  numba's helper (from numba's C extension `_helperlib`, loaded by itself when numba is
  not imported), which imports scipy's BLAS on its first call (~0.12 s here)."""
  from llvmlite import binding

  with _blas_lock:
    if binding.address_of_symbol(GEMM_SYMBOL):
      return
    targets = openblas.gemm_addresses()
    if targets is not None:
      address = gemm_entry(targets)
    else:
      address = installed.extension("numba._helperlib").c_helpers["xxgemm"]
    binding.add_symbol(GEMM_SYMBOL, address)


def gemm_entry(targets: dict[str, int]) -> int:
  """The address of a `GEMM_SYMBOL` over the Fortran sgemm/dgemm at `targets` (compiled
  here: a few lines of IR calling them with 64-bit integers)."""
  return load(object_code(str(_gemm_wrapper(targets))), GEMM_SYMBOL)


def _gemm_wrapper(targets: dict[str, int]) -> ir.Module:
  """`GEMM_SYMBOL(kind, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`: the
  Fortran `?gemm` at `targets[kind]` called with its arguments by address (integers as
  64-bit), and the lengths of its two one-character arguments last."""
  char, i64 = I8, I64
  module = ir.Module(name="primc_blas")
  fn = ir.Function(
    module,
    ir.FunctionType(I32, [char] * 3 + [i64] * 3 + [I8P, I8P, i64, I8P, i64, I8P, I8P, i64]),
    GEMM_SYMBOL,
  )
  kind, ta, tb, m, n, k, alpha, a, lda, b_, ldb, beta, c, ldc = fn.args
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  by_address = []
  for value in (ta, tb, m, n, k, lda, ldb, ldc):
    slot = b.alloca(value.type)
    b.store(value, slot)
    by_address.append(slot)
  pta, ptb, pm, pn, pk, plda, pldb, pldc = by_address
  i64p = i64.as_pointer()
  fortran = ir.FunctionType(
    ir.VoidType(), [I8P, I8P, i64p, i64p, i64p, I8P, I8P, i64p, I8P, i64p, I8P, I8P, i64p, i64, i64]
  )
  blocks = {which: fn.append_basic_block(which) for which in targets}
  b.cbranch(b.icmp_unsigned("==", kind, ir.Constant(char, ord("s"))), blocks["s"], blocks["d"])
  for which, block in blocks.items():
    b.position_at_end(block)
    callee = b.inttoptr(ir.Constant(i64, targets[which]), fortran.as_pointer())
    b.call(
      callee,
      [
        pta,
        ptb,
        pm,
        pn,
        pk,
        alpha,
        a,
        plda,
        b_,
        pldb,
        beta,
        c,
        pldc,
        ir.Constant(i64, 1),
        ir.Constant(i64, 1),
      ],
    )
    b.ret(ir.Constant(I32, 0))
  return module


def text_size(obj: bytes) -> int:
  """The size in bytes of an object file's code (its `.text` sections)."""
  import llvmlite.binding as llvm

  return sum(s.size() for s in llvm.ObjectFileRef.from_data(obj).sections() if s.is_text())


def load(obj: bytes, symbol: str) -> int:
  """Loads an object file into this process's engine; the address of `symbol`. An object
  calling the BLAS entry gets it linked first (unresolved, the call would jump to 0)."""
  import llvmlite.binding as llvm

  if symbol != GEMM_SYMBOL and GEMM_SYMBOL.encode() in obj:  # (the entry itself: no)
    link_blas()
  global _engine
  with _lock:
    if _engine is None:
      _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
    _engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    _engine.finalize_object()
    address = _engine.get_function_address(symbol)
  if not address:
    raise RuntimeError(f"the object file has no function {symbol}")
  return address
