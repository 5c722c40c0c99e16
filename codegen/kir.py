"""The kernel IR: the scalar code of a kernel as small frozen nodes.

A kernel is a function of loops over `range`, `if`/`while`, assignments to names and
elements, and expressions over scalars: arithmetic, comparisons, conditional
expressions, calls of the math library and of the kernel's intrinsics (`LOAD` and
`STORE` by address, `NONNEG`, `carray` views of the kernel's table, `WRAP_ADD` and its
kin for int64 arithmetic that wraps). The nodes mirror that subset of Python one for one,
with its semantics: a name holds a scalar or a view, integers are numba's int64 and
floats numpy's, and a call resolves its function by name (`np.float32`, `math.exp`, a
library function, an intrinsic). Types are explicit where memory and conversions are
(`LOAD(ptr, offset, np.float32)`, `np.int32(x)`, a constant's type); a value's type in
between is numba's rule for its operands. Two renderers consume the nodes: LLVM IR
(`codegen.translate`, which types them as numba types that Python) and `to_python`, the
Python numba compiles (the reference and the fallback); a kernel's module in the cache is
that Python.

Kernels are built from Python templates filled with nodes (`E`, `S`: primc's own text,
parsed once per process; a field is a node, a number or a name, never text).
`from_python` builds the nodes of a Python function (the library's functions, written as
Python for numba, and a kernel module another process wrote). Syntax outside the subset
becomes an `Outside` node, which a renderer refuses where it reaches it (code after a
`return` is never reached), as numba refuses it only where it compiles it.

Expressions: Name, Const, Attribute, BinOp, UnaryOp, Compare, BoolOp, IfExp, Call,
Subscript, Tuple, Slice. Statements: Assign, AugAssign, ExprStmt, If, For (over `range`),
While, Try (`except Exception`), Raise, Return, Break, Continue, Pass (numba's LAPACK
kernels use slices, keywords and `try`; the LLVM renderer refuses them). Operators are
Python's spellings (`"+"`, `"//"`, `"not"`, `"<="`, `"and"`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import numbers
import string
import textwrap
from typing import Union

_node = dataclasses.dataclass(frozen=True, slots=True)


# -- expressions ---------------------------------------------------------------------------
@_node
class Name:
  id: str


@_node
class Const:
  value: int | float | bool | str  # a Python literal (negative numbers: UnaryOp("-", ...))


@_node
class Attribute:
  value: Expr
  attr: str


@_node
class BinOp:
  op: str  # + - * / // % ** << >> & | ^
  left: Expr
  right: Expr


@_node
class UnaryOp:
  op: str  # - + ~ not
  operand: Expr


@_node
class Compare:
  left: Expr
  ops: tuple[str, ...]  # == != < <= > >= (a chain: `a < b <= c`)
  comparators: tuple[Expr, ...]


@_node
class BoolOp:
  op: str  # and, or
  values: tuple[Expr, ...]


@_node
class IfExp:
  test: Expr
  body: Expr
  orelse: Expr


@_node
class Call:
  func: Expr  # a Name or an Attribute (`np.float32`, `x.reshape`)
  args: tuple[Expr, ...]
  keywords: tuple[tuple[str, Expr], ...] = ()  # (numba's library calls; not in kernels
  # the LLVM renderer takes)


@_node
class Subscript:
  value: Expr
  index: tuple[Expr, ...]  # one expression per dimension (never one Tuple: `a[(i, j)]`
  # is Python's `a[i, j]`)


@_node
class Tuple:
  elts: tuple[Expr, ...]


@_node
class Slice:
  """`lower:upper` in a subscript (numba's array views; outside the LLVM renderer's part)."""

  lower: Expr | None = None
  upper: Expr | None = None


@_node
class Outside:
  """Syntax outside the subset (`what` says which), refused where a renderer reaches it."""

  what: str


Expr = Union[
  Name,
  Const,
  Attribute,
  BinOp,
  UnaryOp,
  Compare,
  BoolOp,
  IfExp,
  Call,
  Subscript,
  Tuple,
  Slice,
  Outside,
]


# -- statements ----------------------------------------------------------------------------
@_node
class Assign:
  targets: tuple[Expr, ...]  # names, elements (Subscript) or tuples of names to unpack
  value: Expr


@_node
class AugAssign:
  target: Expr
  op: str
  value: Expr


@_node
class ExprStmt:
  value: Expr


@_node
class If:
  test: Expr
  body: tuple[Stmt, ...]
  orelse: tuple[Stmt, ...] = ()


@_node
class For:
  """`for target in range(*bounds):` (one to three bounds, as `range` takes them)."""

  target: str
  bounds: tuple[Expr, ...]
  body: tuple[Stmt, ...]


@_node
class While:
  test: Expr
  body: tuple[Stmt, ...]


@_node
class Return:
  value: Expr | None = None


@_node
class Try:
  """`try: body` / `except Exception: handler` (numba's LAPACK calls raise)."""

  body: tuple[Stmt, ...]
  handler: tuple[Stmt, ...]


@_node
class Raise:
  exc: Expr


@_node
class Break:
  pass


@_node
class Continue:
  pass


@_node
class Pass:
  pass


Stmt = Union[
  Assign, AugAssign, ExprStmt, If, For, While, Try, Raise, Return, Break, Continue, Pass, Outside
]


@_node
class Function:
  name: str
  params: tuple[str, ...]
  body: tuple[Stmt, ...]


# -- from Python -------------------------------------------------------------------------
BINARY = {
  ast.Add: "+",
  ast.Sub: "-",
  ast.Mult: "*",
  ast.Div: "/",
  ast.FloorDiv: "//",
  ast.Mod: "%",
  ast.Pow: "**",
  ast.LShift: "<<",
  ast.RShift: ">>",
  ast.BitAnd: "&",
  ast.BitOr: "|",
  ast.BitXor: "^",
}
UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}
COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def from_python(fn: ast.FunctionDef) -> Function:
  """The nodes of a Python function (its docstring dropped; a signature with defaults,
  `*args` or keywords is outside the subset: ValueError)."""
  a = fn.args
  if a.vararg or a.kwarg or a.defaults or a.kwonlyargs or a.posonlyargs:
    raise ValueError(f"{fn.name}: only plain positional parameters")
  return Function(fn.name, tuple(p.arg for p in a.args), _stmts(fn.body))


