"""Operands: numpy's conversion and promotion rules, broadcasting, and the shape ops
conversion itself needs (a list of traced arrays is stacked)."""

from __future__ import annotations

import builtins
import functools
import operator
import sys
import types

import numpy as np

from primc import prims as P
from primc.core import FLOAT_DTYPES, Lit, PrimcError, PrimcTypeError, ShapeError, dtype_name
from primc.numpy import _recorded
from primc.trace import Tracer, aval_of, constant_key, locate, user_ops, user_source
from primc.trace import as_array as leaf_array
from primc.trace import state as trace_state


class _ArrayType(type):
  def __instancecheck__(cls, x):
    return isinstance(x, (np.ndarray, Tracer))


class ndarray(metaclass=_ArrayType):
  """`isinstance(x, pnp.ndarray)` holds for numpy arrays and traced arrays alike (as for
  `jax.Array`); arrays are made by `pnp.array`, `pnp.zeros`, ..., not by this class."""

  def __new__(cls, *args, **kwargs):
    raise PrimcError(
      "primc.numpy.ndarray is for isinstance checks; make arrays with "
      "pnp.array, pnp.zeros, pnp.empty, ..."
    )


def _converting(int_type):
  """numpy's integer type `int_type`, whose call also converts a traced array (as
  `x.astype`; no derivative flows through an integer). A subclass, so it is a dtype where
  numpy's is: `np.dtype(pnp.int64)` is int64; a value made by it is numpy's own."""

  def __new__(cls, value=0, *args, **kwargs):
    if _holds_tracer(value):
      return asarray(value).astype(int_type)
    return int_type(value, *args, **kwargs)

  return type(
    int_type.__name__,
    (int_type,),
    {
      "__new__": __new__,
      "__module__": "primc.numpy",
      "__doc__": f"numpy.{int_type.__name__}; called on a traced array, `x.astype`.",
    },
  )


# numpy's own float and bool types: `x.dtype.type is pnp.float32` holds as with numpy (a
# traced value is converted by `x.astype(pnp.float32)`); the integer types convert a traced
# value when called, as `np.int64(x)` converts an array (`pnp.int64(x)`: indices from
# values)
float32, float64, bool_ = np.float32, np.float64, np.bool_
int32, int64 = _converting(np.int32), _converting(np.int64)
pi, e, inf, nan = np.pi, np.e, np.inf, np.nan
__version__ = np.__version__  # the numpy whose API and promotion rules this module follows


def _op(fn=None, *, recorded: bool | str = False):
  """Marks a user op: errors raised inside name it, the operands and the user's line.
  `recorded`: the op is pure (its equations depend only on its arguments' types and the
  values of its other arguments), so a call from the user's code while tracing stages
  the equations recorded for its signature (`primc.numpy._recorded`); "traced": only
  where every array argument is traced (an op that reads a constant array's values)."""
  if fn is None:
    return functools.partial(_op, recorded=recorded)
  name = fn.__name__.rstrip("_")

  @functools.wraps(fn)
  def run(*args, **kwargs):
    ops = user_ops()  # (`trace.user_op`'s stack, without a context manager: every op)
    ops.append(name)
    try:
      return fn(*args, **kwargs)
    except (PrimcError, *_PLAIN_ERRORS) as e:  # (Python's or numpy's too, from inside)
      named = named_error(e, name, args)
      primc_error = isinstance(e, PrimcError)
      if named is not None:
        raise named from (None if primc_error else e)
      if primc_error and not str(e).startswith(name):  # located by argument conversion:
        out = type(e)(f"{name}: {e}")  # add the op
        out.located = True
        raise out from None
      raise
    finally:
      ops.pop()

  if not recorded:
    return run

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    if trace_state.builders and not user_ops():
      out = _recorded.call(wrapped, run, args, kwargs, recorded is True)
      if out is not _recorded.NOT_RECORDED:
        return out
    return run(*args, **kwargs)

  return wrapped


_PLAIN_ERRORS = (TypeError, ValueError, IndexError)  # (exactly these: subclasses such as
# numpy's AxisError take other arguments, and are raised as they are)


