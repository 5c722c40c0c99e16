"""fusion: partitions a program into regions, each a sub-program that codegen emits as one
kernel.

Region kinds:
  loop    elementwise ops over one iteration domain (a shape), index maps (broadcast,
          reshape, transpose, slice, pad, concatenate, rev, roll) applied to values the region
          reads from memory or recomputes (below), and reductions over the domain at the
          end; several outputs.
  dot     one dot_general, plus an epilogue over its output: elementwise ops and
          reductions at the end (no prologue: operands are read from memory).
  gather  one gather or scatter_add.
  sort    one argsort.
  linalg  one linear-algebra primitive (prims.with_trait("linalg"): inv, solve, det,
          slogdet, cholesky, eigh, qr, triangular_solve, svd, pinv).

Legality (`fusion_blockers`: every reason an equation may not join a region) is kept
apart from profitability (`unprofitable`: a legal fusion that would not pay) and from the
placement policy (`fuse`): equations are placed greedily in program order into the latest
region they may join, trying the region of their producers first (vertical fusion), then
later regions of the same domain (horizontal fusion of siblings). Then a loop region
whose values one other loop region reads only through index maps moves into it and is
recomputed there, at the indices read (`lazy_eqns`), where that adds at most
RECOMPUTE_FACTOR times its own work (index arithmetic, integer sums included,
comparisons and constants count as free): a sliced identity, padded terms added, a
transposed result stop crossing memory. Otherwise work is never duplicated, except
constants (splats, `full`, `iota`), broadcasts of written values, and copies of one
written value (`-x`, `2 * x`, a conversion), which are recomputed in each region that
reads them (`_recomputed`).
Every region boundary keeps the reasons of every region it could not join
(`FusedProgram.reasons`; logged at DEBUG on `primc.fusion`; `primc show --stage fusion`).
"""

from __future__ import annotations

import dataclasses
import logging

from primc import prims as P
from primc.core import (
  Eqn,
  Lit,
  Primitive,
  Program,
  Var,
  abstract_rules,
  impl_rules,
  make_params,
  without_gc,
)
from primc.interpreter import interpret
from primc.passes.dce import dce, dce_rules

log = logging.getLogger("primc.fusion")

region_p = Primitive("region", multiple_results=True)
abstract_rules[region_p] = lambda *avals, program, kind: tuple(program.out_avals)
impl_rules[region_p] = lambda *xs, program, kind: interpret(program, *xs)


def _prune_region(eqn: Eqn, used: list[bool]) -> Eqn:
  sub = eqn.kw["program"]
  outs = tuple(a for a, u in zip(sub.outputs, used) if u)
  sub = dce(Program(sub.inputs, sub.eqns, outs))
  live = {a for e in sub.eqns for a in e.inputs} | set(outs)
  keep = [i for i, v in enumerate(sub.inputs) if v in live]
  sub = Program(tuple(sub.inputs[i] for i in keep), sub.eqns, sub.outputs)
  return Eqn(
    region_p,
    tuple(eqn.inputs[i] for i in keep),
    make_params({"program": sub, "kind": eqn.kw["kind"]}),
    tuple(v for v, u in zip(eqn.outputs, used) if u),
    eqn.source,
  )


dce_rules[region_p] = _prune_region

GENERATORS = P.with_trait("generator")
INDEX_MAPS = P.with_trait("index_map")
REDUCTIONS = P.with_trait("reduction")
# primitives with a region (and a kernel emitter) of their own
OPAQUE = {
  **{p: "dot" for p in P.with_trait("contraction")},
  **{p: "gather" for p in P.with_trait("indexing")},
  **{p: "sort" for p in P.with_trait("sorting")},
  **{p: "cumulative" for p in P.with_trait("cumulative")},
  **{p: "linalg" for p in P.with_trait("linalg")},
}
MAX_REGION_EQNS = 400  # profitability: very large kernels compile slowly


def domain(eqn: Eqn) -> tuple[int, ...]:
  """The iteration space of an equation's loop: a reduction iterates over its operand."""
  if eqn.prim in REDUCTIONS:
    return eqn.inputs[0].aval.shape
  return eqn.outputs[0].aval.shape


@dataclasses.dataclass(eq=False)  # (a region is itself: compared by identity)
class _Region:
  index: int
  kind: str
  domain: tuple[int, ...]
  eqns: list
  defined: set
  reduced: set