def _stmts(stmts) -> tuple:
  return tuple(
    s
    for s in map(_stmt, stmts)
    if not (type(s) is ExprStmt and type(s.value) is Const and s.value.value is None)
  )


def _stmt(s):  # noqa: PLR0911 - one branch per statement kind
  kind = type(s)
  if kind is ast.Assign:
    return Assign(tuple(map(_expr, s.targets)), _expr(s.value))
  if kind is ast.AugAssign:
    op = BINARY.get(type(s.op))
    return (
      Outside("augmented " + type(s.op).__name__)
      if op is None
      else (AugAssign(_expr(s.target), op, _expr(s.value)))
    )
  if kind is ast.Expr:  # a docstring: dropped (as Const(None))
    is_doc = isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
    return ExprStmt(Const(None) if is_doc else _expr(s.value))
  if kind is ast.If:
    return If(_expr(s.test), _stmts(s.body), _stmts(s.orelse))
  if kind is ast.For:
    return _for(s)
  if kind is ast.While:
    return Outside("while ... else") if s.orelse else While(_expr(s.test), _stmts(s.body))
  if kind is ast.Return:
    return Return(None if s.value is None else _expr(s.value))
  if kind is ast.Try:
    return _try(s)
  if kind is ast.Raise:
    return Outside("raise ... from") if s.exc is None or s.cause else Raise(_expr(s.exc))
  simple = {ast.Break: Break, ast.Continue: Continue, ast.Pass: Pass}.get(kind)
  return simple() if simple is not None else Outside(f"statement {kind.__name__}")


def _try(s: ast.Try):
  (h,) = s.handlers if len(s.handlers) == 1 else (None,)
  if (
    h is None
    or s.orelse
    or s.finalbody
    or h.name
    or not (isinstance(h.type, ast.Name) and h.type.id == "Exception")
  ):
    return Outside("try other than try/except Exception")
  return Try(_stmts(s.body), _stmts(h.body))


def _for(s: ast.For):
  it = s.iter
  if (
    s.orelse
    or not isinstance(s.target, ast.Name)
    or not isinstance(it, ast.Call)
    or not isinstance(it.func, ast.Name)
    or it.func.id != "range"
    or it.keywords
    or not 1 <= len(it.args) <= 3
  ):
    return Outside("a for loop other than over range(...)")
  return For(s.target.id, tuple(map(_expr, it.args)), _stmts(s.body))


