// draft_model_postprocess CUDA kernel: sets the target's seq_lens_this_time from the drafts the
// proposer wrote (docs/spec.md §5; docs/spec.md §8.15).
//   base_model_draft_tokens [>= bsz, width] int64: column 0 the last accepted token, columns
//     1 .. the drafts, -1 = no draft; seq_lens_this_time [bsz] int32, in place;
//   seq_lens_encoder [bsz] int32; stop_flags [bsz] bool; is_block_step [bsz] bool or nullptr.
// Per slot: stopped or paused -> L = 0; prefill (E > 0) -> untouched; decode -> L = 1 + the
// drafts before the first -1 in columns 1 ... Drafts must be contiguous: the CPU op raises on a
// gap (a -1 followed by a draft); this kernel cannot raise without a host sync, so it counts the
// contiguous prefix only and the drafts after the gap are never fed (FastDeploy counted every
// non -1 entry, which feeds the -1 itself as a token).
// Parallelization: one thread per slot over a grid of kThreads-thread blocks (any bsz); each
// thread walks its row's width (D = k + 1 columns, a handful).
#include "draft_model_postprocess.h"

namespace {

constexpr int kThreads = 256;

__global__ void DraftModelPostprocessKernel(const int64_t* __restrict__ drafts, int width,
                                            int32_t* __restrict__ lens,
                                            const int32_t* __restrict__ enc,
                                            const bool* __restrict__ stop,
                                            const bool* __restrict__ paused, int bsz) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= bsz) return;
  if (stop[b] || (paused != nullptr && paused[b])) {
    lens[b] = 0;
    return;
  }
  if (enc[b] > 0) return;
  const int64_t* row = drafts + static_cast<int64_t>(b) * width;
  int n = 1;
  while (n < width && row[n] != -1) ++n;
  lens[b] = n;
}

}  // namespace

extern "C" int specworker_draft_model_postprocess_launch(const int64_t* base_model_draft_tokens,
                                                         int width, int32_t* seq_lens_this_time,
                                                         const int32_t* seq_lens_encoder,
                                                         const bool* stop_flags,
                                                         const bool* is_block_step, int bsz,
                                                         cudaStream_t stream) {
  if (bsz < 0 || width < 1) return static_cast<int>(cudaErrorInvalidValue);
  if (bsz == 0) return static_cast<int>(cudaSuccess);
  const int blocks = (bsz + kThreads - 1) / kThreads;
  DraftModelPostprocessKernel<<<blocks, kThreads, 0, stream>>>(
      base_model_draft_tokens, width, seq_lens_this_time, seq_lens_encoder, stop_flags,
      is_block_step, bsz);
  return static_cast<int>(cudaGetLastError());
}
