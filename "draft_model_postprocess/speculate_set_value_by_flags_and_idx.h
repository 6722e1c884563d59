// Framework-neutral launcher for speculate_set_value_by_flags_and_idx (see the .cu and
// custom_ops/cpu_ops/speculate_set_value_by_flags_and_idx.cc for the semantics).
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// In place, slot b < bsz, n = clamp(accept_num[b], 0, max_draft_tokens):
//   if n > 0 and (seq_lens_encoder[b] != 0 or seq_lens_decoder[b] != 0):
//     pre_ids_all[b, step_idx[b] - j] = accept_tokens[b, n - 1 - j] for j < n, skipping
//     positions < 1 or >= max_seq_len;
//   then if stop_flags[b]: accept_num[b] = 0, seq_lens_decoder[b] = 0.
//   pre_ids_all    [>= bsz, max_seq_len] int64
//   accept_tokens  [>= bsz, max_draft_tokens] int64
//   accept_num, seq_lens_encoder, seq_lens_decoder [>= bsz] int32; stop_flags [>= bsz] bool;
//   step_idx [>= bsz] int64
// Rows >= bsz are never read or written. Returns the cudaError_t as an int (0 on success;
// cudaErrorInvalidValue for negative sizes or a NULL pointer while bsz > 0).
int specworker_speculate_set_value_by_flags_and_idx_launch(
    int64_t* pre_ids_all, const int64_t* accept_tokens, int32_t* accept_num,
    const bool* stop_flags, const int32_t* seq_lens_encoder, int32_t* seq_lens_decoder,
    const int64_t* step_idx, int bsz, int max_seq_len, int max_draft_tokens,
    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
