"""The run plan of a compiled program: what the executor needs besides the module, as
plain data (strings, numbers, numpy arrays), stored in the cache as JSON and arrays
(`Plan.to_bytes`), never as a pickle. (No numba here: the cache's command line reads plans.)
"""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np

from primc.core import PrimcIndexError, ShapedArray, index_error


# why a linalg primitive fails on a finite matrix (numpy raises LinAlgError there too)
LINALG_FAILURES = {
  "inv": "is singular",
  "solve": "is singular",
  "triangular_solve": "is singular (a zero on the diagonal)",
  "cholesky": "is not positive definite",
  "eigh": "did not converge",
  "qr": "did not converge",
  "svd": "did not converge",
  "pinv": "did not converge",
}


@dataclasses.dataclass(frozen=True)
class Buffer:
  dtype: str
  size: int  # elements


@dataclasses.dataclass
class Plan:
  """What the executor needs besides the compiled module: plain data (strings, numbers,
  numpy arrays), stored in the cache as JSON and arrays (`to_bytes`), never as a pickle."""

  kernels: tuple[str, ...]  # kernel module sources (codegen.kernels)
  words: np.ndarray  # int64: the steps, then every kernel's words
  kernel_slots: tuple[int, ...]  # where `words` holds a kernel's index (the
  # executor writes its address there)
  listing: str  # the steps, readable (see `source`)
  in_avals: tuple[ShapedArray, ...]  # program inputs, in driver argument order
  out_avals: tuple[ShapedArray, ...]  # distinct region-produced program outputs
  program_outputs: tuple  # per program output: ("out", k) | ("in", k) | ("lit", array)
  buffers: tuple[Buffer, ...]  # one arena array per dtype
  const_arrays: tuple[np.ndarray, ...]  # literal arrays read by kernels
  views: tuple[tuple[int, int], ...]  # per arena view: (buffer, element offset)
  # per kernel that checks indices: (primitive, axis, operand) for the error it reports
  sites: tuple = ()

  @property
  def source(self) -> str:
    """Every kernel's source, then the steps that run them (for reading; the kernels are
    separate modules of the cache, shared by every program that has them)."""
    return "\n\n".join(self.kernels) + "\n\n" + self.listing

  def index_error(self, site: int, index: int, size: int) -> Exception:
    """The error of a failed index check or linalg step (the driver returned 2 with `err`
    set: the index and the axis size, or a linalg failure and the matrix's index)."""
    prim, axis, operand = self.sites[site]
    if axis == "linalg":
      why = LINALG_FAILURES.get(prim, "failed") if index == 1 else "has infs or nans"
      return np.linalg.LinAlgError(
        f"{prim} of {operand} in a compiled program: matrix {size} of the batch {why}"
      )
    error = index_error(index, axis, size)
    return PrimcIndexError(f"{error} ({prim} of {operand} in a compiled program)")

  @property
  def out_specs(self) -> tuple[tuple[tuple[int, ...], np.dtype], ...]:
    """(shape, dtype) of each of `out_avals`."""
    return tuple((a.shape, np.dtype(a.dtype)) for a in self.out_avals)

  @property
  def buffer_bytes(self) -> tuple[int, ...]:
    """The size of each arena buffer in bytes."""
    return tuple(b.size * np.dtype(b.dtype).itemsize for b in self.buffers)

  def to_bytes(self) -> bytes:
    """The plan as an npz archive: its arrays, and the rest as JSON (`meta`)."""
    avals = lambda avals: [[list(a.shape), a.dtype] for a in avals]
    lits = [v for kind, v in self.program_outputs if kind == "lit"]
    meta = {
      "kernels": list(self.kernels),
      "kernel_slots": list(self.kernel_slots),
      "listing": self.listing,
      "in_avals": avals(self.in_avals),
      "out_avals": avals(self.out_avals),
      "program_outputs": [[kind, 0 if kind == "lit" else v] for kind, v in self.program_outputs],
      "buffers": [[b.dtype, b.size] for b in self.buffers],
      "views": self.views,
      "sites": self.sites,
    }
    arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8), "words": self.words}
    arrays.update({f"c{k}": c for k, c in enumerate(self.const_arrays)})
    arrays.update({f"l{k}": np.asarray(v) for k, v in enumerate(lits)})
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()

  @classmethod
  def from_bytes(cls, data: bytes) -> "Plan":
    """The plan `to_bytes` made (raises ValueError, KeyError, ... on anything else)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
      arrays = {name: z[name] for name in z.files}
    meta = json.loads(arrays["meta"].tobytes())
    avals = lambda rows: tuple(ShapedArray(tuple(s), d) for s, d in rows)
    lits = iter(arrays[f"l{k}"] for k in range(sum(k == "lit" for k, _ in meta["program_outputs"])))
    outputs = tuple(
      (kind, next(lits) if kind == "lit" else int(v)) for kind, v in meta["program_outputs"]
    )
    n_consts = sum(name.startswith("c") for name in arrays)
    return cls(
      tuple(meta["kernels"]),
      arrays["words"].astype(np.int64),
      tuple(int(k) for k in meta["kernel_slots"]),
      meta["listing"],
      avals(meta["in_avals"]),
      avals(meta["out_avals"]),
      outputs,
      tuple(Buffer(d, int(n)) for d, n in meta["buffers"]),
      tuple(arrays[f"c{k}"] for k in range(n_consts)),
      tuple((int(b), int(o)) for b, o in meta["views"]),
      _tuples(meta["sites"]),
    )


def _tuples(x):
  """JSON's lists back into the tuples they were."""
  return tuple(map(_tuples, x)) if isinstance(x, list) else x