def named_error(error: Exception, name: str, args: tuple) -> Exception | None:
  """What to raise for `error` raised inside the op `name` on `args`, where nothing has
  named it yet: the error of the same type (a TypeError stays one) saying the op, the
  operands and the user's line. None: raise `error` itself (named already, or not a
  PrimcError nor exactly one of Python's plain errors)."""
  if getattr(error, "located", False):
    return None
  message = f"{name} on ({_describe_args(args)}): {error}"
  if isinstance(error, PrimcError):
    return locate(error, message)
  if type(error) not in _PLAIN_ERRORS:
    return None
  out = type(error)(f"{message} at {user_source()}")
  out.located = True
  return out


def _describe_args(args) -> str:
  def one(a):
    if isinstance(a, (Tracer, np.ndarray)):
      return str(aval_of(a))
    if isinstance(a, (list, tuple)):
      return "[" + ", ".join(one(x) for x in a) + "]"
    return type(a).__name__

  return ", ".join(one(a) for a in args)


def _is_python_scalar(x) -> bool:
  t = type(x)
  if t is float or t is int or t is bool:
    return True
  return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _is_weak(x) -> bool:
  """A Python scalar, or a traced value standing for one (`Tracer.weak`)."""
  return _is_python_scalar(x) or (isinstance(x, Tracer) and x.weak)


def _weak_kind(x) -> str:
  """'f', 'i' or 'b': the kind of a weak value."""
  if isinstance(x, Tracer):
    return np.dtype(aval_of(x).dtype).kind.replace("u", "i")
  return "b" if isinstance(x, bool) else "i" if isinstance(x, int) else "f"


def _with_weak(dtype: str, x) -> str:
  """The dtype after mixing a weak value in (numpy's rule for Python scalars): it never
  widens an array's dtype, except that a float makes an integer or bool array float64
  and an int makes a bool array int64."""
  kind = _weak_kind(x)
  if kind == "f" and dtype not in FLOAT_DTYPES:
    return "float64"
  if kind == "i" and dtype == "bool":
    return "int64"
  return dtype


def _python_arithmetic(fn):
  """An operator of traced values: on weak values alone its result is weak too, as Python
  arithmetic on Python scalars gives a Python scalar (`lr * 0.5`; numpy's functions, like
  `sqrt(lr)`, give a numpy scalar, which is not weak)."""

  def op(*operands):
    out = fn(*operands)
    if isinstance(out, Tracer) and builtins.all(_is_weak(a) for a in operands):
      out.weak = True
    return out

  return op


def _holds_tracer(x) -> bool:
  if isinstance(x, (list, tuple)):
    return builtins.any(_holds_tracer(item) for item in x)
  return isinstance(x, Tracer)


def _as_array(x):
  """An operand as an array, numpy's `array_like`: nested lists and tuples of arrays and
  scalars too (`array`), as `np.mean([a, b])` or `np.sum([1.0, 2.0])` take them."""
  if isinstance(x, (list, tuple)):
    return array(x) if _holds_tracer(x) else leaf_array(np.asarray(x))
  return leaf_array(x)


as_array = _as_array  # (public; `_as_array` inside ops: no front-end wrapper)


def asarray(x, dtype=None):
  if dtype is not None and _python_numbers(x):  # (numpy's check: a Python number out of
    x = np.asarray(x, dtype)  # the dtype's range raises, never wraps)
  x = _as_array(x)
  if dtype is not None and dtype != aval_of(x).dtype and np.dtype(dtype).name != aval_of(x).dtype:
    return P.convert(x, dtype)
  return x


_PYTHON_NUMBERS = frozenset({int, float, bool})


def _python_numbers(obj) -> bool:
  """Whether `obj` is nested lists and tuples of Python numbers alone."""
  if type(obj) is list or type(obj) is tuple:
    return builtins.all(_python_numbers(x) for x in obj)
  return type(obj) in _PYTHON_NUMBERS