def fusion_blockers(region: _Region, eqn: Eqn) -> list[str]:
  """Legality: every reason `eqn` may not join `region` (none: it may)."""
  name = eqn.prim.name
  if eqn.prim in OPAQUE:
    return [f"{name} gets a region of its own"]
  if region.kind in ("gather", "sort", "cumulative", "linalg"):
    return [f"a {region.eqns[0].prim.name} region holds nothing else"]
  reasons = []
  if domain(eqn) != region.domain:
    reasons.append(
      f"{name} iterates over {list(domain(eqn))}, the region over {list(region.domain)}"
    )
  inside = [a for a in eqn.inputs if isinstance(a, Var) and a in region.defined]
  if region.kind == "dot":
    if "elementwise" not in eqn.prim.traits and eqn.prim not in REDUCTIONS:
      reasons.append(f"only an elementwise epilogue can join a dot_general region, not {name}")
    if not inside:
      reasons.append(f"{name} does not read the dot_general's result")
  if eqn.prim is P.reshape_p and not inside:
    reasons.append("a reshape of a value computed elsewhere is a view of it, not a copy")
  if any(a in region.reduced for a in inside):
    reasons.append(f"{name} reads a reduction computed in the region: reductions end a region")
  if inside and eqn.prim in INDEX_MAPS:
    reasons.append(f"{name} of a value computed in the region would recompute it at other indices")
  return reasons


def fusion_blocker(region: _Region, eqn: Eqn) -> str | None:
  """The first reason `eqn` may not join `region` (None: it may, and it pays)."""
  reasons = fusion_blockers(region, eqn) + unprofitable(region, eqn)
  return reasons[0] if reasons else None


def unprofitable(region: _Region, eqn: Eqn) -> list[str]:
  """Profitability (for legal fusions): why joining would not pay."""
  if len(region.eqns) >= MAX_REGION_EQNS:
    return [
      f"region is at its size limit ({MAX_REGION_EQNS} equations: larger kernels compile slowly)"
    ]
  return []


# A loop region read by one other loop region only through index maps (a slice, pad,
# transpose... of its values) is recomputed there, at the indices the maps read, when that
# costs little: an identity matrix sliced, padded results added, a transposed result
# then no longer cross memory. Limits: the work added to the reader at most
# RECOMPUTE_FACTOR times the producer's own (both over their domains), at most
# MAX_RECOMPUTED evaluations per element.
RECOMPUTE_FACTOR = 2
MAX_RECOMPUTED = 256
CHEAP = GENERATORS | INDEX_MAPS | {P.convert_p, P.select_p} | P.with_trait("comparison")
INDEX_ARITHMETIC = {P.add_p, P.sub_p, P.neg_p}  # free in integers (an iota shifted)


def lazy_eqns(program: Program) -> set[Eqn]:
  """The equations of a loop region computed only where an index map reads them (at the
  index it reads), not at the loop's index: those whose values are read only by index
  maps or by other such equations, and are not outputs of the region."""
  users: dict[Var, list[Eqn]] = {}
  for e in program.eqns:
    for a in e.inputs:
      if isinstance(a, Var):
        users.setdefault(a, []).append(e)
  outs = set(program.outputs)
  lazy: set[Eqn] = set()
  for e in reversed(program.eqns):
    uses = [u for v in e.outputs for u in users.get(v, ())]
    if (
      uses
      and not outs.intersection(e.outputs)
      and e.prim not in REDUCTIONS
      and e.prim not in OPAQUE
      and e.prim is not P.dot_general_p
      and all(u in lazy or (u.prim in INDEX_MAPS and u.prim is not P.reshape_p) for u in uses)
    ):
      lazy.add(e)
  return lazy


def _work(eqn: Eqn) -> int:
  """Rough cost of one element of `eqn`: index arithmetic and constants are free."""
  if (
    eqn.prim in CHEAP
    or _is_constant(eqn)
    or (eqn.prim in INDEX_ARITHMETIC and not eqn.outputs[0].aval.is_float)
  ):
    return 0
  return 1 if eqn.prim.linear is not None else 4


def _recomputed_work(eqns: list[Eqn]) -> tuple[int, int] | None:
  """(work, evaluations) per element of the lazy equations of a region made of `eqns`,
  and of the values they read that the region also computes at its loop's index: each is
  computed once per distinct chain of index maps that reads it (`codegen.kernels`'s
  loop body). None when an index map would read a lazy value it cannot (a reshape)."""
  read = {a for e in eqns for a in e.inputs}  # values no equation reads: the outputs
  lazy = lazy_eqns(
    Program((), tuple(eqns), tuple(v for e in eqns for v in e.outputs if v not in read))
  )
  computed = {v: e for e in eqns for v in e.outputs}
  seen: set = set()

  def visit(e, path):
    if (e, path) in seen:
      return
    seen.add((e, path))
    for a in e.inputs:
      if a in computed:
        visit(computed[a], path + (e,) if e.prim in INDEX_MAPS else path)

  for e in eqns:
    if e not in lazy:
      for a in e.inputs:
        if computed.get(a) in lazy:
          if e.prim is P.reshape_p:
            return None
          visit(computed[a], (e,) if e.prim in INDEX_MAPS else ())
  return sum(_work(e) for e, _ in seen), len(seen)


