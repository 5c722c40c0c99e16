"""The kernel IR (codegen.kir): Python in and out, and the LLVM renderer consuming it."""

import ast

import numpy as np
from hypothesis import given, settings, strategies as st

import primc
import primc.numpy as pnp
from primc.codegen import kir, loader, translate

NAMES = st.sampled_from(["a", "b", "x", "i0", "np", "LOAD"])
OPS = st.sampled_from(sorted(kir._BINARY_PREC))
CMP = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
LEAVES = st.one_of(
  NAMES.map(kir.Name),
  st.integers(0, 2**40).map(kir.Const),
  st.floats(0, 1e300, allow_nan=False, allow_infinity=False).map(kir.Const),
  st.booleans().map(kir.Const),
)


def _trees(children):
  many = st.lists(children, min_size=1, max_size=3).map(tuple)
  return st.one_of(
    st.builds(kir.BinOp, OPS, children, children),
    st.builds(kir.UnaryOp, st.sampled_from(["-", "+", "~", "not"]), children),
    st.builds(
      lambda left, pairs: kir.Compare(left, *map(tuple, zip(*pairs))),
      children,
      st.lists(st.tuples(CMP, children), min_size=1, max_size=3),
    ),
    st.builds(
      kir.BoolOp,
      st.sampled_from(["and", "or"]),
      st.lists(children, min_size=2, max_size=3).map(tuple),
    ),
    st.builds(kir.IfExp, children, children, children),
    st.builds(
      kir.Call,
      st.one_of(NAMES.map(kir.Name), NAMES.map(lambda n: kir.Attribute(kir.Name("np"), n))),
      many,
    ),
    st.builds(  # (one index that is a tuple is Python's `a[i, j]`: never built)
      kir.Subscript,
      NAMES.map(kir.Name),
      st.lists(children.filter(lambda c: type(c) is not kir.Tuple), min_size=1, max_size=3).map(
        tuple
      ),
    ),
    st.builds(kir.Tuple, many),
  )


EXPRESSIONS = st.recursive(LEAVES, _trees, max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
def test_rendered_python_parses_back_to_the_same_nodes(e):
  """Parentheses exactly where Python's precedence needs them: any expression tree,
  rendered and parsed again, is the same tree."""
  text = kir.expr(e)
  assert kir._expr(ast.parse(text, mode="eval").body) == e, text


def _round_trip(fn: ast.FunctionDef) -> None:
  nodes = kir.from_python(fn)
  text = kir.to_python(nodes)
  (again,) = ast.parse(text).body
  assert kir.from_python(again) == nodes, text
  body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
  same = ast.fix_missing_locations(
    ast.FunctionDef(fn.name, fn.args, body, [], None, None, lineno=1)
  )
  assert ast.unparse(again) == ast.unparse(same)  # (Python's own rendering: the same code)


def test_library_functions_round_trip():
  """Every function of the kernels' library (math functions, products, special
  functions) becomes nodes with nothing outside the subset, and renders as the same
  Python; but the intrinsics' numba definitions, which the LLVM renderer emits itself."""
  count, outside = 0, set()
  for module in loader.library(in_memory=True):
    for fn in ast.parse(module.SOURCE).body:
      if isinstance(fn, ast.FunctionDef):
        if _outside(kir.from_python(fn)):
          outside.add(fn.name)
          continue
        _round_trip(fn)
        count += 1
  assert count > 20
  assert outside <= {*translate.INTRINSICS, "_bitcast", "_element_pointer", "_wrapping"}, outside


def _outside(node) -> list:
  """The Outside nodes anywhere under `node`."""
  if isinstance(node, kir.Outside):
    return [node]
  if isinstance(node, tuple):
    return [o for x in node for o in _outside(x)]
  if hasattr(node, "__dataclass_fields__"):
    return [o for f in node.__dataclass_fields__ for o in _outside(getattr(node, f))]
  return []


def _kernel_sources() -> list[str]:
  """The kernels of a few programs: loops with reductions, products, gathers, scatters,
  sorts, cumulative sums."""

  def loss(w, x, idx):
    h = pnp.tanh(x[idx] @ w)
    s = pnp.sort(h, axis=0) * pnp.argsort(h, axis=1)
    return pnp.mean(h**2) + pnp.sum(pnp.sin(h), axis=0).max() + pnp.cumsum(s).sum()

  r = np.random.default_rng(0)
  x = r.standard_normal((33, 5)).astype(np.float32)
  w = r.standard_normal((5, 4)).astype(np.float32)
  idx = np.array([3, 0, 3, 32, 7])
  jitted = primc.jit(primc.grad(loss))
  jitted(w, x, idx)
  ((executable, _),) = jitted._compiled.values()
  return [m.SOURCE for m in executable.modules]


def test_generated_kernels_round_trip_and_render_the_same_llvm():
  """A generated kernel's nodes render as Python that parses to the same nodes, and the
  LLVM renderer gives the same IR from the nodes as from that Python."""
  sources = _kernel_sources()
  assert len(sources) >= 4
  for source in sources:
    nodes = translate.python_kernel(source)
    assert not _outside(nodes)
    text = kir.to_python(nodes)
    (again,) = ast.parse(text).body
    assert kir.from_python(again) == nodes
    names = loader.translation_names(loader.load(source, in_memory=True))
    direct = translate.render_kernel(nodes, names, "k")
    module = source.replace(
      source[source.index("def ") : source.index("\n\nKERNEL")], text.rstrip("\n")
    )
    assert translate.kernel_ir(module, names, "k") == direct


def test_outside_the_subset_is_refused_where_reached():
  """Syntax outside the subset becomes an Outside node: the LLVM renderer refuses it
  where it reaches it (numba compiles such a function), not where it is not reached."""
  source = "def f(x):\n  if x > 0:\n    return x\n  return [x][0]\n"
  nodes = kir.from_python(ast.parse(source).body[0])
  assert [o.what for o in _outside(nodes)] == ["expression List"]
  try:
    translate.function_ir(source, "f", ("float64",), {}, "f")
  except translate.Unsupported as e:
    assert "List" in str(e)
  else:
    raise AssertionError("a list was translated")
  fine = "def g(x):\n  return x\n  return [x][0]\n"  # after a return: never reached
  text, ret = translate.function_ir(fine, "g", ("float64",), {}, "g")
  assert ret == "float64"
