"""speculate_update + speculate_set_value_by_flags_and_idx over many engine steps, against the
composed references and against invariants stated from SPEC (history = emitted tokens,
Dec = prompt + step_idx - 1 while running, stopped slots cleared, not_need_stop = any running)."""

import numpy as np
import pytest

from tests.ops.test_speculate_set_value_by_flags_and_idx import run_op as run_set_value
from tests.ops.test_speculate_update import run_op as run_update
from reference.speculate_set_value_by_flags_and_idx import ref_speculate_set_value_by_flags_and_idx
from reference.speculate_update import ref_speculate_update
from reference.cases.post_verify_state import run_rounds, start_batch


@pytest.mark.parametrize("num_slots, num_draft, seed", [(1, 1, 0), (3, 2, 1), (17, 3, 2), (64, 4, 3)])
def test_speculate_state_rounds_history_matches_emitted_tokens(num_slots, num_draft, seed):
    """Each round also checks ops == composed references on the same input. max_model_len 24
    and max_dec_len 40 make long requests run past the history width (writes skipped) and
    stop by length; EOS stops others early."""
    state, meta = start_batch(np.random.default_rng(seed), num_slots, num_draft, max_model_len=24,
                              max_dec_len=40)
    ops_rng, ref_rng = np.random.default_rng(seed + 100), np.random.default_rng(seed + 100)
    ref_state, ref_meta = start_batch(np.random.default_rng(seed), num_slots, num_draft, max_model_len=24,
                                      max_dec_len=40)

    ops_rounds = run_rounds(ops_rng, run_update, run_set_value, state, meta, rounds=30)
    ref_rounds = run_rounds(ref_rng, ref_speculate_update, ref_speculate_set_value_by_flags_and_idx,
                            ref_state, ref_meta, rounds=30)
    stopped_this_step = 0
    for (got, host), (want, _) in zip(ops_rounds, ref_rounds):
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        stopped_this_step += int((host["stop_flags"] & (host["accept_num"] > 0)).sum())
    assert stopped_this_step > 0 or num_slots == 1, "no slot stopped while emitting; the case tests nothing"
