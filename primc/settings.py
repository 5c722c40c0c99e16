"""primc's process-wide settings (`primc.config`), read by the transforms and by `jit`.

- `optimize_transforms` (default True): run the optimization pipeline on every program a
  transform produces or consumes, so nested derivatives differentiate the simplified
  program instead of the raw one (this keeps d^n/dx^n programs polynomial in n). False
  (or `raw_transforms()`) shows the raw transformed programs.
- `tiered`: how a new program's first calls run while its kernels compile
  (`codegen/tiered.py`; `jit(tiered=...)` overrides it per function). None (the
  default): as many first calls on the interpreter as cost, by estimate, what the
  compile costs (none where one call costs more), every later one native; True
  (PRIMC_TIERED=1): every call on the interpreter until a background process has
  compiled it; False (PRIMC_TIERED=0): compile, then run.
- `keep_transforms` (default True; PRIMC_KEEP_TRANSFORMS=0 turns it off): a transform
  called outside `jit` (`grad(f)(x)` in a loop) traces, differentiates and optimizes once
  per function, state and signature, then runs the kept program (`primc/kept.py`).
- `compile_hot_transforms` (default True; PRIMC_COMPILE_HOT=0 turns it off): a kept
  program called often is compiled (tiered: the interpreter serves until it is).
- `store_transforms` (default True; PRIMC_STORE_TRANSFORMS=0 turns it off): a kept
  program is stored in the cache directory, so a new process's first call of the same
  transform of the same trace loads it instead of making it (`primc/stored.py`).
- `interpret` (PRIMC_INTERPRET=1): `jit` runs every new signature on the reference
  interpreter instead of compiling it (tests run programs both ways with it).
- `perf_map` (PRIMC_PERF_MAP=1): each kernel compiled by LLVM is named, with its address
  and size, in `/tmp/perf-<pid>.map`, so Linux `perf` profiles show kernels by name
  (numba's kernels: NUMBA_ENABLE_PROFILING=1).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


class Config:
  """The settings above, each an attribute (a plain class: a dataclass costs ~0.4 ms of
  `import primc`)."""

  _DEFAULTS = {
    "optimize_transforms": lambda: True,
    "tiered": lambda: {"1": True, "0": False}.get(os.environ.get("PRIMC_TIERED", "")),
    "interpret": lambda: os.environ.get("PRIMC_INTERPRET") == "1",
    "keep_transforms": lambda: os.environ.get("PRIMC_KEEP_TRANSFORMS") != "0",
    "compile_hot_transforms": lambda: os.environ.get("PRIMC_COMPILE_HOT") != "0",
    "store_transforms": lambda: os.environ.get("PRIMC_STORE_TRANSFORMS") != "0",
    # a kernel the LLVM renderer fails on raises, instead of being compiled by numba with
    # a warning (the test suite sets it: a renderer bug must fail a test, not hide behind
    # the fallback); read from the environment, so compile workers inherit it
    "strict_kernels": lambda: os.environ.get("PRIMC_STRICT_KERNELS") == "1",
    "perf_map": lambda: os.environ.get("PRIMC_PERF_MAP") == "1",
  }

  def __init__(self, **settings):
    for name, default in self._DEFAULTS.items():
      setattr(self, name, settings.pop(name) if name in settings else default())
    for name, value in settings.items():
      setattr(self, name, value)  # (refused, by name)

  def __setattr__(self, name, value):
    """Refuses a setting primc does not have (`config.interpet = True` would otherwise be
    a silent no-op), naming the closest one."""
    names = list(self._DEFAULTS)
    if name not in names:
      import difflib  # (only for this message)

      close = difflib.get_close_matches(name, names, n=1)
      hint = f"; did you mean {close[0]!r}?" if close else f" (settings: {', '.join(names)})"
      raise AttributeError(f"primc.config has no setting {name!r}{hint}")
    object.__setattr__(self, name, value)

  def __repr__(self):
    return f"Config({', '.join(f'{n}={getattr(self, n)!r}' for n in self._DEFAULTS)})"

  def __eq__(self, other):
    return type(other) is Config and vars(other) == vars(self)


config = Config()


class _Log:
  """The "primc" logger, `logging` imported at its first message: a transform's first
  call does not import it (~2 ms)."""

  def __getattr__(self, name):
    import logging

    return getattr(logging.getLogger("primc"), name)


log = _Log()


@contextlib.contextmanager
def raw_transforms() -> Iterator[None]:
  """Within this block, transforms return unoptimized programs."""
  old = config.optimize_transforms
  config.optimize_transforms = False
  try:
    yield
  finally:
    config.optimize_transforms = old
