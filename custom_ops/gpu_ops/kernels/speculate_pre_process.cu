// speculate_pre_process CUDA kernel (docs/spec.md §4.3, [ours]): the whole of pre_process in one launch,
// bit-identical to get_padding_offset (input side) + speculate_get_seq_lens_output +
// get_padding_offset(None, O, None, None, output_capacity) (output side).
//   in:  input_ids [N, S] i64, seq_lens_this_time [bsz] i32 (L_b), draft_tokens [N, D] i64 or
//        NULL, seq_lens_encoder [bsz] i32 (E_b)
//   out: ids_remove_padding, batch_id_per_token [token_num_cpu]; cu_seqlens_q = cu_seqlens_k,
//        cu_seqlens_q_output [bsz + 1]; batch_id_per_token_output [output_capacity];
//        real_output_token_num [1] (T_out); seq_lens_output [bsz] (O_b)
// Parallelization: blocks never wait for each other (no grid sync, no co-residency needed, so any
// bsz and any capacity take one ordinary launch). Block g owns input rows and output rows
// [256 g, 256 g + 256), one of each per thread; grid = ceil(max(token_num_cpu, output_capacity,
// 1) / 256). Every block scans all bsz lengths itself: thread j takes a contiguous run of
// ceil(bsz / 256) slots, sums L and O over it, and one block scan of the (L, O) pairs gives each
// run's starting row on both sides. Walking its run again, a thread marks in shared memory every
// slot whose rows begin inside the block's row window (or cover its first row), with the slot id
// and start row; an inclusive max-scan of the marked positions then gives every row the mark of
// the slot that owns it, so each thread writes its row with one token load. Block 0 also writes
// the per-slot outputs. Per-thread work is O(bsz / 256) + O(1) rows; the repeated length reads
// (bsz per block) hit L1/L2. Unlike FastDeploy's cooperative kernel (grid = bsz blocks, one grid
// sync, co-residency required) nothing here bounds bsz.
// Out-of-range values stay in bounds exactly as in the unfused kernels: a negative L_b counts as
// 0 (and gives O_b = 0), rows past a capacity are not written, a token index past the source
// row's width yields -1.
#include "speculate_pre_process.h"

#include "block_scan.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kRows = kThreads;  // rows per block on each side, one per thread

struct Params {
  const int64_t* input_ids;
  const int32_t* lens;
  const int64_t* drafts;  // nullptr: every slot reads input_ids
  const int32_t* enc;
  int S, D, bsz, token_cap, out_cap;
  int64_t* ids;
  int32_t* batch_id;
  int32_t* cu_q;
  int32_t* cu_k;
  int32_t* cu_out;
  int32_t* batch_id_out;
  int32_t* num_out;
  int32_t* lens_out;
};

// O_b (docs/spec.md §4.2) as speculate_get_seq_lens_output's kernel computes it.
__device__ __forceinline__ int32_t OutputRows(int32_t n, int32_t e) {
  return n <= 0 ? 0 : (n == 1 || e != 0) ? 1 : n;
}

// The block's row window on one side: which slot starts at each row (or covers the first row).
struct Window {
  int32_t* slot;      // [kRows], -1: no slot starts here
  long long* start;   // [kRows], the slot's first row
  bool* decode;       // [kRows] or nullptr, the slot reads draft_tokens
};

// Slot s owns rows [start, start + n); marks it where that range enters [row0, row0 + kRows).
// Slots with rows have distinct starts, so every position has at most one writer.
__device__ __forceinline__ void Mark(const Window& w, long long row0, long long start, long long n,
                                     int s, bool decode) {
  if (n <= 0 || start >= row0 + kRows || start + n <= row0) return;
  const int pos = start > row0 ? static_cast<int>(start - row0) : 0;
  w.slot[pos] = s;
  if (w.start != nullptr) w.start[pos] = start;
  if (w.decode != nullptr) w.decode[pos] = decode;
}

