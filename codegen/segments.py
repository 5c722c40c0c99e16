"""Rows that are constant between breakpoints: an innermost loop filled segment by segment.

A loop body whose stored values depend on the innermost index only through comparisons
and clamps of that index (an identity basis `eq(iota, iota)`, a one-hot row, a pad's
range check, the clamped index a pad reads at) stores the same values on every stretch
of the row between the points where one of those comparisons or clamps changes. Such a
loop is rewritten to evaluate its body once per stretch, at the stretch's first index,
and fill the stretch with the result. A dense Hessian's kernel is one: its rows are zero
but for a few elements, and each element used to be computed (4 comparisons, their
products and two range checks per element; ~0.38 ms for Rosenbrock at n = 1,000).

This is exact, NaN and signed zeros included: every element of a stretch is what the body
computes at the stretch's first index, because everything the stored value reads is the
same there. The analysis (`_Forms`) proves it from the body's statements: each integer
value that reads the index is continuous and, stretch by stretch, constant or
`slope * index + offset` (slope ±1: the index shifted, reversed, clamped by `min`/`max`,
its absolute value); a comparison of such a value with one the loop does not change
breaks the row where one of those lines meets it (and at the index after); values
computed from comparisons and invariants are constant between breakpoints. Everything
else that reads the index (a load at an address it moves, a product with it, its value
as a float) rejects the loop, which stays as it was. int32 truncation of an index value
is the identity only while its lines fit: checked at run time (a row that does not fit
finishes in the plain loop).

The rewritten loop keeps the plain one for what it does not cover: rows shorter than
`SEGMENT_MIN` elements per breakpoint (where evaluating the body once per stretch costs
more than the vectorized loop) and the rest of a row whose check failed.
"""

from __future__ import annotations

import dataclasses
import functools

from primc.codegen import kir, target
from primc.codegen.kir import E, S

# Row elements per breakpoint below which the plain loop runs. The plain loops of these
# bodies clamp int64 indices (a pad's, a slice's): with AVX-512's 64-bit vector min/max
# they vectorize, and the stretches break even at 100-150 columns of Rosenbrock's Hessian
# (16 breakpoints: 8 per breakpoint); without (AVX2, NEON) LLVM keeps them scalar, and
# the stretches win from 2 per breakpoint (Hessian n = 100 on AVX2: 44-78 -> 15 us).
SEGMENT_MIN = 8 if target.vector_int64_minmax() else 2
INT32_END = 2**31
_ZERO = kir.Const(0)
_WRAPPING = {kir.WRAPPING["+"]: "+", kir.WRAPPING["-"]: "-"}  # (int64 that wraps)


class _Varies(Exception):
  """The body reads the index in a way the analysis does not follow."""


@dataclasses.dataclass(frozen=True)
class _Form:
  """How a value depends on the index `j`. Values that do not read it have no form (None).
  An index value (the index, shifted, reversed, clamped, its absolute value) is continuous
  in `j` and on each stretch equal to a constant or to one of its `lines`, each
  `slope * j + offset` (slope ±1, offset an expression the loop does not change): so it
  crosses a value only where one of its lines does. Anything else is constant between
  its `breaks`. Offsets and breaks are kernel IR expressions."""

  breaks: tuple = ()
  lines: tuple = ()  # (slope, offset) pairs

  def map(self, slope: int, offset) -> "_Form":
    """`slope * self + offset(line's offset)` (slope ±1)."""
    return _Form(lines=tuple((s * slope, offset(c)) for s, c in self.lines))

  def meet(self, other) -> tuple:
    """Breakpoints where a line equals `other` (an expression the loop does not change)
    and the index after: the ends of the stretch where they are equal. A comparison of
    the value with `other` is constant between them."""
    points = []
    for slope, offset in self.lines:
      point = _minus(other, offset) if slope == 1 else _minus(offset, other)
      points += [point, kir.BinOp("+", point, kir.Const(1))]
    return tuple(points)


