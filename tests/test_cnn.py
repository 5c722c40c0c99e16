"""Convolutional networks as users write them: primc.nn's layers on the eager tape against
the same network as a function under primc.grad and jit, train/eval semantics of dropout
and batch norm, and the model zoo."""

import numpy as np
import pytest

import primc
import primc.numpy as pnp
from primc import nn
from primc import random as R
from primc.core import PrimcError
from primc.nn import functional as F
from primc.vision import models


def small_cnn():
  return nn.Sequential(
    nn.Conv2D(3, 4, 3, padding=1),
    nn.BatchNorm2D(4),
    nn.ReLU(),
    nn.MaxPool2D(2, 2),
    nn.Conv2D(4, 6, 3, stride=2, padding=1, groups=2),
    nn.ReLU(),
    nn.AdaptiveAvgPool2D((2, 2)),
    nn.Flatten(),
    nn.Linear(24, 5),
  )


def as_function(model):
  """The model's forward pass (training mode) as a function of its parameters' values."""
  conv1, bn, _, _, conv2, *_, lin = [model[i] for i in range(len(model))]

  def f(params, x, labels):
    w1, b1, g, beta, w2, b2, wl, bl = params
    h = F.conv2d(x, w1, b1, padding=1)
    h = F.relu(F.batch_norm(h, None, None, g, beta, training=True))
    h = F.max_pool2d(h, 2, 2)
    h = F.relu(F.conv2d(h, w2, b2, stride=2, padding=1, groups=2))
    h = F.flatten(F.adaptive_avg_pool2d(h, (2, 2)))
    return F.cross_entropy(F.linear(h, wl, bl), labels)

  params = [
    conv1.weight,
    conv1.bias,
    bn.weight,
    bn.bias,
    conv2.weight,
    conv2.bias,
    lin.weight,
    lin.bias,
  ]
  return f, params


def test_eager_layers_gradients_equal_the_functional_programs(rng):
  primc.seed(0)
  model = small_cnn()
  x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
  labels = rng.integers(0, 5, 4)
  loss = F.cross_entropy(model(primc.to_tensor(x)), primc.to_tensor(labels))
  loss.backward()
  f, params = as_function(model)
  values = [p.numpy() for p in params]
  want_loss = f(values, x, labels)
  np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-5)
  grads = primc.grad(f)(values, x, labels)
  jitted = primc.jit(primc.grad(f))(values, x, labels)
  for p, g, j in zip(params, grads, jitted):
    np.testing.assert_allclose(p.grad.numpy(), g, rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(j, g, rtol=2e-4, atol=1e-5)


def test_a_training_step_lowers_the_loss():
  primc.seed(1)
  model = small_cnn()
  x, labels = nn.rand([8, 3, 8, 8]), nn.randint(0, 5, [8])
  opt = primc.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
  losses = []
  for _ in range(5):
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss.numpy()))
  assert losses[-1] < losses[0], losses


