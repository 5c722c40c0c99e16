"""Timing helpers shared by the benchmarks: medians of repeated calls."""
import statistics
import time


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
