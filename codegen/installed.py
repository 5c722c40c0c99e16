"""Installed distributions, read from their `.dist-info` folders on `sys.path`, and a
package's C extension loaded without importing the package.

`importlib.metadata` answers the same questions, but importing it (email, zipfile, csv,
pathlib...) costs ~25 ms, a fifth of a warm first call; a cache key and the thread pool
need only a version and one file's path. A distribution installed without a `.dist-info`
folder (a source tree on `sys.path`) is answered by importing it.
"""

from __future__ import annotations

import functools
import glob
import importlib
import importlib.machinery
import importlib.util
import os
import sys


@functools.cache
def dist_info(dist: str) -> str | None:
  """The `.dist-info` folder of distribution `dist` (its normalized name), or None."""
  for entry in sys.path:
    found = sorted(glob.glob(os.path.join(entry or os.curdir, f"{dist}-*.dist-info")))
    if found:
      return found[-1]
  return None


def version(dist: str) -> str:
  """The installed version of distribution `dist` (its top-level package has its name)."""
  folder = dist_info(dist)
  if folder is None:
    return str(importlib.import_module(dist).__version__)
  return os.path.basename(folder)[len(dist) + 1 : -len(".dist-info")]


def file_path(dist: str, name: str, prefix: bool = False) -> str | None:
  """The path of the file called `name` (`prefix`: whose name starts with `name`) that
  distribution `dist` installed (from its RECORD), or None."""
  folder = dist_info(dist)
  if folder is None:
    return None
  try:
    with open(os.path.join(folder, "RECORD"), encoding="utf-8") as f:
      rows = [line.rsplit(",", 2)[0] for line in f]
  except OSError:
    return None
  site = os.path.dirname(folder)
  for row in rows:
    path = row.strip('"')
    base = os.path.basename(path)
    if base == name or prefix and base.startswith(name):
      return os.path.normpath(os.path.join(site, path))
  return None


def extension(name: str):
  """The C extension module `name` (`numba._helperlib`), loaded from its file without
  importing its package (numba's import costs ~0.25 s), and registered under its name:
  the package, imported later, uses the same module."""
  module = sys.modules.get(name)
  if module is not None:
    return module
  spec = importlib.util.find_spec(name.split(".")[0])
  if spec is None or spec.origin is None:
    raise ImportError(f"{name.split('.')[0]} is not installed")
  folder = os.path.join(os.path.dirname(spec.origin), *name.split(".")[1:-1])
  leaf = name.rsplit(".", 1)[1]
  paths = [
    p
    for suffix in importlib.machinery.EXTENSION_SUFFIXES
    for p in glob.glob(os.path.join(folder, leaf + suffix))
  ]
  if not paths:
    raise ImportError(f"no {name} extension under {folder}")
  loader = importlib.machinery.ExtensionFileLoader(name, paths[0])
  module = importlib.util.module_from_spec(
    importlib.util.spec_from_file_location(name, paths[0], loader=loader)
  )
  loader.exec_module(module)
  sys.modules[name] = module
  return module
