// Framework-neutral launcher for top_p_candidates (see top_p_candidates.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Per logit row t with slot b = batch_id_per_token_output[t]: the best (prob desc, id asc)
// entries of probs[t], at most C = candidates_len, up to the top-p candidate count.
//   probs [rows, vocab] f32, top_p [num_slots] f32, batch_id_per_token_output [>= rows] i32
//   -> verify_scores [rows, C] f32, verify_tokens [rows, C] i64, actual_candidate_lens [rows] i32.
// A NaN prob ranks as -inf. actual_candidate_lens[t] = smallest m in [1, min(C, vocab)] whose
// fp32 running sum of the first m scores is >= top_p[b], else min(C, vocab); only those m
// entries are written as candidates, every entry past them is token -1, score 0 (FastDeploy
// writes token 0 there; -1 cannot be mistaken for vocabulary id 0). Rows whose batch id is
// outside [0, num_slots) get length 0, so all their entries are -1 / 0.
// All pointers are device pointers. Needs rows >= 0, vocab >= 1, num_slots >= 0 and
// 1 <= candidates_len <= 100, else returns cudaErrorInvalidValue without launching.
// Returns the cudaError_t of the launch as an int (0 on success).
int specworker_top_p_candidates_launch(const float* probs, const float* top_p,
                                       const int32_t* batch_id_per_token_output, int rows,
                                       int vocab, int num_slots, int candidates_len,
                                       float* verify_scores, int64_t* verify_tokens,
                                       int32_t* actual_candidate_lens, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
