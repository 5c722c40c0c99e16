"""`jit`, and the bridge from primc's front ends into the later stages: the passes and
code generation. It is the one module of `primc` that reaches `primc.codegen`, and it
does so on first use (`backend`), because codegen imports numba (~0.3 s), which
tracing, the transforms and the interpreter never need.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import inspect
import itertools
import logging
import marshal
import os
import pickle
import re
import types
from typing import Any, Callable, Sequence

import numpy as np

from primc import breaks, kept, stored

# (a worker's `main` decodes programs naming control flow's primitives; `primc`'s
# `__init__`, which loads them on demand, never runs there)
from primc import lax  # noqa: F401
from primc.core import (
  NO_GC,
  ConcretizationError,
  PrimcError,
  PrimcIndexError,
  Program,
  freeze_collector,
  without_gc,
)
from primc.custom import inline_calls
from primc.trace import (
  SCALAR_ARRAYS,
  Tracer,
  aval_of,
  as_array,
  eval_program,
  trace_flat,
  tracing,
  weak_leaves,
)
from primc.settings import config
from primc.tree import tree_flatten, tree_unflatten

log = logging.getLogger("primc")

SIGNATURES_KEPT = 64  # compiled signatures per jitted function (least recently used go)
PROGRAMS_KEPT = 256  # executables by program key (the tapes' backward programs)


@functools.cache
def backend() -> types.ModuleType:
  """`primc.codegen`, imported on the first compile; then what that import left (numba,
  llvmlite) is frozen (`freeze_collector`). numba's CPU target is not readied here
  (~0.5 s): kernels LLVM compiles (codegen.translate) never need it; numba readies it when
  it first compiles or loads a kernel or a library function."""
  from primc.codegen import backend as codegen  # numba: at the first compile, not before

  freeze_collector()
  return codegen


def cache_stats() -> dict:
  """This process's cache counters: plan hits and misses (with reasons), numba compiles and
  cache loads, module files written/loaded, bad entries rebuilt, write failures,
  evictions, first-call load times (seconds); the transforms' kept programs (`kept_*`,
  `primc.kept`). Waits for the compile workers still exiting (their counts come with
  them)."""
  codegen = backend()
  codegen.kernel_workers.reap()
  return {**codegen.cache.stats(), **kept.stats()}


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
    return str(
      {
        "traced": self.traced,
        "optimized": self.optimized,
        "fused": self.fused,
        "source": self.source,
      }[name]
    )


# argument types the fast path takes: arrays, and scalars (as `as_array` converts them)
_SCALAR_TYPES = frozenset({np.ndarray, *SCALAR_ARRAYS})


class Jitted:
  """A function compiled per input signature (pytree structure, shapes, dtypes).

  Calling it with traced arguments (inside `grad`, `vmap`, `make_program`, ...) simply
  traces through the function, so `jit` composes with every transform in both orders.
  """

  def __init__(self, fun, static_argnums=(), warmup=(), tiered=None, fullgraph=False):
    self.fun = fun
    self.fullgraph = fullgraph  # a graph break is an error (`primc.breaks`)
    self.static_argnums = tuple(static_argnums)  # `jit` normalizes them
    self.warmup = tuple(warmup)
    self.tiered = tiered
    # signature -> (executable, out_tree), least recently compiled first; at most
    # SIGNATURES_KEPT (a loop over ever-new shapes must not grow without bound)
    self._compiled: collections.OrderedDict = collections.OrderedDict()
    self._fast: dict = {}  # (shape, strides, dtype) per flat ndarray argument ->
    # (executable, output builder)
    self._hot = None  # the runner of the last fast call (see Executable.runner)
    self._hot_weak = None  # which of its arguments were Python scalars (None: none)
    self._kernels: set[str] = set()  # kernel sources its programs ran (their variants)
    self._programs: dict = {}  # signature -> (traced program, out tree): what pickles
    # (the signatures of `_compiled`, and a received one's)
    functools.update_wrapper(self, fun)

  def __reduce__(self):
    """Pickles as the traced programs of the signatures it compiled (custom rules
    inlined), not the Python function: a process that receives it runs those signatures
    without the function's code, loading their kernels from the cache where another
    process compiled them. The function comes along only if pickle can name it (a module
    function), for signatures not compiled yet."""
    try:
      fun = pickle.dumps(self.fun)
    except Exception:
      fun = None
    return _received, (
      fun,
      getattr(self.fun, "__qualname__", "a function"),
      self.static_argnums,
      dict(self._programs),
    )

  def _split(self, args):
    static = tuple((i, args[i]) for i in self.static_argnums)
    dyn = [a for i, a in enumerate(args) if i not in self.static_argnums]
    leaves, tree = tree_flatten(dyn)
    weak = weak_leaves(leaves)  # Python scalars: traced as weak values
    return static, [as_array(x) for x in leaves], (tree, weak)

  def _key(self, static, leaves, tree):
    return (static, tree, tuple((x.shape, x.dtype.str) for x in leaves))

  def lower(self, *args) -> Lowered:
    """Traces, optimizes, fuses and generates code for these arguments (no compile)."""
    static, leaves, tree = self._split(args)
    try:
      traced, _ = self._trace(static, leaves, tree)
    except ConcretizationError as e:  # this call's path, its guards last
      traced = self._trace_path(static, leaves, tree, e)[0]
    optimized, fused, plan = build_plan(traced)
    return Lowered(traced, optimized, fused, plan.source)

  def _trace(self, static, leaves, tree_weak, guards=None):
    static_map = dict(static)
    tree, weak = tree_weak

    def flat_fn(*xs):
      full, dyn = [], iter(tree_unflatten(tree, list(xs)))
      for i in range(len(static_map) + len(tree.children)):
        full.append(static_map[i] if i in static_map else next(dyn))
      return self.fun(*full)

    traced, captured, out_tree = trace_flat(
      flat_fn, [aval_of(x) for x in leaves], weak, None if guards is None else leaves, guards
    )
    assert not captured
    return traced, out_tree

  def _trace_path(self, static, leaves, tree, error):
    """(program, guard values, out tree) of the path these inputs take (`primc.breaks`)."""
    if self.fullgraph:
      raise ConcretizationError(
        f"{error} (jit(fullgraph=True): a graph break is an error)"
      ) from None
    guards = []
    traced, out_tree = self._trace(static, leaves, tree, guards)
    breaks.log_breaks(self._label(), [source for _, source in guards])
    return traced, [value for value, _ in guards], out_tree

  def _label(self) -> str:
    return getattr(self.fun, "__qualname__", None) or "a function"

  def __call__(self, *args, out=None, **kwargs):
    if kwargs:  # bound to the function's parameters: the signature is positional
      args = self._bind(args, kwargs)
    return self._call_positional(args, out)

  def _bind(self, args, kwargs):
    try:
      bound = inspect.signature(self.fun).bind(*args, **kwargs)
    except TypeError as e:
      raise PrimcError(f"{getattr(self.fun, '__qualname__', 'a jitted function')}: {e}") from None
    bound.apply_defaults()
    if bound.kwargs:
      raise PrimcError(
        "jit: keyword-only or **kwargs parameters are not supported; pass "
        f"{sorted(bound.kwargs)} positionally"
      )
    return bound.args

  def _call_positional(self, args, out):
    # Hot path: the arguments of the last fast call again (its native entry checks their
    # types, dtypes, shapes and layout, and returns None for others). Then the fast path: flat
    # ndarray arguments whose signature (with C-contiguous strides) was compiled before;
    # scalars (Python or numpy) become the 0-d arrays the general path would make of them.
    # Anything else takes the general path (`_call`), as do functions with static
    # arguments (Python values: a static scalar must stay a scalar).
    # Python scalars are weak (`weak_leaves`): the runners they ran are kept apart, keyed
    # by which arguments were Python scalars (`self._hot_weak`, the fast keys' last entry).
    try:
      if out is None and not self.static_argnums:
        hot = self._hot
        weak = None
        if hot is not None and self._hot_weak is None:
          result = hot(*args)
          if result is not None:
            return result
        if not all([type(a) is np.ndarray for a in args]):
          if not all([type(a) in _SCALAR_TYPES for a in args]):
            return self._call(args, out)
          weak = weak_leaves(args)
          if not any(weak):
            weak = None
          arrays = tuple([a if type(a) is np.ndarray else SCALAR_ARRAYS[type(a)](a) for a in args])
          if hot is not None and self._hot_weak == weak:
            result = hot(*arrays)
            if result is not None:
              return result
        else:
          arrays = args
        entry = self._fast.get((*[(a.shape, a.strides, a.dtype) for a in arrays], weak))
        if entry is not None:
          if entry[2] is None:
            entry[2] = entry[0].runner(entry[1])
          result = None if entry[2] is None else entry[2](*arrays)
          if result is not None:
            self._hot, self._hot_weak = entry[2], weak
            return result
      return self._call(args, out)
    except PrimcIndexError as e:  # found by the compiled code: name the function too
      if getattr(e, "located", False):
        raise
      raise _located_in(e, self.fun) from None

  def _call(self, args, out):
    if tracing() or any(isinstance(x, Tracer) for x in tree_flatten(list(args))[0]):
      if getattr(self.fun, "_primc_received", False):  # no code here: its program instead
        static, leaves, tree = self._split(args)
        program, out_tree = self._programs.get(self._key(static, leaves, tree), (None, None))
        if program is not None:
          return tree_unflatten(out_tree, eval_program(program, *leaves))
      return self.fun(*args)  # inside a trace, jit traces through (like any function)
    static, leaves, tree = self._split(args)
    key = self._key(static, leaves, tree)
    entry = self._compiled.get(key)
    if entry is None:
      entry = self._compile(key, static, leaves, tree)
      self._compiled[key] = entry
      if len(self._compiled) > SIGNATURES_KEPT:
        old_key, old_entry = self._compiled.popitem(last=False)
        if not getattr(self.fun, "_primc_received", False):  # traced again if called again
          self._programs.pop(old_key, None)
        self._forget(old_entry)
    else:
      self._compiled.move_to_end(key)
    if isinstance(entry[0], breaks.Paths):
      flat, out_tree = entry[0].run(leaves)
      if out is not None:
        for o, r in zip(tree_flatten(out)[0], flat, strict=True):
          np.copyto(o, r)
      return tree_unflatten(out_tree, flat)
    if not static and len(leaves) == len(args) and all(type(a) in _SCALAR_TYPES for a in args):
      c_strides = lambda a: np.empty(a.shape, a.dtype).strides  # as numpy lays them out
      weak = tree[1] if any(tree[1]) else None
      fast_key = (*[(x.shape, c_strides(x), x.dtype) for x in leaves], weak)
      if fast_key not in self._fast:  # however the signature was first called
        self._fast[fast_key] = [entry[0], entry[1], None]  # the runner, once compiled
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

  def _compile(self, key, static, leaves, tree):
    with NO_GC:
      if key not in self._programs:
        try:
          traced, out_tree = self._trace(static, leaves, tree)
        except ConcretizationError as e:  # graph breaks: a program per path
          error = e
          paths = breaks.Paths(lambda xs: self._compile_path(static, xs, tree, error))
          paths.add(self._compile_path(static, leaves, tree, error))
          return paths, None
        self._programs[key] = (inline_calls(traced), out_tree)
      traced, out_tree = self._programs[key]
      exe = self._load(traced)
    return exe, out_tree

  def _load(self, traced):
    exe = load_executable(traced, self.tiered, frozenset(self._kernels), self._label())
    self._kernels.update(exe.plan.kernels)  # later sizes keep these variants
    return exe

  def _compile_path(self, static, leaves, tree, error):
    with NO_GC:
      traced, guards, out_tree = self._trace_path(static, leaves, tree, error)
      return self._load(traced), guards, out_tree

  def precompile(self, *args) -> "Jitted":
    """Compiles for the signature of these example arguments without running (so a copy
    sent to another process has its program: see `__reduce__`)."""
    static, leaves, tree = self._split(args)
    key = self._key(static, leaves, tree)
    if key not in self._compiled:
      self._compiled[key] = self._compile(key, static, leaves, tree)
    executable = self._compiled[key][0]
    if hasattr(executable, "compile"):  # its kernels too, not at the first call
      executable.compile()
    return self

  def wait_compiled(self, timeout: float | None = None) -> bool:
    """Waits (at most `timeout` seconds each) for the background compiles of this
    function's signatures (see `jit(tiered=True)`); True when every one runs native code."""
    return all(exe.wait(timeout) for exe, _ in self._compiled.values() if hasattr(exe, "wait"))


