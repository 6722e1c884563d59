"""write_host_drafts: drafts computed on the host -> the target's next-step query (draft_tokens[b, 1..],
seq_lens_this_time[b]) with one upload and a few device ops, capped on the device exactly as ngram_match caps
its own drafts (the adaptive budget actual_draft_token_nums and the room left before max_dec_len), so no
device value is read back. Host proposers (suffix decoding) use it; it knows nothing about how drafts are made.
"""

from __future__ import annotations

import numpy as np
import paddle

from specworker.spec_decode.metadata import ProposerInputs

__all__ = ["write_host_drafts"]


def write_host_drafts(inputs: ProposerInputs, drafts: np.ndarray, num_drafts: np.ndarray, idle: np.ndarray) -> None:
    """Per slot b: m = min(num_drafts[b], actual_draft_token_nums[b], max_dec_len[b] - step_idx[b] - 1), floored
    at 0; draft_tokens[b, 1:1 + m] = drafts[b, :m], -1 after them; seq_lens_this_time[b] = 0 if idle[b] else
    1 + m. Column 0 (the last accepted token) is not touched. Prefill rows get a value too: the host writes
    them again before the next step.

    Args:
        inputs: the target batch (draft_tokens [N, D] i64, seq_lens_this_time [N] i32,
            actual_draft_token_nums [N] i32, max_dec_len [N] i64, step_idx [N] i64).
        drafts: [N, D - 1] int64 host array, row b's first num_drafts[b] entries are its drafts.
        num_drafts: [N] host ints in 0..D - 1.
        idle: [N] host bools: stopped, paused or empty slots (L = 0).

    Example (D = 4): drafts [[7, 8, 9], [5, -1, -1]], num [3, 1], idle [F, F], budgets [2, 3], room [9, 0]
        -> draft_tokens[:, 1:] = [[7, 8, -1], [-1, -1, -1]], seq_lens_this_time = [3, 1].
    """
    t = inputs
    num_slots, width = t.draft_tokens.shape
    k = width - 1
    if drafts.shape != (num_slots, k) or num_drafts.shape != (num_slots,) or idle.shape != (num_slots,):
        raise ValueError(f"write_host_drafts: drafts {drafts.shape}, num_drafts {num_drafts.shape}, idle "
                         f"{idle.shape}; expected ({num_slots}, {k}), ({num_slots},), ({num_slots},)")
    # One upload: [N, 2k + 1] = drafts | the column index j where j < num_drafts, else k (a "never" marker) |
    # 0 for an idle slot, else 1. Comparing the markers with the device cap keeps the op count low.
    packed = np.empty([num_slots, 2 * k + 1], dtype=np.int64)
    packed[:, :k] = drafts
    cols = np.arange(k, dtype=np.int64)
    packed[:, k:2 * k] = np.where(cols[None, :] < num_drafts[:, None], cols[None, :], k)
    packed[:, 2 * k] = ~idle
    tokens, marks, live = paddle.split(paddle.to_tensor(packed, place=t.draft_tokens.place), [k, k, 1], axis=1)
    cap = paddle.minimum(t.actual_draft_token_nums.astype("int64"), t.max_dec_len - t.step_idx - 1)  # [N]
    keep = marks < cap.unsqueeze(1)  # [N, k]: draft j is kept iff j < num_drafts and j < cap
    t.draft_tokens[:, 1:] = paddle.where(keep, tokens, paddle.full_like(tokens, -1))
    lens = (keep.astype("int64").sum(axis=1) + 1) * live.squeeze(1)  # [N]: 1 + kept drafts, 0 when idle
    paddle.assign(lens.astype("int32"), output=t.seq_lens_this_time)
