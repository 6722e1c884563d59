// The n-gram search of ngram_match and hybrid_mtp_ngram on CUDA (docs/spec.md §5.7, §5.8): one block
// searches one slot's history, read through an accessor so each kernel decides what the history is.
// Framework-neutral, device code only.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef SPECWORKER_NGRAM_MAX_SIZE
#define SPECWORKER_NGRAM_MAX_SIZE 64  // largest max_ngram_size (the suffix lives in shared memory)
#endif

namespace specworker_ngram {

constexpr int kThreads = 256;  // block size of every kernel that calls BlockContinuationStart
constexpr int kWarps = kThreads / 32;

// Max of v over the block; every thread gets the result. Called once by all threads of the block.
__device__ __forceinline__ long long BlockMax(long long v) {
  __shared__ long long warp_max[kWarps];
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  long long result = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) result = max(result, warp_max[w]);
  return result;
}

// Start of the continuation of the longest suffix of h[0 .. length) (n = max_ngram_size down to
// min_ngram_size) at its most recent earlier occurrence, or -1 (none, or search == false).
// Called once per kernel by all kThreads threads of the block with block-uniform arguments;
// h(x) is read for 0 <= x < length only.
// Each thread takes end positions e = tid, tid + kThreads, ... <= length - 2 (consecutive threads read
// consecutive tokens) and counts c(e), how many tokens h[e], h[e - 1], ... agree with the suffix
// h[length - 1], h[length - 2], ... (in shared memory), capped at max_ngram_size. The largest key
// (c << 32 | e) with c >= min_ngram_size is the answer of the n-descending, start-descending search:
// the largest capped c is the longest n that occurs earlier, the largest e its most recent occurrence.
template <class History>
__device__ long long BlockContinuationStart(const History& h, long long length, int max_ngram_size,
                                            int min_ngram_size, bool search) {
  __shared__ int64_t suffix[SPECWORKER_NGRAM_MAX_SIZE];  // suffix[j] = h[length - 1 - j]
  const int tid = threadIdx.x;
  const int max_n = static_cast<int>(min(static_cast<long long>(max_ngram_size), length));
  if (tid < max_n) suffix[tid] = h(length - 1 - tid);
  __syncthreads();
  long long key = -1;
  if (search) {
    for (long long e = tid; e <= length - 2; e += kThreads) {
      int c = 0;
      while (c < max_n && c <= e && h(e - c) == suffix[c]) ++c;
      if (c >= min_ngram_size) key = max(key, (static_cast<long long>(c) << 32) | e);
    }
  }
  key = BlockMax(key);
  return key < 0 ? -1 : (key & 0xffffffffLL) + 1;
}

}  // namespace specworker_ngram
