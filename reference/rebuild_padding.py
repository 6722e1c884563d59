"""numpy reference for rebuild_padding, written from docs/spec.md §4.4 as per-slot loops (numpy only).

Valid inputs only: it asserts what it assumes instead of reproducing the op's error checks.
Works for any numpy dtype (bf16 as uint16 bit patterns included): it only copies rows.
"""

import numpy as np


def _is_skipped(length: int, encoder: int, decoder: int) -> bool:
    """Idle slot (L_b == 0), or one with neither prompt nor cache (FastDeploy skips it too)."""
    return length == 0 or (encoder == 0 and decoder == 0)


def ref_rebuild_padding(tmp_out, cu_seqlens_q, seq_len_this_time, seq_lens_decoder, seq_lens_encoder,
                        batch_id_per_token_output=None, cu_seqlens_q_output=None, first_token_out=None,
                        enable_logprob=False):
    """Returns (out, first_token_out after the call); first_token_out is None when not given."""
    tmp_out = np.asarray(tmp_out)
    cu_q = np.asarray(cu_seqlens_q).reshape(-1)
    lens = np.asarray(seq_len_this_time).reshape(-1)
    dec = np.asarray(seq_lens_decoder).reshape(-1)
    enc = np.asarray(seq_lens_encoder).reshape(-1)
    bsz, hidden = lens.shape[0], tmp_out.shape[1]
    assert (batch_id_per_token_output is None) == (cu_seqlens_q_output is None), "index tensors come in pairs"
    first = None if first_token_out is None else np.array(first_token_out, copy=True)

    if batch_id_per_token_output is None:
        # One output row per slot.
        row_start = np.arange(bsz + 1)
        out = np.zeros((bsz, hidden), dtype=tmp_out.dtype)
    else:
        batch_ids = np.asarray(batch_id_per_token_output).reshape(-1)
        row_start = np.asarray(cu_seqlens_q_output).reshape(-1)
        out = np.zeros((batch_ids.shape[0], hidden), dtype=tmp_out.dtype)
        for b in range(bsz):
            assert all(batch_ids[row_start[b]:row_start[b + 1]] == b), f"slot {b}: batch ids disagree with cu"
        assert all(batch_ids[row_start[bsz]:] == -1), "rows past T_out must have batch id -1"

    for b in range(bsz):
        if _is_skipped(int(lens[b]), int(enc[b]), int(dec[b])):
            continue
        for i in range(int(row_start[b + 1] - row_start[b])):
            if enc[b] > 0:  # prefill: the last prompt token of this step, whatever the row
                out[row_start[b] + i] = tmp_out[cu_q[b] + enc[b] - 1]
            else:  # decode: the i-th query token of the slot
                out[row_start[b] + i] = tmp_out[cu_q[b] + i]
        has_row = row_start[b + 1] > row_start[b]
        if enable_logprob and enc[b] > 0 and has_row:
            # The row before the last prompt token; none this step when E_b == 1.
            first[b] = tmp_out[cu_q[b] + enc[b] - 2] if enc[b] >= 2 else 0
    return out, first
