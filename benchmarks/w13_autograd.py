"""W13: autograd's own example programs, run whole, against autograd.

Each example of autograd's repository (`examples/`: `EXAMPLES`, those that need neither
a download, autograd's internals nor complex numbers) runs in a fresh process twice: as it
is, on autograd, and with its imports changed to primc's (`autograd.numpy` ->
`primc.numpy`, `autograd.scipy` -> `primc.scipy`, `autograd`'s transforms, `flatten`,
`fixed_point`, `primitive`/`defvjp` and `check_grads` -> primc's; `autograd.numpy.random`
-> numpy's), each mapped when the example imports it; autograd's optimizers and tracer,
plain numpy helpers, stay autograd's, and autograd itself loads only for them. primc runs
cold (an empty cache) and warm (the cache of the cold run). Plots are drawn by matplotlib
on Agg where it is installed (`make bench-peers` installs it), else not (a stub stands in;
fluidsim, which reads its images with matplotlib, then fails). `--no-plots` takes the
stub even where matplotlib is installed: the plotting examples then time their numerical
work, not their drawing, which costs the same in both frameworks and is most of theirs.

The examples are not part of primc: they are read from a checkout of autograd
(`--examples DIR`), or downloaded at a fixed commit into primc's cache folder.

  python benchmarks/w13_autograd.py [--examples DIR] [--only rnn,lstm] [--no-plots]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.common import child_env  # noqa: E402

COMMIT = "bff107b"  # autograd's examples at this commit
URL = "https://raw.githubusercontent.com/HIPS/autograd/{commit}/examples/{name}"
EXAMPLES = [
  "logistic_regression",
  "neural_net_regression",
  "rnn",
  "lstm",
  "hmm_em",
  "tanh",
  "fixed_points",
  "negative_binomial_maxlike",
  "rosenbrock",
  "sinusoid",
  "define_gradient",
  "gaussian_process",
  "bayesian_optimization",
  "ica",
  "black_box_svi",
  "gmm",
  "bayesian_neural_net",
  "natural_gradient_black_box_svi",
  "ode_net",
  "gplvm",
  "deep_gaussian_process",
  "fluidsim",
  "wing",
  "mixture_variational_inference",
]
FOLDERS = {
  "fluidsim": "fluidsim/",
  "wing": "fluidsim/",
}  # examples in a folder of their own, with their data
DATA = ["fluidsim/init_smoke.png", "fluidsim/skull.png"]
FILES = [f"{FOLDERS.get(e, '')}{e}.py" for e in EXAMPLES] + ["data.py", "data_mnist.py", *DATA]
# (each copied flat into the folder an example runs in; lstm imports
# rnn; hmm_em reads lstm.py; bayesian_optimization, gplvm and deep_gaussian_process
# import gaussian_process; bayesian_neural_net and natural_gradient_black_box_svi import
# black_box_svi; gmm and gplvm take their data from data.py, which imports
# data_mnist.py: nothing is downloaded)

# The imports changed: run before the example, in its process
HARNESS = textwrap.dedent("""
    import os, sys, types, importlib.abc, importlib.util
    mode = sys.argv[1]
    stub = os.environ.get("W13_PLOTS") == "0"  # (`--no-plots`)
    if stub or importlib.util.find_spec("matplotlib") is None:  # else the real one, on Agg
      class _Any:
          def __getattr__(self, name): return _Any()
          def __call__(self, *a, **k): return _Any()
          def __iter__(self): return iter(())
      def _imread(path, *a, **k):
          # matplotlib's reading of an 8-bit PNG: float32 in [0, 1], by Pillow (which
          # matplotlib reads it with)
          import numpy
          from PIL import Image
          return numpy.divide(numpy.asarray(Image.open(path)), 255, dtype=numpy.float32)
      class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
          # matplotlib and its submodules (pyplot, cm, image): every name a stand-in
          def find_spec(self, name, path, target=None):
              if name.split(".")[0] != "matplotlib":
                  return None
              return importlib.util.spec_from_loader(name, self, is_package=True)
          def create_module(self, spec):
              module = types.ModuleType(spec.name)
              module.__getattr__ = lambda attr: _Any()
              module.use = lambda *a, **k: None
              module.imread = _imread  # (data, not drawing: fluidsim's images)
              return module
          def exec_module(self, module):
              pass
      sys.meta_path.insert(0, _Stubs())
    if mode == "primc":
        import importlib
        TRANSFORMS = ("grad", "value_and_grad", "elementwise_grad", "jacobian", "hessian",
                      "grad_and_aux", "make_vjp", "make_jvp", "hessian_tensor_product",
                      "hessian_vector_product", "tensor_jacobian_product",
                      "vector_jacobian_product", "make_hvp", "make_ggnvp", "deriv",
                      "checkpoint")
        def check_grads(f, x=None, modes=("fwd", "rev"), order=2):
            def check(*args):
                primc = importlib.import_module("primc")
                primc.check_grads(f, args, order=order, modes=tuple(modes))
            return check if x is None else check(x)
        def shim(name, **attrs):  # a module of primc's names; autograd's own for the rest
            module = types.ModuleType(name)
            module.__dict__.update(attrs, __path__=[])
            module.__getattr__ = lambda attr: getattr(real(name), attr)
            return module
        def ours(name):
            # the example's imports: primc's (imported when the example imports them)
            primc = importlib.import_module("primc")
            if name == "autograd":
                return shim(name, **{t: getattr(primc, t) for t in TRANSFORMS})
            if name == "autograd.numpy.random":
                random = importlib.import_module("numpy.random")
                importlib.import_module("primc.numpy").random = random
                return random
            if name.startswith(("autograd.numpy", "autograd.scipy")):
                module = importlib.import_module("primc" + name[len("autograd"):])
                if not hasattr(module, "__path__"):  # (a parent of what the example
                    module.__path__ = []  # imports: `autograd.scipy.stats.norm`)
                return module
            if name == "autograd.misc.fixed_points":
                return importlib.import_module("primc.fixed_points")
            if name in ("autograd.misc", "autograd.misc.flatten"):
                tree_util = importlib.import_module("primc.tree_util")
                return shim(name, flatten=tree_util.ravel_pytree,
                            flatten_func=tree_util.flatten_func)
            if name == "autograd.extend":
                extend = importlib.import_module("primc.extend")
                return shim(name, primitive=extend.primitive, defvjp=extend.defvjp)
            if name == "autograd.test_util":
                return shim(name, check_grads=check_grads)
            if name == "autograd.builtins":  # autograd's containers: Python's own
                return shim(name, tuple=tuple, list=list, dict=dict)
            return None
        loaded = []  # autograd's own: "loading", then "loaded"
        def real(name):
            # autograd's own module `name` (its optimizers, its tracer), on autograd
            # itself: autograd loads once, as it is, then its transforms become primc's
            if not loaded:
                loaded.append("loading")
                for k in [k for k in sys.modules if k.split(".")[0] == "autograd"]:
                    del sys.modules[k]
                import autograd, autograd.misc.flatten, autograd.misc.optimizers
                import autograd.test_util, autograd.extend, autograd.builtins
                pnp = importlib.import_module("primc.numpy")
                pnp.numpy_boxes = autograd.numpy.numpy_boxes  # (its tracer reads it)
                for k in [k for k in sys.modules
                          if k.startswith(("autograd.numpy", "autograd.scipy"))]:
                    del sys.modules[k]  # (the example's: primc's, by the finder)
                autograd.numpy = pnp
                for k in ("autograd", "autograd.misc.flatten", "autograd.extend",
                          "autograd.test_util", "autograd.builtins"):
                    for attr, value in vars(ours(k)).items():
                        if not attr.startswith("__"):
                            setattr(sys.modules[k], attr, value)
                autograd.misc.flatten = sys.modules["autograd.misc.flatten"].flatten
                loaded[0] = "loaded"
            return importlib.import_module(name)
        class _Autograd(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            # autograd's modules: primc's where it has them (`ours`), else autograd's own,
            # loaded only then: an example that imports none of autograd's helpers runs
            # without autograd, as it would for a user who changed its imports
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] != "autograd" or loaded[:1] == ["loading"]:
                    return None
                module = ours(name)
                if module is None and loaded:
                    return None  # (autograd's own, found where it is installed)
                spec = importlib.util.spec_from_loader(name, self)
                spec.loader_state = module
                return spec
            def create_module(self, spec):
                return spec.loader_state or real(spec.name)
            def exec_module(self, module):
                pass
        finder = _Autograd()
        sys.meta_path.insert(0, finder)
    sys.argv = [sys.argv[2]]
    sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]))
    # the example as Python runs a script (`python example.py`): its own `__main__`
    # module. (runpy.run_path, used before, made the imports primc's finder maps run
    # ~12 ms slower, in primc's runs only; measured, its cause not found.)
    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__ = sys.argv[0], __builtins__
    sys.modules["__main__"] = main
    with open(sys.argv[0], "rb") as f:
        code = compile(f.read(), sys.argv[0], "exec")
    exec(code, main.__dict__)
