// speculate_get_token_penalty_multi_scores CUDA kernel: min length, repetition / frequency /
// presence penalties, temperature and bad words, in place on logits [num_rows, V].
// Row t belongs to slot b = batch_id_per_token_output[t] (rows with b outside [0, bsz) are left
// untouched) at local index i = t - cu_seqlens_q_output[b]. The grid covers the num_rows rows of
// logits only, so an output index that describes more rows (cu_seqlens_q_output[bsz] > num_rows:
// the CPU op raises) never makes the kernel read or write past the tensor, and a local index
// outside the slot's drafts is clamped. Per row, in FastDeploy's order:
//   1. eos ids -> mask (-1e10; -1e4 for float16) while cur_len[b] >= 0 and cur_len[b] + i < min_len[b];
//   2. history = pre_ids[b, 1 .. cur_len[b]] (+ draft_tokens[b, 1 .. i] when drafts are given);
//      for each distinct id v in [0, V) with count c:
//      l = l < 0 ? l * alpha : l / alpha;  l = l - c * frequency - presence;
//   3. l = l / temperature[b] over the whole row;  4. bad_tokens[b, j < bad_tokens_len[b]] -> mask.
//
// Parallelization: one block of kThreads per (logit row, vocab chunk): grid = num_rows x
// ceil(V / chunk), chunks of at most kMaxChunk = 32768 ids (V = 151936: 5 chunks of 30392), so
// any T_out works and 1024 rows give 5120 blocks. With one block per row the row count would
// quantize into waves of 132 SMs x 4 resident blocks = 528 rows: 600 rows would take two waves
// for 1.14 waves of work; chunks make that loss a few percent for any row count.
// Each element belongs to one block, which applies all four phases to it in order, separated
// by __syncthreads, all writes straight to the row in global memory (one read-modify-write pass):
//   - eos and bad words: threads stride over the (short) id lists, keeping the chunk's ids;
//   - penalties are sparse (history length << V), so no dense [rows, V] count buffer exists: the
//     block reads the row's history (coalesced, L2-resident across the slot's rows and chunks)
//     and counts the ids of its chunk in a shared-memory hash table (open addressing, int32
//     keys, uint32 counts, kHashSlots = 4096, 32 KB) that dedupes them (alpha and presence apply
//     once per distinct id, frequency by count); after a barrier each thread penalizes the
//     logits of the table entries it owns. The table admits kMaxDistinct = 3072 distinct ids
//     per chunk (load <= 3/4, so every probe ends), however long the history; a chunk with more
//     takes the exact fallback: the same 32 KB as dense counters over ranges of kRangeIds ids,
//     one pass over the history per range (slower, still exact). Sorting in shared memory would
//     bound the history length instead of the distinct count, and a dense count buffer would
//     cost a second [rows, V] pass;
// The penalty pass reads the eos mask and the temperature pass reads the penalized values from
// global memory after a barrier, so float16/bfloat16 rows are rounded between phases (the CPU
// op rounds once); float32 results are bit-identical to the CPU op and the numpy reference
// (IEEE __fdiv_rn/__fmul_rn/__fsub_rn, no contraction into FMA).
// Shortcuts that change no bit: penalties with alpha == 1, beta == 0, gamma == 0 are the
// identity and are skipped (no history is read); a temperature of 1 skips the dense pass.
// The kernel cannot raise, so where the CPU op raises it bounds-checks: batch ids >= bsz skip
// the row, the history is clamped to pre_ids' width and the drafts to draft_tokens' width,
// a temperature <= 0 (or NaN) is treated as 1, and ids outside [0, V) are skipped everywhere.
// No allocation, no host sync; the launcher only sets up the grid.
#include "speculate_get_token_penalty_multi_scores.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "dtype_convert.cuh"

