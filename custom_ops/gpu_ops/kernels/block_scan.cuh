// Block-wide inclusive prefix scan (and the block reduction it yields) of one or several values
// per thread: warp shuffles, then one warp scans the warp totals. Every CUDA kernel that scans
// or sums across a block uses this one; header-only, no framework include.
#pragma once
#include <cuda_runtime.h>

namespace specworker {

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// Shared scratch for one scan of kValues values per thread over kThreads threads.
template <typename T, int kThreads, int kValues = 1>
struct BlockScanStorage {
  T warp[kValues][kThreads / 32];
};

// v[i] becomes the inclusive op-scan of v[i] over threads 0..threadIdx.x; total[i] gets the
// block's reduction of v[i]. identity is op's neutral element. All threads of the block must
// call it; storage may be reused as soon as it returns. It synchronizes the block, so shared
// memory written before the call is visible to every thread after it.
template <int kThreads, typename T, int kValues, typename Op>
__device__ __forceinline__ void BlockInclusiveScan(T (&v)[kValues], T (&total)[kValues],
                                                   BlockScanStorage<T, kThreads, kValues>& storage,
                                                   Op op, T identity) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block must be whole warps");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      const T n = __shfl_up_sync(0xffffffffu, v[i], d);
      if (lane >= d) v[i] = op(n, v[i]);
    }
  }
  if (lane == 31) {
#pragma unroll
    for (int i = 0; i < kValues; ++i) storage.warp[i][warp] = v[i];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      T w = lane < kWarps ? storage.warp[i][lane] : identity;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const T n = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w = op(n, w);
      }
      if (lane < kWarps) storage.warp[i][lane] = w;  // inclusive warp totals
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kValues; ++i) {
    if (warp > 0) v[i] = op(storage.warp[i][warp - 1], v[i]);
    total[i] = storage.warp[i][kWarps - 1];
  }
  __syncthreads();  // the caller's next scan overwrites storage
}

// One value per thread; returns its inclusive op-scan, *total gets the block's reduction.
template <int kThreads, typename T, typename Op = SumOp>
__device__ __forceinline__ T BlockInclusiveScan(T v, BlockScanStorage<T, kThreads, 1>& storage,
                                                T* total, Op op = Op(), T identity = T(0)) {
  T vs[1] = {v};
  T ts[1];
  BlockInclusiveScan<kThreads>(vs, ts, storage, op, identity);
  *total = ts[0];
  return vs[0];
}

// Block sums of v[0..kValues), returned in v to every thread (the scan's totals).
template <int kThreads, typename T, int kValues>
__device__ __forceinline__ void BlockSum(T (&v)[kValues],
                                         BlockScanStorage<T, kThreads, kValues>& storage) {
  T total[kValues];
  BlockInclusiveScan<kThreads>(v, total, storage, SumOp(), T(0));
#pragma unroll
  for (int i = 0; i < kValues; ++i) v[i] = total[i];
}

}  // namespace specworker
