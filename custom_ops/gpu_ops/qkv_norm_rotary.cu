// Paddle CUDA binding for qkv_norm_rotary: allocate, launch, report. The argument checks run in
// cpu_ops/qkv_norm_rotary.cc before dispatch.
#include "op_checks.h"
#include "qkv_norm_rotary_cuda.h"
#include "kernels/qkv_norm_rotary.h"

std::vector<paddle::Tensor> QkvNormRotaryCUDA(const paddle::Tensor& qkv, const paddle::Tensor& cos_full,
                                              const paddle::Tensor& sin_signed,
                                              const paddle::optional<paddle::Tensor>& q_norm_weight,
                                              const paddle::optional<paddle::Tensor>& k_norm_weight, int num_heads,
                                              int num_kv_heads, int head_dim, float eps) {
  const int64_t t_num = qkv.shape()[0];
  // Uninitialised: the kernel writes every element.
  auto q = paddle::empty({t_num, num_heads, head_dim}, paddle::DataType::FLOAT32, qkv.place());
  auto k = paddle::empty({t_num, num_kv_heads, head_dim}, paddle::DataType::FLOAT32, qkv.place());
  auto v = paddle::empty({t_num, num_kv_heads, head_dim}, paddle::DataType::FLOAT32, qkv.place());
  if (t_num == 0) return {q, k, v};
  const int err = specworker_qkv_norm_rotary_launch(
      qkv.data<float>(), cos_full.data<float>(), sin_signed.data<float>(),
      q_norm_weight ? q_norm_weight->data<float>() : nullptr, k_norm_weight ? k_norm_weight->data<float>() : nullptr,
      q.data<float>(), k.data<float>(), v.data<float>(), static_cast<int>(t_num), num_heads, num_kv_heads, head_dim,
      eps, qkv.stream());
  SPECWORKER_CHECK_LAUNCH("qkv_norm_rotary", err);
  return {q, k, v};
}