def _size(shape) -> int:
  n = 1
  for d in shape:
    n *= d
  return n


def _recompute_in_consumers(regions: list[_Region], reasons: list[str], outputs):
  """Moves each loop region whose values one later loop region reads, only through
  index maps, into that region (see `lazy_eqns`) when the recomputation is cheap.
  Returns the regions left and the reason each starts."""
  merged: set[int] = set()  # (ids of the regions moved into their readers)
  why = {id(r): text for r, text in zip(regions, reasons)}
  readers_of = _readers(regions)  # var -> the regions that read it (kept as they merge)
  for r in regions:
    if (
      r.kind != "loop"
      or r.reduced
      or set(outputs) & r.defined
      or any(e.prim in OPAQUE or e.prim is P.dot_general_p for e in r.eqns)
      or all(e.prim is P.reshape_p for e in r.eqns)
    ):  # a view: costs nothing
      continue
    readers = {id(c): c for v in r.defined for c in readers_of.get(v, ()) if c is not r}
    readers = list(readers.values())
    if len(readers) != 1 or readers[0].kind != "loop":
      continue
    c = readers[0]
    if not all(
      e.prim in INDEX_MAPS and e.prim is not P.reshape_p
      for e in c.eqns
      if any(a in r.defined for a in e.inputs)
    ):
      continue
    before = _recomputed_work(c.eqns)
    after = _recomputed_work(r.eqns + c.eqns)
    own = sum(_work(e) for e in r.eqns) * _size(r.domain)
    if (
      before is None
      or after is None
      or after[1] > MAX_RECOMPUTED
      or (after[0] - before[0]) * _size(c.domain) > RECOMPUTE_FACTOR * own
    ):
      continue
    c.eqns[:0] = r.eqns
    c.defined |= r.defined
    for e in r.eqns:  # what r read, c reads now
      for a in e.inputs:
        if isinstance(a, Var):
          readers_of[a] = [x for x in readers_of[a] if x is not r and x is not c] + [c]
    merged.add(id(r))
    why[id(c)] += (
      f" | recomputes {why.pop(id(r)).split(':')[0]}, which it reads only through index maps"
    )
  alive = [r for r in regions if id(r) not in merged]
  for k, r in enumerate(alive):
    r.index = k
  return alive, [why[id(r)] for r in alive]


def _readers(regions: list[_Region]) -> dict:
  """Each variable read by a region's equations -> those regions (each once)."""
  out: dict = {}
  for r in regions:
    for e in r.eqns:
      for a in e.inputs:
        if isinstance(a, Var):
          readers = out.setdefault(a, [])
          if not readers or readers[-1] is not r:
            readers.append(r)
  return out


def _is_constant(eqn: Eqn) -> bool:
  return eqn.prim in GENERATORS or (
    eqn.prim is P.broadcast_in_dim_p and isinstance(eqn.inputs[0], Lit)
  )


class FusedProgram(Program):
  """A program whose equations are `region` equations; prints its regions as programs.
  `reasons`: why each region starts."""

  _fields = ("inputs", "eqns", "outputs", "reasons")

  def __init__(self, inputs, eqns, outputs, reasons: tuple[str, ...] = ()):
    self.__dict__.update(inputs=inputs, eqns=eqns, outputs=outputs, reasons=reasons)

  @property
  def regions(self) -> tuple[Program, ...]:
    return tuple(e.kw["program"] for e in self.eqns)

  @property
  def region_kinds(self) -> tuple[str, ...]:
    return tuple(e.kw["kind"] for e in self.eqns)


def _candidates(first: int | None, lo: int, n: int):
  """The regions an equation may join, in the order tried: `first` (its last producer's),
  then the latest back to `lo` (lazily: the first that takes it usually ends the search,
  and a list of every region per equation made fusion quadratic in program length)."""
  if first is not None and first < n:
    yield first
  for k in range(n - 1, lo - 1, -1):
    if k != first:
      yield k


def _place(program: Program) -> tuple[list[_Region], list[str]]:
  regions: list[_Region] = []
  where: dict[Var, int] = {}
  reasons: list[str] = []
  for eqn in program.eqns:
    producers = [where[a] for a in eqn.inputs if isinstance(a, Var) and a in where]
    lo = max(producers, default=0)
    why = []
    chosen = None
    for k in _candidates(lo if producers else None, lo, len(regions)):
      blockers = fusion_blockers(regions[k], eqn)
      blockers = blockers or unprofitable(regions[k], eqn)  # legal: does it pay?
      if not blockers:
        chosen = regions[k]
        break
      why.append(f"region {k}: {'; '.join(blockers)}")
    if chosen is None:
      chosen = _Region(len(regions), OPAQUE.get(eqn.prim, "loop"), domain(eqn), [], set(), set())
      regions.append(chosen)
      reasons.append(
        f"region {chosen.index} ({eqn.prim.name} over {list(chosen.domain)}): "
        + (" | ".join(why) if why else "the first region")
      )
      log.debug(reasons[-1])
    chosen.eqns.append(eqn)
    chosen.defined.update(eqn.outputs)
    if eqn.prim in REDUCTIONS:
      chosen.reduced.update(eqn.outputs)
    for v in eqn.outputs:
      where[v] = chosen.index
  return regions, reasons


