// Framework-neutral launcher for speculate_pre_process (see speculate_pre_process.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Everything pre_process needs in one launch: the input side of get_padding_offset, the
// per-slot logit rows O_b of speculate_get_seq_lens_output, and the output side of
// get_padding_offset(None, O, None, None, output_capacity), plus T_out on the device.
//   input_ids                 [N, max_seq_len] int64, N >= bsz (NULL only when max_seq_len == 0)
//   seq_lens_this_time        [bsz] int32, L_b
//   draft_tokens              [N, max_draft_tokens] int64, or NULL (non-speculative: every
//                             slot reads input_ids); slot b reads it when seq_lens_encoder[b] <= 0
//   seq_lens_encoder          [bsz] int32, E_b (required: it decides O_b)
//   ids_remove_padding        [token_num_cpu] int64;  batch_id_per_token [token_num_cpu] int32
//   cu_seqlens_q/k            [bsz + 1] int32, exclusive prefix sum of max(L_b, 0)
//   cu_seqlens_q_output       [bsz + 1] int32, exclusive prefix sum of O_b
//   batch_id_per_token_output [output_capacity] int32, -1 past T_out
//   real_output_token_num     [1] int32, T_out
//   seq_lens_output           [bsz] int32, O_b
// Bit-identical to the three unfused launches on every input, including the in-bounds
// handling of bad values (negative L_b counts as 0, rows past a capacity are not written,
// a token index past the source row's width yields -1). Returns the cudaError_t as an int
// (cudaErrorInvalidValue for negative sizes or a NULL where data would be read or written).
int specworker_speculate_pre_process_launch(
    const int64_t* input_ids, int max_seq_len, const int32_t* seq_lens_this_time,
    const int64_t* draft_tokens, int max_draft_tokens, const int32_t* seq_lens_encoder, int bsz,
    int token_num_cpu, int output_capacity, int64_t* ids_remove_padding,
    int32_t* batch_id_per_token, int32_t* cu_seqlens_q, int32_t* cu_seqlens_k,
    int32_t* cu_seqlens_q_output, int32_t* batch_id_per_token_output,
    int32_t* real_output_token_num, int32_t* seq_lens_output, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
