"""eagle_get_hidden_states tests written once for both backends: tests/ops (the Paddle op) and tests/gpu
(the CUDA kernel) import the test_* functions below and define the fixtures they take:

- run(hidden, state) -> (out [T or capacity, H], output_token_num [1]) as numpy, on numpy hidden rows
  and a state dict (per_slot's fields);
- reference_grid: (bsz, kind, seed, H, dtype) of the randomized comparison, parametrized by its backend
  (dtype a DTYPES key: the GPU runs the half types, bfloat16 as raw uint16 bits).
"""

from __future__ import annotations

import numpy as np

from reference.cases.mtp_round_state import make_round_state, make_target_hidden
from reference.draft_model_preprocess import ref_draft_model_preprocess
from reference.eagle_get_hidden_states import ref_eagle_get_hidden_states

# bfloat16 has no numpy dtype; the kernel only moves bytes, so bf16 rows are random uint16 bits.
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


def per_slot(draft_len, draft_enc, accept_num, target_len, **extra):
    """A state dict with the fields the op reads (unused ones filled plausibly)."""
    bsz = len(draft_len)
    st = {
        "seq_lens_this_time": np.asarray(draft_len, np.int32),
        "seq_lens_encoder": np.asarray(draft_enc, np.int32),
        "seq_lens_decoder": np.full(bsz, 9, np.int32),
        "stop_flags": np.asarray(draft_len) == 0,
        "accept_num": np.asarray(accept_num, np.int32),
        "target_model_seq_lens_this_time": np.asarray(target_len, np.int32),
        "target_model_seq_lens_encoder": np.zeros(bsz, np.int32),
    }
    st.update(extra)
    return st


def rows(n, H=3):
    """Hidden rows whose values name the row: row t = [100 t, 100 t + 1, ...]."""
    return (100 * np.arange(n)[:, None] + np.arange(H)[None, :]).astype(np.float32)


def hidden_of(rng, state, H, dtype, pad_rows=3):
    """Random target hidden rows of a DTYPES key: [sum(target L) + pad_rows, H]."""
    if dtype == "bfloat16":
        T = int(np.asarray(state["target_model_seq_lens_this_time"]).sum()) + pad_rows
        return rng.integers(0, 1 << 16, size=(T, H), dtype=np.uint16)
    return make_target_hidden(rng, state, H, DTYPES[dtype], pad_rows)


def test_eagle_get_hidden_states_three_slots_literal(run):
    """Slot 0 draft prefill of 3 (target rows 0-2), slot 1 decode keeping 2 of its 2 target rows
    (3-4), slot 2 target ran 2 rows (5-6) but the draft slot is stopped."""
    h = rows(7)
    out, count = run(h, per_slot([3, 2, 0], [3, 0, 0], [1, 2, 1], [3, 2, 2]))
    np.testing.assert_array_equal(out, np.concatenate([h[0:5], np.zeros((2, 3), np.float32)]))
    np.testing.assert_array_equal(count, [5])


def test_eagle_get_hidden_states_bsz_one_literal(run):
    h = rows(3, H=111)
    out, count = run(h, per_slot([2], [0], [2], [3]))
    np.testing.assert_array_equal(out, np.concatenate([h[:2], np.zeros((1, 111), np.float32)]))
    np.testing.assert_array_equal(count, [2])


def test_eagle_get_hidden_states_bsz_256_structured(run):
    """Slot b: target L_t = 1 + b % 4; slots b % 3 == 0 are draft prefills of all L_t rows, the
    others decode keeping 1 + b % 2 (<= L_t) rows, and every 7th draft slot is stopped."""
    bsz = 256
    b = np.arange(bsz)
    target_len = 1 + b % 4
    prefill = b % 3 == 0
    stopped = b % 7 == 0
    accept = np.where(prefill, 1, np.minimum(1 + b % 2, target_len))
    kept = np.where(stopped, 0, np.where(prefill, target_len, accept))
    h = rows(int(target_len.sum()) + 5, H=8)
    out, count = run(h, per_slot(kept, np.where(prefill & ~stopped, target_len, 0), accept, target_len))
    want = [h[int(target_len[:s].sum()) + j] for s in range(bsz) for j in range(kept[s])]
    np.testing.assert_array_equal(out[:len(want)], np.stack(want))
    np.testing.assert_array_equal(out[len(want):], 0)
    np.testing.assert_array_equal(count, [kept.sum()])


def test_eagle_get_hidden_states_matches_reference(run, reference_grid):
    """A random round after draft_model_preprocess (the reference), with the target's hidden rows."""
    bsz, kind, seed, H, dtype = reference_grid
    rng = np.random.default_rng(seed)
    st = ref_draft_model_preprocess(make_round_state(rng, bsz, kind), 1)
    h = hidden_of(rng, st, H, dtype)
    out, count = run(h, st)
    want_out, want_count = ref_eagle_get_hidden_states(h, st)
    np.testing.assert_array_equal(count, want_count)
    assert out.dtype == want_out.dtype
    # compare bytes, so NaN bit patterns in the bf16 rows compare too
    np.testing.assert_array_equal(np.ascontiguousarray(out).view(np.uint8), np.ascontiguousarray(want_out).view(np.uint8))
