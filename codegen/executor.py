"""The executor: runs a compiled program on numpy arrays.

Thin on purpose: one native call per program call, into an entry (codegen.native) that
checks the inputs and fills the pointer table of the runner (codegen.runner), which
runs the plan's kernels in order.
Intermediate buffers are views into a block of the process's arena memory (`BLOCKS`),
taken for the length of a call (concurrent callers each get their own) and shared by
every program, so a new size runs in memory already mapped; a small program's steady
runner keeps its arena on the native entry's stack instead.
Outputs are arrays the caller owns (or `out=`); large ones come from a small per-output
pool of arrays that are reused once nothing refers to them any more (no array, view or
buffer of the caller's), so a steady loop writes to memory that is already mapped
instead of page-faulting fresh pages on every call.
"""

from __future__ import annotations

import mmap
import sys
import threading
import time

import numpy as np

from primc.core import PrimcError
from primc.tree import flat_form, unflattener
from primc.codegen import cache, kernel_workers, loader, native, progress, runner, store
from primc.codegen.plan import Plan


POOLED_MIN_BYTES = 1 << 16  # smaller outputs: plain np.empty (numpy caches those)
POOL_DEPTH = 2  # arrays kept per output


class ArenaBlocks:
  """The process's memory for arenas: blocks that executables carve their buffers from for
  the length of a call and give back, so a program at a new size (a new executable) runs in
  pages an earlier size already touched instead of page-faulting a fresh arena (on this
  machine 30-120 ms for W3's 53 MB, up to 0.3 s for 120 MB of memory the process never
  had). `take` prefers the block given back last (a steady loop keeps its block); blocks
  beyond `KEEP` free ones are dropped, the smallest first.

  A request no free block fits drops the free blocks smaller than it first (their pages
  go back to the system, which hands them straight back to the new block: measured here,
  15 ms for 120 MB against 0.3-0.4 s for pages the process never touched), and the new
  block maps twice the request (`GROWTH`), rounded up to the next of eight size classes
  per octave: sizes up to twice as large run in it, a larger one faulting only the pages
  it adds (W3 after 4096 points, 5400 points: 17,800 page faults -> 4,200, 113 -> 94 ms); pages
  a call never touches cost no memory."""

  KEEP = 4
  CLASSES_PER_OCTAVE = 8
  GROWTH = 2  # a new block maps this many times the request (pages never touched are free)

  def __init__(self):
    self._free: list[Block] = []
    self._lock = threading.Lock()

  def take(self, nbytes: int) -> "Block":
    with self._lock:
      for k in range(len(self._free) - 1, -1, -1):
        if self._free[k].size >= nbytes:
          return self._free.pop(k)
      self._free.clear()  # every free block is smaller than this request
    try:  # room to grow: a larger size later touches only its new pages
      return Block(self.size_class(self.GROWTH * nbytes))
    except MemoryError:  # the system would not map that much at once
      return Block(self.size_class(nbytes))

  @classmethod
  def size_class(cls, nbytes: int) -> int:
    """`nbytes` rounded up to a size class: 2^e * (1 + k/8) bytes (at most 12.5% more)."""
    if nbytes <= 4096:
      return max(int(nbytes), 0)
    step = 1 << (int(nbytes).bit_length() - 1 - cls.CLASSES_PER_OCTAVE.bit_length() + 1)
    return -(-int(nbytes) // step) * step

  def give(self, block: "Block | None") -> None:
    if block is None:  # a program without an arena took none
      return
    with self._lock:
      self._free.append(block)
      if len(self._free) > self.KEEP:
        self._free.remove(min(self._free, key=lambda b: b.size))


class Block:
  """A block of arena memory, and the buffer views of it each layout (the start and
  length in bytes of each of a plan's buffers) was given: made once per block and layout,
  and dropped with the block (no executable holds a block between its calls)."""

  __slots__ = ("memory", "size", "_views", "__weakref__")
  VIEWS_KEPT = 64  # layouts

  def __init__(self, nbytes: int):
    # its own mapping, not numpy's allocator: numpy asks the system for huge pages for
    # large arrays, and a fault of a huge page the system must first assemble (or zero
    # anew) costs far more than the small pages a dropped block gave back (measured: W3
    # at a larger new size 103-190 -> 88-135 ms; its steady call 12.4-12.7 -> 10.7-10.9 ms)
    try:
      self.memory = (
        np.frombuffer(mmap.mmap(-1, nbytes), np.uint8) if nbytes else np.empty(0, np.uint8)
      )
    except OSError as e:  # as numpy says it
      raise MemoryError(
        f"primc: cannot map {nbytes} bytes for a program's intermediates: {e}"
      ) from None
    self.size = nbytes
    self._views: dict[tuple, tuple] = {}

  def views(self, layout: tuple) -> tuple:
    views = self._views.get(layout)
    if views is None:
      if len(self._views) >= self.VIEWS_KEPT:
        self._views.clear()
      views = self._views[layout] = tuple(self.memory[s : s + n] for s, n in layout)
    return views


BLOCKS = ArenaBlocks()


class Executable:
  @classmethod
  def load(cls, plan: Plan, label: str = "a program") -> "Executable":
    """Loads the plan's kernel modules (compiled, or loaded from numba's disk cache, by
    the first call)."""
    return cls(plan, [loader.load(source) for source in plan.kernels], label)

  def __init__(self, plan: Plan, modules, label: str = "a program"):
    self.plan = plan
    self.label = label  # what its compile progress names (see codegen.progress)
    self.modules = modules
    self.kernels = None  # the compiled cfuncs, once ready
    self.out_specs = plan.out_specs
    *self._arena_starts, self._arena_bytes = native.arena_starts(plan.buffer_bytes)
    self._views = tuple(
      (k, off * np.dtype(plan.buffers[k].dtype).itemsize) for k, off in plan.views
    )  # (buffer, byte offset)
    self._layout = tuple(zip(self._arena_starts, plan.buffer_bytes))  # its arena views
    # a pool per large output (None: a plain np.empty)
    self._pools = [
      [] if dtype.itemsize * int(np.prod(shape)) >= POOLED_MIN_BYTES else None
      for shape, dtype in self.out_specs
    ]
    self._pool_lock = threading.Lock()
    self._consts = tuple(_read_only(c) for c in plan.const_arrays)
    self._words = np.array(plan.words, np.int64, order="C")
    self._n_in = len(plan.in_avals)
    self._outs_in_order = list(plan.program_outputs) == [
      ("out", k) for k in range(len(plan.out_avals))
    ]
    self._general = None  # (*inputs, *outputs, *arena) -> True | None (see codegen.native)
    self._first = True
    cfuncs = [loader.compiled_kernel(m) for m in modules]
    if all(c is not None for c in cfuncs):  # other executables compiled them
      self._ready(cfuncs)

  def _first_call(self, alongside: bool = False) -> None:
    """The first call compiles the kernels or loads them from the disk cache (each under
    its module's lock, after the store has verified its files against the module's seal);
    kernels no cache holds yet are compiled by parallel processes first, or (`alongside`)
    beside the processes already compiling them (a tiered worker's)."""
    t0 = time.perf_counter()
    st = store.current()
    in_memory = any(m.DIRECTORY is None for m in self.modules)
    libraries = [m for m in loader.library(in_memory) if m.DIRECTORY is not None]
    new = [m for m in self.modules if loader.compiled_kernel(m) is None and not st.sealed(m.SOURCE)]
    done = lambda: sum(loader.compiled_kernel(m) is not None or st.sealed(m.SOURCE) for m in new)
    with progress.Progress(self.label, len(new), done):
      with st.lock("library"):
        # workers start up while the library is readied
        workers = [] if alongside else kernel_workers.start(new)
        for lib in libraries:
          st.prepare_library(lib.DIRECTORY, lib.KEY)
        if loader.link_library(self.plan.kernels, in_memory):
          for lib in libraries:  # before compile workers read them
            st.seal(lib.DIRECTORY, lib.KEY)
      if kernel_workers.finish(new, workers, alongside):
        cache.count("parallel_kernel_compiles")
      cfuncs = [loader.compile_kernel(m) for m in self.modules]
    if libraries and any(not c.cache_hits for c in cfuncs):
      with st.lock("library"):  # what these compiles added to the library's files
        for lib in libraries:
          st.seal(lib.DIRECTORY, lib.KEY)
    cache.record_load(time.perf_counter() - t0)
    self._ready(cfuncs)

  def _ready(self, cfuncs) -> None:
    """Points the plan's steps at the compiled kernels (their addresses are this
    process's: the plan holds their indices) and builds the general entry."""
    self.kernels = cfuncs
    run, tasks = runner.addresses()
    if any(int(self.plan.words[slot + 1]) & runner.THREADED for slot in self.plan.kernel_slots):
      runner.enable_threads()
    self.driver = run
    self._words[1] = tasks
    for slot in self.plan.kernel_slots:
      self._words[slot] = cfuncs[int(self.plan.words[slot])].address
    self._general = self._entry(alloc=False, result="ok")
    self._first = False

  def _entry(self, alloc: bool, result: str):
    """A native entry of this plan (see codegen.native): outputs allocated by it (`alloc`,
    with the arena on its stack) or passed in after the inputs (then the arena too)."""
    plan = self.plan
    descrs = [dtype for _, dtype in self.out_specs]
    handler = self._raise_index_error  # one bound method: the entry holds its address
    spec = native.EntrySpec(
      inputs=tuple((np.dtype(a.dtype), a.shape) for a in plan.in_avals),
      consts=tuple(c.ctypes.data for c in self._consts),
      outputs=tuple((alloc, shape, id(dtype)) for shape, dtype in self.out_specs),
      buffers=plan.buffer_bytes,
      stack_arena=alloc,
      views=self._views,
      sizes=self._words.ctypes.data,
      driver=self.driver,
      result=result,
      on_error=id(handler),
    )
    keep = (self._words, self._consts, descrs, self.kernels, handler)
    if native.available():
      return native.entry(spec, keep)
    return native.ctypes_entry(spec, keep, self.driver, handler)

  # -- the pointer table, for a caller that runs the driver itself (codegen.loops) --------
  def native_loop_ready(self) -> bool:
    """Compiles the kernels if need be; whether the driver writes every output, in order
    (then a pointer table runs the whole program)."""
    if self._first:
      self._first_call()
    return self._outs_in_order

  @property
  def arena_bytes(self) -> int:
    return self._arena_bytes

  def pointer_table(self, inputs, outputs, arena: int, err: int) -> np.ndarray:
    """The driver's table `[words, err, inputs..., constants..., outputs..., arena
    views...]` for these addresses (arena: a block of at least `arena_bytes`)."""
    return np.array(
      native.pointer_table(
        self._words.ctypes.data,
        err,
        inputs,
        [c.ctypes.data for c in self._consts],
        outputs,
        [arena + s for s in self._arena_starts],
        self._views,
      ),
      np.int64,
    )

  def input_slot(self, j: int) -> int:
    return 2 + j

  def output_slot(self, j: int) -> int:
    return 2 + self._n_in + len(self._consts) + j

  def _raise_index_error(self, site: int, index: int, size: int):
    raise self.plan.index_error(site, index, size)

  def compile(self, alongside: bool = False) -> None:
    """Compiles the kernels (or loads them from the cache); `alongside`: beside the
    processes compiling them already (see `_first_call`)."""
    if self._first:
      self._first_call(alongside)

  def _take_arena(self) -> tuple:
    """(block, its buffer views): a block of `BLOCKS` (the views made once per block);
    (None,) for a program without an arena."""
    if not self.plan.buffers:
      return (None,)
    block = BLOCKS.take(self._arena_bytes)
    return (block, *block.views(self._layout))

  def _outputs(self) -> list[np.ndarray]:
    return [
      np.empty(shape, dtype) if pool is None else self._pooled(k)
      for k, ((shape, dtype), pool) in enumerate(zip(self.out_specs, self._pools))
    ]

  def _pooled(self, k: int) -> np.ndarray:
    """Output k from its pool: an array nothing refers to any more, else a new one."""
    pool = self._pools[k]
    with self._pool_lock:
      # free when referred to by the pool, this loop and getrefcount's argument only
      free = next((a for a in pool if sys.getrefcount(a) == 3), None)
      if free is None:
        free = np.empty(*self.out_specs[k])
        if len(pool) < POOL_DEPTH:
          pool.append(free)
    return free

  def __call__(self, inputs, out=None) -> list[np.ndarray]:
    """Runs the program on `inputs` (converted to C-contiguous arrays of the plan's dtypes
    where they are not), into `out` (checked) or into fresh (or pooled) outputs; returns
    the program's outputs in order."""
    if self._first:
      self._first_call()
    if out is not None:
      outs = check_out(out, self.out_specs)
      if overlapping(outs, inputs) or not all(o.flags.c_contiguous for o in outs):
        # as numpy: the results as if computed first, then written (any strides)
        for o, r in zip(outs, self._run(inputs, self._outputs()), strict=True):
          np.copyto(o, r)
        return outs if self._outs_in_order else self._results(inputs, outs)
    return self._run(inputs, self._outputs() if out is None else outs)

  def _run(self, inputs, outs) -> list[np.ndarray]:
    block, *arena = self._take_arena()
    try:
      if self._general(*inputs, *outs, *arena) is None:
        inputs = self._converted(inputs)
        if self._general(*inputs, *outs, *arena) is None:
          raise PrimcError("the compiled program refused its converted inputs")
    finally:
      BLOCKS.give(block)
    return outs if self._outs_in_order else self._results(inputs, outs)

  def _converted(self, inputs) -> list[np.ndarray]:
    """The inputs as the driver takes them: exactly ndarrays, C-contiguous and aligned, of
    the plan's dtypes; a shape other than the plan's is the caller's error."""
    if len(inputs) != self._n_in:
      raise PrimcError(f"compiled program takes {self._n_in} inputs, got {len(inputs)}")
    converted = []
    for x, aval in zip(inputs, self.plan.in_avals):
      a = np.asarray(x)
      if a.shape != aval.shape:
        raise PrimcError(
          f"compiled program input {len(converted)} has shape {list(a.shape)}, expected {aval}"
        )
      a = np.require(a, np.dtype(aval.dtype).newbyteorder("="), ["C", "A"])
      converted.append(a if type(a) is np.ndarray else a.view(np.ndarray))
    return converted

  def runner(self, tree=None):
    """The steady call, for a caller that passes its arguments as they are: a function of
    the arguments (`run(*args)`) that returns the outputs built into `tree` (a TreeDef;
    None: a list), or None when they are not C-contiguous aligned arrays of the compiled
    dtypes and shapes (the caller then takes the general path). None before the first
    call (which compiles or loads the kernels).

    Where every output is small, the arena fits on the stack and the outputs form a leaf
    or a flat tuple or list, the runner is a native entry (codegen.native) that allocates
    the outputs itself. Otherwise it is generated per plan around the general entry: one
    line per output and the call with its arguments spelled out (a loop over the outputs
    costs more than the arithmetic of a small program)."""
    if self._first:
      return None
    n_out = len(self.out_specs)
    form = _flat_form(tree, n_out)
    if (
      form
      and native.available()
      and self._outs_in_order
      and sum(self.plan.buffer_bytes) <= native.STACK_ARENA_MAX
      and all(pool is None for pool in self._pools)
    ):
      return self._entry(alloc=True, result=form)
    build = list if tree is None else unflattener(tree)
    env = {
      "empty": np.empty,
      "general": self._general,
      "take_arena": self._take_arena,
      "give": BLOCKS.give,
      "pooled": self._pooled,
      "results": self._results,
      "build": build,
    }
    lines = ["def run_hot(*args):", f"  if len(args) != {self._n_in}:", "    return None"]
    for k, ((shape, dtype), pool) in enumerate(zip(self.out_specs, self._pools)):
      env[f"s{k}"], env[f"d{k}"] = shape, dtype
      lines.append(f"  o{k} = empty(s{k}, d{k})" if pool is None else f"  o{k} = pooled({k})")
    outs = "[" + ", ".join(f"o{k}" for k in range(n_out)) + "]"
    call = ", ".join(
      ["*args"] + [f"o{k}" for k in range(n_out)] + (["*arena"] if self.plan.buffers else [])
    )
    lines += [
      "  block, *arena = take_arena()",
      "  try:",
      f"    if general({call}) is None:",
      "      return None",
      "  finally:",
      "    give(block)",
      f"  return build({outs if self._outs_in_order else f'results(args, {outs})'})",
    ]
    label = "<primc run_hot>"
    exec(compile("\n".join(lines), label, "exec"), env)
    return env["run_hot"]

  def _results(self, inputs, outs):
    results = []
    for kind, k in self.plan.program_outputs:
      if kind == "out":
        results.append(outs[k])
      elif kind == "in":
        results.append(np.array(inputs[k]))
      else:
        results.append(np.array(k))
    return results


def _flat_form(tree, n_out: int) -> str | None:
  """ "leaf", "tuple" or "list" when `tree` (None: a list) is that flat form of `n_out`
  leaves, else None."""
  if n_out == 0:
    return None
  if tree is None:
    return "list"
  form = flat_form(tree)
  leaves = 1 if form == "leaf" else len(tree.children)
  return form if leaves == n_out else None


def check_out(out, specs) -> list[np.ndarray]:
  """The `out=` arrays, checked against the outputs' (shape, dtype) `specs`."""
  outs = list(out)
  if len(outs) != len(specs):
    raise PrimcError(f"out= needs {len(specs)} arrays, got {len(outs)}")
  for o, (shape, dtype) in zip(outs, specs, strict=True):
    if type(o) is not np.ndarray:
      raise PrimcError(
        f"out= takes numpy arrays (np.ndarray), got {type(o).__name__} for "
        f"the output {dtype}{list(shape)}"
      )
    if o.shape != shape or o.dtype != dtype or not o.flags.writeable:
      raise PrimcError(
        f"out= array {o.dtype}{list(o.shape)} does not match the output "
        f"{dtype}{list(shape)} (or is not writeable)"
      )
  if any(np.may_share_memory(o, p) for k, o in enumerate(outs) for p in outs[k + 1 :]):
    raise PrimcError("out= arrays overlap each other: each output needs its own memory")
  return outs


def overlapping(outs, inputs) -> bool:
  """Whether an `out=` array may share memory with an input (a bounds check: it may say
  yes for arrays that interleave without touching; then the call only copies more)."""
  return any(np.may_share_memory(o, x) for o in outs for x in inputs if isinstance(x, np.ndarray))


def _read_only(a: np.ndarray) -> np.ndarray:
  """A constant as the driver reads it: C-contiguous (its address goes into the pointer
  table), and read-only, since every call shares it."""
  a = np.array(a, order="C")
  a.setflags(write=False)
  return a
