"""The `primc` command line.

  primc warmup TARGET...                 compile the functions TARGET declares for warm-up
  primc cache info|list|clear|verify|prune   inspect, empty, check or shrink the cache
  primc show TARGET --stage STAGE        print a stage of a function's program

TARGET is `pkg.module`, `pkg.module:function`, `path/to/file.py` or `file.py:function`.
Functions declare warm-up signatures with `@primc.jit(warmup=[("f32[2,2]", "f32[2]")])`;
`warmup` compiles every such signature of every jitted function in the target into the
cache (`--arg` specs give the signature for `show` of a plain function).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import re
import sys
import time

import numpy as np

import primc
from primc import ad, passes
from primc.custom import inline_calls
from primc.codegen import cache, store
from primc.compile import Jitted, build_plan, example_args, parse_arg_spec

STAGES = ("traced", "jvp", "linearized", "grad", "optimized", "fused", "fusion", "source")


def arg_spec(spec: str) -> np.ndarray:
  try:
    return parse_arg_spec(spec)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None


class UsageError(Exception):
  """A bad argument: the command prints its usage and exits 2."""


def load_module(path: str):
  if path.endswith(".py") or os.sep in path:
    name = "primc_target_" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or not os.path.exists(path):
      raise UsageError(f"no such file: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    return module
  try:
    return importlib.import_module(path)
  except ModuleNotFoundError as e:
    if e.name and path.startswith(e.name):  # the target itself, not one of its imports
      raise UsageError(f"no module named {path!r}") from None
    raise


def load_target(target: str):
  """(module, [(name, object)]) for `module`, `module:name`, `file.py` or `file.py:name`."""
  path, _, name = target.partition(":") if not target.endswith(".py") else (target, "", "")
  module = load_module(path)
  if name:
    try:
      return module, [(name, getattr(module, name))]
    except AttributeError:
      raise UsageError(f"{path} has no attribute {name!r}") from None
  return module, list(vars(module).items())


def _jitted(objects):
  return [(n, o) for n, o in objects if isinstance(o, Jitted) and o.warmup]


# ---------------------------------------------------------------------------------------
# warmup

def _warmup(args) -> int:
  jobs = []
  for target in args.targets:
    _, objects = load_target(target)
    for name, fn in _jitted(objects):
      jobs += [(f"{target.split(':')[0]}:{name}", fn, sig) for sig in fn.warmup]
  if not jobs:
    print("primc warmup: no functions declared for warm-up (use @primc.jit(warmup=[...]))",
          file=sys.stderr)
    return 1
  rows = []
  start = time.perf_counter()
  for i, (name, fn, sig) in enumerate(jobs, 1):
    before = primc.cache_stats()
    t0 = time.perf_counter()
    tiered, fn.tiered = fn.tiered, False  # compile here, whatever the function asks for
    try:
      fn(*example_args(sig))
      after = primc.cache_stats()
      built = lambda s: s.get("kernel_compiles", 0) + s.get("worker_compiles", 0)
      compiled = built(after) > built(before)
      status = "compiled" if compiled else "cached"
    except Exception as e:  # reported in the summary, exit code non-zero
      status = f"failed: {type(e).__name__}: {e}"
    finally:
      fn.tiered = tiered
    dt = time.perf_counter() - t0
    rows.append((name, ", ".join(map(str, sig)), status, dt))
    if sys.stderr.isatty():  # progress for a person watching; nothing in logs and pipes
      bar = "#" * (30 * i // len(jobs))
      print(f"\r[{bar:<30}] {i}/{len(jobs)} {name}", end="", file=sys.stderr, flush=True)
  if sys.stderr.isatty():
    print(file=sys.stderr)
  width = max(len(r[0]) for r in rows)
  print(f"{'function':<{width}}  {'signature':<28} {'status':<10} time")
  for name, sig, status, dt in rows:
    print(f"{name:<{width}}  {sig:<28} {status:<10} {dt:.2f}s")
  counts = {k: sum(r[2].startswith(k) for r in rows) for k in ("compiled", "cached", "failed")}
  print(f"compiled {counts['compiled']}, already cached {counts['cached']}, failed "
        f"{counts['failed']} in {time.perf_counter() - start:.2f}s")
  return 1 if counts["failed"] else 0


# ---------------------------------------------------------------------------------------
# cache

def _cache(args) -> int:
  st = store.current()
  root = st.root
  entries = st.entries(root)
  if args.action == "info":
    state = ("read-write" if st.write_dir == root else
             "read-only" if st.read_dirs else "refused (compiling in memory)")
    print(f"cache directory: {root} ({state})")
    print(f"environment: {cache.environment()}")
    for kind in ("module", "plan"):
      chosen = [e for e in entries if e["kind"] == kind]
      print(f"{kind + 's':8s} {len(chosen):5d} entries {sum(e['bytes'] for e in chosen) / 1e6:9.2f} MB")
    print(f"size cap {store.max_bytes() / 1e6:.0f} MB (PRIMC_CACHE_MAX_BYTES)")
    return 0
  if args.action == "list":
    for e in entries:
      stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["used"]))
      print(f"{e['kind']:7s} {e['bytes']:10d}  {stamp}  {e['key']}  ({len(e['files'])} files)")
    return 0
  if args.action == "clear":
    removed = st.prune(0, entries)[0]
    print(f"removed {removed} cache entries from {root}")
    return 0
  if args.action == "prune":
    target = store.max_bytes() if args.max_bytes is None else args.max_bytes
    removed, freed = st.prune(target, entries)
    print(f"removed {removed} cache entries ({freed / 1e6:.2f} MB) from {root}")
    return 0
  bad = st.check_all()
  for path, why in bad:
    print(f"bad: {os.path.relpath(path, root)}: {why}" + (" (removed)" if args.fix else ""))
    if args.fix:
      store.remove(path)
  total = sum(len(e["files"]) for e in entries)
  print(f"verified {total} files: {total - len(bad)} good, {len(bad)} bad")
  return 1 if bad and not args.fix else 0


# ---------------------------------------------------------------------------------------
# show

def _show(args) -> int:
  _, objects = load_target(args.target)
  if len(objects) != 1:
    raise UsageError("show: name one function (TARGET:function)")
  name, fn = objects[0]
  fun = fn.fun if isinstance(fn, Jitted) else fn
  call_args = args.arg or (example_args(fn.warmup[0]) if isinstance(fn, Jitted) and fn.warmup
                           else None)
  if call_args is None:
    raise UsageError("show: give the argument shapes with --arg f32[2,2] ...")
  program = primc.make_program(fun)(*call_args)
  if args.stage in ("traced", "jvp", "linearized", "grad"):
    text = {"traced": lambda: program, "jvp": lambda: ad.jvp_program(program),
            "linearized": lambda: "\n".join(map(str, ad.linearize_program(program))),
            "grad": lambda: ad.vjp_program(program)}[args.stage]()
  elif args.stage == "optimized":  # whole, control flow included
    text = passes.optimize(inline_calls(program))
  else:
    optimized, fused, plan = build_plan(program)
    text = {"optimized": optimized, "fused": fused, "source": plan.source,
            "fusion": "why each region starts (every region it could not join, and why):\n"
                      + "\n".join(fused.reasons)}[args.stage]
  print(text)
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="primc", description="primc command line")
  parser.add_argument("--version", action="store_true", help="print versions and exit")
  sub = parser.add_subparsers(dest="command")
  warm = sub.add_parser("warmup", help="compile declared functions into the cache")
  warm.add_argument("targets", nargs="+", help="module, module:function, file.py[:function]")
  cached = sub.add_parser("cache", help="inspect, clear, verify or shrink the cache directory")
  cached.add_argument("action", choices=["info", "list", "clear", "verify", "prune"])
  cached.add_argument("--fix", action="store_true", help="verify: remove bad files")
  cached.add_argument("--max-bytes", type=int, default=None,
                      help="prune: the size to evict down to (default PRIMC_CACHE_MAX_BYTES)")
  show = sub.add_parser("show", help="print a stage of a function's program")
  show.add_argument("target", help="module:function or file.py:function")
  show.add_argument("--arg", type=arg_spec, action="append", default=[],
                    help="an argument's dtype and shape, e.g. f32[2,2] (repeat per argument)")
  show.add_argument("--stage", choices=STAGES, default="traced")
  args = parser.parse_args(argv)
  if args.version:
    print(f"primc {primc.__version__} ({cache.versions()})")
    return 0
  commands = {"warmup": (_warmup, warm), "cache": (_cache, cached), "show": (_show, show)}
  if args.command not in commands:
    parser.print_usage(sys.stderr)
    print("primc: error: a command is required (warmup, cache or show)", file=sys.stderr)
    return 2
  run, sub_parser = commands[args.command]
  try:
    return run(args)
  except UsageError as e:
    sub_parser.print_usage(sys.stderr)
    print(f"primc {args.command}: error: {e}", file=sys.stderr)
    return 2
  except primc.PrimcError as e:  # the user's program: the message says it all
    print(f"primc {args.command}: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main())