def _received(fun_bytes, name, static_argnums, programs):
  """A `Jitted` unpickled: its compiled signatures' programs, and the function if it came."""
  fun = None
  if fun_bytes is not None:
    try:
      fun = pickle.loads(fun_bytes)
    except Exception:  # its module is not importable here: the programs still serve
      fun = None
  if fun is None:

    def fun(*args):
      raise PrimcError(
        f"{name} was received compiled for {len(programs)} signature(s), "
        f"without its Python code; it cannot trace a new signature here"
      )

    fun.__qualname__ = fun.__name__ = name
    fun._primc_received = True
  jitted = Jitted(fun, static_argnums)
  jitted._programs.update(programs)
  return jitted


@without_gc
def build_plan(traced: Program, prefer: frozenset = frozenset()) -> tuple:
  """(optimized, fused, plan) of a straight-line program (`codegen.pipeline.build_plan`)."""
  return backend().pipeline.build_plan(traced, prefer)


def load_executable(
  traced: Program,
  tiered: bool | None = None,
  prefer: frozenset = frozenset(),
  label: str = "a program",
) -> Any:
  """The executable of a traced program, through code generation's one door
  (`codegen.pipeline.executable`: the plan cache, tiering, control flow's segments and the
  compile, as one list of steps). `tiered`: interpret the first calls while the kernels
  compile (None: as the program and `config.tiered` decide); `prefer`: kernels the caller
  ran at other sizes of this program; `label`: what a long compile says it compiles."""
  return backend().pipeline.executable(traced, tiered=tiered, prefer=prefer, label=label)


