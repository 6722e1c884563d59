// top_p_candidates CUDA kernel: exact top-C of every logit row in one pass over the row.
//   probs [rows, V] f32, top_p [N] f32, batch_id_per_token_output [>= rows] i32
//   -> verify_scores [rows, C] f32, verify_tokens [rows, C] i64, actual_candidate_lens [rows] i32.
// Parallelization: one block of 256 threads per row. Each thread streams a strided slice of
// the row (float4 loads, four in flight) and keeps its own top-K in registers, sorted by the
// total order (prob desc, id asc); K is C rounded up to a compiled size. Each warp then drains
// its 32 lists with C rounds of a shuffle arg-max (the owner of the winning head pops it) into
// shared memory, and warp 0 merges the 8 warp lists the same way, writes the candidates and
// accumulates their fp32 sum in candidate order for the top-p length; entries past that length
// are written as token -1, score 0 (not candidates; see cpu_ops/top_p_candidates.cc for why -1
// rather than FastDeploy's 0). Because every stage ranks by the same total order, the result is
// exact and independent of the thread split.
// Bounds: a batch id outside [0, N) marks the row as skipped (the CPU op raises instead).
#include "top_p_candidates.h"

#include <limits.h>
#include <math.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // float4 loads in flight per thread
constexpr int kMaxCandidates = 100;
constexpr int kNoId = INT_MAX;  // id of an empty list entry: ranks after every real id
constexpr unsigned kFullMask = 0xffffffffu;

// True when (p, i) ranks before (q, j): larger prob first, then smaller id.
__device__ __forceinline__ bool Before(float p, int i, float q, int j) {
  return p > q || (p == q && i < j);
}

__device__ __forceinline__ float Canonical(float p) { return isnan(p) ? -INFINITY : p; }

// The K best entries seen so far, best first, in registers (all indices are compile-time).
template <int K>
struct TopList {
  float p[K];
  int id[K];

  __device__ __forceinline__ void Clear() {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      p[j] = -INFINITY;
      id[j] = kNoId;
    }
  }

  __device__ __forceinline__ void Push(float q, int i) {
    if (!Before(q, i, p[K - 1], id[K - 1])) return;  // the common case after warm-up
    p[K - 1] = q;
    id[K - 1] = i;
#pragma unroll
    for (int j = K - 1; j > 0; --j) {  // one bubble pass re-sorts the list
      if (Before(p[j], id[j], p[j - 1], id[j - 1])) {
        const float tp = p[j];
        p[j] = p[j - 1];
        p[j - 1] = tp;
        const int ti = id[j];
        id[j] = id[j - 1];
        id[j - 1] = ti;
      }
    }
  }

  __device__ __forceinline__ void PopFront() {
#pragma unroll
    for (int j = 0; j + 1 < K; ++j) {
      p[j] = p[j + 1];
      id[j] = id[j + 1];
    }
    p[K - 1] = -INFINITY;
    id[K - 1] = kNoId;
  }

  __device__ __forceinline__ void Push4(const float4 v, int id0) {
    Push(Canonical(v.x), id0);
    Push(Canonical(v.y), id0 + 1);
    Push(Canonical(v.z), id0 + 2);
    Push(Canonical(v.w), id0 + 3);
  }
};

// `rounds` rounds over the warp's lists: a butterfly arg-max of the list heads (every lane
// gets the same winner), whose owner pops it; emit(r, prob, id) sees round r's winner on
// every lane. Real ids are unique within a block, so exactly one lane pops a real winner.
template <int K, typename Emit>
__device__ __forceinline__ void WarpDrain(TopList<K>& list, int rounds, Emit emit) {
  for (int r = 0; r < rounds; ++r) {
    float bp = list.p[0];
    int bi = list.id[0];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float op = __shfl_xor_sync(kFullMask, bp, off);
      const int oi = __shfl_xor_sync(kFullMask, bi, off);
      if (Before(op, oi, bp, bi)) {
        bp = op;
        bi = oi;
      }
    }
    if (list.id[0] == bi) list.PopFront();
    emit(r, bp, bi);
  }
}

