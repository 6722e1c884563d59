"""tests/gpu/harness.py's guard rows and state copies, checked with numpy standing in for CuPy (the GPU tests
that use them run only on a GPU machine)."""

import types

import numpy as np
import pytest

from tests.gpu.harness import CANARY, GUARD, guarded, state_to_device, unguarded

NP = types.SimpleNamespace(asarray=lambda a: np.array(a), asnumpy=np.asarray)  # CuPy's two calls used here


def test_gpu_harness_guard_round_trip_keeps_rows_and_shape():
    a = np.arange(6, dtype=np.int64).reshape(3, 2)
    d = guarded(NP, a)
    assert d.shape == (3 + GUARD, 2) and (d[3:] == CANARY).all()
    np.testing.assert_array_equal(unguarded(NP, d, "draft_tokens"), a)
    column = np.arange(3, dtype=np.int32).reshape(3, 1)
    assert unguarded(NP, guarded(NP, column.reshape(-1)), "lens", like=column).shape == (3, 1)


def test_gpu_harness_write_past_the_end_is_reported_by_name():
    d = guarded(NP, np.zeros(3, np.int32))
    d[3 + GUARD - 1] = 0
    with pytest.raises(AssertionError, match="seq_lens_this_time written past its end"):
        unguarded(NP, d, "seq_lens_this_time")


def test_gpu_harness_state_to_device_flattens_per_slot_inputs_and_guards_writes():
    state = {"draft_tokens": np.zeros((3, 4), np.int64), "lens": np.ones((3, 1), np.int32), "paused": None,
             "step_idx": np.arange(3, dtype=np.int64)}
    d = state_to_device(NP, state, ("draft_tokens", "lens", "paused", "step_idx"), writes=("draft_tokens", "lens"),
                        matrices=("draft_tokens",))
    assert d["paused"] is None
    assert d["draft_tokens"].shape == (3 + GUARD, 4) and d["lens"].shape == (3 + GUARD,)
    np.testing.assert_array_equal(d["step_idx"], [0, 1, 2])
