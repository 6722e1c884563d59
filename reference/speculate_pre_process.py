"""numpy reference for speculate_pre_process: the unfused path's references composed as docs/spec.md §4.3
states it (get_padding_offset, speculate_get_seq_lens_output, index-only get_padding_offset)."""

import numpy as np

from reference.get_padding_offset import ref_get_padding_offset
from reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output


def ref_speculate_pre_process(token_num_cpu, input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder,
                              seq_lens_decoder):
    """Returns a dict keyed by the op's output names (numpy arrays). Strict: raises ValueError for
    inputs the CPU op rejects (L_b < 0, T > token_num_cpu, T_out > bsz * D, a row past a source width)."""
    encoder = np.asarray(seq_lens_encoder).reshape(-1)
    ids, batch_id, cu_q, cu_k = ref_get_padding_offset(
        input_ids, seq_lens_this_time, draft_tokens, None if draft_tokens is None else encoder, token_num_cpu)
    seq_lens_output = ref_speculate_get_seq_lens_output(seq_lens_this_time, encoder, seq_lens_decoder)
    width = 1 if draft_tokens is None else draft_tokens.shape[1]
    _, batch_id_out, cu_out, _ = ref_get_padding_offset(None, seq_lens_output, None, None, encoder.shape[0] * width)
    return {
        "ids_remove_padding": ids,
        "batch_id_per_token": batch_id,
        "cu_seqlens_q": cu_q,
        "cu_seqlens_k": cu_k,
        "cu_seqlens_q_output": cu_out,
        "batch_id_per_token_output": batch_id_out,
        "real_output_token_num": cu_out[-1:].copy(),
        "seq_lens_output": seq_lens_output,
    }
