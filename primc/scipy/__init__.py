"""scipy-style functions with derivatives of every order: `primc.scipy.special` and
`primc.scipy.stats` (as `jax.scipy` and `autograd.scipy`). Names scipy has and primc does
not raise `primc.numpy.NotSupportedError` naming them."""
from primc.scipy import special, stats  # noqa: F401
