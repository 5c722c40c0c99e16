"""Kept transform programs on disk: a new process's first `grad(f)(x)` loads the program an
earlier process made for the same trace, instead of differentiating and optimizing again.

A kept program (`primc.kept`) is a pure function of what it is made from: the transform
and its parameters, the function's trace alone (its equations, parameters and literal
values), its output structure, the arguments' structure, which leaves are traced and
which weak, the inputs' types, the settings the transforms read, and primc's own code.
Written out as plain data (tuples, strings, numbers, bytes), those are the key (`key`);
a program among the parameters (a loop's body, a custom function's) is written out with
them. A custom rule is Python code the trace names but does not hold: the key holds its
digest (`kept._digest_rule`: its functions' code and what they close over and read), and
the entry holds the rule's function's program in its place (`save`: what a kept program
evaluates), so a loaded one is never differentiated again. Where a part is neither (a
rule reaching an object of the user's class, a user's pytree class), nothing is stored.
Source lines are not in the key (a script copied elsewhere, or edited above the
function, finds its programs): the entry keeps its trace's lines, and a loaded program
names this call's (`resourced`).

An entry is the file `<cache dir>/t_<key>.prog` (the cache directory of compiled code,
`PRIMC_CACHE_DIR`, bounded with it): a header line binding it to its key, the environment
(primc's version and a stamp of its sources, numpy's and Python's versions) and a digest
of the payload; then the payload, the program and its output structure as `marshal` of
plain values (no code is loaded; what decodes to anything else is a corrupt entry).
Nothing is trusted unverified: an entry of another key or environment, or whose payload
does not match its digest, is logged once, removed and made again. A directory writable
by others is refused, as the compile cache refuses it.

`PRIMC_STORE_TRANSFORMS=0` (`primc.config.store_transforms = False`) turns it off.
"""

from __future__ import annotations

import functools
import itertools
import marshal
import os
import sys
from typing import Callable

import numpy as np

from primc import passes
from primc.codegen.paths import default_root, make_private_dir, unsafe, writable
from primc.core import (
  VERSION,
  Eqn,
  Lit,
  NamedFunction,
  Program,
  ShapedArray,
  Var,
  PrimcError,
  primitive_named,
  program_runner_rules,
)
from primc.custom import inline_calls
from primc.settings import config, log
from primc.tree import LEAF, TreeDef

try:  # hashlib's own blake2b, without importing OpenSSL's hashes (~3 ms): keys and digests
  from _blake2 import blake2b  # here, the fingerprints of traces in `primc.kept`
except ImportError:  # pragma: no cover - a Python without it
  from hashlib import blake2b


FORMAT = 1
MAGIC = b"primc-program\n"
_PLAIN = (int, float, bool, str, bytes, type(None))
_stats = {"stored": 0, "loaded": 0, "bad": 0, "unmapped": 0}
_warned: set = set()
_names = itertools.count()


class NotPlain(Exception):
  """A part of a program or key that is not plain data: nothing is stored."""


def plain(x):
  """`x` where it is plain data (numbers, strings, bytes, None, tuples of them), else
  NotPlain."""
  t = type(x)
  if t is tuple:
    for y in x:
      if type(y) not in _PLAIN:
        plain(y)
  elif t not in _PLAIN:
    raise NotPlain(t.__name__)
  return x


# ---------------------------------------------------------------------------------------
# Programs and trees as plain data


def encode_program(program: Program, sources: bool = True, rules: Callable | None = None) -> tuple:
  """`program` as plain data: (input types, equations, outputs, literals); variables are
  numbered in order, literals are negative numbers into the literals; the equations'
  source lines where `sources` (a key leaves them out: `resourced`). A parameter that is
  a program (a loop's body, a custom function's) is written out too, as one element of a
  list (the only lists in the data); a rule (`core.NamedFunction`, Python code) as
  `rules(rule)` (a key's digest of it), or NotPlain where `rules` is None."""
  ids: dict = {}
  lits: dict = {}
  avals: dict = {}

  def atom(a):
    k = ids.get(a)
    if k is not None:
      return k
    k = lits.get(a)
    if k is None:
      value = np.ascontiguousarray(a.value)
      k = lits[a] = (-1 - len(lits), (aval(a), value.tobytes(), a.sized))
    return k[0]

  def aval(v):  # (a variable's or a literal's type as plain data)
    a = v.aval
    t = avals.get(a)
    if t is None:
      t = avals[a] = (a.shape, a.dtype)
    return t

  for v in program.inputs:
    ids[v] = len(ids)
  eqns = []
  for e in program.eqns:
    ins = tuple([atom(a) for a in e.inputs])
    for v in e.outputs:
      ids[v] = len(ids)
    params = e.params
    if params:  # (most equations have none, most others plain ones)
      try:
        plain(params)
      except NotPlain:
        params = [_params(params, sources, rules)]
    outs = tuple([aval(v) for v in e.outputs])
    eqns.append((e.prim.name, ins, params, outs, e.source if sources else None))
  outputs = tuple([atom(a) for a in program.outputs])
  literals = tuple([data for _, data in sorted(lits.values(), reverse=True)])
  return (tuple([aval(v) for v in program.inputs]), tuple(eqns), outputs, literals)


