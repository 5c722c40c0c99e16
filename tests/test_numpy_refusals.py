"""primc.numpy refuses what numpy refuses, on plain values and traced.

A call numpy refuses on plain values falls to primc's own path (whose error names the
op and the user's line), so primc's path must refuse it too, or the call returns a
result where numpy says the arguments are wrong: a float where an integer is meant (a
count, an axis, a shape, a width) truncated, an array taken as an axis, a quantile out
of [0, 1]. Each function primc.numpy shares with numpy is called with arguments of each
kind below; where numpy raises, primc must raise, both on values and while tracing
(the arrays traced, the bad argument a Python value or a constant).
"""

import warnings

import numpy as np
import pytest

import primc
import primc.numpy as pnp

R = np.random.default_rng(0)
X = R.standard_normal(6)  # a vector
M = R.standard_normal((2, 3))  # a matrix
Q = np.array([0.1, 1.5, 0.5, -0.2])  # another length; as quantiles, two out of range

# (name, call(module, x, m)): x and m are the arrays (traced in the traced path); the
# bad argument is a Python value or a constant array
KINDS = {
  "axis out of range": lambda np_, x, m: np_.FN(m, axis=5),
  "negative axis out of range": lambda np_, x, m: np_.FN(m, axis=-3),
  "float axis": lambda np_, x, m: np_.FN(m, axis=1.0),
  "array second argument": lambda np_, x, m: np_.FN(x, Q),
  "fractional second argument": lambda np_, x, m: np_.FN(x, 1.5),
  "whole float second argument": lambda np_, x, m: np_.FN(x, 2.0),
  "string second argument": lambda np_, x, m: np_.FN(x, "a"),
  "whole float first argument": lambda np_, x, m: np_.FN(3.0),
  "float in a shape": lambda np_, x, m: np_.FN((2, 3.0)),
  "integer out of the dtype's range": lambda np_, x, m: np_.FN([2**40], dtype="int32"),
  "repeated axis": lambda np_, x, m: np_.FN(m, axis=(0, 0)),
  "tuple axis": lambda np_, x, m: np_.FN(m, axis=(0, 1)),
  "negative second argument": lambda np_, x, m: np_.FN(x, -1),
  "boolean array second argument": lambda np_, x, m: np_.FN(x, np.array([True, False])),
  "matrices": lambda np_, x, m: np_.FN(m, m),
  "matrix and integer": lambda np_, x, m: np_.FN(m, 5),
}


def _shared_names():
  names = []
  for name in sorted(dir(pnp)):
    ours, theirs = getattr(pnp, name), getattr(np, name, None)
    if name.startswith("_") or theirs is None or isinstance(theirs, type):
      continue
    if callable(ours) and callable(theirs) and not isinstance(ours, type):
      names.append(name)
  return names


NAMES = _shared_names()

# Where primc takes what numpy refuses, on purpose (the reason given): not a wrong result
LENIENT = {
  "clip": "Paddle's and MindSpore's clip(x, min): numpy's clip needs a_max",
  "issubdtype": "numpy's own function: a traced array is read as its dtype (numpy refuses"
  " only its own arrays)",
}
LENIENT_KINDS = {
  ("unstack", "float in a shape"): "array-likes, as every op takes (numpy reads x.ndim)",
}
# Refusals of numpy's that depend on the arrays' values, which primc checks where they are
# known (on values), not while tracing them (as JAX)
VALUE_CHECKS = {("geomspace", "matrix and integer"): "a sequence through zero"}


class _Module:
  """A module whose `FN` is one function of `module`."""

  def __init__(self, module, name):
    self.FN = getattr(module, name)


def _numpy_refuses(name, kind) -> bool:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
      KINDS[kind](_Module(np, name), X, M)
    except MemoryError:  # (numpy allocates; a traced shape is not a refusal)
      return False
    except Exception:
      return True
  return False


def test_the_family_covers_numpys_functions():
  assert len(NAMES) > 200
  assert {"diff", "zeros", "argmax", "nanquantile", "split", "pad"} <= set(NAMES)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_refuses_what_numpy_refuses(kind):
  """Every shared function, one kind of bad argument: where numpy raises, primc raises
  (on values, and while tracing the arrays); the functions that returned a result are
  listed together."""
  accepted = []
  for name in NAMES:
    if name in LENIENT or (name, kind) in LENIENT_KINDS or not _numpy_refuses(name, kind):
      continue
    ours = _Module(pnp, name)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      for path in ("values",) if (name, kind) in VALUE_CHECKS else ("values", "traced"):
        try:
          if path == "values":
            KINDS[kind](ours, X, M)
          else:
            primc.make_program(lambda x, m: KINDS[kind](ours, x, m))(X, M)
        except Exception:
          continue
        accepted.append(f"{name} ({path})")
  assert not accepted, f"numpy refuses, primc returns a result: {', '.join(accepted)}"


# An integer argument given a float: numpy's TypeError; primc's names the op and the line
INTEGER_ARGUMENTS = {
  "diff": lambda np_, x: np_.diff(x, 1.5),
  "zeros": lambda np_, x: np_.zeros((2, 3.0)),
  "eye": lambda np_, x: np_.eye(3.0),
  "pad": lambda np_, x: np_.pad(x, 1.5),
  "tile": lambda np_, x: np_.tile(x, 2.0),
  "argmax": lambda np_, x: np_.argmax(x, 0.0),
  "split": lambda np_, x: np_.split(x, [1.5]),
  "partition": lambda np_, x: np_.partition(x, 1.5),
  "round": lambda np_, x: np_.round(x, 1.5),
  "vander": lambda np_, x: np_.vander(x, 2.0),
  "diag": lambda np_, x: np_.diag(x, 1.0),
  "reshape": lambda np_, x: np_.reshape(x, (2, 3.0)),
}


@pytest.mark.parametrize("name", sorted(INTEGER_ARGUMENTS))
def test_a_float_for_an_integer_names_the_op_and_the_line(name):
  call = INTEGER_ARGUMENTS[name]
  with pytest.raises(TypeError):
    call(np, X)
  for run in (
    lambda: call(pnp, X),
    lambda: primc.make_program(lambda x: call(pnp, x))(X),
    lambda: primc.jit(lambda x: call(pnp, x))(X),
  ):
    with pytest.raises(primc.PrimcError) as info:
      run()
    assert isinstance(info.value, TypeError)
    assert name in str(info.value) and "test_numpy_refusals.py" in str(info.value)


# What numpy takes as an integer (its integer scalars, 0-d integer arrays), primc
# takes too: the checks above refuse floats, not these
INTEGER_FORMS = [np.int32(2), np.array(2), 2]


@pytest.mark.parametrize("n", INTEGER_FORMS, ids=lambda n: type(n).__name__)
@pytest.mark.parametrize(
  "call",
  [
    lambda np_, x, n: np_.zeros((n, 3)),
    lambda np_, x, n: np_.zeros(n),
    lambda np_, x, n: np_.diff(x, n),
    lambda np_, x, n: np_.argmax(M, n % 2),
    lambda np_, x, n: np_.tile(x, n),
    lambda np_, x, n: np_.pad(x, n),
    lambda np_, x, n: np_.eye(n + 1),
    lambda np_, x, n: np_.round(x, n),
  ],
)
def test_numpys_integers_are_taken(call, n):
  want = call(np, X, n)
  np.testing.assert_array_equal(call(pnp, X, n), want)
  program = primc.make_program(lambda x: call(pnp, x, n))(X)
  np.testing.assert_array_equal(primc.interpret(program, X)[0], want)
