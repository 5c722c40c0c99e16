"""Threads for primc's kernels: how many, and the pool that runs a step's tasks.

How many: the CPUs this process may run on (`sched_getaffinity`), fewer where a cgroup
CPU quota (a container's `--cpus`, a CI runner's limit) allows less; PRIMC_NUM_THREADS
(else NUMBA_NUM_THREADS) overrides. The calling thread is one of them.

Which pool: on Linux, primc's own (`codegen.pool`: tasks claimed a few at a time by the
caller and the workers, bounded spinning, then the futex), which never waits for a
thread the scheduler has not run. Elsewhere (or with PRIMC_THREADS=numba), numba's pool,
reached through its `parallel_for`, on a layer chosen so that a process that has run
threaded kernels can still fork:

numba picks its layer once, when it first starts its thread pool: TBB if it can load
it, else OpenMP, else its own workqueue (unless NUMBA_THREADING_LAYER names one).
GNU OpenMP does not survive fork: numba kills a forked child that enters a threaded
region, so `os.fork()` children die and `multiprocessing.Pool` hangs. TBB survives fork.
The `tbb` wheel installs libtbb under `<prefix>/lib`, where the dynamic loader does not
look: `_tbb_pool` loads it from the wheel's files, then numba's TBB pool (the C
extension `numba.np.ufunc.tbbpool`) by itself, without importing numba (~0.2 s). The
module is registered under its own name, so numba, imported later, finds the pool
already running. Where that fails, or where the user chose a layer or numba's pool
already runs, numba starts (or keeps) its pool its own way; where TBB is missing,
OpenMP runs with a bounded GOMP_SPINCOUNT.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import os
import sys
import threading
import time

from primc.codegen import installed
from primc.codegen import pool as pool_mod

_lock = threading.Lock()
_pool: Pool | None = None
GOMP_SPINCOUNT = "10000"
TBB_INTERFACE_MIN = 12060  # numba refuses older TBB runtimes
_LIBTBB = {"linux": "libtbb.so.12", "win32": "tbb12.dll", "darwin": "libtbb.12.dylib"}


@dataclasses.dataclass(frozen=True)
class Pool:
  """A running thread pool: its layer's name and the addresses of its C functions
  `parallel_for(fn, args, dims, steps, data, inner_ndim, array_count, num_threads)` and
  `get_num_threads()` (numba's gufunc-style interface)."""

  layer: str
  parallel_for: int
  get_num_threads: int


def libtbb_path() -> str | None:
  """The libtbb of the installed `tbb` distribution, if there is one."""
  name = _LIBTBB.get(sys.platform)
  return installed.file_path("tbb", name) if name else None


def pool() -> Pool:
  """Starts numba's thread pool once per process (see the module docstring) and returns
  it."""
  global _pool
  with _lock:
    if _pool is None:
      _pool = (None if _numba_decides() else _tbb_pool()) or _numba_pool()
    return _pool


def own_pool() -> bool:
  """Whether primc's own pool (`codegen.pool`) runs the tasks: on Linux, unless
  PRIMC_THREADS=numba asks for numba's."""
  return os.environ.get("PRIMC_THREADS", "primc").lower() != "numba" and pool_mod.supported()


def layer() -> str:
  """The pool primc's threaded kernels run on: "primc", or numba's layer (which starts
  numba's pool)."""
  return "primc" if own_pool() else pool().layer


def num_threads() -> int:
  """How many threads run a step's tasks, the caller included: PRIMC_NUM_THREADS, else
  NUMBA_NUM_THREADS, else `available_cpus()`."""
  for name in ("PRIMC_NUM_THREADS", "NUMBA_NUM_THREADS"):
    env = os.environ.get(name)
    if env:
      return max(1, int(env))
  return available_cpus()


def available_cpus() -> int:
  """The CPUs this process may run on (its affinity, read each time), fewer where a
  cgroup CPU quota allows less (rounded up: a quota of 1.5 CPUs gives 2; read once per
  process, `_quota`)."""
  if hasattr(os, "sched_getaffinity"):
    count = len(os.sched_getaffinity(0))
  else:
    count = os.cpu_count() or 1
  quota = _quota()
  return max(1, min(count, quota) if quota else count)


def idle_cpus(window: float = 0.1, read=None) -> float | None:
  """How many of this process's CPUs (its affinity, at most `available_cpus()`) stood
  idle, on average, over the next `window` seconds, by Linux's /proc/stat; None where it
  cannot be read. The calling thread sleeps meanwhile: its own CPU counts as idle. Under
  a cgroup CPU quota, what its group left of the quota bounds it too (the group's own
  busy processes use it, whatever the host's CPUs do: `_group_usage`)."""
  read = read or _read_text
  group = _binding_group(read)
  first, used, start = _idle_ticks(read), _group_usage(read, group), time.perf_counter()
  if first is None:
    return None
  time.sleep(window)
  second, elapsed = _idle_ticks(read), time.perf_counter() - start
  if second is None:
    return None
  idle = (second - first) / (os.sysconf("SC_CLK_TCK") * elapsed)
  now = _group_usage(read, group)
  if used is not None and now is not None:
    idle = min(idle, group[0] - (now - used) / 1e6 / elapsed)
  return max(0.0, min(idle, float(available_cpus())))


def _idle_ticks(read) -> int | None:
  """The idle and iowait clock ticks of the CPUs this process may run on, summed."""
  text = read("/proc/stat")
  if not text or not hasattr(os, "sched_getaffinity"):
    return None
  mine, total = os.sched_getaffinity(0), 0
  for line in text.splitlines():
    name, _, fields = line.partition(" ")
    if name[:3] == "cpu" and name[3:].isdigit() and int(name[3:]) in mine:
      values = fields.split()
      if len(values) < 5 or not (values[3].isdigit() and values[4].isdigit()):
        return None  # (a format this does not know: unknown, not a guess)
      total += int(values[3]) + int(values[4])
  return total


@functools.cache
def _quota() -> int | None:
  """This process's cgroup CPU quota (files read once: every compile asks for it)."""
  return cgroup_cpu_quota(_read_text)


def _read_text(path: str) -> str | None:
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return None


def cgroup_cpu_quota(read, root: str = "/sys/fs/cgroup") -> int | None:
  """The CPU quota of this process's cgroups, in whole CPUs (the least along its path,
  rounded up), or None where none is set. `read(path)` gives a file's text or None.
  cgroup v2: `cpu.max` ("max 100000" or "150000 100000") in the process's group and each
  parent; v1: `cpu.cfs_quota_us` / `cpu.cfs_period_us` of the cpu controller."""
  group = _binding_group(read, root)
  return None if group is None else max(1, math.ceil(group[0] - 1e-9))


def _binding_group(read, root: str = "/sys/fs/cgroup") -> tuple[float, str] | None:
  """(quota in CPUs, exactly; the file of its group's CPU time used) of the cgroup whose
  quota is the least, or None where none is set: v2's `cpu.stat`, v1's `cpuacct.usage`
  beside the quota."""
  groups = read("/proc/self/cgroup") or ""
  limits = []
  for line in groups.splitlines():
    parts = line.split(":", 2)
    if len(parts) != 3:
      continue
    _, controllers, path = parts
    if controllers == "":  # v2
      for d in _ancestors(path):
        limits.append((_v2_quota(read(f"{root}{d}/cpu.max")), f"{root}{d}/cpu.stat"))
    elif "cpu" in controllers.split(","):
      for mount in (f"{root}/{controllers}", f"{root}/cpu", f"{root}/cpu,cpuacct"):
        for d in _ancestors(path):
          quota = _v1_quota(
            read(f"{mount}{d}/cpu.cfs_quota_us"), read(f"{mount}{d}/cpu.cfs_period_us")
          )
          limits.append((quota, f"{mount}{d}/cpuacct.usage"))
  limits = [g for g in limits if g[0]]
  return min(limits, key=lambda g: g[0]) if limits else None


def _group_usage(read, group) -> float | None:
  """The CPU time the `_binding_group` has used, in microseconds; None if unknown."""
  if group is None:
    return None
  text, v2 = read(group[1]) or "", group[1].endswith("/cpu.stat")
  if v2:  # "usage_usec N" among other lines; v1's cpuacct.usage: nanoseconds alone
    text = next((line[11:] for line in text.splitlines() if line[:11] == "usage_usec "), "")
  text = text.strip()
  return (int(text) if v2 else int(text) / 1000) if text.isdigit() else None


def _ancestors(path: str) -> list[str]:
  """ "/a/b" -> ["/a/b", "/a", ""]: the group and its parents, as path suffixes."""
  parts = [p for p in path.split("/") if p]
  return ["/" + "/".join(parts[:k]) if k else "" for k in range(len(parts), -1, -1)]


def _v2_quota(text: str | None) -> float | None:
  fields = (text or "").split()
  if len(fields) != 2 or fields[0] == "max":
    return None
  return _cpus(fields[0], fields[1])


def _v1_quota(quota: str | None, period: str | None) -> float | None:
  if quota is None or period is None or quota.strip().startswith("-"):
    return None
  return _cpus(quota, period)


def _cpus(quota: str, period: str) -> float | None:
  try:
    q, p = int(quota), int(period)
  except ValueError:
    return None
  return q / p if q > 0 and p > 0 else None


def _numba_decides() -> bool:
  """Whether numba's own choice applies: a layer named by the user, or a pool of numba's
  already running."""
  if os.environ.get("NUMBA_THREADING_LAYER", "default").lower() != "default":
    return True
  if "numba.core.config" in sys.modules:
    config = sys.modules["numba.core.config"]
    if str(config.THREADING_LAYER).lower() != "default":
      return True
  parallel = sys.modules.get("numba.np.ufunc.parallel")
  return bool(parallel is not None and parallel._is_initialized)


def _tbb_pool() -> Pool | None:
  """numba's TBB pool started without numba, or None where TBB or the extension is not
  there or too old."""
  path = libtbb_path()
  if path is None:
    return None
  try:
    libtbb = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # found later by its soname
    version = libtbb.TBB_runtime_interface_version
    version.restype = ctypes.c_int
    if version() < TBB_INTERFACE_MIN:
      return None
    lib = installed.extension("numba.np.ufunc.tbbpool")
  except (OSError, ImportError, AttributeError):
    return None
  count = num_threads()
  ctypes.CFUNCTYPE(None, ctypes.c_int)(lib.launch_threads)(count)
  ctypes.CFUNCTYPE(None, ctypes.c_int)(lib.set_num_threads)(count)  # this thread's count
  return Pool("tbb", lib.parallel_for, lib.get_num_threads)


def prepare_numba_layer() -> None:
  """Makes the layer numba picks when its pool starts (for primc's tasks, or for the
  program's own parallel numba code beside primc's pool) TBB, fork-safe, where the `tbb`
  wheel is installed; else OpenMP with a bounded spin. Nothing once numba's pool runs."""
  parallel = sys.modules.get("numba.np.ufunc.parallel")
  if parallel is not None and parallel._is_initialized:
    return
  os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)  # read when libgomp loads
  path = libtbb_path()
  if path is not None:
    try:
      ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # numba finds it by its soname
    except OSError:
      pass


def _numba_pool() -> Pool:
  """numba's pool started by numba (its own choice of layer, `prepare_numba_layer`)."""
  from llvmlite import binding

  prepare_numba_layer()
  import numba

  numba.get_num_threads()  # starts the pool
  addresses = [binding.address_of_symbol(s) for s in ("numba_parallel_for", "get_num_threads")]
  if not all(addresses):
    raise RuntimeError("numba's thread pool gave no parallel_for/get_num_threads")
  return Pool(numba.threading_layer(), *addresses)
