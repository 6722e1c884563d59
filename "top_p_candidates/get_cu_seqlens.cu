// get_cu_seqlens CUDA kernel: one block; threads walk the slots in tiles of
// blockDim, each tile scanned with the block_scan helper and carried forward,
// so any bsz works with one launch.
#include "get_cu_seqlens.h"
#include "block_scan.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void GetCuSeqlensKernel(const int32_t* __restrict__ seq_lens, int bsz,
                                   int32_t* __restrict__ cu) {
  __shared__ int32_t scratch[kThreads / 32 + 1];
  int32_t carry = 0;
  if (threadIdx.x == 0) cu[0] = 0;
  for (int base = 0; base < bsz; base += kThreads) {
    const int b = base + threadIdx.x;
    const int32_t len = b < bsz ? max(seq_lens[b], 0) : 0;
    int32_t total;
    const int32_t incl = specworker::BlockInclusiveScan<kThreads>(len, scratch, &total);
    if (b < bsz) cu[b + 1] = carry + incl;
    carry += total;
  }
}

}  // namespace

extern "C" int specworker_get_cu_seqlens_launch(const int32_t* seq_lens, int bsz,
                                                int32_t* cu_seqlens, cudaStream_t stream) {
  if (bsz < 0) return static_cast<int>(cudaErrorInvalidValue);
  GetCuSeqlensKernel<<<1, kThreads, 0, stream>>>(seq_lens, bsz, cu_seqlens);
  return static_cast<int>(cudaGetLastError());
}
