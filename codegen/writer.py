"""Generated source is built as lines at an indentation depth, never patched as text."""

from __future__ import annotations

import contextlib

from primc.codegen import kir


class Writer:
  """An indenting code buffer: `w("line", ...)` adds lines at the current depth,
  `with w.block("for i in range(n):")` indents what is written inside."""

  def __init__(self):
    self.lines: list[str] = []
    self.depth = 0

  def __call__(self, *lines) -> "Writer":
    """Adds lines, and statements of the kernel IR (`codegen.kir`) as their lines."""
    for item in lines:
      rendered = [item] if isinstance(item, str) else kir.statements((item,))
      self.lines += ["  " * self.depth + line if line else "" for line in rendered]
    return self

  @contextlib.contextmanager
  def block(self, head: str | None = None):
    if head is not None:
      self(head)
    self.depth += 1
    try:
      yield self
    finally:
      self.depth -= 1

  def nest(self, heads: list[str], body: list[str]) -> None:
    """Loops `heads` (outermost first), each inside the one before, around `body`."""
    with contextlib.ExitStack() as stack:
      for head in heads:
        stack.enter_context(self.block(head))
      self(*body)

  def text(self) -> str:
    return "\n".join(self.lines) + "\n"
