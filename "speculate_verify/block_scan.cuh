// Block-wide inclusive prefix sum of one int32 per thread (warp shuffles, then
// a scan of the warp totals). Header-only; no framework include.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

namespace specworker {

// All threads of the block must call it. scratch holds >= kThreads / 32 + 1 ints.
// Returns the thread's inclusive sum; *total receives the block's sum.
template <int kThreads>
__device__ __forceinline__ int32_t BlockInclusiveScan(int32_t v, int32_t* scratch,
                                                      int32_t* total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block must be whole warps");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t n = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += n;
  }
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int32_t w = lane < kWarps ? scratch[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int32_t n = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += n;
    }
    if (lane < kWarps) scratch[lane] = w;  // inclusive warp totals
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  const int32_t t = scratch[kWarps - 1];
  __syncthreads();  // scratch may be reused by the caller's next tile
  *total = t;
  return v;
}

}  // namespace specworker
