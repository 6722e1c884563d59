"""speculate_pre_process tests written once for both backends: tests/ops (the Paddle op) and tests/gpu
(the fused CUDA kernel) import the test_* functions below and define the `run` fixture they take,
run(token_num_cpu, input_ids, lens, drafts, encoder, decoder=None) -> {output name: numpy array}
(SpeculatePreProcessOutput's fields), on numpy/list inputs (drafts None: non-speculative)."""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.step_batch import all_cases, make_step_batch
from reference.speculate_pre_process import ref_speculate_pre_process

# Slot 0 decodes 3 tokens (last accepted 7, drafts 8, 9), slot 1 is idle, slot 2 prefills 4.
INPUT_IDS = [[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]]
DRAFTS = [[7, 8, 9], [-1, -1, -1], [-1, -1, -1]]
LENS = [3, 0, 4]
ENCODER = [0, 0, 4]


@pytest.mark.parametrize("cap", [7, 8], ids=["exact", "one_spare"])
def test_speculate_pre_process_three_slots_literal(run, cap):
    out = run(cap, INPUT_IDS, LENS, DRAFTS, ENCODER)
    spare = [-1] * (cap - 7)  # packed rows past T = 7
    np.testing.assert_array_equal(out["ids_remove_padding"], [7, 8, 9, 30, 31, 32, 33] + spare)
    np.testing.assert_array_equal(out["batch_id_per_token"], [0, 0, 0, 2, 2, 2, 2] + spare)
    np.testing.assert_array_equal(out["cu_seqlens_q"], [0, 3, 3, 7])
    np.testing.assert_array_equal(out["cu_seqlens_k"], [0, 3, 3, 7])
    np.testing.assert_array_equal(out["seq_lens_output"], [3, 0, 1])
    np.testing.assert_array_equal(out["cu_seqlens_q_output"], [0, 3, 3, 4])
    np.testing.assert_array_equal(out["batch_id_per_token_output"], [0, 0, 0, 2, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(out["real_output_token_num"], [4])


def test_speculate_pre_process_non_speculative_literal(run):
    """No drafts: every slot reads input_ids, capacity bsz * 1, one output row per running slot."""
    out = run(4, [[10, 11, 12], [20, 21, 22], [30, 31, 32]], [1, 2, 0], None, [0, 2, 0])
    np.testing.assert_array_equal(out["ids_remove_padding"], [10, 20, 21, -1])
    np.testing.assert_array_equal(out["batch_id_per_token"], [0, 1, 1, -1])
    np.testing.assert_array_equal(out["seq_lens_output"], [1, 1, 0])
    np.testing.assert_array_equal(out["cu_seqlens_q_output"], [0, 1, 2, 2])
    np.testing.assert_array_equal(out["batch_id_per_token_output"], [0, 1, -1])
    np.testing.assert_array_equal(out["real_output_token_num"], [2])


@pytest.mark.parametrize("speculative", [True, False], ids=["spec", "nonspec"])
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_speculate_pre_process_matches_reference(run, bsz, kind, seed, speculative):
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    if not speculative:  # a non-speculative decode slot feeds exactly one token
        batch.seq_lens_this_time = np.where(batch.seq_lens_encoder > 0, batch.seq_lens_this_time,
                                            np.minimum(batch.seq_lens_this_time, 1)).astype(np.int32)
    drafts = batch.draft_tokens if speculative else None
    args = (batch.input_ids, batch.seq_lens_this_time, drafts, batch.seq_lens_encoder, batch.seq_lens_decoder)
    for cap in (batch.token_num, batch.token_num + 13):
        got, want = run(cap, *args), ref_speculate_pre_process(cap, *args)
        for name in got:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_speculate_pre_process_zero_tokens(run):
    """T = 0 returns valid outputs (FastDeploy [C] returned undefined tensors here)."""
    out = run(3, INPUT_IDS, [0, 0, 0], DRAFTS, [0, 0, 0])
    np.testing.assert_array_equal(out["ids_remove_padding"], [-1, -1, -1])
    np.testing.assert_array_equal(out["cu_seqlens_q"], [0, 0, 0, 0])
    np.testing.assert_array_equal(out["cu_seqlens_q_output"], [0, 0, 0, 0])
    np.testing.assert_array_equal(out["batch_id_per_token_output"], [-1] * 9)
    np.testing.assert_array_equal(out["real_output_token_num"], [0])


def test_speculate_pre_process_zero_slots(run):
    out = run(2, np.zeros((0, 4), np.int64), np.zeros(0, np.int32), np.zeros((0, 3), np.int64),
              np.zeros(0, np.int32))
    np.testing.assert_array_equal(out["ids_remove_padding"], [-1, -1])
    np.testing.assert_array_equal(out["cu_seqlens_q"], [0])
    assert out["batch_id_per_token_output"].shape == (0,) and out["seq_lens_output"].shape == (0,)
    np.testing.assert_array_equal(out["real_output_token_num"], [0])
