"""Traced numpy calls replayed by signature (`primc.numpy._recorded`): every pure op, on
every kind of argument, stages what it stages when run as it is, raises what it raises,
and names the user's line."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import primc.numpy as pnp
from primc import core
from primc.passes import cse
from primc.numpy import _recorded
from primc.trace import Tracer, eval_program, trace_flat

DTYPES = ["float64", "float32", "int64", "int32", "bool"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "less"]
UNARY = ["exp", "log", "tanh", "sqrt", "negative", "abs", "square"]
REDUCTIONS = ["sum", "mean", "max", "min", "prod", "logsumexp"]
# primc.scipy's functions (recorded where every array argument is traced): x, then the
# distribution's loc and scale, or the special function's other operand
SCIPY = {
  "stats.norm.logpdf": 3,
  "stats.norm.cdf": 3,
  "stats.norm.logcdf": 3,
  "stats.t.logpdf": 4,
  "stats.gamma.logpdf": 4,
  "special.expit": 1,
  "special.logit": 1,
  "special.gammaln": 1,
  "special.digamma": 1,
  "special.log_ndtr": 1,
  "special.xlogy": 2,
  "special.betaln": 2,
  "special.logsumexp": 1,
  "special.softmax": 1,
}


def _function(op: str):
  """The function `op` names: primc.numpy's, or primc.scipy's ("stats.norm.logpdf")."""
  if "." not in op:
    return getattr(pnp, op)
  import primc.scipy

  fn = primc.scipy
  for part in op.split("."):
    fn = getattr(fn, part)
  return fn


@pytest.fixture
def unrecorded(monkeypatch):
  """A switch: `unrecorded(fn)` runs `fn` with every op run as it is."""

  def run(fn):
    with monkeypatch.context() as m:
      m.setattr(_recorded, "call", lambda *a: _recorded.NOT_RECORDED)
      return fn()

  return run


def _shape(draw, ndim):
  return tuple(draw(st.lists(st.sampled_from([1, 2, 3]), min_size=ndim, max_size=ndim)))


@st.composite
def calls(draw):
  """(op, operands, keywords): operands are ("in", shape, dtype, weak) traced inputs,
  ("array", value), ("same", k) (operand k again), ("alias", k) (another object of
  operand k's value) or a Python or numpy number."""
  family = draw(st.sampled_from(["binary", "unary", "reduction", "product", "index", "scipy"]))
  ndim = draw(st.integers(0, 3))
  shape = _shape(draw, ndim)
  dtype = draw(st.sampled_from(DTYPES))

  def operand(k, shape):
    kinds = ["in", "in", "weak", "array", "number", "same", "alias"]
    kind = draw(st.sampled_from(kinds[: 7 if k else 5]))
    if kind in ("same", "alias"):  # operand 0 again: the same object, or another one of it
      return (kind, 0)
    if kind == "weak":
      return ("in", (), draw(st.sampled_from(["float64", "int64", "bool"])), True)
    if kind == "number":
      return draw(st.sampled_from([2, 0.5, -1.5, True, 3, np.float32(2.0), np.int64(2)]))
    d = draw(st.sampled_from(DTYPES))
    if draw(st.booleans()):  # another operand's shape, broadcast against it
      shape = tuple(1 if draw(st.booleans()) else n for n in shape)[draw(st.integers(0, ndim)) :]
    if kind == "array":
      return ("array", np.random.default_rng(k).uniform(0.5, 2, shape).astype(d))
    return ("in", shape, d, False)

  if family == "binary":
    return draw(st.sampled_from(BINARY)), [operand(0, shape), operand(1, shape)], {}
  if family == "unary":
    return draw(st.sampled_from(UNARY)), [("in", shape, dtype, False)], {}
  if family == "scipy":
    op = draw(st.sampled_from(sorted(SCIPY)))
    return op, [("in", shape, dtype, False)] + [operand(k, shape) for k in range(1, SCIPY[op])], {}
  if family == "reduction":
    axis = draw(st.sampled_from([None, 0, -1, (0,), 1]))
    keywords = {"axis": axis} if axis is not None else {}
    if draw(st.booleans()):
      keywords["keepdims"] = True
    return draw(st.sampled_from(REDUCTIONS)), [("in", shape, dtype, False)], keywords
  if family == "index":
    shape = shape or (3,)
    return "getitem", [("in", shape, dtype, False), draw(indices(shape))], {}
  n = draw(st.sampled_from([1, 2, 3]))
  left = ("in", _shape(draw, draw(st.integers(1, 2)))[:-1] + (n,), dtype, False)
  right = ("in", (n,) + _shape(draw, draw(st.integers(0, 1))), dtype, False)
  return draw(st.sampled_from(["matmul", "dot"])), [left, right], {}


@st.composite
def indices(draw, shape):
  """numpy indices of an array of this shape: integers (some out of bounds), slices,
  None, Ellipsis, integer lists and arrays (constant or traced)."""

  def entry(n):
    kind = draw(st.sampled_from(["int", "slice", "none", "list", "array", "traced"]))
    if kind == "int":
      return draw(st.integers(-n - 1, n))
    if kind == "slice":
      return slice(
        draw(st.sampled_from([None, 0, 1, -1])),
        draw(st.sampled_from([None, 2, -1])),
        draw(st.sampled_from([None, 1, 2, -1])),
      )
    if kind == "none":
      return None
    picks = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
    if kind == "list":
      return picks
    if kind == "array":
      return ("array", np.array(picks))
    return ("in", (len(picks),), "int64", False)

  entries = [entry(n) for n in shape[: draw(st.integers(1, len(shape)))]]
  if draw(st.booleans()):
    entries.insert(draw(st.integers(0, len(entries))), Ellipsis)
  return tuple(entries) if len(entries) > 1 or draw(st.booleans()) else entries[0]


def _traced(op, operands, keywords, concrete=False):
  """The call traced twice in one program (its second call replayed, where recorded):
  (program, input values, the results' weakness)."""
  inputs = []

  def spec(o):  # a traced input's place (numbered), or an operand as it is
    if type(o) is tuple and o and o[0] == "in":
      inputs.append(o)
      return ("input", len(inputs) - 1)
    if type(o) is tuple and o and o[0] in ("array", "same", "alias"):
      return o
    if type(o) is tuple:  # an index
      return ("index", tuple(spec(e) for e in o))
    return ("value", o)

  specs = [spec(o) for o in operands]
  weak = []

  def fn(*xs):
    args = []

    def build(s):
      if s[0] == "input":
        return xs[s[1]]
      if s[0] == "same":
        return args[s[1]]
      if s[0] == "alias":  # (`+x` of a traced x: a new object of its value)
        return +args[s[1]] if isinstance(args[s[1]], Tracer) else args[s[1]]
      if s[0] == "index":
        return tuple(build(e) for e in s[1])
      return s[1]

    for s in specs:
      args.append(build(s))
    call = (
      (lambda: args[0][args[1]]) if op == "getitem" else lambda: _function(op)(*args, **keywords)
    )
    outs = [call() for _ in range(2)]
    for o in outs:
      value = getattr(o, "concrete", None)
      weak.append((getattr(o, "weak", None), None if value is None else repr(value)))
    return outs

  avals = [core.ShapedArray(o[1], o[2]) for o in inputs]
  rng = np.random.default_rng(1)
  values = [rng.uniform(0.5, 2, a.shape).astype(a.dtype) for a in avals]
  program, _, _ = trace_flat(fn, avals, [o[3] for o in inputs], values if concrete else None)
  return program, values, weak


def _outcome(op, operands, keywords, concrete=False):
  try:
    program, values, weak = _traced(op, operands, keywords, concrete)
  except Exception as e:  # noqa: BLE001 - the two paths must raise alike
    return ("raised", type(e), str(e))
  try:
    with np.errstate(all="ignore"):
      results = eval_program(program, *values)
  except Exception as e:  # noqa: BLE001 - an index out of bounds: alike too
    return ("raised", type(e), str(e))
  return program, [np.asarray(r) for r in results], weak


def _neighbours(call):
  """The call, then calls whose signatures differ from it in one thing only: an
  operand's weakness, an operand that is another one again, a number's value, an
  array's dtype. Run one after another, each replays what the one before recorded
  wherever a signature misses what the op depends on."""
  op, operands, keywords = call
  out = [call]
  for k, o in enumerate(operands):
    other = None
    if type(o) is tuple and o[0] == "in" and o[1] == ():
      other = ("in", (), {"float32": "float64", "int32": "int64"}.get(o[2], o[2]), not o[3])
    elif type(o) is tuple and o[0] in ("same", "alias"):
      other = operands[o[1]]
    elif type(o) is tuple and o[0] == "array":
      other = ("array", o[1].astype("float32" if o[1].dtype != np.float32 else "int64"))
    elif isinstance(o, (int, float, np.generic)):
      other = type(o)(not o) if type(o) is bool else type(o)(o + 1)
    if other is not None:
      out.append((op, operands[:k] + [other] + operands[k + 1 :], keywords))
  return out


@settings(
  max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(calls(), st.booleans())
@example(("add", [("in", (2,), "float64", False), 0.5], {}), False)  # a number's value
@example(("getitem", [("in", (3, 2), "float64", False), (slice(0, 2, None), 1)], {}), False)
@example(("getitem", [("in", (3, 2), "float64", False), [0, 2]], {}), False)  # an index list's
@example(("multiply", [("in", (2,), "float32", False), ("same", 0)], {}), False)
@example(("subtract", [("in", (2,), "float64", False), ("alias", 0)], {}), False)
@example(("add", [("in", (2,), "float64", False), 0.5], {}), True)  # values beside
@example(("getitem", [("in", (3, 2), "float64", False), (slice(0, 2, None), 1)], {}), True)
def test_replayed_calls_compute_what_calls_run_as_they_are(unrecorded, call, concrete):
  """In a trace of abstract values and of concrete ones (each result's value computed
  beside: the replayed results' too, compared as the results' weakness is)."""
  _recorded.clear()
  for each in _neighbours(call):
    got = _outcome(*each, concrete)
    want = unrecorded(lambda: _outcome(*each, concrete))
    if want[0] == "raised":
      assert got == want
      continue
    assert got[0] != "raised", got
    assert len(cse(got[0]).eqns) <= len(cse(want[0]).eqns)  # (constants: shared or not)
    assert got[0].out_avals == want[0].out_avals and got[2] == want[2], each
    for g, w in zip(got[1], want[1], strict=True):
      np.testing.assert_array_equal(g, w)


def test_a_signature_is_recorded_once_and_replayed():
  _recorded.clear()
  m, v = core.ShapedArray((4, 4), "float64"), core.ShapedArray((4,), "float64")
  program, _, _ = trace_flat(lambda m, v: [m - v for _ in range(5)], [m, v])
  assert len(_recorded._records) == 1
  assert [e.prim.name for e in program.eqns] == ["broadcast_in_dim", "sub"] * 5


@pytest.mark.parametrize(
  "view",
  [lambda v: v[:, None], lambda v: v[None, :], lambda v: v.reshape(2, 1).reshape(1, 2)],
  ids=["new-axis", "new-leading-axis", "reshaped-twice"],
)
def test_a_reshape_back_is_its_operand_when_replayed(unrecorded, view):
  """`a[:, None] + m` squeezes the new axis again: that reshape is `a` itself, replayed
  or not; a reshape to another shape than its operand's is staged."""

  def run():
    _recorded.clear()
    avals = [core.ShapedArray((2, 2), "float64"), core.ShapedArray((2,), "float64")]
    program, _, _ = trace_flat(lambda m, v: [view(v) + m for _ in range(3)], avals)
    return program, eval_program(program, np.arange(4.0).reshape(2, 2), np.array([1.0, 5.0]))

  (got, got_values), (want, want_values) = run(), unrecorded(run)
  assert [e.prim.name for e in got.eqns] == [e.prim.name for e in want.eqns]
  for g, w in zip(got_values, want_values, strict=True):
    np.testing.assert_array_equal(g, w)


def test_a_view_written_since_is_read_again(unrecorded):
  def fn(m, v):
    c = v[:, None]  # a view of v
    first = c + m
    v[0] = 10.0  # numpy's view sees the write
    return first, c + m

  def run():
    _recorded.clear()
    program, _, _ = trace_flat(
      fn, [core.ShapedArray((2, 2), "float64"), core.ShapedArray((2,), "float64")]
    )
    return eval_program(program, np.ones((2, 2)), np.array([1.0, 2.0]))

  got, want = run(), unrecorded(run)
  for g, w in zip(got, want, strict=True):
    np.testing.assert_array_equal(g, w)
  np.testing.assert_array_equal(got[1], [[11.0, 11.0], [3.0, 3.0]])


def test_replayed_errors_and_equations_name_the_users_line():
  def fn(m, v):
    out = m - v  # (recorded here)
    return out, m - v  # replayed: its equations name this line

  program, _, _ = trace_flat(
    fn, [core.ShapedArray((3, 3), "float64"), core.ShapedArray((3,), "float64")]
  )
  lines = {e.source.rsplit(":", 1)[1] for e in program.eqns}
  assert len(lines) == 2 and all(e.source.startswith(__file__) for e in program.eqns)
  for _ in range(2):  # an error is never recorded: the second call raises it again
    with pytest.raises(
      core.PrimcError, match=r"subtract on \(f64\[3,3\], f64\[2\]\).*test_recorded.py:\d+"
    ):
      trace_flat(
        lambda m, v: m - v, [core.ShapedArray((3, 3), "float64"), core.ShapedArray((2,), "float64")]
      )


def test_arrays_are_arguments_of_a_record():
  """An array operand is an argument of the record, not its value (numpy's draws: new
  numbers at each call)."""
  _recorded.clear()
  x = core.ShapedArray((3,), "float64")
  program, _, _ = trace_flat(lambda x: [x + np.random.uniform(size=3) for _ in range(2)], [x])
  literals = [a.value for e in program.eqns for a in e.inputs if isinstance(a, core.Lit)]
  assert len(literals) == 2 and not np.array_equal(literals[0], literals[1])


def test_indices_are_their_values_in_a_signature(unrecorded):
  """`x[[0, 1]]` picks rows, `x[(0, 1)]` one element; `x[0:2]` and `x[1:3]` differ by
  their bounds: each its own signature (each called twice: recorded at the second)."""
  picks = [[0, 1], (0, 1), slice(0, 2), slice(1, 3), slice(None, None, -1), Ellipsis]

  def run():
    _recorded.clear()
    fn = lambda x: [x[i] for i in picks for _ in range(2)]
    program, _, _ = trace_flat(fn, [core.ShapedArray((3, 2), "float64")])
    return eval_program(program, np.arange(6.0).reshape(3, 2))

  for g, w in zip(run(), unrecorded(run), strict=True):
    np.testing.assert_array_equal(g, w)


def test_a_call_that_reads_a_value_is_not_recorded():
  """In a trace of values, indexing by a traced number reads it (a guard of the trace):
  two calls with one signature but two such values are two different calls."""
  _recorded.clear()
  x, k = np.arange(6.0).reshape(3, 2), np.asarray(0)
  fn = lambda x, k: [x[k], x[k + 1], x[k + 2]]
  avals = [core.ShapedArray((3, 2), "float64"), core.ShapedArray((), "int64")]
  program, _, _ = trace_flat(fn, avals, [False, True], concrete=[x, k], guards=[])
  got = eval_program(program, x, k)
  for g, w in zip(got, [x[0], x[1], x[2]], strict=True):
    np.testing.assert_array_equal(g, w)


def test_the_oldest_records_give_way(monkeypatch, unrecorded):
  """Past `MAX_RECORDS` signatures the oldest are dropped (and recorded again when
  called again); what replays is still each signature's own."""
  monkeypatch.setattr(_recorded, "MAX_RECORDS", 4)
  _recorded.clear()
  fn = lambda x: [x * float(k) + x for _ in range(2) for k in range(10)]

  def run():
    program, _, _ = trace_flat(fn, [core.ShapedArray((3,), "float64")])
    return eval_program(program, np.arange(3.0))

  for _ in range(2):
    got = run()
    assert len(_recorded._records) <= 4 and len(_recorded._seen) <= 4
  for g, w in zip(got, unrecorded(run), strict=True):
    np.testing.assert_array_equal(g, w)


@settings(max_examples=150, deadline=None)
@given(
  st.lists(
    st.tuples(
      st.sampled_from(BINARY[:5] + UNARY),
      st.sampled_from([2, 2.0, 0.5, 1, 1.0, True, np.float64(2.0)]),
      st.sampled_from(["left", "right", "input"]),
    ),
    min_size=1,
    max_size=8,
  ),
  st.sampled_from([(), (3,), (2, 3)]),
  st.booleans(),
)
def test_a_function_traces_the_same_whether_its_ops_run_or_are_replayed(steps, shape, concrete):
  """Its first trace runs each new signature as it is (and records it); later traces
  replay the records. The programs are the same, equation for equation (a kept
  transform's second call compares them: a difference makes its program again):
  a number's broadcast is staged once per trace in both, whatever it was written as."""
  _recorded.clear()

  def fn(x):
    y = x
    for op, number, side in steps:
      if op in UNARY:
        y = getattr(pnp, op)(y)
        continue
      other = x if side == "input" else number
      y = getattr(pnp, op)(other, y) if side == "left" else getattr(pnp, op)(y, other)
    return y

  aval = core.ShapedArray(shape, "float64")
  values = [np.full(shape, 1.5)] if concrete else None
  with np.errstate(all="ignore"):
    printed = [str(trace_flat(fn, [aval], concrete=values)[0]) for _ in range(3)]
  assert printed[1] == printed[0] and printed[2] == printed[0]
