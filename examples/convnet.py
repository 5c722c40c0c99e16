"""The dynamic-graph seed's convolutional network, as written there with primc's names:
vgg11, a random image and label, cross entropy, `loss.backward()`, an Adam step. Then
the same network's loss and gradients as a compiled function of its parameters
(`nn.functional_call`), checked against the eager tape's."""

import time

import numpy as np

import primc
import primc.nn.functional as F
from primc import nn
from primc.vision.models import vgg11


def seed_program():
  primc.seed(0)
  model = vgg11()
  x = primc.rand([1, 3, 224, 224])
  label = primc.randint(0, 1000)
  t0 = time.perf_counter()
  predicts = model(x)  # forward
  loss = F.cross_entropy(predicts, label)
  t1 = time.perf_counter()
  loss.backward()  # backward: every parameter's .grad
  t2 = time.perf_counter()
  optim = primc.optimizer.Adam(learning_rate=0.001, parameters=model.parameters())
  optim.step()
  optim.clear_grad()
  t3 = time.perf_counter()
  print("== the seed's vgg11 step, eager (image 1x3x224x224)")
  print(f"   loss {float(loss.numpy()):.6f}, {len(model.parameters())} parameters")
  print(f"   forward {t1 - t0:.2f} s, backward {t2 - t1:.2f} s, Adam step {t3 - t2:.2f} s\n")
  return model


def compiled_step():
  primc.seed(1)
  model = nn.Sequential(
    nn.Conv2D(3, 16, 3, padding=1),
    nn.BatchNorm2D(16),
    nn.ReLU(),
    nn.MaxPool2D(2, 2),
    nn.Conv2D(16, 32, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2D(2, 2),
    nn.Flatten(),
    nn.Linear(32 * 8 * 8, 10),
  ).eval()  # batch norm by its running statistics: a pure function of the parameters
  x = np.asarray(nn.rand([64, 3, 32, 32]).numpy())
  labels = np.asarray(nn.randint(0, 10, [64]).numpy())
  params = {name: p.numpy() for name, p in model.named_parameters()}

  def loss(params, x, labels):
    return F.cross_entropy(nn.functional_call(model, params, x), labels)

  step = primc.jit(primc.value_and_grad(loss), tiered=False)  # compiled before its first call
  t0 = time.perf_counter()
  value, grads = step(params, x, labels)
  t1 = time.perf_counter()
  runs = []
  for _ in range(10):
    t = time.perf_counter()
    step(params, x, labels)
    runs.append(time.perf_counter() - t)
  eager = F.cross_entropy(model(primc.to_tensor(x)), primc.to_tensor(labels))
  eager.backward()
  agree = all(
    np.allclose(grads[n], p.grad.numpy(), rtol=1e-3, atol=1e-5) for n, p in model.named_parameters()
  )
  print("== a small CNN's loss and gradients, jit (batch 64x3x32x32)")
  print(f"   loss {float(value):.6f}; gradients equal the eager tape's: {agree}")
  print(f"   first call {t1 - t0:.2f} s, then {1e3 * sorted(runs)[5]:.1f} ms a step\n")


def main():
  seed_program()
  compiled_step()


if __name__ == "__main__":
  main()