namespace {

using specworker::FromFloat;
using specworker::ToFloat;

constexpr int kThreads = 512;
constexpr int kHashBits = 12;
constexpr int kHashSlots = 1 << kHashBits;
constexpr int kMaxDistinct = kHashSlots * 3 / 4;  // table load <= 3/4
constexpr int kRangeIds = 2 * kHashSlots;          // fallback counters in the same shared memory
constexpr int kMaxChunk = 32768;                   // vocab ids per block

struct Params {
  const int64_t* pre_ids;
  const float* alpha;  // penalty_scores
  const float* beta;   // frequency_scores
  const float* gamma;  // presence_scores
  const float* temperatures;
  const int64_t* bad_tokens;
  const int64_t* bad_tokens_len;
  const int64_t* cur_len;
  const int64_t* min_len;
  const int64_t* eos;
  const int32_t* batch_ids;
  const int32_t* cu;
  const int64_t* drafts;  // nullable
  int V, bsz, S, W, E, D;
  int chunk;  // vocab ids per block (the last chunk of a row may be shorter)
};

template <typename T>
__device__ __forceinline__ float MaskValue() { return -1e10f; }
template <>
__device__ __forceinline__ float MaskValue<__half>() { return -1e4f; }

// 16 bytes of logits, loaded and stored as one vector.
template <typename T>
struct alignas(16) Pack {
  T e[16 / sizeof(T)];
};

template <typename T>
__device__ __forceinline__ void Penalize(T* row, int v, uint32_t count, float alpha, float beta,
                                         float gamma) {
  float l = ToFloat(row[v]);
  l = l < 0.f ? __fmul_rn(l, alpha) : __fdiv_rn(l, alpha);
  l = __fsub_rn(__fsub_rn(l, __fmul_rn(__uint2float_rn(count), beta)), gamma);
  row[v] = FromFloat<T>(l);
}

// History position p of the row: pre_ids[b, 1 + p] for p < hist, then draft_tokens[b, 1 + ...].
__device__ __forceinline__ int64_t HistoryId(const Params& p, int b, int hist, int pos) {
  return pos < hist ? p.pre_ids[static_cast<int64_t>(b) * p.S + 1 + pos]
                    : p.drafts[static_cast<int64_t>(b) * p.D + 1 + (pos - hist)];
}

// The ids of one block: vocab chunk [lo, hi) of the row.
struct Chunk {
  int lo, hi;
};

// Exact fallback for a chunk with more than kMaxDistinct distinct history ids: dense counters
// over ranges of kRangeIds ids, one pass over the history per range.
template <typename T>
__device__ void PenalizeByRange(const Params& p, T* row, Chunk c, int b, int hist, int total,
                                uint32_t* counts, float alpha, float beta, float gamma) {
  for (int lo = c.lo; lo < c.hi; lo += kRangeIds) {
    const int hi = min(c.hi, lo + kRangeIds);
    for (int s = threadIdx.x; s < kRangeIds; s += kThreads) counts[s] = 0;
    __syncthreads();
    for (int pos = threadIdx.x; pos < total; pos += kThreads) {
      const int64_t id = HistoryId(p, b, hist, pos);
      if (id >= lo && id < hi) atomicAdd(&counts[id - lo], 1u);
    }
    __syncthreads();
    for (int s = threadIdx.x; s < hi - lo; s += kThreads) {
      if (counts[s] != 0) Penalize(row, lo + s, counts[s], alpha, beta, gamma);
    }
    __syncthreads();  // counters are zeroed for the next range
  }
}

// Penalizes every distinct history id of the chunk once. Fast path: dedupe and count in a
// shared hash table (linear probing). A thread reserves a slot in s_distinct before it claims
// an empty one, so at most kMaxDistinct < kHashSlots slots are ever claimed and every probe
// ends; a chunk with more distinct ids sets s_overflow and takes the range fallback instead.
template <typename T>
__device__ void PenalizeHistory(const Params& p, T* row, Chunk c, int b, int hist, int total,
                                uint32_t* smem, float alpha, float beta, float gamma) {
  __shared__ int s_distinct, s_overflow;
  int* keys = reinterpret_cast<int*>(smem);
  uint32_t* counts = smem + kHashSlots;
  for (int s = threadIdx.x; s < kHashSlots; s += kThreads) {
    keys[s] = -1;
    counts[s] = 0;
  }
  if (threadIdx.x == 0) s_distinct = s_overflow = 0;
  __syncthreads();
  for (int pos = threadIdx.x; pos < total; pos += kThreads) {
    const int64_t id = HistoryId(p, b, hist, pos);
    if (id < c.lo || id >= c.hi) continue;  // other chunks' ids, and ids outside [0, V)
    const int key = static_cast<int>(id);
    uint32_t h = (static_cast<uint32_t>(key) * 2654435761u) >> (32 - kHashBits);
    bool reserved = false;
    while (true) {
      const int cur = *reinterpret_cast<volatile int*>(&keys[h]);
      if (cur == key) {
        atomicAdd(&counts[h], 1u);
        break;
      }
      if (cur == -1) {
        if (!reserved) {
          if (atomicAdd(&s_distinct, 1) >= kMaxDistinct) {
            s_overflow = 1;
            break;
          }
          reserved = true;
        }
        const int prev = atomicCAS(&keys[h], -1, key);
        if (prev == -1 || prev == key) {
          if (prev == key) atomicSub(&s_distinct, 1);  // another thread claimed it first
          atomicAdd(&counts[h], 1u);
          break;
        }
      }
      h = (h + 1) & (kHashSlots - 1);
    }
    if (*reinterpret_cast<volatile int*>(&s_overflow)) break;
  }
  __syncthreads();
  if (s_overflow) {  // uniform after the barrier
    PenalizeByRange(p, row, c, b, hist, total, smem, alpha, beta, gamma);
    return;
  }
  for (int s = threadIdx.x; s < kHashSlots; s += kThreads) {
    const int key = keys[s];
    if (key >= 0) Penalize(row, key, counts[s], alpha, beta, gamma);
  }
}

template <typename T>
__device__ __forceinline__ T Divide(T x, float temp) {
  return FromFloat<T>(__fdiv_rn(ToFloat(x), temp));
}

// row[v] /= temp for v < V: scalar head up to 16-byte alignment, vector body, scalar tail.
template <typename T>
__device__ void DivideRow(T* row, int V, float temp) {
  constexpr int kVec = 16 / sizeof(T);
  // 16-byte vectors in flight per thread: float32 keeps 27 registers (4 blocks of 512 per SM),
  // 16-bit types need ~60 (2 blocks per SM) and so load more per thread; 64 KB in flight per SM.
  constexpr int kUnroll = sizeof(T) == 4 ? 2 : 4;
  const int misalign = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 15);
  const int head = min(V, ((16 - misalign) & 15) / static_cast<int>(sizeof(T)));
  for (int v = threadIdx.x; v < head; v += kThreads) row[v] = Divide(row[v], temp);
  Pack<T>* body = reinterpret_cast<Pack<T>*>(row + head);
  const int num_vec = (V - head) / kVec;
  for (int base = threadIdx.x; base < num_vec; base += kThreads * kUnroll) {
    Pack<T> pack[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kThreads;
      if (j < num_vec) pack[u] = body[j];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kThreads;
      if (j < num_vec) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) pack[u].e[k] = Divide(pack[u].e[k], temp);
        body[j] = pack[u];
      }
    }
  }
  for (int v = head + num_vec * kVec + threadIdx.x; v < V; v += kThreads) {
    row[v] = Divide(row[v], temp);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    PenaltyKernel(const Params p, T* logits) {
  __shared__ uint32_t smem[2 * kHashSlots];
  const int t = blockIdx.x;
  const int b = p.batch_ids[t];
  if (b < 0 || b >= p.bsz) return;  // uniform over the block
  const Chunk c{static_cast<int>(blockIdx.y) * p.chunk, min(p.V, static_cast<int>(blockIdx.y + 1) * p.chunk)};
  const int64_t i = static_cast<int64_t>(t) - p.cu[b];
  T* row = logits + static_cast<int64_t>(t) * p.V;
  const float mask = MaskValue<T>();
  const int64_t step = p.cur_len[b];

  if (step >= 0 && step + i < p.min_len[b]) {
    for (int e = threadIdx.x; e < p.E; e += kThreads) {
      const int64_t id = p.eos[e];
      if (id >= c.lo && id < c.hi) row[id] = FromFloat<T>(mask);
    }
  }
  const float alpha = p.alpha[b], beta = p.beta[b], gamma = p.gamma[b];
  if (step >= 0 && !(alpha == 1.f && beta == 0.f && gamma == 0.f)) {
    const int hist = static_cast<int>(min(step, static_cast<int64_t>(p.S) - 1));
    const int drafts =
        p.drafts ? static_cast<int>(max(static_cast<int64_t>(0), min(i, static_cast<int64_t>(p.D) - 1)))
                 : 0;
    __syncthreads();  // the eos mask is the input of the penalty
    PenalizeHistory(p, row, c, b, hist, hist + drafts, smem, alpha, beta, gamma);
  }
  float temp = p.temperatures[b];
  if (!(temp > 0.f)) temp = 1.f;
  if (temp != 1.f) {
    __syncthreads();  // penalized entries are written before they are scaled
    DivideRow(row + c.lo, c.hi - c.lo, temp);
  }
  __syncthreads();  // bad words overwrite the scaled values
  const int64_t num_bad = min(p.bad_tokens_len[b], static_cast<int64_t>(p.W));
  for (int64_t j = threadIdx.x; j < num_bad; j += kThreads) {
    const int64_t id = p.bad_tokens[static_cast<int64_t>(b) * p.W + j];
    if (id >= c.lo && id < c.hi) row[id] = FromFloat<T>(mask);
  }
}

}  // namespace

