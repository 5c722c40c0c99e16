"""In-place updates and views of traced arrays, as numpy's."""

from __future__ import annotations

import builtins
import functools

import numpy as np

from primc.core import PrimcError, PrimcTypeError
from primc.numpy._base import (
  _axis,
  _rebind,
  astype,
  broadcast_to,
  expand_dims,
  moveaxis,
  ravel,
  reshape,
  transpose,
)
from primc.numpy._indexing import getitem, index_update
from primc.numpy._shape import squeeze, swapaxes
from primc.trace import Tracer, aval_of, refresh_view, user_source
from primc.tree import tree_flatten

# In-place updates while tracing: `y[idx] = v` on an array made in the traced function is
# functionalized into `y = y.at[idx].set(v)` (the tracer takes the new value), as
# PyTorch's functionalization rewrites mutations. An array numpy may make a view of
# another records its base and the view ops from it: a write into the view writes
# through into the base (each op undone: a slice's update is the base's `.at[].set`, a
# reshape's the reshape back, a transpose's the inverse permutation), and a view read
# after its base changed is taken again from it, so every name sees every write as in
# numpy. Whether numpy makes a view or a copy (a basic slice or an integer array; a
# reshape of a transposed array) numpy itself decides, on an array of the base's shape.

# numpy's floating-point error handling governs numpy's own loops (plain values, the
# interpreter); compiled code gives IEEE results (inf, nan) without raising or warning
seterr, geterr, errstate = np.seterr, np.geterr, np.errstate
seterrcall, geterrcall = np.seterrcall, np.geterrcall

_VIEWS = (
  "getitem",
  "reshape",
  "transpose",
  "moveaxis",
  "expand_dims",
  "squeeze",
  "ravel",
  "swapaxes",
  "broadcast_to",
)
_RAW_VIEWS = dict(  # (not recording views)
  zip(
    _VIEWS,
    (getitem, reshape, transpose, moveaxis, expand_dims, squeeze, ravel, swapaxes, broadcast_to),
  )
)


def _viewing(fn):
  name = fn.__name__

  @functools.wraps(fn)
  def view(x, *args, **kwargs):
    out = fn(x, *args, **kwargs)
    if (
      type(x) is Tracer
      and type(out) is Tracer
      and out is not x
      and not (name == "getitem" and _copies(args[0], aval_of(x).ndim))
    ):
      root, version, path = x.base or (x, x.version, ())
      out.base = (root, version, path + ((name, args, kwargs),))
      if (
        x.base is not None and name in ("reshape", "ravel") and (_numpy_views(out) == "copy")
      ):  # (numpy copies a transposed array's reshape)
        out.base = None
    return out

  return view


def _copies(idx, ndim: int) -> bool:
  """Whether numpy's x[idx] is a copy: an integer or boolean array (or list, or traced)
  among the index, or an integer for every dimension and no new axis (a scalar; `a[None]`
  of a 0-d view is a view)."""
  entries = idx if isinstance(idx, tuple) else (idx,)
  if not builtins.all(
    e is None
    or e is Ellipsis
    or isinstance(e, builtins.slice)
    or (isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_)))
    for e in entries
  ):
    return True
  return (
    Ellipsis not in entries
    and not builtins.any(e is None for e in entries)
    and builtins.sum(isinstance(e, (int, np.integer)) for e in entries) == ndim
  )


_rebind({name: (fn, _viewing(fn)) for name, fn in _RAW_VIEWS.items()})
Tracer.__getitem__ = getitem
Tracer.reshape = reshape
Tracer.ravel, Tracer.squeeze, Tracer.swapaxes = ravel, squeeze, swapaxes  # views, as numpy's


def _numpy_view(probe, name, args, kwargs):
  """numpy's op `name` on a plain array (a traced argument: an index array, a copy)."""
  if builtins.any(isinstance(a, Tracer) for a in tree_flatten((list(args), kwargs))[0]):
    return None
  if name == "getitem":
    return probe[args[0]]
  if name == "transpose" and "perm" in kwargs:
    kwargs = {"axes": kwargs["perm"]}
  if name == "reshape" and len(args) > 1:  # reshape(x, 2, 3)
    args = (args,)
  return getattr(np, name)(probe, *args, **kwargs)


def _numpy_views(view) -> str:
  """ "view", "copy" or "read-only": what numpy's same ops on the base would give."""
  root, _, path = view.base
  probe = np.empty(aval_of(root).shape, np.dtype(aval_of(root).dtype))
  out = probe
  for name, args, kwargs in path:
    try:
      out = _numpy_view(out, name, args, kwargs)
    except Exception:
      return "copy"  # (an op numpy refuses: primc's only, never a view of numpy's)
    if out is None or not isinstance(out, np.ndarray) or not np.shares_memory(out, probe):
      return "copy"
  return "view" if out.flags.writeable else "read-only"


