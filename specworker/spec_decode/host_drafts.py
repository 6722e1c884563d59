"""write_host_drafts: drafts computed on the host -> the target's next-step query (draft_tokens[b, 1..],
seq_lens_this_time[b]) with one upload and a few device ops, capped on the device exactly as ngram_match caps
its own drafts (the adaptive budget actual_draft_token_nums and the room left before max_dec_len), so no
device value is read back. Host proposers (suffix decoding) use it; it knows nothing about how drafts are made.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle

__all__ = ["write_host_drafts"]


def write_host_drafts(share_inputs: Mapping[str, paddle.Tensor], drafts: np.ndarray, num_drafts: np.ndarray,
                      idle: np.ndarray) -> None:
    """Per slot b: m = min(num_drafts[b], actual_draft_token_nums[b], max_dec_len[b] - step_idx[b] - 1), floored
    at 0; draft_tokens[b, 1:1 + m] = drafts[b, :m], -1 after them; seq_lens_this_time[b] = 0 if idle[b] else
    1 + m. Column 0 (the last accepted token) is not touched. Prefill rows get a value too: the host writes
    them again before the next step.

    Args:
        share_inputs: the target batch (draft_tokens [N, D] i64, seq_lens_this_time [N] i32,
            actual_draft_token_nums [N] i32, max_dec_len [N] i64, step_idx [N] i64).
        drafts: [N, D - 1] int64 host array, row b's first num_drafts[b] entries are its drafts.
        num_drafts: [N] host ints in 0..D - 1.
        idle: [N] host bools: stopped, paused or empty slots (L = 0).

    Example (D = 4): drafts [[7, 8, 9], [5, -1, -1]], num [3, 1], idle [F, F], budgets [2, 3], room [9, 0]
        -> draft_tokens[:, 1:] = [[7, 8, -1], [-1, -1, -1]], seq_lens_this_time = [3, 1].
    """
    t = share_inputs
    num_slots, width = t["draft_tokens"].shape
    k = width - 1
    if drafts.shape != (num_slots, k) or num_drafts.shape != (num_slots,) or idle.shape != (num_slots,):
        raise ValueError(f"write_host_drafts: drafts {drafts.shape}, num_drafts {num_drafts.shape}, idle "
                         f"{idle.shape}; expected ({num_slots}, {k}), ({num_slots},), ({num_slots},)")
    packed = np.concatenate([drafts.astype(np.int64), num_drafts.astype(np.int64)[:, None],
                             idle.astype(np.int64)[:, None]], axis=1)  # [N, k + 2]: one upload
    host = paddle.to_tensor(packed, place=t["draft_tokens"].place)
    room = (t["max_dec_len"] - t["step_idx"] - 1).clip(min=0)  # [N] i64
    m = paddle.minimum(paddle.minimum(host[:, k], t["actual_draft_token_nums"].astype("int64")), room)  # [N]
    cols = paddle.arange(k, dtype="int64").unsqueeze(0)  # [1, k]
    t["draft_tokens"][:, 1:] = paddle.where(cols < m.unsqueeze(1), host[:, :k], paddle.full_like(host[:, :k], -1))
    lens = paddle.where(host[:, k + 1] > 0, paddle.zeros_like(m), m + 1)
    paddle.assign(lens.astype("int32"), output=t["seq_lens_this_time"])
