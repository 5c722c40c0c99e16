"""Compiling a program's new kernels in parallel processes.

Each kernel is a module of the cache of its own (`codegen.module`), compiled by numba in
0.05-0.5 s. Before a program first runs, the kernels no cache holds yet are compiled by
one process per available core, taking work from a shared list: this process goes
through it from the first kernel, `python -m primc.codegen.kernel_workers KEY...`
processes from other places (the second process from the last kernel backwards), and
each process compiles the kernels it finds neither sealed nor locked by another
(`loader.compile_kernel` without waiting, under each module's lock), so the work splits
by what each kernel costs and when each process starts. This process then loads every
kernel, waiting for those still being compiled. A worker that fails only costs time
(this process compiles what is missing) and is logged.

A worker takes ~0.15 s to start (Python, numpy, llvmlite). When a function's first plan
is not in the cache, `prestart` starts the workers while this process runs the passes
and fusion: they wait (at most WAIT_S) for the keys `start` then sends them, and exit
if none come (the plan's kernels were all in the cache).
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import tempfile
import threading

from primc.codegen import cache, loader, spawn, store, threads, translate

log = logging.getLogger("primc.cache")


def workers() -> int:
  """How many processes compile a program's kernels at once: PRIMC_COMPILE_WORKERS (1:
  only the calling process), else one per available core (`threads.available_cpus`:
  the affinity, and a cgroup's CPU quota)."""
  try:
    return max(1, int(os.environ["PRIMC_COMPILE_WORKERS"]))
  except (KeyError, ValueError):
    return threads.available_cpus()


def orders(keys: list[str], n: int) -> list[list[str]]:
  """The order in which each of `n` processes goes through `keys`: this process from the
  first; with one worker, it from the last backwards; with more, each from its own
  starting point, forwards."""
  if n == 2:
    return [keys, keys[::-1]]
  return [keys[k * len(keys) // n :] + keys[: k * len(keys) // n] for k in range(n)]


WAIT_S = 10.0  # how long a prestarted worker waits for its keys
_waiting: list = []  # prestarted workers: (process, stderr file)
_waiting_lock = threading.Lock()


def prestart() -> None:
  """Starts the workers a compile about to begin may need (one per core but this
  process's), unless they are waiting already; `start` hands them their keys."""
  n = workers() - 1
  if n < 1:
    return
  with _waiting_lock:
    _waiting[:] = [job for job in _waiting if job[0].poll() is None]
    for _ in range(n - len(_waiting)):
      job = _spawn(["--wait"], subprocess.PIPE)
      if job is None:
        break
      _waiting.append(job)


def _spawn(args: list[str], stdin) -> tuple | None:
  err = tempfile.TemporaryFile()  # not a pipe: a chatty worker must not block on it
  try:
    return subprocess.Popen(
      spawn.command("primc.codegen.kernel_workers", *args),
      env=spawn.environment(store.current().write_dir),
      stdin=stdin,
      stdout=subprocess.PIPE,
      stderr=err,
    ), err
  except OSError as e:  # no processes here: this one compiles everything
    log.warning("could not start a kernel compile worker (%s): compiling in process", e)
    err.close()
    return None


def _handed(keys: list[str]) -> tuple | None:
  """A prestarted worker still waiting, given `keys` (None: none took them)."""
  while True:
    with _waiting_lock:
      if not _waiting:
        return None
      job = _waiting.pop(0)
    try:
      stdin, job[0].stdin = job[0].stdin, None  # closed here (not by `communicate`)
      with stdin:
        stdin.write((" ".join(keys) + "\n").encode())
      return job
    except OSError:  # it stopped waiting: the next one, or a new process
      _discard(job)


def _cancel() -> None:
  """Stops the prestarted workers (none of them is needed)."""
  with _waiting_lock:
    jobs, _waiting[:] = list(_waiting), []
  for job in jobs:
    _discard(job)


def _discard(job) -> None:
  job[0].kill()
  job[0].communicate()
  job[1].close()


def start(modules) -> list:
  """Starts the worker processes that compile `modules` (kernels no cache holds yet,
  written to the cache directory) with this process, when there are several and several
  cores (prestarted ones first): call it holding the library's lock (workers take it
  before they link the library, which this process verifies and links meanwhile); then
  `finish`."""
  reap(wait=False)
  modules = [m for m in modules if m.DIRECTORY is not None]
  n = min(workers(), len(modules))
  if n < 2:  # workers share their results through the cache
    _cancel()  # prestarted ones would only take cores from this process's compile or run
    return []
  jobs = []
  for order in orders([m.KEY for m in modules], n)[1:]:
    job = _handed(order) or _spawn(order, subprocess.DEVNULL)
    if job is None:
      break
    jobs.append(job)
  return jobs


def finish(modules, jobs, alongside: bool = False) -> int:
  """Compiles what of `modules` no worker has taken (`alongside`: no worker of these, but
  other processes compiling them, from the first: this one goes from the last); returns
  how many workers there were. The caller then loads every kernel
  (`loader.compile_kernel`, which waits for each one a worker is compiling: its lock),
  not for the workers to exit (~30 ms): `reap` collects them later."""
  if not (jobs or alongside):
    return 0
  for module in modules[::-1] if alongside else modules:
    if module.DIRECTORY is not None:
      loader.compile_kernel(module, wait=False)
  with _waiting_lock:
    _running.extend(jobs)
  return len(jobs)


_running: list = []  # workers handed keys, not yet collected by `reap`


def _forget_workers() -> None:
  """In a forked child: the workers are the parent's (its children, its pipes), and the
  lock may have been held by another of the parent's threads."""
  global _waiting_lock
  _waiting_lock = threading.Lock()
  _waiting.clear()
  _running.clear()


os.register_at_fork(after_in_child=_forget_workers)


def reap(wait: bool = True) -> None:
  """Collects the workers that have exited (`wait`: every one, waiting for it): counts
  the ones that ran (`worker_runs`) and what they compiled (`worker_compiles`: none, when
  this process was quicker), logs the ones that failed."""
  with _waiting_lock:
    jobs = [job for job in _running if wait or job[0].poll() is not None]
    _running[:] = [job for job in _running if job not in jobs]
  for job, err in jobs:
    out, _ = job.communicate()
    with err:
      if job.returncode:
        err.seek(0)
        log.warning(
          "a kernel compile worker failed (exit %d); its kernels compile in this process: %s",
          job.returncode,
          err.read().decode(errors="replace")[-2000:],
        )
      else:  # this process loads them (kernel_cache_loads)
        last = (out.split() or [b""])[-1]
        cache.count("worker_runs")
        cache.count("worker_compiles", n=int(last) if last.isdigit() else 0)


def main(argv: list[str]) -> int:
  """The worker: compiles the cached kernel modules `argv` (their keys, in its order; or
  `--wait`: read from a line of standard input, waiting at most WAIT_S) that are neither
  sealed nor being compiled by another process; prints how many."""
  if argv == ["--wait"]:
    translate.target_machine()  # LLVM's setup (~20 ms) while the keys are on their way
    ready, _, _ = select.select([sys.stdin], [], [], WAIT_S)
    argv = sys.stdin.readline().split() if ready else []
  st = store.current()
  sources = []
  for key in argv:
    with open(st.path(st.write_dir, "module", key)) as f:
      sources.append(f.read())
  if not sources:
    print(0)
    return 0
  with st.lock("library"):  # verified and linked by the process that started this one
    loader.link_library(sources)
  compiled = 0
  for source in sources:
    if st.sealed(source):
      continue
    cfunc = loader.compile_kernel(loader.load(source), wait=False)
    compiled += cfunc is not None and not cfunc.cache_hits
  print(compiled)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
