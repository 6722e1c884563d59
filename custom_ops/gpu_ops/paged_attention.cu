// Paddle CUDA binding for paged_attention: allocate out (and, for bfloat16, the tensor-core path's chunk
// workspace), launch (caches in place), report.
// Shapes, dtypes, places and attributes were checked by the op (cpu_ops/paged_attention.cc)
// before it dispatched here. Index values are not checked (that would need a host sync): the
// kernel writes a zero output row, and skips the cache write, where the CPU op would raise.
#include "op_checks.h"
#include "paged_attention_cuda.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_bf16.h"

std::vector<paddle::Tensor> PagedAttentionCUDA(
    const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
    paddle::Tensor& key_cache, paddle::Tensor& value_cache, const paddle::Tensor& block_tables,
    const paddle::Tensor& cu_seqlens_q, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& batch_id_per_token,
    int block_size, float scale) {
  const auto& qs = q.shape();  // [T_cap, num_heads, head_dim]
  const auto& cs = key_cache.shape();  // [num_blocks, num_kv_heads, block_size, head_dim]
  const int token_cap = static_cast<int>(qs[0]);
  const int bsz = static_cast<int>(seq_lens_this_time.shape()[0]);
  const int max_blocks = static_cast<int>(block_tables.shape()[1]);
  // Uninitialised: the kernel writes every row, zero rows included.
  auto out = paddle::empty({qs[0], qs[1], qs[2]}, q.dtype(), q.place());
  int err = 0;
  if (q.dtype() == paddle::DataType::BFLOAT16) {
    const int64_t bytes = specworker_paged_attention_bf16_workspace_bytes(
        token_cap, static_cast<int>(qs[1]), static_cast<int>(qs[2]), block_size, max_blocks);
    PD_CHECK(bytes >= 0, "paged_attention: no workspace size for T_cap = ", qs[0], ", block_size = ", block_size);
    auto workspace = paddle::empty({bytes / 4 > 0 ? bytes / 4 : 1}, paddle::DataType::FLOAT32, q.place());
    err = specworker_paged_attention_bf16_launch(
        reinterpret_cast<const __nv_bfloat16*>(q.data()), reinterpret_cast<const __nv_bfloat16*>(k.data()),
        reinterpret_cast<const __nv_bfloat16*>(v.data()), reinterpret_cast<__nv_bfloat16*>(key_cache.data()),
        reinterpret_cast<__nv_bfloat16*>(value_cache.data()), block_tables.data<int32_t>(),
        cu_seqlens_q.data<int32_t>(), seq_lens_decoder.data<int32_t>(), seq_lens_this_time.data<int32_t>(),
        batch_id_per_token.data<int32_t>(), reinterpret_cast<__nv_bfloat16*>(out.data()),
        workspace.data<float>(), bytes, token_cap, bsz, static_cast<int>(qs[1]), static_cast<int>(cs[1]),
        static_cast<int>(qs[2]), static_cast<int>(cs[0]), block_size, max_blocks, scale, q.stream());
  } else {
    const int dtype = q.dtype() == paddle::DataType::FLOAT16 ? SPECWORKER_ATTENTION_FLOAT16
                                                             : SPECWORKER_ATTENTION_FLOAT32;
    err = specworker_paged_attention_launch(
        q.data(), k.data(), v.data(), key_cache.data(), value_cache.data(), block_tables.data<int32_t>(),
        cu_seqlens_q.data<int32_t>(), seq_lens_decoder.data<int32_t>(), seq_lens_this_time.data<int32_t>(),
        batch_id_per_token.data<int32_t>(), out.data(), token_cap, bsz, static_cast<int>(qs[1]),
        static_cast<int>(cs[1]), static_cast<int>(qs[2]), static_cast<int>(cs[0]), block_size, max_blocks,
        scale, dtype, q.stream());
  }
  SPECWORKER_CHECK_LAUNCH("paged_attention", err);
  return {out};
}
