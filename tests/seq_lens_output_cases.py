"""speculate_get_seq_lens_output tests written once for both backends: tests/ops (the Paddle op) and
tests/gpu (the CUDA kernel) import the test_* functions below and define the `run` fixture they take,
run(lens, encoder, decoder) -> O as a numpy int32 array [bsz]."""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.step_batch import all_cases, make_step_batch
from reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output

@pytest.mark.parametrize(
    "lens, encoder, want",
    [
        # prefill chunk of 5 -> its last token only; stopped -> none; decode + 2 drafts -> all 3
        ([5, 0, 3], [5, 0, 0], [1, 0, 3]),
        # plain decode; one-token prefill chunk; decode with one draft
        ([1, 1, 2], [0, 1, 0], [1, 1, 2]),
        # the prefill rule is E_b != 0 (docs/spec.md §4.2, FastDeploy), so a negative E_b counts as prefill
        ([3, 2, 4], [-1, 0, 2], [1, 2, 1]),
    ],
)
def test_speculate_get_seq_lens_output_three_slots_literal(run, lens, encoder, want):
    out = run(lens, encoder, [7, 0, 9])
    assert out.shape == (3,) and out.dtype == np.int32
    np.testing.assert_array_equal(out, want)


def test_speculate_get_seq_lens_output_zero_slots(run):
    out = run(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))
    assert out.shape == (0,)


@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_speculate_get_seq_lens_output_matches_reference(run, bsz, kind, seed):
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    args = (batch.seq_lens_this_time, batch.seq_lens_encoder, batch.seq_lens_decoder)
    np.testing.assert_array_equal(run(*args), ref_speculate_get_seq_lens_output(*args))
