"""scipy-style functions with derivatives of every order: `primc.scipy.special`,
`primc.scipy.stats` and `primc.scipy.linalg` (as `jax.scipy` and `autograd.scipy`). Names
scipy has and primc does not raise `primc.numpy.NotSupportedError` naming them."""

from primc.scipy import integrate, linalg, signal, special, stats  # noqa: F401
