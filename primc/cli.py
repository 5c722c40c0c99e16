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
import inspect
import os
import sys
import textwrap
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


class TargetError(Exception):
  """The target's own code failed to import: one line naming it and the error, exit 1."""

  def __init__(self, path: str, error: Exception):
    first = str(error).splitlines()[0] if str(error) else ""
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
      where = f" ({error.filename}:{error.lineno})"
    super().__init__(f"cannot import {path}: {type(error).__name__}: {first}{where}")


def load_module(path: str):
  if path.endswith(".py") or os.sep in path:
    name = "primc_target_" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or not os.path.exists(path):
      raise UsageError(f"no such file: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
      spec.loader.exec_module(module)
    except Exception as e:  # its code raised (a SyntaxError, an error at import)
      raise TargetError(path, e) from None
    return module
  if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` finds modules
    sys.path.insert(0, os.getcwd())
  try:
    return importlib.import_module(path)
  except ModuleNotFoundError as e:
    if e.name and path.startswith(e.name):  # the target itself, not one of its imports
      raise UsageError(f"no module named {path!r}") from None
    raise TargetError(path, e) from None
  except Exception as e:  # its code raised (a SyntaxError, an error at import)
    raise TargetError(path, e) from None


def load_target(target: str):
  """(module, [(name, object)]) for `module`, `module:name`, `file.py` or `file.py:name`."""
  path, _, name = target.partition(":") if not target.endswith(".py") else (target, "", "")
  module = load_module(path)
  if name:
    try:
      obj = getattr(module, name)
    except AttributeError:
      raise UsageError(f"{path} has no attribute {name!r}") from None
    if not callable(obj):
      raise UsageError(f"{path}:{name} is not a function")
    return module, [(name, obj)]
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
    print(
      "primc warmup: no functions declared for warm-up (use @primc.jit(warmup=[...]))",
      file=sys.stderr,
    )
    return 1
  rows = []
  start = time.perf_counter()
  for i, (name, fn, sig) in enumerate(jobs, 1):
    before = primc.cache_stats()
    t0 = time.perf_counter()
    tiered, fn.tiered = fn.tiered, False  # compile here, whatever the function asks for
    try:
      fn.precompile(*example_args(sig))  # from the signature: nothing runs
      after = primc.cache_stats()
      built = lambda s: s.get("kernel_compiles", 0) + s.get("worker_compiles", 0)
      compiled = built(after) > built(before)
      status = "compiled" if compiled else "cached"
    except Exception as e:  # reported in the summary, exit code non-zero
      status = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
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
  print(
    f"compiled {counts['compiled']}, already cached {counts['cached']}, failed "
    f"{counts['failed']} in {time.perf_counter() - start:.2f}s"
  )
  st = store.current()
  if counts["compiled"] and st.write_dir != st.root:
    print(
      f"primc warmup: nothing was saved: the cache directory {st.root} is "
      f"{'read-only' if st.read_dirs else 'unusable'} (see `primc cache info`; "
      f"PRIMC_CACHE_DIR chooses another)",
      file=sys.stderr,
    )
    return 1
  return 1 if counts["failed"] else 0


# ---------------------------------------------------------------------------------------
# cache


def _cache(args) -> int:
  st = store.current()
  root = st.root
  entries = st.entries(root)
  if args.action == "info":
    state = (
      "read-write"
      if st.write_dir == root
      else "read-only"
      if st.read_dirs
      else "refused (compiling in memory)"
    )
    print(f"cache directory: {root} ({state})")
    print("environment (a cached entry is used only in the same one):")
    for part in cache.environment().split(" "):
      key, _, value = part.partition("=")
      if key == "cpu":  # the name, then its features, wrapped
        name, _, features = value.partition(":")
        print(f"  cpu: {name}")
        print(
          textwrap.fill(
            " ".join(features.split(":")), 88, initial_indent="    ", subsequent_indent="    "
          )
        )
      else:
        print(f"  {key}: {value}" if value else f"  {part}")
    for kind in ("module", "plan", "program"):
      chosen = [e for e in entries if e["kind"] == kind]
      print(
        f"{kind + 's':8s} {len(chosen):5d} entries {sum(e['bytes'] for e in chosen) / 1e6:9.2f} MB"
      )
    print(f"size cap {store.max_bytes() / 1e6:.0f} MB (PRIMC_CACHE_MAX_BYTES)")
    return 0
  if args.action == "list":
    for e in entries:
      stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["used"]))
      print(f"{e['kind']:7s} {e['bytes']:10d}  {stamp}  {e['key']}  ({len(e['files'])} files)")
    return 0
  if args.action in ("clear", "prune"):
    target = (
      0
      if args.action == "clear"
      else (store.max_bytes() if args.max_bytes is None else args.max_bytes)
    )
    removed, freed = st.prune(target, entries)
    print(f"removed {removed} cache entries ({freed / 1e6:.2f} MB) from {root}")
    if st.in_use:  # left on purpose: a process has them loaded (clear did not clear them)
      print(
        f"primc cache {args.action}: {st.in_use} modules in use by a running process were left",
        file=sys.stderr,
      )
    if st.not_removed:
      print(
        f"primc cache {args.action}: {st.not_removed} entries could not be removed "
        f"(is the directory read-only?)",
        file=sys.stderr,
      )
    return 1 if st.not_removed or (args.action == "clear" and st.in_use) else 0
  bad = st.check_all()
  kept = 0
  for path, why in bad:
    gone = args.fix and store.remove(path)
    kept += not gone
    note = " (removed)" if gone else " (could not be removed)" if args.fix else ""
    print(f"bad: {os.path.relpath(path, root)}: {why}{note}")
  total = sum(len(e["files"]) for e in entries)
  print(f"verified {total} files: {total - len(bad)} good, {len(bad)} bad")
  return 1 if kept else 0


# ---------------------------------------------------------------------------------------
# show


def _show(args) -> int:
  _, objects = load_target(args.target)
  if len(objects) != 1:
    raise UsageError("name one function (TARGET:function)")
  name, fn = objects[0]
  fun = fn.fun if isinstance(fn, Jitted) else fn
  call_args = args.arg or (
    example_args(fn.warmup[0]) if isinstance(fn, Jitted) and fn.warmup else None
  )
  if call_args is None:
    raise UsageError("give the argument shapes with --arg f32[2,2] ...")
  try:
    inspect.signature(fun).bind(*call_args)
  except TypeError as e:
    raise UsageError(f"{len(call_args)} --arg for {name}: {e}") from None
  except ValueError:  # (no signature to check: a builtin)
    pass
  program = primc.make_program(fun)(*call_args)
  if args.stage in ("traced", "jvp", "linearized", "grad"):
    text = {
      "traced": lambda: program,
      "jvp": lambda: ad.jvp_program(program),
      "linearized": lambda: "\n".join(map(str, ad.linearize_program(program))),
      "grad": lambda: ad.vjp_program(program),
    }[args.stage]()
  elif args.stage == "optimized":  # whole, control flow included
    text = passes.optimize(inline_calls(program))
  else:
    optimized, fused, plan = build_plan(program)
    text = {
      "optimized": optimized,
      "fused": fused,
      "source": plan.source,
      "fusion": "why each region starts (every region it could not join, and why):\n"
      + "\n".join(fused.reasons),
    }[args.stage]
  print(text)
  return 0


CACHE_ACTIONS = """actions:
  info     the directory, whether it is writable, the environment entries are tied to,
           and the entries' count and size
  list     every entry: kind, bytes, last use, key
  clear    remove every entry (exit 1 if some could not be removed)
  verify   check every file against its checksum (--fix removes the bad ones)
  prune    evict the least recently used entries down to --max-bytes"""

CACHE_HELP = """the cache: compiled kernels and plans, in PRIMC_CACHE_DIR (default: the user's
cache folder, platformdirs' user_cache_dir("primc")); PRIMC_CACHE_MAX_BYTES caps its
size. A read-only cache is used as it is, new compiles going to a private folder."""


def _size(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
  if value < 0:
    raise argparse.ArgumentTypeError(f"a size cannot be negative: {value}")
  return value


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
    prog="primc",
    description="primc's command line: warm up, inspect and print.",
    epilog=CACHE_HELP,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  parser.add_argument("--version", action="store_true", help="print versions and exit")
  sub = parser.add_subparsers(dest="command")
  warm = sub.add_parser(
    "warmup",
    help="compile declared functions into the cache",
    description="Compiles every signature declared with "
    "@primc.jit(warmup=[...]) in the targets into the cache, from the "
    "signatures alone (nothing runs). Exit 1 if one failed or the cache "
    "could not be written.",
    epilog=CACHE_HELP,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  warm.add_argument("targets", nargs="+", help="module, module:function, file.py[:function]")
  cached = sub.add_parser(
    "cache",
    help="inspect, clear, verify or shrink the cache directory",
    description=CACHE_ACTIONS,
    epilog=CACHE_HELP,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  cached.add_argument("action", choices=["info", "list", "clear", "verify", "prune"])
  cached.add_argument("--fix", action="store_true", help="verify: remove bad files")
  cached.add_argument(
    "--max-bytes",
    type=_size,
    default=None,
    help="prune: the size to evict down to, in bytes (default PRIMC_CACHE_MAX_BYTES)",
  )
  show = sub.add_parser("show", help="print a stage of a function's program")
  show.add_argument("target", help="module:function or file.py:function")
  show.add_argument(
    "--arg",
    type=arg_spec,
    action="append",
    default=[],
    help="an argument's dtype and shape, e.g. f32[2,2] (repeat per argument)",
  )
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
  except TargetError as e:
    print(f"primc {args.command}: {e}", file=sys.stderr)
    return 1
  except primc.PrimcError as e:  # the user's program: the message says it all
    print(f"primc {args.command}: {e}", file=sys.stderr)
    return 1
  except BrokenPipeError:  # (`primc show ... | head -1`): the reader has what it wanted
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
    return 0
  except Exception as e:  # anything else: one line (PRIMC_TRACEBACK=1 shows the whole)
    if os.environ.get("PRIMC_TRACEBACK") == "1":
      raise
    first = str(e).splitlines()[0] if str(e) else ""
    print(
      f"primc {args.command}: {type(e).__name__}: {first} (PRIMC_TRACEBACK=1 shows where)",
      file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
  sys.exit(main())