def _join(*forms) -> _Form | None:
  """The form of a value computed from `forms` by anything but index arithmetic: constant
  where they all are (none may follow the index itself)."""
  present = [f for f in forms if f is not None]
  if not present:
    return None
  if any(f.lines for f in present):
    raise _Varies
  return _Form(tuple(b for f in present for b in f.breaks))


def _plus(a, b):
  return a if b == _ZERO else b if a == _ZERO else kir.BinOp("+", a, b)


def _minus(a, b):
  return a if b == _ZERO else kir.UnaryOp("-", b) if a == _ZERO else kir.BinOp("-", a, b)


class _Forms:
  """The forms of a loop body's values (see the module docstring)."""

  def __init__(self, index: str):
    self.forms: dict[str, _Form | None] = {index: _Form(lines=((1, _ZERO),))}
    self.guards: list = []  # offsets of int32 truncations (checked at run time)

  def of(self, node) -> _Form | None:
    method = getattr(self, "_" + type(node).__name__, None)
    if method is None:
      raise _Varies
    return method(node)

  def _Const(self, node):
    return None

  def _Name(self, node):
    return self.forms.get(node.id)

  def _Attribute(self, node):
    if self.of(node.value) is not None:
      raise _Varies
    return None

  def _BinOp(self, node):
    left, right = self.of(node.left), self.of(node.right)
    if node.op in ("+", "-") and (left is None) != (right is None):
      form = left or right
      if form.lines:
        other = node.right if right is None else node.left
        if node.op == "+":
          return form.map(1, lambda c: _plus(c, other))
        if right is None:  # form - other
          return form.map(1, lambda c: _minus(c, other))
        return form.map(-1, lambda c: _minus(other, c))
    return _join(left, right)

  def _UnaryOp(self, node):
    form = self.of(node.operand)
    if form is not None and form.lines and node.op == "-":
      return form.map(-1, lambda c: _minus(_ZERO, c))
    return _join(form)

  def _Compare(self, node):
    operands = [node.left, *node.comparators]
    forms = [self.of(x) for x in operands]
    breaks = []
    for (a, fa), (b, fb) in zip(zip(operands, forms), zip(operands[1:], forms[1:])):
      if fa is not None and fa.lines and fb is None:
        breaks += fa.meet(b)
      elif fb is not None and fb.lines and fa is None:
        breaks += fb.meet(a)
      else:
        joined = _join(fa, fb)
        breaks += joined.breaks if joined is not None else []
    return _Form(tuple(breaks)) if any(f is not None for f in forms) else None

  def _BoolOp(self, node):
    return _join(*map(self.of, node.values))

  def _IfExp(self, node):
    return _join(self.of(node.test), self.of(node.body), self.of(node.orelse))

  def _Subscript(self, node):  # an element of a view: at an invariant index only
    if self.of(node.value) is not None or any(self.of(i) is not None for i in node.index):
      raise _Varies
    return None

  def _Tuple(self, node):
    if any(self.of(x) is not None for x in node.elts):
      raise _Varies
    return None

  def _Call(self, node):
    name = kir.expr(node.func)
    if name in _WRAPPING and len(node.args) == 2:  # int64 index arithmetic: + and -
      return self._BinOp(kir.BinOp(_WRAPPING[name], *node.args))
    forms = [self.of(x) for x in node.args]
    if name == "STORE":
      raise _Varies
    if name == "LOAD":  # an element at an address the loop does not move
      if forms[1] is not None:
        raise _Varies
      return None
    if len(forms) == 1 and forms[0] is not None and forms[0].lines:
      (form,) = forms
      if name == "np.int32":  # the identity while the lines fit in int32
        self.guards += [offset for _, offset in form.lines]
        return form
      if name in ("NONNEG", "np.int64", "int"):
        return form
      if name == "abs":  # the lines and their negations
        return _Form(lines=form.lines + form.map(-1, lambda c: _minus(_ZERO, c)).lines)
    if name in ("min", "max") and len(forms) == 2 and any(f and f.lines for f in forms):
      if None not in forms:
        raise _Varies
      k = 0 if forms[0] is not None else 1
      return _Form(lines=forms[k].lines)  # continuous: its lines, or constant between them
    return _join(*forms)


