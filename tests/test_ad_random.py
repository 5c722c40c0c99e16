"""Property test: random compositions of primitives (with broadcasting) at orders 1-3
pass check_grads in forward and reverse mode."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import primc
import primc.numpy as pnp

UNARY = [
  pnp.sin,
  pnp.cos,
  pnp.tanh,
  pnp.sigmoid,
  lambda x: x * x,
  lambda x: pnp.exp(0.3 * x),
  lambda x: pnp.sqrt(1.0 + x * x),
  lambda x: pnp.log(2.0 + pnp.sin(x)),
  pnp.softplus,
  lambda x: -x,
  lambda x: pnp.abs(x) + x,
]
BINARY = [
  pnp.add,
  pnp.subtract,
  pnp.multiply,
  lambda x, y: x / (1.5 + y * y),
  pnp.maximum,
  lambda x, y: (1.2 + x * x) ** pnp.tanh(y),
]
RESHAPES = [
  lambda x: pnp.sum(x, axis=-1, keepdims=True),
  lambda x: x.T,
  lambda x: pnp.mean(x, axis=0),
  lambda x: pnp.reshape(x, (-1,)),
  lambda x: pnp.max(x, axis=-1, keepdims=True),
  lambda x: x[..., :1],
  lambda x: pnp.concatenate([x, x * 2.0], axis=-1),
  lambda x: pnp.softmax(x),
]
SHAPES = [(3,), (2, 3), (1, 3), (2, 1), ()]


def _broadcastable(a, b):
  try:
    np.broadcast_shapes(a, b)
    return True
  except ValueError:
    return False


@st.composite
def programs(draw):
  shape_a, shape_b = draw(st.sampled_from(SHAPES)), draw(st.sampled_from(SHAPES))
  steps = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100)), min_size=1, max_size=4))

  def f(a, b):
    vals = [a, b]
    for kind, k in steps:
      x = vals[-1]
      if kind == 0:
        vals.append(UNARY[k % len(UNARY)](x))
      elif kind == 1:
        other = vals[k % len(vals)]
        if not _broadcastable(x.shape, other.shape):
          other = x
        vals.append(BINARY[k % len(BINARY)](x, other))
      elif np.ndim(np.zeros(x.shape)) >= 1 or k % len(RESHAPES) < 2:
        vals.append(RESHAPES[k % len(RESHAPES)](x) if x.shape else x)
    return pnp.sum(vals[-1] * vals[-1]) if draw_sum else vals[-1]

  draw_sum = draw(st.booleans())
  seed = draw(st.integers(0, 2**16))
  rng = np.random.default_rng(seed)
  return f, (rng.uniform(-1.5, 1.5, shape_a), rng.uniform(-1.5, 1.5, shape_b))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(1, 3))
def test_random_compositions_pass_check_grads(program, order):
  f, args = program
  if np.isnan(np.asarray(f(*args))).any():
    return
  primc.check_grads(f, args, order=order, modes=("fwd", "rev"), eps=1e-5, atol=1e-4, rtol=1e-4)
