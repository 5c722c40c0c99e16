"""Code generation: fused regions to kernels, the disk cache and the executor.

  kir.py       the kernel IR: a kernel's loops, loads, stores and scalar ops as frozen
               nodes; rendered as Python for numba (`to_python`), built from Python
               templates and library functions (`E`, `S`, `from_python`)
  kernels.py   region -> kernel IR (one lowering rule per primitive); a kernel is a C
               function of one signature, run in phases (setup, tasks, finish)
  segments.py  a pass over a loop's nodes: rows filled stretch by stretch
  translate.py the LLVM renderer: kernel IR -> LLVM IR -> object file, without numba
               (numba's typing of the kernels' subset); numba compiles what is outside it
  mathlib.py   vectorizable float32/float64 exp, log, tanh, sin, cos; element access by
               address (LOAD, STORE)
  special.py   polygamma, erfinv, erfcinv (scipy.special's functions numba lacks)
  blas.py      the products kernels call by address (loops for small ones, BLAS for large)
  module.py    fused program -> its kernels (one cache module each, shared by every
               program that has them) and its run plan (steps as data)
  runner.py    the one native function (LLVM IR) that runs a plan's steps; threads by
               handing a step's tasks to numba's thread pool
  pipeline.py  the one door: a traced program to its executable (`executable`), as one
               list of named steps (plan cache, tiering, control flow, the compile)
  segmented.py programs with control flow: straight-line segments and bodies, each
               compiled through the door, their loops and branches run here
  loops.py     control-flow loops over compiled bodies, run natively (the runner called
               on the bodies' pointer tables, step after step)
  loader.py    content-addressed module files under the cache directory (run only when
               needed); compiled kernels, by LLVM or numba; the library's C entries
  native.py    the native entry: a CPython function (LLVM IR) that checks the inputs,
               allocates the outputs and fills the runner's pointer table
  executor.py  runs a plan: arena buffers, outputs, one call into the runner
  kernel_workers.py  a program's new kernels compiled by one process per core, taking
               work from one list
  tiered.py    first calls on the interpreter while a background process compiles (and
               every call, under NUMBA_DISABLE_JIT=1)
  store.py     the disk cache: layout, verified reads, atomic writes, eviction
  cache.py     cache keys and this process's counters
  installed.py versions and files of installed distributions (no importlib.metadata)
  threads.py   the thread pool for the runner's tasks: numba's TBB pool (it survives fork),
               started without importing numba

Threads: the runner hands the tasks of a large step to numba's thread pool
(`numba_parallel_for`, reached through a pointer `runner.enable_threads` sets), started on
a fork-safe layer by `threads.pool()` when primc first runs a program with threaded steps
(nothing is set at import). Kernels themselves are serial.
"""
