"""Front ends (eager tensors, static program variables) and the calls on plain values."""

from __future__ import annotations

import builtins
import functools
import inspect
from typing import Callable

import numpy as np

from primc.core import SUPPORTED_DTYPES
from primc.numpy._base import named_error, transpose
from primc.numpy._indexing import _At
from primc.numpy._tracer import (
  _FRONT_END_CLASSES,
  _SAME_OBJECT,
  _TRACER_METHODS,
  _apart,
  _numpy_dispatch,
  _refuse,
)
from primc.trace import Tracer, tracing
from primc.trace import state as trace_state
from primc.tree import tree_flatten

# Front ends: eager tensors and static program variables register their classes here, so
# that every op takes them (and their operators, methods and numpy's own functions work).

_front_ends: list[tuple[type, Callable]] = []  # (class, apply(op, args, kwargs))
_front_end_values: dict[type, Callable | None] = {}  # class -> value(x), or None


def front_end_apply(cls: type) -> Callable:
  """The front end's `apply(op, args, kwargs)` (`register_front_end`)."""
  return next(apply for c, apply in _front_ends if c is cls)


def front_end_value(cls: type) -> Callable | None:
  """How to read a `cls` value's numpy value now (None: the front end has no values yet,
  as static programs' variables)."""
  return _front_end_values.get(cls)


def _mentions(args, kwargs, cls) -> bool:
  """Whether an argument, or an element of a list or tuple argument, is a `cls`."""
  for a in (*args, *kwargs.values()):
    if isinstance(a, cls) or (
      isinstance(a, (list, tuple)) and builtins.any(isinstance(b, cls) for b in a)
    ):
      return True
  return False


def on_front_ends(fn, args, kwargs):
  """fn(*args, **kwargs), handed to a front end (the eager tape, static programs) when an
  argument is one of its values."""
  for cls, apply in _front_ends:
    if _mentions(args, kwargs, cls):
      return apply(fn, args, kwargs)
  return fn(*args, **kwargs)


def front_end_of(args, kwargs) -> type | None:
  """The front end class of a value anywhere among the arguments (in pytrees too)."""
  leaves = tree_flatten((list(args), kwargs))[0]
  for cls, _ in _front_ends:
    if builtins.any(isinstance(x, cls) for x in leaves):
      return cls
  return None


def takes_front_ends(fn):
  """`fn` (a function of primc.scipy, primc.lax) handing a call with a front end's value
  anywhere among its arguments to that front end, as primc.numpy's ops do (without their
  numpy twin: a numpy function of the same name may mean another thing)."""

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    cls = front_end_of(args, kwargs) if _front_ends else None
    return fn(*args, **kwargs) if cls is None else front_end_apply(cls)(fn, args, kwargs)

  wrapped._takes_front_ends = True
  _LIBRARY_OPS.add(fn)
  return wrapped


# The functions `takes_front_ends` hands to front ends: library ops (primc.lax's, primc.scipy's),
# which live as long as the process and read no state, as primc.numpy's own ops do
_LIBRARY_OPS: set = set()


def wrap_public_functions(namespace: dict, module: str) -> None:
  """`takes_front_ends` on each public function of `namespace` (a module's globals) that
  does not take them yet."""
  for name, value in list(namespace.items()):
    if (
      not name.startswith("_")
      and inspect.isfunction(value)
      and not getattr(value, "_takes_front_ends", False)
    ):
      namespace[name] = takes_front_ends(value)


