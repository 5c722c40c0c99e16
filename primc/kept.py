"""Programs the transforms keep: `grad(f)(x)` called again and again, outside `jit`.

A transform called outside any trace (`grad(f)(x)`, `hessian(f)(x)`, `vmap(f)(xs)`, ...)
traces and differentiates once per *key*, then runs the kept program on the
interpreter, optimized once its calls have cost what optimizing costs (`_optimize`); a
program whose interpreted calls have cost what compiling it costs (`_compile_cost`) is
handed to the compiler (`compiler`, `jit`'s, tiered: the interpreter serves while a
background process compiles its kernels) and runs native from then on.

The key is what the program depends on, found by walking the function as a pytree:

- the transform and its parameters, and the arguments' structure, shapes, dtypes and
  which of them are Python numbers (as `jit`'s signature: numbers are traced, weak, so a
  step count passed at every call keeps one program; where the function needs a
  number's value, `range(n)`, numbers are values of the key instead);
- the function's code, and what it reads by name: its closure cells, its defaults, the
  globals its code names, the functions it reaches through those (their own code,
  closures and globals, `MAX_DEPTH` deep), `functools.partial` arguments, a bound
  method's object (its attributes), containers (tuples, lists, dicts, pytree nodes).
  Python numbers, numpy's integer and bool scalars (sizes, indices, flags: a slice's
  bounds) and strings there are compared by value; arrays are *lifted*: they
  become inputs of the kept program (compared by shape and dtype, read afresh at every
  call, so `lambda w: loss(w, batch)` made anew for every batch keeps one program, and
  an array changed in place is seen; what holds arrays is made again around the traced
  values, and a dict keyed by such an object finds its copy); modules, classes,
  builtins and library functions
  are compared by identity. A call whose function reaches any other object (one that
  could change unseen) is not kept.

What the walk does not reach is read while tracing and kept, as `jit` keeps it: arrays
made inside the function, and state behind objects not walked. Two checks: a function
that draws from numpy's or Python's random generator while traced (its program holds
the numbers as constants) is seen at its first call; and the second call of every kept
program traces the function alone (without the transform: a fraction of its cost) and
compares with the first call's. Either way the function is traced at every call from
then on, once per call, and that is logged once. Calls that
cannot be kept (outputs that are not arrays, a walk past `MAX_NODES`) run the transform
as before, at every call. `primc.config.keep_transforms = False` turns keeping off.
"""

from __future__ import annotations

import collections
import functools
import inspect
import os
import sys
import threading
import time
import types
from typing import Any, Callable

import numpy as np


from primc import breaks, core, passes, replayed, stored, tape
from primc.settings import config, log
from primc.stored import blake2b
from primc.core import (
  ConcretizationError,
  Frozen,
  Lit,
  NamedFunction,
  PrimcError,
  ShapedArray,
  without_gc,
)
from primc.trace import (
  Tracer,
  as_array,
  aval_of,
  eval_program,
  lift_guards,
  trace_flat,
  tracing,
  user_source,
  weak_leaves,
)
from primc.runners import runner
from primc.tree import TreeDef, _node_of, tree_flatten, tree_unflatten


KEPT = 256  # kept programs (least recently used go first)
MAX_DEPTH = 8  # functions reached through functions, at most
MAX_NODES = 4096  # objects a walk visits, at most (beyond: the call is not kept)
HOT_CALLS = 4  # calls of one kept program before it is compiled
HOT_SECONDS = 0.02  # ... and interpreted time spent in it (s): compiling must pay
COMPILE_SECONDS = 7e-5  # ... plus, per equation, what the passes, fusion and planning
# cost the calling thread (a fluid simulation's gradient, 67,180 equations: ~4.5 s; its
# kernels compile in the background, `tiered`)
LOAD_SECONDS = 0.35  # ... and, before a process's first compile, what loading the code
# generation costs the calling thread (measured: 0.35-0.46 s at a small gradient's first
# compile, cold or warm cache; its interpreted calls take ~0.3 ms, native ~0.04 ms)
OPTIMIZE_SECONDS = 8e-5  # a round of the passes, per equation (interpreted: optimize then)

compiler: list = [None]  # `jit`'s (primc.compile): program -> executable(leaves, outs)

_kept: "collections.OrderedDict[Any, _Entry]" = collections.OrderedDict()
_stats = collections.Counter()
_miss_reasons = collections.Counter()

# compared by identity (what they are does not change; `jit`'s functions are added)
IDENTITY_TYPES: tuple = (
  type,
  types.BuiltinFunctionType,
  types.BuiltinMethodType,
  types.MethodWrapperType,
  types.WrapperDescriptorType,
  types.MethodDescriptorType,
  types.ModuleType,
  np.ufunc,
  property,
  staticmethod,
  classmethod,
  type(np.sum),
  Frozen,  # the IR's records (a program, an abstract value): immutable, made once
)
# values compared by value (a pytree's structure too: `flatten_func`'s `unflatten` reads
# one; immutable, hashed by value)
_VALUES = (int, float, complex, bool, str, bytes, type(None), type(Ellipsis), np.dtype, TreeDef)
_PRIMC = tuple(  # primc's own folders
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + d + os.sep
  for d in ("primc", "passes", "codegen")
)


@functools.cache
def _library() -> tuple[str, ...]:
  """The folders of code not the user's: the standard library's, installed packages'
  (`site`'s, imported at startup), primc's."""
  import site

  folders = [os.path.dirname(os.__file__), *getattr(site, "getsitepackages", list)()]
  return tuple(p + os.sep for p in dict.fromkeys(folders)) + _PRIMC


class _Local(threading.local):
  plain = False  # running a call as it runs without keeping (its transforms too)


_local = _Local()


def wanted() -> bool:
  """Whether a transform called now keeps its program: keeping is on, nothing is being
  traced, and no call being run without keeping is under way."""
  return config.keep_transforms and not tracing() and not _local.plain


def staged(key: tuple, fun: Callable, args: tuple, kwargs: dict, transform: Callable) -> Any:
  """`transform(fun)(*args, **kwargs)` inside a trace (an enclosing transform, `jit`),
  from the program kept for a call outside it with arguments of these types: the function
  traced alone here is compared with the first call's trace, as a second call's is, and
  the kept program is staged into the trace (a nested derivative reuses the derivative a
  call before it made: autograd's tanh example); where it traces differently, the
  transform of that trace (the function's Python does not run again: what it drew, it
  drew once). `MISS` where no such program is kept (or the function reads arrays by name
  inside a kept program being made: made again around that program's inputs, its
  globals a copy, it is keyed apart); nothing is kept from inside a trace."""
  if not config.keep_transforms or _local.plain:
    return MISS
  code = (key, getattr(fun, "__code__", None) or id(fun))
  if code in _unkept or code in _static_scalars:
    return MISS
  walk = _Walk(traced=True)
  try:  # (a value not hashable, an object the walk cannot compare: made anew)
    leaves, tree, traced, statics = _argument_leaves(args, kwargs, _numbers)
    weak = weak_leaves([leaves[k] for k in traced])
    if True in weak:
      return MISS  # (Python numbers: kept calls trace them weak, a trace may not)
    state = (walk(fun), tuple(walk(s) for s in statics))
    inputs = [as_array(leaves[k]) for k in traced] + [as_array(x) for x in walk.leaves]
    entry = _kept.get(_full_key(key, state, tree, traced, weak, inputs))
    if entry is None and type(tree) is int:  # (a traced value stands for an array or a
      tree = tree_flatten((args, kwargs))[1]  # numpy scalar, whose calls flatten apart)
      entry = _kept.get(_full_key(key, state, tree, traced, weak, inputs))
  except (NotKept, PrimcError, TypeError):
    return MISS
  if isinstance(entry, breaks.Paths):
    return _staged_path(entry, fun, leaves, tree, traced, weak, walk, inputs)
  if type(entry) is not _Entry or entry.forward is None or entry.final:
    return MISS
  try:
    forward = _forward(fun, leaves, tree, traced, weak, walk, inputs)
  except ConcretizationError:
    return MISS
  if forward is None:
    return MISS
  if not _same_trace(forward, entry.forward):
    replay = replayed.replaying(transform, forward[0], forward[1], leaves, tree, traced)
    return replay(*inputs)
  _count("staged")
  return tree_unflatten(entry.out_tree, eval_program(entry.program, *inputs))