extern "C" int specworker_speculate_get_token_penalty_multi_scores_launch(
    const int64_t* pre_ids, void* logits, int logits_dtype, const float* penalty_scores,
    const float* frequency_scores, const float* presence_scores, const float* temperatures,
    const int64_t* bad_tokens, const int64_t* bad_tokens_len, const int64_t* cur_len,
    const int64_t* min_len, const int64_t* eos_token_id,
    const int32_t* batch_id_per_token_output, const int32_t* cu_seqlens_q_output,
    const int64_t* draft_tokens, int num_rows, int vocab_size, int bsz, int max_history,
    int bad_width, int num_eos, int draft_width, cudaStream_t stream) {
  if (num_rows < 0 || vocab_size < 1 || bsz < 0 || max_history < 1 || bad_width < 0 ||
      num_eos < 0 || (draft_tokens != nullptr && draft_width < 1)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (num_rows == 0) return static_cast<int>(cudaSuccess);
  // Equal chunks of at most kMaxChunk ids, a multiple of 8 so 16-byte rows stay aligned.
  const int num_chunks = (vocab_size + kMaxChunk - 1) / kMaxChunk;
  const int chunk = ((vocab_size + num_chunks - 1) / num_chunks + 7) / 8 * 8;
  const Params p{pre_ids,        penalty_scores, frequency_scores, presence_scores, temperatures,
                 bad_tokens,     bad_tokens_len, cur_len,          min_len,         eos_token_id,
                 batch_id_per_token_output,      cu_seqlens_q_output,              draft_tokens,
                 vocab_size,     bsz,            max_history,      bad_width,       num_eos,
                 draft_width,    chunk};
  const dim3 grid(static_cast<unsigned>(num_rows), static_cast<unsigned>((vocab_size + chunk - 1) / chunk));
  switch (logits_dtype) {
    case SPECWORKER_LOGITS_FLOAT32:
      PenaltyKernel<float><<<grid, kThreads, 0, stream>>>(p, static_cast<float*>(logits));
      break;
    case SPECWORKER_LOGITS_FLOAT16:
      PenaltyKernel<__half><<<grid, kThreads, 0, stream>>>(p, static_cast<__half*>(logits));
      break;
    case SPECWORKER_LOGITS_BFLOAT16:
      PenaltyKernel<__nv_bfloat16>
          <<<grid, kThreads, 0, stream>>>(p, static_cast<__nv_bfloat16*>(logits));
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
