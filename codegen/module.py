"""FusedProgram -> one Python module of numba kernels plus a driver, and its run plan.

The module's source depends on the program's structure only; every size (loop bounds,
slice offsets, buffer shapes) is in the plan's `sizes` array, which the driver slices
for each kernel. Kernels are named by a hash of their text, so identical regions share
one kernel. Intermediate values live in flat arena buffers, assigned by liveness: a
buffer is reused once the value in it (and every view of it) is dead. A region that only
reshapes a value is a view of its buffer, not a kernel.

The driver is compiled as a numba `cfunc` of one argument, a table of data pointers:
`[sizes, err, inputs..., constants..., outputs..., arena views...]` (the views' places in
the arena are `Plan.views`); it returns 1, or 2 when a kernel found an index out of bounds
(then `err`, four int64, holds the site, the index and the axis size; `Plan.index_error`
makes the exception). Its arrays are `carray`s over those pointers, so the driver builds no array
objects and counts no references; `codegen.native` fills the table.
"""
from __future__ import annotations


import numpy as np

from primc import prims as P
from primc.core import Eqn, Lit, Program, Var
from primc.passes.fusion import OPAQUE, FusedProgram
from primc.passes.fusion import domain as fusion_domain
from primc.codegen import cache, kernels
from primc.codegen.plan import Buffer, Plan
from primc.codegen.writer import Writer

DRIVER_SIGNATURE = "int64(CPointer(voidptr))"
DRIVER_OPTIONS = {"error_model": "numpy", "fastmath": {"contract"}}
# Small kernels are inlined into the driver (one compile, one dispatch). Threaded kernels
# are separate `parallel=True` functions: numba mis-compiles a prange loop inlined into a
# parallel caller when its arrays arrive in a tuple (outputs are not written).
KERNEL_DECORATOR = '@njit(inline="always", error_model="numpy", fastmath={"contract"})'
# CACHE: set by codegen.loader before the module runs (False for a module in memory)
PARALLEL_KERNEL_DECORATOR = ('@njit(cache=CACHE, parallel=True, error_model="numpy", '
                             'fastmath={"contract"})')


def _site(eqn: Eqn) -> tuple:
  return (eqn.prim.name, eqn.kw["axis"], str(eqn.inputs[0].aval))


def _kernel(region: Program, kind: str) -> tuple[str, list, bool]:
  if kind == "dot":
    return kernels.emit_dot_kernel("KERNEL", region)
  if kind == "gather":
    return (*kernels.emit_gather_kernel("KERNEL", region), False)
  domain = max((fusion_domain(e) for e in region.eqns), key=len, default=())
  parallel = kernels.parallel_worthy(region, domain)
  return (*kernels.emit_loop_kernel("KERNEL", region, domain, parallel), parallel)


def _is_view(eqn: Eqn, out_vars) -> bool:
  """A region that reshapes one array value into a value that is not a program output."""
  region = eqn.kw["program"]
  return (len(region.eqns) == 1 and region.eqns[0].prim is P.reshape_p
          and region.eqns[0].inputs[0] is region.inputs[0] and isinstance(eqn.inputs[0], Var)
          and len(eqn.outputs) == 1 and eqn.outputs[0] not in out_vars)


def _lift_literal_arrays(region: Program) -> tuple[Program, list[np.ndarray]]:
  """Literals a kernel reads from memory become extra kernel inputs (arrays held by the
  plan): non-scalar ones, and every operand of a product, gather or scatter."""
  consts: dict = {}
  eqns = []
  for e in region.eqns:
    ins = []
    for a in e.inputs:
      if isinstance(a, Lit) and not kernels.is_splat(e) and (
          a.aval.shape != () or e.prim in OPAQUE):
        if a not in consts:
          consts[a] = Var(a.aval)
        ins.append(consts[a])
      else:
        ins.append(a)
    eqns.append(Eqn(e.prim, tuple(ins), e.params, e.outputs, e.source))
  program = Program(region.inputs + tuple(consts.values()), tuple(eqns), region.outputs)
  return program, [lit.value for lit in consts]