template <int K>
__global__ void __launch_bounds__(kThreads)
    TopPCandidatesKernel(const float* __restrict__ probs, const float* __restrict__ top_p,
                         const int32_t* __restrict__ batch_ids, int vocab, int num_slots, int C,
                         float* __restrict__ scores, int64_t* __restrict__ tokens,
                         int32_t* __restrict__ lens) {
  __shared__ float s_p[kWarps * K];
  __shared__ int s_id[kWarps * K];
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  float* out_p = scores + static_cast<size_t>(row) * C;
  int64_t* out_id = tokens + static_cast<size_t>(row) * C;
  const int b = batch_ids[row];
  if (b < 0 || b >= num_slots) {  // row past T_out (or an invalid slot): nothing to rank
    for (int j = tid; j < C; j += kThreads) {
      out_p[j] = 0.f;
      out_id[j] = -1;
    }
    if (tid == 0) lens[row] = 0;
    return;
  }

  // 1. Thread-local top-K over a scalar head (up to the first 16-byte boundary), a float4
  //    body and a scalar tail of at most 3 entries.
  const float* x = probs + static_cast<size_t>(row) * vocab;
  TopList<K> list;
  list.Clear();
  const int misaligned = static_cast<int>((reinterpret_cast<uintptr_t>(x) >> 2) & 3);
  const int head = min((4 - misaligned) & 3, vocab);
  if (tid < head) list.Push(Canonical(x[tid]), tid);
  const int n4 = (vocab - head) >> 2;
  const float4* x4 = reinterpret_cast<const float4*>(x + head);
  int j = tid;
  for (; j + (kUnroll - 1) * kThreads < n4; j += kUnroll * kThreads) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(x4 + j + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) list.Push4(v[u], head + 4 * (j + u * kThreads));
  }
  for (; j < n4; j += kThreads) list.Push4(__ldcs(x4 + j), head + 4 * j);
  const int tail = head + 4 * n4 + tid;
  if (tail < vocab) list.Push(Canonical(x[tail]), tail);

  // 2. Each warp's top-C into shared memory: s_[warp * K + r], r < C.
  const int lane = tid & 31;
  const int warp = tid >> 5;
  WarpDrain<K>(list, C, [&](int r, float p, int i) {
    if (lane == 0) {
      s_p[warp * K + r] = p;
      s_id[warp * K + r] = i;
    }
  });
  __syncthreads();
  if (warp != 0) return;

  // 3. Warp 0 merges the kWarps * C survivors; lane 0 writes the row in rank order.
  list.Clear();
  for (int e = lane; e < kWarps * C; e += 32) {
    const int w = e / C;
    const int r = e - w * C;
    list.Push(s_p[w * K + r], s_id[w * K + r]);
  }
  const int num_real = min(C, vocab);
  const float target = top_p[b];
  float cum = 0.f;
  int len = num_real;
  bool reached = false;
  WarpDrain<K>(list, C, [&](int r, float p, int i) {
    if (lane != 0) return;
    if (r < num_real && !reached) {
      out_p[r] = p;
      out_id[r] = i;
      cum += p;  // same fp32 additions, same order as the CPU op
      if (cum >= target) {
        len = r + 1;
        reached = true;
      }
    } else {  // past the top-p set (or past vocab < C): no candidate
      out_p[r] = 0.f;
      out_id[r] = -1;
    }
  });
  if (lane == 0) lens[row] = len;
}

template <int K>
cudaError_t Launch(const float* probs, const float* top_p, const int32_t* batch_ids, int rows,
                   int vocab, int num_slots, int C, float* scores, int64_t* tokens, int32_t* lens,
                   cudaStream_t stream) {
  TopPCandidatesKernel<K><<<rows, kThreads, 0, stream>>>(probs, top_p, batch_ids, vocab,
                                                         num_slots, C, scores, tokens, lens);
  return cudaGetLastError();
}

}  // namespace

extern "C" int specworker_top_p_candidates_launch(const float* probs, const float* top_p,
                                                  const int32_t* batch_id_per_token_output,
                                                  int rows, int vocab, int num_slots,
                                                  int candidates_len, float* verify_scores,
                                                  int64_t* verify_tokens,
                                                  int32_t* actual_candidate_lens,
                                                  cudaStream_t stream) {
  const int C = candidates_len;
  if (rows < 0 || vocab < 1 || num_slots < 0 || C < 1 || C > kMaxCandidates) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (rows == 0) return static_cast<int>(cudaSuccess);
#define SPECWORKER_TOPP_LAUNCH(K)                                                          \
  Launch<K>(probs, top_p, batch_id_per_token_output, rows, vocab, num_slots, C,           \
            verify_scores, verify_tokens, actual_candidate_lens, stream)
  cudaError_t err;
  switch (C) {  // exact list sizes for FastDeploy's usual 1..10, then buckets
    case 1: err = SPECWORKER_TOPP_LAUNCH(1); break;
    case 2: err = SPECWORKER_TOPP_LAUNCH(2); break;
    case 3: err = SPECWORKER_TOPP_LAUNCH(3); break;
    case 4: err = SPECWORKER_TOPP_LAUNCH(4); break;
    case 5: err = SPECWORKER_TOPP_LAUNCH(5); break;
    case 6: err = SPECWORKER_TOPP_LAUNCH(6); break;
    case 7: err = SPECWORKER_TOPP_LAUNCH(7); break;
    case 8: err = SPECWORKER_TOPP_LAUNCH(8); break;
    case 9: err = SPECWORKER_TOPP_LAUNCH(9); break;
    case 10: err = SPECWORKER_TOPP_LAUNCH(10); break;
    default:
      if (C <= 16) {
        err = SPECWORKER_TOPP_LAUNCH(16);
      } else if (C <= 32) {
        err = SPECWORKER_TOPP_LAUNCH(32);
      } else if (C <= 64) {
        err = SPECWORKER_TOPP_LAUNCH(64);
      } else {
        err = SPECWORKER_TOPP_LAUNCH(kMaxCandidates);
      }
  }
#undef SPECWORKER_TOPP_LAUNCH
  return static_cast<int>(err);
}