def _params(x, sources: bool, rules: Callable | None):
  t = type(x)
  if t is tuple:
    return tuple([_params(y, sources, rules) for y in x])
  if t is Program:
    return [encode_program(x, sources, rules)]
  if t is NamedFunction and rules is not None:
    return ("rule", rules(x))
  return plain(x)


def _unparams(x, source: Callable):
  if type(x) is list:
    return decode_program(x[0], source)
  if type(x) is tuple:
    return tuple([_unparams(y, source) for y in x])
  return x


def decode_program(data, source: Callable = lambda s: s) -> Program:
  """The program `encode_program` wrote, each equation's source line `source(line)`."""
  in_avals, eqns, outputs, literals = data
  lits = []
  for (shape, dtype), raw, sized in literals:
    value = np.frombuffer(raw, dtype).reshape(shape)  # (read-only, as a literal's is)
    lits.append(Lit(value, ShapedArray(shape, dtype), bool(sized)))
  avals, prims, lines = {}, {}, {}  # (each made once: a program repeats a few)

  def var(a):
    aval = avals.get(a)
    if aval is None:
      aval = avals[a] = ShapedArray(*a)
    return Var(aval)

  variables = [var(a) for a in in_avals]
  inputs = tuple(variables)
  atom = lambda k: variables[k] if k >= 0 else lits[-1 - k]
  out = []
  for name, ins, params, outs, line in eqns:
    made = tuple([var(a) for a in outs])
    ins = tuple([atom(k) for k in ins])
    prim = prims.get(name) or prims.setdefault(name, primitive_named(name))
    named = lines[line] if line in lines else lines.setdefault(line, source(line))
    if type(params) is list:  # (nested programs)
      params = _unparams(params[0], source)
    out.append(Eqn(prim, ins, params, made, named))
    variables.extend(made)
  return Program(inputs, tuple(out), tuple([atom(k) for k in outputs]))


def encode_tree(tree: TreeDef) -> tuple:
  """A tree of Python's containers as plain data (NotPlain for a registered class)."""
  if tree.kind == "node":
    raise NotPlain("a pytree node")
  meta = plain(tree.meta) if tree.kind == "dict" else None
  return (tree.kind, meta, tuple([encode_tree(c) for c in tree.children]))


def decode_tree(data) -> TreeDef:
  kind, meta, children = data
  if kind == "leaf":
    return LEAF
  return TreeDef(kind, meta, tuple([decode_tree(c) for c in children]))


# ---------------------------------------------------------------------------------------
# Keys


@functools.cache
def environment() -> str:
  """primc's version and a stamp of its sources (names, sizes and times of its and its
  passes' files: an edited primc is a new environment), numpy's and Python's versions."""
  h = blake2b(digest_size=8)
  for root in sorted({os.path.dirname(__file__), os.path.dirname(passes.__file__)}):
    for where, dirs, files in os.walk(root):
      dirs[:] = sorted(d for d in dirs if d != "__pycache__")
      for name in sorted(f for f in files if f.endswith(".py")):
        st = os.stat(os.path.join(where, name))
        h.update(f"{where}/{name}:{st.st_size}:{st.st_mtime_ns};".encode())
  python = ".".join(map(str, sys.version_info[:3]))
  return f"primc={VERSION}+{h.hexdigest()} numpy={np.__version__} python={python}"


def key(parts: tuple) -> str:
  """The key of an entry made from `parts` (plain data, as `plain` checks: `encode_program`'s
  and `encode_tree`'s, numbers and strings), in this environment."""
  # (marshal's version 0: a function of the values alone, without the references and
  # interned strings of later versions, which depend on objects' identities)
  data = marshal.dumps((FORMAT, environment(), config.optimize_transforms, parts), 0)
  return blake2b(data, digest_size=16).hexdigest()


# ---------------------------------------------------------------------------------------
# Entries


@functools.cache
def _directory() -> str | None:
  """The cache directory, created 0700 (None where it cannot be, or is refused)."""
  root = default_root()
  try:
    make_private_dir(root)
  except OSError as e:
    _warn_once(("root", root), f"primc: cannot create the cache directory {root} ({e.strerror})")
    return None
  why = unsafe(root)
  if why:
    _warn_once(("root", root), f"primc: refusing cache directory {root}: it {why}")
    return None
  return root


