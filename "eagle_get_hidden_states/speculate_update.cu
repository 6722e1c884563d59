// speculate_update CUDA kernel: commits one verified step to the per-slot lengths, the adaptive
// draft length and draft_tokens[:, 0], and sets the device flag not_need_stop, in one launch.
//   in/out: seq_lens_encoder, seq_lens_decoder, actual_draft_token_nums, mask_rollback (opt.)
//           [>= bsz] i32; draft_tokens [>= bsz, D] i64 (column 0); not_need_stop [1] bool
//   in:     accept_tokens [>= bsz, D] i64, accept_num [>= bsz] i32, stop_flags and
//           is_block_step [>= bsz] bool, seq_lens_this_time [bsz] i32, stop_nums [1] i64
// Parallelization: one thread per slot, 256 per block, ceil(bsz / 256) blocks (at least one),
// so any bsz works. Each slot's thread alone reads and writes row b; no slot depends on
// another. The stopped count needs only read-only inputs (stop_flags, is_block_step, bsz,
// max_bsz), so block 0 also computes it on its own (a strided loop over the bsz flags, then a
// warp-shuffle + shared-memory block reduction) and writes not_need_stop: no cross-block
// communication, no atomics, no scratch buffer, no host sync. FastDeploy's version is one
// block of 512 threads (bsz <= 512) and copies not_need_stop to the host and back.
// Bounds: rows >= bsz are never touched; accept_num is clamped to [0, D] before it indexes
// accept_tokens (the CPU op raises instead), so no access leaves the buffers.
#include "speculate_update.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Number of stopped slots in [0, max_bsz): paused or stopped live slots, plus the padding slots
// [bsz, max_bsz). Called by every thread of one block; the result is valid in thread 0.
__device__ __forceinline__ int CountStopped(const bool* __restrict__ stop_flags,
                                            const bool* __restrict__ is_block_step, int bsz,
                                            int max_bsz) {
  __shared__ int warp_sums[kWarps];
  int count = 0;
  for (int b = threadIdx.x; b < bsz; b += kThreads) {
    count += (stop_flags[b] || is_block_step[b]) ? 1 : 0;
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) count += __shfl_xor_sync(0xffffffffu, count, d);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = count;
  __syncthreads();
  int total = max_bsz - bsz;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
  return total;
}

__global__ void __launch_bounds__(kThreads)
    SpeculateUpdateKernel(int32_t* __restrict__ enc, int32_t* __restrict__ dec,
                          bool* __restrict__ not_need_stop, int64_t* __restrict__ draft_tokens,
                          int32_t* __restrict__ actual, const int64_t* __restrict__ accept_tokens,
                          const int32_t* __restrict__ accept_num,
                          const bool* __restrict__ stop_flags, const int32_t* __restrict__ lens,
                          const bool* __restrict__ is_block_step,
                          const int64_t* __restrict__ stop_nums, int32_t* __restrict__ rollback,
                          int bsz, int max_bsz, int D) {
  const int b = blockIdx.x * kThreads + threadIdx.x;
  if (b < bsz && !is_block_step[b]) {
    const int n = min(max(accept_num[b], 0), D);
    const bool stopped = stop_flags[b];
    const int32_t e = enc[b];
    if (e > 0) {  // the prefill (chunk) is now in the KV cache
      dec[b] += e;
      enc[b] = 0;
      if (rollback != nullptr) rollback[b] = 0;
    } else if (stopped) {
      if (rollback != nullptr) rollback[b] = 0;
    } else {  // running decode
      const int32_t len = lens[b];
      dec[b] += n;
      if (rollback != nullptr) rollback[b] = len - n;
      if (len > 1) {
        const int32_t a = actual[b];
        actual[b] = n - 1 == a ? min(a + 2, D - 1) : max(a - 1, 1);
      }
    }
    const long long row = static_cast<long long>(b) * D;
    if (n > 0) draft_tokens[row] = accept_tokens[row + n - 1];
  }
  if (blockIdx.x == 0) {
    const int num_stopped = CountStopped(stop_flags, is_block_step, bsz, max_bsz);
    if (threadIdx.x == 0) not_need_stop[0] = num_stopped < stop_nums[0];
  }
}

}  // namespace

extern "C" int specworker_speculate_update_launch(
    int32_t* seq_lens_encoder, int32_t* seq_lens_decoder, bool* not_need_stop,
    int64_t* draft_tokens, int32_t* actual_draft_token_nums, const int64_t* accept_tokens,
    const int32_t* accept_num, const bool* stop_flags, const int32_t* seq_lens_this_time,
    const bool* is_block_step, const int64_t* stop_nums, int32_t* mask_rollback, int bsz,
    int max_bsz, int max_draft_tokens, cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || max_bsz < bsz || max_draft_tokens < 1;
  // Per-slot pointers may be NULL only when there is no live slot to read them for.
  const bool bad_ptrs =
      not_need_stop == nullptr || stop_nums == nullptr ||
      (bsz > 0 && (seq_lens_encoder == nullptr || seq_lens_decoder == nullptr ||
                   draft_tokens == nullptr || actual_draft_token_nums == nullptr ||
                   accept_tokens == nullptr || accept_num == nullptr || stop_flags == nullptr ||
                   seq_lens_this_time == nullptr || is_block_step == nullptr));
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  const int blocks = max(1, bsz / kThreads + (bsz % kThreads != 0 ? 1 : 0));
  SpeculateUpdateKernel<<<blocks, kThreads, 0, stream>>>(
      seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens, actual_draft_token_nums,
      accept_tokens, accept_num, stop_flags, seq_lens_this_time, is_block_step, stop_nums,
      mask_rollback, bsz, max_bsz, max_draft_tokens);
  return static_cast<int>(cudaGetLastError());
}
