"""Cache keys and counters: what a cached artifact is called, and what this process did.

Modules are keyed by a hash of their source, plans by a hash of the traced program; the
environment (primc's version and a hash of its own source, numba, llvmlite, numpy and
Python versions, the CPU, threading options) is part of every key and of every entry's
header, so a version change, or an edited primc, is a miss, not an error. Where the
entries live and how they are checked: `codegen.store`.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import os
import platform
import sys

import numpy as np

import primc.core
from primc import passes
from primc.codegen import installed, openblas, target
from primc.core import VERSION, Lit, Program, Var

log = logging.getLogger("primc.cache")
_stats = collections.Counter()
_miss_reasons = collections.Counter()
_load_times: list[float] = []


def versions() -> str:
  """The versions of what primc compiles with (read without importing numba)."""
  return (
    f"numba={installed.version('numba')} "
    f"llvmlite={installed.version('llvmlite')} numpy={np.__version__} "
    f"python={'.'.join(map(str, sys.version_info[:3]))}"
  )


@functools.lru_cache(maxsize=None)
def environment() -> str:
  """Everything besides the source that decides the machine code (fixed per process)."""
  try:
    cpu = ":".join(target.cpu())
  except Exception:  # pragma: no cover - informative only
    cpu = platform.machine()
  threads = os.environ.get("NUMBA_THREADING_LAYER", "default")
  blas = "own" if openblas.single_threaded() else "shared"  # what the plans thread
  return f"primc={VERSION}+{compiler_hash()} {versions()} cpu={cpu} threads={threads} blas={blas}"


def compiler_hash() -> str:
  """A hash of the source of primc's packages (primc, primc.passes, primc.codegen): what
  the compiler does is part of what a cached plan or module means."""
  h = hashlib.sha256()
  for package in (primc.core, passes, sys.modules[__name__]):
    root = os.path.dirname(os.path.abspath(package.__file__))
    for name in sorted(os.listdir(root)):
      if name.endswith(".py"):
        with open(os.path.join(root, name), "rb") as f:
          h.update(name.encode() + b"\0" + f.read())
  return h.hexdigest()[:12]


def env_hash() -> str:
  return hashlib.sha256(environment().encode()).hexdigest()[:16]


def program_key(program: Program, options: str = "") -> str:
  """A hash of a program's structure, parameters and literal values (names do not
  matter: variables are numbered in order)."""
  h = hashlib.sha256()
  h.update(env_hash().encode())
  h.update(options.encode())
  ids: dict[Var, int] = {}

  def atom(a):
    if isinstance(a, Lit):
      return f"{'S' if a.sized else 'L'}{a.aval}:{a.value.tobytes().hex()}"
    return f"v{ids[a]}:{a.aval}"

  for v in program.inputs:
    ids[v] = len(ids)
  h.update(" ".join(atom(v) for v in program.inputs).encode())
  for e in program.eqns:
    args = " ".join(atom(a) for a in e.inputs)
    for v in e.outputs:
      ids[v] = len(ids)
    h.update(f"|{e.prim.name}[{e.params!r}]({args})->{len(e.outputs)}".encode())
  h.update(("=>" + " ".join(atom(a) for a in program.outputs)).encode())
  return h.hexdigest()[:32]


def count(event: str, reason: str | None = None, n: int = 1) -> None:
  _stats[event] += n
  if reason:
    _miss_reasons[reason] += 1


def record_load(seconds: float) -> None:
  _load_times.append(seconds)


def stats() -> dict:
  """Cache counters of this process: plan hits/misses (with reasons), module loads,
  numba compiles, load times."""
  out = dict(_stats)
  out["miss_reasons"] = dict(_miss_reasons)
  out["load_seconds"] = list(_load_times)
  return out


def reset_stats() -> None:
  _stats.clear()
  _miss_reasons.clear()
  _load_times.clear()
