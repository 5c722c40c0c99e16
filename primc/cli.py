"""The `primc` command line.

  primc show TARGET --arg f32[2,2] [--arg ...] [--stage traced|jvp|linearized|vjp]

TARGET is `pkg.module:function` or `path/to/file.py:function`. Each `--arg` gives one
positional argument's dtype and shape (`f32[2,2]`, `f64[]`, `i32[5]`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import sys

import numpy as np

_DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "bool": "bool"}


def parse_arg_spec(spec: str) -> np.ndarray:
  m = re.fullmatch(r"(\w+)\[([\d,\s]*)\]", spec.strip())
  if not m or m.group(1) not in _DTYPES:
    raise argparse.ArgumentTypeError(f"bad --arg {spec!r}: expected like f32[2,2] "
                                     f"(dtypes: {', '.join(_DTYPES)})")
  shape = tuple(int(d) for d in m.group(2).split(",") if d.strip())
  return np.zeros(shape, _DTYPES[m.group(1)])


def load_target(target: str):
  """Imports `pkg.module:name` or `path/file.py:name` and returns the named object."""
  path, _, name = target.rpartition(":")
  if not path or not name:
    raise SystemExit(f"primc: target {target!r} must be module:function or file.py:function")
  if path.endswith(".py") or os.sep in path:
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    if spec is None:
      raise SystemExit(f"primc: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
  else:
    module = importlib.import_module(path)
  try:
    return getattr(module, name)
  except AttributeError:
    raise SystemExit(f"primc: {path} has no attribute {name!r}") from None


def _show(args) -> int:
  import primc
  from primc import ad
  fn = load_target(args.target)
  program = primc.make_program(fn)(*args.arg)
  stages = {
      "traced": lambda: str(program),
      "jvp": lambda: str(ad.jvp_program(program)),
      "linearized": lambda: "\n".join(map(str, ad.linearize_program(program))),
      "vjp": lambda: str(ad.vjp_program(program)),
  }
  print(stages[args.stage]())
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="primc", description=__doc__.split("\n")[1])
  parser.add_argument("--version", action="store_true", help="print versions and exit")
  sub = parser.add_subparsers(dest="command")
  show = sub.add_parser("show", help="print a stage of a function's program")
  show.add_argument("target", help="module:function or file.py:function")
  show.add_argument("--arg", type=parse_arg_spec, action="append", default=[],
                    help="an argument's dtype and shape, e.g. f32[2,2] (repeat per argument)")
  show.add_argument("--stage", choices=["traced", "jvp", "linearized", "vjp"], default="traced")
  args = parser.parse_args(argv)
  if args.version:
    import numba
    import primc
    print(f"primc {primc.__version__} (numba {numba.__version__}, numpy {np.__version__})")
    return 0
  if args.command == "show":
    return _show(args)
  parser.print_help()
  return 2


if __name__ == "__main__":
  sys.exit(main())
