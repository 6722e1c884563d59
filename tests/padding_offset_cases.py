"""get_padding_offset tests written once for both backends: tests/ops (the Paddle op) and tests/gpu
(the CUDA kernel) import the test_* functions below and define the `run` fixture they take,
run(input_ids, lens, draft_tokens, encoder, token_num_cpu) -> (ids_remove_padding or None,
batch_id_per_token, cu_seqlens_q, cu_seqlens_k) as numpy, on numpy/list inputs (None = omitted)."""

from __future__ import annotations

import numpy as np
import pytest

from reference.cases.step_batch import PADDING_OFFSET_MODES, all_cases, make_step_batch, padding_offset_inputs
from reference.get_padding_offset import ref_get_padding_offset

# Slot 0 prefill (3 prompt tokens), slot 1 stopped, slot 2 decode (last accepted 35 + draft 36).
INPUT_IDS = [[11, 12, 13], [21, 22, 23], [31, 32, 33]]
DRAFTS = [[-1, -1], [-1, -1], [35, 36]]
LENS = [3, 0, 2]
ENCODER = [3, 0, 0]


def test_get_padding_offset_mixed_three_slots_literal(run):
    ids, batch_id, cu_q, cu_k = run(INPUT_IDS, LENS, DRAFTS, ENCODER, 5)
    np.testing.assert_array_equal(ids, [11, 12, 13, 35, 36])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 2, 2])
    np.testing.assert_array_equal(cu_q, [0, 3, 3, 5])
    np.testing.assert_array_equal(cu_k, [0, 3, 3, 5])


def test_get_padding_offset_without_drafts_reads_input_ids_literal(run):
    ids, batch_id, cu_q, _ = run(INPUT_IDS, LENS, None, None, 5)
    np.testing.assert_array_equal(ids, [11, 12, 13, 31, 32])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 2, 2])
    np.testing.assert_array_equal(cu_q, [0, 3, 3, 5])


def test_get_padding_offset_capacity_exceeds_token_num_literal(run):
    ids, batch_id, cu_q, cu_k = run(INPUT_IDS, LENS, DRAFTS, ENCODER, 8)
    np.testing.assert_array_equal(ids, [11, 12, 13, 35, 36, -1, -1, -1])
    np.testing.assert_array_equal(batch_id, [0, 0, 0, 2, 2, -1, -1, -1])
    np.testing.assert_array_equal(cu_q, [0, 3, 3, 5])
    np.testing.assert_array_equal(cu_k, [0, 3, 3, 5])


def test_get_padding_offset_index_only_without_input_ids_literal(run):
    """input_ids=None: no token copy, ids_remove_padding is None; lengths are not bounded by S."""
    ids, batch_id, cu_q, cu_k = run(None, [1, 0, 4], None, None, 6)
    assert ids is None
    np.testing.assert_array_equal(batch_id, [0, 2, 2, 2, 2, -1])
    np.testing.assert_array_equal(cu_q, [0, 1, 1, 5])
    np.testing.assert_array_equal(cu_k, [0, 1, 1, 5])


def test_get_padding_offset_zero_tokens(run):
    ids, batch_id, cu_q, cu_k = run(INPUT_IDS, [0, 0, 0], DRAFTS, [0, 0, 0], 4)
    np.testing.assert_array_equal(ids, [-1, -1, -1, -1])
    np.testing.assert_array_equal(batch_id, [-1, -1, -1, -1])
    np.testing.assert_array_equal(cu_q, [0, 0, 0, 0])
    np.testing.assert_array_equal(cu_k, [0, 0, 0, 0])
    ids, batch_id, cu_q, _ = run(INPUT_IDS, [0, 0, 0], None, None, 0)
    assert ids.shape == (0,) and batch_id.shape == (0,)
    np.testing.assert_array_equal(cu_q, [0, 0, 0, 0])


@pytest.mark.parametrize("rows", [3, 0])
def test_get_padding_offset_zero_slots(run, rows):
    """bsz = 0 with FastDeploy-sized buffers (rows = 3) and with empty ones (rows = 0, which
    Paddle hands to the op as None)."""
    ids, batch_id, cu_q, cu_k = run(np.zeros((rows, 3), np.int64), np.zeros(0, np.int32),
                                    np.zeros((rows, 2), np.int64), np.zeros(0, np.int32), 3)
    np.testing.assert_array_equal(ids, [-1, -1, -1])
    np.testing.assert_array_equal(batch_id, [-1, -1, -1])
    np.testing.assert_array_equal(cu_q, [0])
    np.testing.assert_array_equal(cu_k, [0])


@pytest.mark.parametrize("mode", PADDING_OFFSET_MODES)
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_get_padding_offset_matches_reference(run, bsz, kind, seed, mode):
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    input_ids, drafts, encoder = padding_offset_inputs(batch, mode, extra_rows=2)
    for capacity in (batch.token_num, batch.token_num + 13):
        got = run(input_ids, batch.seq_lens_this_time, drafts, encoder, capacity)
        want = ref_get_padding_offset(input_ids, batch.seq_lens_this_time, drafts, encoder, capacity)
        if mode == "index_only":
            assert got[0] is None and want[0] is None
        else:
            np.testing.assert_array_equal(got[0], want[0])
        for g, w in zip(got[1:], want[1:]):
            np.testing.assert_array_equal(g, w)
