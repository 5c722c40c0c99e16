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

import hashlib
import re

import numpy as np

from primc import prims as P
from primc.core import Eqn, Lit, Program, Var
from primc.passes.fusion import OPAQUE, FusedProgram
from primc.passes.fusion import domain as fusion_domain
from primc.codegen import cache, kernels
from primc.codegen.plan import Buffer, Plan

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
  sizes: list[int] = []
  defs: dict[str, str] = {}
  calls: list[str] = []
  const_arrays: list[np.ndarray] = []
  out_vars = []
  for a in fused.outputs:
    if isinstance(a, Var) and a not in fused.inputs and a not in out_vars:
      out_vars.append(a)
  # a region that only reshapes a value is a view of that value's buffer, not a kernel
  alias = {e.outputs[0]: e.inputs[0] for e in fused.eqns if _is_view(e, out_vars)}
  root = lambda v: root(alias[v]) if v in alias else v
  last_use: dict[Var, int] = {}
  for i, eqn in enumerate(fused.eqns):
    for a in eqn.inputs:
      if isinstance(a, Var):
        last_use[root(a)] = i
  names: dict[Var, str] = {v: f"in{k}" for k, v in enumerate(fused.inputs)}
  names.update({v: f"out{k}" for k, v in enumerate(out_vars)})
  slots: list[Buffer] = []
  free: list[int] = []
  buffer_of: dict[Var, int] = {}
  views: list[tuple] = []
  driver_sizes: list[int] = []
  threaded: list = []
  sites: list[tuple] = []

  def dsize(n: int) -> str:
    driver_sizes.append(int(n))
    return f"DS{len(driver_sizes) - 1}"

  def shape_of(shape) -> str:  # a driver tuple of run-time sizes
    return "(" + ", ".join(dsize(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"

  def free_dead(eqn, i):  # buffers whose value (and every view of it) is dead after eqn i
    for a in eqn.inputs:
      if isinstance(a, Var) and last_use.get(root(a)) == i and root(a) in buffer_of:
        free.append(buffer_of.pop(root(a)))

  for i, eqn in enumerate(fused.eqns):
    if eqn.outputs[0] in alias:
      v = eqn.outputs[0]
      names[v] = f"{names[alias[v]]}.reshape({shape_of(v.aval.shape)})"
      free_dead(eqn, i)
      continue
    region, lits = _lift_literal_arrays(eqn.kw["program"])
    body, ksizes, parallel = _kernel(region, eqn.kw["kind"])
    kname = "k_" + hashlib.sha256(body.encode()).hexdigest()[:16]
    decorator = PARALLEL_KERNEL_DECORATOR if parallel else KERNEL_DECORATOR
    defs[kname] = f"{decorator}\n" + body.replace("def KERNEL(", f"def {kname}(", 1)
    if parallel:
      kinds = lambda vs: tuple((str(v.aval.dtype), v.aval.ndim) for v in vs)
      threaded.append((kname, kinds(eqn.inputs) + tuple((np.asarray(c).dtype.name, np.ndim(c))
                                                        for c in lits), kinds(eqn.outputs)))
    args = []
    for a in eqn.inputs:
      args.append(names[a])
    for arr in lits:
      names_const = f"c{len(const_arrays)}"
      const_arrays.append(arr)
      args.append(names_const)
    for v in eqn.outputs:
      if v not in names:  # an intermediate: a slot of its dtype's arena, reused by liveness
        need = v.aval.size
        slot = next((k for k in free if slots[k].dtype == v.aval.dtype), None)
        if slot is None:
          slots.append(Buffer(v.aval.dtype, need))
          slot = len(slots) - 1
        else:
          free.remove(slot)
          slots[slot] = Buffer(v.aval.dtype, max(slots[slot].size, need))
        tname = f"t{len(views)}"
        views.append((tname, slot, shape_of(v.aval.shape)))
        calls.append(("VIEW", len(views) - 1))
        names[v] = tname
        buffer_of[v] = slot
      args.append(names[v])
    start = len(sizes)
    sizes.extend(ksizes)
    n_in = len(args) - len(eqn.outputs)
    pack = lambda xs: "(" + ", ".join(xs) + ("," if len(xs) == 1 else "") + ")"
    call = f"{kname}({pack(args[:n_in])}, {pack(args[n_in:])}, sz[{start}:{len(sizes)}]"
    if eqn.kw["kind"] == "gather":  # checks its indices: a failure names its site
      sites.append(_site(region.eqns[0]))
      calls += [f"  if {call}, err) != 0:", f"    err[0] = {len(sites) - 1}", "    return 2"]
    else:
      calls.append(f"  {call})")
    free_dead(eqn, i)
  # lay the slots out in one arena array per dtype
  dtypes = sorted({b.dtype for b in slots})
  offsets, totals = [], {d: 0 for d in dtypes}
  for b in slots:
    offsets.append(totals[b.dtype])
    totals[b.dtype] += b.size
  # the driver's arrays over its pointer table: sizes, inputs, constants, outputs, views
  def np_type(dtype) -> str:
    return "np.bool_" if np.dtype(dtype) == np.bool_ else f"np.{np.dtype(dtype).name}"

  table = ([(f"in{k}", v.aval.shape, v.aval.dtype) for k, v in enumerate(fused.inputs)]
           + [(f"c{k}", np.shape(c), np.asarray(c).dtype) for k, c in enumerate(const_arrays)]
           + [(f"out{k}", v.aval.shape, v.aval.dtype) for k, v in enumerate(out_vars)])
  lines = ["  err = carray(p[1], (4,), np.int64)"]
  lines += [f"  {name} = carray(p[{k + 2}], {shape_of(shape)}, {np_type(dtype)})"
            for k, (name, shape, dtype) in enumerate(table)]
  plan_views = []
  for c in calls:
    if isinstance(c, tuple):
      tname, slot, shape = views[c[1]]
      plan_views.append((dtypes.index(slots[slot].dtype), offsets[slot]))
      lines.append(f"  {tname} = carray(p[{len(table) + len(plan_views) + 1}], {shape}, "
                   f"{np_type(slots[slot].dtype)})")
    else:
      lines.append(c)
  base = len(sizes)
  sizes.extend(driver_sizes)
  calls = [re.sub(r"\bDS(\d+)\b", lambda m: f"sz[{base + int(m.group(1))}]", c) for c in lines]
  buffers = [Buffer(d, totals[d]) for d in dtypes]
  program_outputs = []
  for a in fused.outputs:
    if isinstance(a, Lit):
      program_outputs.append(("lit", a.value))
    elif a in out_vars:
      program_outputs.append(("out", out_vars.index(a)))
    else:
      program_outputs.append(("in", fused.inputs.index(a)))
  header = ["# generated by primc: one numba kernel per fused region, and a driver",
            f"# for environment {cache.env_hash()}",
            "# the math library (exp_f32, ...) and the products (matmul, ...) are globals",
            "# given by codegen.loader", "import math", "import numpy as np",
            "from numba import carray, njit, prange", "", ""]
  parts = [defs[k] for k in sorted(defs)]
  # input dtypes and ranks are part of the source (the driver's carrays spell them out)
  signature = " ".join(f"{v.aval.dtype}[{','.join('?' * v.aval.ndim)}]" for v in fused.inputs)
  driver = [f"# compiled as cfunc({DRIVER_SIGNATURE!r}) by codegen.loader",
            "def driver(p):", f"  # inputs: {signature}",
            f"  sz = carray(p[0], ({len(sizes)},), np.int64)"]
  driver += calls + ["  return 1"]
  source = "\n".join(header) + "\n\n".join(parts) + "\n\n" + "\n".join(driver) + "\n"
  return Plan(source, np.asarray(sizes, np.int64), fused.in_avals,
              tuple(v.aval for v in out_vars),
              tuple(program_outputs), tuple(buffers), tuple(const_arrays), tuple(plan_views),
              tuple(dict.fromkeys(threaded)), tuple(sites))