def _expr(node):  # noqa: PLR0911 - one branch per expression kind
  kind = type(node)
  if kind is ast.Name:
    return Name(node.id)
  if kind is ast.Constant:
    v = node.value
    return Const(v) if type(v) in (int, float, bool, str) else Outside(f"a constant {v!r}")
  if kind is ast.Attribute:
    return Attribute(_expr(node.value), node.attr)
  if kind is ast.BinOp:
    op = BINARY.get(type(node.op))
    return (
      Outside(type(node.op).__name__)
      if op is None
      else (BinOp(op, _expr(node.left), _expr(node.right)))
    )
  if kind is ast.UnaryOp:
    return UnaryOp(UNARY[type(node.op)], _expr(node.operand))
  if kind is ast.Compare:
    ops = [COMPARE.get(type(o)) for o in node.ops]
    if None in ops:
      return Outside("comparison " + type(node.ops[ops.index(None)]).__name__)
    return Compare(_expr(node.left), tuple(ops), tuple(map(_expr, node.comparators)))
  if kind is ast.BoolOp:
    return BoolOp("and" if isinstance(node.op, ast.And) else "or", tuple(map(_expr, node.values)))
  if kind is ast.IfExp:
    return IfExp(_expr(node.test), _expr(node.body), _expr(node.orelse))
  if kind is ast.Call:
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
      k.arg is None for k in node.keywords
    ):
      return Outside("starred arguments")
    keywords = tuple((k.arg, _expr(k.value)) for k in node.keywords)
    return Call(_expr(node.func), tuple(map(_expr, node.args)), keywords)
  if kind is ast.Slice:
    if node.step is not None:
      return Outside("a slice with a step")
    lower, upper = (None if x is None else _expr(x) for x in (node.lower, node.upper))
    return Slice(lower, upper)
  if kind is ast.Subscript:
    index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return Subscript(_expr(node.value), tuple(map(_expr, index)))
  if kind is ast.Tuple:
    return Tuple(tuple(map(_expr, node.elts)))
  return Outside(f"expression {kind.__name__}")


# -- to Python -----------------------------------------------------------------------------
# binding strength of each operator (Python's grammar): an operand weaker than its place
# needs is parenthesized
_BINARY_PREC = {
  "|": 6,
  "^": 7,
  "&": 8,
  "<<": 9,
  ">>": 9,
  "+": 10,
  "-": 10,
  "*": 11,
  "/": 11,
  "//": 11,
  "%": 11,
  "**": 13,
}
_UNARY_PREC, _ATOM = 12, 14


def to_python(fn: Function, indent: str = "  ", comment: str = "") -> str:
  """The Python source of a function's nodes (numba compiles it; `from_python` of its
  syntax tree gives the same nodes), `comment`'s lines first in its body."""
  lines = [f"def {fn.name}({', '.join(fn.params)}):"]
  lines += [f"{indent}# {line}" for line in comment.splitlines()]
  _block(fn.body, 1, indent, lines)
  return "\n".join(lines) + "\n"


def statements(stmts, depth: int = 0, indent: str = "  ") -> list[str]:
  """The lines of statements at an indentation depth."""
  lines: list[str] = []
  _block(stmts, depth, indent, lines)
  return lines


def _block(stmts, depth: int, indent: str, lines: list[str]) -> None:
  if not stmts:
    lines.append(indent * depth + "pass")
  for s in stmts:
    _line(s, depth, indent, lines)


def _line(s, depth: int, indent: str, lines: list[str]) -> None:
  pad = indent * depth
  kind = type(s)
  if kind is If:
    lines.append(f"{pad}if {expr(s.test)}:")
    _block(s.body, depth + 1, indent, lines)
    while len(s.orelse) == 1 and type(s.orelse[0]) is If:  # elif chains
      s = s.orelse[0]
      lines.append(f"{pad}elif {expr(s.test)}:")
      _block(s.body, depth + 1, indent, lines)
    if s.orelse:
      lines.append(f"{pad}else:")
      _block(s.orelse, depth + 1, indent, lines)
  elif kind is For:
    lines.append(f"{pad}for {s.target} in range({', '.join(map(expr, s.bounds))}):")
    _block(s.body, depth + 1, indent, lines)
  elif kind is While:
    lines.append(f"{pad}while {expr(s.test)}:")
    _block(s.body, depth + 1, indent, lines)
  elif kind is Try:
    lines.append(f"{pad}try:")
    _block(s.body, depth + 1, indent, lines)
    lines.append(f"{pad}except Exception:")
    _block(s.handler, depth + 1, indent, lines)
  else:
    lines.append(pad + statement(s))


