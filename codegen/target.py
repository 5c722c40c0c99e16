"""The CPU primc's kernels are compiled for: this machine's, or one named by PRIMC_CPU.

PRIMC_CPU takes an LLVM CPU name (`haswell`, `skylake-avx512`, `znver3`, `x86-64-v3`,
...) and compiles every kernel for it, with its default features, as if on such a
machine: numba's kernels too (NUMBA_CPU_NAME), and primc's OpenBLAS runs the kernels
OpenBLAS has for that CPU (OPENBLAS_CORETYPE). On an AVX-512 machine, `PRIMC_CPU=haswell`
measures what an AVX2 machine runs (`make bench-peers`). A kernel compiled for a CPU
this machine lacks cannot run here: the name must be this machine's or an older one.
The name is part of every cache key.
"""

from __future__ import annotations

import functools
import os

# OpenBLAS's kernels for an LLVM CPU name (OPENBLAS_CORETYPE): its Haswell kernels are
# its AVX2 ones, SkylakeX its AVX-512 ones
OPENBLAS_CORES = {
  **dict.fromkeys(
    ("haswell", "broadwell", "skylake", "alderlake", "znver1", "znver2", "znver3", "x86-64-v3"),
    "Haswell",
  ),
  **dict.fromkeys(
    (
      "skylake-avx512",
      "cascadelake",
      "cooperlake",
      "icelake-server",
      "icelake-client",
      "sapphirerapids",
      "znver4",
      "x86-64-v4",
    ),
    "SkylakeX",
  ),
  **dict.fromkeys(("sandybridge", "ivybridge", "x86-64-v2"), "Sandybridge"),
}


def named() -> str | None:
  """The CPU PRIMC_CPU names, if any."""
  return os.environ.get("PRIMC_CPU") or None


@functools.cache
def cpu() -> tuple[str, str]:
  """(LLVM CPU name, features) kernels are compiled for; features "" for a named CPU
  (its defaults)."""
  from llvmlite import binding  # LLVM's library, loaded at the first compile

  name = named()
  if name:
    return name, ""
  return binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()


# LLVM CPU names whose vector units have 64-bit integer min/max (AVX-512)
AVX512 = {name for name, core in OPENBLAS_CORES.items() if core == "SkylakeX"}


def vector_int64_minmax() -> bool:
  """Whether the kernels' CPU has vector min/max of 64-bit integers (AVX-512; not AVX2,
  not NEON), which loops that clamp int64 indices need to vectorize."""
  name, features = cpu()
  return name in AVX512 if named() else "+avx512f" in features.split(",")


def configure_numba() -> None:
  """Points numba at the named CPU (before numba is imported: it reads its environment
  once)."""
  name = named()
  if name:
    os.environ.setdefault("NUMBA_CPU_NAME", name)


def openblas_core() -> str | None:
  """The OpenBLAS kernels for the named CPU (None: OpenBLAS picks this machine's)."""
  name = named()
  return OPENBLAS_CORES.get(name) if name else None
