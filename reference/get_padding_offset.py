"""numpy reference for get_padding_offset, written from docs/spec.md §4.1 as per-slot loops.

Strict like the CPU op: inputs SPEC calls errors raise ValueError. The CUDA kernel's in-bounds
behaviour on such inputs is checked with literal cases in tests/gpu, not here.
"""

import numpy as np


def ref_get_padding_offset(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, token_num_cpu):
    """Returns (ids_remove_padding or None, batch_id_per_token, cu_seqlens_q, cu_seqlens_k)."""
    if (draft_tokens is None) != (seq_lens_encoder is None):
        raise ValueError("draft_tokens and seq_lens_encoder come together")
    if input_ids is None and draft_tokens is not None:
        raise ValueError("draft_tokens without input_ids")
    lens = np.asarray(seq_lens_this_time).reshape(-1)
    enc = None if seq_lens_encoder is None else np.asarray(seq_lens_encoder).reshape(-1)
    bsz = lens.shape[0]

    cu_seqlens_q = np.zeros(bsz + 1, dtype=np.int32)
    for b in range(bsz):
        if lens[b] < 0:
            raise ValueError(f"seq_lens_this_time[{b}] = {lens[b]}")
        cu_seqlens_q[b + 1] = cu_seqlens_q[b] + lens[b]
    if cu_seqlens_q[bsz] > token_num_cpu:
        raise ValueError(f"sum(seq_lens_this_time) = {cu_seqlens_q[bsz]} > token_num_cpu = {token_num_cpu}")

    batch_id_per_token = np.full(token_num_cpu, -1, dtype=np.int32)
    ids_remove_padding = None if input_ids is None else np.full(token_num_cpu, -1, dtype=np.int64)
    for b in range(bsz):
        is_decode = draft_tokens is not None and enc[b] <= 0
        source = draft_tokens if is_decode else input_ids
        for i in range(lens[b]):
            t = cu_seqlens_q[b] + i
            batch_id_per_token[t] = b
            if ids_remove_padding is not None:
                if i >= source.shape[1]:
                    raise ValueError(f"slot {b} reads token {i} of a row of width {source.shape[1]}")
                ids_remove_padding[t] = source[b, i]
    return ids_remove_padding, batch_id_per_token, cu_seqlens_q, cu_seqlens_q.copy()
