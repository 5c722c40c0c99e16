"""The standard architectures, placed and named as Paddle places them
(`paddle.vision.models`): `vgg11`, `vgg13`, `vgg16`, `vgg19` (with `batch_norm=True` for
their BN variants) and `resnet18`, `resnet34`. Weights start from the layers' own
initializers; `pretrained=True` is refused (primc downloads nothing).
"""

from __future__ import annotations

from primc.core import PrimcError
from primc.nn import functional as F
from primc.nn.base import Layer, Linear
from primc.nn.layers import (
  AdaptiveAvgPool2D,
  BatchNorm2D,
  Conv2D,
  Dropout,
  MaxPool2D,
  ReLU,
  Sequential,
)

# channels of each 3x3 convolution; "M" a 2x2 max pool (the VGG paper's configurations)
_VGG = {
  11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
  13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
  16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
  19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M"]
  + [512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(Layer):
  """features (3x3 convolutions and max pools), a 7x7 adaptive average pool, and a
  classifier of three linear layers with dropout."""

  def __init__(self, features, num_classes=1000, with_pool=True):
    super().__init__()
    self.features = features
    self.with_pool, self.num_classes = with_pool, num_classes
    if with_pool:
      self.avgpool = AdaptiveAvgPool2D((7, 7))
    if num_classes > 0:
      self.classifier = Sequential(
        Linear(512 * 7 * 7, 4096),
        ReLU(),
        Dropout(),
        Linear(4096, 4096),
        ReLU(),
        Dropout(),
        Linear(4096, num_classes),
      )

  def forward(self, x):
    x = self.features(x)
    if self.with_pool:
      x = self.avgpool(x)
    if self.num_classes > 0:
      x = self.classifier(F.flatten(x, 1))
    return x


def _vgg_features(config, batch_norm: bool) -> Sequential:
  layers, channels = [], 3
  for v in config:
    if v == "M":
      layers.append(MaxPool2D(2, 2))
      continue
    layers.append(Conv2D(channels, v, 3, padding=1))
    if batch_norm:
      layers.append(BatchNorm2D(v))
    layers.append(ReLU())
    channels = v
  return Sequential(*layers)


def _vgg(depth: int, pretrained: bool, batch_norm: bool, **kwargs) -> VGG:
  if pretrained:
    raise PrimcError("pretrained weights are not available: primc downloads nothing")
  return VGG(_vgg_features(_VGG[depth], batch_norm), **kwargs)


def vgg11(pretrained=False, batch_norm=False, **kwargs) -> VGG:
  return _vgg(11, pretrained, batch_norm, **kwargs)


def vgg13(pretrained=False, batch_norm=False, **kwargs) -> VGG:
  return _vgg(13, pretrained, batch_norm, **kwargs)


def vgg16(pretrained=False, batch_norm=False, **kwargs) -> VGG:
  return _vgg(16, pretrained, batch_norm, **kwargs)


def vgg19(pretrained=False, batch_norm=False, **kwargs) -> VGG:
  return _vgg(19, pretrained, batch_norm, **kwargs)


class BasicBlock(Layer):
  """Two 3x3 convolutions with batch norm, and the input added back (through a 1x1
  convolution where the shape changes)."""

  expansion = 1

  def __init__(self, inplanes, planes, stride=1, downsample=None):
    super().__init__()
    self.conv1 = Conv2D(inplanes, planes, 3, stride=stride, padding=1, bias_attr=False)
    self.bn1 = BatchNorm2D(planes)
    self.relu = ReLU()
    self.conv2 = Conv2D(planes, planes, 3, padding=1, bias_attr=False)
    self.bn2 = BatchNorm2D(planes)
    self.downsample = downsample

  def forward(self, x):
    out = self.relu(self.bn1(self.conv1(x)))
    out = self.bn2(self.conv2(out))
    identity = x if self.downsample is None else self.downsample(x)
    return self.relu(out + identity)


class ResNet(Layer):
  def __init__(self, depth_layers, num_classes=1000, with_pool=True):
    super().__init__()
    self.inplanes, self.num_classes, self.with_pool = 64, num_classes, with_pool
    self.conv1 = Conv2D(3, 64, 7, stride=2, padding=3, bias_attr=False)
    self.bn1 = BatchNorm2D(64)
    self.relu = ReLU()
    self.maxpool = MaxPool2D(3, 2, 1)
    self.layer1 = self._stage(64, depth_layers[0], 1)
    self.layer2 = self._stage(128, depth_layers[1], 2)
    self.layer3 = self._stage(256, depth_layers[2], 2)
    self.layer4 = self._stage(512, depth_layers[3], 2)
    if with_pool:
      self.avgpool = AdaptiveAvgPool2D((1, 1))
    if num_classes > 0:
      self.fc = Linear(512, num_classes)

  def _stage(self, planes, blocks, stride) -> Sequential:
    downsample = None
    if stride != 1 or self.inplanes != planes:
      downsample = Sequential(
        Conv2D(self.inplanes, planes, 1, stride=stride, bias_attr=False), BatchNorm2D(planes)
      )
    layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
    self.inplanes = planes
    layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
    return Sequential(*layers)

  def forward(self, x):
    x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
    x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
    if self.with_pool:
      x = self.avgpool(x)
    if self.num_classes > 0:
      x = self.fc(F.flatten(x, 1))
    return x


def resnet18(pretrained=False, **kwargs) -> ResNet:
  if pretrained:
    raise PrimcError("pretrained weights are not available: primc downloads nothing")
  return ResNet([2, 2, 2, 2], **kwargs)


def resnet34(pretrained=False, **kwargs) -> ResNet:
  if pretrained:
    raise PrimcError("pretrained weights are not available: primc downloads nothing")
  return ResNet([3, 4, 6, 3], **kwargs)
