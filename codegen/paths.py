"""The cache directory and its safety, without the cache itself: where it is, and whether a
directory may hold files primc runs or trusts. Light to import (`os` and `stat` only):
kept transform programs (`primc.stored`) read the directory before any compile."""

from __future__ import annotations

import os
import stat
import sys


def unsafe(path: str) -> str | None:
  """Why a directory must not hold files primc executes (None: it may)."""
  try:
    st = os.stat(path)
  except OSError as e:
    return f"cannot be read ({e.strerror})"
  if not stat.S_ISDIR(st.st_mode):
    return "is not a directory"
  if hasattr(os, "getuid"):
    if st.st_uid not in (os.getuid(), 0):
      return "belongs to another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
      return "is writable by group or others"
  return None


def writable(path: str) -> bool:
  return os.access(path, os.W_OK | os.X_OK)


def make_private_dir(path: str) -> None:
  """Creates `path` and each missing parent 0700, whatever the umask."""
  if os.path.isdir(path):
    return
  parent = os.path.dirname(path)
  if parent != path:
    make_private_dir(parent)
  try:
    os.mkdir(path, 0o700)
  except FileExistsError:
    if not os.path.isdir(path):
      raise
    return
  os.chmod(path, 0o700)  # mkdir's mode is masked by the umask


def default_root() -> str:
  path = os.environ.get("PRIMC_CACHE_DIR")
  if not path and sys.platform.startswith("linux"):  # platformdirs' answer there, without
    # its import (~5 ms: it imports tempfile and shutil), which a first `grad` would pay
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
    path = os.path.join(cache, "primc")
  if not path:
    import platformdirs

    path = platformdirs.user_cache_dir("primc")
  return os.path.abspath(path)
