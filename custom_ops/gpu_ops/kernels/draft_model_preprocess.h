// Framework-neutral launcher for draft_model_preprocess (see draft_model_preprocess.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Derives the draft's state from the target's after verification, in place (docs/spec.md §5; FastDeploy
// era [C] "shadow state"). Row buffers are [rows >= bsz, width] row-major with the width given
// next to them; per-slot buffers are [bsz] (all device pointers).
//   updated: draft_tokens, input_ids, stop_flags, seq_lens_this_time, seq_lens_encoder,
//            seq_lens_decoder, step_idx, not_need_stop [1], pre_ids, target_model_draft_tokens
//   read:    accept_tokens, accept_num, target_model_seq_lens_decoder, target_model_step_idx,
//            target_model_stop_flags, max_dec_len, target_model_is_block_step (NULL: none paused)
// Flags are ints (0 / non-zero). num_model_steps >= 1. not_need_stop is zeroed with a
// cudaMemsetAsync and set by the kernel, so it is correct for bsz = 0 too.
// Returns the cudaError_t of the launch as an int (0 on success; cudaErrorInvalidValue for
// negative sizes, num_model_steps < 1, or a NULL pointer that would be used).
int specworker_draft_model_preprocess_launch(
    int64_t* draft_tokens, int draft_tokens_len, int64_t* input_ids, int input_ids_len,
    bool* stop_flags, int32_t* seq_lens_this_time, int32_t* seq_lens_encoder,
    int32_t* seq_lens_decoder, int64_t* step_idx, bool* not_need_stop, int64_t* pre_ids,
    int pre_ids_len, const int64_t* accept_tokens, int accept_tokens_len,
    const int32_t* accept_num, const int32_t* target_model_seq_lens_decoder,
    const int64_t* target_model_step_idx, const bool* target_model_stop_flags,
    const int64_t* max_dec_len, int64_t* target_model_draft_tokens,
    int target_model_draft_tokens_len, const bool* target_model_is_block_step, int bsz,
    int num_model_steps, int is_splitwise_prefill, int truncate_first_token,
    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
