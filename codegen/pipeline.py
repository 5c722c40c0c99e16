"""The one door into code generation: `executable(program)`, a traced program's
executable, by one list of named steps (`STEPS`), as `passes.pipeline` is for `optimize`.

  inline   custom rules are done with: their functions' programs inlined, once
  foreign  dtypes native code does not have (float16, int8, ...): the interpreter
  control  control flow (cond, while, scan): straight-line segments and bodies, each
           through this door (`segmented.Segmented`), loops run natively (`loops`)
  plan     the run plan from the plan cache, else built: optimize, fuse, kernel sources
           (`build_plan`) and written there
  tiered   kernels never compiled into the cache: the first calls interpreted while
           worker processes compile them (`tiered`)
  load     the compiled executable: the plan's kernels loaded, one native call a run
           (`executor`)

The program is optimized once, by the first step that needs it (a cached plan needs it
only to interpret). `jit`'s signature cache and hot path stay in `primc.compile`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
from typing import Any, Callable

from primc import passes
from primc.codegen import cache, executor, kernel_workers, loops, module, store, tiered
from primc.codegen.plan import Plan
from primc.codegen.segmented import Segmented, has_control_flow
from primc.core import NATIVE_DTYPES, PrimcError, Program
from primc.custom import inline_calls
from primc.settings import config

log = logging.getLogger("primc")


def jit_disabled() -> bool:
  """numba's NUMBA_DISABLE_JIT (its config once numba is imported, else the environment):
  then programs run on the reference interpreter."""
  numba_config = sys.modules.get("numba.core.config")
  if numba_config is not None:
    return bool(numba_config.DISABLE_JIT)
  return os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


@dataclasses.dataclass
class Build:
  """A program on its way through the door, and what the steps have made of it.
  `tiered`: None lets `tiered.interpreted_calls` decide (see `executable`)."""

  program: Program  # traced, custom rules inlined
  tiered: bool | None
  prefer: frozenset
  label: str
  key: str = ""
  plan: Plan | None = None
  _optimized: Program | None = None

  def optimized(self) -> Program:
    """The program optimized to the fixpoint, once."""
    if self._optimized is None:
      self._optimized = passes.optimize(self.program)
    return self._optimized

  @property
  def interpret_only(self) -> bool:
    return config.interpret or jit_disabled()


def _foreign(b: Build):
  foreign = b.program.dtypes() - set(NATIVE_DTYPES)
  if not foreign:
    return None
  _interpreted_dtypes(frozenset(foreign))
  program = b.optimized()
  return tiered.Tiered(module.interpreted(program), program, None)


@functools.cache
def _interpreted_dtypes(dtypes: frozenset) -> None:
  log.warning(
    "programs of %s run on the interpreter, in numpy's own loops (native code is "
    "float32/float64/int32/int64/bool)",
    ", ".join(sorted(dtypes)),
  )


def _control(b: Build):
  if not has_control_flow(b.program):
    return None
  piece = lambda p: executable(p, tiered=b.tiered, prefer=b.prefer, label=b.label)
  return Segmented(b.optimized(), piece, None if b.interpret_only else loops)


def _plan(b: Build):
  st = store.current()
  b.key = cache.program_key(b.program)
  b.plan = st.read_entry("plan", b.key, Plan.from_bytes)
  if b.plan is None:
    # compiling first for sure (a first plan: kernels may be new too): workers start
    # while the passes run. The default decides after the plan; prestarted workers made
    # no difference to its compiles (W3 at 65,536 points: 2.9-3.4 s either way) and
    # slowed its interpreted first steps (the MLP's 0.12 -> 0.15 s)
    if not (b.prefer or b.interpret_only or b.tiered is not False):
      kernel_workers.prestart()
    _, _, b.plan = _built(b.optimized(), b.prefer)
    st.write_entry("plan", b.key, b.plan.to_bytes())
  return None


def _tiered(b: Build):
  st = store.current()
  skip = b.interpret_only or b.tiered is False
  new = 0 if skip else sum(not st.sealed(k) for k in b.plan.kernels)
  if not (b.interpret_only or new):
    return None
  program = b.optimized()
  calls = (
    None
    if b.interpret_only or b.tiered
    else tiered.interpreted_calls(program, new, kernel_workers.workers())
  )
  if calls == 0:
    return None
  job = None if b.interpret_only else tiered.start(b.key, b.plan)
  if job is None and not b.interpret_only:
    return None
  return tiered.Tiered(b.plan, program, job, b.key, calls)


def _load(b: Build):
  return executor.Executable.load(b.plan, b.label)


@dataclasses.dataclass(frozen=True)
class Step:
  name: str
  run: Callable[[Build], Any]  # the executable, or None: the next step's turn
  description: str


STEPS = [
  Step("foreign", _foreign, "dtypes native code lacks: the interpreter"),
  Step("control", _control, "control flow: segments and bodies, each through this door"),
  Step("plan", _plan, "the run plan: cached, else optimize, fuse, kernel sources"),
  Step("tiered", _tiered, "new kernels: the first calls interpreted while workers compile"),
  Step("load", _load, "the compiled executable"),
]


def executable(
  program: Program,
  *,
  tiered: bool | None = None,
  prefer: frozenset = frozenset(),
  label: str = "a program",
) -> Any:
  """The executable of a traced program (see the module docstring for the steps).

  Args:
    program: the traced program.
    tiered: interpret the first calls while the kernels compile (True), compile first
      (False), or let the program decide how many calls (None: `config.tiered`'s value
      where it is set; see `tiered.interpreted_calls`).
    prefer: kernels the caller ran at other sizes of this program (`module.build`).
    label: what a long compile says it compiles.
  """
  b = Build(inline_calls(program), config.tiered if tiered is None else tiered, prefer, label)
  for step in STEPS:
    out = step.run(b)
    if out is not None:
      return out
  raise AssertionError("the last step makes an executable")


def build_plan(traced: Program, prefer: frozenset = frozenset()) -> tuple:
  """(optimized, fused, plan) of a straight-line program: the `plan` step's work, shown
  by `primc.cli` and the benchmarks."""
  optimized = passes.optimize(inline_calls(traced))
  if has_control_flow(optimized):
    raise PrimcError(
      "this program has control flow (cond, while, scan): it is compiled as "
      "straight-line segments and bodies, one plan each, not one plan; the "
      "optimized and traced stages show it whole"
    )
  return _built(optimized, prefer)


def _built(optimized: Program, prefer: frozenset) -> tuple:
  fused = passes.fuse(passes.lower(optimized))
  plan = module.build(fused, prefer)
  show = passes.print_after_names()
  for stage, value in (("fuse", fused), ("codegen", plan.source)):
    if stage in show:
      print(f"--- after {stage}\n{value}", file=sys.stderr)
  return optimized, fused, plan
