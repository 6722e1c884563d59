// draft_model_update CUDA kernel: the draft state update after one MTP sampling substep s
// (docs/spec.md §5; docs/spec.md §8.14, era [B] row starts from cu_seqlens_q_output, with era-[C] fixes).
//
// Per slot b < bsz (rows of slot b: [cu[b], cu[b + 1]), cu = cu_seqlens_q_output):
//   stopped (stop_flags[b], also paused slots): draft_tokens[b, 0] = -1,
//     base_model_draft_tokens[b, s + 1] = -1, L = 0, E = 0.
//   running: token = inter_next_tokens[cu[b + 1] - 1] (the slot's last row: the last accepted
//     position on decode, the single row of a prefill); then
//       prefill (E > 0): Dec += E, E = 0, step_idx += 1;
//       decode  (E <= 0): Dec += L, step_idx += L;
//     pre_ids[b, step_idx] = token when 0 <= step_idx < pre_ids_width;
//     if step_idx < max_dec_len[b]: draft_tokens[b, 0] = base_model_draft_tokens[b, s + 1] = token,
//       L = 1;
//     else the token is generated token step_idx + 1 > max_dec_len, which the target can never
//       emit: -1 in both places and the slot stops (stop_flags = true, L = 0, E = 0).
//   A draft EOS does not stop the slot (era [C]; verification decides stopping).
// *not_need_stop = some slot b < bsz is running afterwards.
//
// Bad values: the CPU op raises for a running slot without a row inside inter_next_tokens; this
// kernel cannot raise without a host sync, so such a slot proposes -1 and stops instead.
//
// Parallelization: a cudaMemsetAsync zeroes not_need_stop, then one thread per slot over a grid
// of kThreads-thread blocks (any bsz); each block ORs its "still running" flags with
// __syncthreads_or and one thread of a block with a running slot stores true (every store
// writes the same value, so the race is benign). Capturable in a CUDA graph.
#include "draft_model_update.h"

namespace {

constexpr int kThreads = 256;

struct UpdateArgs {
  const int64_t* next_tokens;
  int rows;
  int64_t* draft_tokens;
  int draft_width;
  int64_t* pre_ids;
  int pre_ids_width;
  int32_t* lens;
  int32_t* enc;
  int32_t* dec;
  int64_t* step_idx;
  const int32_t* cu;
  bool* stop;
  bool* not_need_stop;
  const int64_t* max_dec_len;
  int64_t* base_drafts;
  int base_width;
  int bsz;
  int substep;
};

// Returns whether slot b is still running.
__device__ bool UpdateSlot(const UpdateArgs& a, int b) {
  int64_t* proposal = a.base_drafts + static_cast<int64_t>(b) * a.base_width + a.substep + 1;
  int64_t* next_input = a.draft_tokens + static_cast<int64_t>(b) * a.draft_width;
  const int32_t start = a.cu[b], end = a.cu[b + 1];
  const bool has_row = start >= 0 && end > start && end <= a.rows;
  if (a.stop[b] || !has_row) {
    *next_input = -1;
    *proposal = -1;
    a.stop[b] = true;  // already set, or (no row) the bounds-check fallback
    a.lens[b] = 0;
    a.enc[b] = 0;
    return false;
  }
  const int64_t token = a.next_tokens[end - 1];
  int64_t step = a.step_idx[b];
  if (a.enc[b] > 0) {
    a.dec[b] += a.enc[b];
    a.enc[b] = 0;
    step += 1;
  } else {
    a.dec[b] += a.lens[b];
    step += a.lens[b];
  }
  a.step_idx[b] = step;
  if (step >= 0 && step < a.pre_ids_width) {
    a.pre_ids[static_cast<int64_t>(b) * a.pre_ids_width + step] = token;
  }
  const bool verifiable = step < a.max_dec_len[b];
  *next_input = verifiable ? token : -1;
  *proposal = verifiable ? token : -1;
  a.lens[b] = verifiable ? 1 : 0;
  if (!verifiable) a.stop[b] = true;
  return verifiable;
}

__global__ void DraftModelUpdateKernel(UpdateArgs a) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  const bool running = b < a.bsz && UpdateSlot(a, b);
  if (__syncthreads_or(running) && threadIdx.x == 0) *a.not_need_stop = true;
}

}  // namespace

extern "C" int specworker_draft_model_update_launch(
    const int64_t* inter_next_tokens, int rows, int64_t* draft_tokens, int draft_width,
    int64_t* pre_ids, int pre_ids_width, int32_t* seq_lens_this_time, int32_t* seq_lens_encoder,
    int32_t* seq_lens_decoder, int64_t* step_idx, const int32_t* cu_seqlens_q_output,
    bool* stop_flags, bool* not_need_stop, const int64_t* max_dec_len,
    int64_t* base_model_draft_tokens, int base_width, int bsz, int substep,
    cudaStream_t stream) {
  if (bsz < 0 || rows < 0 || draft_width < 1 || pre_ids_width < 0 || substep < 0 ||
      substep + 1 >= base_width) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  cudaError_t err = cudaMemsetAsync(not_need_stop, 0, sizeof(bool), stream);
  if (err != cudaSuccess || bsz == 0) return static_cast<int>(err);
  const UpdateArgs args{inter_next_tokens, rows, draft_tokens, draft_width, pre_ids,
                        pre_ids_width, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder,
                        step_idx, cu_seqlens_q_output, stop_flags, not_need_stop, max_dec_len,
                        base_model_draft_tokens, base_width, bsz, substep};
  const int blocks = (bsz + kThreads - 1) / kThreads;
  DraftModelUpdateKernel<<<blocks, kThreads, 0, stream>>>(args);
  return static_cast<int>(cudaGetLastError());
}
