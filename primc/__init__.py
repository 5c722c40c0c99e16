"""primc: higher-order automatic differentiation of numpy-style programs, compiled to CPU code.

The pipeline, each stage a pure function of the one before:

  Python fn --trace--> Program --jvp/linearize/transpose--> Program --passes--> regions
            --codegen--> numba kernels (cached on disk) --executor--> numpy arrays

`import primc` loads the IR, the transforms and the front ends; numba is imported when
something is first compiled (`primc.compile.backend`).
"""
from primc import numpy
from primc.core import VERSION as __version__
from primc.core import (Eqn, Lit, PrimcError, PrimcIndexError, PrimcTypeError, Primitive,
                        Program, ShapedArray, ShapeError, TypeCheckError, Var, pp_program,
                        typecheck)
from primc.interpreter import interpret
from primc.trace import make_program
from primc.api import (check_grads, grad, hessian, hvp, jacfwd, jacrev, jvp, linearize,
                       stop_gradient, value_and_grad, vjp, vmap)
from primc.api import (checkpoint, deriv, elementwise_grad, grad_and_aux,  # autograd's
                       hessian_tensor_product, hessian_vector_product, jacobian, make_ggnvp,
                       make_hvp, make_jvp, make_vjp, tensor_jacobian_product,
                       vector_jacobian_product)
from primc.ad import jvp_program, linearize_program, transpose_program, vjp_program
from primc.batching import batch_program
from primc.settings import config, raw_transforms
from primc.custom import custom_jvp, custom_vjp
from primc import lax
from primc.compile import cache_stats, jit
from primc import eager
from primc.eager import GradManager, PyLayer, PyLayerContext, Tensor, to_tensor
from primc import autograd, functional, nn, optimizer, static, tree_util
from primc.nn import seed