# A call on plain values (arrays of primc's dtypes and numbers, and lists or tuples of
# them: no traced value, no front end's) outside a trace runs numpy's function of the same
# name (inside one, the op is staged: `eye`'s iotas compile to index arithmetic, where its
# values would be a constant loaded from memory): on those,
# primc's ops compute what numpy computes (tests hold them to numpy in every path), and
# numpy's own function costs 1-5 us where the op, bound primitive by primitive, costs
# 20-2000 us. primc's path runs instead where the two differ: the names whose primc
# semantics differ (`_OWN_SEMANTICS`: creation functions check shape and fill as primc's
# op), a call numpy refuses (a Paddle keyword, an error: primc's path names the op in its
# own words), one with `out=` (primc writes no argument), and a result primc would not
# give (a dtype it lacks; float16 from non-float16 operands, where primc's floats of
# bools are float64).
# numpy's scalars come back as numpy's scalars (a float64 is a Python float: matplotlib's
# `alpha=`, `f"{x:.3f}"` take it), as numpy and autograd return them; numpy's warnings
# (a log of 0) are numpy's.
_OWN_SEMANTICS = frozenset(
  {"zeros", "ones", "full", "eye", "linalg.eigh", "linalg.qr", "linalg.svd", "linalg.lstsq"}
)  # (primc's eigenvectors and singular vectors have a sign of their own; lstsq's residuals
# are always there, as JAX's: see _linalg)
_PLAIN_TYPES = frozenset(
  {int, float, bool, complex, str, type(None), type, builtins.slice, type(Ellipsis)}
)
_NATIVE = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)
_HALF = np.dtype(np.float16)
_WHOLE = _NATIVE - {_HALF}  # (float16 results need `_numpy_result`'s check)
_WHOLE_SCALARS = frozenset(d.type for d in _WHOLE)  # (np.float64, np.int32, ...)
_NUMBERS = frozenset({float, int, bool})


_KEYWORD_TYPES = frozenset({int, bool, float, str, type(None), type})


def _plain_items(items) -> bool:
  """Whether a list or tuple holds only numbers and arrays of primc's dtypes (not float16),
  at any depth (`_plain`; the common items inline)."""
  for y in items:
    t = type(y)
    if not (t is int or t is float or (t is np.ndarray and y.dtype in _WHOLE)):
      return _plain(items) == 1
  return True


def _plain_keywords(kwargs: dict) -> bool:
  """Whether keywords are plain settings (`axis=0`, `keepdims=True`, `dtype=`, axes as
  tuples), not `out=` (which primc never writes) nor values."""
  if "out" in kwargs:
    return False
  for v in kwargs.values():
    t = type(v)
    if t not in _KEYWORD_TYPES and not (t is tuple and _plain(v) == 1) and t is not np.dtype:
      return False
  return True


def _plain(x) -> int:
  """0 when `x` holds a traced value, a front end's value or an array of a dtype primc
  lacks; else 1, or 2 when it holds a float16 array."""
  t = type(x)
  if t is np.ndarray:  # (numpy's dtypes of native order are singletons: `is`)
    return 0 if x.dtype not in _NATIVE else 2 if x.dtype is _HALF else 1
  if t in _PLAIN_TYPES:
    return 1
  if t is tuple or t is list:
    kinds = [_plain(y) for y in x]
    return 0 if 0 in kinds else builtins.max(kinds, default=1)
  return 1 if isinstance(x, (np.generic, np.dtype)) else 0


def _numpy_result(out, half: bool):
  """numpy's result as numpy gives it (a scalar as numpy's scalar: a float64 is a Python
  float, which plotting and formatting code takes, as numpy and autograd give it), or
  None where primc's would differ."""
  t = type(out)
  if t is np.ndarray or isinstance(out, np.generic):
    return out if out.dtype in _NATIVE and (half or out.dtype is not _HALF) else None
  if t is tuple or t is list or isinstance(out, tuple):  # (numpy.linalg's named ones too)
    kinds = set(map(type, out))  # (arrays or numpy scalars of primc's dtypes, the common
    # cases, by their types: `unstack` gives many)
    if kinds <= _WHOLE_SCALARS or (kinds == {np.ndarray} and {o.dtype for o in out} <= _WHOLE):
      return out
    parts = [_numpy_result(o, half) for o in out]
    if builtins.any(p is None for p in parts):
      return None
    return t(parts) if t is tuple or t is list else t(*parts)
  if t is bool or t is int or t is float:  # (allclose's, size's: numpy's Python values)
    return out
  if isinstance(out, np.dtype):  # (result_type's)
    return out if out in _NATIVE else None
  return None


