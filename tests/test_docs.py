"""Every ```python block of the README and of docs/ runs: a page's blocks in order, in one
namespace (as a reader runs them one after another), in a process of its own (a page may
enable static mode or change settings), with the session's kernel cache. A block that
fails names its page and its first line. Blocks fenced otherwise (```sh, ```text, bare
```) are shell commands, program text or printed output, not Python to run."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(page: pathlib.Path) -> list[tuple[int, str]]:
  """(line, source) of each python block of `page`."""
  text = page.read_text()
  return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


RUNNER = """
import sys
page, blocks = sys.argv[1], eval(sys.stdin.read())
namespace = {"__name__": "__docs__"}
for line, source in blocks:
    try:
        exec(compile(source, f"{page}:{line}", "exec"), namespace)
    except BaseException as e:
        print(f"the block at {page}:{line} raised {type(e).__name__}: {e}", file=sys.stderr)
        raise
"""


def test_every_page_has_been_found():
  names = {p.relative_to(ROOT).as_posix() for p in PAGES}
  assert {"README.md", "docs/index.md", "docs/guide/numpy.md"} <= names
  assert sum(len(blocks(p)) for p in PAGES) >= 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_code_blocks_run(page, tmp_path):
  found = blocks(page)
  if not found:
    assert "```python" not in page.read_text()
    return
  env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
  done = subprocess.run(
    [sys.executable, "-c", RUNNER, page.relative_to(ROOT).as_posix()],
    input=repr(found),
    capture_output=True,
    text=True,
    cwd=tmp_path,
    env=env,
    timeout=600,
  )
  assert done.returncode == 0, done.stderr[-4000:]


def test_the_site_builds_without_warnings(tmp_path):
  """`make docs`: MkDocs in strict mode (a broken link, a docstring that renders as a link,
  a page outside the navigation: each fails the build)."""
  done = subprocess.run(
    [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
  )
  assert done.returncode == 0, done.stderr[-4000:]
  assert (tmp_path / "site" / "reference" / "index.html").read_text().count("primc.grad") >= 1
