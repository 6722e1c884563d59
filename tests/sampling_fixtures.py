"""Logit-row fixtures for the sampling-side ops (top_p_candidates, reasoning_phase_token_constraint).

Plain numpy, shared by tests/ops and tests/gpu. Rows follow docs/spec.md §4.2 (O_b per slot) and are
indexed with reference.cases.step_batch.pack_output_index, so every fixture holds the real batch_id_per_token_output
and cu_seqlens_q_output quantities.
"""

from __future__ import annotations

import numpy as np

from reference.cases.step_batch import StepBatch, pack_output_index


def seq_lens_output(batch: StepBatch) -> np.ndarray:
    """O_b from docs/spec.md §4.2: 0 idle, 1 for one token or a prefill chunk, else L_b (decode)."""
    out = np.zeros(batch.bsz, dtype=np.int32)
    for b in range(batch.bsz):
        L, E = int(batch.seq_lens_this_time[b]), int(batch.seq_lens_encoder[b])
        out[b] = 0 if L == 0 else 1 if (L == 1 or E != 0) else L
    return out


def output_index(batch: StepBatch):
    """(seq_lens_output, batch_id_per_token_output [bsz * D], cu_seqlens_q_output [bsz + 1])."""
    lens = seq_lens_output(batch)
    capacity = batch.bsz * batch.draft_tokens.shape[1]
    batch_ids, cu = pack_output_index(lens, capacity)
    return lens, batch_ids, cu


def random_probs(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    """[rows, vocab] float32 probability rows with many exact ties. Row kinds: quantized uniform
    weights (16 levels), all equal, one dominant id, 2-4 ids tied at the top with most of the
    mass, and a steep heavy-tailed row whose top candidates carry a mass near typical top_p."""
    weights = np.floor(rng.random((rows, vocab)) * 16).astype(np.float32) + 1
    kind = rng.integers(0, 5, size=rows)
    for t in range(rows):
        if kind[t] == 1:
            weights[t] = 1.0
        elif kind[t] == 2:
            weights[t, rng.integers(0, vocab)] = 40.0 * vocab
        elif kind[t] == 3:
            weights[t, rng.choice(vocab, size=min(vocab, int(rng.integers(2, 5))), replace=False)] = 10.0 * vocab
        elif kind[t] == 4:
            weights[t] = np.floor(np.exp(3.0 * rng.standard_normal(vocab))) + 1
    return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


def random_top_p(rng: np.random.Generator, n: int) -> np.ndarray:
    """[n] float32: mostly in (0, 1), plus exact 1.0, 0.0 and unreachable values above 1."""
    top_p = rng.uniform(0.01, 1.0, size=n).astype(np.float32)
    pick = rng.random(n)
    top_p[pick < 0.1] = 1.0
    top_p[(pick >= 0.1) & (pick < 0.15)] = 0.0
    top_p[(pick >= 0.15) & (pick < 0.25)] = 1.5
    return top_p


def random_reasoning_inputs(rng: np.random.Generator, batch: StepBatch, batch_id_per_token_output: np.ndarray,
                            cu_seqlens_q_output: np.ndarray, vocab: int, think_end_id: int, line_break_id: int,
                            extra_slots: int = 2, max_seq_len: int = 12) -> dict:
    """Inputs of reasoning_phase_token_constraint (without the two attributes) for one step.

    N = bsz + extra_slots per-slot rows (the slots past bsz must stay untouched). Histories are
    drawn from {"\\n", "</think>", 3, 4} and about a third of the slots end exactly on the
    boundary pattern, so every transition happens; step_idx covers -1, 0 and positions past
    the row; statuses are 0..3; allowed ids include out-of-vocab ones and the empty set.
    """
    bsz, S = batch.bsz, max_seq_len
    N = bsz + extra_slots
    pre_ids = rng.choice(np.array([line_break_id, think_end_id, 3, 4], np.int64), size=(N, S), p=[0.4, 0.2, 0.2, 0.2])
    step_idx = rng.integers(-1, S + 3, size=N).astype(np.int64)
    step_idx[rng.random(N) < 0.2] = 0
    for b in range(N):
        if rng.random() < 0.35 and 3 <= step_idx[b] < S:
            pre_ids[b, step_idx[b] - 3: step_idx[b] + 1] = [line_break_id, think_end_id, line_break_id, line_break_id]
    stop_flags = np.concatenate([batch.stop_flags, rng.random(extra_slots) < 0.5])
    num_allowed = int(rng.integers(0, 6))
    return dict(
        logits=rng.standard_normal((batch_id_per_token_output.shape[0], vocab)).astype(np.float32),
        pre_ids=pre_ids,
        stop_flags=stop_flags,
        seq_lens_this_time=batch.seq_lens_this_time.copy(),
        seq_lens_encoder=batch.seq_lens_encoder.copy(),
        step_idx=step_idx,
        allowed_tokens=rng.integers(-2, vocab + 2, size=num_allowed).astype(np.int64),
        reasoning_status=rng.integers(0, 4, size=N).astype(np.int32),
        batch_id_per_token_output=batch_id_per_token_output,
        cu_seqlens_q_output=cu_seqlens_q_output,
        enable_thinking=rng.random(N) < 0.6,
    )
