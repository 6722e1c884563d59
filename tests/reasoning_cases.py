"""reasoning_phase_token_constraint tests written once for both backends: tests/ops (the Paddle op) and
tests/gpu (the CUDA kernels) import the test_* functions below and define the fixtures they take:

- run(logits, pre_ids, stop_flags, seq_lens_this_time, seq_lens_encoder, step_idx, allowed_tokens,
  reasoning_status, batch_id_per_token_output, cu_seqlens_q_output, enable_thinking,
  think_end_id=THINK_END, line_break_id=LF) -> (logits, reasoning_status) as numpy, on numpy/list inputs;
- reference_grid: (bsz, kind, seed) of the randomized comparison, parametrized by its backend (the GPU
  runs thousands of slots).
"""

from __future__ import annotations

import numpy as np

from reference.cases.step_batch import make_step_batch, pack_output_index
from reference.reasoning_phase_token_constraint import ref_reasoning_phase_token_constraint
from tests.sampling_fixtures import output_index, random_reasoning_inputs

THINK_END, LF = 9, 7  # "</think>" and "\n" in these tests
MASKED = np.float32(-1e10)


def check_against_reference(run, inputs):
    got_logits, got_status = run(**inputs)
    want_logits, want_status = ref_reasoning_phase_token_constraint(**inputs, think_end_id=THINK_END,
                                                                    line_break_id=LF)
    np.testing.assert_array_equal(got_status, want_status)
    np.testing.assert_array_equal(got_logits, want_logits)  # values are copied or set, never computed


def walk(run, generated, thinking=True, allowed=(4, 6), rows=3, vocab=8):
    """One decode slot with `rows` logit rows per step; after the k-th generated token the op
    runs with step_idx = k and pre_ids[0, k] = that token. Returns the status and the logits
    after each call."""
    pre_ids = np.full((1, 16), -1, np.int64)
    status = np.zeros(1, np.int32)
    batch_ids, cu = pack_output_index([rows])
    statuses, all_logits = [], []
    for k, token in enumerate(generated, start=1):
        pre_ids[0, k] = token
        logits = np.arange(rows * vocab, dtype=np.float32).reshape(rows, vocab)
        logits, status = run(logits, pre_ids, [False], [rows], [0], [k], list(allowed), status, batch_ids, cu,
                             [thinking])
        statuses.append(int(status[0]))
        all_logits.append(logits)
    return statuses, all_logits


def test_reasoning_phase_token_constraint_walk_thinking_to_done(run):
    """0 -> 1 when </think> appears, 1 -> 2 once "\\n</think>\\n\\n" is complete (the first row
    of that step is constrained, the other two rows are not), 2 -> 3 on the next step."""
    statuses, logits = walk(run, [5, 6, LF, THINK_END, LF, LF, 4, 5])
    assert statuses == [0, 0, 0, 1, 1, 2, 3, 3]
    free = np.arange(24, dtype=np.float32).reshape(3, 8)
    for k, got in enumerate(logits):
        if statuses[k] == 2:
            np.testing.assert_array_equal(got[0], [MASKED] * 4 + [4.0, MASKED, 6.0, MASKED])
            np.testing.assert_array_equal(got[1:], free[1:])  # only the first row of the slot
        else:
            np.testing.assert_array_equal(got, free)


def test_reasoning_phase_token_constraint_literal_three_slots(run):
    """Slot 0 decodes 3 rows and completes the pattern (1 -> 2: its first row is masked), slot 1
    is stopped in status 2 (no rows, status kept), slot 2 decodes 2 rows in status 2 (-> 3, no
    mask). Capacity 9: rows 5..8 have no slot."""
    batch_ids, cu = pack_output_index([3, 0, 2], capacity=9)
    np.testing.assert_array_equal(batch_ids, [0, 0, 0, 2, 2, -1, -1, -1, -1])
    np.testing.assert_array_equal(cu, [0, 3, 3, 5])
    pre_ids = np.array([[-1, 5, LF, THINK_END, LF, LF],
                        [-1, LF, THINK_END, LF, LF, 3],
                        [-1, LF, THINK_END, LF, LF, 3]], np.int64)
    logits = np.arange(54, dtype=np.float32).reshape(9, 6)
    got, status = run(logits, pre_ids, [False, True, False], [3, 0, 2], [0, 0, 0], [5, 4, 5], [1, 4], [1, 2, 2],
                      batch_ids, cu, [True, True, True])
    np.testing.assert_array_equal(status, [2, 2, 3])
    want = logits.copy()
    want[0] = [MASKED, 1.0, MASKED, MASKED, 4.0, MASKED]
    np.testing.assert_array_equal(got, want)


def test_reasoning_phase_token_constraint_matches_reference(run, reference_grid):
    bsz, kind, seed = reference_grid
    rng = np.random.default_rng(seed)
    batch = make_step_batch(rng, bsz, kind)
    _, batch_ids, cu = output_index(batch)
    check_against_reference(run, random_reasoning_inputs(rng, batch, batch_ids, cu, vocab=111, think_end_id=THINK_END,
                                                         line_break_id=LF))
