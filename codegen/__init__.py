"""Code generation: fused regions to numba kernels, the disk cache and the executor.

This stage is filled by the codegen work; it depends only on `primc`'s IR.
"""
