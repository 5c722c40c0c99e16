"""Layers, parameters and losses (Paddle's `paddle.nn`, MindSpore's `nn.Cell`); functional
forms in `primc.nn.functional`.

  base        Parameter, Layer (Cell), Linear, initializers, losses, `seed`, `rand`
  layers      Conv1D/2D/3D, pooling, BatchNorm1D/2D, LayerNorm, Dropout, ReLU, Flatten,
              Sequential
  functional  conv1d/2d/3d, max_pool*, avg_pool*, adaptive_avg_pool*, batch_norm,
              layer_norm, dropout, cross_entropy, linear, flatten, relu, softmax
"""

from primc.nn import functional
from primc.nn.base import (
  BCEWithLogitsLoss,
  Cell,
  Constant,
  Layer,
  Linear,
  MSELoss,
  Normal,
  Parameter,
  XavierUniform,
  freeze,
  functional_call,
  generator,
  rand,
  randint,
  randn,
  seed,
)
from primc.nn.layers import (
  AdaptiveAvgPool2D,
  AvgPool2D,
  BatchNorm1D,
  BatchNorm2D,
  Conv1D,
  Conv2D,
  Conv3D,
  Dropout,
  Flatten,
  LayerNorm,
  MaxPool2D,
  ReLU,
  Sequential,
)
