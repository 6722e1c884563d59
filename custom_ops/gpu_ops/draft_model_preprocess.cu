// Paddle CUDA binding for draft_model_preprocess: launch in place, report. Checks run in
// cpu_ops/draft_model_preprocess.cc before dispatch (dtypes, shapes, every input on one device,
// not_need_stop included: it stays on the device and is never copied to the host).
#include "op_checks.h"
#include "draft_model_preprocess_cuda.h"
#include "kernels/draft_model_preprocess.h"

namespace {

template <typename T>
T* Mut(const paddle::Tensor& x) {
  return const_cast<T*>(x.data<T>());
}

int Width(const paddle::Tensor& x) { return static_cast<int>(x.shape()[1]); }

}  // namespace

void DraftModelPreprocessCUDA(
    const paddle::Tensor& draft_tokens, const paddle::Tensor& input_ids,
    const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& step_idx, const paddle::Tensor& not_need_stop,
    const paddle::Tensor& pre_ids, const paddle::Tensor& accept_tokens,
    const paddle::Tensor& accept_num, const paddle::Tensor& target_model_seq_lens_decoder,
    const paddle::Tensor& target_model_step_idx, const paddle::Tensor& target_model_stop_flags,
    const paddle::Tensor& max_dec_len, const paddle::Tensor& target_model_draft_tokens,
    const paddle::optional<paddle::Tensor>& target_model_is_block_step, int num_model_steps,
    bool is_splitwise_prefill, bool truncate_first_token) {
  const int err = specworker_draft_model_preprocess_launch(
      Mut<int64_t>(draft_tokens), Width(draft_tokens), Mut<int64_t>(input_ids), Width(input_ids),
      Mut<bool>(stop_flags), Mut<int32_t>(seq_lens_this_time), Mut<int32_t>(seq_lens_encoder),
      Mut<int32_t>(seq_lens_decoder), Mut<int64_t>(step_idx), Mut<bool>(not_need_stop),
      Mut<int64_t>(pre_ids), Width(pre_ids), accept_tokens.data<int64_t>(), Width(accept_tokens),
      accept_num.data<int32_t>(), target_model_seq_lens_decoder.data<int32_t>(),
      target_model_step_idx.data<int64_t>(), target_model_stop_flags.data<bool>(),
      max_dec_len.data<int64_t>(), Mut<int64_t>(target_model_draft_tokens),
      Width(target_model_draft_tokens),
      target_model_is_block_step ? target_model_is_block_step->data<bool>() : nullptr,
      static_cast<int>(seq_lens_this_time.shape()[0]), num_model_steps,
      is_splitwise_prefill ? 1 : 0, truncate_first_token ? 1 : 0, seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("draft_model_preprocess", err);
}
