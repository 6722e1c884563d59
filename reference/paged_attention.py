"""numpy reference for paged_attention, written from its definition as per-slot loops (numpy only).

Slot b, its i-th token this step (packed row t = cu_seqlens_q[b] + i) sits at position
p = seq_lens_decoder[b] + i: its k/v rows go to cache block block_tables[b, p // block_size],
offset p % block_size, and its output is causal softmax attention of q[t] over the slot's cache
positions 0..p (GQA: head h reads kv head h // (num_heads // num_kv_heads)). Math in float64.
Valid inputs only: it asserts what it assumes instead of reproducing the op's error checks.
"""

import numpy as np


def ref_paged_attention(q, k, v, key_cache, value_cache, block_tables, cu_seqlens_q, seq_lens_decoder,
                        seq_lens_this_time, batch_id_per_token, block_size, scale=None):
    """Returns (out [T_cap, num_heads, head_dim] float64, key_cache', value_cache').

    The caches are copies of the given ones (same dtype) with this step's k/v rows written; rows of
    out whose batch id is -1 (past the packed tokens) are zeros. scale None: 1 / sqrt(head_dim).
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    key_cache, value_cache = np.array(key_cache, copy=True), np.array(value_cache, copy=True)
    tables = np.asarray(block_tables)
    cu = np.asarray(cu_seqlens_q).reshape(-1)
    dec = np.asarray(seq_lens_decoder).reshape(-1)
    lens = np.asarray(seq_lens_this_time).reshape(-1)
    batch_ids = np.asarray(batch_id_per_token).reshape(-1)
    token_cap, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    num_blocks = key_cache.shape[0]
    assert num_heads % num_kv_heads == 0, "num_heads must be a multiple of num_kv_heads"
    assert key_cache.shape[2] == block_size, "block_size is the cache's third dimension"
    group = num_heads // num_kv_heads
    scale = 1.0 / np.sqrt(head_dim) if scale is None else float(np.float32(scale))
    assert cu[-1] <= token_cap, "more packed tokens than rows"
    assert all(batch_ids[cu[-1]:] == -1), "rows past the packed tokens have batch id -1"

    # 1. Append: every new token's k/v goes to its position in the slot's blocks.
    for b in range(lens.shape[0]):
        for i in range(int(lens[b])):
            t = int(cu[b]) + i
            assert batch_ids[t] == b, f"row {t} belongs to slot {b}"
            p = int(dec[b]) + i
            block = int(tables[b, p // block_size])
            assert 0 <= block < num_blocks, f"slot {b} position {p} has no block"
            key_cache[block, :, p % block_size, :] = k[t]
            value_cache[block, :, p % block_size, :] = v[t]

    # 2. Attend: query i of slot b sees positions 0..p, the cached ones and this step's up to itself.
    out = np.zeros((token_cap, num_heads, head_dim), dtype=np.float64)
    for b in range(lens.shape[0]):
        for i in range(int(lens[b])):
            t = int(cu[b]) + i
            p = int(dec[b]) + i
            positions = np.arange(p + 1)
            blocks = tables[b, positions // block_size]
            keys = key_cache[blocks, :, positions % block_size, :].astype(np.float64)  # [p + 1, kvh, d]
            values = value_cache[blocks, :, positions % block_size, :].astype(np.float64)
            for h in range(num_heads):
                kv_head = h // group
                scores = keys[:, kv_head, :] @ q[t, h].astype(np.float64) * scale  # [p + 1]
                weights = np.exp(scores - scores.max())
                out[t, h] = weights @ values[:, kv_head, :] / weights.sum()
    return out, key_cache, value_cache
