"""The IR: abstract values, variables, literals, equations, programs.

A `Program` is a small, frozen, single-assignment (SSA) list of equations, modelled on
JAX's jaxpr. Variables are compared by identity; their printed names are made only when a
program is printed, so printouts are stable and diffable. `typecheck` verifies a program
against the primitives' shape rules.
"""

from __future__ import annotations

import functools
import gc
import itertools
import math
import os
import threading
from typing import Any, Callable, Sequence, Union

import numpy as np

VERSION = "0.1.0"  # primc's version (pyproject.toml says the same)
INT_DTYPES = ("int32", "int64")
# numpy's other integers (image bytes, labels, counts): values in every path, with
# numpy's promotion and wraparound; programs holding them run on the interpreter
OTHER_INT_DTYPES = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
ALL_INT_DTYPES = INT_DTYPES + OTHER_INT_DTYPES
# native code computes in these; float16, long double (numpy's longdouble where it is
# wider than float64) and the other integers run on the interpreter, in numpy's own loops
NATIVE_DTYPES = ("float32", "float64") + INT_DTYPES + ("bool",)
FLOAT_DTYPES = tuple(dict.fromkeys(("float16", "float32", "float64", np.dtype(np.longdouble).name)))
SUPPORTED_DTYPES = FLOAT_DTYPES + ALL_INT_DTYPES + ("bool",)
_SHORT_DTYPE = {
  "float16": "f16",
  "float32": "f32",
  "float64": "f64",
  "float128": "f128",
  "int32": "i32",
  "int64": "i64",
  "bool": "bool",
  "int8": "i8",
  "int16": "i16",
  "uint8": "u8",
  "uint16": "u16",
  "uint32": "u32",
  "uint64": "u64",
}


class PrimcError(Exception):
  """An error in a user's program: names the op, the shapes/dtypes and the user's line."""


class ShapeError(PrimcError):
  """Raised by abstract rules; the tracer adds the op and source location."""


class PrimcTypeError(PrimcError, TypeError):
  """A value of the wrong kind for the call: a traced value where Python needs a concrete
  one (`if x:`, `float(x)`), a non-float output or input for `grad`. Also a TypeError, as
  JAX and autograd raise there."""


class ConcretizationError(PrimcTypeError):
  """Python needed a traced value's value (`if x > 0:`, `a[i]` of a numpy array), which a
  trace of abstract values does not have (a transform then traces again with the
  arguments' values: `primc.trace.trace_flat`'s `concrete`)."""


class TypeCheckError(PrimcError):
  """A malformed program."""


class PrimcIndexError(PrimcError, IndexError):
  """An index out of bounds (numpy's rule: negatives count from the end, anything outside
  `[-n, n)` is an error), raised while tracing for indices known then, and by the call for
  indices known only at run time. Also an `IndexError`, so Python's iteration protocol and
  users' `except IndexError` see it."""


def index_error(index: int, axis: int, size: int) -> PrimcIndexError:
  """numpy's wording, so messages read the same in every path."""
  return PrimcIndexError(f"index {index} is out of bounds for axis {axis} with size {size}")


_dtype_names: dict = {}


def dtype_name(dtype: Any) -> str:
  """`np.dtype(dtype).name`, memoized (numpy computes `.name` anew, ~3 µs, and tracing
  asks for it once per abstract value)."""
  try:
    return _dtype_names[dtype]
  except (KeyError, TypeError):
    name = np.dtype(dtype).name
    try:
      _dtype_names[dtype] = name
    except TypeError:  # an unhashable dtype-like
      pass
    return name


class FrozenError(AttributeError):
  """A field of the IR assigned or deleted after it was made: the IR is frozen."""


class Frozen:
  """A frozen record: `__init__` sets its `_fields` once, through `__dict__` (~3x faster
  than `object.__setattr__`; programs make ~10^5 of them), and assigning or deleting one
  afterwards raises FrozenError. The IR's records are plain classes, not dataclasses:
  making a dataclass costs ~0.4 ms, eleven of them a tenth of `import primc`."""

  __slots__ = ()
  _fields: tuple[str, ...] = ()

  def __setattr__(self, name, value):
    raise FrozenError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

  def __delattr__(self, name):
    raise FrozenError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

  def __repr__(self):
    fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
    return f"{type(self).__name__}({fields})"


