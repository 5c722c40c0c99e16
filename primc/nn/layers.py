"""Layers of convolutional networks (Paddle's `paddle.nn` names; PyTorch's spellings of the
same arguments are accepted where they differ only in name).

Parameters start as Paddle's do: convolution kernels from a normal distribution of std
sqrt(2 / fan_in), biases and batch-norm shifts at zero, scales at one. A batch-norm layer's
running statistics are buffers (numpy arrays), updated in training mode where the batch's
values are known (eager tensors, plain arrays); a traced function (jit, grad) cannot update
them, so one asks for `eval()` there.
"""

from __future__ import annotations

import math

import numpy as np

from primc.convolution import per_dim
from primc.core import PrimcError
from primc.eager import Tensor
from primc.nn import functional as F
from primc import numpy as pnp
from primc.nn.base import Layer, Normal, buffer_update


class Sequential(Layer):
  """Runs its layers in order; `model[i]` is the i-th."""

  def __init__(self, *layers):
    super().__init__()
    if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
      layers = tuple(layers[0])
    object.__setattr__(self, "_order", [])
    for i, layer in enumerate(layers):
      setattr(self, str(i), layer)
      self._order.append(layer)

  def __getitem__(self, i):
    return self._order[i]

  def __len__(self):
    return len(self._order)

  def forward(self, x):
    for layer in self._order:
      x = layer(x)
    return x


class _ConvNd(Layer):
  nd = 2

  def __init__(
    self,
    in_channels,
    out_channels,
    kernel_size,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    padding_mode="zeros",
    weight_attr=None,
    bias_attr=None,
    data_format=None,
    bias=True,
  ):
    super().__init__()
    if padding_mode != "zeros":
      raise PrimcError(f"Conv{self.nd}D: padding_mode {padding_mode!r}: only 'zeros'")
    if in_channels % groups or out_channels % groups:
      raise PrimcError(
        f"Conv{self.nd}D: {in_channels} inputs and {out_channels} outputs must both be "
        f"multiples of groups={groups}"
      )
    k = per_dim(kernel_size, self.nd, "kernel_size")
    fan_in = in_channels // groups * math.prod(k)
    init = weight_attr if callable(weight_attr) else Normal(0.0, math.sqrt(2.0 / fan_in))
    self.weight = self.create_parameter(
      (out_channels, in_channels // groups, *k), default_initializer=init
    )
    with_bias = bias and bias_attr is not False
    self.bias = self.create_parameter((out_channels,), is_bias=True) if with_bias else None
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    self.data_format = data_format or ("NCL", "NCHW", "NCDHW")[self.nd - 1]

  def forward(self, x):
    return F._conv(
      x,
      self.weight,
      self.bias,
      self.stride,
      self.padding,
      self.dilation,
      self.groups,
      self.data_format,
      self.nd,
    )


class Conv1D(_ConvNd):
  nd = 1


class Conv2D(_ConvNd):
  nd = 2


class Conv3D(_ConvNd):
  nd = 3


class MaxPool2D(Layer):
  """`F.max_pool2d` as a layer: the same arguments."""

  def __init__(self, kernel_size, stride=None, padding=0, **options):
    super().__init__()
    self.args, self.options = (kernel_size, stride, padding), options

  def forward(self, x):
    return F.max_pool2d(x, *self.args, **self.options)


class AvgPool2D(MaxPool2D):
  """`F.avg_pool2d` as a layer: the same arguments."""

  def forward(self, x):
    return F.avg_pool2d(x, *self.args, **self.options)


class AdaptiveAvgPool2D(Layer):
  def __init__(self, output_size, data_format="NCHW"):
    super().__init__()
    self.output_size, self.data_format = output_size, data_format

  def forward(self, x):
    return F.adaptive_avg_pool2d(x, self.output_size, self.data_format)


class ReLU(Layer):
  def forward(self, x):
    return F.relu(x)


class Flatten(Layer):
  def __init__(self, start_axis=1, stop_axis=-1):
    super().__init__()
    self.start_axis, self.stop_axis = start_axis, stop_axis

  def forward(self, x):
    return F.flatten(x, self.start_axis, self.stop_axis)


class Dropout(Layer):
  """Dropout while training (`train()`), the identity in `eval()` mode."""

  def __init__(self, p=0.5, axis=None, mode="upscale_in_train"):
    super().__init__()
    self.p, self.axis, self.mode = p, axis, mode

  def forward(self, x, key=None):
    return F.dropout(x, self.p, self.axis, self.training, self.mode, key)


class _BatchNorm(Layer):
  _buffer_names = ("_mean", "_variance")

  def __init__(
    self,
    num_features,
    momentum=0.9,
    epsilon=1e-5,
    weight_attr=None,
    bias_attr=None,
    data_format="NCHW",
    use_global_stats=None,
  ):
    super().__init__()
    self.weight = self.create_parameter(
      (num_features,), default_initializer=lambda s, d: np.ones(s, d)
    )
    self.bias = self.create_parameter((num_features,), is_bias=True)
    self._mean = np.zeros(num_features, "float32")
    self._variance = np.ones(num_features, "float32")
    self.momentum, self.epsilon = momentum, epsilon
    self.data_format, self.use_global_stats = data_format, use_global_stats

  def forward(self, x):
    use_batch = self.training if self.use_global_stats is None else not self.use_global_stats
    if use_batch:
      self._update(x)
    return F.batch_norm(
      x,
      self._mean,
      self._variance,
      self.weight,
      self.bias,
      use_batch,
      self.momentum,
      self.epsilon,
      self.data_format,
      not use_batch,
    )

  def _update(self, x):
    value = x.numpy() if isinstance(x, Tensor) else x if isinstance(x, np.ndarray) else None
    mean, var = F.batch_statistics(x if value is None else value, self.data_format)
    m = self.momentum
    new_mean = pnp.astype(m * self._mean + (1 - m) * mean, pnp.result_type(self._mean))
    new_var = pnp.astype(m * self._variance + (1 - m) * var, pnp.result_type(self._variance))
    if buffer_update(self, "_mean", new_mean) & buffer_update(self, "_variance", new_var):
      return  # (a functional call collects them: the layer keeps its own)
    if value is None:
      raise PrimcError(
        f"{type(self).__name__} in training mode updates its running statistics, which a "
        f"traced function (jit, grad) cannot do in place: call it by "
        f"nn.functional_call(model, params, x, buffers=..., return_buffers=True), which "
        f"returns them, or call .eval() on the model there, or run the step eagerly"
      )
    self._mean, self._variance = np.asarray(new_mean), np.asarray(new_var)


class BatchNorm1D(_BatchNorm):
  pass


class BatchNorm2D(_BatchNorm):
  pass


class LayerNorm(Layer):
  def __init__(self, normalized_shape, epsilon=1e-5):
    super().__init__()
    shape = (normalized_shape,) if np.ndim(normalized_shape) == 0 else tuple(normalized_shape)
    self.normalized_shape, self.epsilon = shape, epsilon
    self.weight = self.create_parameter(shape, default_initializer=lambda s, d: np.ones(s, d))
    self.bias = self.create_parameter(shape, is_bias=True)

  def forward(self, x):
    return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.epsilon)
