"""numpy reference for speculate_verify (docs/spec.md §4.5, docs/spec.md §8.9), written as
plain per-slot loops from the specification, plus the documented counter-based generator
(custom_ops/gpu_ops/kernels/counter_rng.h) reimplemented with Python integers.

Vocabulary: draft = draft_tokens[b, i + 1], checked against output row s + i; correction = the
token from the first rejected row; bonus = the token from row s + L - 1 when every draft passes.
topp accepts a draft only inside the row's top-p set, the first min(actual_candidate_len, C)
candidates (issue 16): FastDeploy's verify-window fallback, restricted to that set, never changes
an outcome, so verify_window has no effect.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
PROB_ONE = 1 << 40  # one probability unit is 2^-40
STRATEGIES = ("topp", "greedy", "target_match", "rejection")
POLICIES = ("normal", "accept_all", "reject_all")


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def counter_bits(seed: int, step: int, row: int, draw: int) -> int:
    """24 random bits for (seed, step, row, draw); seed/step as two's-complement uint64."""
    h = _mix64(((int(seed) & MASK64) + GOLDEN) & MASK64)
    h = _mix64(h ^ (int(step) & MASK64))
    h = _mix64(h ^ ((int(row) << 32) | int(draw)))
    return h >> 40


def uniform(bits: int) -> float:
    """(bits + 0.5) / 2^24, exact as a Python float."""
    return (2 * bits + 1) / float(1 << 25)