def array(obj, dtype=None):
  """numpy.array of traced values too: nested lists and tuples of arrays and scalars are
  stacked (their dtypes promoted as numpy does), anything else is `asarray`. Python
  numbers given a dtype are converted as numpy converts them: one out of the dtype's
  range raises OverflowError, as numpy's does (a cast would wrap it)."""
  if dtype is not None and isinstance(obj, (list, tuple)) and _python_numbers(obj):
    return asarray(np.array(obj, dtype))
  if isinstance(obj, (list, tuple)):
    if not obj:
      return asarray(np.zeros((0,), dtype or np.float64))
    out = stack([array(item) for item in obj])
    return out if dtype is None else asarray(out, dtype)
  return asarray(obj, dtype)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
  shapes = [_shape(s) for s in shapes]
  ndim = builtins.max((len(s) for s in shapes), default=0)
  out = []
  for i in range(ndim):
    sizes = {s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0} - {1}
    if len(sizes) > 1:
      raise ShapeError(f"shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def broadcast_to(x, shape):
  """numpy.broadcast_to: right-aligned numpy broadcasting into an explicit broadcast_in_dim."""
  x = _as_array(x)
  shape = _shape(shape)
  xs = aval_of(x).shape
  if xs == shape:
    return x
  if len(xs) > len(shape):
    raise ShapeError(f"cannot broadcast {xs} to {shape}")
  lead = len(shape) - len(xs)
  for i, n in enumerate(xs):
    if n not in (1, shape[lead + i]):
      raise ShapeError(f"cannot broadcast {xs} to {shape}")
  # Size-1 dims that expand are squeezed first so the broadcast is a pure index map.
  keep = [i for i, n in enumerate(xs) if n == shape[lead + i]]
  if len(keep) != len(xs):
    x = P.reshape(x, [xs[i] for i in keep])
  return P.broadcast_in_dim(x, shape, [lead + i for i in keep])


@functools.lru_cache(maxsize=1024)
def _result_name(*dtypes: str) -> str:
  return np.result_type(*dtypes).name


_raw_asarray, _raw_broadcast_to = asarray, broadcast_to  # (not the public, wrapped ones:
# an operand converted inside an op is neither a front end's call nor a view of the user's)


def _promote(*args):
  """Converts operands to one dtype and one shape (numpy rules, weak Python scalars)."""
  shapes = _shapes_of_one_dtype(args)
  if shapes is not None:  # traced values and arrays of one dtype: broadcast only
    if shapes.count(shapes[0]) == len(shapes):
      return list(args)
    shape = broadcast_shapes(*shapes)
    return [_raw_broadcast_to(a, shape) for a in args]
  args = [_as_array(a) if isinstance(a, (list, tuple)) else a for a in args]
  strong = [aval_of(a).dtype for a in args if not _is_weak(a)]
  if strong:
    dtype = strong[0] if len(set(strong)) == 1 else _result_name(*strong)
    for a in args:
      if _is_weak(a):
        dtype = _with_weak(dtype, a)
  else:  # only weak values: numpy's float64 if any is a float, else int64 (or bool)
    kinds = {_weak_kind(a) for a in args}
    dtype = "float64" if "f" in kinds else "int64" if "i" in kinds else "bool"
    tracers = [aval_of(a).dtype for a in args if isinstance(a, Tracer)]
    if tracers and np.dtype(dtype).kind == np.dtype(np.result_type(*tracers)).kind:
      dtype = np.result_type(*tracers).name  # weak traced values keep theirs
  arrays = [a if _is_python_scalar(a) else _raw_asarray(a, dtype) for a in args]
  shape = broadcast_shapes(*(() if _is_python_scalar(a) else aval_of(a).shape for a in arrays))
  return [
    _weak_constant(a, dtype, shape) if _is_python_scalar(a) else _raw_broadcast_to(a, shape)
    for a in arrays
  ]


def _shapes_of_one_dtype(args) -> list | None:
  """The shapes of `args` where each is a traced value (not weak) or a numpy array, all of
  one dtype (the common case of `_promote`, kept short); else None."""
  dtype, shapes = None, []
  for a in args:
    t = type(a)
    if t is Tracer and not a.weak:
      aval = a.ir_var.aval
      d, shape = aval.dtype, aval.shape
    elif t is np.ndarray:
      d, shape = dtype_name(a.dtype), a.shape
    else:
      return None
    if dtype is None:
      dtype = d
    elif d != dtype:
      return None
    shapes.append(shape)
  return shapes


def _weak_constant(x, dtype: str, shape: tuple):
  """The Python number `x` as an array of this dtype and shape; while tracing, broadcast
  once per trace level (`x ** 2` in a loop stages one constant, not one per step), each
  use a new traced object (an in-place write into one rebinds only that object)."""
  builders = trace_state.builders
  if not builders or not shape:
    return _raw_broadcast_to(np.asarray(x, dtype), shape)
  builder = builders[-1]
  value = np.asarray(x, dtype)
  params = (("broadcast_dimensions", ()), ("shape", shape))  # (`P.broadcast_in_dim`'s)
  kept = builder.constants.get(constant_key(P.broadcast_in_dim_p, params, (Lit.of(value),)))
  if kept is None:  # (staged and kept by `bind`)
    return _raw_broadcast_to(value, shape)
  fresh = Tracer(builder, kept[0])
  if builder.concrete:
    fresh.concrete = np.broadcast_to(value, shape)
  return fresh


def _float(x):
  """x as a float array: integers and bools become float64 (numpy's rule for division and
  means; its transcendental ufuncs take int8, uint8 and bools to float16 and int16 and
  uint16 to float32, where primc computes in float64 in every path)."""
  x = _as_array(x)
  if aval_of(x).dtype in FLOAT_DTYPES:
    return x
  return P.convert(x, "float64")


def _axes(axis, ndim) -> tuple[int, ...]:
  """An axis or a tuple of axes (None: all), sorted; one repeated is an error, as numpy's."""
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  out = tuple(sorted(_axis(a, ndim) for a in axes))
  if len(set(out)) != len(out):
    raise locate(ShapeError(), f"duplicate value in axis {axis!r}")
  return out


def _integer(value, what: str) -> int:
  """An integer argument (a count, an axis, a width, a dimension; `what` names it in the
  error) as numpy takes one: Python's or numpy's integer, a bool, a 0-d integer array.
  A float, even a whole one, or an array is an error, as numpy's (never truncated)."""
  try:
    return operator.index(value)
  except TypeError:
    message = f"{what} must be an integer, got {type(value).__name__} {value!r:.40}"
    raise locate(PrimcTypeError(), message) from None


def _integer_typed(x, what: str, bools: bool = False) -> None:
  """Refuses an array argument `x` of a non-integer dtype (bools too, unless `bools`), as
  numpy refuses float indices or exponents: `what` names it."""
  aval = aval_of(_as_array(x))
  if np.dtype(aval.dtype).kind not in ("iub" if bools else "iu"):
    raise locate(PrimcTypeError(), f"{what} must be integers, got {aval}")


def _integers(values, what: str) -> np.ndarray:
  """Integer arguments given as an array or (nested) sequence (split points, pad widths,
  a partition's kth), as an int64 array; floats are an error (`_integer`)."""
  out = np.asarray(values)
  if out.dtype.kind not in "iu" and out.size:  # (an empty list is float64 to numpy)
    message = f"{what} must be integers, got {out.dtype} {values!r:.40}"
    raise locate(PrimcTypeError(), message)
  return out.astype(np.int64)


def _axis(a, ndim: int) -> int:
  """Axis `a` of an array of rank `ndim`, counted from 0; out of [-ndim, ndim) is an error,
  as numpy's (never wrapped around)."""
  a = _integer(a, "axis")
  if not -ndim <= a < ndim:
    raise ShapeError(f"axis {a} is out of bounds for an array of rank {ndim}")
  return a % ndim


def astype(x, dtype):
  return asarray(x, dtype)


def _shape(shape, what: str = "a shape") -> tuple[int, ...]:
  """A shape argument (or one like it, `tile`'s reps): an integer or a sequence of them
  (`_integer`)."""
  if isinstance(shape, (int, np.integer)) or (type(shape) is np.ndarray and shape.ndim == 0):
    return (_integer(shape, what),)
  try:
    dims = tuple(shape)
  except TypeError:
    message = (
      f"{what} must be an integer or a sequence of integers, got {type(shape).__name__} "
      f"{shape!r:.40}"
    )
    raise locate(PrimcTypeError(), message) from None
  return tuple(_integer(d, f"an element of {what}") for d in dims)


# The shape ops conversion itself needs (`array` stacks a list of traced arrays)


@_op
def reshape(x, shape, *more, order="C"):
  """numpy.reshape; order "F" reads and writes the elements in column-major order (the
  reshape of the transpose, transposed back); "A" is "C" here (traced arrays have no
  memory layout)."""
  x = _as_array(x)
  shape = _shape(shape) if not more else _shape((shape,) + more)
  if order == "F":
    full = _full_shape(aval_of(x), shape)
    return transpose(reshape(transpose(x), full[::-1]))
  if order not in ("C", "A"):
    raise PrimcError(f"reshape: order must be 'C', 'F' or 'A', got {order!r}")
  size = aval_of(x).size
  if shape.count(-1) > 1:
    raise ShapeError(f"cannot reshape {aval_of(x).shape} to {shape}: more than one -1")
  if -1 in shape:
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if known == 0 or size % known:
      raise ShapeError(f"cannot reshape {aval_of(x).shape} ({size} elements) to {shape}")
    shape = tuple(size // known if d == -1 else d for d in shape)
  if shape == aval_of(x).shape:
    return x
  return P.reshape(x, shape)


def _full_shape(aval, shape) -> tuple[int, ...]:
  """`shape` with its -1 resolved against `aval`'s size."""
  if -1 not in shape:
    return tuple(shape)
  known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
  return tuple(aval.size // builtins.max(known, 1) if d == -1 else d for d in shape)


@_op
def transpose(x, axes=None, perm=None):
  """numpy.transpose (`perm=` is Paddle's name for `axes`)."""
  x = _as_array(x)
  axes = perm if axes is None else axes
  nd = aval_of(x).ndim
  axes = tuple(reversed(range(nd))) if axes is None else tuple(_axis(a, nd) for a in axes)
  return x if axes == tuple(range(nd)) else P.transpose(x, axes)


def moveaxis(x, source, destination):
  """Axes `source` (an int or a sequence) moved to `destination`, the others in order."""
  x = _as_array(x)
  nd = aval_of(x).ndim
  source = [_axis(a, nd) for a in ((source,) if isinstance(source, (int, np.integer)) else source)]
  destination = [
    _axis(a, nd)
    for a in ((destination,) if isinstance(destination, (int, np.integer)) else destination)
  ]
  if len(source) != len(destination):
    raise ShapeError(f"moveaxis: {len(source)} source axes for {len(destination)} destinations")
  perm = [i for i in range(nd) if i not in source]
  for dest, src in sorted(zip(destination, source)):
    perm.insert(dest, src)
  return transpose(x, perm)


def expand_dims(x, axis):
  """New axes of length 1 at `axis` (an int or a tuple: positions in the result)."""
  x = _as_array(x)
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  ndim = aval_of(x).ndim + len(axes)
  where_new = sorted(_axis(a, ndim) for a in axes)
  if len(set(where_new)) != len(where_new):
    raise ShapeError(f"expand_dims: repeated axis in {axis}")
  rest = iter(aval_of(x).shape)
  return reshape(x, [1 if k in where_new else next(rest) for k in range(ndim)])


@_op
def concatenate(arrays, axis=0):
  arrays = _promote_list(arrays)
  if axis is None:  # numpy: the arrays flattened, joined
    arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
  nd = aval_of(arrays[0]).ndim
  axis = _axis(axis, nd)
  return arrays[0] if len(arrays) == 1 else P.concatenate(arrays, axis)


def _promote_list(arrays):
  arrays = [_as_array(a) for a in arrays]
  dtype = np.result_type(*(aval_of(a).dtype for a in arrays)).name
  return [asarray(a, dtype) for a in arrays]


@_op
def stack(arrays, axis=0):
  arrays = _promote_list(arrays)
  nd = aval_of(arrays[0]).ndim + 1
  axis = _axis(axis, nd)
  return concatenate([expand_dims(a, axis) for a in arrays], axis)


@_op
def ravel(a, order="C"):
  return reshape(a, (-1,), order=order)


flatten = ravel


class NotSupportedError(PrimcError, AttributeError):
  """A numpy name primc.numpy does not have (an AttributeError too, so `hasattr` and
  `getattr(pnp, name, default)` keep working)."""


def shape(a):
  return tuple(aval_of(_as_array(a)).shape)


def size(a, axis=None):
  if type(a) is np.ndarray:  # (on values: numpy's, at once)
    return a.size if axis is None else a.shape[axis]
  s = shape(a)
  return int(np.prod(s, dtype=np.int64)) if axis is None else s[axis]


def ndim(a):
  return len(shape(a))


def _rebind(replaced: dict) -> None:
  """Each module of this package, and the package, that names a replaced function by its
  public name names the replacement (`replaced`: name -> (old, new)). The package's
  functions call each other by their modules' global names, so a wrapper put on a public
  function (a view's record, the front ends' dispatch) is what every caller reaches, as in
  one namespace; private aliases (`_raw_asarray`) keep the function itself."""
  for module_name, module in list(sys.modules.items()):
    ours = module_name == "primc.numpy" or module_name.startswith("primc.numpy.")
    if not ours or not isinstance(module, types.ModuleType):
      continue
    space = vars(module)
    for name, (old, new) in replaced.items():
      if space.get(name) is old:
        space[name] = new
