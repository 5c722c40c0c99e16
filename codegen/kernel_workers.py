"""Compiling a module's threaded kernels in parallel processes.

A threaded (`parallel=True`) kernel is numba's most expensive compile: 2.3-3.4 s each
here, and W3's module has 19 of them (52 of its 68 s cold first call). They are
separate cached numba functions, so before a module's driver is compiled for the first
time, its threaded kernels are split among one process per available core: this process
compiles one share and `python -m codegen.kernel_workers` processes the others, each
writing numba's cache; compiling the driver then loads them. A worker that fails only
costs time (the driver compiles what is missing) and is logged.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile

import numpy as np

from primc.codegen import loader, store, threads

log = logging.getLogger("primc.cache")


def cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def signature(ins, outs) -> tuple:
  """A threaded kernel's numba argument types, as the driver calls it: a tuple of input
  arrays, a tuple of output arrays (C-contiguous, as the driver's carrays and their
  reshapes are) and its slice of the sizes."""
  import numba
  arrays = lambda kinds: tuple(np.zeros((0,) * ndim, dtype) for dtype, ndim in kinds)
  return (numba.typeof(arrays(ins)), numba.typeof(arrays(outs)),
          numba.typeof(np.zeros(0, np.int64)))


def compile_share(module, share) -> None:
  threads.prepare()  # compiling a parallel loop starts numba's thread pool
  for name, ins, outs in share:
    getattr(module, name).compile(signature(ins, outs))


def compile_threaded(module, plan, source: str) -> int:
  """Compiles the threaded kernels of a module not compiled into the cache before (the
  caller holds its lock), in parallel when there are several and several cores; returns
  the number of worker processes used."""
  kernels = list(plan.threaded)
  n = min(cores(), len(kernels))
  if n < 2 or module.DIRECTORY is None:  # workers share their results through the cache
    return 0
  shares = [kernels[k::n] for k in range(n)]
  env = store.worker_env()
  jobs = []
  for share in shares[1:]:
    err = tempfile.TemporaryFile()  # not a pipe: a chatty worker must not block on it
    try:
      jobs.append((subprocess.Popen(
          [sys.executable, "-m", "primc.codegen.kernel_workers", loader.module_key(source),
           json.dumps(share)], env=env, stdin=subprocess.DEVNULL,
          stdout=subprocess.DEVNULL, stderr=err), err))
    except OSError as e:  # no processes here: this one compiles everything
      log.warning("could not start a kernel compile worker (%s): compiling in process", e)
      err.close()
      break
  compile_share(module, shares[0])
  for job, err in jobs:
    with err:
      if job.wait():
        err.seek(0)
        log.warning("a kernel compile worker failed (exit %d); its kernels compile in this "
                    "process: %s", job.returncode, err.read().decode(errors="replace")[-2000:])
  return len(jobs)


def main(argv: list[str]) -> int:
  """The worker: compiles the kernels `argv[1]` (JSON) of the cached module `argv[0]`."""
  st = store.current()
  with open(st.path(st.write_dir, "module", argv[0])) as f:
    module = loader.load(f.read())
  compile_share(module, [(name, [tuple(k) for k in ins], [tuple(k) for k in outs])
                         for name, ins, outs in json.loads(argv[1])])
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
