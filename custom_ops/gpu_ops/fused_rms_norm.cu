// Paddle CUDA binding for fused_rms_norm: launch, report. The argument checks and the output
// allocation run in cpu_ops/fused_rms_norm.cc before dispatch.
#include "op_checks.h"
#include "fused_rms_norm_cuda.h"
#include "kernels/fused_rms_norm.h"

void FusedRmsNormCUDA(const paddle::Tensor& x, const paddle::Tensor& weight,
                      const paddle::optional<paddle::Tensor>& residual, float eps, paddle::Tensor& out,
                      paddle::Tensor& residual_out) {
  const int err = specworker_fused_rms_norm_launch(
      x.data<float>(), weight.data<float>(), residual ? residual->data<float>() : nullptr,
      out.data<float>(), residual ? residual_out.data<float>() : nullptr,
      static_cast<int>(x.shape()[0]), static_cast<int>(x.shape()[1]), eps, x.stream());
  SPECWORKER_CHECK_LAUNCH("fused_rms_norm", err);
}