class ShapedArray(Frozen):
  """The abstract value of an array: a static shape and a dtype name."""

  _fields = ("shape", "dtype")

  def __init__(self, shape: tuple[int, ...], dtype: str):
    self.__dict__.update(shape=tuple(map(int, shape)), dtype=dtype_name(dtype))

  def __eq__(self, other):
    if type(other) is not ShapedArray:
      return NotImplemented
    return self.shape == other.shape and self.dtype == other.dtype

  def __hash__(self):  # (kept once computed: abstract values key the tape's rules and CSE)
    try:
      return self.__dict__["_hash"]
    except KeyError:
      h = self.__dict__["_hash"] = hash((self.shape, self.dtype))
      return h

  def __getstate__(self):  # (a string's hash differs between processes: not pickled)
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def size(self) -> int:
    return math.prod(self.shape)

  @property
  def is_float(self) -> bool:
    return self.dtype in FLOAT_DTYPES

  @functools.cached_property  # (printers and cache keys ask for it again and again)
  def _short(self) -> str:
    return f"{_SHORT_DTYPE.get(self.dtype, self.dtype)}[{','.join(map(str, self.shape))}]"

  def str_short(self) -> str:
    return self._short

  __str__ = str_short


class Var(Frozen):
  """A program variable. Identity is the variable; the name is made at print time."""

  _fields = ("aval",)

  def __init__(self, aval: ShapedArray):
    self.__dict__["aval"] = aval


class Lit(Frozen):
  """A constant array (read-only), compared by value so it can enter CSE and cache keys.

  `sized`: a value computed from the program's sizes (a mean's 1/n): its value never
  decides a rewrite (`x * 1/n` stays a product at n = 1), so a program's structure, and
  its kernels, are the same at every size."""

  _fields = ("value", "aval", "sized")

  def __init__(self, value: np.ndarray, aval: ShapedArray, sized: bool = False):
    self.__dict__.update(value=value, aval=aval, sized=sized)

  @staticmethod
  def of(value, dtype=None, sized: bool = False) -> "Lit":
    arr = np.array(value, dtype=dtype)
    arr.setflags(write=False)
    return Lit(arr, ShapedArray(arr.shape, dtype_name(arr.dtype)), sized)

  @functools.cached_property  # (literals are compared and hashed often: CSE, rewrites)
  def _key(self):
    return (self.aval, self.value.tobytes(), self.sized)

  @functools.cached_property
  def uniform(self):
    """The value every element has, as a numpy scalar; None if they differ, if it is NaN,
    or if the literal is sized (a value that depends on sizes decides nothing)."""
    flat = self.value.reshape(-1)
    if self.sized or not flat.size or np.isnan(flat[0]) or not (flat == flat[0]).all():
      return None
    return flat[0]

  def __eq__(self, other):
    return isinstance(other, Lit) and self._key == other._key

  def __hash__(self):
    return hash(self._key)


Atom = Union[Var, Lit]


# What a primitive is, declared where it is created; the stages read it instead of keeping
# their own lists:
TRAITS = {
  "elementwise": "maps operands of one shape element by element",
  "comparison": "an elementwise predicate (bool result)",
  "commutative": "operands may be swapped",
  "index_map": "reads its operand at indices computed from the output's (structural)",
  "reduction": "accumulates its operand over axes",
  "contraction": "a sum of products over contracted dims (dot_general)",
  "indexing": "reads or writes at indices held in an array (gather, scatter)",
  "generator": "makes an array from its parameters alone",
  "sorting": "orders its operand along its last axis (argsort)",
  "cumulative": "accumulates its operand along its last axis, left to right, keeping each "
  "partial result (cumsum, cumprod)",
  "linalg": "a LAPACK routine on the matrices of its last two axes (batched)",
  "convolution": "sums of products over sliding windows (conv); lowered before fusion",
  "nondifferentiable": "zero derivative by definition",
  "integer": "takes integer (or bool) operands only (bitwise operations)",
}


