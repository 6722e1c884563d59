// paged_attention: appends this step's K/V rows to the paged KV cache, then runs causal attention
// of every query row over its slot's cache. FastDeploy calls its version append_attention; ours
// takes separate q/k/v and has no RoPE, quantization or launch scratch buffers, so it has its own
// name and argument list (a FastDeploy call cannot bind to it by accident).
//   q [T_cap, num_heads, head_dim]; k, v [T_cap, num_kv_heads, head_dim]: float32 | float16 | bfloat16
//   key_cache, value_cache [num_blocks, num_kv_heads, block_size, head_dim], q's dtype, IN PLACE
//   block_tables [N >= bsz, max_blocks_per_seq] int32, -1 = unallocated
//   cu_seqlens_q [bsz + 1] int32; seq_lens_decoder [>= bsz], seq_lens_this_time [bsz] int32
//   (per-slot: [n] or FastDeploy's [n, 1]); batch_id_per_token [T_cap] int32, -1 past T
//   attrs: block_size (must equal the caches' dim 2), scale (softmax scale, finite)
//   -> out [T_cap, num_heads, head_dim], q's dtype; rows with batch id -1 are zeros.
// Slot b's token i (row t = cu_seqlens_q[b] + i) sits at position p = seq_lens_decoder[b] + i: k[t]
// and v[t] go to block block_tables[b, p / block_size] at offset p % block_size, then out[t, h] =
// softmax(scale * K q[t, h]) V over the slot's positions 0..p (cached tokens and this step's up to
// itself), K, V from kv head h / (num_heads / num_kv_heads). Any mix of prefill (Dec 0), chunked
// prefill (Dec > 0, many tokens), decode (1 token) and speculative verify (k + 1 tokens) works.
// Batch invariance: out[t, h] is one loop over keys 0..p in order, in float64 (dot products over
// head_dim in order, the max, the exp sum and the weighted value sum in key order), rounded once
// to q's dtype; nothing in it depends on other rows or slots, on T or on the block numbering. The
// CPU kernel shares the (token, head) rows among the pool's threads (kernels/thread_pool.h) and
// computes four keys' dot products side by side, each still in head_dim order: the same bits.
// Errors: every index is checked before anything is written (an error leaves the caches as they
// were) and raises naming the field, the slot and the value. The CUDA kernel cannot raise without
// a host sync: it skips the cache write of a row whose own position is out of range and writes a
// zero output row for any row it cannot compute (gpu_ops/kernels/paged_attention.cu).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/thread_pool.h"
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "paged_attention_cuda.h"
#endif

