"""numpy reference of the non-speculative sampler, written from its description (task brief and the
definitions in the Sampler's docstrings), with per-row loops and Python ints. Never calls specworker.

Penalties come from the penalty op's own numpy reference. Per valid row (slot b, local index j):
greedy (temperature < 1e-5): first argmax; else weights w_i ~= exp(l_i - max l) * 2**32 (a float32
polynomial for 2**y, ref_softmax_weights), then top-k (ties with the k-th value kept), top-p (the
smallest prefix of the sorted weights whose mass reaches top_p, ties with its last value kept),
min-p (drop w < min_p * w_max), and the inverse-CDF draw in vocabulary order with the counter
hash below (seed and counter mixed separately by hash32, added, mixed again).
"""

from __future__ import annotations

import numpy as np

from reference.speculate_get_token_penalty_multi_scores import ref_speculate_get_token_penalty_multi_scores

GREEDY_TEMPERATURE = 1e-5
M32 = 2**32 - 1


def ref_hash32(x: int) -> int:
    x &= M32
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & M32
    x ^= x >> 15
    x = (x * 0x735A2D97) & M32
    return x ^ (x >> 15)


def ref_counter_bits(seed: int, counter: int) -> int:
    a = ref_hash32((seed & M32) ^ 0x9E3779B9)
    c = ref_hash32((counter & M32) ^ 0x85EBCA6B)
    return ref_hash32((a + c) & M32)


def ref_counter_uniform(seed: int, counter: int) -> float:
    return (2 * ref_counter_bits(seed, counter) + 1) / 2.0**33


# sqrt(2) * ln(2)**k / k!: the Taylor series of 2**f around f = 1/2, k = 0..7
EXP2_COEFFS = [np.float32(np.sqrt(2.0) * np.log(2.0)**k / np.prod(np.arange(1, k + 1, dtype=np.float64)))
               for k in range(8)]


def ref_softmax_weights(row: np.ndarray) -> list[int]:
    """w_i ~= exp(l_i - max l) * 2**32 from float32 +, -, *, floor (scalar loop; no np.exp)."""
    row = np.asarray(row, np.float32)
    out = []
    for x in row:
        y = np.float32(np.float32(x - row.max()) * np.float32(1.4426950408889634))
        q = np.floor(y)
        r = np.float32(np.float32(y - q) - np.float32(0.5))
        p = np.float32(r * EXP2_COEFFS[7] + EXP2_COEFFS[6])
        for c in EXP2_COEFFS[5::-1]:
            p = np.float32(np.float32(p * r) + c)
        out.append(int(np.floor(np.float64(p) * 2.0 ** (int(q) + 32))) if y >= -32 else 0)
    return out


def ref_weights(row: np.ndarray, top_k: int, top_p: float, min_p: float) -> list[int]:
    """Kept weights of one logit row (Python ints, 0 on dropped tokens)."""
    w = ref_softmax_weights(row)
    V = len(w)
    s = sorted(w, reverse=True)
    kth = s[(top_k if 0 < top_k <= V else V) - 1]
    s_k = [x if x >= kth else 0 for x in s]
    total_k = sum(s_k)
    reach = float(np.float32(top_p)) * float(total_k)
    kept, before = 0, 0
    for x in s_k:
        if not float(before) < reach:
            break
        kept += 1
        before += x
    cut = max(s_k[max(kept, 1) - 1], kth)
    floor_p = float(np.float32(min_p)) * float(s[0])
    return [x if (x >= cut and x > 0 and float(x) >= floor_p) else 0 for x in w]


def ref_inverse_cdf(weights: list[int], u: float) -> int:
    total = sum(weights)
    t = min(int(np.floor(u * float(total))), total - 1)
    acc = 0
    for i, x in enumerate(weights):
        acc += x
        if acc > t:
            return i
    return 0


def ref_sampler(logits, p: dict, batch_id_per_token_output, cu_seqlens_q_output, seq_lens_this_time):
    """Returns (tokens [R] int64, probs [R, V] float64, penalised logits [R, V] float32).

    `p` maps the share_inputs names (temperature, top_p, top_k, min_p, penalty_score,
    frequency_score, presence_score, infer_seed, step_idx, pre_ids, bad_tokens, bad_tokens_len,
    min_dec_len, eos_token_id, optional draft_tokens) to numpy arrays.
    """
    temps = np.asarray(p["temperature"], np.float32)
    op_temps = np.where(temps < GREEDY_TEMPERATURE, np.float32(1), temps).astype(np.float32)
    pen = ref_speculate_get_token_penalty_multi_scores(
        p["pre_ids"], logits, p["penalty_score"], p["frequency_score"], p["presence_score"], op_temps,
        p["bad_tokens"], p["bad_tokens_len"], p["step_idx"], p["min_dec_len"], p["eos_token_id"],
        seq_lens_this_time, batch_id_per_token_output, cu_seqlens_q_output, 0, p.get("draft_tokens"))
    rows, V = pen.shape
    tokens = np.full(rows, -1, np.int64)
    probs = np.zeros((rows, V), np.float64)
    for r in range(rows):
        b = int(batch_id_per_token_output[r])
        if b < 0:
            continue
        j = r - int(cu_seqlens_q_output[b])
        if temps[b] < GREEDY_TEMPERATURE:
            tokens[r] = int(np.argmax(pen[r]))
            probs[r, tokens[r]] = 1.0
            continue
        w = ref_weights(pen[r], int(p["top_k"][b]), float(p["top_p"][b]), float(p["min_p"][b]))
        u = ref_counter_uniform(int(p["infer_seed"][b]), int(p["step_idx"][b]) + j)
        tokens[r] = ref_inverse_cdf(w, u)
        probs[r] = np.asarray(w, np.float64) / sum(w)
    return tokens, probs, pen