class Primitive:
  """A primitive operator is a name; its rules live in tables owned by the stages.

  `traits` (see TRAITS) and `linear` (the argument positions it is linear in, "all", or
  None if in none: those primitives, and only those, have a transpose rule) are declared
  with it."""

  def __init__(self, name: str, multiple_results: bool = False, traits=(), linear=None):
    assert set(traits) <= set(TRAITS), set(traits) - set(TRAITS)
    self.name = name
    self.multiple_results = multiple_results
    self.traits = frozenset(traits)
    self.linear = linear if linear in (None, "all") else tuple(linear)
    PRIMITIVES.setdefault(name, self)

  def __repr__(self):
    return self.name

  def __reduce__(self):  # a pickled program names its primitives
    return primitive_named, (self.name,)

  def bind(self, *args, **params):
    """Applies the primitive: staged while tracing, else run (`primc.trace.bind`)."""
    return binder[0](self, args, params)


PRIMITIVES: dict[str, "Primitive"] = {}  # by name: every primitive defined


def freeze_collector() -> None:
  """Moves every object the collector tracks now out of its view (`gc.freeze`), unless
  PRIMC_GC_FREEZE=0. Called when primc first builds a program and again after the compiler
  loads: what the process's imports left (numpy's and primc's, 3*10^4 objects; numba's,
  10^5) lives to the end, yet every full collection walked it, the interpreter's exit
  several times (a script's exit after one `grad` call: 21 -> 5 ms; after one compile:
  40 -> 12 ms), the first compiled call once (~40 ms). Frozen objects are still freed by
  reference counting; only those already dropped in a reference cycle when it runs stay
  allocated. Nothing is frozen at import."""
  if os.environ.get("PRIMC_GC_FREEZE") != "0":
    gc.freeze()


class _NoCycleCollection:
  """Python's cycle collector paused while a program is built, transformed or optimized
  (`without_gc`, nested and from several threads alike). Those stages allocate ~10^5
  objects per 10^4 equations and keep most of them, so each collection walks a larger
  heap of IR that reference counting frees anyway: the 946-step HMM gradient's trace,
  VJP, passes and fusion took 9.4 s with the collector, 3.5 s without. Garbage in cycles
  made meanwhile is collected once the outermost stage ends. The first stage freezes what
  the imports left (`freeze_collector`)."""

  def __init__(self):
    self.depth = 0
    self.was_enabled = False
    self.frozen = False
    self.lock = threading.Lock()

  def __enter__(self):
    with self.lock:
      if self.depth == 0:
        self.was_enabled = gc.isenabled()
        gc.disable()
        if not self.frozen:
          self.frozen = True
          freeze_collector()
      self.depth += 1

  def __exit__(self, *exc):
    with self.lock:
      self.depth -= 1
      if self.depth == 0 and self.was_enabled:
        gc.enable()


NO_GC = _NoCycleCollection()


def without_gc(fn: Callable) -> Callable:
  """`fn` run with the cycle collector paused (`NO_GC`)."""

  @functools.wraps(fn)
  def paused(*args, **kwargs):
    with NO_GC:
      return fn(*args, **kwargs)

  return paused


class NamedFunction:
  """A Python function as an equation's parameter (a user's custom rule, a function run
  on values): called as the function, compared by identity (two equations share one only
  if one call made them), printed as `<kind name>`, the name errors give. `parts`: what
  its behaviour is a function of (the user's functions and the values it closes over),
  where its maker says so: a stored program's key digests them (`primc.kept`); None
  where it does not (nothing is stored)."""

  def __init__(self, fn: Callable, name: str, kind: str = "rule", parts: tuple | None = None):
    self.fn, self.name, self.kind, self.parts = fn, name, kind, parts

  def __call__(self, *args):
    return self.fn(*args)

  def __repr__(self):
    return f"<{self.kind} {self.name}>"


# called when a primitive is asked for by a name no module defined yet (a program
# unpickled in a process that used nothing else): the package loads its modules
on_unknown_primitive: list[Callable[[], None]] = []
# loads `jit`'s compiler for the layers below it that hand it programs (a kept program
# called often: `primc.kept`), where nothing imported it yet (the package sets it)
on_compiler_wanted: list[Callable[[], None]] = []


