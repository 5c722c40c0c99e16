"""The public API is typed: every function `import primc` names, and `primc.lax`'s own,
annotates each parameter and its return, and the annotations resolve (a typo in one, or
a name not imported, fails here rather than in a user's type checker)."""

import inspect
import typing

import pytest

import primc
import primc.lax


def _public_functions():
  for module, names in ((primc, primc.__all__), (primc.lax, dir(primc.lax))):
    for name in names:
      value = getattr(module, name)
      if name.startswith("_") or not inspect.isfunction(value):
        continue
      home = getattr(value, "__module__", "") or ""
      if module is primc.lax and home != "primc.lax":
        continue  # names lax imports from elsewhere
      if home.startswith("primc"):
        yield f"{module.__name__}.{name}", value


@pytest.mark.parametrize("name, fn", sorted(_public_functions(), key=lambda x: x[0]))
def test_public_functions_are_annotated(name, fn):
  fn = inspect.unwrap(fn)
  signature = inspect.signature(fn)
  missing = [p.name for p in signature.parameters.values() if p.annotation is p.empty]
  assert not missing, f"{name}: parameters without annotations: {missing}"
  assert signature.return_annotation is not signature.empty, f"{name}: no return annotation"
  typing.get_type_hints(fn)  # every annotation resolves


def test_there_are_public_functions_to_check():
  names = {name for name, _ in _public_functions()}
  assert {"primc.grad", "primc.jit", "primc.vmap", "primc.lax.scan"} <= names