def _recomputed(producer: Eqn | None, reader: Eqn, writable, defs: dict) -> bool:
  """Whether a region recomputes a value of another region where it reads it (instead of
  reading it from memory): a constant; a broadcast (of a value far smaller than it,
  which another region would otherwise write out whole: a batch norm's per-channel
  statistics over every element); or a copy of one value (`_copy_of_one`: its negation,
  its conversion, it times a constant), which reading costs what reading the value does,
  so the copy is not written out beside it (a gradient's `-dz` beside `dz`) — each
  where its operand is what its region writes as it is (`writable`). Products and
  gathers read their operands from memory; an index map reading it would recompute it
  anyway."""
  if producer is None or reader.prim in INDEX_MAPS or reader.prim in OPAQUE:
    return False
  if _is_constant(producer):
    return True
  if producer.prim is not P.broadcast_in_dim_p and not _copy_of_one(producer, defs):
    return False
  return all(map(writable, producer.inputs))


COPIES = {P.neg_p, P.convert_p, P.mul_p, P.add_p, P.sub_p, P.div_p}


def _copy_of_one(eqn: Eqn, defs: dict) -> bool:
  """An elementwise op of one value of its own shape and constants (`-x`, `2 * x`,
  `float(x)`): recomputing it where it is read reads just that value."""
  if eqn.prim not in COPIES or not eqn.outputs[0].aval.is_float:
    return False
  values = [
    a for a in eqn.inputs if isinstance(a, Var) and not (a in defs and _is_constant(defs[a]))
  ]
  return len(values) == 1 and values[0].aval.shape == eqn.outputs[0].aval.shape


def _body(r: _Region, defs: dict, home: dict) -> tuple[list[Eqn], list[Var]]:
  """A region's equations, with the values it recomputes (`_recomputed`), and the values
  it reads from other regions (its imports). `home`: the region defining each value."""
  body, imported, copied = [], [], set()

  def writable(a) -> bool:  # an output its region writes at its own index, or a constant
    producer = defs.get(a)
    return (
      not isinstance(a, Var)
      or producer is None
      or _is_constant(producer)
      or producer.prim in REDUCTIONS
      or producer.prim in OPAQUE
      or home[a].domain == a.aval.shape
    )

  def read(a, e):
    if not isinstance(a, Var) or a in r.defined or a in copied or a in imported:
      return
    producer = defs.get(a)
    if _recomputed(producer, e, writable, defs):
      for b in producer.inputs:  # (a broadcast's operand: read, or a constant recomputed)
        if isinstance(b, Var) and b not in r.defined and b not in copied and b not in imported:
          if b in defs and _is_constant(defs[b]):
            body.append(defs[b])
            copied.add(b)
          else:
            imported.append(b)
      body.append(producer)
      copied.add(a)
    else:
      imported.append(a)

  for e in r.eqns:
    for a in e.inputs:
      read(a, e)
    body.append(e)
  return body, imported


@without_gc
def fuse(program: Program) -> FusedProgram:
  """Partitions `program` into fused regions.

  Returns:
    a FusedProgram with the same inputs and outputs whose equations are regions in
    execution order; `.regions` are their sub-programs, `.reasons` why each region starts.
  """
  regions, reasons = _place(program)
  regions, reasons = _recompute_in_consumers(regions, reasons, program.outputs)
  defs = {v: e for e in program.eqns for v in e.outputs}
  home = {v: r for r in regions for v in r.defined}
  bodies = [_body(r, defs, home) for r in regions]
  used_later: set[Var] = {a for a in program.outputs if isinstance(a, Var)}
  for _, imported in bodies:
    used_later.update(imported)
  eqns = []
  for r, (body, imported) in zip(regions, bodies):
    outs = tuple(v for e in r.eqns for v in e.outputs if v in used_later)
    sub = dce(Program(tuple(imported), tuple(body), outs))
    eqns.append(Eqn(region_p, tuple(imported), make_params({"program": sub, "kind": r.kind}), outs))
  fused = dce(Program(program.inputs, tuple(eqns), program.outputs))
  return FusedProgram(fused.inputs, fused.eqns, fused.outputs, tuple(reasons))