def wanted() -> bool:
  return config.store_transforms and _directory() is not None


def _path(k: str) -> str:
  return os.path.join(_directory(), f"t_{k}.prog")


def _header(k: str, payload: bytes) -> bytes:
  digest = blake2b(payload, digest_size=16).hexdigest()
  return MAGIC + f"{FORMAT} {k} {digest} {len(payload)} {environment()}\n".encode()


def sources_of(program: Program) -> tuple:
  """The source lines of a program's equations, in order, each followed by those of the
  programs among its parameters (a loop's body, a custom function's)."""
  lines = []
  for e in program.eqns:
    lines.append(e.source)
    if e.prim in program_runner_rules:  # (the primitives whose parameters hold programs)
      for _, value in e.params:
        for nested in _programs_in(value):
          lines.extend(sources_of(nested))
  return tuple(lines)


def _programs_in(x) -> list:
  if type(x) is Program:
    return [x]
  if type(x) is tuple:
    return [p for y in x for p in _programs_in(y)]
  return []


def resourced(stored_lines: tuple, lines: tuple, here: str) -> Callable | None:
  """How a stored program's source lines become this call's: a line of the trace it was
  made from (`stored_lines`, the key's trace's equations in order) becomes the line of
  the same equation now (`lines`), any other (a transform's own equations name where it
  was called) `here`; None where one stored line stands for two lines now (the same
  trace spread over other lines): not loaded."""
  if stored_lines == lines:
    known = set(lines)
    return lambda line: line if line in known else here
  mapping: dict = {}
  for old, new in zip(stored_lines, lines, strict=True):
    if mapping.setdefault(old, new) != new:
      return None
  return lambda line: mapping.get(line, here)


def load(k: str, lines: tuple, here: str) -> tuple[Program, TreeDef] | None:
  """The program and output tree stored under key `k` for a call whose trace's equations
  have the source lines `lines`, called at `here` (the lines it names are this call's:
  `resourced`), or None (none, lines that do not map, or a bad entry: logged once and
  removed)."""
  path = _path(k)
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError:
    return None
  try:
    head, payload = data[len(MAGIC) :].split(b"\n", 1)
    if not data.startswith(MAGIC) or data[: len(MAGIC) + len(head) + 1] != _header(k, payload):
      raise ValueError("another key, environment or payload")
    program, tree, stored_lines = marshal.loads(payload)
    source = resourced(stored_lines, lines, here)
    found = None if source is None else (decode_program(program, source), decode_tree(tree))
  except Exception as e:  # noqa: BLE001 - any entry that does not decode is bad
    _stats["bad"] += 1
    _warn_once(("bad", path), f"primc: a bad stored program {path} ({e}): removed, made again")
    _remove(path)
    return None
  _stats["loaded" if found is not None else "unmapped"] += 1
  try:
    os.utime(path)  # (used now: the cache evicts the least recently used first)
  except OSError:  # (a read-only cache)
    pass
  return found


def save(k: str, program: Program, out_tree: TreeDef, lines: tuple) -> bool:
  """Stores the program and its output tree under key `k`, with the source lines of the
  key's trace (`lines`: `resourced` maps them at a load), atomically (a reader sees the
  old entry or the new); False where they are not plain data or cannot be written."""
  directory = _directory()
  if directory is None or not writable(directory):
    return False
  try:  # (a custom rule is Python code: its function's program in its place)
    program = inline_calls(program)
    payload = marshal.dumps((encode_program(program), encode_tree(out_tree), plain(lines)))
  except (NotPlain, ValueError, PrimcError):  # (ValueError: what marshal cannot write;
    return False  # PrimcError: a custom_vjp in forward mode, left to fail when run)
  path = _path(k)
  tmp = os.path.join(directory, f".tmp-{os.getpid()}-{next(_names)}.prog")
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
      f.write(_header(k, payload) + payload)
    os.replace(tmp, path)
  except OSError as e:
    _warn_once(("write", directory), f"primc: cannot store programs in {directory} ({e})")
    _remove(tmp)
    return False
  _stats["stored"] += 1
  return True


def _remove(path: str) -> None:
  try:
    os.unlink(path)
  except OSError:
    pass


def _warn_once(what, message: str) -> None:
  if what not in _warned:
    _warned.add(what)
    log.warning(message)


def stats() -> dict:
  """Entries stored, loaded and found bad by this process."""
  return dict(_stats)


def reset() -> None:
  """Forgets the directory (read again at the next use: tests set PRIMC_CACHE_DIR) and
  the counts."""
  _directory.cache_clear()
  _warned.clear()
  for k in _stats:
    _stats[k] = 0
