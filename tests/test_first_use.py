"""Each public name of `primc` works as the first thing a fresh process uses (`import
primc` loads its modules lazily, PEP 562): a traced value's operators, the transforms and
the front ends need no other import first."""

import subprocess
import sys

import pytest

FIRST_USES = {
  "make_program": "print(primc.make_program(lambda x: x * 2.0 + 1)(np.ones(2)))",
  "grad": "print(primc.grad(lambda x: (x * 2.0).sum())(np.ones(2)))",
  "jit": "print(primc.jit(lambda x: x[1:] ** 2 - x[0])(np.ones(3)))",
  "vmap": "print(primc.vmap(lambda x: x @ x)(np.ones((2, 3))))",
  "jvp": "print(primc.jvp(lambda x: x * 3.0, (np.ones(2),), (np.ones(2),)))",
  "hessian": "print(primc.hessian(lambda x: (x ** 3).sum())(np.ones(2)))",
  "elementwise_grad": "print(primc.elementwise_grad(lambda x: x / 2)(np.ones(2)))",
  "custom_jvp": (
    "f = primc.custom_jvp(lambda x: x * 2.0)\n"
    "f.defjvp(lambda xs, ts: (xs[0] * 2.0, ts[0] * 2.0))\n"
    "print(primc.grad(lambda x: f(x).sum())(np.ones(2)))"
  ),
  "random_draws": (  # numpy.random first imported while traced: drawn at every call
    "import sys\n"
    "assert 'numpy.random' not in sys.modules\n"
    "f = lambda w: (w * __import__('numpy.random').random.standard_normal(2)).sum()\n"
    "g = [primc.grad(f)(np.ones(2)) for _ in range(3)]\n"
    "assert (g[0] != g[1]).all() and (g[1] != g[2]).all(), g\n"
    "from primc import kept\n"
    "assert 'it draws random numbers while traced' in kept.stats()['kept_miss_reasons']\n"
    "print(g)"
  ),
  "check_grads": (  # its directions need no numpy.random (~12 ms of import)
    "import sys\n"
    "primc.check_grads(lambda x: (x ** 3).sum(), (np.ones(3),), order=2)\n"
    "assert 'numpy.random' not in sys.modules\n"
    "print('checked')"
  ),
  "to_tensor": (
    "t = primc.to_tensor(np.ones(2), stop_gradient=False)\n"
    "(t * 2.0).sum().backward()\n"
    "print(t.grad)"
  ),
}


@pytest.fixture(scope="module")
def runs():
  """Every first use, each in its own fresh process (started together)."""
  procs = {
    name: subprocess.Popen(
      [sys.executable, "-c", f"import numpy as np, primc\n{code}"],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for name, code in FIRST_USES.items()
  }
  return {name: p.communicate(timeout=300) + (p.returncode,) for name, p in procs.items()}


@pytest.mark.parametrize("name", sorted(FIRST_USES))
def test_a_public_name_works_as_the_first_use(runs, name):
  out, err, code = runs[name]
  assert code == 0, err[-2000:]
  assert out.strip()
