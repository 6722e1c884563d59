"""Randomized MTP round states shared by the draft-op tests (tests/ops, tests/gpu) and
benchmarks/gpu_draft_model_ops.py. Plain numpy.

A state is the dict ref_draft_model_preprocess takes (keys documented in
reference/draft_model_preprocess.py): the draft's buffers before this round and the target's
state after verifying the step just finished, plus target_model_seq_lens_this_time (the target's L
of that step, which eagle_get_hidden_states reads). Each slot is one of:
  prefill   the target finished its prefill of P tokens and emitted its first token (accept_num 1,
            step_idx_t 1, L_t = P); the draft was inserted with the shifted prompt (E = L = P)
  decode    the target verified L_t tokens and emitted n <= L_t of them
  stopped   the target slot is stopped (some of them ran this step: EOS or the length limit)
  paused    the target slot is preempted (is_block_step), with or without its stop flag
  near_max  a prefill or decode slot with step_idx_t + num_model_steps >= max_dec_len
  idle      an empty slot
"""

from __future__ import annotations

import numpy as np

BATCH_SIZES = (1, 3, 17, 256)
KINDS = ("mixed", "all_prefill", "all_decode", "stopped", "all_stopped", "paused", "near_max_dec_len")
_MIXES = {
    "mixed": {"prefill": 0.2, "decode": 0.5, "stopped": 0.1, "paused": 0.05, "near_max": 0.1, "idle": 0.05},
    "all_prefill": {"prefill": 1.0},
    "all_decode": {"decode": 1.0},
    "stopped": {"prefill": 0.2, "decode": 0.45, "stopped": 0.35},
    "all_stopped": {"stopped": 0.7, "idle": 0.3},
    "paused": {"prefill": 0.15, "decode": 0.5, "paused": 0.35},
    "near_max_dec_len": {"prefill": 0.15, "decode": 0.5, "near_max": 0.35},
}


def all_round_cases():
    """(bsz, kind, seed) for every batch size x kind."""
    return [(bsz, kind, 7000 + 100 * i + j) for i, bsz in enumerate(BATCH_SIZES) for j, kind in enumerate(KINDS)]


def _prefill(rng, st, b, S, num_model_steps):
    P = int(rng.integers(1, S + 1))
    st["input_ids"][b, P - 1:] = -1  # the shifted prompt has P - 1 tokens; the op adds the last
    st["seq_lens_encoder"][b] = st["seq_lens_this_time"][b] = P
    st["seq_lens_decoder"][b] = int(rng.integers(0, 9))  # prefix-cache start, kept by the op
    st["step_idx"][b] = 0
    st["accept_num"][b] = 1
    st["target_model_step_idx"][b] = 1
    st["target_model_seq_lens_decoder"][b] = st["seq_lens_decoder"][b] + P
    st["target_model_seq_lens_this_time"][b] = P
    st["max_dec_len"][b] = 1 + num_model_steps + int(rng.integers(1, 100))


def _decode(rng, st, b, S, D, num_model_steps):
    L_t = int(rng.integers(1, D + 1))
    n = int(rng.integers(1, L_t + 1))
    st["seq_lens_encoder"][b] = 0
    st["accept_num"][b] = n
    st["target_model_seq_lens_this_time"][b] = L_t
    st["target_model_step_idx"][b] = int(rng.integers(n, S + 8))  # some histories run past Sp = S
    st["target_model_seq_lens_decoder"][b] = int(rng.integers(n, 4 * S))
    st["max_dec_len"][b] = st["target_model_step_idx"][b] + num_model_steps + int(rng.integers(1, 50))


def make_round_state(rng: np.random.Generator, bsz: int, kind: str = "mixed", max_model_len: int = 64,
                     num_draft: int = 3, num_model_steps: int = 1, extra_rows: int = 0,
                     with_block_step: bool = True) -> dict:
    """A random but consistent round state; row buffers have bsz + extra_rows rows."""
    S, D, N = max_model_len, num_draft + 1, bsz + extra_rows
    st = {
        "draft_tokens": rng.integers(5000, 6000, size=(N, D), dtype=np.int64),
        "input_ids": rng.integers(0, 1000, size=(N, S), dtype=np.int64),
        "stop_flags": rng.random(bsz) < 0.5,
        "seq_lens_this_time": rng.integers(0, D + 1, size=bsz).astype(np.int32),
        "seq_lens_encoder": np.zeros(bsz, np.int32),
        "seq_lens_decoder": rng.integers(0, 4 * S, size=bsz).astype(np.int32),
        "step_idx": rng.integers(0, S, size=bsz).astype(np.int64),
        "not_need_stop": np.array([rng.random() < 0.5]),
        "pre_ids": rng.integers(-1, 1000, size=(N, S), dtype=np.int64),
        "accept_tokens": rng.integers(1000, 2000, size=(N, D), dtype=np.int64),
        "accept_num": np.zeros(bsz, np.int32),
        "target_model_seq_lens_encoder": np.zeros(bsz, np.int32),  # after verification: prefill done
        "target_model_seq_lens_decoder": np.zeros(bsz, np.int32),
        "target_model_step_idx": np.zeros(bsz, np.int64),
        "target_model_stop_flags": np.zeros(bsz, bool),
        "max_dec_len": np.full(bsz, 1 << 20, np.int64),
        "target_model_draft_tokens": rng.integers(2000, 3000, size=(N, D), dtype=np.int64),
        "target_model_is_block_step": np.zeros(bsz, bool) if with_block_step else None,
        "target_model_seq_lens_this_time": np.zeros(bsz, np.int32),
    }
    mix = _MIXES[kind]
    if not with_block_step and "paused" in mix:  # without the input a paused slot is a stopped one
        mix = dict(mix)
        mix["stopped"] = mix.get("stopped", 0.0) + mix.pop("paused")
    slot_kinds = rng.choice(list(mix), size=bsz, p=list(mix.values()))
    for b, slot in enumerate(slot_kinds):
        if slot == "prefill" or (slot in ("stopped", "near_max") and rng.random() < 0.3):
            _prefill(rng, st, b, S, num_model_steps)
        elif slot in ("decode", "stopped", "near_max"):
            _decode(rng, st, b, S, D, num_model_steps)
        if slot == "stopped":  # it may have run this step (EOS / length), or not at all
            st["target_model_stop_flags"][b] = True
            if rng.random() < 0.3:
                st["accept_num"][b] = int(rng.integers(0, D + 1))
                st["target_model_seq_lens_this_time"][b] = 0
        elif slot == "paused":
            st["target_model_is_block_step"][b] = True
            st["target_model_stop_flags"][b] = rng.random() < 0.5
        elif slot == "near_max":
            st["max_dec_len"][b] = st["target_model_step_idx"][b] + num_model_steps - int(rng.integers(0, 3))
        elif slot == "idle":
            st["target_model_stop_flags"][b] = True
    return st


def make_target_hidden(rng: np.random.Generator, state: dict, hidden_size: int, dtype=np.float32,
                       pad_rows: int = 0) -> np.ndarray:
    """Random target hidden states [sum(target L) + pad_rows, H]; pad rows mimic CUDA-graph padding."""
    T = int(np.asarray(state["target_model_seq_lens_this_time"]).sum()) + pad_rows
    return rng.standard_normal((T, hidden_size)).astype(dtype)
