// speculate_set_value_by_flags_and_idx CUDA kernel: appends this step's accepted tokens to the
// target history pre_ids_all and clears accept_num / seq_lens_decoder of stopped slots.
//   in/out: pre_ids_all [>= bsz, S] i64, accept_num [>= bsz] i32, seq_lens_decoder [>= bsz] i32
//   in:     accept_tokens [>= bsz, D] i64, stop_flags [>= bsz] bool,
//           seq_lens_encoder [>= bsz] i32, step_idx [>= bsz] i64
// Parallelization: one thread per slot, 256 per block, ceil(bsz / 256) blocks, so any bsz
// works. A slot writes at most D (= k + 1, a handful) history entries, so a thread loops over
// them; slots never share a row. FastDeploy's version is one block of roundup32(bsz) threads
// (bsz <= 1024).
// Bounds: rows >= bsz are never touched; accept_num is clamped to [0, D] before it indexes
// accept_tokens (the CPU op raises instead) and a history position outside [1, S) is skipped.
#include "speculate_set_value_by_flags_and_idx.h"

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    SpeculateSetValueByFlagsAndIdxKernel(int64_t* __restrict__ pre_ids,
                                         const int64_t* __restrict__ accept_tokens,
                                         int32_t* __restrict__ accept_num,
                                         const bool* __restrict__ stop_flags,
                                         const int32_t* __restrict__ enc,
                                         int32_t* __restrict__ dec,
                                         const int64_t* __restrict__ step_idx, int bsz, int S,
                                         int D) {
  const int b = blockIdx.x * kThreads + threadIdx.x;
  if (b >= bsz) return;
  const int n = min(max(accept_num[b], 0), D);
  // Runs whatever the stop flag: a slot stopped by this step's verify keeps its last tokens.
  if (n > 0 && (enc[b] != 0 || dec[b] != 0)) {
    const long long step = step_idx[b];
    int64_t* history = pre_ids + static_cast<long long>(b) * S;
    const int64_t* accepted = accept_tokens + static_cast<long long>(b) * D;
    for (int j = 0; j < n; ++j) {
      const long long pos = step - j;
      if (pos >= 1 && pos < S) history[pos] = accepted[n - 1 - j];
    }
  }
  if (stop_flags[b]) {
    accept_num[b] = 0;
    dec[b] = 0;
  }
}

}  // namespace

extern "C" int specworker_speculate_set_value_by_flags_and_idx_launch(
    int64_t* pre_ids_all, const int64_t* accept_tokens, int32_t* accept_num,
    const bool* stop_flags, const int32_t* seq_lens_encoder, int32_t* seq_lens_decoder,
    const int64_t* step_idx, int bsz, int max_seq_len, int max_draft_tokens,
    cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || max_seq_len < 0 || max_draft_tokens < 0;
  const bool bad_ptrs =
      bsz > 0 && (accept_num == nullptr || stop_flags == nullptr || seq_lens_encoder == nullptr ||
                  seq_lens_decoder == nullptr || step_idx == nullptr ||
                  (accept_tokens == nullptr && max_draft_tokens > 0) ||
                  (pre_ids_all == nullptr && max_seq_len > 0));
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  if (bsz == 0) return static_cast<int>(cudaSuccess);
  const int blocks = bsz / kThreads + (bsz % kThreads != 0 ? 1 : 0);
  SpeculateSetValueByFlagsAndIdxKernel<<<blocks, kThreads, 0, stream>>>(
      pre_ids_all, accept_tokens, accept_num, stop_flags, seq_lens_encoder, seq_lens_decoder,
      step_idx, bsz, max_seq_len, max_draft_tokens);
  return static_cast<int>(cudaGetLastError());
}