def statement(s) -> str:
  """A simple statement's line (no indentation)."""
  kind = type(s)
  if kind is Assign:
    return " = ".join([*(_target(t) for t in s.targets), expr(s.value)])
  if kind is AugAssign:
    return f"{_target(s.target)} {s.op}= {expr(s.value)}"
  if kind is ExprStmt:
    return expr(s.value)
  if kind is Return:
    return "return" if s.value is None else f"return {expr(s.value)}"
  if kind is Raise:
    return f"raise {expr(s.exc)}"
  if kind in (Break, Continue, Pass):
    return kind.__name__.lower()
  raise ValueError(f"no Python for {s!r}")


def _target(t) -> str:
  if type(t) is Tuple:
    return ", ".join(map(expr, t.elts)) + ("," if len(t.elts) == 1 else "")
  return expr(t)


def expr(e, prec: int = 0) -> str:  # noqa: PLR0911 - one branch per expression kind
  """An expression's Python, parenthesized where a place binding as strongly as `prec`
  needs it."""
  kind = type(e)
  if kind is Name:
    return e.id
  if kind is Const:
    text = repr(e.value)
    return f"({text})" if prec > _UNARY_PREC and text.startswith("-") else text
  if kind is Attribute:
    return f"{expr(e.value, _ATOM)}.{e.attr}"
  if kind is Call:
    args = [expr(a, 1) for a in e.args] + [f"{k}={expr(v, 1)}" for k, v in e.keywords]
    return f"{expr(e.func, _ATOM)}({', '.join(args)})"
  if kind is Slice:
    return ":".join("" if x is None else expr(x, 1) for x in (e.lower, e.upper))
  if kind is Subscript:
    return f"{expr(e.value, _ATOM)}[{', '.join(expr(i, 1) for i in e.index)}]"
  if kind is Tuple:
    inner = ", ".join(expr(x, 1) for x in e.elts)
    return f"({inner},)" if len(e.elts) == 1 else f"({inner})"
  if kind is BinOp:
    p = _BINARY_PREC[e.op]
    if e.op == "**":  # right-associative; a unary operand on the right needs no parentheses
      text = f"{expr(e.left, p + 1)} ** {expr(e.right, _UNARY_PREC)}"
    else:
      text = f"{expr(e.left, p)} {e.op} {expr(e.right, p + 1)}"
  elif kind is UnaryOp:
    p = 4 if e.op == "not" else _UNARY_PREC
    text = f"not {expr(e.operand, p)}" if e.op == "not" else f"{e.op}{expr(e.operand, p)}"
  elif kind is Compare:
    p = 5
    parts = [expr(e.left, 6)]
    for op, c in zip(e.ops, e.comparators):
      parts += [op, expr(c, 6)]
    text = " ".join(parts)
  elif kind is BoolOp:
    p = 3 if e.op == "and" else 2
    text = f" {e.op} ".join(expr(v, p + 1) for v in e.values)
  elif kind is IfExp:
    p = 1
    text = f"{expr(e.body, 2)} if {expr(e.test, 2)} else {expr(e.orelse, 1)}"
  else:
    raise ValueError(f"no Python for {e!r}")
  return f"({text})" if p < prec else text


# -- building nodes ------------------------------------------------------------------------
# int64 arithmetic that wraps on overflow, as numpy's: the kernel intrinsics (numba's in
# codegen.mathlib; the LLVM renderer emits them itself), by operator
WRAPPING = {"+": "WRAP_ADD", "-": "WRAP_SUB", "*": "WRAP_MUL"}


def number(value) -> Expr:
  """A Python number as nodes, as Python spells it (a negative one is a negation, so
  that the rendered Python parses back to the same nodes)."""
  if isinstance(value, bool):
    return Const(value)
  value = value.item() if hasattr(value, "item") else value  # (numpy's scalars: Python's)
  if value < 0 or (value == 0 and str(value).startswith("-")):
    return UnaryOp("-", Const(-value))
  return Const(value)


