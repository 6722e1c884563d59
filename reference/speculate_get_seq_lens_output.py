"""numpy reference for speculate_get_seq_lens_output, written from docs/spec.md §4.2 as a per-slot loop."""

import numpy as np


def ref_speculate_get_seq_lens_output(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder):
    """O_b: 0 for an idle slot, 1 for one token or a prefill chunk, else L_b. Decoder lens unused."""
    lens = np.asarray(seq_lens_this_time).reshape(-1)
    enc = np.asarray(seq_lens_encoder).reshape(-1)
    out = np.zeros(lens.shape[0], dtype=np.int32)
    for b in range(lens.shape[0]):
        if lens[b] < 0:
            raise ValueError(f"seq_lens_this_time[{b}] = {lens[b]}")
        if lens[b] == 0:
            out[b] = 0
        elif lens[b] == 1 or enc[b] != 0:
            out[b] = 1
        else:
            out[b] = lens[b]
    return out
