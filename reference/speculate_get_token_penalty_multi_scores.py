"""numpy reference for speculate_get_token_penalty_multi_scores (docs/spec.md §4.5, docs/spec.md §8.6).

Plain per-row loops in float32, written from the spec; decisions where the spec is silent are
listed in ref_speculate_get_token_penalty_multi_scores's docstring.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

MASK_VALUE = -1e10  # float32 / bfloat16 logits
MASK_VALUE_FP16 = -1e4  # float16 logits (FastDeploy: -1e10 would be -inf)


def _per_slot(x) -> np.ndarray:
    return np.asarray(x).reshape(-1)


def ref_speculate_get_token_penalty_multi_scores(
    pre_ids,
    logits,
    penalty_scores,
    frequency_scores,
    presence_scores,
    temperatures,
    bad_tokens,
    bad_tokens_len,
    cur_len,
    min_len,
    eos_token_id,
    seq_lens_this_time,
    batch_id_per_token_output,
    cu_seqlens_q_output,
    max_seq_len,
    draft_tokens=None,
    *,
    mask_value: float = MASK_VALUE,
    nonpositive_temperature: str = "raise",
) -> np.ndarray:
    """Returns the updated logits as a new float32 array ([T_out, V]); the inputs are not changed.

    Per logit row t with slot b = batch_id_per_token_output[t] (rows with b < 0 are left as they
    are) and local index i = t - cu_seqlens_q_output[b], in this order:
      1. min length: if cur_len[b] >= 0 and cur_len[b] + i < min_len[b], every eos id in [0, V)
         is set to mask_value.
      2. repeat counts (skipped when cur_len[b] < 0): the history is pre_ids[b, 1 .. cur_len[b]]
         (SPEC: step_idx counts the generated tokens and pre_ids[b, step_idx] is the last one;
         position 0 is unused), plus draft_tokens[b, 1 .. i] when draft_tokens is given (the
         drafts row i is conditioned on). Ids outside [0, V) (the -1 sentinel included) are
         skipped. For each distinct id v with count c:
         l = l * alpha if l < 0 else l / alpha;  l = l - c * frequency - presence.
      3. every entry of the row: l = l / temperature[b]. nonpositive_temperature says what a
         temperature <= 0 (or NaN) means: "raise" (the CPU op) or "one" (the CUDA kernel: no
         scaling).
      4. bad words: bad_tokens[b, j] for j < min(bad_tokens_len[b], W), ids in [0, V), set to
         mask_value.
    max_seq_len is a legacy attribute and is ignored.
    """
    out = np.array(logits, dtype=np.float32, copy=True)
    rows, V = out.shape
    alpha, beta, gamma = (_per_slot(x).astype(np.float32) for x in (penalty_scores, frequency_scores, presence_scores))
    temps = _per_slot(temperatures).astype(np.float32)
    bad_len = _per_slot(bad_tokens_len)
    steps = _per_slot(cur_len)
    min_lens = _per_slot(min_len)
    eos = _per_slot(eos_token_id)
    batch_ids = np.asarray(batch_id_per_token_output).reshape(-1)
    cu = np.asarray(cu_seqlens_q_output).reshape(-1)
    mask = np.float32(mask_value)
    for t in range(rows):
        b = int(batch_ids[t])
        if b < 0:
            continue
        i = t - int(cu[b])
        x = out[t]
        step = int(steps[b])
        if step >= 0 and step + i < int(min_lens[b]):
            for e in eos:
                if 0 <= e < V:
                    x[e] = mask
        if step >= 0:
            history = [int(pre_ids[b, j]) for j in range(1, step + 1)]
            if draft_tokens is not None:
                history += [int(draft_tokens[b, j]) for j in range(1, i + 1)]
            for v, c in Counter(v for v in history if 0 <= v < V).items():
                x[v] = x[v] * alpha[b] if x[v] < 0 else x[v] / alpha[b]
                x[v] = x[v] - np.float32(c) * beta[b] - gamma[b]
        temp = temps[b]
        if not temp > 0:
            if nonpositive_temperature == "raise":
                raise ValueError(f"temperatures[{b}] = {temp}, expected > 0")
            temp = np.float32(1.0)
        out[t] = x / temp
        for j in range(min(int(bad_len[b]), bad_tokens.shape[1])):
            v = int(bad_tokens[b, j])
            if 0 <= v < V:
                out[t, v] = mask
    return out
