"""Compiling a program's new kernels in parallel processes.

Each kernel is a module of the cache of its own (`codegen.module`), compiled by numba in
0.1-1 s. Before a program first runs, the kernels no cache holds yet are split among one
process per available core: this process compiles one share and `python -m
primc.codegen.kernel_workers KEY...` processes the others, each compiling into the cache
and sealing what it compiled (`loader.compile_kernel`, under each module's lock); this
process then loads them. A worker that fails only costs time (this process compiles
what is missing) and is logged.
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


def compile_new(modules) -> int:
  """Compiles `modules` (kernels no cache holds yet, written to the cache directory) in
  parallel when there are several and several cores; returns the number of worker
  processes used. The caller then loads every kernel (`loader.compile_kernel`)."""
  modules = [m for m in modules if m.DIRECTORY is not None]
  n = min(workers(), len(modules))
  if n < 2:  # workers share their results through the cache
    return 0
  shares = [modules[k::n] for k in range(n)]
  env = store.worker_env()
  jobs = []
  for share in shares[1:]:
    err = tempfile.TemporaryFile()  # not a pipe: a chatty worker must not block on it
    try:
      jobs.append((subprocess.Popen(
          [sys.executable, "-m", "primc.codegen.kernel_workers", *(m.KEY for m in share)],
          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err), err,
          len(share)))
    except OSError as e:  # no processes here: this one compiles everything
      log.warning("could not start a kernel compile worker (%s): compiling in process", e)
      err.close()
      break
  for module in shares[0]:
    loader.compile_kernel(module)
  for job, err, size in jobs:
    with err:
      if job.wait():
        err.seek(0)
        log.warning("a kernel compile worker failed (exit %d); its kernels compile in this "
                    "process: %s", job.returncode, err.read().decode(errors="replace")[-2000:])
      else:  # this process loads them (numba_cache_loads)
        for _ in range(size):
          cache.count("worker_compiles")
  return len(jobs)


def main(argv: list[str]) -> int:
  """The worker: compiles the cached kernel modules `argv` (their keys)."""
  st = store.current()
  for key in argv:
    with open(st.path(st.write_dir, "module", key)) as f:
      loader.compile_kernel(loader.load(f.read()))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