def _concrete(twin, args, kwargs, half):
  """While tracing: numpy's result on Python values alone (no array among the
  arguments) when it is one number (`prod(x.shape[1:])`: shapes are static, so sizes
  computed from them are Python's, as in numpy), else None (the op is staged)."""
  if builtins.any(_has_array(a) for a in (*args, *kwargs.values())):
    return None
  out = _numpy_result(twin(*args, **kwargs), half)
  return (
    out if out is not None and np.ndim(out) == 0 and not isinstance(out, (list, tuple)) else None
  )


def _has_array(x) -> bool:
  if isinstance(x, (np.ndarray, np.generic)):
    return True
  return (type(x) is tuple or type(x) is list) and builtins.any(_has_array(y) for y in x)


def _numpy_twin(name: str):
  """numpy's function of that name (`linalg.solve`: numpy.linalg's), where it runs calls on
  plain values (else None)."""
  *modules, last = name.split(".")
  space = np
  for module in modules:
    space = getattr(space, module, None)
  twin = getattr(space, last, None) or getattr(space, last.rstrip("_"), None)  # (`round_`)
  return twin if callable(twin) and name not in _OWN_SEMANTICS else None


def _front_end_aware(fn, name: str | None = None):
  """`fn` that runs numpy's twin (of `name`, by default `fn`'s) on plain values, and hands
  a call on a front end's values to that front end. One function per op (its slow paths
  are this module's, given the op): the package's ~300 wrappers live as long as the
  process, and every object of theirs is walked by each of the interpreter's collections,
  the ones at its exit included."""
  twin = _numpy_twin(name or fn.__name__)
  same_object = fn.__name__ in _SAME_OBJECT

  def wrapped(*args, **kwargs):
    if twin is not None and not trace_state.builders and (not kwargs or _plain_keywords(kwargs)):
      for a in args:  # the common case: arrays and Python numbers (kept short: every call)
        t = type(a)
        if t is np.ndarray:
          if a.dtype in _WHOLE:
            continue
          break
        if t not in _NUMBERS and ((t is not tuple and t is not list) or not _plain_items(a)):
          break
      else:
        try:
          out = twin(*args, **kwargs)
        except Exception:  # primc's path says what is wrong in its own words
          return _by_primc(fn, twin, same_object, args, kwargs)
        if (type(out) is np.ndarray or isinstance(out, np.generic)) and out.dtype in _WHOLE:
          return out
        out = _numpy_result(out, False)  # (a tuple of arrays, a Python number: numpy's)
        return out if out is not None else _by_primc(fn, twin, same_object, args, kwargs)
    elif (
      args
      and type(args[0]) is Tracer
      and (trace_state.user_ops or not _mentions(args, kwargs, _FRONT_END_CLASSES[0]))
    ):  # a traced value (an op's own call: no front end's value among its arguments)
      try:
        out = fn(*args, **kwargs)
      except Exception as e:
        _raise_named(e, fn, args)
      return out if same_object else _apart(out, args, kwargs, twin)
    return _general(fn, twin, same_object, args, kwargs)

  _named_like(wrapped, fn)
  wrapped.__wrapped_op__ = fn
  wrapped._takes_front_ends = True
  return wrapped


def _named_like(wrapper, fn) -> None:
  """`functools.wraps`'s names and docstring, without copying `fn.__dict__`."""
  wrapper.__name__, wrapper.__qualname__ = fn.__name__, fn.__qualname__
  wrapper.__doc__, wrapper.__module__, wrapper.__wrapped__ = fn.__doc__, fn.__module__, fn


def _general(fn, twin, same_object: bool, args, kwargs):
  """An op's call that is not the common case of `_front_end_aware`: numpy's twin where
  every argument is plain (a float16 array, numpy's scalars, keywords), else primc's."""
  if twin is not None and "out" not in kwargs:
    half = False
    for a in (*args, *kwargs.values()) if kwargs else args:  # every call: kept short
      t = type(a)
      if t is np.ndarray and a.dtype in _NATIVE and a.dtype is not _HALF:
        continue  # the common case, inline
      if t not in _PLAIN_TYPES:
        k = _plain(a)
        if not k:
          break
        half = half or k == 2
    else:
      try:  # (staged while tracing: an iota's structure compiles, its values would not;
        # but a number computed from Python values, a size from a shape, stays a number)
        out = (
          _numpy_result(twin(*args, **kwargs), half)
          if not tracing()
          else (_concrete(twin, args, kwargs, half))
        )
      except Exception:  # primc's path says what is wrong in its own words
        out = None
      if out is not None:
        return out
  return _by_primc(fn, twin, same_object, args, kwargs)


