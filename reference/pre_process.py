"""numpy reference for pre_process (docs/spec.md §4.1-4.3), written as per-slot loops from the spec."""

from __future__ import annotations

import numpy as np


def ref_pre_process(input_ids, seq_lens_this_time, seq_lens_encoder, token_num, draft_tokens=None):
    """Returns a dict with every ForwardMeta tensor field as numpy arrays."""
    lens = np.asarray(seq_lens_this_time).reshape(-1)
    enc = np.asarray(seq_lens_encoder).reshape(-1)
    bsz = lens.shape[0]
    k = 0 if draft_tokens is None else draft_tokens.shape[1] - 1
    ids = np.full(token_num, -1, np.int64)
    batch_ids = np.full(token_num, -1, np.int32)
    cu = np.zeros(bsz + 1, np.int32)
    out_lens = np.zeros(bsz, np.int32)
    t = 0
    for b in range(bsz):
        decode = draft_tokens is not None and enc[b] <= 0
        for i in range(lens[b]):
            ids[t] = draft_tokens[b, i] if decode else input_ids[b, i]
            batch_ids[t] = b
            t += 1
        cu[b + 1] = t
        # O_b: 0 idle, 1 for one token or prefill, else every decode token needs a logit row
        out_lens[b] = 0 if lens[b] == 0 else 1 if (lens[b] == 1 or enc[b] != 0) else lens[b]
    capacity = bsz * (k + 1)
    out_batch_ids = np.full(capacity, -1, np.int32)
    cu_out = np.zeros(bsz + 1, np.int32)
    r = 0
    for b in range(bsz):
        for _ in range(out_lens[b]):
            out_batch_ids[r] = b
            r += 1
        cu_out[b + 1] = r
    return {
        "ids_remove_padding": ids,
        "batch_id_per_token": batch_ids,
        "cu_seqlens_q": cu,
        "cu_seqlens_k": cu.copy(),
        "seq_lens_output": out_lens,
        "batch_id_per_token_output": out_batch_ids,
        "cu_seqlens_q_output": cu_out,
    }
