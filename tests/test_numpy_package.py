"""`primc.numpy` is a package split by family (`primc/numpy/_*.py`); its public names are
numpy's names it has, as they were when it was one module (`numpy_public_names.txt`:
a name added or removed on purpose is added or removed there too)."""

import os

import numpy as np

import primc.numpy as pnp

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(pnp.__file__)


def _public():
  """(pytest's assertion rewriting adds names that are not identifiers: not ours)"""
  return {n for n in dir(pnp) if (not n.startswith("_") or n == "__version__") and n.isidentifier()}


def test_the_public_names_are_the_recorded_ones():
  with open(os.path.join(HERE, "numpy_public_names.txt")) as f:
    recorded = set(f.read().split())
  assert not recorded - _public(), "names gone"
  assert not _public() - recorded, "names added (record them, or keep them private)"


def test_no_module_of_the_package_is_over_800_lines():
  for name in os.listdir(PACKAGE):
    if name.endswith(".py"):
      with open(os.path.join(PACKAGE, name)) as f:
        assert len(f.readlines()) <= 800, name


def test_public_functions_live_in_the_package_or_are_numpys():
  """Each public function is the package's own (its home a module of it) or numpy's
  re-exported unchanged (`pnp.dtype is np.dtype`): no name leaks in from elsewhere."""
  for name in _public():
    value = getattr(pnp, name)
    if not callable(value) or isinstance(value, type):
      continue
    home = getattr(value, "__module__", "") or ""
    assert (
      home.startswith("primc.numpy")
      or getattr(np, name, None) is value
      or (value is getattr(np.fft, name, None))
    ), (name, home)


def test_a_call_inside_the_package_reaches_the_public_wrappers():
  """The package's functions call each other through the public, wrapped functions (one
  namespace's semantics): a view made inside an op records its base as a public one does,
  so a write into the result of `atleast_2d` (a reshape inside) reaches its argument."""

  def f(x):
    y = x * 1.0
    v = pnp.atleast_2d(y)
    v[0, 0] = 5.0
    return y

  def g(x):
    y = x * 1.0
    v = np.atleast_2d(y)
    v[0, 0] = 5.0
    return y

  import primc

  x = np.arange(3.0)
  np.testing.assert_array_equal(primc.jit(f)(x), g(x.copy()))
