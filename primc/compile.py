"""primc's entry point into the later stages (passes, codegen): the only module of
`primc` that imports them, lazily, so the stages stay free of import cycles.

`config.optimize_transforms` (default True) runs the optimization pipeline on every
program a transform produces or consumes, so nested derivatives differentiate the
simplified program instead of the raw one (this keeps d^n/dx^n programs polynomial in n).
Set it to False (or use `raw_transforms()`) to see the raw transformed programs.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import sys

import numpy as np

from primc.core import PrimcIndexError, Program


SIGNATURES_KEPT = 64  # compiled signatures per jitted function (least recently used go)


@dataclasses.dataclass
class Config:
  optimize_transforms: bool = True
  # run new programs on the interpreter while a background process compiles them
  # (codegen/tiered.py); `jit(tiered=...)` overrides it per function
  tiered: bool = os.environ.get("PRIMC_TIERED") == "1"


config = Config()


@contextlib.contextmanager
def raw_transforms():
  """Within this block, transforms return unoptimized programs."""
  old = config.optimize_transforms
  config.optimize_transforms = False
  try:
    yield
  finally:
    config.optimize_transforms = old


def optimize(program: Program) -> Program:
  """The pass pipeline (simplify, combine, CSE, DCE), or the program itself when
  transforms are configured raw."""
  if not config.optimize_transforms:
    return program
  from passes import optimize as run_passes
  return run_passes(program)


def load_backend() -> None:
  """Imports the code generator and executor and readies numba's CPU target, so that the
  first compiled call of a process only loads its cached machine code. `import primc`
  calls it, unless PRIMC_LAZY_BACKEND=1 (then the first compiled call pays it).

  Then it freezes the garbage collector's view of the objects that exist (`gc.freeze`,
  unless PRIMC_GC_FREEZE=0): the imports leave ~10^5 long-lived objects (numba, llvmlite,
  numpy, scipy) that the next full collection would walk, ~40 ms here, and it came inside
  the first compiled call (W6 with a warm cache: 82 ms -> 35 ms). Frozen objects are
  never collected; those made before the freeze and later dropped in a reference cycle
  stay allocated."""
  import codegen.executor  # noqa: F401  (imports numba and the math library)
  from numba.core.registry import cpu_target
  cpu_target.typing_context.refresh()
  cpu_target.target_context.refresh()
  if os.environ.get("PRIMC_GC_FREEZE") != "0":
    import gc
    gc.freeze()


# ---------------------------------------------------------------------------------------
# Compile and run

@dataclasses.dataclass(frozen=True)
class Lowered:
  """Every stage of one compiled signature, for inspection."""
  traced: Program
  optimized: Program
  fused: Program
  source: str

  def stage(self, name: str) -> str:
    return str({"traced": self.traced, "optimized": self.optimized, "fused": self.fused,
                "source": self.source}[name])


class Jitted:
  """A function compiled per input signature (pytree structure, shapes, dtypes).

  Calling it with traced arguments (inside `grad`, `vmap`, `make_program`, ...) simply
  traces through the function, so `jit` composes with every transform in both orders.
  """

  def __init__(self, fun, static_argnums=(), warmup=(), tiered=None):
    self.fun = fun
    self.static_argnums = tuple(static_argnums)
    self.warmup = tuple(warmup)
    self.tiered = tiered
    # signature -> (executable, out_tree), least recently compiled first; at most
    # SIGNATURES_KEPT (a loop over ever-new shapes must not grow without bound)
    self._compiled: collections.OrderedDict = collections.OrderedDict()
    self._fast: dict = {}  # (shape, strides, dtype) per flat ndarray argument ->
                           # (executable, output builder)
    self._hot = None       # the runner of the last fast call (see Executable.runner)
    import functools
    functools.update_wrapper(self, fun)

  def _split(self, args):
    from primc.trace import as_array
    from primc.tree import tree_flatten
    static = tuple((i, args[i]) for i in self.static_argnums)
    dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
    leaves, tree = tree_flatten(dyn)
    leaves = [as_array(x) for x in leaves]
    return static, leaves, tree

  def _key(self, static, leaves, tree):
    return (static, tree, tuple((x.shape, x.dtype.str) for x in leaves))

  def lower(self, *args) -> Lowered:
    """Traces, optimizes, fuses and generates code for these arguments (no compile)."""
    static, leaves, tree = self._split(args)
    traced, _ = self._trace(static, leaves, tree)
    optimized, fused, plan = _build_plan(traced)
    return Lowered(traced, optimized, fused, plan.source)

  def _trace(self, static, leaves, tree):
    from primc.trace import aval_of, trace_flat
    from primc.tree import tree_unflatten
    static_map = dict(static)

    def flat_fn(*xs):
      full, dyn = [], iter(tree_unflatten(tree, list(xs)))
      for i in range(len(static_map) + len(tree.children)):
        full.append(static_map[i] if i in static_map else next(dyn))
      return self.fun(*full)

    traced, captured, out_tree = trace_flat(flat_fn, [aval_of(x) for x in leaves])
    assert not captured
    return traced, out_tree

  def __call__(self, *args, out=None):
    # Hot path: the arguments of the last fast call again (its native entry checks their
    # types, dtypes, shapes and layout, and returns None for others). Then the fast path: flat
    # ndarray arguments whose signature (with C-contiguous strides) was compiled before.
    # Anything else takes the general path (`_call`).
    try:
      if out is None:
        hot = self._hot
        if hot is not None:
          result = hot(*args)
          if result is not None:
            return result
        try:
          entry = self._fast.get(tuple([(a.shape, a.strides, a.dtype) for a in args]))
        except AttributeError:
          entry = None
        if entry is not None and all([type(a) is np.ndarray for a in args]):
          if entry[2] is None:
            entry[2] = entry[0].runner(entry[1])
          result = None if entry[2] is None else entry[2](*args)
          if result is not None:
            self._hot = entry[2]
            return result
      return self._call(args, out)
    except PrimcIndexError as e:  # found by the compiled code: name the function too
      if getattr(e, "located", False):
        raise
      raise _located_in(e, self.fun) from None

  def _call(self, args, out):
    from primc.trace import Tracer, tracing
    from primc.tree import tree_flatten, tree_unflatten
    if tracing() or any(isinstance(x, Tracer) for x in tree_flatten(list(args))[0]):
      return self.fun(*args)  # inside a trace, jit traces through (like any function)
    static, leaves, tree = self._split(args)
    key = self._key(static, leaves, tree)
    entry = self._compiled.get(key)
    if entry is None:
      entry = self._compile(static, leaves, tree)
      self._compiled[key] = entry
      if len(self._compiled) > SIGNATURES_KEPT:
        self._forget(self._compiled.popitem(last=False)[1])
      if not static and all(type(a) is np.ndarray for a in args) and len(leaves) == len(args):
        c_strides = lambda a: np.empty(a.shape, a.dtype).strides  # as numpy lays them out
        self._fast[tuple((a.shape, c_strides(a), a.dtype) for a in args)] = \
            [entry[0], entry[1], None]  # the runner, once compiled
    else:
      self._compiled.move_to_end(key)
    executable, out_tree = entry  # it converts arguments its native entry does not take
    outs = None if out is None else _out_leaves(out, executable)
    return tree_unflatten(out_tree, executable(leaves, outs))

  def _forget(self, entry) -> None:
    """Drops an evicted signature's fast-path entries (its executable goes with them)."""
    for k, v in list(self._fast.items()):
      if v[0] is entry[0]:
        if v[2] is not None and v[2] is self._hot:
          self._hot = None
        del self._fast[k]

  def _compile(self, static, leaves, tree):
    traced, out_tree = self._trace(static, leaves, tree)
    return load_executable(traced, self.tiered), out_tree

  def wait_compiled(self, timeout: float | None = None) -> bool:
    """Waits (at most `timeout` seconds each) for the background compiles of this
    function's signatures (see `jit(tiered=True)`); True when every one runs native code."""
    return all(exe.wait(timeout) for exe, _ in self._compiled.values()
               if hasattr(exe, "wait"))


