// reasoning_phase_token_constraint CUDA kernels: the per-slot reasoning status machine, then
// the allowed-token mask on the first logit row of each slot that just entered status 2.
//   logits [rows, V] f32 (in place), reasoning_status [N] i32 (in place); the other inputs are
//   read-only (shapes in reasoning_phase_token_constraint.h).
// Parallelization: two kernels on one stream. UpdateStatusKernel: one thread per slot, grid
// over bsz, so each slot's status is written exactly once. EnforceKernel: one block of 256
// threads per logit row, launched after it, so every row reads the updated status (stream
// order is the only synchronisation needed; no host sync). A constrained row is processed in
// vocab tiles of 32768 ids: the block marks the allowed ids of the tile in a shared bitmap,
// then writes -1e10 to every unmarked entry. Allowed entries are never written, so they keep
// their values without a copy of the logits (FastDeploy copies the whole logits tensor per
// call); the cost is O(V + A * ceil(V / 32768)) per constrained row, for any A and V.
// Bounds: a history position outside [0, max_seq_len) reads as -1 (FastDeploy reads past the
// row), a batch id outside [0, bsz) skips the row (the CPU op raises), allowed ids outside
// [0, V) are ignored. The grid covers the logits rows only, so an output index describing more
// rows than logits has (cu_seqlens_q_output[bsz] > rows: the CPU op raises) reads and writes
// nothing past the tensor; such a slot's first row simply does not exist here.
#include "reasoning_phase_token_constraint.h"

namespace {

constexpr int kSlotThreads = 256;
constexpr int kRowThreads = 256;
constexpr int kTile = 32768;  // vocab ids per bitmap tile (4 KiB of shared memory)
constexpr int kTileWords = kTile / 32;
constexpr float kMasked = -1e10f;

__device__ __forceinline__ int64_t HistoryAt(const int64_t* row, int64_t pos, int max_seq_len) {
  return (pos >= 0 && pos < max_seq_len) ? row[pos] : -1;
}

__global__ void UpdateStatusKernel(const int64_t* __restrict__ pre_ids,
                                   const bool* __restrict__ stop_flags,
                                   const int32_t* __restrict__ seq_lens_encoder,
                                   const int64_t* __restrict__ step_idx,
                                   const bool* __restrict__ enable_thinking,
                                   int32_t* __restrict__ reasoning_status, int bsz,
                                   int max_seq_len, int64_t think_end_id,
                                   int64_t line_break_id) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= bsz) return;
  const int32_t status = reasoning_status[b];
  if (stop_flags[b] || status == 3) return;
  const int64_t step = step_idx[b];
  const int64_t* history = pre_ids + static_cast<int64_t>(b) * max_seq_len;
  const int64_t t0 = HistoryAt(history, step, max_seq_len);
  const int64_t t1 = HistoryAt(history, step - 1, max_seq_len);
  const int64_t t2 = HistoryAt(history, step - 2, max_seq_len);
  const int64_t t3 = HistoryAt(history, step - 3, max_seq_len);
  const bool end_seen =
      t0 == think_end_id || t1 == think_end_id || t2 == think_end_id || t3 == think_end_id;

  int32_t next = status;
  if (status == 0) {
    if (!enable_thinking[b] && seq_lens_encoder[b] > 0 && step == 0) {
      next = 2;  // first token of a request that does not think
    } else if (end_seen) {
      next = 1;
    }
  }
  if (next == 1 && step >= 3) {  // also a status set to 1 just above
    if (t3 == line_break_id && t2 == think_end_id && t1 == line_break_id &&
        t0 == line_break_id) {
      next = 2;
    } else if (!end_seen) {
      next = 3;  // the boundary pattern was abandoned
    }
  } else if (status == 2) {
    next = 3;  // the constraint is one-shot
  }
  reasoning_status[b] = next;
}

__global__ void __launch_bounds__(kRowThreads)
    EnforceKernel(float* __restrict__ logits, const int64_t* __restrict__ allowed_tokens,
                  const int32_t* __restrict__ reasoning_status,
                  const int32_t* __restrict__ batch_id_per_token_output,
                  const int32_t* __restrict__ cu_seqlens_q_output, int vocab, int bsz,
                  int num_allowed) {
  __shared__ uint32_t keep[kTileWords];
  const int row = blockIdx.x;
  const int b = batch_id_per_token_output[row];
  // Uniform per block: either the whole block returns here or none of it does.
  if (b < 0 || b >= bsz || cu_seqlens_q_output[b] != row || reasoning_status[b] != 2) return;
  float* x = logits + static_cast<size_t>(row) * vocab;
  for (int64_t tile0 = 0; tile0 < vocab; tile0 += kTile) {
    const int tile_len = static_cast<int>(min(static_cast<int64_t>(kTile), vocab - tile0));
    for (int w = threadIdx.x; w < kTileWords; w += kRowThreads) keep[w] = 0u;
    __syncthreads();
    for (int a = threadIdx.x; a < num_allowed; a += kRowThreads) {
      const int64_t local = allowed_tokens[a] - tile0;
      if (local >= 0 && local < tile_len) {
        atomicOr(&keep[local >> 5], 1u << (local & 31));
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < tile_len; i += kRowThreads) {
      if (!((keep[i >> 5] >> (i & 31)) & 1u)) x[tile0 + i] = kMasked;
    }
    __syncthreads();  // the next tile clears the bitmap
  }
}

}  // namespace

extern "C" int specworker_reasoning_phase_token_constraint_launch(
    float* logits, const int64_t* pre_ids, const bool* stop_flags,
    const int32_t* seq_lens_encoder, const int64_t* step_idx, const int64_t* allowed_tokens,
    int32_t* reasoning_status, const int32_t* batch_id_per_token_output,
    const int32_t* cu_seqlens_q_output, const bool* enable_thinking, int rows, int vocab,
    int bsz, int max_seq_len, int num_allowed, int64_t think_end_id, int64_t line_break_id,
    cudaStream_t stream) {
  if (rows < 0 || vocab < 0 || bsz < 0 || max_seq_len < 0 || num_allowed < 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (bsz > 0) {
    const int blocks = (bsz + kSlotThreads - 1) / kSlotThreads;
    UpdateStatusKernel<<<blocks, kSlotThreads, 0, stream>>>(
        pre_ids, stop_flags, seq_lens_encoder, step_idx, enable_thinking, reasoning_status, bsz,
        max_seq_len, think_end_id, line_break_id);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  if (rows > 0 && vocab > 0 && bsz > 0 && num_allowed > 0) {
    EnforceKernel<<<rows, kRowThreads, 0, stream>>>(logits, allowed_tokens, reasoning_status,
                                                    batch_id_per_token_output,
                                                    cu_seqlens_q_output, vocab, bsz,
                                                    num_allowed);
    return static_cast<int>(cudaGetLastError());
  }
  return static_cast<int>(cudaSuccess);
}