""")


def examples_dir(given: str | None) -> str:
  """The folder of the examples: `given`, or a download at COMMIT (kept in the cache)."""
  if given:
    return given
  folder = os.path.join(os.path.expanduser("~/.cache/primc-bench"), f"autograd-{COMMIT}")
  os.makedirs(folder, exist_ok=True)
  for name in FILES:
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path):
      with urllib.request.urlopen(URL.format(commit=COMMIT, name=name), timeout=60) as r:
        data = r.read()
      with open(path, "wb") as f:
        f.write(data)
  return folder


def run(
  example: str, folder: str, mode: str, cache: str, timeout: float, plots: bool = True
) -> dict:
  """One whole run in a fresh process: seconds, exit status, the last lines printed;
  without `plots`, matplotlib is the stand-in even where it is installed."""
  work = tempfile.mkdtemp(prefix="w13-")  # examples write files (plots) where they run
  try:
    for name in FILES:  # beside each other, as in the repository
      shutil.copy(os.path.join(folder, name), work)
    env = child_env(PRIMC_CACHE_DIR=cache, MPLBACKEND="Agg", W13_PLOTS=str(int(plots)))
    start = time.perf_counter()
    try:
      p = subprocess.run(
        [sys.executable, "-c", HARNESS, mode, os.path.join(work, f"{example}.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=timeout,
      )
      code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
      code, out, err = "timeout", "", ""
    seconds = time.perf_counter() - start
  finally:
    shutil.rmtree(work, ignore_errors=True)
  return {
    "seconds": seconds,
    "exit": code,
    "out": out.strip().splitlines()[-3:],
    "err": err.strip().splitlines()[-3:],
  }


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--examples")
  ap.add_argument("--only")
  ap.add_argument("--repeat", type=int, default=1)
  ap.add_argument("--timeout", type=float, default=1200)
  ap.add_argument("--no-plots", action="store_true", help="matplotlib's stand-in: no drawing")
  args = ap.parse_args()
  try:
    folder = examples_dir(args.examples)
  except OSError as e:
    print(
      f"W13: autograd's examples are not here and could not be downloaded ({e}); "
      "pass --examples DIR (a checkout's examples/ folder)"
    )
    return
  chosen = args.only.split(",") if args.only else EXAMPLES
  results = {}
  print("| example | autograd | primc cold | primc warm | warm / autograd |")
  print("|---|---|---|---|---|")
  for example in chosen:
    cache = tempfile.mkdtemp(prefix="w13-cache-")
    try:
      once = lambda mode: run(example, folder, mode, cache, args.timeout, not args.no_plots)
      ref = [once("autograd") for _ in range(args.repeat)]
      cold = once("primc")
      warm = [once("primc") for _ in range(args.repeat)]
    finally:
      shutil.rmtree(cache, ignore_errors=True)
    a = statistics.median(r["seconds"] for r in ref)
    w = statistics.median(r["seconds"] for r in warm)
    ok = all(r["exit"] == 0 for r in [*ref, cold, *warm])
    results[example] = {"autograd": ref, "cold": cold, "warm": warm}
    note = (
      ""
      if ok
      else " (failed: "
      + "; ".join(
        f"{r['exit']}: {' / '.join(r['err'][-1:])}" for r in [*ref, cold, *warm] if r["exit"] != 0
      )[:300]
      + ")"
    )
    print(
      f"| {example} | {a:.2f} s | {cold['seconds']:.2f} s | {w:.2f} s | {w / a:.2f}{note} |",
      flush=True,
    )
  path = os.path.join(ROOT, "benchmarks", "results_w13.json")
  try:  # the examples of earlier runs stay (a run of some replaces only theirs)
    with open(path) as f:
      results = {**json.load(f), **results}
  except (OSError, ValueError):
    pass
  with open(path, "w") as f:
    json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
