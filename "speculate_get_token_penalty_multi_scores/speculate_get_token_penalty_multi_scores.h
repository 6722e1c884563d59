// Framework-neutral launcher for speculate_get_token_penalty_multi_scores (see the .cu file).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Element type of the logits, the launcher's logits_dtype argument.
enum {
  SPECWORKER_LOGITS_FLOAT32 = 0,
  SPECWORKER_LOGITS_FLOAT16 = 1,
  SPECWORKER_LOGITS_BFLOAT16 = 2,
};

// In place on logits [num_rows, vocab_size] (row-major, any 2-byte / 4-byte alignment); all
// pointers are device pointers. Per-slot arrays have >= bsz entries (N rows in the buffers):
//   pre_ids [N, max_history] int64; penalty/frequency/presence_scores, temperatures [N] float32;
//   bad_tokens [N, bad_width] int64; bad_tokens_len, cur_len, min_len [N] int64;
//   eos_token_id [num_eos] int64; batch_id_per_token_output [>= num_rows] int32;
//   cu_seqlens_q_output [bsz + 1] int32; draft_tokens [N, draft_width] int64 or NULL.
// Returns the cudaError_t of the launch as an int (0 on success); no launch when num_rows == 0.
int specworker_speculate_get_token_penalty_multi_scores_launch(
    const int64_t* pre_ids, void* logits, int logits_dtype, const float* penalty_scores,
    const float* frequency_scores, const float* presence_scores, const float* temperatures,
    const int64_t* bad_tokens, const int64_t* bad_tokens_len, const int64_t* cur_len,
    const int64_t* min_len, const int64_t* eos_token_id,
    const int32_t* batch_id_per_token_output, const int32_t* cu_seqlens_q_output,
    const int64_t* draft_tokens, int num_rows, int vocab_size, int bsz, int max_history,
    int bad_width, int num_eos, int draft_width, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
