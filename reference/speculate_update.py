"""numpy reference for speculate_update (docs/spec.md §4.5 last item; docs/spec.md §8.10, era [B]
with the [C] fixes), written as per-slot loops. Composable: state dict in, new state dict out.

Strict like the CPU op: an accept_num outside [0, D] raises ValueError. The CUDA kernel's
in-bounds behaviour on such values is checked with literal cases in tests/gpu, not here.
"""

import numpy as np

# Keys of the state dict (the op's argument names; FastDeploy's buffer names).
READS = ("accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "is_block_step", "stop_nums")
WRITES = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
          "mask_rollback")


def ref_speculate_update(state: dict) -> dict:
    """One post-verify state update; returns a new dict, `state` is left untouched.

    state: per-slot arrays may be [N] or [N, 1] (kept as given). bsz = len(seq_lens_this_time)
    slots are live; stop_flags has N >= bsz rows and every row b >= bsz counts as stopped.
    "mask_rollback" is optional (absent or None: not computed). Other keys pass through.

    Per live slot b (E = seq_lens_encoder, Dec = seq_lens_decoder, L = seq_lens_this_time,
    n = accept_num, D = draft_tokens.shape[1]):
      paused (is_block_step)  -> nothing changes; counts as stopped.
      E > 0 (prefill chunk done, running or stopped) -> Dec += E, E = 0, mask_rollback = 0.
      stopped, E <= 0         -> Dec unchanged, mask_rollback = 0; counts as stopped.
      running decode          -> Dec += n, mask_rollback = L - n; if L > 1 the adaptive draft
                                 length grows by 2 (capped at D - 1) when every draft was
                                 accepted (n - 1 == actual_draft_token_nums), else shrinks by 1
                                 (floor 1).
      n > 0 (not paused)      -> draft_tokens[b, 0] = accept_tokens[b, n - 1].
    not_need_stop[0] = (#stopped < stop_nums[0]).
    """
    out = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    enc = out["seq_lens_encoder"].reshape(-1)  # views into the copies: writes land in `out`
    dec = out["seq_lens_decoder"].reshape(-1)
    actual = out["actual_draft_token_nums"].reshape(-1)
    rollback = None if out.get("mask_rollback") is None else out["mask_rollback"].reshape(-1)
    drafts = out["draft_tokens"]
    accept_tokens = np.asarray(state["accept_tokens"])
    accept_num = np.asarray(state["accept_num"]).reshape(-1)
    stop = np.asarray(state["stop_flags"]).reshape(-1)
    lens = np.asarray(state["seq_lens_this_time"]).reshape(-1)
    paused = np.asarray(state["is_block_step"]).reshape(-1)
    bsz, num_slots, width = lens.shape[0], stop.shape[0], drafts.shape[1]

    num_stopped = num_slots - bsz  # rows past bsz are padding
    for b in range(bsz):
        if paused[b]:
            num_stopped += 1
            continue
        n = int(accept_num[b])
        if not 0 <= n <= width:
            raise ValueError(f"accept_num[{b}] = {n}, expected 0 <= accept_num <= D = {width}")
        if stop[b]:
            num_stopped += 1
        if enc[b] > 0:
            dec[b] += enc[b]
            enc[b] = 0
            if rollback is not None:
                rollback[b] = 0
        elif stop[b]:
            if rollback is not None:
                rollback[b] = 0
        else:
            dec[b] += n
            if rollback is not None:
                rollback[b] = lens[b] - n
            if lens[b] > 1:
                if n - 1 == actual[b]:
                    actual[b] = min(actual[b] + 2, width - 1)
                else:
                    actual[b] = max(actual[b] - 1, 1)
        if n > 0:
            drafts[b, 0] = accept_tokens[b, n - 1]
    out["not_need_stop"].reshape(-1)[0] = num_stopped < int(np.asarray(state["stop_nums"]).reshape(-1)[0])
    return out