def np_type(dtype: str) -> Attribute:
  """numpy's scalar type of a dtype name (`np.float32`, `np.bool_`)."""
  return Attribute(Name("np"), dtype if dtype != "bool" else "bool_")


def call(func: str, *args) -> Call:
  """A call of a function by its dotted name (`call("np.float64", x)`)."""
  head, *attrs = func.split(".")
  fn: Expr = Name(head)
  for a in attrs:
    fn = Attribute(fn, a)
  return Call(fn, tuple(map(as_expr, args)))


def product(factors) -> Expr:
  """`a * b * c` of expressions (1 for none)."""
  out = None
  for f in map(as_expr, factors):
    out = f if out is None else BinOp("*", out, f)
  return Const(1) if out is None else out


def as_expr(part) -> Expr:
  """A node, a number, or a name (an identifier) as an expression node."""
  if isinstance(part, str):
    if not part.isidentifier():
      raise ValueError(f"{part!r}: a name, or nodes (text is never code here)")
    return Name(part)
  if isinstance(part, numbers.Real):
    return number(part)
  return part


def E(template: str, *args, **kwargs) -> Expr:
  """The expression a Python template spells, its `{}` fields filled with nodes (or
  numbers, or names: `as_expr`): `E("({0} if {1} else {2})", x, p, y)`. The template is
  primc's own text, parsed once; the fields are nodes, never text put together."""
  node, fields = _template(template, False)
  return _filled(node, fields, args, kwargs)


def S(template: str, *args, **kwargs) -> tuple:
  """The statements a Python template spells (lines, blocks), filled as `E` fills its
  fields; a field standing alone as a statement takes a sequence of statements."""
  node, fields = _template(template, True)
  return _filled(node, fields, args, kwargs)


def _filled(node, fields: dict, args, kwargs):
  values = {}
  for holder, field in fields.items():
    value = args[int(field)] if field.isdigit() else kwargs[field]
    values[holder] = value if isinstance(value, (tuple, list)) else as_expr(value)
  return substitute(node, values)


@functools.lru_cache(maxsize=2048)
def _template(text: str, statements: bool):
  fields: dict[str, str] = {}
  parts, auto = [], 0
  for literal, field, _, _ in string.Formatter().parse(text):
    parts.append(literal)
    if field is not None:
      if field == "":
        field, auto = str(auto), auto + 1
      holder = next((h for h, f in fields.items() if f == field), None)
      if holder is None:
        holder = f"_kir{len(fields)}_"
        fields[holder] = field
      parts.append(holder)
  source = "".join(parts)
  if statements:
    return _stmts(ast.parse(textwrap.dedent(source)).body), fields
  return _expr(ast.parse(source.strip(), mode="eval").body), fields


def substitute(node, values: dict):
  """`node` with the names in `values` replaced by their nodes (a statement that is such a
  name alone, by its statements; a loop's target, by the name's). The nodes around them
  are new ones: a template filled twice gives two trees (a renderer may tell call sites
  apart by identity, as `np.full`'s arrays are)."""
  if isinstance(node, tuple):
    out = []
    for s in node:
      if type(s) is ExprStmt and type(s.value) is Name and s.value.id in values:
        out.extend(values[s.value.id])
      elif isinstance(s, str):  # (a comparison's operators)
        out.append(s)
      else:
        out.append(substitute(s, values))
    return tuple(out)
  kind = type(node)
  if kind is Name:
    return values.get(node.id, node)
  if kind is Const or kind is Outside or node is None:
    return node
  fields = []
  for f in kind.__slots__:
    v = getattr(node, f)
    if kind is For and f == "target":
      fields.append(values[v].id if v in values else v)
    elif isinstance(v, str) or v is None:
      fields.append(v)
    else:
      fields.append(substitute(v, values))
  return kind(*fields)


def names(node) -> set[str]:
  """The names an expression or statements read or set."""
  out: set[str] = set()
  _names(node, out)
  return out


def _names(node, out: set) -> None:
  if isinstance(node, tuple):
    for x in node:
      _names(x, out)
    return
  kind = type(node)
  if kind is Name:
    out.add(node.id)
    return
  if kind is For:
    out.add(node.target)
  if hasattr(node, "__slots__") and kind is not Const:
    for f in kind.__slots__:
      v = getattr(node, f)
      if not isinstance(v, str):
        _names(v, out)
