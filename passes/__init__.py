"""Optimization passes over primc programs: each a pure `Program -> Program` function.

This stage is filled by the passes work (simplify, CSE, DCE, fusion); it depends only on
`primc`'s IR.
"""
