"""Randomized, valid op inputs (step batches, MTP round states, post-verify states, draft states) built
from numpy alone, for the tests of both backends and for the benchmarks."""
