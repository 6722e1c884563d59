"""numpy reference for top_p_candidates (docs/spec.md §4.5; docs/spec.md §8.8 with the [ours] length fix;
issue 16: entries past the top-p length are not candidates)."""

import numpy as np


def ref_top_p_candidates(probs, top_p, batch_id_per_token_output, candidates_len):
    """Returns (verify_scores [rows, C] f32, verify_tokens [rows, C] i64, actual_candidate_lens [rows] i32).

    Per row t of slot b = batch_id_per_token_output[t] (b == -1: no slot, row stays 0 / -1 / 0):
    rank the probabilities, ties to the smaller id, NaN counted as -inf; the length is the
    smallest m >= 1 whose float32 running sum of the first m reaches top_p[b], else min(C, V).
    Only those m entries are candidates; every entry past the length is score 0, token -1.
    """
    probs = np.asarray(probs, dtype=np.float32)
    top_p = np.asarray(top_p, dtype=np.float32).reshape(-1)
    batch_ids = np.asarray(batch_id_per_token_output).reshape(-1)
    rows, V = probs.shape
    C = int(candidates_len)
    scores = np.zeros((rows, C), dtype=np.float32)
    tokens = np.full((rows, C), -1, dtype=np.int64)
    lens = np.zeros(rows, dtype=np.int32)
    m = min(C, V)
    for t in range(rows):
        b = int(batch_ids[t])
        if b == -1:
            continue
        row = np.where(np.isnan(probs[t]), np.float32(-np.inf), probs[t])
        # Everything at least as large as the m-th largest value, then ordered by (prob desc, id asc).
        mth_largest = -np.partition(-row, m - 1)[m - 1]
        ids = np.nonzero(row >= mth_largest)[0]
        ids = ids[np.lexsort((ids, -row[ids]))][:m]
        n = m
        cum = np.float32(0.0)
        for r in range(m):
            cum = np.float32(cum + row[ids[r]])
            if cum >= top_p[b]:
                n = r + 1
                break
        scores[t, :n] = row[ids[:n]]  # the top-p set; the rest stays 0 / -1
        tokens[t, :n] = ids[:n]
        lens[t] = n
    return scores, tokens, lens
