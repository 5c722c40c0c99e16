"""How primc starts its worker processes (kernel compile workers, tiered compiles): a
command that imports this very primc, however it is installed, and nothing else.

A worker runs `python -c BOOT LOCATIONS MODULE ARGS...`. LOCATIONS (JSON) names the files
of the packages `primc`, `primc.codegen` and `primc.passes` as this process imported them;
BOOT finds those three packages there (a finder first on `sys.meta_path`) and every other
module as Python would. Nothing goes on PYTHONPATH: a folder put there (the installed
`site-packages/primc`, say) would shadow the modules named like its files (`numpy.py`
there is `primc.numpy`). PYTHONSAFEPATH keeps the working directory off the path (a
checkout of another primc there would be found first), and `primc` is made from its spec
unexecuted: its `__init__` imports the front ends (~60 ms of a worker's ~0.25 s start),
which a worker never uses.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys

PACKAGES = ("primc", "primc.codegen", "primc.passes")

BOOT = """\
import sys
if sys.path and sys.path[0] == "":  # Python 3.10, which has no PYTHONSAFEPATH
    del sys.path[0]
import importlib.util, json
LOCATIONS = json.loads(sys.argv[1])
class PrimcHere:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in LOCATIONS:
            return None
        origin, search = LOCATIONS[name]
        return importlib.util.spec_from_file_location(name, origin,
                                                      submodule_search_locations=search)
sys.meta_path.insert(0, PrimcHere)
sys.modules["primc"] = importlib.util.module_from_spec(PrimcHere.find_spec("primc"))
module, args = sys.argv[2], sys.argv[3:]
sys.argv = [module, *args]
sys.exit(importlib.import_module(module).main(args))
"""


@functools.cache
def locations() -> str:
  """The JSON of where this process found primc's packages: {name: [origin, path]}."""
  found = {}
  for name in PACKAGES:
    spec = importlib.import_module(name).__spec__
    found[name] = [spec.origin, list(spec.submodule_search_locations or [])]
  return json.dumps(found)


def command(module: str, *args: str) -> list[str]:
  """The command line of a worker that runs `module.main(args)` (a module of primc's)."""
  return [sys.executable, "-c", BOOT, locations(), module, *args]


def environment(cache_dir: str | None) -> dict[str, str]:
  """A worker's environment: this process's, with `cache_dir` as its cache."""
  return dict(os.environ, PRIMC_CACHE_DIR=cache_dir or "", PYTHONSAFEPATH="1")


def main(names: list[str]) -> int:
  """Run as a worker (`command("primc.codegen.spawn", NAME...)`): prints the file each
  named module is imported from there, as JSON (what a worker finds)."""
  print(json.dumps({name: importlib.import_module(name).__file__ for name in names}))
  return 0