def _build_plan(traced):
  from passes import fuse
  from passes import optimize as run_passes
  from passes.pipeline import print_after_names
  from codegen import module
  optimized = run_passes(traced)
  fused = fuse(optimized)
  plan = module.build(fused)
  show = print_after_names()
  for stage, value in (("fuse", fused), ("codegen", plan.source)):
    if stage in show:
      print(f"--- after {stage}\n{value}", file=sys.stderr)
  return optimized, fused, plan


def load_executable(traced: Program, tiered: bool | None = None):
  """The executable of a traced program, its run plan from the plan cache if this program
  (and this environment) was compiled before, else built by the passes, fusion and
  codegen: its compiled module, or (tiered, while the module was never compiled into the
  cache) the interpreter until a background process has compiled it. `tiered` None
  means `config.tiered`."""
  from codegen import cache, store
  from codegen.executor import Executable
  from codegen.module import Plan
  st = store.current()
  key = cache.program_key(traced)
  plan, optimized = st.read_entry("plan", key, Plan.from_bytes), None
  if plan is None:
    optimized, _, plan = _build_plan(traced)
    st.write_entry("plan", key, plan.to_bytes())
  if (config.tiered if tiered is None else tiered) and not st.sealed(plan.source):
    from codegen import tiered as tiers
    from passes import optimize as run_passes
    job = tiers.start(key, plan)
    if job is not None:
      program = run_passes(traced) if optimized is None else optimized
      return tiers.Tiered(plan, program, job)
  return Executable.load(plan)


