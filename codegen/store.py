"""The disk cache's one owner: where each artifact lives, how it is written and read back,
what is verified before anything is trusted, and how the cache stays bounded. Every other
part of primc (loader, executor, tiered and kernel workers, the CLI) asks this module.

A cache directory (PRIMC_CACHE_DIR, default the platform's per-user cache directory):

  m_<key>.py      a generated module; <key> is a hash of its source
  m_<key>.seal    JSON: the compiled files of that module (its object file, or numba's
                  cache files), with their sizes and SHA-256 digests, written once the
                  module is compiled (the module is "sealed")
  m_<key>.lock    the module's inter-process lock (compile, seal, evict)
  library.lock    the lock of the library modules' numba files (verify, seal)
  m_<key>.log     the stderr of a background compile of the module (tiered)
  p_<key>.plan    a compile plan: a header line binding it to its key and environment,
                  then an npz archive of arrays and JSON (no pickle)
  usage           the directory's size in bytes at its last full scan (the file's time:
                  when), so that a process need not scan it again (see `_maybe_prune`)
  __pycache__/    the compiled files: a kernel's object file (`m_<key>.kernel.o`, see
                  codegen.translate), numba's cache files of kernels numba compiles and of
                  the library (`m_<key>.<function>-<line>.pyXY.nbi|.nbc`); under numba's
                  NUMBA_CACHE_DIR when that is set

What is guaranteed:
- Nothing is trusted unverified. A module file is executed only if its content hashes to
  its key (else it is rewritten from the source in hand). A module's compiled files are
  loaded (an object file into the engine, numba's files by numba) only if they are
  exactly the files its seal lists, byte for byte; any
  other state (unsealed files, a flipped bit, a file swapped in from another module) is
  purged and compiled again. A plan is decoded (arrays and JSON, never a pickle) only if
  its header names its key, the current environment and the digest of its payload.
  Each bad entry is logged once (logger `primc.cache`) and counted with its reason.
- Nothing foreign runs. Directories are created 0700 whatever the umask (the cache
  directory and numba's `__pycache__` in it); a directory writable by group or others,
  or owned by another user (root excepted, for a system-wide read-only cache), is refused
  with one warning, and the process compiles in memory.
- A full disk costs speed, not the run. A write that fails (no space, a path that is a
  directory, ...) is warned about once; the process goes on compiling in memory.
- A read-only cache serves loads: plans are read from it; a sealed module is verified and
  copied with its numba files into a private directory (removed at exit), where numba
  loads it without compiling.
- Bounded: PRIMC_CACHE_MAX_BYTES (default 2 GiB) caps the directory; past it, the least
  recently used plans and modules are evicted (a module only while no process holds its
  lock). Loads stamp what they use; `primc cache prune` evicts on demand. A scan of the
  directory costs ~13 µs a file (0.55 s for 41,000 files), so a process's first write
  scans only when the last scan is older than SCAN_INTERVAL or found it past half the
  cap; then every twentieth of the cap written scans again.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import glob
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time

from primc.codegen import cache
from primc.codegen.paths import default_root, make_private_dir, unsafe, writable
from primc.codegen.plan import Plan

log = logging.getLogger("primc.cache")
FORMAT = 2
MAGIC = b"primc-cache\n"
DEFAULT_MAX_BYTES = 2 << 30
SCAN_INTERVAL = 600.0  # seconds a full scan's total (`usage`) stands for the directory
USAGE = "usage"
NUMBA_SUFFIXES = (".nbi", ".nbc")


class Bad(Exception):
  """An entry that must not be used; the message is the reason."""


def module_key(source: str) -> str:
  return hashlib.sha256(source.encode()).hexdigest()[:32]


def _digest(path: str) -> tuple[int, str]:
  with open(path, "rb") as f:
    data = f.read()
  return len(data), hashlib.sha256(data).hexdigest()


LOCK_WAIT = 120.0  # seconds: a compile holding a module's lock takes far less


def lock_wait() -> float:
  """How long a process waits for another's lock before compiling without it
  (PRIMC_LOCK_TIMEOUT, seconds)."""
  try:
    return float(os.environ.get("PRIMC_LOCK_TIMEOUT", LOCK_WAIT))
  except ValueError:
    return LOCK_WAIT


def max_bytes() -> int:
  value = os.environ.get("PRIMC_CACHE_MAX_BYTES")
  return int(float(value)) if value else DEFAULT_MAX_BYTES


class Store:
  """One cache directory as this process uses it.

  `read_dirs` are searched for entries; `write_dir` takes new ones: the cache directory
  itself, a private directory (the cache is read-only), or None (nothing is written:
  the directory was refused or the disk is full)."""

  def __init__(self, root: str):
    self.root = root
    self.read_dirs: list[str] = []
    self.write_dir: str | None = None
    self._lock = threading.Lock()
    self._warned: set = set()
    self._written = 0  # bytes written since the last size check
    self._checked_size = False
    self.not_removed = 0  # entries the last `prune` could not remove
    self.in_use = 0  # modules it left because a process has them loaded
    self._open()

  # -- opening -------------------------------------------------------------------------
  def _open(self) -> None:
    root = self.root
    try:
      make_private_dir(root)
    except OSError as e:
      self.warn(
        ("root", root),
        f"primc cache directory {root} cannot be created "
        f"({e.strerror}): compiling in memory in this process",
      )
      return
    why = unsafe(root)
    if why is None and os.path.isdir(os.path.join(root, "__pycache__")):
      why = unsafe(os.path.join(root, "__pycache__"))
      why = why and f"its __pycache__ {why}"
    if why:
      self.warn(
        ("root", root),
        f"refusing primc cache directory {root}: it {why}, and "
        f"primc executes the files in it (chmod 700 it, or set PRIMC_CACHE_DIR); "
        f"compiling in memory in this process",
      )
      return
    self.read_dirs = [root]
    if writable(root):
      self.write_dir = root
      self._prepare(root)
    else:
      self.warn(
        ("root", root),
        f"primc cache directory {root} is read-only: loading from "
        f"it, compiling anything new in a private directory",
      )
      self.write_dir = _private_dir()
      if self.write_dir:
        self._prepare(self.write_dir)

  def _prepare(self, directory: str) -> None:
    try:
      numba_dir = self.numba_dir(directory)
      for path in sorted({os.path.join(directory, "__pycache__"), numba_dir}, key=len):
        if os.path.lexists(path) and not os.path.isdir(path):  # a file in its place:
          self.warn(
            ("not-a-dir", path), f"primc cache: {path} was a file, not a directory: replaced"
          )  # repaired, as a directory in a file's
          remove(path)  # place is (else no process could save)
        make_private_dir(path)
      why = unsafe(numba_dir)
      if why:
        raise OSError(errno.EPERM, f"numba's cache directory {numba_dir} {why}")
    except OSError as e:
      self.write_failed(e, directory)

  def warn(self, what, message: str) -> None:
    """A warning on the `primc.cache` logger, once per `what` in this process."""
    with self._lock:
      if what in self._warned:
        return
      self._warned.add(what)
    log.warning(message)

  def write_failed(self, error: OSError, path: str) -> None:
    """A failed write: warned once; a full or read-only disk stops all writes."""
    stop = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EPERM)
    self.warn(
      ("write", stop or path),
      f"primc cache: cannot write {path} ({error}): "
      f"{'compiling in memory from now on' if stop else 'going on without it'}",
    )
    cache.count("write_failures", f"{type(error).__name__}")
    if stop:
      self.write_dir = None

  # -- paths ---------------------------------------------------------------------------
  @staticmethod
  def numba_dir(directory: str) -> str:
    """Where numba keeps the cache files of modules in `directory`: its `__pycache__`, or
    under NUMBA_CACHE_DIR (named as numba's `_CacheLocator.get_suitable_cache_subpath`
    names it; numba itself is not imported for this)."""
    config = sys.modules.get("numba.core.config")
    cache_dir = config.CACHE_DIR if config else os.environ.get("NUMBA_CACHE_DIR", "")
    if cache_dir:
      directory = os.path.abspath(directory)
      hashed = hashlib.sha1(directory.encode()).hexdigest()
      return os.path.join(cache_dir, f"{os.path.basename(directory)}_{hashed}")
    return os.path.join(directory, "__pycache__")

  @staticmethod
  def path(directory: str, kind: str, key: str) -> str:
    name = {
      "module": f"m_{key}.py",
      "seal": f"m_{key}.seal",
      "lock": f"m_{key}.lock",
      "log": f"m_{key}.log",
      "plan": f"p_{key}.plan",
    }[kind]
    if key == "library":  # the library's lock: no entry of its own
      name = "library.lock"
    return os.path.join(directory, name)

  def numba_files(self, directory: str, key: str) -> list[str]:
    """numba's files of module `key` in `directory` (leftover temporary files included)."""
    try:
      names = os.listdir(self.numba_dir(directory))
    except OSError:
      return []
    return sorted(n for n in names if n.startswith(f"m_{key}."))

  # -- writing -------------------------------------------------------------------------
  def write(self, kind: str, key: str, data: bytes, directory: str | None = None) -> bool:
    """Writes an entry atomically into the write directory; False if it could not."""
    directory = directory or self.write_dir
    if directory is None:
      return False
    path = self.path(directory, kind, key)
    try:
      write_atomic(path, data)
    except OSError as e:
      self.write_failed(e, path)
      return False
    self._written += len(data)
    if directory == self.root:
      self._maybe_prune()
    return True

  def write_entry(self, kind: str, key: str, payload: bytes) -> bool:
    """An entry bound to its key: a header (format, kind, key, environment, digest of the
    payload), then the payload."""
    header = {
      "format": FORMAT,
      "kind": kind,
      "key": key,
      "env": cache.env_hash(),
      "sha256": hashlib.sha256(payload).hexdigest(),
      "bytes": len(payload),
    }
    return self.write(kind, key, MAGIC + json.dumps(header).encode() + b"\n" + payload)

  # -- reading -------------------------------------------------------------------------
  def read_entry(self, kind: str, key: str, decode):
    """`decode(payload)` of the entry for `key`, or None (a miss, counted with its
    reason; a bad entry is logged once and removed where it may be)."""
    bad = False
    for directory in self._search_dirs():
      path = self.path(directory, kind, key)
      if not os.path.lexists(path):
        continue
      try:
        value = decode(check_entry(path, kind, key))
      except Exception as e:  # Bad, or a payload that does not decode
        why = str(e) if isinstance(e, Bad) else f"corrupt entry ({type(e).__name__})"
        self._bad(path, why, f"{kind}_misses", directory)
        bad = True
        continue
      cache.count(f"{kind}_hits")
      self.touch(path)
      return value
    if bad:
      return None
    cache.count(f"{kind}_misses", "new program")
    log.info("%s cache miss (new program): %s", kind, key)
    return None

  def _search_dirs(self) -> list[str]:
    dirs = ([self.write_dir] if self.write_dir else []) + self.read_dirs
    return list(dict.fromkeys(dirs))

  def _bad(self, path: str, why: str, counter: str, directory: str) -> None:
    cache.count(counter, why)
    self.warn(("bad", path), f"primc cache entry {path}: {why}; rebuilding it")
    if directory == self.write_dir:
      remove(path)

  def touch(self, path: str) -> None:
    """Stamps an entry as just used (least-recently-used eviction reads the stamps)."""
    if self.write_dir == self.root:
      try:
        os.utime(path)
      except OSError:
        pass

  # -- modules and numba's files -------------------------------------------------------
  def module_dir(self, source: str) -> str | None:
    """The directory to import the module of `source` from, with its file in place
    (written, rewritten if it was damaged, or copied from a read-only cache together with
    its verified numba files); None when the module can only live in memory."""
    key = module_key(source)
    directory = self.write_dir
    if directory is None:
      return None
    path = self.path(directory, "module", key)
    if read_bytes(path) != source.encode():
      if os.path.lexists(path):
        cache.count("module_rebuilds", "corrupt module file")
        self.warn(("bad", path), f"primc module file {path} does not match its key: rewriting it")
        remove(path)
      for other in self.read_dirs:
        if other != directory and self.copy_sealed(other, directory, source):
          return directory
      if not self.write("module", key, source.encode(), directory):
        return None
      cache.count("modules_written")
    return directory

  def copy_sealed(self, src: str, dst: str, source: str) -> bool:
    """Copies a verified sealed module (source, seal, numba files) from a read-only cache."""
    key = module_key(source)
    if read_bytes(self.path(src, "module", key)) != source.encode():
      return False
    try:
      self.verify_numba(src, key)
    except Bad as e:
      self.warn(("bad", src, key), f"primc cache: module {key} in {src}: {e}; compiling it")
      return False
    try:
      for name in self.numba_files(src, key):
        shutil.copyfile(
          os.path.join(self.numba_dir(src), name), os.path.join(self.numba_dir(dst), name)
        )
      shutil.copyfile(self.path(src, "seal", key), self.path(dst, "seal", key))
      write_atomic(self.path(dst, "module", key), source.encode())
    except OSError as e:
      self.write_failed(e, dst)
      return False
    return True

  def verify_numba(self, directory: str, key: str) -> bool:
    """Whether module `key` has numba files in `directory` exactly as its seal lists them
    (True), or none at all (False). Raises Bad for any other state."""
    files = self.numba_files(directory, key)
    seal_path = self.path(directory, "seal", key)
    try:
      seal = json.loads(read_bytes(seal_path) or b"null")
    except ValueError:
      raise Bad("its seal is unreadable") from None
    if not files and not (isinstance(seal, dict) and seal.get("files")):
      return False  # nothing to load
    if not isinstance(seal, dict):
      raise Bad("compiled files without a seal")
    if (seal.get("format"), seal.get("key"), seal.get("env")) != (FORMAT, key, cache.env_hash()):
      raise Bad("its seal belongs to another module or environment")
    listed = seal.get("files") or {}
    if set(files) != set(listed):
      raise Bad(f"compiled files differ from its seal ({len(files)} present, {len(listed)} sealed)")
    numba_dir = self.numba_dir(directory)
    for name in files:
      try:
        got = list(_digest(os.path.join(numba_dir, name)))
      except OSError as e:
        raise Bad(f"{name} is unreadable ({e.strerror})") from None
      if got != listed[name]:
        raise Bad(f"compiled file {name} does not match its seal")
    return True

  def prepare_numba(self, directory: str, key: str) -> bool:
    """Before numba may read module `key`'s cache files (the caller holds its lock):
    True when they are sealed and verified, False when there are none (any bad state is
    logged, counted and purged first)."""
    try:
      sealed = self.verify_numba(directory, key)
    except Bad as e:
      cache.count("compiled_file_rebuilds", str(e))
      self.warn(
        ("bad", directory, key),
        f"primc cache: module {key}: {e}; purging its compiled files and compiling it again",
      )
      self.purge_numba(directory, key)
      return False
    if sealed:
      self.touch(self.path(directory, "seal", key))
    return sealed

  def prepare_library(self, directory: str, key: str) -> None:
    """Before a compile that may read a library module's numba files (the caller holds
    the library's lock): each file its seal does not list byte for byte is purged. The
    library's files grow whenever a kernel needs a new signature, written by whichever
    process compiles it, so only the files that fail go (the next seal takes the rest)."""
    numba_dir = self.numba_dir(directory)
    seal = self._seal(directory, key)
    valid = _current(seal, key)
    if isinstance(seal, dict) and not valid:  # files of an older primc or numba: stale
      log.info("primc cache: the library's numba files in %s are stale: removing them", numba_dir)
      for name in self.numba_files(directory, key):
        remove(os.path.join(numba_dir, name))
    listed = (seal.get("files") or {}) if valid else {}
    self.touch(self.path(directory, "seal", key))
    removed = []
    for name in self.numba_files(directory, key):
      path = os.path.join(numba_dir, name)
      try:
        ok = name in listed and list(_digest(path)) == listed[name]
      except OSError:
        ok = False
      if not ok:
        why = (
          "library cache file not in its seal"
          if name not in listed
          else "library cache file that does not match its seal"
        )
        cache.count("compiled_file_rebuilds", why)
        removed.append(f"{name} ({why})")
        remove(path)
    if removed:
      self.warn(
        ("bad", directory, key),
        f"primc cache: removed {len(removed)} files of the "
        f"library module {key} in {numba_dir}: {', '.join(removed[:3])}"
        + (", ..." if len(removed) > 3 else ""),
      )

  def _seal(self, directory: str, key: str):
    """Module `key`'s seal as read (None when missing or unreadable)."""
    try:
      return json.loads(read_bytes(self.path(directory, "seal", key)) or b"null")
    except ValueError:
      return None

  def sealed_file(self, directory: str, key: str, name: str) -> bytes | None:
    """The bytes of module `key`'s compiled file `name` if its seal (of this environment)
    lists it with these bytes, else None: for a library file read without the library's
    lock (the next seal takes in a file written meanwhile)."""
    seal = self._seal(directory, key)
    if not _current(seal, key):
      return None
    data = read_bytes(os.path.join(self.numba_dir(directory), name))
    listed = (seal.get("files") or {}).get(name)
    if data is None or listed != [len(data), hashlib.sha256(data).hexdigest()]:
      return None
    return data

  def purge_numba(self, directory: str, key: str) -> None:
    numba_dir = self.numba_dir(directory)
    for name in self.numba_files(directory, key):
      remove(os.path.join(numba_dir, name))
    remove(self.path(directory, "seal", key))

  def seal(self, directory: str, key: str) -> None:
    """Records module `key`'s numba files with their digests (the caller holds its lock,
    and numba has just written or loaded them)."""
    numba_dir = self.numba_dir(directory)
    files = {}
    for name in self.numba_files(directory, key):
      if ".tmp." in name:  # an interrupted write of numba's: not part of the module
        remove(os.path.join(numba_dir, name))
        continue
      try:
        files[name] = list(_digest(os.path.join(numba_dir, name)))
      except OSError:
        return
    seal = {"format": FORMAT, "key": key, "env": cache.env_hash(), "files": files}
    self.write("seal", key, json.dumps(seal, sort_keys=True).encode(), directory)

  def sealed(self, source: str) -> bool:
    """Whether the module of `source` was compiled into a cache this process reads (its
    seal exists for this environment; loading verifies the files)."""
    key = module_key(source)
    return any(_current(self._seal(d, key), key) for d in self._search_dirs())

  @contextlib.contextmanager
  def lock(self, key: str, wait: bool = True):
    """The inter-process lock of module `key` (or of "library"), as a context that gives
    whether this process holds it: False only when `wait` is False and another process
    holds it. None is taken where it cannot be (writes stay atomic; two processes may
    then compile the same module)."""
    directory = self.write_dir
    if directory is None:
      yield True
      return
    import filelock

    lock = filelock.FileLock(self.path(directory, "lock", key), mode=0o600)
    try:
      lock.acquire(timeout=lock_wait() if wait else 0)
    except filelock.Timeout:
      if not wait:
        yield False
        return
      # held longer than any compile takes (another user's process, or one stopped):
      # compiling without it is safe (writes are atomic), waiting forever is not
      self.warn(
        ("lock-wait", directory),
        f"primc cache: {lock.lock_file} was held for "
        f"{lock_wait():.0f} s by another process: compiling without it "
        f"(PRIMC_LOCK_TIMEOUT sets the wait)",
      )
      yield True
      return
    except OSError as e:
      self.warn(
        ("lock", directory),
        f"primc cache: cannot take the lock {lock.lock_file} ({e}): compiling without it",
      )
      yield True
      return
    try:
      yield True
    finally:
      lock.release()

  # -- size ----------------------------------------------------------------------------
  def entries(self, directory: str | None = None) -> list[dict]:
    """Every entry of a cache directory: plans, kept transform programs, and modules with all
    their files."""
    directory = directory or self.root
    out: dict[str, dict] = {}

    def add(group, kind, key, path):
      try:
        st = os.lstat(path)
      except OSError:
        return
      e = out.setdefault(group, {"kind": kind, "key": key, "files": [], "bytes": 0, "used": 0.0})
      e["files"].append(path)
      e["bytes"] += st.st_size
      e["used"] = max(e["used"], st.st_mtime)

    for path in glob.glob(os.path.join(directory, "p_*.plan")):
      key = os.path.basename(path)[2:-5]
      add(f"p{key}", "plan", key, path)
    for path in glob.glob(os.path.join(directory, "t_*.prog")):  # (kept transform
      key = os.path.basename(path)[2:-5]  # programs, `primc.stored`: verified there)
      add(f"t{key}", "program", key, path)
    for path in glob.glob(os.path.join(directory, ".tmp-*.prog")):  # (a write a process
      add(path, "program", os.path.basename(path), path)  # died in: evicted first)
    for path in glob.glob(os.path.join(directory, "m_*")):
      key = os.path.basename(path)[2:].split(".")[0]
      add(f"m{key}", "module", key, path)
    numba_dir = self.numba_dir(directory)
    for path in glob.glob(os.path.join(numba_dir, "m_*")):
      key = os.path.basename(path)[2:].split(".")[0]
      add(f"m{key}", "module", key, path)
    return sorted(out.values(), key=lambda e: e["used"])

  def _maybe_prune(self) -> None:
    """Checks the size now and then: at the first write of a process (unless a recent
    scan found the directory below half the cap), and whenever another twentieth of the
    cap has been written since the last check."""
    cap = max_bytes()
    if self._checked_size and self._written < cap // 20:
      return
    first, self._checked_size, self._written = not self._checked_size, True, 0
    if first and self._recent_usage() < cap // 2:
      return
    entries = self.entries()
    total = sum(e["bytes"] for e in entries)
    if total > cap:
      total -= self.prune(int(cap * 0.8), entries)[1]
    try:
      write_atomic(os.path.join(self.root, USAGE), b"%d\n" % total)
    except OSError:
      pass

  def _recent_usage(self) -> float:
    """The size the last scan found, if it is recent (else infinity: scan again)."""
    path = os.path.join(self.root, USAGE)
    try:
      if time.time() - os.stat(path).st_mtime > SCAN_INTERVAL:
        return float("inf")
      with open(path, "rb") as f:
        return float(int(f.read(32)))
    except (OSError, ValueError):
      return float("inf")

  def prune(self, target: int, entries=None) -> tuple[int, int]:
    """Evicts the least recently used entries until the directory holds at most `target`
    bytes; a module is skipped while a process holds its lock. Returns (entries, bytes)
    removed; `self.not_removed` counts the entries it tried and could not remove (a
    read-only directory), `self.in_use` the modules it left as a process has them loaded."""
    import filelock

    entries = self.entries() if entries is None else entries
    total = sum(e["bytes"] for e in entries)
    removed = freed = 0
    self.not_removed = self.in_use = 0
    for e in entries:
      if total <= target:
        break
      if e["kind"] == "module":
        lock = filelock.FileLock(self.path(self.root, "lock", e["key"]), mode=0o600)
        try:
          lock.acquire(timeout=0)
        except (filelock.Timeout, OSError):
          self.in_use += 1
          continue
        try:
          gone = all([remove(path) for path in e["files"] if not path.endswith(".lock")])
        finally:
          lock.release()
          remove(self.path(self.root, "lock", e["key"]))
      else:
        gone = all([remove(path) for path in e["files"]])
      if not gone:
        self.not_removed += 1
        continue
      total -= e["bytes"]
      freed += e["bytes"]
      removed += 1
      cache.count("evictions")
    if removed:
      log.info("primc cache: evicted %d entries (%.1f MB)", removed, freed / 1e6)
    return removed, freed

  # -- checking ------------------------------------------------------------------------
  def check_all(self) -> list[tuple[str, str]]:
    """Every bad file of the cache directory with its reason: the checks loading makes."""
    root = self.root
    bad = []
    for d in (root, os.path.join(root, "__pycache__"), self.numba_dir(root)):
      why = os.path.isdir(d) and unsafe(d)
      if why:
        bad.append((d, f"directory {why}"))
    for e in self.entries(root):
      key = e["key"]
      if e["kind"] == "program":  # (checked as `primc.stored` reads them, header and
        continue  # digest; a bad one is removed and made again)
      if e["kind"] == "plan":
        try:
          Plan.from_bytes(check_entry(self.path(root, "plan", key), "plan", key))
        except Bad as err:
          bad.append((self.path(root, "plan", key), str(err)))
        except Exception as err:
          bad.append((self.path(root, "plan", key), f"corrupt entry ({type(err).__name__})"))
        continue
      module = self.path(root, "module", key)
      data = read_bytes(module)
      if data is not None and module_key(data.decode(errors="replace")) != key:
        bad.append((module, "content does not match key"))
      try:
        self.verify_numba(root, key)
      except Bad as err:
        bad += [
          (os.path.join(self.numba_dir(root), n), str(err)) for n in self.numba_files(root, key)
        ]
        if os.path.lexists(self.path(root, "seal", key)):
          bad.append((self.path(root, "seal", key), str(err)))
    return bad


