"""primc: higher-order automatic differentiation of numpy-style programs, compiled to CPU code.

The pipeline, each stage a pure function of the one before:

  Python fn --trace--> Program --jvp/linearize/transpose--> Program --passes--> regions
            --codegen--> numba kernels (cached on disk) --executor--> numpy arrays
"""
from primc import numpy
from primc.core import (Eqn, Lit, PrimcError, Primitive, Program, ShapedArray, ShapeError,
                        TypeCheckError, Var, pp_program, typecheck)
from primc.interpreter import interpret
from primc.trace import make_program

__version__ = "0.1.0"
from primc.api import (check_grads, grad, hessian, hvp, jacfwd, jacrev, jvp, linearize,
                       stop_gradient, value_and_grad, vjp, vmap)
from primc.ad import jvp_program, linearize_program, transpose_program, vjp_program
from primc.batching import batch_program
from primc.compile import config, jit, raw_transforms
from primc import eager
from primc.eager import GradManager, Tensor, to_tensor
from primc import autograd, functional, nn, optimizer, static
from primc.nn import seed

import os as _os
if _os.environ.get("PRIMC_LAZY_BACKEND") != "1":
  from primc.compile import load_backend as _load_backend
  _load_backend()


def cache_stats() -> dict:
  """This process's cache counters: plan hits and misses (with reasons), numba compiles and
  cache loads, module files written/loaded, bad entries rebuilt, write failures,
  evictions, first-call load times (seconds)."""
  from codegen import cache
  return cache.stats()
