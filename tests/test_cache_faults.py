"""Fault injection into a real cache: each test damages a warm cache directory (a copy of
one made by a fresh process) in one way, runs a fresh process on it, and checks that the
result is right (or the call raises a clear error), that the damage was logged once, and
that the next process is warm again. Nothing foreign may run: planted files create a
marker if they are ever unpickled or executed."""

import glob
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from test_cache import CHILD, expected_grad, run_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = hasattr(os, "getuid") and os.getuid() == 0


def second_want():
  x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
  return np.exp(x) * 3


def _warm(tmp_path_factory, **env):
  path = tmp_path_factory.mktemp("warm")
  os.chmod(path, 0o700)
  out, _ = run_child(path, "two", **env)
  assert compiled(out["stats"]) == out["kernels"] >= 2
  return path


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
  """A cache warmed by a fresh process with two programs (two plans, two modules): their
  kernels compiled by LLVM (object files)."""
  return _warm(tmp_path_factory, PRIMC_KERNEL_COMPILER="llvm")


@pytest.fixture(scope="module")
def warm_numba(tmp_path_factory):
  """The same, every kernel compiled by numba (its cache files, and the library's)."""
  return _warm(tmp_path_factory, PRIMC_KERNEL_COMPILER="numba")


@pytest.fixture
def cache(warm, tmp_path, monkeypatch):
  """A copy of `warm`, its processes compiling with LLVM (whatever the suite's default)."""
  monkeypatch.setenv("PRIMC_KERNEL_COMPILER", "llvm")
  dst = tmp_path / "cache"
  shutil.copytree(warm, dst)
  return dst


@pytest.fixture
def numba_cache(warm_numba, tmp_path, monkeypatch):
  """A copy of `warm_numba`, its processes compiling with numba too."""
  monkeypatch.setenv("PRIMC_KERNEL_COMPILER", "numba")
  dst = tmp_path / "cache"
  shutil.copytree(warm_numba, dst)
  return dst


def compiled(stats):
  """Kernels numba compiled for this process: by itself or by its compile workers."""
  return stats.get("kernel_compiles", 0) + stats.get("worker_compiles", 0)


def check_right(out):
  np.testing.assert_allclose(out["grad"], expected_grad(), rtol=1e-5)
  np.testing.assert_allclose(out["second"], second_want(), rtol=1e-6)


def check_warm_again(path):
  again, err = run_child(path, "two")
  check_right(again)
  assert compiled(again["stats"]) == 0, again["stats"]
  assert not again["stats"]["miss_reasons"] and "primc" not in err.lower(), err


def library_keys():
  from primc.codegen import loader, store

  here = os.path.dirname(os.path.abspath(loader.__file__))
  return {store.module_key(open(os.path.join(here, name)).read()) for name in loader.LIBRARY}


def numba_files(path, suffix, library=False):
  """numba's files of the generated modules (or of the library modules)."""
  keys = library_keys()
  files = glob.glob(str(path / "__pycache__" / f"m_*{suffix}"))
  return sorted(f for f in files if (os.path.basename(f)[2:].split(".")[0] in keys) == library)


def object_files(path):
  """The object files of the generated modules' kernels (codegen.translate)."""
  from primc.codegen import loader

  return sorted(glob.glob(str(path / "__pycache__" / f"m_*{loader.OBJECT_SUFFIX}")))


def flip_bit(f, at=0.5):
  data = bytearray(open(f, "rb").read())
  data[int(len(data) * at)] ^= 0x10
  open(f, "wb").write(bytes(data))


class Planted:
  """A pickle that, if anything ever unpickles it, creates `marker`."""

  def __init__(self, marker):
    self.marker = str(marker)

  def __reduce__(self):
    return (open, (self.marker, "w"))


