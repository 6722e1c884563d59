// Paddle CUDA binding for get_cu_seqlens: allocate, launch, report.
#include "op_checks.h"
#include "kernels/get_cu_seqlens.h"

std::vector<paddle::Tensor> GetCuSeqlensCUDA(const paddle::Tensor& seq_lens) {
  const int64_t bsz = seq_lens.shape()[0];
  auto cu = paddle::empty({bsz + 1}, paddle::DataType::INT32, seq_lens.place());
  const int err = specworker_get_cu_seqlens_launch(
      seq_lens.data<int32_t>(), static_cast<int>(bsz), cu.data<int32_t>(), seq_lens.stream());
  SPECWORKER_CHECK_LAUNCH("get_cu_seqlens", err);
  return {cu};
}