_executables: "collections.OrderedDict[str, object]" = collections.OrderedDict()
_eager_kernels: set[str] = set()  # kernels the eager tape's programs ran (their variants)


def executable(program: Program) -> Any:
  """The executable of a traced program, kept by its key (at most PROGRAMS_KEPT, least
  recently used first): the eager tape runs its backward programs through it."""
  program = inline_calls(program)
  key = backend().cache.program_key(program)
  exe = _executables.get(key)
  if exe is None:
    exe = _executables[key] = load_executable(program, prefer=_eager_kernels)
    _eager_kernels.update(exe.plan.kernels)
    if len(_executables) > PROGRAMS_KEPT:
      _executables.popitem(last=False)
  else:
    _executables.move_to_end(key)
  return exe


def _located_in(error, fun):
  """A copy of a run-time error naming the jitted function and where it is defined."""
  code = getattr(fun, "__code__", None)
  where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
  out = type(error)(f"{error}, in {getattr(fun, '__qualname__', fun)!s}{where}")
  out.located = True
  return out


def _out_leaves(out, executable):
  leaves = tree_flatten(out)[0]
  kinds = executable.plan.program_outputs
  if (
    len(leaves) != len(kinds)
    or any(kind != "out" for kind, _ in kinds)
    or len({k for _, k in kinds}) != len(kinds)
  ):
    raise PrimcError("out= needs one array per output, each computed by the program")
  ordered = [None] * len(leaves)
  for leaf, (_, k) in zip(leaves, kinds):
    ordered[k] = leaf
  return ordered


_DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "bool": "bool"}


def parse_arg_spec(spec: str) -> np.ndarray:
  """An example array for a spec like "f32[2,2]" (zeros of that dtype and shape)."""
  m = re.fullmatch(r"(\w+)\[([\d,\s]*)\]", spec.strip())
  if not m or m.group(1) not in _DTYPES:
    raise ValueError(
      f"bad argument spec {spec!r}: expected like f32[2,2] (dtypes: {', '.join(_DTYPES)})"
    )
  shape = tuple(int(d) for d in m.group(2).split(",") if d.strip())
  return np.zeros(shape, _DTYPES[m.group(1)])


def example_args(signature: Sequence) -> list:
  """Arrays for a warm-up signature: a sequence of specs like "f32[2,2]" (or arrays)."""
  return [parse_arg_spec(a) if isinstance(a, str) else np.asarray(a) for a in signature]


HOT_LABEL = "a transform called often"
WORKER_EQUATIONS = 5000  # a hot kept program this long is compiled whole in a worker


def _compile_kept(program: Program):
  """A hot kept program (`primc.kept`), compiled: the interpreter serves its calls until
  a background process has compiled it, so the loop never waits. A long one is compiled
  whole there (`_Background`: its passes, fusion and plan too, ~70 us an equation, 4.5 s
  of a fluid simulation's gradient on the calling thread); a shorter one here, its kernels
  there (tiered). Where no core stands idle for the long one's worker (`_idle_core`), it
  is compiled here, at once: the worker would share the caller's core and slow every
  interpreted call for the seconds it runs (fluidsim's gradient beside a busy process:
  30 calls 47-52 s with a worker, 36.5 s without)."""
  if len(program.eqns) >= WORKER_EQUATIONS:
    if not _idle_core():
      log.info("compiling %s in this process: no core stands idle", HOT_LABEL)
      return load_executable(program, tiered=False, label=HOT_LABEL)
    job = _Background.start(program)
    if job is not None:
      return job
  return load_executable(program, tiered=True, label=HOT_LABEL)


