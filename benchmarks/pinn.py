"""The PINN of W3 and W8 (2 -> 64 -> 64 -> 64 -> 1, tanh; the residual of a Poisson
equation through the network's Laplacian), written once for any numpy-like module and
its `grad` (primc, JAX): this module imports neither."""


def pinn_loss(np_, grad):
  def u(params, pts):
    h = pts
    for w, b in params[:-1]:
      h = np_.tanh(h @ w + b)
    w, b = params[-1]
    return (h @ w + b)[:, 0]

  def laplacian(params, pts):
    g = grad(lambda p: np_.sum(u(params, p)))  # per-point gradients (points independent)
    uxx = grad(lambda p: np_.sum(g(p)[:, 0]))(pts)[:, 0]
    uyy = grad(lambda p: np_.sum(g(p)[:, 1]))(pts)[:, 1]
    return uxx + uyy

  def loss(params, pts, f):
    r = laplacian(params, pts) - f
    return np_.mean(r * r)

  return loss
