// rebuild_padding CUDA kernel: gathers the hidden rows that need logits (docs/spec.md §4.4).
//   tmp_out [token_num, hidden] (packed transformer output) -> out [out_rows, hidden]
//   without output indices: out_rows = bsz, row b <- slot b's last prefill token or first decode token;
//   with batch_id_per_token_output / cu_seqlens_q_output: out_rows = capacity, row t <- slot
//   b = batch_id_per_token_output[t] at local index t - cu_seqlens_q_output[b] (last prefill token
//   for prefill slots); -1 rows, idle slots and invalid rows are zeros. Every output row is written,
//   so the caller allocates out uninitialised (no separate memset pass).
//   enable_logprob: a block whose row belongs to a prefill slot b also writes first_token_out[b]
//   (the row before the last prefill token; zeros when E_b == 1). All such writers write equal data.
// Parallelisation: one block of kThreads per output row (grid = out_rows); the row's source is
// computed by every thread from a handful of broadcast int32 loads issued together, then the
// threads stream the row in packs of up to 16 bytes (L2-only loads, streaming stores), kUnroll
// loads in flight per thread before the stores.
// Pack size: the largest of 16/8/4/2 bytes dividing the row's byte size and every data pointer,
// so H * sizeof(T) % 16 == 0 with aligned tensors gets 16-byte LDG/STG; odd H (111) falls back
// to one element per access.
// Divergence from the CPU op: the CPU op raises on an out-of-range index; this kernel cannot
// raise without a host sync, so it applies the same checks and writes a zero row instead.
#include "rebuild_padding.h"

#include <stdint.h>

namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 8;  // 128 x 8 x 16 B covers an H = 7168 bf16 row in one pass

struct Args {
  const int32_t* cu_seqlens_q;
  const int32_t* seq_len_this_time;
  const int32_t* seq_lens_decoder;
  const int32_t* seq_lens_encoder;
  const int32_t* batch_id_per_token_output;  // nullptr: one output row per slot
  const int32_t* cu_seqlens_q_output;
  int token_num;
  int bsz;
};

struct RowPlan {
  int64_t src;        // tmp_out row copied into this output row; -1: zeros
  int first_slot;     // slot whose first_token_out row this block writes; -1: none
  int64_t first_src;  // tmp_out row for first_token_out[first_slot]; -1: zeros
};

// The same checks as RebuildPaddingCPU's PlanRow (cpu_ops/rebuild_padding.cc); where that one
// raises, this one returns a zero row. Every per-slot value is loaded before any of them is
// tested, so the loads overlap: two dependent load rounds (batch id, then the slot's values)
// before the row's data instead of five when each test guards the next load
// (benchmarks/tuning/rebuild_padding_variants.py measures both).
__device__ __forceinline__ RowPlan PlanRow(int r, const Args& a) {
  RowPlan p{-1, -1, -1};
  const bool indexed = a.batch_id_per_token_output != nullptr;
  const int b = indexed ? a.batch_id_per_token_output[r] : r;
  if (b < 0 || b >= a.bsz) return p;  // -1: past T_out; anything else is out of range
  const int len = a.seq_len_this_time[b];
  const int enc = a.seq_lens_encoder[b];
  const int dec = a.seq_lens_decoder[b];
  const int64_t start = a.cu_seqlens_q[b];
  const int row_begin = indexed ? a.cu_seqlens_q_output[b] : 0;
  const int row_end = indexed ? a.cu_seqlens_q_output[b + 1] : 1;
  if (len < 0 || enc < 0) return p;
  // Idle slot, or FastDeploy's skip of a slot with neither prompt nor cache.
  if (len == 0 || (enc == 0 && dec == 0)) return p;
  if (enc > len) return p;
  if (start < 0 || start + len > a.token_num) return p;
  const int local = indexed ? r - row_begin : 0;
  if (indexed && (r < row_begin || r >= row_end)) return p;
  if (enc > 0) {
    p.src = start + enc - 1;
    p.first_slot = b;
    p.first_src = enc >= 2 ? p.src - 1 : -1;
  } else if (local < len) {
    p.src = start + local;
  }
  return p;
}

