"""Tiered execution: a new program runs on the reference interpreter while a background
process compiles it, then switches to the native code.

Compiling a program's kernels takes LLVM ~0.05-0.2 s per kernel (W3's 29: ~1.5 s on two
cores), while the optimized program on numpy's ufuncs gives its first result in
milliseconds. A signature whose module has never been compiled into the cache:

  1. runs on the interpreter (the optimized program, before fusion; `interpret_reusing`)
     from its first call;
  2. starts one worker process (`codegen.spawn`: this module's `main(PLAN_KEY)`)
     that loads the plan from the cache, compiles the module, and marks it compiled;
  3. switches to the native executable: at the first call after the worker has exited
     (polling it costs a system call), or, with a count of calls (`calls`), after
     exactly that many interpreted calls: that call compiles beside the worker what it
     has not taken yet, waits for the rest, and runs native code. A worker that failed
     is logged and the module is compiled in this process instead, where its errors
     surface as usual.

Three policies (`jit(tiered=...)`, PRIMC_TIERED): True ("1") interprets every call until
the worker is done (the first results soonest: interactive work); False ("0") compiles
before the first call; None (the default) interprets a number of calls decided before
the first one from the program alone (`interpreted_calls`): as many as cost, by
estimate, what waiting for the compile costs (the ski-rental rule), none where one
interpreted call already costs more (one kernel over 10^7 elements). The run is the same
whatever the timing: its first `calls` results are the interpreter's, every later one
native. A short program of many kernels (a 100-step training loop of a small network)
runs all of its steps while its kernels compile for the next process.

The worker outlives its parent if the parent exits first, so the cache is complete for
the next process. Results of the first tier are the interpreter's: the same program, but
numpy's math instead of primc's (they agree to a few ulps, not bit for bit).
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import threading

import numpy as np

from primc import prims as P
from primc.codegen import kernel_workers, spawn, store
from primc.codegen.executor import Executable, check_out
from primc.codegen.plan import Plan
from primc.core import Lit, Program, impl_rules, ufunc_rules
from primc.runners import dead_after

log = logging.getLogger("primc.tiered")
_jobs: dict[tuple[str, str], subprocess.Popen] = {}  # (cache dir, module key) -> worker
_jobs_lock = threading.Lock()


# The first call's costs, as estimated before it runs (measured on 2 cores: interpreted,
# ~30 us per equation, ~3 ns per element of its results, ~0.3 ns per multiply-add of its
# products on one BLAS thread; compiled, ~0.1 s of LLVM per new kernel)
EQUATION_S, ELEMENT_S, MAC_S, KERNEL_S = 3e-5, 3e-9, 3e-10, 0.1


def interpreted_calls(program: Program, new_kernels: int, cores: int) -> int:
  """How many calls of a program the default policy interprets while its `new_kernels`
  compile in the background: as many as cost, by estimate, what waiting for the compile
  on `cores` costs (the ski-rental rule: whatever the number of calls that follow, at
  most about twice the time of the better choice); 0 (compile before the first call)
  where one call costs more."""
  if new_kernels == 0:
    return 0
  compile_s = KERNEL_S * new_kernels / max(1, min(cores, new_kernels))
  interpret_s = 0.0
  for e in program.eqns:
    interpret_s += EQUATION_S + ELEMENT_S * sum(v.aval.size for v in e.outputs)
    if e.prim is P.dot_general_p:
      (contracted, _), _ = e.kw["dimension_numbers"]
      k = math.prod(e.inputs[0].aval.shape[d] for d in contracted)
      interpret_s += MAC_S * k * e.outputs[0].aval.size
  return int(compile_s // max(interpret_s, EQUATION_S))


def start(plan_key: str, plan: Plan) -> subprocess.Popen | None:
  """A worker compiling `plan`'s module: the one this process started if it still runs
  (several functions may share a program), else a new one; None where no cache
  directory takes its work, or no process starts (then the caller compiles in
  process)."""
  directory = store.current().write_dir
  if directory is None:
    return None
  job_key = (directory, plan_key)
  with _jobs_lock:
    job = _jobs.get(job_key)
    if job is None or job.poll() is not None:
      try:
        job = _jobs[job_key] = worker("primc.codegen.tiered", plan_key)
      except OSError as e:  # (no process to start: the caller compiles in process)
        log.warning("cannot compile plan %s in the background (%s)", plan_key, e)
        return None
      log.info("compiling the kernels of plan %s in the background (pid %d)", plan_key, job.pid)
  return job


def worker(module: str, name: str, *args: str) -> subprocess.Popen:
  """A background worker running `module.main([name, *args])` on this process's cache
  directory, its errors written to `worker_log(name)`. Its own compile workers leave this
  process a core: it interprets meanwhile."""
  with open(worker_log(name), "wb") as err:
    env = dict(
      spawn.environment(store.current().write_dir),
      PRIMC_COMPILE_WORKERS=str(max(1, kernel_workers.workers() - 1)),
    )
    return subprocess.Popen(
      spawn.command(module, name, *args),
      env=env,
      stdin=subprocess.DEVNULL,
      stdout=subprocess.DEVNULL,
      stderr=err,
    )


def worker_log(name: str) -> str:
  """Where the worker of `name` (a plan key) writes its errors (in the cache directory)."""
  st = store.current()
  return st.path(st.write_dir, "log", name)


_controller = None


def _blas_limit():
  """One BLAS thread inside an interpreted call: the worker is compiling on the other
  core, and OpenBLAS's threads waiting for a busy core made W3's interpreted calls 2.2x
  slower (460 ms vs 205 ms each) and the compile 1.4x slower (117 s vs 84 s)."""
  global _controller
  if _controller is None:
    from threadpoolctl import ThreadpoolController

    _controller = ThreadpoolController()
  return _controller.limit(limits=1, user_api="blas")


class Tiered:
  """An executable that interprets its program until the worker (`job`) has compiled it,
  or for exactly `calls` calls (then compiles what is left and waits); with no worker
  (numba's JIT disabled), for good."""

  def __init__(
    self,
    plan: Plan,
    program: Program,
    job: subprocess.Popen | None,
    plan_key: str = "",
    calls: int | None = None,
  ):
    self.plan = plan
    self.plan_key = plan_key
    self.program = program
    self.job = job
    self.calls = calls  # interpreted, then native (compiled beside the worker); None: poll
    self._interpreted = 0  # calls so far
    self.native: Executable | None = None
    self._lock = threading.Lock()
    self._owned = {id(a.value) for a in program.outputs if isinstance(a, Lit)}
    self._spares: list[dict] = []  # dead intermediates kept across calls, one per caller

  def _switch(self) -> None:
    with self._lock:
      if self.native is None:
        if self.job.returncode != 0:
          log.warning(
            "background compile of a primc module failed (exit %s, see %s): "
            "compiling it in this process",
            self.job.returncode,
            worker_log(self.plan_key),
          )
        self.native = Executable.load(self.plan)

  def compile(self) -> None:
    """Compiles the kernels the worker has not (yet) compiled in this process, beside it,
    waits for the rest, and switches to native code (no-op once native)."""
    if self.job is None or self.native is not None:
      return
    with self._lock:
      if self.native is None:
        native = Executable.load(self.plan)
        native.compile(alongside=True)
        self.native = native

  def ready(self) -> bool:
    """Whether native code runs now: polls the worker, switching once it is done (never
    interprets, compiles or waits). A kept transform's runner, faster than
    `interpret_reusing` on a long program, serves its calls till then."""
    if self.native is None and self.job is not None and self.job.poll() is not None:
      self._switch()
    return self.native is not None

  def wait(self, timeout: float | None = None) -> bool:
    """Waits for the worker (at most `timeout` seconds); True once native code runs."""
    if self.job is None:
      return False
    try:
      self.job.wait(timeout)
    except subprocess.TimeoutExpired:
      return False
    self._switch()
    return True

  def __call__(self, inputs, out=None) -> list[np.ndarray]:
    if self.native is None and self.job is not None:
      if self.calls is not None:
        if self._interpreted >= self.calls:
          self.compile()
      elif self.job.poll() is not None:
        self._switch()
    if self.native is not None:
      return self.native(inputs, out)
    self._interpreted += 1
    spare = self._spares.pop() if self._spares else {}
    try:
      with _blas_limit():
        results = interpret_reusing(self.program, inputs, spare)
    finally:
      self._spares.append(spare)
    results = [self._owned_array(r, inputs) for r in results]
    if out is None:
      return results
    outs = check_out(out, self.plan.out_specs)
    final = []
    for (kind, k), r in zip(self.plan.program_outputs, results, strict=True):
      if kind == "out":
        np.copyto(outs[k], r)
        r = outs[k]
      final.append(r)
    return final

  def _owned_array(self, r: np.ndarray, inputs) -> np.ndarray:
    """`r` as the native executable returns outputs: C-contiguous, writeable and the
    caller's own (not a view of an input or of a constant of the program)."""
    if (
      r.base is not None
      or not r.flags.c_contiguous
      or not r.flags.writeable
      or id(r) in self._owned
      or any(r is x for x in inputs)
    ):
      return np.array(r, order="C")
    return r

  def runner(self, tree=None):
    """The native executable's steady call, or None while interpreting."""
    return None if self.native is None else self.native.runner(tree)


def interpret_reusing(program: Program, args, spare: dict) -> list[np.ndarray]:
  """The reference interpreter's loop, but a float elementwise equation writes into the
  array of an intermediate that is dead by then (from `spare`, keyed by shape and dtype),
  and dead intermediates go back to `spare`. A fresh temporary per equation
  page-faults its memory on every call: W5's 16 equations over 10^7 floats took 1.26 s
  on a first call, 82 ms per equation of which ~70 were page faults."""
  dead = dead_after(program, program.inputs)  # (the caller's arrays: never reused)
  env = dict(zip(program.inputs, args, strict=True))
  read = lambda a: a.value if isinstance(a, Lit) else env[a]
  live: dict = {}  # by shape and dtype: [intermediates alive now, most alive at once]
  with np.errstate(all="ignore"):
    for i, eqn in enumerate(program.eqns):
      xs = [read(a) for a in eqn.inputs]
      v = eqn.outputs[0]
      key = (v.aval.shape, v.aval.dtype)
      ufunc, pool = ufunc_rules.get(eqn.prim), spare.get(key)
      if (
        ufunc
        and pool
        and v.aval.dtype in ("float32", "float64")
        and all(x.dtype == v.aval.dtype and x.shape == v.aval.shape for x in xs)
      ):
        env[v] = ufunc(*xs, out=pool.pop())
      else:
        out = impl_rules[eqn.prim](*xs, **eqn.kw)
        outs = out if eqn.prim.multiple_results else [out]
        env.update(zip(eqn.outputs, map(np.asarray, outs), strict=True))
      del xs
      for o in eqn.outputs:
        _count(live, (o.aval.shape, o.aval.dtype), 1)
      for a in dead[i]:
        value = env.pop(a)
        _count(live, (a.aval.shape, a.aval.dtype), -1)
        if value.base is None and sys.getrefcount(value) == 2 and value.dtype.kind == "f":
          spare.setdefault((value.shape, value.dtype.name), []).append(value)  # (nothing
          # else refers to it; a float, which ufunc equations may write into)
  _trim(spare, live)
  return [np.asarray(read(a)) for a in program.outputs]


def _count(live: dict, key, change: int) -> None:
  alive = live.setdefault(key, [0, 0])
  alive[0] += change
  alive[1] = max(alive)


def _trim(spare: dict, live: dict) -> None:
  """Keeps in each pool of `spare` at most as many arrays as were alive at once (what the
  next call can take), not every one a call freed: by those no ufunc writes into, the
  pools grew at every call (a fluid simulation's gradient: 10 GB in 30 s)."""
  for key, pool in list(spare.items()):
    most = live.get(key, (0, 0))[1]
    del pool[most:]
    if not pool:
      del spare[key]


def main(argv: list[str]) -> int:
  """The worker: compiles the module of the cached plan `argv[0]` (exit 0), or fails."""
  plan = store.current().read_entry("plan", argv[0], Plan.from_bytes)
  if plan is None:
    print(f"primc background compile: no cached plan {argv[0]}", file=sys.stderr)
    return 2
  Executable.load(plan).compile()
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