def _by_primc(fn, twin, same_object: bool, args, kwargs):
  """The op's own path (primc's), handed to a front end where one's value is an argument."""
  try:
    out = on_front_ends(fn, args, kwargs)
  except Exception as e:
    _raise_named(e, fn, args)
  return out if same_object else _apart(out, args, kwargs, twin)


def _raise_named(error: Exception, fn, args):
  """Raises `error`, named by the op and the user's line where nothing has named it (the
  functions that are not `_op`s: `squeeze`, `size`, the `*_like` functions...)."""
  named = named_error(error, fn.__name__.rstrip("_"), args)
  if named is None:
    raise error
  raise named from error


def register_front_end(
  cls: type, apply: Callable, fallback: Callable, value: Callable | None = None
) -> None:
  """Makes every op of this module take `cls` values: a call given one runs as
  `apply(op, args, kwargs)`; `cls` gets the operators and methods of traced arrays; numpy's
  own functions and ufuncs on its values run the op of the same name, else
  `fallback(func, args, kwargs)`. `value(x)`: the numpy value of one, where the front end
  has values as it goes (the eager tape: primc.lax's control flow then runs as Python's)."""
  _front_ends.append((cls, apply))
  _FRONT_END_CLASSES[0] += (cls,)
  _front_end_values[cls] = value
  for name, fn in _TRACER_METHODS.items():
    if isinstance(fn, property):
      setattr(cls, name, property(lambda self: transpose(self)))
    else:
      op = _front_end_aware(fn)
      setattr(cls, name, (lambda op: lambda self, *a, **k: op(self, *a, **k))(op))
  cls.at = property(_At)  # functional updates, recorded as the op `index_update`
  cls.__array_ufunc__ = lambda self, ufunc, method, *args, **kwargs: _numpy_dispatch(
    ufunc, method, args, kwargs, lambda: fallback(getattr(ufunc, method), args, kwargs)
  )
  cls.__array_function__ = lambda self, func, types, args, kwargs: _numpy_dispatch(
    func, "__call__", args, kwargs, lambda: fallback(func, args, kwargs)
  )
  cls.__hash__ = object.__hash__


def refuse_numpy(what: str) -> Callable:
  """A `register_front_end` fallback that refuses numpy functions primc does not have."""
  return lambda func, args, kwargs: _refuse(func, "__call__", what)


def _wrap_ops(g: dict) -> dict:
  """`_front_end_aware` on each public function of the package's namespace `g` (in place):
  the functions replaced, as `_rebind` takes them (one wrapper per function)."""
  replaced: dict = {}
  made: dict = {}
  skip = {
    "asarray",
    "broadcast_shapes",
    "register_front_end",
    "refuse_numpy",
    "operator_index",
    "on_front_ends",
    "front_end_of",
    "takes_front_ends",
    "front_end_value",
    "front_end_apply",
    "wrap_public_functions",
    "shape",
    "size",
    "ndim",
    "result_type",
    "ascontiguousarray",
    "linspace",
    "arange",
    "empty",
    "empty_like",
    "identity",
    "tri",
    "logspace",
    "geomspace",
    "triu_indices_from",
    "tril_indices_from",
    "diag_indices_from",
    "isrealobj",
    "iscomplexobj",
    "isscalar",
  }
  for name, value in list(g.items()):
    if (
      callable(value)
      and not name.startswith("_")
      and name not in skip
      and (getattr(value, "__module__", None) or "").startswith("primc.numpy.")
      and not isinstance(value, type)
    ):
      new = made[id(value)] = made.get(id(value)) or _front_end_aware(value)
      replaced[name] = (value, new)
      g[name] = new
  return replaced
