"""numpy reference for draft_model_postprocess, written from docs/spec.md §5 and docs/spec.md §8.15
([ours]: drafts counted only up to the first -1; a gap raises when strict; a paused slot gets
L = 0, docs/spec.md §1 / §2.2 item 10) as a per-slot loop.

Composable: the state is a dict holding the op's inputs under its argument names (STATE_KEYS);
returns a new dict (input untouched, other keys passed through).
"""

from __future__ import annotations

import numpy as np

STATE_KEYS = (
    "base_model_draft_tokens",  # [N, D] int64, the target's draft_tokens
    "base_model_seq_lens_this_time",  # [bsz] int32, the only one written
    "base_model_seq_lens_encoder",  # [bsz] int32
    "base_model_stop_flags",  # [bsz] bool
    "base_model_is_block_step",  # [bsz] bool, optional (absent or None: FastDeploy's op)
)


def ref_draft_model_postprocess(state: dict, *, strict: bool = True) -> dict:
    """Sets the target's L per slot: stopped or paused 0, prefill untouched, decode 1 +
    contiguous drafts.

    strict: raise ValueError, like the CPU op, on a running decode slot whose column 0 is -1 or
    whose drafts have a gap; False counts the contiguous prefix, as the CUDA kernel does.
    """
    new = dict(state)
    new["base_model_seq_lens_this_time"] = np.array(state["base_model_seq_lens_this_time"], copy=True)
    lens = new["base_model_seq_lens_this_time"].reshape(-1)
    drafts = np.asarray(state["base_model_draft_tokens"])
    enc = np.asarray(state["base_model_seq_lens_encoder"]).reshape(-1)
    stop = np.asarray(state["base_model_stop_flags"]).reshape(-1)
    paused = state.get("base_model_is_block_step")
    paused = np.zeros_like(stop) if paused is None else np.asarray(paused).reshape(-1)
    for b in range(lens.shape[0]):
        if stop[b] or paused[b]:
            lens[b] = 0
            continue
        if enc[b] > 0:  # prefill: the scheduler decides the next chunk
            continue
        row = [int(x) for x in drafts[b]]
        n = 1
        while n < len(row) and row[n] != -1:
            n += 1
        if strict:
            if row[0] == -1:
                raise ValueError(f"decode slot {b}: base_model_draft_tokens[{b}, 0] = -1")
            late = [j for j in range(n + 1, len(row)) if row[j] != -1]
            if late:
                raise ValueError(f"slot {b} has a gap: column {n} is -1 but column {late[0]} holds {row[late[0]]}")
        lens[b] = n
    return new