@pytest.mark.parametrize(
  "compiler,damage",
  [
    (c, d)
    for c in ("llvm", "numba")
    for d in (
      "flip_bit_data",
      "flip_bit_index",
      "garble_data",
      "truncate_data",
      "swap_data_between_modules",
    )
    if (c, d) != ("llvm", "flip_bit_index")
  ],
)  # an object file has no index
def test_damaged_compiled_files_are_purged_and_rebuilt(request, compiler, damage):
  cache = request.getfixturevalue("cache" if compiler == "llvm" else "numba_cache")
  if compiler == "llvm":
    data = object_files(cache)
    assert len(data) >= 2 and not numba_files(cache, ".nbc")  # every kernel translated
  else:
    data, index = numba_files(cache, ".nbc"), numba_files(cache, ".nbi")
    assert len(data) >= 2 and len(index) >= 2 and not object_files(cache)
  if damage == "flip_bit_data":
    flip_bit(data[0])
  elif damage == "flip_bit_index":
    flip_bit(index[0], at=0.9)
  elif damage == "garble_data":
    open(data[0], "r+b").write(b"garbage\x00\xff")
  elif damage == "truncate_data":
    blob = open(data[0], "rb").read()
    open(data[0], "wb").write(blob[: len(blob) // 3])
  else:
    a, b = open(data[0], "rb").read(), open(data[-1], "rb").read()
    open(data[0], "wb").write(b)
    open(data[-1], "wb").write(a)
  out, err = run_child(cache, "two")  # no abort, no wrong number
  check_right(out)
  reasons = out["stats"]["miss_reasons"]
  assert any("does not match its seal" in r for r in reasons), reasons
  assert err.count("purging its compiled files") == (2 if "swap" in damage else 1), err
  check_warm_again(cache)


@pytest.mark.parametrize("damage", ["flip_bit", "planted"])
def test_damaged_library_files_are_removed(numba_cache, tmp_path, damage):
  """The math library and the products are cached as modules too (their files grow with
  each new signature a kernel numba compiles needs): a bad file is removed, the rest
  kept."""
  cache = numba_cache
  data = numba_files(cache, ".nbc", library=True)
  assert data
  marker = tmp_path / "pwned"
  if damage == "flip_bit":
    for f in data:
      flip_bit(f)
  else:
    index = numba_files(cache, ".nbi", library=True)[0]
    with open(index[:-4] + "-planted.nbi", "wb") as f:
      pickle.dump(numba_version(), f)
      f.write(pickle.dumps(Planted(marker)))
    with open(index, "wb") as f:
      pickle.dump(numba_version(), f)
      f.write(pickle.dumps(Planted(marker)))
  cold = tmp_path / "fresh"  # a new program: its compile reads the library's files
  shutil.copytree(cache, cold)
  for p in glob.glob(str(cold / "p_*.plan")):
    os.unlink(p)
  for m in glob.glob(str(cold / "m_*.py")):
    if os.path.basename(m)[2:].split(".")[0] not in library_keys():
      os.unlink(m)
  out, err = run_child(cold, "two")
  check_right(out)
  assert not marker.exists()
  assert "library cache file" in err, err
  check_warm_again(cold)


@pytest.mark.parametrize("damage", ["flip_bit", "unsealed"])
def test_damaged_library_objects_are_compiled_again(tmp_path, damage, monkeypatch):
  """The products' entries LLVM compiled are library files too: one its seal does not
  list byte for byte is never loaded (compiled again), and the next process is warm."""
  monkeypatch.setenv("PRIMC_KERNEL_COMPILER", "llvm")
  path = tmp_path / "many"
  path.mkdir(mode=0o700)
  want, _ = run_child(path, "many")  # a program whose product calls the library
  objects = numba_files(path, ".o", library=True)
  assert objects
  good = {f: open(f, "rb").read() for f in objects}
  if damage == "flip_bit":
    for f in objects:
      flip_bit(f)
  else:  # the library's files without a seal
    for seal in glob.glob(str(path / "m_*.seal")):
      if os.path.basename(seal)[2:].split(".")[0] in library_keys():
        os.unlink(seal)
  out, _ = run_child(path, "many")
  for got, expected in zip(out["grad"], want["grad"]):
    np.testing.assert_array_equal(got, expected)
  assert out["stats"].get("kernel_compiles", 0) == 0  # the kernels' own files were fine
  again, _ = run_child(path, "many")
  assert again["stats"].get("kernel_compiles", 0) == 0 and not again["stats"]["miss_reasons"]
  assert {f: open(f, "rb").read() for f in numba_files(path, ".o", library=True)} == good


def test_unsealed_numba_files_are_never_loaded(cache):
  for seal in glob.glob(str(cache / "m_*.seal")):
    os.unlink(seal)
  out, err = run_child(cache, "two")
  check_right(out)
  assert compiled(out["stats"]) == out["kernels"]
  assert any("without a seal" in r for r in out["stats"]["miss_reasons"])
  check_warm_again(cache)


def test_a_planted_numba_index_never_runs(numba_cache, tmp_path):
  cache, marker = numba_cache, tmp_path / "pwned"
  assert numba_files(cache, ".nbi")
  for index in numba_files(cache, ".nbi"):
    with open(index, "wb") as f:
      pickle.dump(numba_version(), f)
      f.write(pickle.dumps(Planted(marker)))
  out, err = run_child(cache, "two")
  check_right(out)
  assert not marker.exists()
  check_warm_again(cache)


def numba_version():
  import numba

  return numba.__version__


def test_swapped_plans_are_refused(cache):
  a, b = sorted(glob.glob(str(cache / "p_*.plan")))
  blob_a, blob_b = open(a, "rb").read(), open(b, "rb").read()
  open(a, "wb").write(blob_b)
  open(b, "wb").write(blob_a)
  out, err = run_child(cache, "two")
  check_right(out)
  assert out["stats"]["miss_reasons"].get("entry bound to another key") == 2
  check_warm_again(cache)


@pytest.mark.parametrize("kind", ["raw_pickle", "pickle_behind_a_valid_header"])
def test_a_planted_plan_never_runs(cache, tmp_path, kind):
  from primc.codegen import store

  marker = tmp_path / "pwned"
  plans = sorted(glob.glob(str(cache / "p_*.plan")))
  for path in plans:
    payload = pickle.dumps(Planted(marker))
    if kind == "pickle_behind_a_valid_header":  # bound to its key: only the payload is foreign
      key = os.path.basename(path)[2:-5]
      header = {
        "format": store.FORMAT,
        "kind": "plan",
        "key": key,
        "env": child_env_hash(),
        "bytes": len(payload),
        "sha256": __import__("hashlib").sha256(payload).hexdigest(),
      }
      payload = store.MAGIC + json.dumps(header).encode() + b"\n" + payload
    open(path, "wb").write(payload)
  out, err = run_child(cache, "two")
  check_right(out)
  assert not marker.exists()
  assert sum(out["stats"]["miss_reasons"].values()) == 2
  check_warm_again(cache)


def child_env_hash():
  code = "from codegen import cache; print(cache.env_hash())"
  return subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, check=True
  ).stdout.strip()


def test_a_damaged_module_file_is_rewritten(cache):
  modules = glob.glob(str(cache / "m_*.py"))  # the programs' kernels and the library's
  for module in modules:
    open(module, "w").write("raise SystemExit('planted')\n")
  out, err = run_child(cache, "two")
  check_right(out)
  assert len(modules) == out["kernels"] + len(library_keys())
  assert out["stats"]["miss_reasons"].get("corrupt module file") == len(modules)
  assert compiled(out["stats"]) == 0  # the rewritten module's seal holds
  check_warm_again(cache)


def test_verify_reports_exactly_what_loading_refuses(cache):
  flip_bit(object_files(cache)[0])
  plans = sorted(glob.glob(str(cache / "p_*.plan")))
  blob = open(plans[0], "rb").read()
  open(plans[0], "wb").write(blob[:-10])
  seals = [
    p
    for p in sorted(glob.glob(str(cache / "m_*.seal")))
    if os.path.basename(p)[2:].split(".")[0] not in library_keys()
  ]
  os.unlink(seals[-1])
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache))
  cli = lambda *a: subprocess.run(
    [sys.executable, "-m", "primc.cli", "cache", *a],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  bad = cli("verify")
  assert bad.returncode == 1, bad.stdout + bad.stderr
  assert "does not match its seal" in bad.stdout and "without a seal" in bad.stdout
  assert "payload does not match its digest" in bad.stdout
  fixed = cli("verify", "--fix")
  assert fixed.returncode == 0 and "(removed)" in fixed.stdout
  clean = cli("verify")
  assert clean.returncode == 0 and " 0 bad" in clean.stdout, clean.stdout
  out, _ = run_child(cache, "two")
  check_right(out)
  check_warm_again(cache)


def test_umask_000_still_makes_private_directories(tmp_path):
  path = tmp_path / "new" / "parents" / "umask"
  env = dict(os.environ, PRIMC_CACHE_DIR=str(path))
  proc = subprocess.run(
    [sys.executable, CHILD, "threaded"],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
    preexec_fn=lambda: os.umask(0),
  )
  assert proc.returncode == 0, proc.stderr
  for d in (tmp_path / "new", tmp_path / "new" / "parents"):
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
  for d, dirs, _ in os.walk(path):
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d


@pytest.mark.parametrize("where", ["root", "pycache", "other_owner"])
def test_unsafe_directories_are_refused_with_one_warning(tmp_path, where):
  path = tmp_path / "unsafe"
  path.mkdir(mode=0o700)
  if where == "root":
    os.chmod(path, 0o777)
  elif where == "pycache":
    (path / "__pycache__").mkdir()
    os.chmod(path / "__pycache__", 0o777)
  else:
    if not IS_ROOT:
      pytest.skip(
        "giving a directory another owner needs root (the suite runs as another user here)"
      )
    os.chown(path, 65534, 65534)
  before = sorted(os.listdir(path))
  out, err = run_child(path, "two")
  check_right(out)
  assert err.count("refusing primc cache directory") == 1, err
  assert sorted(os.listdir(path)) == before  # nothing read, nothing written there
  assert compiled(out["stats"]) == out["kernels"]


@pytest.mark.parametrize(
  "fault,compiler", [("nospace", "llvm"), ("nospace-kernels", "llvm"), ("nospace-kernels", "numba")]
)
def test_a_full_disk_costs_speed_not_the_run(tmp_path, monkeypatch, fault, compiler):
  monkeypatch.setenv("PRIMC_KERNEL_COMPILER", compiler)
  path = tmp_path / "full"
  path.mkdir(mode=0o700)
  out, err = run_child(path, "two", PRIMC_TEST_FAULT=fault)
  check_right(out)
  assert err.count("No space left on device") == 1, err  # warned once
  # the next process, still without space, on what the first left behind
  out, err = run_child(path, "two", PRIMC_TEST_FAULT="nospace")
  check_right(out)
  check_right(run_child(path, "two")[0])  # and with space again, it fills the cache
  check_warm_again(path)


def test_a_real_full_file_system(tmp_path):
  if not IS_ROOT:
    pytest.skip("mounting a small tmpfs needs root (the suite runs as another user here)")
  path = tmp_path / "tiny"
  path.mkdir(mode=0o700)
  if subprocess.run(
    ["mount", "-t", "tmpfs", "-o", "size=96k,mode=0700", "tmpfs", str(path)], capture_output=True
  ).returncode:
    pytest.skip("this machine does not allow tmpfs mounts")
  try:
    out, err = run_child(path, "two")
    check_right(out)
    assert "No space left on device" in err and err.count("No space left") == 1, err
    check_right(run_child(path, "two")[0])
  finally:
    subprocess.run(["umount", str(path)])


@pytest.mark.parametrize("kind", ["plan", "module", "lock"])
def test_entry_paths_that_are_directories(cache, kind):
  pattern = {"plan": "p_*.plan", "module": "m_*.py", "lock": "m_*.lock"}[kind]
  names = glob.glob(str(cache / pattern))
  if kind == "lock" and not names:
    names = [m[:-3] + ".lock" for m in glob.glob(str(cache / "m_*.py"))]
  assert names
  for name in names:
    if os.path.exists(name):
      os.unlink(name)
    os.mkdir(name)
  out, err = run_child(cache, "two")
  check_right(out)
  assert "Traceback" not in err


def _read_only_copy(cache, tmp_path):
  """The cache made read-only: a read-only bind mount as root (root may write anyway),
  else its permissions."""
  if IS_ROOT:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o700)
    if subprocess.run(["mount", "--bind", str(cache), str(ro)], capture_output=True).returncode:
      pytest.skip("this machine does not allow bind mounts (needed as root)")
    subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
    return ro, lambda: subprocess.run(["umount", str(ro)])
  for d, _, files in os.walk(cache):
    for f in files:
      os.chmod(os.path.join(d, f), 0o400)
  for d, _, _ in os.walk(cache, topdown=False):
    os.chmod(d, 0o500)
  return cache, lambda: None