namespace {

constexpr const char* kOp = "paged_attention";
constexpr int64_t kMaxHeadDim = 256;  // the CUDA kernel keeps a row's dims in registers
constexpr int64_t kMaxHeads = 65535;  // the CUDA grid's y dimension

struct Dims {
  int64_t token_cap, num_heads, num_kv_heads, head_dim;
  int64_t num_blocks, block_size, max_blocks, bsz;
};

using paddle::DataType;
using specworker::ShapeStr;

void CheckSameShape(const char* name, const paddle::Tensor& x, const std::vector<int64_t>& want,
                    const char* what) {
  PD_CHECK(x.shape() == want, kOp, ": ", name, " has shape ", ShapeStr(x.shape()), ", expected ",
           what, " = ", ShapeStr(want));
}

// Shapes, dtypes, places and attributes (no tensor values are read).
Dims CheckInputs(const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
                 const paddle::Tensor& key_cache, const paddle::Tensor& value_cache,
                 const paddle::Tensor& block_tables, const paddle::Tensor& cu_seqlens_q,
                 const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& seq_lens_this_time,
                 const paddle::Tensor& batch_id_per_token, int block_size, float scale) {
  Dims d{};
  specworker::CheckFloatDtype(kOp, "q", q);
  specworker::CheckRank(kOp, "q", q, 3);  // [T_cap, num_heads, head_dim]
  d.token_cap = q.shape()[0];
  d.num_heads = q.shape()[1];
  d.head_dim = q.shape()[2];
  for (const auto& [name, x] : {std::pair<const char*, const paddle::Tensor*>{"k", &k},
                                {"v", &v}, {"key_cache", &key_cache}, {"value_cache", &value_cache}}) {
    PD_CHECK(x->dtype() == q.dtype(), kOp, ": ", name, " has dtype ",
             specworker::DtypeStr(x->dtype()), ", expected q's ", specworker::DtypeStr(q.dtype()));
    specworker::CheckSamePlace(kOp, name, *x, q, "q");
  }
  specworker::CheckRank(kOp, "k", k, 3);  // [T_cap, num_kv_heads, head_dim]
  d.num_kv_heads = k.shape()[1];
  CheckSameShape("k", k, {d.token_cap, d.num_kv_heads, d.head_dim},
                 "[T_cap, num_kv_heads, head_dim] (T_cap and head_dim from q)");
  CheckSameShape("v", v, k.shape(), "k's shape");
  PD_CHECK(d.head_dim >= 1 && d.head_dim <= kMaxHeadDim, kOp, ": head_dim = ", d.head_dim,
           " (q has shape ", ShapeStr(q.shape()), "), expected 1 <= head_dim <= ", kMaxHeadDim);
  PD_CHECK(d.num_kv_heads >= 1 && d.num_heads >= 1 && d.num_heads % d.num_kv_heads == 0, kOp,
           ": num_heads = ", d.num_heads, " (q) is not a positive multiple of num_kv_heads = ",
           d.num_kv_heads, " (k)");
  PD_CHECK(d.num_heads <= kMaxHeads, kOp, ": num_heads = ", d.num_heads, ", expected <= ", kMaxHeads);

  specworker::CheckRank(kOp, "key_cache", key_cache, 4);  // [num_blocks, num_kv_heads, block_size, head_dim]
  d.num_blocks = key_cache.shape()[0];
  d.block_size = key_cache.shape()[2];
  CheckSameShape("key_cache", key_cache, {d.num_blocks, d.num_kv_heads, d.block_size, d.head_dim},
                 "[num_blocks, num_kv_heads, block_size, head_dim] (num_kv_heads from k, head_dim from q)");
  CheckSameShape("value_cache", value_cache, key_cache.shape(), "key_cache's shape");
  PD_CHECK(block_size >= 1 && block_size == d.block_size, kOp, ": block_size = ", block_size,
           " but key_cache has shape ", ShapeStr(key_cache.shape()), " with block_size = ", d.block_size);
  PD_CHECK(std::isfinite(scale), kOp, ": scale = ", scale, ", expected a finite number");

  d.bsz = specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  specworker::CheckPerSlotRows(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, d.bsz);
  specworker::CheckCuSeqlens(kOp, "cu_seqlens_q", cu_seqlens_q, d.bsz);
  d.max_blocks = specworker::CheckSlotRows(kOp, "block_tables", block_tables, DataType::INT32, d.bsz);
  specworker::CheckDtype(kOp, "batch_id_per_token", batch_id_per_token, DataType::INT32);
  CheckSameShape("batch_id_per_token", batch_id_per_token, {d.token_cap}, "[T_cap] (q's rows)");
  for (const auto& [name, x] : {std::pair<const char*, const paddle::Tensor*>{
                                    "block_tables", &block_tables},
                                {"cu_seqlens_q", &cu_seqlens_q},
                                {"seq_lens_decoder", &seq_lens_decoder},
                                {"seq_lens_this_time", &seq_lens_this_time},
                                {"batch_id_per_token", &batch_id_per_token}}) {
    specworker::CheckSamePlace(kOp, name, *x, q, "q");
  }
  specworker::CheckFitsInt32(kOp, "T_cap", d.token_cap);
  specworker::CheckFitsInt32(kOp, "bsz", d.bsz);
  specworker::CheckFitsInt32(kOp, "num_blocks", d.num_blocks);
  specworker::CheckFitsInt32(kOp, "max_blocks_per_seq", d.max_blocks);
  specworker::CheckFitsInt32(kOp, "max_blocks_per_seq * block_size", d.max_blocks * d.block_size);
  return d;
}

// Every index the step reads or writes; raises before anything is written.
void CheckIndicesCPU(const Dims& d, const int32_t* tables, const int32_t* cu, const int32_t* dec,
                     const int32_t* lens, const int32_t* batch_ids) {
  PD_CHECK(cu[0] == 0, kOp, ": cu_seqlens_q[0] = ", cu[0], ", expected 0");
  for (int64_t b = 0; b < d.bsz; ++b) {
    PD_CHECK(lens[b] >= 0, kOp, ": seq_lens_this_time[", b, "] = ", lens[b], ", expected >= 0");
    const int64_t span = static_cast<int64_t>(cu[b + 1]) - cu[b];
    PD_CHECK(span == lens[b], kOp, ": cu_seqlens_q[", b + 1, "] - cu_seqlens_q[", b, "] = ", span,
             " but seq_lens_this_time[", b, "] = ", lens[b],
             "; cu_seqlens_q must be the exclusive prefix sum of seq_lens_this_time");
  }
  const int64_t token_num = cu[d.bsz];
  PD_CHECK(token_num <= d.token_cap, kOp, ": the step has T = cu_seqlens_q[bsz] = ", token_num,
           " tokens but q has only T_cap = ", d.token_cap, " rows");
  for (int64_t b = 0; b < d.bsz; ++b) {
    for (int64_t i = 0; i < lens[b]; ++i) {
      const int64_t t = cu[b] + i;
      PD_CHECK(batch_ids[t] == b, kOp, ": batch_id_per_token[", t, "] = ", batch_ids[t],
               ", expected ", b, " (row ", t, " is token ", i, " of slot ", b, " by cu_seqlens_q)");
    }
  }
  for (int64_t t = token_num; t < d.token_cap; ++t) {
    PD_CHECK(batch_ids[t] == -1, kOp, ": batch_id_per_token[", t, "] = ", batch_ids[t],
             ", expected -1 past the step's T = ", token_num, " tokens");
  }
  const int64_t capacity = d.max_blocks * d.block_size;
  for (int64_t b = 0; b < d.bsz; ++b) {
    if (lens[b] == 0) continue;  // stopped or idle: its decoder length and blocks are not read
    PD_CHECK(dec[b] >= 0, kOp, ": seq_lens_decoder[", b, "] = ", dec[b], ", expected >= 0");
    const int64_t last = static_cast<int64_t>(dec[b]) + lens[b] - 1;
    PD_CHECK(last < capacity, kOp, ": slot ", b, " reaches position ", last, " (seq_lens_decoder[",
             b, "] = ", dec[b], " + seq_lens_this_time[", b, "] = ", lens[b],
             " - 1) but block_tables holds max_blocks_per_seq * block_size = ", d.max_blocks, " * ",
             d.block_size, " = ", capacity, " positions per slot");
    for (int64_t j = 0; j <= last / d.block_size; ++j) {
      const int32_t block = tables[b * d.max_blocks + j];
      PD_CHECK(block >= 0 && block < d.num_blocks, kOp, ": block_tables[", b, ", ", j, "] = ", block,
               " but slot ", b, " uses positions 0..", last, " (blocks 0..", last / d.block_size,
               "); expected a block id in [0, num_blocks = ", d.num_blocks, ")");
    }
  }
}

template <typename T>
struct AttendJob {
  const Dims* d;
  const T* q;
  const T* key_cache;
  const T* value_cache;
  const int32_t* tables;
  const int32_t* cu;
  const int32_t* dec;
  const int32_t* batch_ids;
  double scale;
  T* out;
  int64_t rows;     // (token, kv head) pairs to compute: T * num_kv_heads
  int64_t units;    // unit u computes rows u, u + units, u + 2 units, ...
  int64_t stride;   // scores per query head in the scratch: the most keys a row reads
  int64_t scratch;  // doubles per unit: group x stride scores, group x head_dim accumulators, group sums
  double* buffer;   // units * scratch doubles
};

// Element offset of (position p, kv head h) in slot b's cache.
inline int64_t CacheAt(const Dims& d, const int32_t* tables, int64_t b, int64_t p, int64_t h) {
  const int64_t block = tables[b * d.max_blocks + p / d.block_size];
  return ((block * d.num_kv_heads + h) * d.block_size + p % d.block_size) * d.head_dim;
}

constexpr int64_t kKeys = 4;  // keys read together

// out[t, h] for token t and the query heads h of kv head g. Every value is computed as the contract above
// says: each dot product over head_dim in order, then per head the max, the exp sum and the weighted value
// sum in key order. The speed comes from the loop order alone: kKeys keys are read once for every head of
// the group, their dot products run side by side (independent chains, each in head_dim order), and each
// acc[x] takes kKeys keys' terms one after the other, in key order, from a register. The bits are those of
// one head and one key at a time.
template <typename T>
void AttendRow(const AttendJob<T>& j, int64_t t, int64_t g, double* scores, double* acc, double* sums) {
  const Dims& d = *j.d;
  const int64_t D = d.head_dim;
  const int64_t group = d.num_heads / d.num_kv_heads;
  const int64_t b = j.batch_ids[t];
  const int64_t n = j.dec[b] + (t - j.cu[b]) + 1;  // keys 0..p
  const T* q0 = j.q + (t * d.num_heads + g * group) * D;  // the group's query rows, one after the other
  const T* kv[kKeys];
  int64_t key = 0;
  for (; key + kKeys <= n; key += kKeys) {
    for (int64_t i = 0; i < kKeys; ++i) kv[i] = j.key_cache + CacheAt(d, j.tables, b, key + i, g);
    for (int64_t hh = 0; hh < group; ++hh) {
      const T* qh = q0 + hh * D;
      double dot[kKeys] = {};
      for (int64_t x = 0; x < D; ++x) {
        const double qx = static_cast<double>(static_cast<float>(qh[x]));
        for (int64_t i = 0; i < kKeys; ++i) dot[i] += qx * static_cast<float>(kv[i][x]);
      }
      for (int64_t i = 0; i < kKeys; ++i) scores[hh * j.stride + key + i] = dot[i] * j.scale;
    }
  }
  for (; key < n; ++key) {
    const T* kj = j.key_cache + CacheAt(d, j.tables, b, key, g);
    for (int64_t hh = 0; hh < group; ++hh) {
      const T* qh = q0 + hh * D;
      double dot = 0.0;
      for (int64_t x = 0; x < D; ++x) {
        dot += static_cast<double>(static_cast<float>(qh[x])) * static_cast<float>(kj[x]);
      }
      scores[hh * j.stride + key] = dot * j.scale;
    }
  }
  // per head: the max, then the weights and their sum, in key order; the weights replace the scores
  for (int64_t hh = 0; hh < group; ++hh) {
    double* s = scores + hh * j.stride;
    double max_score = -INFINITY;
    for (int64_t i = 0; i < n; ++i) max_score = std::max(max_score, s[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      s[i] = std::exp(s[i] - max_score);
      sum += s[i];
    }
    sums[hh] = sum;
  }
  std::fill(acc, acc + group * D, 0.0);
  for (key = 0; key + kKeys <= n; key += kKeys) {
    for (int64_t i = 0; i < kKeys; ++i) kv[i] = j.value_cache + CacheAt(d, j.tables, b, key + i, g);
    for (int64_t hh = 0; hh < group; ++hh) {
      const double* w = scores + hh * j.stride + key;
      double* ah = acc + hh * D;
      for (int64_t x = 0; x < D; ++x) {
        double a = ah[x];
        for (int64_t i = 0; i < kKeys; ++i) a += w[i] * static_cast<float>(kv[i][x]);
        ah[x] = a;
      }
    }
  }
  for (; key < n; ++key) {
    const T* vj = j.value_cache + CacheAt(d, j.tables, b, key, g);
    for (int64_t hh = 0; hh < group; ++hh) {
      const double w = scores[hh * j.stride + key];
      double* ah = acc + hh * D;
      for (int64_t x = 0; x < D; ++x) ah[x] += w * static_cast<float>(vj[x]);
    }
  }
  for (int64_t hh = 0; hh < group; ++hh) {
    T* o = j.out + (t * d.num_heads + g * group + hh) * D;
    for (int64_t x = 0; x < D; ++x) o[x] = static_cast<T>(static_cast<float>(acc[hh * D + x] / sums[hh]));
  }
}

template <typename T>
void AttendUnit(const void* ctx, int64_t unit) {
  const auto& j = *static_cast<const AttendJob<T>*>(ctx);
  double* scores = j.buffer + unit * j.scratch;
  const int64_t group = j.d->num_heads / j.d->num_kv_heads;
  double* acc = scores + group * j.stride;
  double* sums = acc + group * j.d->head_dim;
  for (int64_t row = unit; row < j.rows; row += j.units) {
    AttendRow(j, row / j.d->num_kv_heads, row % j.d->num_kv_heads, scores, acc, sums);
  }
}

// Below this many multiply-adds (query rows x keys x head_dim, both products) a step attends on the
// calling thread: the pool's hand-off costs more than it saves.
constexpr int64_t kParallelMacs = int64_t{1} << 17;

template <typename T>
void PagedAttentionCPU(const Dims& d, const T* q, const T* k, const T* v, T* key_cache,
                       T* value_cache, const int32_t* tables, const int32_t* cu, const int32_t* dec,
                       const int32_t* lens, const int32_t* batch_ids, double scale, T* out) {
  const int64_t D = d.head_dim;
  const int64_t kv_row = d.num_kv_heads * D;  // elements of one token's k (or v) row
  // 1. Append every new token, so step 2 sees this step's keys as ordinary cached ones.
  for (int64_t b = 0; b < d.bsz; ++b) {
    for (int64_t i = 0; i < lens[b]; ++i) {
      const int64_t t = cu[b] + i;
      const int64_t p = dec[b] + i;
      for (int64_t h = 0; h < d.num_kv_heads; ++h) {
        std::memcpy(key_cache + CacheAt(d, tables, b, p, h), k + t * kv_row + h * D, D * sizeof(T));
        std::memcpy(value_cache + CacheAt(d, tables, b, p, h), v + t * kv_row + h * D, D * sizeof(T));
      }
    }
  }
  // 2. Attend, each (token, kv head) on its own: which thread computes a row changes none of its bits. Rows
  // of no slot stay zero.
  std::memset(static_cast<void*>(out), 0, d.token_cap * d.num_heads * D * sizeof(T));
  const int64_t token_num = cu[d.bsz];
  if (token_num == 0) return;
  int64_t longest = 0, keys = 0;  // the most keys a row reads, and all rows' keys (about)
  for (int64_t b = 0; b < d.bsz; ++b) {
    if (lens[b] == 0) continue;
    longest = std::max<int64_t>(longest, static_cast<int64_t>(dec[b]) + lens[b]);
    keys += lens[b] * (static_cast<int64_t>(dec[b]) + (lens[b] + 1) / 2);
  }
  const int64_t group = d.num_heads / d.num_kv_heads;
  AttendJob<T> job{&d, q, key_cache, value_cache, tables, cu, dec, batch_ids, scale, out};
  job.rows = token_num * d.num_kv_heads;
  const bool parallel = 2 * keys * d.num_heads * D >= kParallelMacs;
  const int threads = parallel ? std::max(specworker::ParallelThreads(0), 1) : 1;
  // a few units a thread, handed out one at a time, even out rows of different lengths
  job.units = std::min<int64_t>(job.rows, 4 * static_cast<int64_t>(threads));
  job.stride = longest;
  job.scratch = group * (longest + D + 1);
  std::vector<double> buffer(job.units * job.scratch);
  job.buffer = buffer.data();
  specworker::ParallelFor(job.units, AttendUnit<T>, &job, threads);
}

}  // namespace

std::vector<paddle::Tensor> PagedAttention(
    const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
    paddle::Tensor& key_cache, paddle::Tensor& value_cache, const paddle::Tensor& block_tables,
    const paddle::Tensor& cu_seqlens_q, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& batch_id_per_token,
    int block_size, float scale) {
  specworker::CheckGiven(kOp, {{"q", &q}, {"k", &k}, {"v", &v}, {"key_cache", &key_cache},
                               {"value_cache", &value_cache}, {"block_tables", &block_tables},
                               {"cu_seqlens_q", &cu_seqlens_q},
                               {"seq_lens_decoder", &seq_lens_decoder},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"batch_id_per_token", &batch_id_per_token}});
  const Dims d = CheckInputs(q, k, v, key_cache, value_cache, block_tables, cu_seqlens_q,
                             seq_lens_decoder, seq_lens_this_time, batch_id_per_token, block_size,
                             scale);
  if (q.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return PagedAttentionCUDA(q, k, v, key_cache, value_cache, block_tables, cu_seqlens_q,
                              seq_lens_decoder, seq_lens_this_time, batch_id_per_token, block_size,
                              scale);
#else
    PD_THROW(kOp, ": got GPU tensors but the extension was built without CUDA");
#endif
  }
  const int32_t* tables = block_tables.data<int32_t>();
  const int32_t* cu = cu_seqlens_q.data<int32_t>();
  const int32_t* dec = seq_lens_decoder.data<int32_t>();
  const int32_t* lens = seq_lens_this_time.data<int32_t>();
  CheckIndicesCPU(d, tables, cu, dec, lens, batch_id_per_token.data<int32_t>());
  auto out = paddle::empty({d.token_cap, d.num_heads, d.head_dim}, q.dtype(), q.place());
#define SPECWORKER_PAGED_ATTENTION_CPU(T)                                                          \
  PagedAttentionCPU<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), key_cache.data<T>(),              \
                       value_cache.data<T>(), tables, cu, dec, lens,                               \
                       batch_id_per_token.data<int32_t>(), scale, out.data<T>())
  switch (q.dtype()) {
    case DataType::FLOAT32:
      SPECWORKER_PAGED_ATTENTION_CPU(float);
      break;
    case DataType::FLOAT16:
      SPECWORKER_PAGED_ATTENTION_CPU(paddle::float16);
      break;
    default:
      SPECWORKER_PAGED_ATTENTION_CPU(paddle::bfloat16);
      break;
  }
#undef SPECWORKER_PAGED_ATTENTION_CPU
  return {out};
}

std::vector<std::vector<int64_t>> PagedAttentionInferShape(
    const std::vector<int64_t>& q, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&) {
  return {q};
}

std::vector<paddle::DataType> PagedAttentionInferDtype(
    const paddle::DataType& q, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&) {
  return {q};
}

PD_BUILD_OP(paged_attention)
    .Inputs({"q", "k", "v", "key_cache", "value_cache", "block_tables", "cu_seqlens_q",
             "seq_lens_decoder", "seq_lens_this_time", "batch_id_per_token"})
    .Outputs({"out", "key_cache_out", "value_cache_out"})
    .Attrs({"block_size: int", "scale: float"})
    .SetInplaceMap({{"key_cache", "key_cache_out"}, {"value_cache", "value_cache_out"}})
    .SetKernelFn(PD_KERNEL(PagedAttention))
    .SetInferShapeFn(PD_INFER_SHAPE(PagedAttentionInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(PagedAttentionInferDtype));