def _located_in(error, fun):
  """A copy of a run-time error naming the jitted function and where it is defined."""
  code = getattr(fun, "__code__", None)
  where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
  out = type(error)(f"{error}, in {getattr(fun, '__qualname__', fun)!s}{where}")
  out.located = True
  return out


def _out_leaves(out, executable):
  from primc.tree import tree_flatten
  leaves = tree_flatten(out)[0]
  kinds = executable.plan.program_outputs
  if len(leaves) != len(kinds) or any(kind != "out" for kind, _ in kinds) or len(
      {k for _, k in kinds}) != len(kinds):
    from primc.core import PrimcError
    raise PrimcError("out= needs one array per output, each computed by the program")
  ordered = [None] * len(leaves)
  for leaf, (_, k) in zip(leaves, kinds):
    ordered[k] = leaf
  return ordered


def example_args(signature) -> list:
  """Arrays for a warm-up signature: a sequence of specs like "f32[2,2]" (or arrays)."""
  from primc.cli import parse_arg_spec
  return [parse_arg_spec(a) if isinstance(a, str) else np.asarray(a) for a in signature]


def jit(fun=None, *, static_argnums=(), warmup=(), tiered=None):
  """Compiles `fun` to native code per input signature.

  Each new signature (pytree structure, shapes, dtypes, static arguments) traces `fun`,
  optimizes and fuses the program and generates one numba kernel per region plus a
  driver; kernels read sizes at run time, so a new batch size only re-traces.

  Args:
    fun: the function (arrays, or pytrees of arrays, in and out).
    static_argnums: positions of arguments passed as Python values (hashable).
    warmup: signatures to compile ahead of time with `primc warmup`, each a sequence of
      argument specs such as `("f32[2,2]", "f32[2]")` (flat array arguments).
    tiered: a signature whose native code is not in the cache yet runs on the
      interpreter while a background process compiles it, instead of waiting for the
      compile (`codegen/tiered.py`); `wait_compiled()` waits for it. None: the
      PRIMC_TIERED environment variable (`primc.config.tiered`), off by default.
  Returns:
    a `Jitted` callable; `.lower(*args)` shows each stage. Calls accept `out=` (a pytree
    like the outputs) to write results into existing arrays.
  """
  if fun is None:
    return lambda f: Jitted(f, static_argnums, warmup, tiered)
  return Jitted(fun, static_argnums, warmup, tiered)