def _replayed(root, path):
  out = root
  for name, args, kwargs in path:
    out = _RAW_VIEWS[name](out, *args, **kwargs)
  return out


def _undone(x, name, args, kwargs, new):
  """x's new value where its view `name(x, *args, **kwargs)` took the value `new`."""
  if name == "getitem":
    return index_update(x, args[0], new, "set")
  if name == "transpose":
    axes = kwargs.get("axes", kwargs.get("perm", args[0] if args else None))
    nd = aval_of(x).ndim
    axes = tuple(reversed(range(nd))) if axes is None else tuple(_axis(a, nd) for a in axes)
    return _RAW_VIEWS["transpose"](new, tuple(int(i) for i in np.argsort(axes)))
  if name == "moveaxis":
    source, destination = (list(args) + [kwargs.get("source"), kwargs.get("destination")])[:2]
    return _RAW_VIEWS["moveaxis"](new, destination, source)
  if name == "swapaxes":
    return _RAW_VIEWS["swapaxes"](new, *args, **kwargs)
  return _RAW_VIEWS["reshape"](new, aval_of(x).shape)  # reshape, ravel, (expand_)dims


def _written_back(root, path, new):
  """The base's new value where the view `path` of it took the value `new`."""
  (name, args, kwargs), rest = path[0], path[1:]
  if rest:
    new = _written_back(_RAW_VIEWS[name](root, *args, **kwargs), rest, new)
  return _undone(root, name, args, kwargs, new)


def _refresh_view(view) -> None:
  """A view read after its base changed: its value again from the base (numpy's view
  sees the change), or no view any more (numpy's ops made a copy)."""
  root, _, path = view.base
  if _numpy_views(view) == "copy":
    view.base = None
    return
  fresh = _replayed(root, path)
  view.ir_var, view.weak, view.concrete = fresh.ir_var, False, fresh.concrete
  view.base = (root, root.version, path)


refresh_view[0] = _refresh_view


def _write(self, new, what: str) -> None:
  """`self` takes the value `new` in place: through into its base where it is numpy's
  view of one."""
  if self.base is not None:
    kind = _numpy_views(self)
    if kind == "read-only":
      raise PrimcError(
        f"{what} into a read-only view (numpy's broadcast_to gives one), at {user_source()}"
      )
    if kind == "copy":
      self.base = None
    else:
      root, _, path = self.base
      if root.builder is not self.builder:
        raise PrimcError(
          f"{what} into a view of an array of an enclosing traced function "
          f"(it is closed over) is not supported: return the updated value "
          f"with x.at[idx].set(v), at {user_source()}"
        )
      new_root = _written_back(root, path, new)
      root.ir_var, root.weak, root.version = new_root.ir_var, False, root.version + 1
      root.concrete = new_root.concrete
      self.base = (root, root.version, path)
  self.ir_var, self.weak, self.version = new.ir_var, False, self.version + 1
  self.concrete = new.concrete


def _setitem(self, idx, value):
  """`x[idx] = v` on a traced array: x takes the value `x.at[idx].set(v)`."""
  new = index_update(self, idx, value, "set")
  if type(new) is not Tracer or new.builder is not self.builder:
    raise PrimcError(
      f"x[idx] = v into an array of an enclosing traced function (it is "
      f"closed over) is not supported: return the updated value with "
      f"x.at[idx].set(v), at {user_source()}"
    )
  _write(self, new, "x[idx] = v")


Tracer.__setitem__ = _setitem


def _in_place(op, name):
  """`x op= y` on a traced array: x takes the value of `x op y`, in x's dtype and shape
  (numpy's in-place casting rule, same_kind), so every name of x sees it."""

  def update(self, other):
    new = op(self, other)
    if new is NotImplemented:
      return NotImplemented
    got, want = aval_of(new), aval_of(self)
    if got.shape != want.shape:
      raise PrimcError(
        f"x {name} y: the result's shape {got.shape} is not x's {want.shape} "
        f"(numpy refuses it too), at {user_source()}"
      )
    if got.dtype != want.dtype:
      if not np.can_cast(got.dtype, want.dtype, "same_kind"):
        raise PrimcTypeError(
          f"x {name} y: a {got.dtype} result cannot be cast to x's "
          f"{want.dtype} in place (numpy's same_kind rule), at "
          f"{user_source()}"
        )
      new = astype(new, want.dtype)
    if new.builder is not self.builder:
      return new  # x is an enclosing function's: rebound, not changed
    _write(self, new, f"x {name} y")
    return self

  return update


for _name, _op_name, _sign in (
  ("__iadd__", "__add__", "+="),
  ("__isub__", "__sub__", "-="),
  ("__imul__", "__mul__", "*="),
  ("__itruediv__", "__truediv__", "/="),
  ("__ipow__", "__pow__", "**="),
):
  setattr(Tracer, _name, _in_place(getattr(Tracer, _op_name), _sign))
