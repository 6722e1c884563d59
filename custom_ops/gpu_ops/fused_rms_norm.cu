// Paddle CUDA binding for fused_rms_norm: allocate, launch, report. The argument checks run in
// cpu_ops/fused_rms_norm.cc before dispatch.
#include "op_checks.h"
#include "fused_rms_norm_cuda.h"
#include "kernels/fused_rms_norm.h"

std::vector<paddle::Tensor> FusedRmsNormCUDA(const paddle::Tensor& x, const paddle::Tensor& weight,
                                             const paddle::optional<paddle::Tensor>& residual,
                                             float eps) {
  const int64_t rows = x.shape()[0];
  const int64_t hidden = x.shape()[1];
  auto out = paddle::empty({rows, hidden}, paddle::DataType::FLOAT32, x.place());
  // [0, H] without residual: the wrapper returns x itself as residual_out.
  auto residual_out =
      paddle::empty({residual ? rows : 0, hidden}, paddle::DataType::FLOAT32, x.place());
  if (rows == 0) return {out, residual_out};
  const int err = specworker_fused_rms_norm_launch(
      x.data<float>(), weight.data<float>(), residual ? residual->data<float>() : nullptr,
      out.data<float>(), residual ? residual_out.data<float>() : nullptr, static_cast<int>(rows),
      static_cast<int>(hidden), eps, x.stream());
  SPECWORKER_CHECK_LAUNCH("fused_rms_norm", err);
  return {out, residual_out};
}
