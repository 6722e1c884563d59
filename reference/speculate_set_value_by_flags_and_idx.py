"""numpy reference for speculate_set_value_by_flags_and_idx (docs/spec.md §3 pre_ids, §4.5 last item;
docs/spec.md §8.11), written as per-slot loops. Composable: state dict in, new state out.

Strict like the CPU op: an accept_num outside [0, D] raises ValueError. The CUDA kernel's
in-bounds behaviour on such values is checked with literal cases in tests/gpu, not here.
"""

import numpy as np

# Keys of the state dict. The target history buffer is "pre_ids" (docs/spec.md §3; the op's argument
# is FastDeploy's pre_ids_all).
READS = ("accept_tokens", "stop_flags", "seq_lens_this_time", "seq_lens_encoder", "step_idx")
WRITES = ("pre_ids", "accept_num", "seq_lens_decoder")


def ref_speculate_set_value_by_flags_and_idx(state: dict) -> dict:
    """Appends this step's accepted tokens to the history, then clears stopped slots.

    Returns a new dict; `state` is left untouched. Per-slot arrays may be [N] or [N, 1];
    bsz = len(seq_lens_this_time) slots are processed, rows past bsz are untouched.
    Per slot b with n = accept_num[b], S = pre_ids.shape[1]:
      1. History: if n > 0 and the slot holds a sequence (E != 0 or Dec != 0), then
         pre_ids[b, step_idx - j] = accept_tokens[b, n - 1 - j] for j < n, each write skipped
         when its position is < 1 (position 0 is unused) or >= S. This runs whatever the stop
         flag, so a slot that stopped in this step's verify keeps its final tokens.
      2. Stopped slot (stop_flags[b]): accept_num[b] = 0, Dec = 0.
    """
    out = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    pre_ids = out["pre_ids"]
    accept_num = out["accept_num"].reshape(-1)  # views into the copies: writes land in `out`
    dec = out["seq_lens_decoder"].reshape(-1)
    accept_tokens = np.asarray(state["accept_tokens"])
    stop = np.asarray(state["stop_flags"]).reshape(-1)
    enc = np.asarray(state["seq_lens_encoder"]).reshape(-1)
    step_idx = np.asarray(state["step_idx"]).reshape(-1)
    bsz = np.asarray(state["seq_lens_this_time"]).reshape(-1).shape[0]
    max_len, width = pre_ids.shape[1], accept_tokens.shape[1]

    for b in range(bsz):
        n = int(accept_num[b])
        if not 0 <= n <= width:
            raise ValueError(f"accept_num[{b}] = {n}, expected 0 <= accept_num <= D = {width}")
        if n > 0 and (enc[b] != 0 or dec[b] != 0):
            for j in range(n):
                pos = int(step_idx[b]) - j
                if 1 <= pos < max_len:
                    pre_ids[b, pos] = accept_tokens[b, n - 1 - j]
        if stop[b]:
            accept_num[b] = 0
            dec[b] = 0
    return out
