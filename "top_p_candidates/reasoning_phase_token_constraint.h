// Framework-neutral launcher for reasoning_phase_token_constraint (see the .cu file).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Two kernels on `stream`, in this order:
// 1. per slot b < bsz (skipped when stop_flags[b] or reasoning_status[b] == 3), with
//    t_k = pre_ids[b, step_idx[b] - k] (-1 when that position is outside [0, max_seq_len)):
//      0 -> 2  if !enable_thinking[b] && seq_lens_encoder[b] > 0 && step_idx[b] == 0,
//      else 0 -> 1 if think_end_id is one of t0..t3;
//      1 (also one just set) with step_idx[b] >= 3: -> 2 if (t3, t2, t1, t0) ==
//        (line_break_id, think_end_id, line_break_id, line_break_id), else -> 3 if none of
//        t0..t3 is think_end_id;
//      2 -> 3.
// 2. per logit row t with b = batch_id_per_token_output[t] in [0, bsz), t ==
//    cu_seqlens_q_output[b] (the slot's first row) and reasoning_status[b] == 2 (as updated by
//    step 1), when num_allowed > 0: logits[t, v] = -1e10 for every v that is not an
//    allowed_tokens id in [0, vocab); allowed entries keep their value.
//   logits [rows, vocab] f32 (in place), pre_ids [>= bsz, max_seq_len] i64,
//   stop_flags / enable_thinking [>= bsz] bool, seq_lens_encoder [bsz] i32,
//   step_idx [>= bsz] i64, allowed_tokens [num_allowed] i64,
//   reasoning_status [>= bsz] i32 (in place), batch_id_per_token_output [>= rows] i32,
//   cu_seqlens_q_output [bsz + 1] i32. All pointers are device pointers.
// Needs rows, vocab, bsz, max_seq_len, num_allowed >= 0, else returns cudaErrorInvalidValue
// without launching. Returns the cudaError_t of the launches as an int (0 on success).
int specworker_reasoning_phase_token_constraint_launch(
    float* logits, const int64_t* pre_ids, const bool* stop_flags,
    const int32_t* seq_lens_encoder, const int64_t* step_idx, const int64_t* allowed_tokens,
    int32_t* reasoning_status, const int32_t* batch_id_per_token_output,
    const int32_t* cu_seqlens_q_output, const bool* enable_thinking, int rows, int vocab,
    int bsz, int max_seq_len, int num_allowed, int64_t think_end_id, int64_t line_break_id,
    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