def build(fused: FusedProgram) -> Plan:
  """Generates the module source and the run plan of a fused program."""
  out_vars = list(dict.fromkeys(a for a in fused.outputs
                                if isinstance(a, Var) and a not in fused.inputs))
  arena = _Arena(fused, out_vars)
  kernels_, steps, words, consts, threaded, sites = _Kernels(), [], [], [], [], []
  for i, eqn in enumerate(fused.eqns):
    if arena.is_view(eqn):  # a reshape: a view of its operand's buffer, not a kernel
      steps.append(("view", eqn.outputs[0], arena.alias[eqn.outputs[0]]))
      arena.free_dead(eqn, i)
      continue
    region, lits = _lift_literal_arrays(eqn.kw["program"])
    name, ksizes, parallel = kernels_.add(region, eqn.kw["kind"])
    if parallel:
      kinds = lambda vs: tuple((str(v.aval.dtype), v.aval.ndim) for v in vs)
      threaded.append((name, kinds(eqn.inputs) + tuple((np.asarray(c).dtype.name, np.ndim(c))
                                                       for c in lits), kinds(eqn.outputs)))
    ins = list(eqn.inputs) + [("const", len(consts) + k) for k in range(len(lits))]
    consts += lits
    for v in eqn.outputs:
      if arena.needs_slot(v):
        steps.append(("slot", v, arena.assign(v)))
    if eqn.kw["kind"] == "gather":  # checks its indices: a failure names its site
      sites.append(_site(region.eqns[0]))
    steps.append(("call", name, ins, eqn.outputs, (len(words), len(words) + len(ksizes)),
                  len(sites) - 1 if eqn.kw["kind"] == "gather" else None))
    words += ksizes
    arena.free_dead(eqn, i)
  driver, views = _driver(fused, out_vars, consts, steps, arena, words)
  source = _module_source(kernels_.defs, driver)
  return Plan(source, np.asarray(words, np.int64), fused.in_avals,
              tuple(v.aval for v in out_vars), _program_outputs(fused, out_vars),
              arena.buffers(), tuple(consts), views, tuple(dict.fromkeys(threaded)),
              tuple(sites))


class _Kernels:
  """A module's kernels, in program order, named after what they compute (`k2_tanh_mul`);
  identical regions share one."""

  def __init__(self):
    self.defs: list[str] = []
    self.by_body: dict[str, tuple[str, list, bool]] = {}

  def add(self, region: Program, kind: str) -> tuple[str, list, bool]:
    body, ksizes, parallel = _kernel(region, kind)
    if body not in self.by_body:
      name = f"k{len(self.defs)}_{_what(region)}"
      decorator = PARALLEL_KERNEL_DECORATOR if parallel else KERNEL_DECORATOR
      self.defs.append(f"{decorator}\n" + body.replace("def KERNEL(", f"def {name}(", 1))
      self.by_body[body] = name, parallel
    name, parallel = self.by_body[body]
    return name, ksizes, parallel


def _what(region: Program) -> str:
  """A kernel's name: the distinct computing primitives of its region, in order (at most
  three; index maps and constants are how it reads, not what it computes)."""
  quiet = {"broadcast_in_dim", "reshape", "convert", "full", "iota", "stop_gradient"}
  names = list(dict.fromkeys(e.prim.name for e in region.eqns if e.prim.name not in quiet))
  short = {"reduce_sum": "sum", "reduce_max": "max", "dot_general": "dot",
           "scatter_add": "scatter"}
  return "_".join(short.get(n, n) for n in names[:3]) or "copy"


class _Arena:
  """Where a fused program's intermediates live: one arena array per dtype, laid out by
  liveness (a buffer is reused once the value in it, and every view of it, is dead)."""

  def __init__(self, fused: FusedProgram, out_vars):
    self.known = set(fused.inputs) | set(out_vars)
    self.alias = {e.outputs[0]: e.inputs[0] for e in fused.eqns if _is_view(e, out_vars)}
    self.last_use: dict[Var, int] = {}
    for i, eqn in enumerate(fused.eqns):
      for a in eqn.inputs:
        if isinstance(a, Var):
          self.last_use[self.root(a)] = i
    self.slots: list[Buffer] = []
    self.free: list[int] = []
    self.buffer_of: dict[Var, int] = {}

  def root(self, v: Var) -> Var:
    while v in self.alias:
      v = self.alias[v]
    return v

  def is_view(self, eqn: Eqn) -> bool:
    return eqn.outputs[0] in self.alias

  def needs_slot(self, v: Var) -> bool:
    return v not in self.known and v not in self.buffer_of

  def assign(self, v: Var) -> int:
    """A slot for intermediate `v`: a free one of its dtype (grown to fit), or a new one."""
    slot = next((k for k in self.free if self.slots[k].dtype == v.aval.dtype), None)
    if slot is None:
      self.slots.append(Buffer(v.aval.dtype, v.aval.size))
      slot = len(self.slots) - 1
    else:
      self.free.remove(slot)
      self.slots[slot] = Buffer(v.aval.dtype, max(self.slots[slot].size, v.aval.size))
    self.buffer_of[v] = slot
    return slot

  def free_dead(self, eqn: Eqn, i: int) -> None:
    for a in eqn.inputs:
      if isinstance(a, Var) and self.last_use.get(self.root(a)) == i and (
          self.root(a) in self.buffer_of):
        self.free.append(self.buffer_of.pop(self.root(a)))

  def dtypes(self) -> list[str]:
    return sorted({b.dtype for b in self.slots})

  def place(self, slot: int) -> tuple[int, int]:
    """(arena array, element offset) of a slot: slots are laid out per dtype in order."""
    dtype = self.slots[slot].dtype
    offset = sum(b.size for b in self.slots[:slot] if b.dtype == dtype)
    return self.dtypes().index(dtype), offset

  def buffers(self) -> tuple[Buffer, ...]:
    return tuple(Buffer(d, sum(b.size for b in self.slots if b.dtype == d))
                 for d in self.dtypes())


