"""draft_model_postprocess tests written once for both backends (the random cases live in
reference/cases/draft_state.py): tests/ops (the Paddle op) and tests/gpu (the CUDA kernel) import the test_*
functions below and define the fixtures they take:

- run(state) -> the new base_model_seq_lens_this_time [bsz] (numpy), on a numpy state dict;
- reference_grid: (bsz, kind, seed) of the randomized comparison, parametrized by its backend (the
  GPU runs batch sizes past one block).
"""

from __future__ import annotations

import numpy as np

from reference.cases import draft_state as dc
from reference.draft_model_postprocess import ref_draft_model_postprocess


def make_state(drafts, lens, enc, stop, paused=None):
    return dict(base_model_draft_tokens=np.asarray(drafts, np.int64),
                base_model_seq_lens_this_time=np.asarray(lens, np.int32),
                base_model_seq_lens_encoder=np.asarray(enc, np.int32), base_model_stop_flags=np.asarray(stop, bool),
                base_model_is_block_step=None if paused is None else np.asarray(paused, bool))


def ref_lens(state):
    return ref_draft_model_postprocess(state)["base_model_seq_lens_this_time"]


# slot 0 decode with 2 drafts -> 3; slot 1 prefill (E 5) -> untouched 9 (its row is ignored, gap
# and all); slot 2 decode with no draft -> 1; slot 3 stopped -> 0 (its row is ignored).
LITERAL = make_state([[7, 8, 9, -1], [5, -1, 6, 6], [3, -1, -1, -1], [-1, 1, -1, 3]], [9, 9, 9, 9], [0, 5, 0, 0],
                     [False, False, False, True])
LITERAL_EXPECTED = [3, 9, 1, 0]

# [ours] base_model_is_block_step: slot 0 paused without its stop flag (a decode slot with drafts),
# slot 1 paused prefill, slot 2 paused and stopped, slot 3 paused with a gap in its row (not
# checked: its row is not fed), slot 4 running decode.
PAUSED = make_state([[7, 8, -1, -1], [5, -1, -1, -1], [3, 4, -1, -1], [-1, 6, -1, 2], [1, 2, 3, -1]],
                    [9, 9, 9, 9, 9], [0, 5, 0, 0, 0], [False, False, True, False, False],
                    [True, True, True, True, False])
PAUSED_EXPECTED = [0, 0, 0, 0, 3]


def test_draft_model_postprocess_literal(run):
    np.testing.assert_array_equal(run(LITERAL), LITERAL_EXPECTED)
    np.testing.assert_array_equal(ref_lens(LITERAL), LITERAL_EXPECTED)


def test_draft_model_postprocess_paused_slots_get_no_tokens(run):
    """Defect found by the composed MTP round test (tests/spec_decode): verify, speculate_update and
    draft_model_preprocess treat is_block_step alone as "not running", but without this input a slot
    paused without its stop flag left postprocess with L = 1 and was fed to the next forward
    (docs/spec.md §2.2 item 10). Omitted, the FastDeploy behaviour stays: slot 0 counts its drafts."""
    np.testing.assert_array_equal(run(PAUSED), PAUSED_EXPECTED)
    np.testing.assert_array_equal(ref_lens(PAUSED), PAUSED_EXPECTED)
    fastdeploy = dict(PAUSED, base_model_draft_tokens=PAUSED["base_model_draft_tokens"][[0, 1, 2, 4]],
                      **{k: PAUSED[k][[0, 1, 2, 4]] for k in ("base_model_seq_lens_this_time",
                                                              "base_model_seq_lens_encoder", "base_model_stop_flags")},
                      base_model_is_block_step=None)
    np.testing.assert_array_equal(run(fastdeploy), [2, 9, 0, 3])
    np.testing.assert_array_equal(ref_lens(fastdeploy), [2, 9, 0, 3])


def test_draft_model_postprocess_full_row_and_width_one(run):
    np.testing.assert_array_equal(run(make_state([[1, 2, 3, 4]], [0], [0], [False])), [4])
    np.testing.assert_array_equal(run(make_state([[1], [2]], [5, 5], [0, 0], [False, True])), [1, 0])


def test_draft_model_postprocess_matches_reference(run, reference_grid):
    bsz, kind, seed = reference_grid
    state = dc.make_postprocess_case(np.random.default_rng(seed), bsz, kind, extra_rows=seed % 3)
    np.testing.assert_array_equal(run(state), ref_lens(state))
