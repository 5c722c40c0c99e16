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
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile

from primc.codegen import cache, loader, store

log = logging.getLogger("primc.cache")


def cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def workers() -> int:
  """How many processes compile a program's kernels at once: PRIMC_COMPILE_WORKERS (1:
  only the calling process), else one per available core."""
  try:
    return max(1, int(os.environ["PRIMC_COMPILE_WORKERS"]))
  except (KeyError, ValueError):
    return cores()


def orders(keys: list[str], n: int) -> list[list[str]]:
  """The order in which each of `n` processes goes through `keys`: this process from the
  first; with one worker, it from the last backwards; with more, each from its own
  starting point, forwards."""
  if n == 2:
    return [keys, keys[::-1]]
  return [keys[k * len(keys) // n:] + keys[:k * len(keys) // n] for k in range(n)]


def start(modules) -> list:
  """Starts the worker processes that compile `modules` (kernels no cache holds yet,
  written to the cache directory) with this process, when there are several and several
  cores: call it holding the library's lock (workers take it before they link the
  library, which this process verifies and links meanwhile); then `finish`."""
  modules = [m for m in modules if m.DIRECTORY is not None]
  n = min(workers(), len(modules))
  if n < 2:  # workers share their results through the cache
    return []
  env = store.worker_env()
  jobs = []
  for order in orders([m.KEY for m in modules], n)[1:]:
    err = tempfile.TemporaryFile()  # not a pipe: a chatty worker must not block on it
    try:
      jobs.append((subprocess.Popen(
          [sys.executable, "-m", "primc.codegen.kernel_workers", *order],
          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err), err))
    except OSError as e:  # no processes here: this one compiles everything
      log.warning("could not start a kernel compile worker (%s): compiling in process", e)
      err.close()
      break
  return jobs


def finish(modules, jobs) -> int:
  """Compiles what of `modules` no worker has taken, then waits for the workers `jobs`;
  returns how many there were. The caller then loads every kernel
  (`loader.compile_kernel`)."""
  if not jobs:
    return 0
  for module in modules:
    if module.DIRECTORY is not None:
      loader.compile_kernel(module, wait=False)
  for job, err in jobs:
    out, _ = job.communicate()
    with err:
      if job.returncode:
        err.seek(0)
        log.warning("a kernel compile worker failed (exit %d); its kernels compile in this "
                    "process: %s", job.returncode, err.read().decode(errors="replace")[-2000:])
      else:  # this process loads them (kernel_cache_loads)
        last = (out.split() or [b""])[-1]
        cache.count("worker_compiles", n=int(last) if last.isdigit() else 0)
  return len(jobs)


def main(argv: list[str]) -> int:
  """The worker: compiles the cached kernel modules `argv` (their keys, in its order)
  that are neither sealed nor being compiled by another process; prints how many."""
  st = store.current()
  sources = []
  for key in argv:
    with open(st.path(st.write_dir, "module", key)) as f:
      sources.append(f.read())
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
