"""Timing helpers shared by the benchmarks: medians of repeated calls, and the
environment of a fresh measured process."""
import os
import statistics
import time


def child_env(**values) -> dict:
  """The environment of a measured fresh process: this one's, with `values`, and Python
  allowed to keep compiled bytecode (an installed package's modules are compiled when it
  is installed; with PYTHONDONTWRITEBYTECODE=1 an editable primc recompiled its modules'
  source in every process, ~50 ms of each first call, a cost no user pays)."""
  env = dict(os.environ, **values)
  env.pop("PYTHONDONTWRITEBYTECODE", None)
  return env


def median_time(fn, *args, repeat=15, warmup=2, min_time=0.0):
  """Median wall time of fn(*args) in seconds (after warm-up calls)."""
  for _ in range(warmup):
    fn(*args)
  times = []
  start = time.perf_counter()
  while len(times) < repeat or time.perf_counter() - start < min_time:
    t0 = time.perf_counter()
    fn(*args)
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def fmt(seconds):
  if seconds < 1e-3:
    return f"{seconds * 1e6:.1f} µs"
  return f"{seconds * 1e3:.2f} ms"
