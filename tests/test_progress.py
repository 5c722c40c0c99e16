"""A first call that compiles says so on a terminal, and only there."""

import os
import pty
import subprocess
import sys

import pytest

CODE = """
import numpy as np, primc, primc.numpy as pnp
def loss(w, x):
  return pnp.mean(pnp.tanh(x @ w) ** 2)
step = primc.jit(primc.value_and_grad(loss))
print("result", float(step(np.ones((3, 2), np.float32), np.ones((5, 3), np.float32))[0]))
"""


def _run_on_a_terminal(env) -> str:
  pid, fd = pty.fork()
  if pid == 0:  # the child: its stdout and stderr are the terminal
    os.execve(sys.executable, [sys.executable, "-c", CODE], env)
  out = b""
  while True:
    try:
      chunk = os.read(fd, 4096)
    except OSError:  # the child closed the terminal
      break
    if not chunk:
      break
    out += chunk
  _, status = os.waitpid(pid, 0)
  assert os.waitstatus_to_exitcode(status) == 0, out
  return out.decode(errors="replace")


@pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a pseudo-terminal (POSIX)")
def test_a_compiling_first_call_shows_progress_on_a_terminal_only(tmp_path):
  env = dict(os.environ, PRIMC_CACHE_DIR=str(tmp_path / "a"), PRIMC_PROGRESS_AFTER="0")
  out = _run_on_a_terminal(env)
  assert "result" in out
  assert "primc: compiling value_and_grad(loss): " in out and " kernels, " in out, out
  assert "primc: compiled value_and_grad(loss): " in out, out
  # a pipe (logs, CI, captured output): nothing, whatever the delay
  env["PRIMC_CACHE_DIR"] = str(tmp_path / "b")
  piped = subprocess.run(
    [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300
  )
  assert piped.returncode == 0 and "result" in piped.stdout
  assert "compil" not in piped.stderr, piped.stderr
  # warm: nothing compiles, nothing is shown
  out = _run_on_a_terminal(env)
  assert "result" in out and "compil" not in out, out
  # and PRIMC_PROGRESS=0 turns it off on a terminal
  env.update(PRIMC_CACHE_DIR=str(tmp_path / "c"), PRIMC_PROGRESS="0")
  out = _run_on_a_terminal(env)
  assert "result" in out and "compil" not in out, out
