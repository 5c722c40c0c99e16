"""The error a `primc.scipy` module gives for a name it does not have."""

from __future__ import annotations

import importlib

from primc.numpy import NotSupportedError


def missing(module: str, name: str) -> AttributeError:
  """What `primc.scipy.<module>.<name>` raises where the module lacks it: for a name scipy
  has, NotSupportedError naming it; else AttributeError (a dunder name at once, without
  importing scipy: introspection, `hasattr(module, "__path__")`, asks for them, and
  `import scipy.stats` costs ~0.5 s)."""
  if name.startswith("__") or not hasattr(importlib.import_module(f"scipy.{module}"), name):
    return AttributeError(f"module 'primc.scipy.{module}' has no attribute {name!r}")
  return NotSupportedError(
    f"primc.scipy.{module}.{name} (scipy.{module}.{name}) is not supported yet; the "
    f"README's scipy section lists what is"
  )