def test_a_read_only_cache_serves_loads(cache, tmp_path):
  snapshot = {
    p: open(p, "rb").read()
    for p in glob.glob(str(cache / "**"), recursive=True)
    if os.path.isfile(p)
  }
  ro, undo = _read_only_copy(cache, tmp_path)
  try:
    out, err = run_child(ro, "two")
    check_right(out)
    assert compiled(out["stats"]) == 0, out["stats"]
    assert out["stats"]["plan_hits"] == 2
    assert err.count("is read-only") == 1
  finally:
    undo()
  after = {
    p: open(p, "rb").read()
    for p in glob.glob(str(cache / "**"), recursive=True)
    if os.path.isfile(p)
  }
  assert after == snapshot  # nothing written there
  uid = os.getuid()
  assert not glob.glob(os.path.join(tempfile.gettempdir(), f"primc-private-{uid}-*-*")), (
    "a private directory outlived its process"
  )


def test_a_killed_process_private_directory_is_swept(tmp_path):
  from primc.codegen import store

  uid = os.getuid()
  proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  stale = tempfile.mkdtemp(prefix=f"primc-private-{uid}-{proc.pid}-")
  proc.kill()
  proc.wait()
  store._sweep_private_dirs()
  assert not os.path.exists(stale)


def test_ever_new_shapes_keep_memory_and_disk_bounded(tmp_path):
  path = tmp_path / "bounded"
  path.mkdir(mode=0o700)
  cap = 400_000
  out, _ = run_child(path, "shapes", "600", PRIMC_CACHE_MAX_BYTES=str(cap))
  size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
  assert size <= cap * 1.1, size
  assert out["stats"]["evictions"] > 0 and out["signatures"] <= 64
  assert out["rss_growth"] < 25e6, out["rss_growth"]  # 600 executables