def test_batch_norm_running_statistics_and_eval(rng):
  bn = nn.BatchNorm2D(3, momentum=0.8)
  x = rng.standard_normal((5, 3, 4, 4)).astype(np.float32) * 2 + 1
  y = bn(primc.to_tensor(x)).numpy()
  np.testing.assert_allclose(y.mean((0, 2, 3)), 0, atol=1e-5)
  np.testing.assert_allclose(y.var((0, 2, 3)), 1, atol=1e-3)
  mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), ddof=1)
  np.testing.assert_allclose(bn._mean, 0.2 * mean, rtol=1e-5)
  np.testing.assert_allclose(bn._variance, 0.8 + 0.2 * var, rtol=1e-5)
  nn.freeze(bn.eval())
  want = (x - bn._mean[:, None, None]) / np.sqrt(bn._variance[:, None, None] + 1e-5)
  np.testing.assert_allclose(bn(primc.to_tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(primc.jit(lambda x: bn(x))(x), want, rtol=1e-5, atol=1e-6)
  bn.train()
  with pytest.raises(PrimcError, match="eval"):
    primc.jit(lambda x: bn(x))(x)


def test_batch_norm_trains_under_jit_by_a_functional_call(rng):
  """A training step with BatchNorm under `jit(grad)`: `functional_call(...,
  return_buffers=True)` returns the updated running statistics (the layer's own stay);
  loss, gradients and statistics equal the eager step's, which updates the layer."""
  primc.seed(3)
  model = nn.Sequential(
    nn.Conv2D(2, 3, 3, padding=1), nn.BatchNorm2D(3, momentum=0.7), nn.ReLU(), nn.Flatten()
  )
  x = rng.standard_normal((4, 2, 5, 5)).astype(np.float32)
  names = [n for n, _ in model.named_buffers()]
  assert names == ["1._mean", "1._variance"]
  params = {n: p.numpy() for n, p in model.named_parameters()}
  buffers = {n: np.asarray(v) + 0.5 for n, v in model.named_buffers()}  # (not the layer's)

  def loss(params, buffers, x):
    out, new = nn.functional_call(model, params, x, buffers=buffers, return_buffers=True)
    return pnp.sum(out**2), new

  (value, new), grads = primc.jit(primc.value_and_grad(loss, has_aux=True))(params, buffers, x)
  for (_, layer_value), name in zip(model.named_buffers(), names):  # the layer's: unchanged
    np.testing.assert_array_equal(layer_value, buffers[name] - 0.5)
  bn = model.sublayers()[1]
  bn._mean, bn._variance = buffers["1._mean"], buffers["1._variance"]
  out = model(primc.to_tensor(x))  # eager: the same statistics, in place
  (out**2).sum().backward()
  np.testing.assert_allclose(value, float((out**2).sum().numpy()), rtol=1e-5)
  for name, p in model.named_parameters():
    np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=2e-4, atol=1e-5)
  np.testing.assert_allclose(new["1._mean"], bn._mean, rtol=1e-6)
  np.testing.assert_allclose(new["1._variance"], bn._variance, rtol=1e-6)
  assert new["1._mean"].dtype == np.float32
  with pytest.raises(PrimcError, match="no buffers named"):
    nn.functional_call(model, params, x, buffers={"0._mean": 0.0})


def test_dropout_train_and_eval():
  x = np.ones((200, 50))
  np.testing.assert_array_equal(F.dropout(x, 0.3, training=False), x)
  y = np.asarray(F.dropout(x, 0.3, key=R.key(0)))
  kept = y != 0
  assert abs(kept.mean() - 0.7) < 0.02
  np.testing.assert_allclose(y[kept], 1 / 0.7)
  np.testing.assert_array_equal(primc.jit(lambda x, k: F.dropout(x, 0.3, key=k))(x, R.key(0)), y)
  with pytest.raises(PrimcError, match="key"):
    primc.jit(lambda x: F.dropout(x, 0.3))(x)
  primc.seed(7)
  a = F.dropout(primc.to_tensor(x), 0.5).numpy()
  primc.seed(7)
  b = F.dropout(primc.to_tensor(x), 0.5).numpy()
  np.testing.assert_array_equal(a, b)
  layer = nn.Dropout(0.5).eval()
  np.testing.assert_array_equal(layer(primc.to_tensor(x)).numpy(), x)


def test_model_zoo_shapes():
  primc.seed(2)
  vgg = models.vgg11(num_classes=10)
  assert vgg(nn.rand([1, 3, 32, 32])).shape == (1, 10)
  assert len(vgg.features) == 8 + 5 + 8 and len(vgg.parameters()) == 2 * (8 + 3)
  resnet = nn.freeze(models.resnet18(num_classes=7).eval())
  x = np.asarray(nn.rand([2, 3, 32, 32]).numpy())
  out = resnet(primc.to_tensor(x)).numpy()
  assert out.shape == (2, 7)
  np.testing.assert_allclose(primc.jit(lambda x: resnet(x))(x), out, rtol=1e-4, atol=1e-5)
  with pytest.raises(PrimcError, match="pretrained"):
    models.vgg16(pretrained=True)


def test_parameters_enter_traced_functions_as_arguments(rng):
  primc.seed(3)
  model = small_cnn().eval()  # (training batch norm updates running statistics: eager only)
  x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
  labels = rng.integers(0, 5, 2)
  with pytest.raises(PrimcError, match="functional_call"):
    primc.jit(lambda x: model(x))(x)
  names = [n for n, _ in model.named_parameters()]
  assert names[:2] == ["0.weight", "0.bias"] and len(names) == 8
  params = {n: p.numpy() for n, p in model.named_parameters()}
  loss = lambda params, x: F.cross_entropy(nn.functional_call(model, params, x), labels)
  eager = F.cross_entropy(model(primc.to_tensor(x)), primc.to_tensor(labels))
  eager.backward()
  grads = primc.jit(primc.grad(loss))(params, x)
  for n, p in model.named_parameters():
    np.testing.assert_allclose(grads[n], p.grad.numpy(), rtol=2e-4, atol=1e-5)
  assert model[0].weight.numpy() is params["0.weight"]  # the values were put back


def test_static_programs_differentiate_convolutions_and_refuse_unknown_rows(rng):
  from primc import autograd, static

  w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  xs = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
  f = lambda x: pnp.sum(F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2) ** 2)
  static.enable_static()
  try:
    x = static.data("x", shape=(None, 3, 8, 8), dtype="float32")
    y = f(x)
    dx = autograd.grad(y, x)
    with pytest.raises(PrimcError, match="first dimension"):
      (dx_row,) = dx  # a None batch: not one row
    fixed = static.data("fixed", shape=(2, 3), dtype="float32")
    rows = list(fixed)
    value, grad, first = static.Executor().run(
      feed={"x": xs, "fixed": np.arange(6, dtype=np.float32).reshape(2, 3)},
      fetch_list=[y, dx, rows[1]],
    )
  finally:
    static.disable_static()
  np.testing.assert_allclose(value, f(xs), rtol=1e-5)
  np.testing.assert_allclose(grad, primc.grad(f)(xs), rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(first, [3, 4, 5])


def test_eager_adam_updates_in_place_with_the_functional_roundings(rng):
  """`Adam.step`'s in-place arithmetic gives adam_update's result bit for bit."""
  opt = primc.optimizer.Adam(learning_rate=0.01)
  p = rng.standard_normal(1000).astype(np.float32)
  fresh, in_place = opt._initial_state(p), tuple(np.copy(s) for s in opt._initial_state(p))
  for _ in range(3):
    g = rng.standard_normal(1000).astype(np.float32)
    want, fresh = opt._update(p, g, fresh)
    got, in_place = opt._eager_update(p, g, in_place)
    np.testing.assert_array_equal(got, want)
    for a, b in zip(in_place, fresh):
      np.testing.assert_array_equal(a, b)
    p = want