__global__ void __launch_bounds__(kThreads) SpeculatePreProcessKernel(Params p) {
  __shared__ int32_t s_in_slot[kRows];
  __shared__ long long s_in_start[kRows];
  __shared__ bool s_in_decode[kRows];
  __shared__ int32_t s_out_slot[kRows];
  __shared__ specworker::BlockScanStorage<long long, kThreads, 2> s_sums;
  __shared__ specworker::BlockScanStorage<int, kThreads, 2> s_pos;
  const Window in_w{s_in_slot, s_in_start, s_in_decode};
  const Window out_w{s_out_slot, nullptr, nullptr};
  const int tid = threadIdx.x;
  s_in_slot[tid] = -1;
  s_out_slot[tid] = -1;

  // Thread tid's run of slots [first, last).
  const long long per_thread = (static_cast<long long>(p.bsz) + kThreads - 1) / kThreads;
  const int first = static_cast<int>(min(tid * per_thread, static_cast<long long>(p.bsz)));
  const int last = static_cast<int>(min(first + per_thread, static_cast<long long>(p.bsz)));
  // 64-bit sums, as in get_padding_offset, so corrupt lengths cannot wrap a row index.
  long long in_sum = 0, out_sum = 0;
  for (int s = first; s < last; ++s) {
    const int32_t n = p.lens[s];
    in_sum += max(n, 0);
    out_sum += OutputRows(n, p.enc[s]);
  }
  long long starts[2] = {in_sum, out_sum};
  long long totals[2];
  // Also orders the -1 fill before the marks below.
  specworker::BlockInclusiveScan<kThreads>(starts, totals, s_sums, specworker::SumOp(), 0LL);
  long long in_start = starts[0] - in_sum;  // exclusive: the run's first row on each side
  long long out_start = starts[1] - out_sum;
  const long long total_in = totals[0];
  const long long total_out = totals[1];

  const long long row0 = static_cast<long long>(blockIdx.x) * kRows;
  const bool slot_writer = blockIdx.x == 0;
  for (int s = first; s < last; ++s) {
    const int32_t n = p.lens[s];
    const int32_t e = p.enc[s];
    const long long n_in = max(n, 0);
    const int32_t n_out = OutputRows(n, e);
    if (slot_writer) {
      const int32_t end_in = static_cast<int32_t>(in_start + n_in);
      p.cu_q[s + 1] = end_in;
      p.cu_k[s + 1] = end_in;
      p.cu_out[s + 1] = static_cast<int32_t>(out_start + n_out);
      p.lens_out[s] = n_out;
    }
    Mark(in_w, row0, in_start, n_in, s, p.drafts != nullptr && e <= 0);
    Mark(out_w, row0, out_start, n_out, s, false);
    in_start += n_in;
    out_start += n_out;
  }
  if (slot_writer && tid == 0) {
    p.cu_q[0] = 0;
    p.cu_k[0] = 0;
    p.cu_out[0] = 0;
    *p.num_out = static_cast<int32_t>(total_out);
  }
  __syncthreads();

  // Row row0 + tid belongs to the slot marked at the largest marked position <= tid.
  int pos[2] = {s_in_slot[tid] >= 0 ? tid : -1, s_out_slot[tid] >= 0 ? tid : -1};
  int unused[2];
  specworker::BlockInclusiveScan<kThreads>(pos, unused, s_pos, specworker::MaxOp(), -1);
  const int in_pos = pos[0];
  const int out_pos = pos[1];

  const long long t = row0 + tid;
  if (t < p.token_cap) {
    int32_t slot = -1;
    int64_t token = -1;
    if (t < total_in) {  // in_pos >= 0 here: some marked slot owns row t
      slot = s_in_slot[in_pos];
      const long long i = t - s_in_start[in_pos];
      const bool decode = s_in_decode[in_pos];
      const int width = decode ? p.D : p.S;
      const int64_t* src = decode ? p.drafts : p.input_ids;
      if (i < width) token = src[slot * static_cast<long long>(width) + i];
    }
    p.batch_id[t] = slot;
    p.ids[t] = token;
  }
  if (t < p.out_cap) p.batch_id_out[t] = t < total_out ? s_out_slot[out_pos] : -1;
}

}  // namespace

extern "C" int specworker_speculate_pre_process_launch(
    const int64_t* input_ids, int max_seq_len, const int32_t* seq_lens_this_time,
    const int64_t* draft_tokens, int max_draft_tokens, const int32_t* seq_lens_encoder, int bsz,
    int token_num_cpu, int output_capacity, int64_t* ids_remove_padding,
    int32_t* batch_id_per_token, int32_t* cu_seqlens_q, int32_t* cu_seqlens_k,
    int32_t* cu_seqlens_q_output, int32_t* batch_id_per_token_output,
    int32_t* real_output_token_num, int32_t* seq_lens_output, cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || token_num_cpu < 0 || output_capacity < 0 || max_seq_len < 0 ||
                         max_draft_tokens < 0;
  // A NULL is only allowed where nothing would be read or written through it.
  const bool bad_ptrs =
      cu_seqlens_q == nullptr || cu_seqlens_k == nullptr || cu_seqlens_q_output == nullptr ||
      real_output_token_num == nullptr ||
      (bsz > 0 && (seq_lens_this_time == nullptr || seq_lens_encoder == nullptr ||
                   seq_lens_output == nullptr)) ||
      (bsz > 0 && max_seq_len > 0 && input_ids == nullptr) ||
      (token_num_cpu > 0 && (ids_remove_padding == nullptr || batch_id_per_token == nullptr)) ||
      (output_capacity > 0 && batch_id_per_token_output == nullptr);
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  const int rows = max(max(token_num_cpu, output_capacity), 1);
  const int blocks = static_cast<int>((static_cast<long long>(rows) + kRows - 1) / kRows);
  const Params p{input_ids,          seq_lens_this_time, draft_tokens,   seq_lens_encoder,
                 max_seq_len,        max_draft_tokens,   bsz,            token_num_cpu,
                 output_capacity,    ids_remove_padding, batch_id_per_token, cu_seqlens_q,
                 cu_seqlens_k,       cu_seqlens_q_output, batch_id_per_token_output,
                 real_output_token_num, seq_lens_output};
  SpeculatePreProcessKernel<<<blocks, kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}