def test_eviction_spares_a_module_a_process_is_using(cache):
  import filelock

  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache))
  modules = sorted(glob.glob(str(cache / "m_*.py")))
  prune = lambda: subprocess.run(
    [sys.executable, "-m", "primc.cli", "cache", "prune", "--max-bytes", "0"],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  with filelock.FileLock(modules[0][:-3] + ".lock"):
    out = prune()
    assert out.returncode == 0, out.stderr
    assert os.path.exists(modules[0]) and not os.path.exists(modules[1])
  assert prune().returncode == 0 and not glob.glob(str(cache / "m_*.py"))
  assert not glob.glob(str(cache / "p_*.plan"))
  check_right(run_child(cache, "two")[0])


# --- the cache among other local users ---------------------------------------------------


def test_lock_files_are_the_owners_only_and_a_held_lock_is_waited_for_a_while(
  tmp_path, monkeypatch, caplog
):
  import filelock
  from primc.codegen import store

  cache = tmp_path / "cache"
  monkeypatch.setenv("PRIMC_LOCK_TIMEOUT", "0.5")
  st = store.Store(str(cache))
  with st.lock("k1") as held:
    assert held
  mode = stat.S_IMODE(os.stat(st.path(str(cache), "lock", "k1")).st_mode)
  assert mode & 0o077 == 0, oct(mode)  # no one else may take (or hold) it
  other = filelock.FileLock(st.path(str(cache), "lock", "k2"))  # another process's
  other.acquire()
  try:
    with caplog.at_level("WARNING"):
      with st.lock("k2") as held:  # waits 0.5 s, then compiles without it
        assert held
    assert "compiling without it" in caplog.text
    with st.lock("k2", wait=False) as held:
      assert held is False  # (eviction's try: skipped, as before)
  finally:
    other.release()


def test_a_file_named_pycache_in_the_cache_is_repaired(cache):
  path = cache
  shutil.rmtree(path / "__pycache__")
  (path / "__pycache__").write_text("not a directory")
  first, err = run_child(path, "two")  # repairs it, compiles what it lost, saves it
  check_right(first)
  assert (path / "__pycache__").is_dir() and "was a file" in err
  check_warm_again(path)  # the next process compiles nothing