def check_entry(path: str, kind: str, key: str) -> bytes:
  """The payload of a keyed entry file, or Bad with the reason it must not be used."""
  data = read_bytes(path)
  if data is None:
    raise Bad("unreadable")
  if not data.startswith(MAGIC) or b"\n" not in data[len(MAGIC) :]:
    raise Bad("corrupt entry (no header)")
  line, payload = data[len(MAGIC) :].split(b"\n", 1)
  try:
    header = json.loads(line)
  except ValueError:
    raise Bad("corrupt entry (bad header)") from None
  if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("kind") != kind:
    raise Bad("entry of another format")
  if header.get("key") != key:
    raise Bad("entry bound to another key")
  if header.get("env") != cache.env_hash():
    raise Bad("entry of another environment")
  if (
    header.get("bytes") != len(payload)
    or header.get("sha256") != hashlib.sha256(payload).hexdigest()
  ):
    raise Bad("corrupt entry (payload does not match its digest)")
  return payload


def _current(seal, key: str) -> bool:
  """Whether `seal` is module `key`'s, of this format and environment."""
  return isinstance(seal, dict) and (seal.get("format"), seal.get("key"), seal.get("env")) == (
    FORMAT,
    key,
    cache.env_hash(),
  )


def read_bytes(path: str) -> bytes | None:
  """A file's bytes, or None when it cannot be read."""
  try:
    with open(path, "rb") as f:
      return f.read()
  except OSError:
    return None


