// Framework-neutral launcher for get_padding_offset (see get_padding_offset.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Packs slot b's first L_b = max(seq_lens_this_time[b], 0) tokens into rows
// [cu_q[b], cu_q[b] + L_b) and fills rows [T, token_num_cpu) with -1, T = sum_b L_b.
//   input_ids           [N, max_seq_len] int64, N >= bsz, or NULL (index outputs only)
//   seq_lens_this_time  [bsz] int32
//   draft_tokens        [N, max_draft_tokens] int64, or NULL; given iff seq_lens_encoder is
//   seq_lens_encoder    [bsz] int32, or NULL; slot b reads draft_tokens when it is <= 0
//   ids_remove_padding  [token_num_cpu] int64; NULL exactly when input_ids is NULL
//   batch_id_per_token  [token_num_cpu] int32
//   cu_seqlens_q/k      [bsz + 1] int32, both the exclusive prefix sum of L_b
// Never reads or writes out of bounds: rows >= token_num_cpu are not written and a token
// index past the source row's width yields -1. Returns the cudaError_t as an int (0 on
// success; cudaErrorInvalidValue for negative sizes or an inconsistent set of NULLs).
int specworker_get_padding_offset_launch(const int64_t* input_ids, int max_seq_len,
                                         const int32_t* seq_lens_this_time,
                                         const int64_t* draft_tokens, int max_draft_tokens,
                                         const int32_t* seq_lens_encoder, int bsz,
                                         int token_num_cpu, int64_t* ids_remove_padding,
                                         int32_t* batch_id_per_token, int32_t* cu_seqlens_q,
                                         int32_t* cu_seqlens_k, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