def _np_type(dtype) -> str:
  return "np.bool_" if np.dtype(dtype) == np.bool_ else f"np.{np.dtype(dtype).name}"


def _driver(fused, out_vars, consts, steps, arena, words) -> tuple[list[str], tuple]:
  """The driver's source over its pointer table ([sizes, err, inputs, constants, outputs,
  arena views]) and the views' places in the arena. Its own sizes follow the kernels'
  words in `words`."""
  pack = lambda xs: "(" + ", ".join(xs) + ("," if len(xs) == 1 else "") + ")"

  def shape_of(shape) -> str:  # a tuple of run-time sizes
    words.extend(int(d) for d in shape)
    return pack([f"sz[{len(words) - len(shape) + k}]" for k in range(len(shape))])

  names = {v: f"in{k}" for k, v in enumerate(fused.inputs)}
  names.update({v: f"out{k}" for k, v in enumerate(out_vars)})
  names.update({("const", k): f"c{k}" for k in range(len(consts))})
  table = ([(f"in{k}", v.aval.shape, v.aval.dtype) for k, v in enumerate(fused.inputs)]
           + [(f"c{k}", np.shape(c), np.asarray(c).dtype) for k, c in enumerate(consts)]
           + [(f"out{k}", v.aval.shape, v.aval.dtype) for k, v in enumerate(out_vars)])
  w = Writer()  # the body (its `sz` line goes first once the driver's sizes are counted)
  views = []
  with w.block():
    w("err = carray(p[1], (4,), np.int64)")
    for k, (name, shape, dtype) in enumerate(table):
      w(f"{name} = carray(p[{k + 2}], {shape_of(shape)}, {_np_type(dtype)})")
    for step in steps:
      if step[0] == "view":
        _, v, source = step
        names[v] = f"{names[source]}.reshape({shape_of(v.aval.shape)})"
      elif step[0] == "slot":
        _, v, slot = step
        views.append(arena.place(slot))
        names[v] = f"t{len(views) - 1}"
        w(f"{names[v]} = carray(p[{len(table) + len(views) + 1}], {shape_of(v.aval.shape)}, "
          f"{_np_type(v.aval.dtype)})")
      else:
        _, name, ins, outs, (start, end), site = step
        call = (f"{name}({pack([names[a] for a in ins])}, {pack([names[v] for v in outs])}, "
                f"sz[{start}:{end}]")
        if site is None:
          w(call + ")")
        else:
          with w.block(f"if {call}, err) != 0:"):
            w(f"err[0] = {site}", "return 2")
    w("return 1")
  signature = " ".join(f"{a.dtype}[{','.join('?' * a.ndim)}]" for a in fused.in_avals)
  head = ["def driver(p):", f"  # inputs: {signature}",
          f"  sz = carray(p[0], ({len(words)},), np.int64)"]
  return head + w.lines, tuple(views)


def _module_source(defs: list[str], driver: list[str]) -> str:
  header = ["# generated by primc: one numba kernel per fused region, and a driver",
            f"# for environment {cache.env_hash()}",
            "# the math library (exp_f32, ...) and the products (matmul, ...) are globals",
            "# given by codegen.loader", "import math", "import numpy as np",
            "from numba import carray, njit, prange", "", ""]
  driver = [f"# compiled as cfunc({DRIVER_SIGNATURE!r}) by codegen.loader"] + driver
  return "\n".join(header) + "\n\n".join(defs) + "\n\n" + "\n".join(driver) + "\n"


def _program_outputs(fused, out_vars) -> tuple:
  out = []
  for a in fused.outputs:
    if isinstance(a, Lit):
      out.append(("lit", a.value))
    elif a in out_vars:
      out.append(("out", out_vars.index(a)))
    else:
      out.append(("in", fused.inputs.index(a)))
  return tuple(out)