def _staged_path(paths, fun, leaves, tree, traced, weak, walk, inputs) -> Any:
  """`staged` for a function whose Python reads values, in a trace of values: the kept
  path its inputs' values take (run on them to see), checked by tracing the function
  alone on them until its first reuse did, staged with its guards made the trace's. A
  path that traces differently is made anew (its Python runs again)."""
  values = [x.concrete if type(x) is Tracer else x for x in inputs]
  if any(v is None for v in values):  # (no values: no path to take)
    return MISS
  run = lambda path: path[0].entry.run(values) if type(path[0].entry) is _Entry else None
  found = paths.find(values, run)  # (none made here: a new path is made outside)
  if found is None:
    return MISS
  path = found[0]
  entry = path[0].entry
  if entry.final:
    return MISS
  if entry.calls < 2:
    try:
      alone = _traced_alone(fun, leaves, tree, traced, weak, walk, values, True)[0]
    except ConcretizationError:
      return MISS
    if not _same_trace([alone, None, None], entry.forward):
      return MISS
  source = user_source()
  main = lift_guards(entry.program, [(g, source) for g in path[1]], inputs)
  _count("staged")
  return tree_unflatten(path[2], eval_program(main, *inputs))


MISS = object()  # `staged`: no kept program stands in


def plainly(thunk):
  """`thunk()` with no transform keeping its program in this thread: calls made once (a
  derivative check's), whose keeping would cost walks and checks no later call repays."""
  before = _local.plain
  _local.plain = True
  try:
    return thunk()
  finally:
    _local.plain = before


class NotKept(Exception):
  """This call cannot be kept (see the module's docstring)."""


@functools.lru_cache(maxsize=4096)
def _user_code(code: types.CodeType) -> bool:
  """Code of the user's (not primc's, numpy's or the standard library's): walked."""
  return not code.co_filename.startswith(_library())


@functools.lru_cache(maxsize=4096)
def _walked_code(code: types.CodeType) -> bool:
  """Functions walked: the user's (closures, defaults, globals), and primc's own (their
  closures: a transform's wrapper holds the function it transforms)."""
  return _user_code(code) or code.co_filename.startswith(_PRIMC)


