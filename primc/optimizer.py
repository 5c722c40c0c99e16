"""Optimizers: SGD and Adam (Paddle's formulas).

Eager mode: `step()` updates the parameters from their `.grad`, `clear_grad()` zeros the
gradients. Static mode: `minimize(loss)` appends the gradient and the update to the
program, so one `Executor.run` computes the loss and updates the parameters (which
persist in the static scope across runs).
"""

from __future__ import annotations

import numpy as np

from primc import numpy as pnp
from primc import static
from primc.core import PrimcError
from primc.nn import Parameter


def sgd_update(param, grad, state, lr):
  return param - lr * grad, state


def adam_update(param, grad, state, lr, beta1, beta2, epsilon):
  m, v, step = state
  step = step + 1.0
  m = beta1 * m + (1.0 - beta1) * grad
  v = beta2 * v + (1.0 - beta2) * grad * grad
  m_hat = m / (1.0 - beta1**step)
  v_hat = v / (1.0 - beta2**step)
  return param - lr * m_hat / (pnp.sqrt(v_hat) + epsilon), (m, v, step)


class Optimizer:
  def __init__(self, learning_rate=0.001, parameters=None):
    self.learning_rate = learning_rate
    self._parameters = list(parameters) if parameters is not None else None
    self._state: dict[int, tuple] = {}

  def _initial_state(self, value):
    return ()

  def _update(self, param, grad, state):
    raise NotImplementedError

  def initial_state(self, value):
    """The optimizer's state for a parameter of this value (functional use)."""
    return self._initial_state(np.asarray(value))

  def update(self, param, grad, state):
    """(new parameter, new state): one step on arrays, outside any tape (functional use,
    as `primc.dask.train` steps it)."""
    new, state = self._update(np.asarray(param), np.asarray(grad), state)
    return np.asarray(new, np.asarray(param).dtype), state

  def _check(self, params):
    for p in params:
      if not (isinstance(p, Parameter) or getattr(p, "kind", None) == "param"):
        raise PrimcError(
          f"optimizer given a {type(p).__name__} that is not a parameter "
          "(create it with Layer.create_parameter or primc.nn.Parameter)"
        )

  def step(self):
    """Eager: update every parameter that has a gradient."""
    if self._parameters is None:
      raise PrimcError("an eager optimizer needs parameters=[...]")
    self._check(self._parameters)
    for p in self._parameters:
      if p.grad is None:
        continue
      state = self._state.get(id(p)) or self._initial_state(p.numpy())
      new, state = self._eager_update(p.numpy(), p.grad.numpy(), state)
      p.value = np.asarray(new, p.numpy().dtype)
      self._state[id(p)] = state

  def _eager_update(self, param, grad, state):
    """`_update` on arrays (an optimizer may update its own state in place there)."""
    return self._update(param, grad, state)

  def clear_grad(self, set_to_zero: bool = True):
    for p in self._parameters or []:
      if p.grad is not None:
        p.grad = None if not set_to_zero else type(p.grad)(np.zeros_like(p.grad.numpy()))

  def minimize(self, loss, parameters=None):
    """Static: append the gradient of `loss` and the parameter updates to the program."""
    params = parameters or self._parameters or static.default_main_program().parameters()
    self._check(params)
    static.default_main_program().add_optimizer(self, loss, list(params))


class SGD(Optimizer):
  def _update(self, param, grad, state):
    return sgd_update(param, grad, state, self.learning_rate)


class Adam(Optimizer):
  def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None):
    super().__init__(learning_rate, parameters)
    self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

  def _initial_state(self, value):
    return (np.zeros_like(value), np.zeros_like(value), np.zeros((), value.dtype))

  def _update(self, param, grad, state):
    return adam_update(param, grad, state, self.learning_rate, self.beta1, self.beta2, self.epsilon)

  def _eager_update(self, param, grad, state):
    """adam_update's arithmetic, in its order (the same roundings), with the moments
    updated in place and two scratch arrays: a 100-million-parameter layer's step made
    ~12 arrays of 400 MB, each paid in page faults, where this makes one (the result)."""
    m, v, step = state
    b1, b2 = self.beta1, self.beta2
    step = step + 1.0
    tmp = np.multiply(grad, 1.0 - b1)
    m *= b1
    m += tmp
    np.multiply(grad, 1.0 - b2, out=tmp)
    tmp *= grad
    v *= b2
    v += tmp
    np.divide(v, 1.0 - b2**step, out=tmp)
    np.sqrt(tmp, out=tmp)
    tmp += self.epsilon
    scaled = np.divide(m, 1.0 - b1**step)
    scaled *= self.learning_rate
    scaled /= tmp
    return np.subtract(param, scaled, out=scaled), (m, v, step)
