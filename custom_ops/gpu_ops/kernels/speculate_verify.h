// Framework-neutral launcher for speculate_verify (see speculate_verify.cu). The mode constants
// are visible without CUDA so the CPU kernel (cpu_ops/speculate_verify.cc) shares them.
#pragma once
#include <stdint.h>

// verify_strategy: FastDeploy's VerifyStrategy values (TOPP = 0, GREEDY = 1, TARGET_MATCH = 2)
// plus ours (REJECTION = 3).
#define SPECWORKER_VERIFY_TOPP 0
#define SPECWORKER_VERIFY_GREEDY 1
#define SPECWORKER_VERIFY_TARGET_MATCH 2
#define SPECWORKER_VERIFY_REJECTION 3
// accept_policy (benchmark_mode and accept_all_drafts are folded in by the op before the launch).
#define SPECWORKER_ACCEPT_NORMAL 0
#define SPECWORKER_ACCEPT_ALL 1
#define SPECWORKER_REJECT_ALL 2

#if defined(__CUDACC__) || defined(SPECWORKER_WITH_CUDA)
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// Verifies the drafts of slots [0, bsz) and emits each slot's tokens, in place (device pointers).
//   sampled_token_ids    [num_rows] int64           target token sampled per output row
//   accept_tokens        [>= bsz, max_draft_tokens] int64   out: emitted tokens, then -1
//   accept_num           [>= bsz] int32             out: tokens emitted (0: slot not verified)
//   step_idx             [>= bsz] int64             in/out: +1 per emitted token
//   stop_flags           [>= bsz] bool              in/out: set on EOS / max_dec_len
//   seq_lens_encoder     [>= bsz] int32             > 0: prefill slot (accepts no draft)
//   draft_tokens         [>= bsz, max_draft_tokens] int64   [b, 0] last token, [b, 1..] drafts
//   seq_lens_this_time   [bsz] int32
//   verify_tokens        [num_rows, max_candidate_len] int64   top candidates, [r, 0] = top-1
//   verify_scores        [num_rows, max_candidate_len] float32
//   max_dec_len          [>= bsz] int64
//   end_tokens           [num_end_tokens] int64
//   is_block_step        [>= bsz] bool
//   cu_seqlens_q_output  [bsz + 1] int32            first output row of each slot
//   actual_candidate_len [num_rows] int32           topp reads only the first min(len, C) entries
//   topp                 [>= bsz] float32
//   target_probs         [num_rows, vocab_size] float32 or NULL (required by REJECTION)
//   draft_probs          [>= bsz, max_draft_tokens - 1, vocab_size] float32 or NULL (one-hot q)
//   infer_seed           [>= bsz] int64 or NULL (then slot b uses seed b)
//   reasoning_status     [>= bsz] int32 or NULL (status 1 accepts no draft)
// verify_window: FastDeploy's attribute, must be >= 0, has no effect (see speculate_verify.cu).
// Invalid sizes or modes return cudaErrorInvalidValue without launching; bsz == 0 launches nothing.
// Returns the cudaError_t of the launch as an int (0 on success).
int specworker_speculate_verify_launch(
    const int64_t* sampled_token_ids, int64_t* accept_tokens, int32_t* accept_num,
    int64_t* step_idx, bool* stop_flags, const int32_t* seq_lens_encoder,
    const int64_t* draft_tokens, const int32_t* seq_lens_this_time, const int64_t* verify_tokens,
    const float* verify_scores, const int64_t* max_dec_len, const int64_t* end_tokens,
    const bool* is_block_step, const int32_t* cu_seqlens_q_output,
    const int32_t* actual_candidate_len, const float* topp, const float* target_probs,
    const float* draft_probs, const int64_t* infer_seed, const int32_t* reasoning_status, int bsz,
    int max_draft_tokens, int num_rows, int max_candidate_len, int vocab_size, int num_end_tokens,
    int verify_window, int verify_strategy, int accept_policy, int enable_topp,
    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif  // __CUDACC__ || SPECWORKER_WITH_CUDA
