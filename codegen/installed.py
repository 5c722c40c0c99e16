"""Installed distributions, read from their `.dist-info` folders on `sys.path`.

`importlib.metadata` answers the same questions, but importing it (email, zipfile, csv,
pathlib...) costs ~25 ms, a fifth of a warm first call; a cache key and the thread pool
need only a version and one file's path. A distribution installed without a `.dist-info`
folder (a source tree on `sys.path`) is answered by importing it.
"""
from __future__ import annotations

import functools
import glob
import importlib
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
  return os.path.basename(folder)[len(dist) + 1:-len(".dist-info")]


def file_path(dist: str, name: str) -> str | None:
  """The path of the file called `name` that distribution `dist` installed (from its
  RECORD), or None."""
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
    if os.path.basename(path) == name:
      return os.path.normpath(os.path.join(site, path))
  return None