IDLE_CORE = 0.5  # idle CPUs (averaged over 0.1 s), besides the caller's, for a worker


def _idle_core() -> bool:
  """Whether a background compile would have a core of its own: IDLE_CORE of this
  process's CPUs idle over the next 0.1 s (a compile takes seconds) besides the one the
  calling thread leaves idle while it waits (and takes back to run the calls), or
  unknown."""
  idle = backend().threads.idle_cpus()
  return idle is None or idle - 1 >= IDLE_CORE


_started = itertools.count()  # background workers this process started


class _Background:
  """A program compiled whole in a worker process (`main`: written to the cache
  directory, the worker reads it, compiles it into the cache and exits), then loaded from
  the cache here: `ready()` polls, `native` is the executable once loaded (what
  `kept._run` asks and runs). A worker that failed is logged and the program compiled
  here, where its errors surface as usual."""

  def __init__(self, program: Program, job, name: str, path: str):
    self.program, self.job, self.name, self.path = program, job, name, path
    self.native = None

  @classmethod
  def start(cls, program: Program) -> "_Background | None":
    """The worker compiling `program`, or None where none can (no cache directory to
    share, code generation disabled, a program that is not plain data, a file that cannot
    be written or a process that cannot start: logged)."""
    codegen = backend()
    directory = codegen.store.current().write_dir
    if directory is None or config.interpret or codegen.jit_disabled():
      return None
    try:
      data = marshal.dumps(stored.encode_program(inline_calls(program)))
    except stored.NotPlain:
      return None
    digest = stored.blake2b(data, digest_size=8).hexdigest()
    name = f"hot_{digest}_{os.getpid()}_{next(_started)}"  # (one file per worker: two
    # processes, or two functions of one, may compile the same program at once)
    path = os.path.join(directory, name + ".prog")
    try:
      with open(path + ".tmp", "wb") as f:
        f.write(data)
      os.replace(path + ".tmp", path)
      job = codegen.tiered.worker("primc.compile", name, path)
    except OSError as e:  # (a full disk, no process to start: compiled here instead)
      log.warning("cannot compile %s in the background (%s): compiling it here", HOT_LABEL, e)
      for leftover in (path + ".tmp", path):
        with contextlib.suppress(FileNotFoundError):
          os.remove(leftover)
      return None
    log.info(
      "compiling %s (%d equations) in the background (pid %d)",
      HOT_LABEL,
      len(program.eqns),
      job.pid,
    )
    return cls(program, job, name, path)

  def ready(self) -> bool:
    """Whether the executable is loaded: polls the worker, loading it once it is done."""
    if self.native is None and self.job.poll() is not None:
      self._load()
    return self.native is not None

  def _load(self) -> None:
    with contextlib.suppress(FileNotFoundError):  # (a worker that failed to read it)
      os.remove(self.path)
    if self.job.returncode != 0:
      log.warning(
        "background compile of %s failed (exit %s, see %s): compiling it in this process",
        HOT_LABEL,
        self.job.returncode,
        backend().tiered.worker_log(self.name),
      )
    self.native = load_executable(self.program, tiered=False, label=HOT_LABEL)