def primitive_named(name: str) -> "Primitive":
  """The primitive of this name (unpickling a program: `on_unknown_primitive` loads the
  modules that define them all)."""
  if name not in PRIMITIVES:
    for load in on_unknown_primitive:
      load()
  return PRIMITIVES[name]


def _no_tracer(prim, args, params):
  raise RuntimeError("primc.trace is not imported")


# The tracer owns evaluation (primc.trace puts its `bind` here when imported): the IR does
# not depend on it.
binder: list[Callable] = [_no_tracer]


# Rule tables owned by primc: the shape/dtype rule and the numpy implementation; for an
# elementwise primitive that one numpy ufunc computes on float operands, that ufunc (an
# executor may pass it `out=`, an array of the output's shape and dtype).
abstract_rules: dict[Primitive, Callable[..., ShapedArray]] = {}
impl_rules: dict[Primitive, Callable[..., np.ndarray]] = {}
ufunc_rules: dict[Primitive, np.ufunc] = {}
# A faster implementation for float operands, made once per equation by kept runners and
# the tape (programs run again and again on values): `runner_rules[prim](*input avals,
# **params)` gives a function of the input values alone, run inside the caller's IEEE
# error state (parameters read once, no dtype checks: the shape rules held when traced).
runner_rules: dict[Primitive, Callable[..., Callable]] = {}
# Control flow run again and again on values (kept runners, the tape): `program_runner_rules
# [prim](sub, **params)` gives a function of the input values alone, `sub(program)` the
# runner of a program among its parameters (made once, not evaluated anew at every step
# of a loop), run inside the caller's IEEE error state.
program_runner_rules: dict[Primitive, Callable[..., Callable]] = {}


class Eqn(Frozen):
  """`outputs = prim[params](*inputs)`; params are a sorted tuple of hashable items;
  `source`, the user's line it stands for (or None)."""

  _fields = ("prim", "inputs", "params", "outputs", "source")

  def __init__(
    self,
    prim: Primitive,
    inputs: tuple[Atom, ...],
    params: tuple[tuple[str, Any], ...],
    outputs: tuple[Var, ...],
    source: str | None = None,
  ):
    self.__dict__.update(prim=prim, inputs=inputs, params=params, outputs=outputs, source=source)

  @property
  def kw(self) -> dict[str, Any]:
    return dict(self.params)