@dataclasses.dataclass(frozen=True)
class _Store:
  pointer: object
  offset: object  # the element's address is offset + index
  value: object
  dtype: object


def _is_store(s) -> bool:
  return (
    type(s) is kir.ExprStmt
    and type(s.value) is kir.Call
    and s.value.func == kir.Name("STORE")
    and len(s.value.args) == 4
  )


@functools.lru_cache(maxsize=1024)  # a program at a new size emits the same bodies again
def _analyze(index: str, body: tuple):
  """(statements with stores taken out, stores, breakpoints, guards) of a body (kernel
  IR statements) whose stored values are constant between breakpoints, or None."""
  forms = _Forms(index)
  kept, stores, breaks = [], [], []
  try:
    for s in body:
      if type(s) is kir.Assign and len(s.targets) == 1 and type(s.targets[0]) is kir.Name:
        form = forms.of(s.value)
        forms.forms[s.targets[0].id] = form
        kept.append(s)
      elif _is_store(s):
        ptr, offset, value, dtype = s.value.args
        where, what = forms.of(offset), forms.of(value)
        if forms.of(ptr) is not None or forms.of(dtype) is not None:
          raise _Varies
        if where is None or where.breaks or len(where.lines) != 1 or where.lines[0][0] != 1:
          raise _Varies  # every element of the row once, in order
        if what is not None and what.lines:
          raise _Varies
        breaks += what.breaks if what is not None else []
        stores.append(_Store(ptr, where.lines[0][1], value, dtype))
      else:
        return None
  except _Varies:
    return None
  breaks = list(dict.fromkeys(breaks))
  if not stores or not breaks:  # nothing to split on: the plain loop is as good
    return None
  return tuple(kept), tuple(stores), tuple(breaks), tuple(dict.fromkeys(forms.guards))


def segmented_loop(index: kir.Name, start, stop, body, fresh) -> list | None:
  """The statements of `for index in range(start, stop): body` filled stretch by stretch
  (see the module docstring), or None when the body's stores are not constant between
  breakpoints. Kernel IR in and out; `fresh(prefix)` names new variables."""
  found = _analyze(index.id, tuple(body))
  if found is None:
    return None
  kept, stores, breaks, guards = found
  at, end, point = (kir.Name(fresh(p)) for p in ("sj", "se", "sb"))
  values = [kir.Name(fresh("sv")) for _ in stores]
  cut = [
    s
    for b in breaks
    for s in S("{p} = {b}\n{e} = {p} if {at} < {p} < {e} else {e}", p=point, b=b, e=end, at=at)
  ]
  fits = [E("abs({0}) + {1} < {2}", g, stop, INT32_END) for g in guards]
  fit = fits[0] if len(fits) == 1 else kir.BoolOp("and", tuple(fits))
  check = S("if not ({0}):\n  break", fit) if fits else ()
  return list(
    S(
      """
      {at} = {start}
      if {stop} - {at} >= {least}:
        while {at} < {stop}:
          {index} = {at}
          {kept}
          {computed}
          {end} = {stop}
          {cut}
          {check}
          for {index} in range({at}, {end}):
            {stores}
          {at} = {end}
      for {index} in range({at}, {stop}):
        {body}
      """,
      at=at,
      start=start,
      stop=stop,
      least=SEGMENT_MIN * (len(breaks) + 1),
      index=index,
      kept=kept,
      computed=[kir.Assign((v,), s.value) for v, s in zip(values, stores)],
      end=end,
      cut=cut,
      check=check,
      stores=[
        kir.ExprStmt(kir.call("STORE", s.pointer, _plus(s.offset, index), v, s.dtype))
        for v, s in zip(values, stores)
      ],
      body=list(body),
    )
  )
