// speculate_get_seq_lens_output CUDA kernel (docs/spec.md §4.2): logit rows per slot.
//   in:  seq_lens_this_time [bsz] i32 (L_b), seq_lens_encoder [bsz] i32 (E_b)
//   out: seq_lens_output [bsz] i32: 0 if L_b <= 0; 1 if L_b == 1 or E_b != 0; else L_b
// Parallelization: one thread per slot, grid-stride over slots, so any bsz takes one launch.
#include "speculate_get_seq_lens_output.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

__global__ void SpeculateGetSeqLensOutputKernel(const int32_t* __restrict__ lens,
                                                const int32_t* __restrict__ enc, int bsz,
                                                int32_t* __restrict__ out) {
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bsz; b += gridDim.x * blockDim.x) {
    const int32_t n = lens[b];
    // A negative length (CPU raises) gets no rows, like a stopped slot.
    out[b] = n <= 0 ? 0 : (n == 1 || enc[b] != 0) ? 1 : n;
  }
}

}  // namespace

extern "C" int specworker_speculate_get_seq_lens_output_launch(const int32_t* seq_lens_this_time,
                                                               const int32_t* seq_lens_encoder,
                                                               int bsz, int32_t* seq_lens_output,
                                                               cudaStream_t stream) {
  if (bsz < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (bsz == 0) return static_cast<int>(cudaSuccess);
  const long long needed = (static_cast<long long>(bsz) + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(min(needed, static_cast<long long>(kMaxBlocks)));
  SpeculateGetSeqLensOutputKernel<<<blocks, kThreads, 0, stream>>>(
      seq_lens_this_time, seq_lens_encoder, bsz, seq_lens_output);
  return static_cast<int>(cudaGetLastError());
}