def make_params(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
  items = tuple(sorted(params.items()))
  hash(items)  # params must be hashable: they enter CSE and cache keys
  return items


class Program(Frozen):
  """A closed SSA program: `inputs`, `eqns` in order, and `outputs` (vars or literals)."""

  _fields = ("inputs", "eqns", "outputs")

  def __init__(self, inputs: tuple[Var, ...], eqns: tuple[Eqn, ...], outputs: tuple[Atom, ...]):
    self.__dict__.update(inputs=inputs, eqns=eqns, outputs=outputs)

  @property
  def in_avals(self) -> tuple[ShapedArray, ...]:
    return tuple(v.aval for v in self.inputs)

  @property
  def out_avals(self) -> tuple[ShapedArray, ...]:
    return tuple(v.aval for v in self.outputs)

  def __str__(self):
    return pp_program(self)

  __repr__ = __str__

  def dtypes(self) -> set[str]:
    """The dtypes of every value of the program and of the programs in its parameters."""
    found = {v.aval.dtype for v in self.inputs}
    for e in self.eqns:
      found.update(a.aval.dtype for a in (*e.inputs, *e.outputs))
      for _, value in e.params:
        for sub in value if isinstance(value, tuple) else (value,):
          if isinstance(sub, Program):
            found |= sub.dtypes()
    return found


# ---------------------------------------------------------------------------------------
# The evaluator


class _Running(threading.local):
  """The source line of the equation a program run is at (`run`): what an equation staged
  for it names (a JVP or batching rule's equations name the line of the equation they
  stand for), where no user code runs in between (`primc.trace.trace_flat` clears it)."""

  source: str | None = None


running = _Running()


def run(program: Program, args: Sequence, apply: Callable, lit: Callable | None = None) -> list:
  """Runs `program` on `args`: each equation's outputs are `apply(eqn, its inputs' values)`
  (a sequence, one value per output), a literal reads as `lit(literal)` (default: its
  value). The one evaluator of equations: the interpreter, staging, the JVP and batching
  all run programs through it; single assignment is checked as it goes.

  Raises:
    TypeCheckError: a variable is assigned twice.
  """
  lit = lit or (lambda a: a.value)
  env = dict(zip(program.inputs, args, strict=True))
  read = lambda a: lit(a) if isinstance(a, Lit) else env[a]
  before = running.source
  try:
    for eqn in program.eqns:
      running.source = eqn.source
      outs = apply(eqn, [read(a) for a in eqn.inputs])
      for v, x in zip(eqn.outputs, outs, strict=True):
        if v in env:
          raise TypeCheckError(f"{eqn.prim.name}: variable {v.aval} assigned twice")
        env[v] = x
  finally:
    running.source = before
  return [read(a) for a in program.outputs]


# Integers below this (axes, ranks, small dimensions) are structure; larger ones are sizes
# that may change from one call to the next (`shape_free_key`). The passes decide nothing
# from a size beyond this (passes.simplify, passes.combine), only from which sizes are
# equal, so programs of one shape-free key are rewritten alike.
SMALL_INT = 16


def shape_free_key(program: Program) -> str:
  """A digest of a program up to its sizes: the structure, with every integer of
  SMALL_INT or more in its types and parameters, and the value of each sized literal,
  replaced by the order in which that value first appears (equal sizes stay equal).
  Programs that differ only in a batch size get one key (see `passes.optimize`); smaller
  integers and the values of other literals are kept as they are."""
  order: dict = {}

  def num(n):
    return n if -SMALL_INT < n < SMALL_INT else f"#{order.setdefault(n, len(order))}"

  def param(v):
    if type(v) is int:
      return num(v)
    if type(v) is tuple:
      return tuple(param(x) for x in v)
    if isinstance(v, Program):
      return shape_free_key(v)
    return v

  def aval(a):
    return (a.dtype, tuple(num(d) for d in a.shape))

  ids: dict[Var, int] = {}

  def atom(a):
    if type(a) is Lit:
      value = (
        f"#{order.setdefault(('s', a.value.tobytes()), len(order))}"
        if a.sized
        else a.value.tobytes()
      )
      return ("L", aval(a.aval), value)
    return ids[a]

  parts: list = [tuple(aval(v.aval) for v in program.inputs)]
  for v in program.inputs:
    ids[v] = len(ids)
  for e in program.eqns:
    parts.append(
      (
        e.prim.name,
        tuple(atom(a) for a in e.inputs),
        tuple((k, param(v)) for k, v in e.params),
        tuple(aval(v.aval) for v in e.outputs),
      )
    )
    for v in e.outputs:
      ids[v] = len(ids)
  parts.append(tuple(atom(a) for a in program.outputs))
  import hashlib  # (OpenSSL's, ~3 ms: imported where a key is first made)

  return hashlib.sha1(repr(parts).encode()).hexdigest()


def alpha_equal(a: Program, b: Program) -> bool:
  """Whether two programs are the same up to the naming of their variables (literals
  compared by value): what a pass that rebuilt a program without rewriting gives."""
  if len(a.inputs) != len(b.inputs) or len(a.eqns) != len(b.eqns):
    return False
  names = dict(zip(a.inputs, b.inputs))
  same = lambda x, y: x == y if isinstance(x, Lit) else names.get(x) is y
  for e, f in zip(a.eqns, b.eqns):
    if e is f:
      names.update(zip(e.outputs, f.outputs))
      continue
    if (
      e.prim is not f.prim
      or e.params != f.params
      or len(e.inputs) != len(f.inputs)
      or len(e.outputs) != len(f.outputs)
      or not all(same(x, y) for x, y in zip(e.inputs, f.inputs))
    ):
      return False
    names.update(zip(e.outputs, f.outputs))
  return len(a.outputs) == len(b.outputs) and all(same(x, y) for x, y in zip(a.outputs, b.outputs))


def results(eqn: Eqn, out: Any) -> Sequence:
  """A primitive's result as one value per output."""
  return out if eqn.prim.multiple_results else (out,)


# ---------------------------------------------------------------------------------------
# Printer


def _names():
  letters = "abcdefghijklmnopqrstuvwxyz"
  for n in itertools.count(1):
    for chars in itertools.product(letters, repeat=n):
      yield "".join(chars)


def pp_lit(lit: Lit) -> str:
  if lit.aval.shape == ():
    v = lit.value.item()
    return repr(v) if lit.aval.dtype != "float32" else repr(float(np.float32(v)))
  return f"const:{lit.aval.str_short()}"


def pp_param(v: Any) -> str:
  if isinstance(v, np.dtype):
    return v.name
  return repr(v)


class Printer(Frozen):
  """How a program prints: literals, abstract values and parameters (the default prints
  everything; kernels print their region with sizes and float constants as `?`)."""

  _fields = ("lit", "aval", "param")

  def __init__(
    self,
    lit: Callable = pp_lit,
    aval: Callable = str,
    param: Callable = lambda name, value: pp_param(value),
  ):
    self.__dict__.update(lit=lit, aval=aval, param=param)


def pp_program(program: Program, indent: int = 0, printer: Printer = Printer()) -> str:
  """Prints a program like a jaxpr, naming variables in order of definition."""
  names: dict[Var, str] = {}
  gen = _names()

  def name(v: Var) -> str:
    if v not in names:
      names[v] = next(gen)
    return names[v]

  def atom(a: Atom) -> str:
    return printer.lit(a) if isinstance(a, Lit) else names.get(a, "<undefined>")

  pad = " " * indent
  ins = " ".join(f"{name(v)}:{printer.aval(v.aval)}" for v in program.inputs)
  lines = [f"{pad}{{ lambda {ins} ."]
  for i, eqn in enumerate(program.eqns):
    outs = " ".join(f"{name(v)}:{printer.aval(v.aval)}" for v in eqn.outputs)
    params = ", ".join(
      f"{k}={printer.param(k, v)}" for k, v in eqn.params if not isinstance(v, Program)
    )
    head = f"{eqn.prim.name}[{params}]" if params else eqn.prim.name
    args = " ".join(atom(a) for a in eqn.inputs)
    kw = "let " if i == 0 else "    "
    lines.append(f"{pad}  {kw}{outs} = {head} {args}".rstrip())
    for v in eqn.params:
      if isinstance(v[1], Program):  # a fused region prints like a program
        lines.append(pp_program(v[1], indent + 8, printer))
  outs = " ".join(atom(a) for a in program.outputs)
  lines.append(f"{pad}  in ( {outs} ) }}")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Typechecker


def typecheck(program: Program) -> None:
  """Checks SSA form and every equation's output avals against its primitive's shape rule.

  Raises:
    TypeCheckError: naming the offending equation.
  """
  env: set[Var] = set()

  def read(a, where):
    if isinstance(a, Lit):
      return a.aval
    if not isinstance(a, Var):
      raise TypeCheckError(f"{where}: {a!r} is not a Var or Lit")
    if a not in env:
      raise TypeCheckError(f"{where}: variable {a.aval} used before it is defined")
    return a.aval

  def define(v, where):
    if v in env:
      raise TypeCheckError(f"{where}: variable {v.aval} assigned twice (programs are SSA)")
    env.add(v)

  for v in program.inputs:
    define(v, "program inputs")
  for i, eqn in enumerate(program.eqns):
    where = f"equation {i} ({eqn.prim.name})"
    in_avals = [read(a, where) for a in eqn.inputs]
    if eqn.prim not in abstract_rules:
      raise TypeCheckError(f"{where}: primitive has no abstract rule")
    try:
      expected = abstract_rules[eqn.prim](*in_avals, **eqn.kw)
    except ShapeError as e:
      raise TypeCheckError(f"{where}: {e}") from None
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = tuple(v.aval for v in eqn.outputs)
    if got != expected:
      raise TypeCheckError(
        f"{where}: outputs {', '.join(map(str, got))} but the shape rule gives "
        f"{', '.join(map(str, expected))}"
      )
    for v in eqn.outputs:
      define(v, where)
  for a in program.outputs:
    read(a, "program outputs")
