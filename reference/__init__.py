"""Numpy references of the ops (`reference/<op>.py`, `ref_<op>`: per-slot loops written from docs/spec.md,
never from a kernel) and the randomized case builders (`reference/cases/`), shared by tests/ and benchmarks/.

Numpy and the standard library only: no specworker, Paddle, CuPy or pytest (tests/test_floors.py checks it).
"""
