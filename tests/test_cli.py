"""The `primc` command line, end to end in fresh processes."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "examples", "seed_programs.py")


def primc(*args, cache, check=True, **env_vars):
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache), **env_vars)
  proc = subprocess.run(
    [sys.executable, "-m", "primc.cli", *args],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  if check:
    assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  path = tmp_path_factory.mktemp("cli-cache")
  os.chmod(path, 0o700)
  return path


def test_warmup_examples_then_everything_is_cached(cache):
  first = primc("warmup", SEEDS, cache=cache, PRIMC_TIERED="1")  # compiles in process anyway
  assert "failed 0" in first.stdout and "compiled 3, already cached 1" in first.stdout
  assert "mynet_step_compiled" in first.stdout
  assert "4/4" not in first.stderr  # no progress bar into a pipe
  second = primc("warmup", SEEDS, cache=cache)
  assert "compiled 0, already cached 4, failed 0" in second.stdout


def test_warmup_failure_gives_nonzero_exit(tmp_path, cache):
  bad = tmp_path / "bad.py"
  bad.write_text(
    textwrap.dedent("""
      import primc
      import primc.numpy as pnp

      @primc.jit(warmup=[("f32[2,3]", "f32[2,3]")])
      def broken(a, b):
        return pnp.matmul(a, b)
  """)
  )
  proc = primc("warmup", str(bad), cache=cache, check=False)
  assert proc.returncode == 1
  assert "failed: ShapeError" in proc.stdout and "failed 1" in proc.stdout
  none = primc("warmup", os.path.join(ROOT, "tests", "cache_child.py"), cache=cache, check=False)
  assert none.returncode == 1 and "no functions declared" in none.stderr


def test_cache_info_list_verify_clear(cache, tmp_path):
  primc("warmup", f"{SEEDS}:mynet_forward_compiled", cache=cache)
  info = primc("cache", "info", cache=cache).stdout
  assert str(cache) in info and "numba: " in info and "modules" in info
  assert max(len(line) for line in info.splitlines()) <= 100  # the CPU's features wrapped
  listing = primc("cache", "list", cache=cache).stdout
  module = sorted(p for p in os.listdir(cache) if p.startswith("m_") and p.endswith(".py"))[0]
  assert "module" in listing and "plan" in listing and module[2:-3] in listing
  assert " 0 bad" in primc("cache", "verify", cache=cache).stdout
  (cache / module).write_text("garbage")
  bad = primc("cache", "verify", cache=cache, check=False)
  assert bad.returncode == 1 and f"bad: {module}: content does not match key" in bad.stdout
  fixed = primc("cache", "verify", "--fix", cache=cache)
  assert "(removed)" in fixed.stdout and not (cache / module).exists()
  assert "size cap" in primc("cache", "info", cache=cache).stdout
  pruned = primc("cache", "prune", "--max-bytes", "0", cache=cache)
  assert "removed" in pruned.stdout
  assert not [p for p in os.listdir(cache) if p.startswith(("m_", "p_"))]
  primc("warmup", f"{SEEDS}:mynet_forward_compiled", cache=cache)
  clear = primc("cache", "clear", cache=cache)
  assert "removed" in clear.stdout
  assert not [p for p in os.listdir(cache) if p.startswith(("m_", "p_"))]


@pytest.mark.parametrize(
  "stage,expect",
  [
    ("traced", "tanh"),
    ("jvp", "mul"),
    ("linearized", "in ("),
    ("grad", "reduce_sum"),
    ("optimized", "tanh"),
    ("fused", "region[kind='dot']"),
    ("source", "def k_"),
  ],
)
def test_show_each_stage(stage, expect, cache):
  out = primc(
    "show",
    f"{SEEDS}:mynet_forward",
    "--arg",
    "f32[2,2]",
    "--arg",
    "f32[2,2]",
    "--arg",
    "f32[2]",
    "--stage",
    stage,
    cache=cache,
  ).stdout
  assert expect in out and ("{ lambda" in out or stage == "source")


def test_show_uses_declared_warmup_signature(cache):
  out = primc(
    "show", f"{SEEDS}:tanh_derivatives_compiled", "--stage", "optimized", cache=cache
  ).stdout
  assert "a:f32[1]" in out


def test_bad_arguments_give_usage_and_exit_2(cache):
  for args in (
    ["show"],
    ["show", "no_such_module_xyz:f"],
    ["show", f"{SEEDS}:no_such_fn"],
    ["show", f"{SEEDS}:mynet_forward"],
    ["cache", "frobnicate"],
    [],
    ["show", SEEDS + ":mynet_forward", "--arg", "f99[2]"],
  ):
    proc = primc(*args, cache=cache, check=False)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_warmup_shows_progress_on_a_terminal_and_full_errors(tmp_path, cache):
  import pty

  bad = tmp_path / "bad.py"
  long_name = "x" * 150
  bad.write_text(
    textwrap.dedent(f"""
      import primc
      import primc.numpy as pnp

      @primc.jit(warmup=[("f32[2,3]", "f32[2,3]")])
      def broken(a, b):
        raise ValueError("{long_name}")
  """)
  )
  leader, follower = pty.openpty()
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache))
  proc = subprocess.run(
    [sys.executable, "-m", "primc.cli", "warmup", str(bad)],
    env=env,
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=follower,
    text=True,
    timeout=300,
  )
  os.close(follower)
  progress = os.read(leader, 4096).decode()
  os.close(leader)
  assert proc.returncode == 1 and "1/1" in progress
  assert long_name in proc.stdout  # the error text whole, never truncated


def test_show_fusion_says_why_regions_did_not_fuse(cache):
  out = primc(
    "show",
    f"{SEEDS}:mynet_forward",
    "--arg",
    "f32[2,2]",
    "--arg",
    "f32[2,2]",
    "--arg",
    "f32[2]",
    "--stage",
    "fusion",
    cache=cache,
  ).stdout
  assert "region 1 (broadcast_in_dim over [2, 2]): region 0: only an elementwise epilogue" in out
  assert "does not read the dot_general's result" in out  # every reason, not the first


def test_show_a_control_flow_program(cache, tmp_path):
  src = tmp_path / "loops.py"
  src.write_text(
    "import primc.numpy as pnp\nfrom primc import lax\n\n"
    "def f(x):\n  return lax.fori_loop(0, 3, lambda i, v: pnp.sin(v) * 2.0, x)\n"
  )
  out = primc("show", f"{src}:f", "--arg", "f64[3]", "--stage", "optimized", cache=cache)
  assert "scan[length=3" in out.stdout
  bad = primc("show", f"{src}:f", "--arg", "f64[3]", "--stage", "source", cache=cache, check=False)
  assert bad.returncode == 1 and "has control flow" in bad.stderr and "Traceback" not in bad.stderr


# --- a command line that says what it did ----------------------------------------------


def test_python_m_primc_and_version(cache):
  proc = subprocess.run(
    [sys.executable, "-m", "primc", "--version"],
    capture_output=True,
    text=True,
    timeout=120,
    env=dict(os.environ, PRIMC_CACHE_DIR=str(cache)),
  )
  assert proc.returncode == 0 and proc.stdout.startswith("primc ") and "numba=" in proc.stdout


def test_warmup_compiles_from_the_signature_without_running(tmp_path, cache):
  (tmp_path / "invmod.py").write_text(
    textwrap.dedent("""
      import primc
      import primc.numpy as pnp

      @primc.jit(warmup=[("f64[3,3]",)])
      def inverse_sum(a):
        return pnp.sum(pnp.linalg.inv(a))  # zeros would be singular
  """)
  )
  env = dict(os.environ, PRIMC_CACHE_DIR=str(cache))  # from the current directory
  proc = subprocess.run(
    [sys.executable, "-m", "primc", "warmup", "invmod:inverse_sum"],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "failed 0" in proc.stdout and "singular" not in proc.stdout + proc.stderr


def test_warmup_into_a_cache_that_cannot_be_written_says_so(tmp_path):
  not_a_dir = tmp_path / "cache-file"
  not_a_dir.write_text("")
  proc = primc("warmup", f"{SEEDS}:mynet_forward_compiled", cache=not_a_dir, check=False)
  assert proc.returncode == 1 and "nothing was saved" in proc.stderr, proc.stderr


def _in_process(monkeypatch, capsys, cache, *argv):
  from primc import cli

  monkeypatch.setenv("PRIMC_CACHE_DIR", str(cache))
  code = cli.main(list(argv))
  out = capsys.readouterr()
  return code, out.out, out.err


def test_clear_prune_and_verify_say_what_they_could_not_remove(monkeypatch, capsys, cache):
  from primc.codegen import store

  primc("warmup", f"{SEEDS}:mynet_forward_compiled", cache=cache)
  monkeypatch.setattr(store, "remove", lambda path: False)  # a read-only directory
  for action in (("clear",), ("prune", "--max-bytes", "0")):
    code, out, err = _in_process(monkeypatch, capsys, cache, "cache", *action)
    assert code == 1 and "removed 0 cache entries" in out and "could not be removed" in err
  module = sorted(p for p in os.listdir(cache) if p.startswith("m_") and p.endswith(".py"))[0]
  (cache / module).write_text("garbage")
  code, out, _ = _in_process(monkeypatch, capsys, cache, "cache", "verify", "--fix")
  assert code == 1 and "(could not be removed)" in out and "(removed)" not in out


def test_errors_are_one_line_with_the_right_exit_code(tmp_path, cache):
  (tmp_path / "raises.py").write_text("raise RuntimeError('broken at import')\n")
  (tmp_path / "syntax.py").write_text("def f(:\n")
  cases = [  # (arguments, exit code, text)
    (["show", f"{SEEDS}:mynet_forward", "--arg", "f32[2,2]"], 2, "--arg"),
    (["show", str(tmp_path / "raises.py") + ":f"], 1, "RuntimeError: broken at import"),
    (["show", str(tmp_path / "syntax.py") + ":f"], 1, "SyntaxError"),
    (["show", "os.path:join", "--arg", "f32[2]"], 1, "primc show: "),
    (["cache", "prune", "--max-bytes", "-5"], 2, "negative"),
  ]
  for args, code, text in cases:
    proc = primc(*args, cache=cache, check=False)
    assert proc.returncode == code, (args, proc.stderr)
    assert text in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert "error: show:" not in proc.stderr
  piped = subprocess.run(
    f"{sys.executable} -m primc show {SEEDS}:mynet_forward --arg f32[2,2] "
    f"--arg f32[2,2] --arg f32[2] --stage source | head -1",
    shell=True,
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, PRIMC_CACHE_DIR=str(cache)),
  )
  assert piped.stdout.strip() and "Traceback" not in piped.stderr, piped.stderr


def test_help_explains_the_cache_actions_and_its_directory(cache):
  out = primc("cache", "--help", cache=cache).stdout
  for word in ("info", "clear", "verify", "prune", "PRIMC_CACHE_DIR", "PRIMC_CACHE_MAX_BYTES"):
    assert word in out


def test_the_pytest_plugin_leaves_a_directory_mode_alone_and_names_a_file(tmp_path):
  (tmp_path / "test_one.py").write_text("def test_one():\n  assert True\n")
  shared = tmp_path / "shared"
  shared.mkdir(mode=0o755)
  os.chmod(shared, 0o755)
  a_file = tmp_path / "a_file"
  a_file.write_text("")
  run = lambda opt: subprocess.run(
    [
      sys.executable,
      "-m",
      "pytest",
      "-q",
      "-p",
      "no:xdist",
      "-p",
      "no:cacheprovider",
      opt,
      "test_one.py",
    ],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=300,
  )
  ok = run(f"--primc-cache-dir={shared}")
  assert ok.returncode == 0, ok.stdout + ok.stderr
  assert oct(os.stat(shared).st_mode & 0o777) == "0o755"  # never chmodded
  bad = run(f"--primc-cache-dir={a_file}")
  assert bad.returncode == 4 and "not a directory" in bad.stderr
  assert "INTERNALERROR" not in bad.stdout + bad.stderr