def main(argv: list[str]) -> int:
  """The worker of `_Background` (`argv`: its name, the program's file): compiles the
  program into the cache directory (its plan and kernels), removes the file, exits 0."""
  with open(argv[1], "rb") as f:
    program = stored.decode_program(marshal.loads(f.read()))
  os.remove(argv[1])
  load_executable(program, tiered=False, label=HOT_LABEL).compile()  # (every kind has it)
  return 0


kept.compiler[0] = _compile_kept
kept.IDENTITY_TYPES += (Jitted,)  # a jitted function keeps what it closed over itself


def jit(
  fun: Callable | None = None,
  *,
  static_argnums: int | Sequence[int] = (),
  static_argnames: str | Sequence[str] = (),
  warmup: Sequence = (),
  tiered: bool | None = None,
  fullgraph: bool = False,
) -> Any:
  """Compiles `fun` to native code per input signature.

  Each new signature (pytree structure, shapes, dtypes, static arguments) traces `fun`,
  optimizes and fuses the program and generates one numba kernel per region and a plan
  of steps for the runner; kernels read sizes at run time, so a new batch size only
  re-traces and plans (see `codegen.module.build` for the one choice sizes make).

  Args:
    fun: the function (arrays, or pytrees of arrays, in and out).
    static_argnums: positions of arguments passed as Python values (hashable).
    static_argnames: names of such arguments (positional or keyword). Calls may pass any
      argument by keyword: they are bound to `fun`'s parameters first.
    warmup: signatures to compile ahead of time with `primc warmup`, each a sequence of
      argument specs such as `("f32[2,2]", "f32[2]")` (flat array arguments).
    tiered: how a signature whose native code is not in the cache yet runs while it
      compiles (`codegen/tiered.py`): True, on the interpreter until a background
      process has compiled it (`wait_compiled()` waits for it); False, compiled before
      its first call; None (default: `primc.config.tiered`, PRIMC_TIERED=1 or 0 sets
      it): as many first calls on the interpreter as cost, by estimate, what the
      compile costs (decided from the program before its first call, so a run is the
      same whatever the timing), then every call native, compiled beside the background
      process; compiled first where one interpreted call costs more.
    fullgraph: whether Python reading a traced value (`if x > 0:`, `while err > eps:`,
      `int(n)`) is an error, as in JAX; by default (False) it is a graph break, logged
      once with its source line: the function compiles one program per path its values
      take, each checked on every call (`primc.breaks`), as torch.compile does.
  Returns:
    a `Jitted` callable; `.lower(*args)` shows each stage. Calls accept `out=` (a pytree
    like the outputs) to write results into existing arrays.
  """
  if fun is None:
    return lambda f: jit(
      f,
      static_argnums=static_argnums,
      static_argnames=static_argnames,
      warmup=warmup,
      tiered=tiered,
      fullgraph=fullgraph,
    )
  return Jitted(
    fun, _static_positions(fun, static_argnums, static_argnames), warmup, tiered, fullgraph
  )


def _static_positions(fun, static_argnums, static_argnames) -> tuple[int, ...]:
  nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
  names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
  if not names:
    return nums
  params = list(inspect.signature(fun).parameters)
  missing = [n for n in names if n not in params]
  if missing:
    raise PrimcError(
      f"jit: static_argnames {missing} are not parameters of "
      f"{getattr(fun, '__qualname__', fun)} ({', '.join(params)})"
    )
  return tuple(sorted(set(nums) | {params.index(n) for n in names}))
