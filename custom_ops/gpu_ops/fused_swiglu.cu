// Paddle CUDA binding for fused_swiglu: launch, report. The argument checks and the output allocation run in
// cpu_ops/fused_swiglu.cc before dispatch.
#include "op_checks.h"
#include "fused_swiglu_cuda.h"
#include "kernels/fused_swiglu.h"

void FusedSwigluCUDA(const paddle::Tensor& gate_up, paddle::Tensor& out) {
  const int err = specworker_fused_swiglu_launch(gate_up.data<float>(), out.data<float>(),
                                                 static_cast<int>(gate_up.shape()[0]),
                                                 static_cast<int>(gate_up.shape()[1] / 2), gate_up.stream());
  SPECWORKER_CHECK_LAUNCH("fused_swiglu", err);
}
