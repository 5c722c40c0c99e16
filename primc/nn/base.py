"""Layers and parameters (Paddle's `nn.Layer`, MindSpore's `nn.Cell`).

A `Parameter` is an eager `Tensor` with `stop_gradient=False`. In static mode
(`primc.static`) `create_parameter` returns the parameter's symbolic variable instead,
and its value lives in the static scope. Initializers follow Paddle's defaults: Xavier
uniform for weights, zeros for biases; one given no seed draws from the generator that
`seed(n)` resets (as `paddle.seed`), so a seeded program starts from the same parameters.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from primc import numpy as pnp
from primc import static
from primc.core import PrimcError
from primc.eager import Tensor


class Parameter(Tensor):
  """A trainable tensor (`stop_gradient=False`). `trainable` and `requires_grad` (MindSpore,
  PyTorch) are the same switch as `not stop_gradient` (Paddle): set any of them to False
  and the parameter is no longer trained (`Layer.trainable_params()` leaves it out)."""

  def __init__(self, value, name: str | None = None, requires_grad: bool = True):
    super().__init__(
      np.array(value.numpy() if isinstance(value, Tensor) else value),
      stop_gradient=not requires_grad,
    )
    self.name = name

  trainable = Tensor.requires_grad


_rng = np.random.default_rng()


def seed(value: int) -> None:
  """Resets the generator of the initializers that were given no seed of their own."""
  global _rng
  _rng = np.random.default_rng(value)


def generator() -> np.random.Generator:
  """The generator `seed` resets: initializers without a seed, eager dropout, `rand`."""
  return _rng


def rand(shape: Sequence[int], dtype: Any = "float32") -> Tensor:
  """Uniform [0, 1) values (Paddle's `paddle.rand`), from the generator `seed` resets."""
  return Tensor(_rng.random(tuple(shape)).astype(dtype))


def randn(shape: Sequence[int], dtype: Any = "float32") -> Tensor:
  """Standard normal values (Paddle's `paddle.randn`)."""
  return Tensor(_rng.standard_normal(tuple(shape)).astype(dtype))


def randint(
  low: int = 0, high: int | None = None, shape: Sequence[int] = (1,), dtype: Any = "int64"
) -> Tensor:
  """Integers in [low, high) (Paddle's `paddle.randint`; [0, low) when high is None)."""
  low, high = (0, low) if high is None else (low, high)
  return Tensor(_rng.integers(low, high, tuple(shape)).astype(dtype))


def _generator(seed):
  return None if seed is None else np.random.default_rng(seed)


class Constant:
  def __init__(self, value=0.0):
    self.value = value

  def __call__(self, shape, dtype):
    return np.full(shape, self.value, dtype)


class Normal:
  def __init__(self, mean=0.0, std=1.0, seed=None):
    self.mean, self.std, self.rng = mean, std, _generator(seed)

  def __call__(self, shape, dtype):
    rng = self.rng or _rng
    return (self.mean + self.std * rng.standard_normal(shape)).astype(dtype)


class XavierUniform:
  def __init__(self, seed=None):
    self.rng = _generator(seed)

  def __call__(self, shape, dtype):
    fan_in = shape[0] if shape else 1
    fan_out = shape[-1] if len(shape) > 1 else fan_in
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return (self.rng or _rng).uniform(-limit, limit, shape).astype(dtype)


class Layer:
  """Holds parameters and sublayers; `__call__` runs `forward` (or `construct`). `train()`
  and `eval()` set `training` here and in every sublayer (dropout and batch norm read it)."""

  def __init__(self):
    object.__setattr__(self, "_parameters", {})
    object.__setattr__(self, "_sublayers", {})
    object.__setattr__(self, "training", True)

  def train(self, mode: bool = True):
    object.__setattr__(self, "training", bool(mode))
    for layer in self._sublayers.values():
      layer.train(mode)
    return self

  def eval(self):
    return self.train(False)

  def sublayers(self) -> list:
    return list(self._sublayers.values())

  def create_parameter(
    self, shape, dtype="float32", is_bias=False, default_initializer=None, attr=None
  ):
    init = default_initializer or (Constant(0.0) if is_bias else XavierUniform())
    value = init(tuple(shape), np.dtype(dtype).name)
    if static.building():
      return static.parameter(value)
    return Parameter(value)

  def add_parameter(self, name: str, parameter):
    self._parameters[name] = parameter
    object.__setattr__(self, name, parameter)
    return parameter

  def __setattr__(self, name, value):
    if isinstance(value, Parameter) or _is_static_param(value):
      self._parameters[name] = value
    elif isinstance(value, Layer):
      self._sublayers[name] = value
    object.__setattr__(self, name, value)

  def parameters(self) -> list:
    out = list(self._parameters.values())
    for layer in self._sublayers.values():
      out += [p for p in layer.parameters() if all(p is not q for q in out)]
    return out

  def named_parameters(self, prefix: str = "") -> list:
    """(dotted name, parameter) pairs, this layer's first, in `parameters()`'s order."""
    out = [(prefix + n, p) for n, p in self._parameters.items()]
    seen = {id(p) for _, p in out}
    for name, layer in self._sublayers.items():
      for n, p in layer.named_parameters(f"{prefix}{name}."):
        if id(p) not in seen:
          seen.add(id(p))
          out.append((n, p))
    return out

  _buffer_names: tuple[str, ...] = ()  # state that is not trained (running statistics)

  def named_buffers(self, prefix: str = "") -> list:
    """(dotted name, value) of the layer's buffers (state updated by `forward`, not
    trained: BatchNorm's `_mean` and `_variance`), this layer's first, then its sublayers'."""
    out = [(prefix + n, getattr(self, n)) for n in self._buffer_names]
    for name, layer in self._sublayers.items():
      out += layer.named_buffers(f"{prefix}{name}.")
    return out

  def _buffer_owners(self, prefix: str = "") -> list:
    out = [(prefix + n, self, n) for n in self._buffer_names]
    for name, layer in self._sublayers.items():
      out += layer._buffer_owners(f"{prefix}{name}.")
    return out

  def trainable_params(self) -> list:
    return [p for p in self.parameters() if getattr(p, "trainable", True)]

  def __call__(self, *args, **kwargs):
    if type(self).forward is not Layer.forward:
      return self.forward(*args, **kwargs)
    return self.construct(*args, **kwargs)

  def forward(self, *args, **kwargs):
    raise NotImplementedError(f"{type(self).__name__} defines neither forward nor construct")

  construct = forward


Cell = Layer  # MindSpore's name


_updates: list = []  # the buffer updates `functional_call(return_buffers=True)` collects


def buffer_update(layer: Layer, name: str, value) -> bool:
  """Hands a layer's new buffer value to the `functional_call` collecting them (then
  True: the layer keeps its own value), else False (the layer updates itself)."""
  if not _updates:
    return False
  _updates[-1][(id(layer), name)] = value
  return True


def functional_call(
  layer: Layer, params, *args, buffers: dict | None = None, return_buffers: bool = False, **kwargs
):
  """`layer(*args, **kwargs)` computed with `params` in place of its parameters' values
  (PyTorch's `torch.func.functional_call`): the form in which `jit`, `grad` and `vmap` take
  a model, its parameters as arguments.

  Args:
    layer: the model.
    params: values in `layer.parameters()`'s order, or a dict by the names
      `layer.named_parameters()` gives (missing names keep their values).
    buffers: values of buffers by the names `layer.named_buffers()` gives, in place of the
      layer's own (BatchNorm's running statistics).
    return_buffers: return `(output, buffers)`, the buffers after the call (a training
      BatchNorm's updated running statistics) by name, the layer's own left as they were:
      the form in which a training step with BatchNorm runs under `jit` (flax's
      `mutable=`).
  """
  owners = layer._buffer_owners()
  unknown = set(buffers or {}) - {n for n, _, _ in owners}
  if unknown:
    raise PrimcError(f"functional_call: no buffers named {sorted(unknown)}")
  saved = [(obj, attr, getattr(obj, attr)) for _, obj, attr in owners]
  collected: dict = {}
  try:
    for name, obj, attr in owners:
      if buffers and name in buffers:
        object.__setattr__(obj, attr, buffers[name])
    if return_buffers:
      _updates.append(collected)
    try:
      out = _with_params(layer, params, args, kwargs)
    finally:
      if return_buffers:
        _updates.pop()
    after = {n: collected.get((id(obj), a), getattr(obj, a)) for n, obj, a in owners}
  finally:
    for obj, attr, value in saved:
      object.__setattr__(obj, attr, value)
  return (out, after) if return_buffers else out


def _with_params(layer: Layer, params, args, kwargs):
  """`layer(*args, **kwargs)` with `params` in place of its parameters' values."""
  named = layer.named_parameters()
  if isinstance(params, dict):
    unknown = set(params) - {n for n, _ in named}
    if unknown:
      raise PrimcError(f"functional_call: no parameters named {sorted(unknown)}")
    pairs = [(p, params[n]) for n, p in named if n in params]
  else:
    params = list(params)
    if len(params) != len(named):
      raise PrimcError(f"functional_call: {len(params)} values for {len(named)} parameters")
    pairs = list(zip([p for _, p in named], params))
  old = [(p, p.value) for p, _ in pairs]
  try:
    for p, v in pairs:
      p.value = v
    return layer(*args, **kwargs)
  finally:
    for p, v in old:
      p.value = v


def freeze(layer: Layer) -> Layer:
  """Marks every parameter as fixed (`stop_gradient=True`): read as a constant in a
  traced function (inference under `jit`), no longer trained."""
  for p in layer.parameters():
    p.stop_gradient = True
  return layer


def _is_static_param(value) -> bool:
  return isinstance(value, static.Variable) and value.kind == "param"


class Linear(Layer):
  def __init__(self, in_features, out_features):
    super().__init__()
    self.weight = self.create_parameter((in_features, out_features))
    self.bias = self.create_parameter((out_features,), is_bias=True)

  def forward(self, x):
    return pnp.matmul(x, self.weight) + self.bias


class BCEWithLogitsLoss:
  """Mean binary cross entropy of sigmoid(logits) against labels."""

  def __init__(self, reduction="mean", weight=None, pos_weight=None):
    self.reduction, self.weight, self.pos_weight = reduction, weight, pos_weight

  def __call__(self, logits, labels):
    return pnp.binary_cross_entropy_with_logits(
      logits, labels, self.weight, self.pos_weight, self.reduction
    )


class MSELoss:
  def __init__(self, reduction="mean"):
    self.reduction = reduction

  def __call__(self, x, y):
    return pnp.mse_loss(x, y, self.reduction)
