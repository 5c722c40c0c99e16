"""The shape of the code: layers that only import downward, no import cycles, few
function-local imports (each with its reason)."""

import ast
import os


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"primc": "primc", "passes": "primc.passes", "codegen": "primc.codegen"}

# Bottom to top: a module imports only modules of its own layer or of lower ones.
LAYERS = [
  (
    "IR",
    [
      "primc.core",
      "primc.tree",
      "primc.trace",
      "primc.prims",
      "primc.interpreter",
      "primc.runners",
      "primc.settings",
      "primc.breaks",
    ],
  ),
  (
    "transforms and ops",
    [
      "primc.ad",
      "primc.batching",
      "primc.numpy",
      "primc.contraction",
      "primc.custom",
      "primc.extend",
      "primc.convolution",
      "primc.random",
      "primc.lax",
    ],
  ),
  ("passes", ["primc.passes"]),
  ("codegen", ["primc.codegen"]),
  (
    "compile and the functional API",
    [
      "primc.compile",
      "primc.api",
      "primc.fixed_points",
      "primc.kept",
      "primc.replayed",
      "primc.stored",
      "primc.tape",
    ],
  ),
  (
    "front ends",
    [
      "primc.eager",
      "primc.static",
      "primc.nn",
      "primc.vision",
      "primc.optimizer",
      "primc.autograd",
      "primc.functional",
      "primc.dask",
    ],
  ),
  ("public API, CLI, pytest plugin", ["primc", "primc.cli", "primc.pytest_plugin"]),
]


def modules() -> dict[str, str]:
  """Module name -> file, named as the installed package names them."""
  out = {}
  for folder, package in FOLDERS.items():
    for where, dirs, files in os.walk(os.path.join(ROOT, folder)):
      dirs[:] = [d for d in dirs if d != "__pycache__" and (folder != "primc" or d not in FOLDERS)]
      sub = os.path.relpath(where, os.path.join(ROOT, folder)).replace(os.sep, ".")
      pkg = package if sub == "." else f"{package}.{sub}"
      for name in files:
        if name.endswith(".py"):
          out[pkg if name == "__init__.py" else f"{pkg}.{name[:-3]}"] = os.path.join(where, name)
  return out


def layer_of(module: str) -> int:
  best = None
  for k, (_, prefixes) in enumerate(LAYERS):
    for p in prefixes:
      if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
        best = (k, len(p))
  assert best is not None, f"{module} has no layer: add it to LAYERS"
  return best[0]


def imports(module: str, path: str, known) -> list[tuple[str, int, bool, str]]:
  """(imported project module, line, function-local, source line) for each import."""
  tree = ast.parse(open(path).read())
  lines = open(path).read().splitlines()
  out = []

  def visit(node, local):
    for child in ast.iter_child_nodes(node):
      inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
      targets = []
      if isinstance(child, ast.Import):
        targets = [a.name for a in child.names]
      elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
        targets = [
          f"{child.module}.{a.name}" if f"{child.module}.{a.name}" in known else child.module
          for a in child.names
        ]
      for t in targets:
        while t not in known and "." in t:
          t = t.rsplit(".", 1)[0]
        if t in known and t != module:
          out.append((t, child.lineno, local, lines[child.lineno - 1]))
      visit(child, inner)

  visit(tree, False)
  return out


def test_layers_import_only_downward_and_nothing_imports_in_a_cycle():
  mods = modules()
  edges, upward = {}, []
  for m, path in mods.items():
    for target, line, local, text in imports(m, path, mods):
      edges.setdefault(m, set()).add(target)
      if layer_of(target) > layer_of(m):
        upward.append(
          f"{m}:{line} imports {target} ({LAYERS[layer_of(target)][0]} is above "
          f"{LAYERS[layer_of(m)][0]}): {text.strip()}"
        )
  assert not upward, "\n".join(upward)
  # cycles: depth-first search for a back edge
  state, stack = {}, []

  def dfs(m):
    state[m] = "open"
    stack.append(m)
    for t in sorted(edges.get(m, ())):
      if state.get(t) == "open":
        raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t) :] + [t]))
      if t not in state:
        dfs(t)
    stack.pop()
    state[m] = "done"

  for m in sorted(mods):
    if m not in state:
      dfs(m)


def test_function_local_imports_are_few_and_say_why():
  mods = modules()
  local = [
    (m, line, text)
    for m, path in mods.items()
    for _, line, is_local, text in imports(m, path, mods)
    if is_local
  ]
  assert len(local) <= 10, local
  for m, line, text in local:
    assert "#" in text, f"{m}:{line}: a function-local import needs its reason: {text.strip()}"