// Loads go through L2 only (ld.global.cg: no row is read twice by a block, so L1 would only hold
// dead lines) and stores stream (st.global.cs: evict-first; the next reader is lm_head, whose
// weight stream evicts them anyway). Measured: benchmarks/tuning/rebuild_padding_variants.py.
template <typename Pack>
__device__ __forceinline__ void CopyRow(const Pack* __restrict__ src, Pack* __restrict__ dst,
                                        int n) {
  if (src == nullptr) {
    for (int k = threadIdx.x; k < n; k += kThreads) __stcs(dst + k, Pack{});
    return;
  }
  for (int base = threadIdx.x; base < n; base += kThreads * kUnroll) {
    Pack v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + u * kThreads;
      if (k < n) v[u] = __ldcg(src + k);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + u * kThreads;
      if (k < n) __stcs(dst + k, v[u]);
    }
  }
}

// n: packs per row. first_token_out is nullptr unless enable_logprob.
template <typename Pack>
__global__ void __launch_bounds__(kThreads)
    RebuildPaddingKernel(const Pack* __restrict__ tmp_out, Pack* __restrict__ out,
                         Pack* __restrict__ first_token_out, Args a, int n) {
  const int r = blockIdx.x;
  const RowPlan p = PlanRow(r, a);
  CopyRow<Pack>(p.src >= 0 ? tmp_out + p.src * n : nullptr, out + static_cast<int64_t>(r) * n, n);
  if (first_token_out != nullptr && p.first_slot >= 0) {
    CopyRow<Pack>(p.first_src >= 0 ? tmp_out + p.first_src * n : nullptr,
                  first_token_out + static_cast<int64_t>(p.first_slot) * n, n);
  }
}

template <typename Pack>
cudaError_t Launch(const void* tmp_out, void* out, void* first_token_out, const Args& a,
                   int out_rows, int64_t row_bytes, cudaStream_t stream) {
  const int n = static_cast<int>(row_bytes / static_cast<int64_t>(sizeof(Pack)));
  RebuildPaddingKernel<Pack><<<out_rows, kThreads, 0, stream>>>(
      static_cast<const Pack*>(tmp_out), static_cast<Pack*>(out),
      static_cast<Pack*>(first_token_out), a, n);
  return cudaGetLastError();
}

}  // namespace

extern "C" int specworker_rebuild_padding_launch(
    const void* tmp_out, const int32_t* cu_seqlens_q, const int32_t* seq_len_this_time,
    const int32_t* seq_lens_decoder, const int32_t* seq_lens_encoder,
    const int32_t* batch_id_per_token_output, const int32_t* cu_seqlens_q_output,
    void* first_token_out, int enable_logprob, void* out, int token_num, int bsz, int out_rows,
    int hidden, int elem_bytes, cudaStream_t stream) {
  const bool with_index = batch_id_per_token_output != nullptr;
  const bool bad = token_num < 0 || bsz < 0 || out_rows < 0 || hidden < 0 ||
                   (elem_bytes != 2 && elem_bytes != 4) ||
                   with_index != (cu_seqlens_q_output != nullptr) ||
                   (!with_index && out_rows != bsz) ||
                   (enable_logprob && first_token_out == nullptr);
  if (bad) return static_cast<int>(cudaErrorInvalidValue);
  if (out_rows == 0 || hidden == 0) return static_cast<int>(cudaSuccess);
  if (!enable_logprob) first_token_out = nullptr;

  const int64_t row_bytes = static_cast<int64_t>(hidden) * elem_bytes;
  if (row_bytes / 2 > INT32_MAX) return static_cast<int>(cudaErrorInvalidValue);
  // Any misaligned pointer or row size lowers the pack to what they all share.
  const uint64_t bits = static_cast<uint64_t>(row_bytes) |
                        reinterpret_cast<uintptr_t>(tmp_out) | reinterpret_cast<uintptr_t>(out) |
                        reinterpret_cast<uintptr_t>(first_token_out);
  const Args a{cu_seqlens_q,        seq_len_this_time, seq_lens_decoder, seq_lens_encoder,
               batch_id_per_token_output, cu_seqlens_q_output, token_num, bsz};
  cudaError_t err;
  if (bits % 16 == 0) {
    err = Launch<uint4>(tmp_out, out, first_token_out, a, out_rows, row_bytes, stream);
  } else if (bits % 8 == 0) {
    err = Launch<uint2>(tmp_out, out, first_token_out, a, out_rows, row_bytes, stream);
  } else if (bits % 4 == 0) {
    err = Launch<uint32_t>(tmp_out, out, first_token_out, a, out_rows, row_bytes, stream);
  } else {
    err = Launch<uint16_t>(tmp_out, out, first_token_out, a, out_rows, row_bytes, stream);
  }
  return static_cast<int>(err);
}