def remove(path: str) -> bool:
  """Removes a file or a directory tree; whether it is gone."""
  try:
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.unlink(path)
  except FileNotFoundError:
    pass
  except OSError:
    return False
  return not os.path.lexists(path)


def write_atomic(path: str, data: bytes) -> None:
  """Writes a file so that readers see the old content or the new, never a part."""
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    remove(tmp)
    raise


# -- private directories ----------------------------------------------------------------

PRIVATE_PREFIX = "primc-private-"


def _private_dir() -> str | None:
  """A directory only this process uses, removed when it exits (and, by the next process
  that makes one, if this one was killed)."""
  _sweep_private_dirs()
  uid = os.getuid() if hasattr(os, "getuid") else 0
  try:
    path = tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{uid}-{os.getpid()}-")
  except OSError:
    return None
  atexit.register(shutil.rmtree, path, True)
  return path


def _sweep_private_dirs() -> None:
  uid = os.getuid() if hasattr(os, "getuid") else 0
  for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{PRIVATE_PREFIX}{uid}-*")):
    try:
      pid = int(os.path.basename(path).split("-")[3])
    except (IndexError, ValueError):
      continue
    if pid != os.getpid() and not _alive(pid):
      shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except OSError:
    return True
  return True


# -- the store of this process ----------------------------------------------------------

_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def current() -> Store:
  """The store of this process's cache directory (PRIMC_CACHE_DIR is read each time, so
  a changed setting takes effect at the next compile)."""
  root = default_root()
  store = _stores.get(root)
  if store is None:
    with _stores_lock:
      store = _stores.get(root) or _stores.setdefault(root, Store(root))
  return store