def prob_units(x) -> np.ndarray:
    """float32 probabilities as integer counts of 2^-40: 0 for x <= 0 or NaN, 2^40 for x >= 1."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    scaled = np.where(x > 0, np.minimum(x, 1.0), 0.0) * float(PROB_ONE)  # exact scaling
    return np.floor(scaled).astype(np.int64)


def inverse_cdf(weights: np.ndarray, bits: int) -> int | None:
    """Smallest index whose inclusive prefix sum exceeds floor(uniform * total); None if no mass."""
    total = int(weights.sum())
    if total == 0:
        return None
    threshold = ((2 * bits + 1) * total) >> 25
    return int(np.searchsorted(np.cumsum(weights), threshold, side="right"))


def _sample_candidates(ids, scores, n, top_p, bits) -> int:
    """topp correction/bonus: inverse CDF over the first n candidates, mass min(top_p, theirs)."""
    w = prob_units(scores[:n])
    mass = min(int(prob_units([top_p])[0]), int(w.sum()))
    if mass == 0:
        return int(ids[0])
    threshold = ((2 * bits + 1) * mass) >> 25
    cum = 0
    for m in range(n):
        cum += int(w[m])
        if cum > threshold:
            return int(ids[m])
    raise AssertionError("threshold beyond the candidate mass")


def ref_speculate_verify(
    sampled_token_ids, accept_tokens, accept_num, step_idx, stop_flags, seq_lens_encoder,
    seq_lens_decoder, draft_tokens, seq_lens_this_time, verify_tokens, verify_scores, max_dec_len,
    end_tokens, is_block_step, cu_seqlens_q_output, actual_candidate_len, actual_draft_token_nums,
    topp, max_seq_len=0, verify_window=2, enable_topp=True, benchmark_mode=False,
    accept_all_drafts=False, target_probs=None, draft_probs=None, infer_seed=None,
    reasoning_status=None, verify_strategy="topp", accept_policy="normal",
):
    """Returns the updated (accept_tokens, accept_num, step_idx, stop_flags) as a dict of copies."""
    flat = lambda a: None if a is None else np.asarray(a).reshape(-1)  # noqa: E731  [N, 1] -> [N]
    accept_tokens = np.array(accept_tokens, dtype=np.int64, copy=True)
    accept_num = np.array(flat(accept_num), dtype=np.int32, copy=True)
    step_idx = np.array(flat(step_idx), dtype=np.int64, copy=True)
    stop_flags = np.array(flat(stop_flags), dtype=bool, copy=True)
    sampled = flat(sampled_token_ids)
    enc, lens, cu = flat(seq_lens_encoder), flat(seq_lens_this_time), flat(cu_seqlens_q_output)
    cand_len, max_dec, block, top_p = flat(actual_candidate_len), flat(max_dec_len), flat(is_block_step), flat(topp)
    seeds, reasoning, ends = flat(infer_seed), flat(reasoning_status), [int(e) for e in flat(end_tokens)]
    C = verify_tokens.shape[1]
    policy = accept_policy
    if accept_policy == "reject_all" or benchmark_mode:
        policy = "reject_all"
    elif accept_all_drafts:
        policy = "accept_all"

    for b in range(lens.shape[0]):
        L, s = int(lens[b]), int(cu[b])
        if block[b] or stop_flags[b] or L <= 0:
            accept_num[b] = 0  # not verified: no stale count, nothing else written
            continue
        seed = int(seeds[b]) if seeds is not None else b
        step0 = int(step_idx[b])
        emitted, step, stopped = [], step0, False

        def emit(tok):
            nonlocal step, stopped
            tok = int(tok)
            step += 1
            if tok in ends or step >= max_dec[b]:
                stopped = True
                if tok not in ends and ends:
                    tok = ends[0]  # length stop on a non-EOS token
            emitted.append(int(tok))
            return stopped

        walk = enc[b] <= 0 and policy != "reject_all" and not (reasoning is not None and reasoning[b] == 1)
        i, rejected = 0, False
        while walk and i < L - 1 and not stopped:
            draft, row = int(draft_tokens[b, i + 1]), s + i
            if policy == "accept_all":
                ok = True
            elif verify_strategy == "greedy":
                ok = draft == verify_tokens[row, 0]
            elif verify_strategy == "target_match":
                ok = draft == sampled[row]
            elif verify_strategy == "rejection":
                V = target_probs.shape[1]
                if 0 <= draft < V:  # an id outside the vocabulary has no target mass: rejected
                    p = float(target_probs[row, draft])
                    q = float(draft_probs[b, i, draft]) if draft_probs is not None else 1.0
                    ok = q > 0 and uniform(counter_bits(seed, step0 + i, i, 0)) * q < p
                else:
                    ok = False
                rejected = not ok
            else:  # topp: the draft must be in the row's top-p set; verify_window has no effect
                n = min(max(int(cand_len[row]), 0), C)
                ok = draft in [int(t) for t in verify_tokens[row, :n]]
            if not ok:
                break
            emit(draft)
            i += 1

        if not stopped:
            row = s + i
            bits = counter_bits(seed, step0 + i, i, 1)
            if verify_strategy == "target_match":
                tok = sampled[row]
            elif verify_strategy == "greedy" or (verify_strategy == "topp" and not enable_topp):
                tok = verify_tokens[row, 0]
            elif verify_strategy == "topp":
                n = min(max(int(cand_len[row]), 0), C)
                tok = _sample_candidates(verify_tokens[row], verify_scores[row], n, top_p[b], bits)
            else:  # rejection: residual at a rejected row (if it has mass), else the target row
                p_units = prob_units(target_probs[row])
                tok = None
                if rejected:
                    if draft_probs is not None:
                        q_units = prob_units(draft_probs[b, i])
                    else:
                        q_units = np.zeros_like(p_units)
                        if 0 <= draft_tokens[b, i + 1] < q_units.shape[0]:
                            q_units[int(draft_tokens[b, i + 1])] = PROB_ONE
                    tok = inverse_cdf(np.maximum(p_units - q_units, 0), bits)
                if tok is None:
                    tok = inverse_cdf(p_units, bits)
                if tok is None:
                    tok = 0  # a row without any mass
            emit(tok)

        n = len(emitted)
        accept_tokens[b, :n] = emitted
        accept_tokens[b, n:] = -1
        accept_num[b] = n
        step_idx[b] = step
        stop_flags[b] = stopped
    return {"accept_tokens": accept_tokens, "accept_num": accept_num, "step_idx": step_idx,
            "stop_flags": stop_flags}
