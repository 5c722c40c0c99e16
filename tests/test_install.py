"""primc as users install it: a wheel, built from this tree and installed into a fresh
virtual environment (its dependencies are this environment's, seen through a path file),
then used from another directory: one top-level name, and a cold compile whose kernel
workers and tiered background compile run from the installed package."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("wheel")
  source = tmp / "source"  # a copy: building leaves files in the tree it builds
  source.mkdir()
  for name in ("pyproject.toml", "README.md", "primc", "passes", "codegen"):
    copy = shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy
    copy(
      os.path.join(ROOT, name),
      source / name,
      **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
    )
  wheels = tmp / "wheels"
  build = subprocess.run(
    [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert build.returncode == 0, build.stderr
  [found] = list(wheels.glob("primc-*.whl"))
  return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
  """A fresh virtual environment with the wheel installed; its Python."""
  root = tmp_path_factory.mktemp("venv") / "v"
  subprocess.run(
    [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=300
  )
  python = root / ("Scripts" if os.name == "nt" else "bin") / "python"
  install = subprocess.run(
    [
      sys.executable,
      "-m",
      "pip",
      "--python",
      str(python),
      "install",
      "--no-deps",
      "-q",
      str(wheel),
    ],
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert install.returncode == 0, install.stderr
  site = subprocess.run(
    [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
    capture_output=True,
    text=True,
    check=True,
  )
  # the dependencies: this environment's packages, as a plain path (its .pth files, the
  # editable primc's among them, are not run)
  with open(os.path.join(site.stdout.strip(), "primc_test_deps.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  return python


def test_the_wheel_installs_one_top_level_name(wheel, venv, tmp_path):
  names = zipfile.ZipFile(wheel).namelist()
  tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
  assert tops == {"primc"}, tops
  assert "primc/passes/fusion.py" in names and "primc/codegen/store.py" in names
  code = "import primc.passes, primc.codegen.store, primc; print(primc.passes.__file__)"
  run = subprocess.run(
    [str(venv), "-c", code],
    capture_output=True,
    text=True,
    env=_env(tmp_path),
    cwd=tmp_path,
    timeout=300,
  )
  assert run.returncode == 0, run.stderr
  assert "site-packages" in run.stdout and str(tmp_path) not in run.stdout


def _env(tmp_path, **values):
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRIMC_TIERED")}
  cache = tmp_path / "cache"
  cache.mkdir(mode=0o700, exist_ok=True)
  return dict(env, PRIMC_CACHE_DIR=str(cache), **values)


COLD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import primc, primc.numpy as p
    f = primc.jit(primc.hessian(lambda x: (p.tanh(x) * p.sin(x)).sum()))
    x = np.linspace(-1, 1, 3)
    got = f(x)
    if sys.argv[1] == "tiered":
        assert f.wait_compiled(timeout=300), "the background compile did not finish"
        got = f(x)
    stats = primc.cache_stats()
    print(json.dumps({"hessian": got.tolist(), "stats": {k: v for k, v in stats.items()
                                                          if isinstance(v, int)},
                      "primc": primc.__file__}))
""")


def _hessian(x):
  import numpy as np

  t, s, c = np.tanh(x), np.sin(x), np.cos(x)
  dt = 1 - t * t
  return np.diag(-2 * t * dt * s + 2 * dt * c - t * s)


@pytest.mark.parametrize("mode", ["workers", "tiered"])
def test_an_installed_primc_compiles_with_its_workers(venv, tmp_path, mode):
  """A cold compile from the wheel: compile workers (counted) or the tiered background
  compile import the installed primc and the real numpy; no traceback, right results."""
  import numpy as np

  env = _env(tmp_path, PRIMC_COMPILE_WORKERS="2", PRIMC_TIERED="1" if mode == "tiered" else "0")
  run = subprocess.run(
    [str(venv), "-c", COLD, mode],
    capture_output=True,
    text=True,
    env=env,
    cwd=tmp_path,
    timeout=600,
  )
  assert run.returncode == 0, run.stderr
  assert "Traceback" not in run.stderr, run.stderr
  out = json.loads(run.stdout.strip().splitlines()[-1])
  assert "site-packages" in out["primc"]
  np.testing.assert_allclose(out["hessian"], _hessian(np.linspace(-1, 1, 3)), rtol=1e-6, atol=1e-7)
  logs = list((tmp_path / "cache").rglob("*.log"))
  assert all(not log.read_text().strip() for log in logs), [log.read_text() for log in logs]
  if mode == "workers":  # a worker ran from the wheel and exited cleanly (it may have
    # compiled nothing: this process can be quicker on a small program)
    assert out["stats"].get("worker_runs", 0) >= 1, out["stats"]
  else:  # the worker compiled the module; this process loaded it
    assert out["stats"].get("kernel_compiles", 0) == 0, out["stats"]
    assert out["stats"].get("kernel_cache_loads", 0) >= 1, out["stats"]


def test_a_worker_imports_this_primc_and_nothing_in_its_way(venv, tmp_path):
  """What a worker finds: the installed primc's packages, the real numpy (not
  `primc/numpy.py`), and nothing from the working directory (a `numpy.py` and a
  `primc/` there)."""
  (tmp_path / "numpy.py").write_text("raise SystemExit('the working directory shadowed numpy')\n")
  (tmp_path / "primc").mkdir()
  (tmp_path / "primc" / "__init__.py").write_text("raise SystemExit('a stray primc')\n")
  code = (
    "import os, sys, primc.codegen.spawn as s, subprocess; "
    f"os.chdir({str(tmp_path)!r}); "
    "print(subprocess.run(s.command('primc.codegen.spawn', 'numpy', 'primc.numpy', "
    "'primc.codegen.kernel_workers'), env=s.environment(None), capture_output=True, "
    "text=True).stdout)"
  )
  # the parent starts elsewhere (a working directory shadows its own imports too), then
  # moves into the one with the stray modules and starts the worker there
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  run = subprocess.run(
    [str(venv), "-c", code],
    capture_output=True,
    text=True,
    env=_env(tmp_path),
    cwd=elsewhere,
    timeout=300,
  )
  assert run.returncode == 0, run.stderr
  found = json.loads(run.stdout.strip().splitlines()[-1])
  assert found["numpy"].endswith(os.path.join("numpy", "__init__.py")), found
  assert str(tmp_path) not in found["numpy"]
  for name in ("primc.numpy", "primc.codegen.kernel_workers"):
    assert "site-packages" in found[name] and str(tmp_path) not in found[name], found