@functools.lru_cache(maxsize=4096)
def _global_names(code: types.CodeType) -> tuple[str, ...]:
  """The names a code object (and the code nested in it: lambdas, comprehensions) may
  read as globals, in a stable order."""
  names = dict.fromkeys(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      names.update(dict.fromkeys(_global_names(const)))
  return tuple(names)


def _library_op(fn) -> bool:
  """An op of primc's library (primc.numpy's, lax's, scipy's: marked `_takes_front_ends`,
  its innermost function primc's own code): what it computes is a function of its
  arguments, so a walk keys it by identity instead of walking its wrappers' closures (a
  user's function given `takes_front_ends` is still walked)."""
  if not getattr(fn, "_takes_front_ends", False):
    return False
  code = getattr(inspect.unwrap(fn), "__code__", None)
  return code is not None and not _user_code(code)


def _plain_object(obj) -> bool:
  """An instance of a class with a plain `__dict__` and no `__new__` of its own: its
  attributes are walked, and it is made again by `object.__new__`."""
  cls = type(obj)
  return (
    cls.__new__ is object.__new__
    and type(getattr(obj, "__dict__", None)) is dict
    and not hasattr(cls, "__slots__")
    and cls.__module__ != "builtins"
  )


class _Walk:
  """One walk over a function and what it reaches: its key (hashable), the arrays lifted
  (`leaves`) and, with `tracers`, the function made again with those in their place."""

  def __init__(self, tracers=None, holders=frozenset(), traced: bool = False):
    self.leaves: list = []
    self.traced = traced or tracers is not None  # (`staged`: in a trace, an array the
    # function reads may be a traced value, lifted as an array is, and made again so)
    self.holders = set(holders)  # ids of the objects with arrays beneath (made again)
    self.held = 0  # arrays found, and references to holders seen before
    self.refs: list = []  # objects compared by identity (kept alive with the key)
    self.seen: dict = {}  # id(function or object) -> its index (or its copy)
    self.nodes = 0
    self.tracers = tracers  # an iterator: rebuilding
    self.keyed: list = []  # rebuilding: dicts keyed by objects made again

  def rebuilt(self, fun):
    """`fun` made again with the tracers in place of its arrays (a dict keyed by an object
    made again is keyed by its copy, once every copy is made: in the walk's order, which
    hands out the tracers)."""
    out = self(fun)
    for d in self.keyed:
      items = list(d.items())
      d.clear()
      d.update([(self.seen.get(id(k), k), v) for k, v in items])
    return out

  def __call__(self, obj, depth=0):
    """The key of `obj`; rebuilding, `obj` with tracers for its arrays (itself where it
    holds none: a list it appends to while traced stays the caller's)."""
    if self.tracers is not None:
      t = type(obj)
      if id(obj) in self.holders or t is np.ndarray or t is Tracer or isinstance(obj, np.generic):
        return self._visit(obj, depth)
      if t is dict and any([id(k) in self.holders for k in obj]):  # (keyed by objects
        return self._visit(obj, depth)  # made again: `rebuilt` keys it by their copies)
      return obj
    before = self.held
    key = self._visit(obj, depth)
    if self.held > before:
      self.holders.add(id(obj))
    return key

  def _visit(self, obj, depth):
    self.nodes += 1
    if self.nodes > MAX_NODES:
      raise NotKept(f"the function reaches more than {MAX_NODES} objects")
    t = type(obj)
    if isinstance(obj, np.generic) and obj.dtype.kind in "biu":  # (a count, an index, a
      return obj if self.tracers else (t, obj)  # flag, as Python's int: by value)
    if t is np.ndarray or isinstance(obj, np.generic) or (t is Tracer and self.traced):
      self.leaves.append(obj)
      self.held += 1
      return next(self.tracers) if self.tracers else ("leaf",)
    if t in _VALUES:
      return obj if self.tracers else (t, obj)
    if t is frozenset and all([type(x) in _VALUES for x in obj]):
      return obj if self.tracers else ("frozenset", obj)  # (of values: one itself)
    if t is slice:
      parts = [self(x, depth) for x in (obj.start, obj.stop, obj.step)]
      return slice(*parts) if self.tracers else ("slice", tuple(parts))
    if t is tuple or t is list:
      parts = [self(x, depth) for x in obj]
      return t(parts) if self.tracers else (t.__name__, tuple(parts))
    if t is dict:
      parts = [self(v, depth) for v in obj.values()]
      if self.tracers:
        made = dict(zip(obj, parts))
        if any([id(k) in self.holders for k in obj]):
          self.keyed.append(made)
        return made
      return ("dict", tuple(self._ident(k) for k in obj), tuple(parts))
    if t is types.FunctionType and _library_op(obj):
      return obj if self.tracers else self._ident(obj)  # (its closure is the library's own)
    if t is types.FunctionType and depth < MAX_DEPTH and _walked_code(obj.__code__):
      return self._function(obj, depth)  # the user's, or primc's (a transform's closure)
    if t is functools.partial:
      parts = (self(obj.func, depth), self(obj.args, depth), self(obj.keywords, depth))
      return (
        functools.partial(parts[0], *parts[1], **parts[2]) if self.tracers else ("partial", parts)
      )
    if t is types.MethodType:
      parts = (self(obj.__func__, depth), self(obj.__self__, depth + 1))
      return types.MethodType(*parts) if self.tracers else ("method", parts)
    node = _node_of(obj)
    if node is not None:
      children, aux = node[0](obj)
      parts = [self(c, depth) for c in children]
      return node[1](aux, parts) if self.tracers else ("node", t, self._ident(aux), tuple(parts))
    if isinstance(obj, IDENTITY_TYPES) or t is types.FunctionType:
      return obj if self.tracers else self._ident(obj)
    if depth < MAX_DEPTH and _plain_object(obj):
      return self._object(obj, depth)
    raise NotKept(
      f"it reads a {t.__qualname__}, which is neither an array nor a value nor a container"
    )

  def _ident(self, obj):
    """A key for an object compared by identity (a value, if it is one)."""
    if type(obj) in _VALUES:
      return (type(obj), obj)
    self.refs.append(obj)
    return ("id", id(obj))

  def _seen(self, obj):
    """The key (or copy) of an object met before; a holder makes its referrer one."""
    if id(obj) in self.holders:
      self.held += 1
    return self.seen[id(obj)]

  def _function(self, fn, depth):
    if id(fn) in self.seen:
      return self._seen(fn)
    code, g = fn.__code__, fn.__globals__
    names = (
      [n for n in _global_names(code) if n in g and type(g[n]) is not types.ModuleType]
      if _user_code(code)
      else []
    )  # a library's globals are its own
    if not self.tracers:
      self.seen[id(fn)] = ("seen", len(self.seen))
      cells = tuple(
        self(c.cell_contents, depth + 1) if _filled(c) else ("empty",) for c in fn.__closure__ or ()
      )
      return (
        "fn",
        code,
        id(g),
        cells,
        self(fn.__defaults__, depth + 1),
        self(fn.__kwdefaults__, depth + 1),
        tuple(names),
        tuple(self(g[n], depth + 1) for n in names),
        self(fn.__dict__, depth + 1),
      )
    new_globals = dict(g)
    cells = tuple(types.CellType() for _ in fn.__closure__ or ())
    copy = types.FunctionType(code, new_globals, fn.__name__, None, cells or None)
    self.seen[id(fn)] = copy
    for cell, old in zip(cells, fn.__closure__ or ()):
      if _filled(old):
        cell.cell_contents = self(old.cell_contents, depth + 1)
    copy.__defaults__ = self(fn.__defaults__, depth + 1)
    copy.__kwdefaults__ = self(fn.__kwdefaults__, depth + 1)
    for n in names:
      new_globals[n] = self(g[n], depth + 1)
    copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    copy.__dict__.update(self(fn.__dict__, depth + 1))
    return copy

  def _object(self, obj, depth):
    if id(obj) in self.seen:
      return self._seen(obj)
    if not self.tracers:
      self.seen[id(obj)] = ("seen", len(self.seen))
      return ("object", type(obj), self(vars(obj), depth + 1))
    copy = object.__new__(type(obj))
    self.seen[id(obj)] = copy
    copy.__dict__.update(self(vars(obj), depth + 1))
    return copy


def _filled(cell) -> bool:
  try:
    cell.cell_contents
    return True
  except ValueError:
    return False


# ---------------------------------------------------------------------------------------
# A rule's digest: what a stored program's key holds for a custom rule (Python code)


def _digest_rule(rule: NamedFunction) -> tuple:
  """A custom rule (`core.NamedFunction`) as plain data that another process computes
  alike where the rule behaves alike: its `parts` (the user's functions and the values
  they close over) by content (`_Stable`); NotPlain where it has none or they reach what
  cannot be told so."""
  if rule.parts is None:
    raise stored.NotPlain(f"the rule {rule.name}")
  return (rule.kind, _Stable()(rule.parts))


def _user_sources() -> tuple:
  """The user's modules (files outside the library's folders, the script's included) by
  their content: a rule's Python may reach any of them by an attribute (`helpers.step`),
  which no walk of its functions sees, so an edit of one is another key of a program
  through a rule (`_Disk`)."""
  found = []
  for name, module in list(sys.modules.items()):
    path = _module_file(module)
    if type(path) is str and path.endswith(".py") and not path.startswith(_library()):
      if "_primc_library" not in vars(module):  # (not primc's generated kernels)
        found.append((name, _file_digest(path)))
  return tuple(sorted(found))


def _file_digest(path: str) -> str:
  """A file's content digest ("gone" where it cannot be read: its module's code, in
  memory, is what runs, and no edit of it is to come)."""
  try:
    st = os.stat(path)
    stamp = (path, st.st_size, st.st_mtime_ns)
    if stamp not in _file_digests:
      with open(path, "rb") as f:
        _file_digests[stamp] = blake2b(f.read(), digest_size=16).hexdigest()
    return _file_digests[stamp]
  except OSError:
    return "gone"


_file_digests: dict = {}  # (path, size, mtime) -> the digest of its content


_STABLE_VALUES = (int, float, complex, bool, str, bytes, type(None), type(Ellipsis))


class _Stable:
  """What a function's behaviour is a function of, as plain data alike in every process:
  a user's function by its code (instructions, names, constants: not where it lies), its
  closure, defaults and the globals it names; primc's by its name and closure (its code
  is the environment's); a library's, a module, a class by name; arrays by their bytes;
  a traced value by its type (what the rule computes from it is traced too); objects of
  primc's classes by their attributes. Anything else (an object of a user's class, which
  may change unseen; a walk past MAX_DEPTH): NotPlain."""

  def __init__(self):
    self.seen: dict = {}
    self.nodes = 0

  def __call__(self, obj, depth: int = 0):
    t = type(obj)
    if t in _STABLE_VALUES:
      return obj if t is not complex and t is not type(Ellipsis) else repr(obj)
    self.nodes += 1
    if self.nodes > MAX_NODES:
      raise stored.NotPlain(f"a rule reaching more than {MAX_NODES} objects")
    if t is tuple:
      return ("tuple", tuple([self(x, depth) for x in obj]))
    if id(obj) in self.seen:  # (a list or a dict may hold itself)
      return ("seen", self.seen[id(obj)])
    if depth > MAX_DEPTH:
      raise stored.NotPlain("a rule reaching too deep")
    self.seen[id(obj)] = len(self.seen)
    if t is list:
      return ("list", tuple([self(x, depth) for x in obj]))
    if t is dict:
      return ("dict", tuple([(self(k, depth), self(v, depth)) for k, v in obj.items()]))
    if t is frozenset or t is set:  # (in an order of their own: a set's follows hashes)
      return (t.__name__, tuple(sorted([repr(self(x, depth)) for x in obj])))
    return self._visit(obj, t, depth + 1)

  def _visit(self, obj, t, depth):
    if t is np.ndarray or isinstance(obj, np.generic):
      data = np.ascontiguousarray(obj)
      return ("array", data.dtype.str, data.shape, blake2b(data).hexdigest())  # (no copy)
    if t is Tracer:
      return ("traced", obj.aval.shape, obj.aval.dtype)
    if t is TreeDef:
      return ("tree", obj.kind, self(obj.meta, depth), self(obj.children, depth))
    if t is types.FunctionType and _library_op(obj):
      return ("fn", obj.__module__, obj.__qualname__)
    if t is types.FunctionType:
      return self._function(obj, depth)
    if t is functools.partial:
      return ("partial", self(obj.func, depth), self(obj.args, depth), self(obj.keywords, depth))
    if t is types.MethodType:
      return ("method", self(obj.__func__, depth), self(obj.__self__, depth))
    if t is np.dtype:
      return ("dtype", obj.str)
    if t is ShapedArray:
      return ("aval", obj.shape, obj.dtype)
    if isinstance(obj, (types.ModuleType, type)) or isinstance(obj, IDENTITY_TYPES):
      return self._named(obj)
    if t is NamedFunction:
      return ("rule",) + _digest_rule(obj)
    if type(obj).__module__.startswith("primc.") and _plain_object(obj):
      return ("object", self._named(t), self(vars(obj), depth))
    raise stored.NotPlain(f"a rule reaching a {t.__qualname__}")

  def _named(self, obj):
    """A module, a class or a library's function, by its name; a user's class (whose
    methods may differ in another process): NotPlain."""
    if isinstance(obj, types.ModuleType):  # (its own name: no lazy `__getattr__` asked)
      return ("module", vars(obj).get("__name__"))
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    if name is None or (isinstance(obj, type) and _users_module(module)):
      raise stored.NotPlain(f"a rule reaching {obj!r}")
    return ("named", module, name)

  def _function(self, fn, depth):
    code = fn.__code__
    if not _walked_code(code):  # a library's: its name (its closure, its code: its version's)
      return ("fn", fn.__module__, fn.__qualname__)
    cells = tuple(
      [self(c.cell_contents, depth) if _filled(c) else ("empty",) for c in fn.__closure__ or ()]
    )
    defaults = (self(fn.__defaults__, depth), self(fn.__kwdefaults__, depth))
    if not _user_code(code):  # primc's: its name and what it closes over
      return ("fn", fn.__module__, fn.__qualname__, cells, defaults)
    g = fn.__globals__
    named = tuple([(n, self(g[n], depth)) for n in _global_names(code) if n in g])
    return ("fn", _code_digest(code), cells, defaults, named)


def _module_file(module):
  """A module's `__file__` from its own namespace: a module's `__getattr__` (a lazy one,
  a stand-in's) is not asked, for it may import what it stands for."""
  return vars(module).get("__file__") if isinstance(module, types.ModuleType) else None


def _users_module(name) -> bool:
  """A module of the user's (its script, or a file outside the library's folders)."""
  module = sys.modules.get(name)
  path = _module_file(module)
  return (
    module is None or name == "__main__" or (path is not None and not path.startswith(_library()))
  )


@functools.lru_cache(maxsize=4096)
def _code_digest(code: types.CodeType) -> tuple:
  """A code object by what it does: its instructions, names, constants (code among them
  by this digest) and signature, not its file or lines."""
  consts = tuple(
    [_code_digest(c) if type(c) is types.CodeType else _const(c) for c in code.co_consts]
  )
  return (
    code.co_code,
    code.co_names,
    code.co_varnames,
    code.co_freevars,
    code.co_cellvars,
    (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags),
    consts,
  )


def _const(c):
  t = type(c)
  if t is tuple:
    return ("tuple", tuple([_const(x) for x in c]))
  if t is frozenset:  # (in a stable order: a set's follows the process's string hashes)
    return ("frozenset", tuple(sorted([repr(_const(x)) for x in c])))
  return c if t in (int, float, bool, str, bytes, type(None)) else repr(c)


def _fingerprint(program) -> str:
  """The program's text and its literals' values: equal for equal traces."""
  h = blake2b(str(program).encode(), digest_size=16)
  for eqn in program.eqns:
    for a in eqn.inputs:
      if isinstance(a, Lit):
        h.update(a.value.tobytes())
  for a in program.outputs:
    if isinstance(a, Lit):
      h.update(a.value.tobytes())
  return h.hexdigest()


class _Entry:
  """A kept program: its inputs are the arguments' leaves, then the lifted arrays."""

  __slots__ = (
    "program",
    "run",
    "out_tree",
    "refs",
    "calls",
    "seconds",
    "digest",
    "executable",
    "fast",
    "forward",
    "traced_as",
    "optimized",
    "final",
    "before",
  )

  def __init__(self, program, out_tree, refs):
    self.program, self.out_tree, self.refs = program, out_tree, refs
    self.run = runner(program)
    self.calls, self.seconds, self.digest, self.executable = 0, 0.0, None, None
    self.fast = None  # the executable's steady runner (False: it has none)
    self.optimized = not config.optimize_transforms  # (`_optimize`: once it pays)
    self.final = False  # (not to be differentiated again: `_Disk.entry`)
    self.before = 0  # calls of its function on values before it was made (`_carried`)
    self.forward = self.traced_as = None  # the function traced alone (`_forward`'s list;
    # a path's: its trace on its values, `_traced_alone`, with the arguments it was traced
    # with, compared by `_same_trace` at its first reuse)

  @property
  def fingerprint(self) -> str:
    """`_fingerprint` of the program (made when first compared)."""
    if self.digest is None:
      self.digest = _fingerprint(self.program)
    return self.digest


def _argument_leaves(args: tuple, kwargs: dict, traced_scalars):
  """The arguments' leaves, their tree, which leaves are traced (arrays; Python scalars
  where `traced_scalars(k)` says so, weak as `jit` traces them) and the rest (Python
  values of the key). Flat array arguments (the common call) skip the pytree walk."""
  if not kwargs and all([type(a) is np.ndarray or type(a) is Tracer for a in args]):
    return list(args), len(args), list(range(len(args))), []
  leaves, tree = tree_flatten((args, kwargs))
  traced, statics = [], []
  for k, x in enumerate(leaves):
    if isinstance(x, (np.ndarray, np.generic, Tracer)) or (
      type(x) in (float, int, bool, complex) and traced_scalars(k)
    ):
      traced.append(k)
    else:
      statics.append(x)
  return leaves, tree, traced, statics


_static_scalars: set = set()  # (transform key, code): Python numbers as values of the key


def _numbers(k) -> bool:
  return True


def _lazy(traced_scalars, args):
  """`traced_scalars(args)`, made at its first use (most calls pass no scalars)."""
  made = []

  def at(k):
    if not made:
      made.append(traced_scalars(args))
    return made[0](k)

  return at


@without_gc
def call(
  transform: Callable,
  key: tuple,
  fun: Callable,
  args: tuple,
  kwargs: dict,
  traced_scalars: Callable[[int], bool] | None = None,
  replayable: bool = False,
  taped: bool = False,
):
  """`transform(fun)(*args, **kwargs)` by a kept program. `key`: the transform and its
  parameters; `traced_scalars(args)(k)`: whether the k-th leaf of `(args, kwargs)`, a Python
  scalar, is traced (weak), not a value of the key (None: every one is); `replayable`: on
  arguments of their own shapes (`_by_structure`); `taped`: first calls on values (`_Taped`)."""
  plain = _plain_call(transform, key, fun, args, kwargs, traced_scalars, replayable)
  code = (key, getattr(fun, "__code__", None) or id(fun))  # what is not kept: by code
  if code in _unkept:
    _count("not_kept")
    return plain()
  walk = _Walk()
  # numbers traced (weak) first; values of the key where one's is needed (`range(n)`)
  static = code in _static_scalars and traced_scalars is not None
  leaves, tree, traced, statics = _argument_leaves(
    args, kwargs, _lazy(traced_scalars, args) if static else _numbers
  )
  arrays = [as_array(leaves[k]) for k in traced]  # (refusing what the plain path refuses)
  weak = weak_leaves([leaves[k] for k in traced])
  try:
    state = (walk(fun), tuple(walk(s) for s in statics))
    lifted = [as_array(x) for x in walk.leaves]
  except (NotKept, PrimcError) as e:  # (an array of a dtype primc does not take: baked)
    return _not_kept(code, str(e).splitlines()[0], plain)
  inputs = arrays + lifted
  full_key = _full_key(key, state, tree, traced, weak, inputs)
  try:
    entry = _kept.get(full_key)
  except TypeError as e:  # a value of the key that Python cannot hash
    return _not_kept(code, str(e), plain)
  if isinstance(entry, breaks.Paths):  # Python reads values: the path they take
    return _on_path(entry, inputs, full_key, code, fun)
  replay = (transform, leaves, tree, traced, inputs, code, plain)
  if type(entry) is _Taped and entry.calls >= 2 and not entry.due():
    return _on_tape(entry, replay)  # (its third call on: the walk trusted, as at a hit)
  if type(entry) is _Entry and _hit(entry, full_key):
    return _run(entry, inputs)
  drawn, reason, keys, on_tape = _random_state(), None, (key, state, fun), None
  firsts = (full_key, key, state, code, fun)
  try:  # the function traced alone, once (a transform of it replays that trace)
    if entry is None and taped and replayable and lifted:
      first = _first_on_values(fun, arrays, weak, drawn, full_key, keys, replay)
      if first is not _short:
        return first
    forward = _forward(fun, leaves, tree, traced, weak, walk, inputs) if replayable else None
    disk, long = _Disk(drawn, key, forward, leaves, tree, traced, weak, inputs), _tapes(forward)
    found = disk.load() if entry is None and not (taped and long) else None  # (`_Disk`)
    if found is None and (type(entry) is _Taped or (entry is None and taped and long)):
      entry = on_tape = _taped(entry, forward, drawn, full_key, keys, replay)
      if type(entry) is not _Taped:
        return entry  # (the call's result, by the tape)
      entry, reason, found = None, "calls on values cost enough: made", disk.load()
    if found is not None:  # made by an earlier process
      return _first(disk.entry(*found, walk.refs), drawn, forward, inputs, firsts, None, on_tape)
    drew = entry is not None and _drew(drawn, code, fun)  # (one first imported at the
    if not drew and entry is not None and _same_trace(forward, entry.forward):  # first call)
      _count("checked")  # the second call: the first call's program
      return _run(entry, inputs)
    made = _make(
      transform, fun, leaves, tree, traced, arrays, lifted, weak, walk, structure=forward
    )
  except (PrimcError, NotKept) as e:  # (a ConcretizationError: Python reads a value)
    if not static and traced_scalars is not None and _has_numbers(leaves, traced):
      _static_scalars.add(code)  # its numbers' values first (`range(n)`): values of the key
      return call(transform, key, fun, args, kwargs, traced_scalars, replayable, taped)
    if isinstance(e, ConcretizationError):
      return _kept_paths(full_key, fun, replay, arrays, lifted, weak, walk, taped, replayable)
    return _not_kept(code, str(e).splitlines()[0], plain)
  if entry is None:
    disk.save(made.program, made.out_tree)
    return _first(made, drawn, forward, inputs, firsts, reason, on_tape)
  return _run(made if drew else _kept_or_checked(full_key, entry, made, *firsts[1:]), inputs)


def traced(fun: Callable, args: tuple) -> tuple | None:
  """`fun` traced alone at `args`, kept as `call` keeps a transform's program (by what the
  function reads and the arguments' types) from the second call of its code on: traced
  then, traced again and compared at the next, then taken as it is (`primc.vjp` on values
  runs the tape on it: no trace at every call). Returns (program, inputs, out_tree): the
  inputs are the arguments' leaves, then the arrays the function reads by name; None where it is not
  kept (a walk that fails, Python reading values, random numbers drawn, a value of
  another kind among the arguments)."""
  if not wanted():
    return None
  code = (("traced",), getattr(fun, "__code__", None) or id(fun))
  if code in _unkept:
    return None
  if code not in _traced_codes:  # (its first call: traced as it is, not walked; a vjp
    _traced_codes[code] = True  # made once, as check_grads' of a function it was given,
    if len(_traced_codes) > 4 * KEPT:  # costs no walk)
      _traced_codes.pop(next(iter(_traced_codes)))
    return None
  walk = _Walk()
  try:
    leaves, tree, traced_at, statics = _argument_leaves(args, {}, _numbers)
    if statics:
      return None
    inputs = [as_array(x) for x in leaves]
    weak = weak_leaves(leaves)
    state = walk(fun)
    inputs += [as_array(x) for x in walk.leaves]
    full_key = _full_key(code[0], state, tree, traced_at, weak, inputs)
    entry = _traces.get(full_key)
  except (NotKept, PrimcError, TypeError):
    return None
  if entry is not None and entry[1] >= 2:
    _traces.move_to_end(full_key)
    _count("trace_hits")
    return entry[0][0], inputs, entry[0][1]
  drawn = _random_state()
  try:
    forward = _forward(fun, leaves, tree, traced_at, weak, walk, inputs)
  except ConcretizationError:
    return None
  if forward is None or _drew(drawn, code, fun):
    return None
  if entry is None:
    _traces[full_key] = [forward, 1]
    if len(_traces) > KEPT:
      _traces.popitem(last=False)
  elif _same_trace(forward, entry[0]):
    entry[1] = 2
  else:
    _unkeep(full_key, code, fun, "with the same arguments (state read through an object?)")
    _traces.pop(full_key, None)
  return forward[0], inputs, forward[1]


_traces: "collections.OrderedDict[Any, list]" = collections.OrderedDict()  # `traced`'s
_traced_codes: dict = {}  # codes of functions `traced` was asked for once


class _Disk:
  """A call's kept program on disk (`primc.stored`), where its function traced alone
  (`forward`) drew no random numbers: its key (the transform's, the function's trace and
  output tree, the arguments' tree, their traced and weak leaves and Python values, the
  inputs' types), made at its first use; None where a part is not plain data (nothing is
  stored then) or storing is off. A function long enough to run on the tape first is
  looked for when its program is to be made, not at its first call: loading costs what
  that call on values costs (the HMM's 28,000 equations: ~0.15 s either way), and the
  key, the trace written out, ~2.5 us an equation more; a loop of calls then skips the
  making (rnn, lstm: seconds). `parts`: `_stored_key`'s."""

  __slots__ = ("parts", "drawn", "key", "traces", "ruled")

  def __init__(self, drawn, *parts):
    self.parts, self.drawn = parts, drawn
    traces = [] if parts[1] is None else [parts[1][0], *parts[8:]]  # (a path's guards)
    self.traces = [p for p in traces if p is not None]

  def _key(self) -> str | None:
    if not hasattr(self, "key"):  # (made where used: most calls never ask)
      usable = self.traces and not _drawn_since(self.drawn) and stored.wanted()
      self.ruled = False
      self.key = _stored_key(*self.parts, rules=self._rule) if usable else None
      if self.key is not None and self.ruled:  # (once for all its rules: `_user_sources`)
        self.key = stored.key((self.key, _user_sources()))
    return self.key

  def _rule(self, rule) -> tuple:
    self.ruled = True  # (the function calls a custom rule: `entry`)
    return _digest_rule(rule)

  def _lines(self) -> tuple:
    """The source lines of the key's traces (the function's, a path's guards')."""
    return sum((stored.sources_of(p) for p in self.traces), ())

  def load(self) -> tuple | None:
    """(program, out_tree) an earlier process stored, naming this call's lines; or None."""
    found = None
    if self._key() is not None:
      found = stored.load(self.key, self._lines(), user_source())
    if found is not None:
      _count("loaded")
    return found

  def save(self, program, out_tree) -> None:
    if self._key() is None or _drawn_since(self.drawn):  # (a custom rule run
      return  # while making the program drew random numbers: its constants are ours)
    if stored.save(self.key, program, out_tree, self._lines()):
      _count("stored")

  def entry(self, program, out_tree, refs) -> "_Entry":
    """The kept entry of a loaded program: `final` where the function calls custom rules
    (stored with their functions' programs in their place: `stored.save`), so no trace
    differentiates it again (`staged` makes the transform anew there)."""
    entry = _Entry(program, out_tree, refs)
    entry.final = self.ruled
    return entry


def _stored_key(
  key, forward, leaves, tree, traced, weak, inputs, guards=None, rules=_digest_rule
) -> str | None:
  """`_Disk`'s key (`stored.key`), or None where a part is not plain data. `guards`: a
  path's program of the values its Python read (`_replayed_path`); `rules`: a custom
  rule's digest (`_digest_rule`)."""
  chosen = set(traced)
  try:
    return stored.key(
      (
        stored.plain(key),
        stored.encode_program(forward[0], sources=False, rules=rules),
        None if guards is None else stored.encode_program(guards, sources=False, rules=rules),
        stored.encode_tree(forward[1]),
        tree if type(tree) is int else stored.encode_tree(tree),
        tuple(traced),
        tuple(weak),
        tuple([(x.shape, x.dtype.str) for x in inputs]),
        stored.plain(tuple([x for k, x in enumerate(leaves) if k not in chosen])),
      )
    )
  except (stored.NotPlain, RecursionError):  # (a rule's state nested past Python's stack)
    return None


def _plain_call(transform, key, fun, args, kwargs, traced_scalars, replayable) -> Callable:
  """The call made without keeping (`_by_structure` first, where `replayable`)."""
  plain = lambda: plainly(lambda: transform(fun)(*args, **kwargs))
  if not replayable:
    return plain
  return functools.partial(_by_structure, transform, key, fun, args, kwargs, traced_scalars, plain)


def _full_key(key, state, tree, traced, weak, inputs) -> tuple:
  """What a kept program is found by: the transform's key, what the function reads
  (`state`), the arguments' tree, which leaves are traced and which weak, the settings,
  and the inputs' types (made once here: `call` keeps by it, `staged` finds by it)."""
  types = tuple((x.shape, x.dtype.str) for x in inputs)
  return (key, state, tree, tuple(traced), weak, tuple(vars(config).values()), types)


def _has_numbers(leaves, traced) -> bool:
  return any(type(leaves[k]) in (int, float) for k in traced)


def _on_path(paths: breaks.Paths, inputs, full_key, code, fun):
  """A call of a function whose Python reads values, by the kept path its values take."""
  _count("hits")
  flat, out_tree = paths.run(inputs)
  if paths.last[0].entry.calls == 2:  # the path's first reuse: the same when traced?
    flat, out_tree = _checked_path(paths, inputs, full_key, code, fun, flat, out_tree)
  return tree_unflatten(out_tree, flat)


def _first(made, drawn, forward, inputs, keys, reason: str | None = None, on_tape=None):
  """The first call of a function, by the program `made` (counting the calls it ran on
  values before, `on_tape`: `_carried`), then kept (`keys`: the call's full key, the
  transform's, the state's, the code's and the function), with what its second call
  compares (`forward`: the function's trace alone, or None: the transform's
  trace is compared); not kept where tracing drew random numbers (`drawn`: numpy's and
  Python's generators before), which its program holds as constants: then traced at
  every call, as numpy's functions draw at every call, and said once."""
  full_key, key, state, code, fun = keys
  made = _carried(made, on_tape)
  if _drew(drawn, code, fun):
    return _run(made, inputs)
  made.forward = forward  # (fingerprinted when a second call compares: `_same_trace`)
  return _run(_kept_or_checked(full_key, None, made, key, state, code, fun, reason), inputs)


def _same_trace(forward: list, kept) -> bool:
  """Whether the function traced alone as `forward` traced as the first call's `kept`
  (`_forward`'s list, None where there was none)."""
  if kept is None or forward is None:
    return False
  # (the same up to variable names: as the same fingerprint, both traced on inputs of one
  # type; ~4x cheaper than printing both. A nested program in a parameter compares by
  # identity there, so a loop traced anew is compared by the fingerprints.)
  return core.alpha_equal(forward[0], kept[0]) or _digest(forward) == _digest(kept)


def _drew(drawn, code, fun) -> bool:
  """Whether tracing drew random numbers (`drawn`: numpy's and Python's generators
  before, `_drawn_since`): then the function is not kept, and that is said once."""
  if not _drawn_since(drawn):
    return False
  _not_kept(code, "it draws random numbers while traced", None)
  log.warning(
    "%s draws random numbers while traced (numpy's or Python's generator): traced at every call",
    getattr(fun, "__qualname__", fun),
  )
  return True


TAPE_SECONDS_PER_EQN = 2e-4  # making a kept gradient, per equation of the function (W12's HMM)
TAPE_MIN_SECONDS = 0.05  # a kept program cheaper to make than this is made at the first call


def _making(program) -> float:
  """The estimated seconds of making the kept program of a function traced as `program`."""
  return TAPE_SECONDS_PER_EQN * len(program.eqns)


def _tapes(forward) -> bool:
  """Whether a function traced alone as `forward` is long enough to run on values first."""
  return forward is not None and _making(forward[0]) >= TAPE_MIN_SECONDS


class _Taped:
  """A function whose first calls run on values (`primc.tape`, autograd's way: no program
  made), until they have cost what making its kept program is estimated to cost (ski
  rental: at most twice the better choice's time, whether it is called twice or a
  thousand times; a long gradient costs ~10x a call on values to make). Its first call
  keeps the function's trace alone (`forward`), its second compares a new one against it,
  later ones trust the walk as a kept program's hits do."""

  __slots__ = ("forward", "calls", "seconds", "size")

  def __init__(self, forward, size: int = 0):
    self.forward, self.calls, self.seconds = forward, 0, 0.0
    self.size = size if forward is None else len(forward[0].eqns)  # (its equations)

  def due(self) -> bool:
    """Whether its calls have cost what making its program is estimated to cost."""
    return self.seconds >= TAPE_SECONDS_PER_EQN * self.size


def _taped(entry, forward, drawn, full_key, keys, replay):
  """A call of a function that runs on values first (`_Taped`): its result, or the
  `_Taped` entry whose calls have cost enough (its kept program is made now)."""
  key, state, fun = keys
  code, plain = replay[5], replay[6]
  if entry is None:
    if _drew(drawn, code, fun):
      return _on_tape(_Taped(forward), replay)
    entry = _Taped(forward)
    _count("misses", _reason(key, state[0]))
    _keep(full_key, entry)
  elif entry.forward is None and forward is not None:
    entry.forward, entry.size = forward, len(forward[0].eqns)  # (the first call's: arrays
    # it reads by name as they were; this one's, lifted, is what later calls replay)
    if entry.due():
      return entry
  elif forward is None or not core.alpha_equal(forward[0], entry.forward[0]):
    _unkeep(full_key, code, fun, "with the same arguments (state read through an object?)")
    return plain()
  elif entry.due():
    return entry
  return _on_tape(entry, replay)


_short: set = set()  # codes whose trace was short (`_first_on_values`: lifted at once)
MAX_SHORT_CODES = 4096


def _first_on_values(fun, arrays, weak, drawn, full_key, keys, replay):
  """The first call of a function that reads arrays by name, under a taped transform:
  the function traced with those arrays as they are (numpy's work on them stays
  numpy's: `xs[t] @ u` of a sequence model's data, which a kept program takes as
  inputs, and so traces) and, where that trace is long, transformed on values
  (`primc.tape`), kept as a `_Taped` entry whose second call traces the function with
  those arrays lifted. Where it is short, `_short` (its code is remembered: its kept
  program is made now from a trace with the arrays lifted, as for a first call, and
  from then on at once). Raises what tracing raises (a value read: paths are kept)."""
  transform, leaves, tree, traced, _, code, _ = replay
  if code in _short:
    return _short
  program, out_tree = replayed.forward(fun, leaves, tree, traced, arrays, tuple(weak))
  drew = _drawn_since(drawn)
  if not drew and not _tapes((program,)):
    if len(_short) < MAX_SHORT_CODES:
      _short.add(code)
    return _short
  entry = _Taped(None, len(program.eqns))
  if not (drew and _drew(drawn, code, keys[2])):
    _count("misses", _reason(keys[0], keys[1][0]))
    _keep(full_key, entry)
  start = time.perf_counter()
  out = _on_values(transform, program, out_tree, leaves, tree, traced, arrays)
  entry.calls, entry.seconds = 1, time.perf_counter() - start
  return out


def _carried(made: _Entry, on_tape) -> _Entry:
  """`made`, counting the calls its function ran on values (`on_tape`: a `_Taped` or
  `_TapedPath`, or None) and their time as its own where compiling is decided: time spent
  running slowly, which its compile must pay back (a fluid simulation's gradient, ~1.2 s
  a call on values, 0.3 s native: its compile starts where it is made, not 6 calls on)."""
  if on_tape is not None:
    made.before, made.seconds = on_tape.calls, made.seconds + on_tape.seconds
  return made


def _on_tape(entry: _Taped, replay):
  """`transform(fun)(*args, **kwargs)` on values, the function replayed from its trace."""
  transform, leaves, tree, traced, inputs, code, plain = replay
  program, out_tree, _ = entry.forward
  start = time.perf_counter()
  try:
    out = _on_values(transform, program, out_tree, leaves, tree, traced, inputs)
  except PrimcError as e:  # as it would run unkept, which says what is wrong
    return _not_kept(code, str(e).splitlines()[0], plain)
  entry.calls += 1
  entry.seconds += time.perf_counter() - start
  return out


def _on_values(transform, program, fun_tree, leaves, tree, traced, xs):
  """`transform` of the function whose trace alone is `program` (its output tree
  `fun_tree`), on the values `xs` (traced leaves, then lifted arrays): replayed, not kept,
  so `grad`-like transforms run it on values (`primc.tape`)."""
  _count("taped")
  fn = replayed.replaying(transform, program, fun_tree, leaves, tree, traced)
  return plainly(lambda: fn(*xs))


def _guards_apart(program, n: int) -> tuple:
  """A program traced with `n` guards (its last outputs): (without them, of them alone)."""
  k = len(program.outputs) - n
  apart = lambda outputs: core.Program(program.inputs, program.eqns, outputs)
  return apart(program.outputs[:k]), apart(program.outputs[k:])


class _TapedPath:
  """A long path of a function whose Python reads values, run on values (`primc.tape`)
  until its calls have cost what making its program would (as `_Taped`), then made: a
  path is often taken once (a loop to convergence from a new start), and its program
  would cost ~10x that call. The path's callable for `breaks.Paths`: `(inputs, _) -> the
  transform's flat outputs, then the guards' values` (the outputs None where the guards
  differ: the path is not this call's)."""

  def __init__(self, transform, traced_as, alone, make):
    program, fun_tree, read = alone  # (the function traced alone: outputs, then guards)
    self.alone, guarded = _guards_apart(program, len(read))
    self.forward = [self.alone, None, None]  # (what its first reuse compares: `_same_trace`)
    self.guards = [value for value, _ in read]
    self.check = runner(passes.dce(guarded))
    self.transform, self.traced_as, self.fun_tree, self.make = transform, traced_as, fun_tree, make
    self.made, self.calls, self.seconds, self.pending, self.n_out = None, 0, 0.0, None, 0
    self.entry = self  # (`_on_path` reads the path's counts there)
    self.again = None  # (its first reuse's trace, for `_checked_path`: `_reused`)

  def first(self, xs):
    """(self, the transform's output tree): its first call, on values (the flat result
    is the next `__call__`'s)."""
    self.pending, out_tree = self._on_values(xs)
    self.n_out = len(self.pending)
    return self, out_tree

  def _on_values(self, xs):
    _, leaves, tree, traced, _, _ = self.traced_as
    start = time.perf_counter()
    out = _on_values(self.transform, self.alone, self.fun_tree, leaves, tree, traced, xs)
    self.seconds += time.perf_counter() - start
    return tree_flatten(out)

  def __call__(self, xs, _=None):
    if self.made is not None:
      self.calls += 1
      return _run(self.made, xs)
    if self.pending is not None:
      flat, self.pending = self.pending, None
      self.calls += 1
      return flat + self.guards
    got = self.check(list(xs))
    if not all(np.array_equal(g, w) for g, w in zip(got, self.guards)):
      return [None] * self.n_out + got  # (not this call's path)
    self.calls += 1
    if self.seconds >= _making(self.alone):
      self.made = _carried(self.make(list(xs), [], False)[0], self)
      return _run(self.made, xs)
    if self.calls == 2:
      return self._reused(xs) + got
    return self._on_values(xs)[0] + got

  def _reused(self, xs) -> list:
    """Its first reuse, on values: the function traced again with them (`self.again`,
    which `_checked_path` compares with the first call's), its forward sweep recorded
    as it goes; where the two traces are the same, the tape takes that sweep."""
    recording = tape.Recording(len(self.traced_as[4]))
    self.again = _traced_alone(*self.traced_as, list(xs), True, None, recording)[0]
    same = _same_trace([self.again, None, None], self.forward)
    with tape.recorded(recording.moved(self.alone) if same else None):
      return self._on_values(xs)[0]


def _random_state() -> tuple:
  """numpy's global generator's state and Python's `random`'s, to compare. Each is None
  until its module is first imported (by then nothing was drawn from it; the imports,
  ~7 ms, are left to programs that draw)."""
  python = sys.modules.get("random")
  python = None if python is None else python.getstate()
  if "numpy.random" not in sys.modules:
    return None, python
  _, words, pos, has_gauss, gauss = np.random.get_state()
  return (pos, has_gauss, gauss, words.tobytes()), python


def _drawn_since(drawn) -> bool:
  """Whether numpy's or Python's generator drew since `drawn` (`_random_state`'s). One
  whose module was not imported then is taken as not drawn from (a library imports
  numpy.random at a first evaluation: scipy's functions; no state before tells): where
  the function drew from it after all, the second call, which traces it again as a
  check (`call`), sees that its state moves."""
  now = _random_state()
  return now != drawn and any([a is not None and a != b for a, b in zip(drawn, now)])


MAX_STRUCTURES = 8  # structures of one function's trace seen more often than reused: stop
_structures: dict = {}  # (transform key, code) -> [structures made, reuses, the last
# structure's (program, the key without its fingerprint, full key)]; None: cannot


def _by_structure(transform, key, fun, args, kwargs, traced_scalars, plain):
  """`transform(fun)(*args, **kwargs)` for a function not kept by what it reads (it
  reads an object the walk cannot compare, or draws random numbers): traced alone, its
  literal arrays lifted to inputs, and the transform of that structure kept
  (`primc.replayed`). `plain()` where it cannot be traced alone, or where its structure
  keeps changing (`MAX_STRUCTURES`)."""
  code = (key, getattr(fun, "__code__", None) or id(fun))
  seen = _structures.get(code, [0, 0, None])
  if seen is None or (seen[0] >= MAX_STRUCTURES and seen[1] < seen[0]):
    return plain()
  try:
    try:  # Python numbers traced first (a step count), values where Python needs them
      leaves, tree, traced, arrays, weak, structure, out_tree = _alone(fun, args, kwargs, _numbers)
    except ConcretizationError:
      if traced_scalars is None:
        raise
      leaves, tree, traced, arrays, weak, structure, out_tree = _alone(
        fun, args, kwargs, _lazy(traced_scalars, args)
      )
    structure, consts = replayed.lifted(structure)
    skey = _structure_key(seen, key, structure, out_tree, tree, traced, weak, arrays + consts)
    entry = _kept.get(skey)
    if entry is None:
      entry = _replay_entry(
        transform, structure, out_tree, leaves, tree, traced, arrays + consts, weak
      )
      _keep(skey, entry)
      seen[0] += 1
      _count("misses", "kept by the structure of its trace")
    else:
      seen[1] += 1
      _count("hits")
  except Exception:  # noqa: BLE001 - it runs as it would unkept, which says what failed
    _structures[code] = None
    return plain()
  _structures[code] = seen
  return _run(entry, arrays + consts)


def _structure_key(seen, key, structure, out_tree, tree, traced, weak, inputs) -> tuple:
  """The full key of a structure (its fingerprint, what it reads: its trace); the last
  one's where the structure is the same up to variable names (`core.alpha_equal`, on
  inputs of the same types: printing each call's trace cost ~a third of a call)."""
  rest = _full_key(("structure", key), out_tree, tree, traced, weak, inputs)
  last = seen[2]
  if last is not None and last[1] == rest and core.alpha_equal(structure, last[0]):
    return last[2]
  skey = _full_key(
    ("structure", key), (_fingerprint(structure), out_tree), tree, traced, weak, inputs
  )
  seen[2] = (structure, rest, skey)
  return skey


def _alone(fun, args, kwargs, traced_scalars):
  """The call's leaves, tree, traced leaves (positions, arrays, weak) and `fun` traced
  alone on them (`replayed.forward`: program, out_tree)."""
  leaves, tree, traced, _ = _argument_leaves(args, kwargs, traced_scalars)
  arrays = [as_array(leaves[k]) for k in traced]
  weak = weak_leaves([leaves[k] for k in traced])
  return (
    leaves,
    tree,
    traced,
    arrays,
    weak,
    *replayed.forward(fun, leaves, tree, traced, arrays, weak),
  )


def _replay_entry(transform, structure, out_tree, leaves, tree, traced, inputs, weak):
  """The kept entry of `transform` of the function that replays `structure`."""
  flat = replayed.replaying(transform, structure, out_tree, leaves, tree, traced)
  program, captured, result_tree = trace_flat(
    flat, [aval_of(x) for x in inputs], tuple(weak) + (False,) * (len(inputs) - len(weak))
  )
  assert not captured
  return _Entry(program, result_tree, [])


def _hit(entry: _Entry, full_key) -> bool:
  """Whether a call runs the kept `entry` as it is (from its third call on)."""
  if entry.calls == 1:
    return False
  _count("hits")
  with _lock:
    if full_key in _kept:
      _kept.move_to_end(full_key)
  return True


def _kept_or_checked(full_key, entry, made, key, state, code, fun, reason=None) -> _Entry:
  """The entry a call runs: `made` kept (the first call), or checked against the kept
  one (the second: traced again, the same program?), a different one unkeeping the
  function (numpy random numbers drawn inside it)."""
  if entry is None:
    _count("misses", reason or _reason(key, state[0]))
    _keep(full_key, made)
    return made
  if entry.fingerprint == made.fingerprint:
    _count("checked")
    return entry
  _unkeep(
    full_key,
    code,
    fun,
    "with the same arguments (numpy random numbers drawn "
    "inside it, or state read through an object?)",
  )
  return made


def _keep(full_key, kept) -> None:
  with _lock:
    _kept[full_key] = kept
    if len(_kept) > KEPT:
      _kept.popitem(last=False)


def _unkeep(full_key, code, fun, why: str) -> None:
  """A function whose program changed between two calls (`why`): traced at every call
  from now on, said once."""
  with _lock:
    _kept.pop(full_key, None)
  _not_kept(code, f"its program changed between two calls {why}", None)
  log.warning(
    "%s: its program changed between two calls %s: traced at every call",
    getattr(fun, "__qualname__", fun),
    why,
  )


def _checked_path(paths, inputs, full_key, code, fun, flat, out_tree):
  """A kept path reused for the first time, traced again: a different program (numpy
  random numbers drawn inside) unkeeps the function, this call's result its new trace's."""
  taken = paths.last[0].entry
  again = getattr(taken, "again", None)  # (a `_TapedPath` traced this call again itself)
  if again is None:
    again = _traced_alone(*taken.traced_as, inputs, True)[0]
  else:
    taken.again = None
  if _same_trace([again, None, None], taken.forward):
    _count("checked")
    return flat, out_tree
  run, guards, tree = paths.make(inputs)
  _unkeep(full_key, code, fun, "taking the same path (numpy random numbers drawn inside it?)")
  full = run(inputs, None)
  return full[: len(full) - len(guards)], tree


def _kept_paths(full_key, fun, replay, arrays, lifted, weak, walk, taped, replayable=False):
  """A function whose Python reads traced values (`if loss < tol:`, a loop to
  convergence): its paths kept, each traced with the values that take it (`_paths`);
  a long path of a `taped` transform runs on values first (`_TapedPath`). Where it
  cannot be (an error in that trace), the call runs as it would unkept. `replay`: as
  `call` makes it; `replayable`: the transform of a path is made from the path's trace
  (`_replayed_path`), not by tracing the function again."""
  transform, leaves, tree, traced, _, code, plain = replay
  n = len(arrays)
  traced_as = (fun, leaves, tree, traced, weak, walk)

  def make(xs, guards, on_values=taped):
    found, drawn = [], _random_state()
    recording = tape.Recording(len(weak)) if on_values else None
    program, fun_tree, _ = _traced_alone(*traced_as, xs, True, found, recording)
    if on_values and _tapes((program,)):
      guards += [value for value, _ in found]
      path = _TapedPath(transform, traced_as, (program, fun_tree, found), make)
      with tape.recorded(recording):  # (the trace's values: one forward computation)
        return path.first(xs)
    alone, guarded = _guards_apart(program, len(found))
    if replayable:
      guards += [value for value, _ in found]
      disk = _Disk(drawn, full_key[0], [alone, fun_tree], leaves, tree, traced, weak, xs, guarded)
      entry = _replayed_path(transform, traced_as, alone, guarded, fun_tree, xs, disk)
    else:
      entry = _make(transform, fun, leaves, tree, traced, xs[:n], xs[n:], weak, walk, guards)
    entry[0].traced_as = traced_as
    entry[0].forward = [alone, None, None]  # (the trace a path's first reuse compares)
    return entry

  try:
    paths = _paths(make, arrays + lifted)
  except (PrimcError, NotKept) as e:
    return _not_kept(code, str(e).splitlines()[0], plain)
  _count("misses", "Python reads values: a path kept")
  _keep(full_key, paths)
  return tree_unflatten(*reversed(paths.run(arrays + lifted)))


def _replayed_path(transform, traced_as, alone, guarded, fun_tree, xs, disk):
  """The kept entry of a path of a `replayable` transform, from the path's trace alone
  (`alone`: its outputs; `guarded`: the values Python read, its guards): the transform of
  replaying that trace (no Python runs again, nothing is computed while tracing), its
  guards' values after its outputs: (entry, the transform's output tree), as `_make`;
  stored (`disk`), or loaded where an earlier process stored it."""
  fun, leaves, tree, traced, weak, walk = traced_as
  found = disk.load()
  if found is not None:
    flat_tree, out_tree = found[1].children  # (as `disk.save` below pairs them)
    return disk.entry(found[0], flat_tree, walk.refs), out_tree
  flat = replayed.replaying(transform, alone, fun_tree, leaves, tree, traced)
  trees = []

  def with_guards(*ys):
    outs, out_tree = tree_flatten(flat(*ys))
    trees.append(out_tree)
    return [*outs, *eval_program(guarded, *ys)]

  avals = [aval_of(x) for x in xs]
  program, captured, _ = trace_flat(
    with_guards, avals, tuple(weak) + (False,) * (len(xs) - len(weak))
  )
  assert not captured
  entry = _Entry(program, tree_flatten([0] * len(program.outputs))[1], walk.refs)
  disk.save(program, TreeDef("tuple", None, (entry.out_tree, trees[0])))
  return entry, trees[0]


_unkept: set = set()  # (transform key, code): calls not kept (traced at every call)
_lock = threading.Lock()  # the kept programs' order (threads call transforms too)


def _not_kept(code, reason: str, plain):
  """Remembers that calls of this function are not kept (and why); runs `plain`."""
  _unkept.add(code)
  _count("not_kept", reason)
  if len(_unkept) > 4 * KEPT:
    _unkept.pop()
  return plain() if plain is not None else None


def _run(entry: _Entry, inputs: list):
  """The entry's result for these inputs (a tree): native once compiled (its executable's
  steady runner where it takes the inputs, else its general call), else interpreted."""
  entry.calls += 1
  exe = entry.executable
  if exe is not None and entry.fast is None and not getattr(exe, "ready", _always)():
    exe = None  # (tiered: compiling in the background; the runner below serves till then)
  if exe is not None:
    native = getattr(exe, "native", None)  # tiered: compiled in the background by now?
    if native is not None:
      entry.executable, entry.fast, exe = native, None, native
    if entry.fast is None:  # (None until the executable's first call: then try again)
      entry.fast = exe.runner(entry.out_tree) if hasattr(exe, "runner") else False
    result = entry.fast(*inputs) if entry.fast else None
    return tree_unflatten(entry.out_tree, exe(inputs, None)) if result is None else result
  start = time.perf_counter()
  outs = entry.run(inputs)
  entry.seconds += time.perf_counter() - start
  if _hot(entry):  # (before optimizing: the compile optimizes to the fixpoint itself)
    entry.executable = compiler[0](entry.program)
    _count("compiled")
  elif (
    entry.executable is None  # (not while compiling in the background either)
    and not entry.optimized
    and entry.calls >= 2
    and (entry.seconds >= OPTIMIZE_SECONDS * len(entry.program.eqns))
  ):
    _optimize(entry)
  return tree_unflatten(entry.out_tree, outs)


def _hot(entry: _Entry) -> bool:
  """Whether an interpreted entry's calls have paid for compiling it (`_compile_cost`)."""
  return (
    entry.executable is None
    and entry.calls + entry.before >= HOT_CALLS
    and entry.seconds >= _compile_cost(entry.program)
    and config.compile_hot_transforms
    and _compiler() is not None
  )


def _compile_cost(program) -> float:
  """What compiling `program` costs the calling thread, by estimate (s): a hot program is
  compiled once its interpreted calls have cost that (the ski-rental rule: whether it is
  called a few more times or a million, at most about twice the better choice's time)."""
  load = 0.0 if _codegen_loaded() else LOAD_SECONDS
  return HOT_SECONDS + load + COMPILE_SECONDS * len(program.eqns)


def _always() -> bool:
  return True


def _codegen_loaded() -> bool:
  """Whether code generation is loaded in this process (a compile is then only its own
  cost: the ski-rental rule counts the load once, for the first)."""
  return "primc.codegen.backend" in sys.modules


def _optimize(entry: _Entry) -> None:
  """The entry's program optimized (one round, as a transform's program gets; compiling
  a hot one goes to the fixpoint), once its interpreted calls have cost what that costs
  (`OPTIMIZE_SECONDS` per equation, the ski-rental rule: a program called once or twice,
  the 946-step HMM gradient's 28,000 equations, runs as traced: its first call 5.0 ->
  ~4 s). From the third call on: the second call compares the first's program."""
  entry.program = passes.optimize(entry.program, rounds=1)
  entry.run = runner(entry.program)
  entry.optimized = True


def _compiler():
  """`jit`'s compiler (`primc.compile` sets `compiler[0]` when it is imported; where
  nothing did yet, `core.on_compiler_wanted` imports it), or None."""
  if compiler[0] is None:
    for load in core.on_compiler_wanted:
      load()
  return compiler[0]


_seen_codes: dict = {}  # (transform key, state key) -> True: for the misses' reasons


def _reason(key, state) -> str:
  if (key, state) in _seen_codes:
    return "new argument signature"
  _seen_codes[(key, state)] = True
  if len(_seen_codes) > 4 * KEPT:
    _seen_codes.pop(next(iter(_seen_codes)))
  return "new function or state"


def _make(
  transform,
  fun,
  leaves,
  tree,
  traced,
  arrays,
  lifted,
  weak,
  walk,
  guards: list | None = None,
  structure=None,
) -> _Entry:
  """Traces `transform(fun)` with the arguments' traced leaves and the lifted arrays as
  inputs (raises a PrimcError where the result is not a program of arrays: the call
  then runs as it would without keeping, which raises the user's errors). With `guards`
  (a function whose Python reads values: `primc.breaks`), traced with the inputs' values:
  the path they take, its guards' values appended to `guards`, the entry's outputs flat
  with the guards last."""
  flat = (
    _flat_call(transform, fun, leaves, tree, traced, len(arrays), walk)
    if (structure is None)
    else replayed.replaying(transform, structure[0], structure[1], leaves, tree, traced)
  )
  avals = [aval_of(x) for x in arrays + lifted]
  found = [] if guards is not None else None
  program, captured, out_tree = trace_flat(
    flat,
    avals,
    tuple(weak) + (False,) * len(lifted),
    None if guards is None else arrays + lifted,
    found,
  )
  assert not captured
  if guards is not None:
    guards += [value for value, _ in found]
    out_tree = (out_tree, tree_flatten([0] * len(program.outputs))[1])  # (the user's, flat)
    return _Entry(program, out_tree[1], walk.refs), out_tree[0]
  return _Entry(program, out_tree, walk.refs)


def _flat_call(transform, fun, leaves, tree, traced, n, walk) -> Callable:
  """`transform(fun)(*args, **kwargs)` as a function of the traced leaves, then the
  lifted arrays (rebuilt into the function where the walk found them)."""

  def flat(*xs):
    rebuilt = _Walk(iter(xs[n:]), walk.holders).rebuilt(fun)
    return replayed.called(transform(rebuilt), leaves, tree, traced)(*xs[:n])

  return flat


def _traced_alone(
  fun, leaves, tree, traced, weak, walk, inputs, concrete: bool = False, guards=None, recorder=None
):
  """`fun` itself traced on the traced leaves, then the lifted arrays (`inputs`; with
  their values where `concrete`: its path, the values Python read appended to `guards`
  and the program's last outputs; `recorder`: `trace_flat`'s): (program, out_tree, the
  lifted arrays' tracers, to see writes into them). A trace without the transform: the
  constants drawn inside show there, at a fraction of the transform's cost."""
  flat = _flat_call(lambda f: f, fun, leaves, tree, traced, len(weak), walk)
  lifted = []

  def recorded(*xs):
    lifted.extend(xs[len(weak) :])
    return flat(*xs)

  program, captured, out_tree = trace_flat(
    recorded,
    [aval_of(x) for x in inputs],
    tuple(weak) + (False,) * (len(inputs) - len(weak)),
    inputs if concrete else None,
    guards,
    recorder,
  )
  assert not captured
  return program, out_tree, lifted


def _forward(fun, leaves, tree, traced, weak, walk, inputs) -> list | None:
  """`fun` traced alone (`_traced_alone`): [its program, out_tree, fingerprint or None
  until `_digest` computes it]; None
  where that fails other than by reading a value (the transform is then traced with the
  function, and says what is wrong in its own words: an argument it refuses, before the
  function runs), or where it writes into an array it reads by name (which the
  transform refuses: the array is outside the program)."""
  try:
    program, out_tree, lifted = _traced_alone(fun, leaves, tree, traced, weak, walk, inputs)
  except ConcretizationError:
    raise
  except Exception:  # noqa: BLE001 - see above
    return None
  if any(t.version for t in lifted):
    return None
  return [program, out_tree, None]


def _digest(forward: list) -> str:
  """The fingerprint of `_forward`'s program, computed at its first use (a long function
  run once on values never needs it)."""
  if forward[2] is None:
    forward[2] = _fingerprint(forward[0])
  return forward[2]


def _paths(make, inputs):
  """The kept paths of a function whose Python reads values (`primc.breaks.Paths`, as
  `jit`'s graph breaks keep them): each a kept entry, its guards checked at every call."""

  def path(xs):
    guards = []
    entry, out_tree = make(xs, guards)
    if type(entry) is _TapedPath:
      return entry, guards, out_tree
    run = lambda ys, _: _run(entry, ys)
    run.entry = entry
    return run, guards, out_tree

  paths = breaks.Paths(path)
  paths.add(path(inputs))
  return paths


def _count(event: str, reason: str | None = None) -> None:
  _stats[f"kept_{event}"] += 1
  if reason:
    _miss_reasons[reason] += 1


def stats() -> dict:
  """The kept programs' counters: hits, misses (with reasons), calls not kept, functions
  traced at every call (`volatile`), programs compiled."""
  out = dict(_stats)
  if _miss_reasons:
    out["kept_miss_reasons"] = dict(_miss_reasons)
  return out


def reset() -> None:
  """Forgets every kept program and counter."""
  _kept.clear()
  _traces.clear()
  _traced_codes.clear()
  _unkept.clear()
  _static_scalars.clear()
  _short.clear()
  _seen_codes.clear()
  _structures.clear()
  _stats.clear()
  _miss_reasons.clear()
