// draft_model_update: the draft state update after MTP sampling substep s (docs/spec.md §5; FastDeploy
// §8.4, era-[B] argument order with rows located through cu_seqlens_q_output, era-[C] fixes).
//   inter_next_tokens   [rows] (or [rows, 1]) int64: the draft's sampled token per output row
//   draft_tokens        [N, D] int64 (in place): column 0 = the slot's next draft input token
//   pre_ids             [N, S] int64 (in place): the draft's token history
//   seq_lens_this_time, seq_lens_encoder, seq_lens_decoder [bsz] (or [bsz, 1]) int32 (in place)
//   step_idx            [bsz] int64 (in place)
//   cu_seqlens_q_output [bsz + 1] int32: slot b owns rows [cu[b], cu[b + 1])
//   stop_flags          [bsz] bool (in place); not_need_stop [1] bool (in place, same device)
//   max_dec_len         [bsz] int64; end_ids [E] int64 (unused, see below)
//   base_model_draft_tokens [N, D_target] int64 (in place): the target's draft_tokens
//   attrs max_seq_len (FastDeploy's legacy padded width, unused), substep (s)
// Per slot b < bsz:
//   * stopped (also paused; the proposer stops paused slots): draft_tokens[b, 0] = -1,
//     base_model_draft_tokens[b, s + 1] = -1, L = 0, E = 0; Dec, step_idx, pre_ids kept.
//   * running: token = inter_next_tokens[cu[b + 1] - 1], the slot's last row (decode: the row of
//     its last input token, as FastDeploy's start + L - 1; prefill: its single row). Then
//       prefill (E > 0): Dec += E, E = 0, step_idx += 1;   decode: Dec += L, step_idx += L;
//     pre_ids[b, step_idx] = token when 0 <= step_idx < S (FastDeploy's prefill writes
//     pre_ids[b, 1], the same position when step_idx was 0);
//     step_idx < max_dec_len[b]: propose it: draft_tokens[b, 0] = base_model_draft_tokens[b, s+1]
//       = token, L = 1;
//     otherwise it would be generated token step_idx + 1 > max_dec_len, which verification can
//       never emit (the target stops at max_dec_len first): both get -1 and the slot stops
//       (stop_flags = true, L = 0, E = 0), so no later substep proposes after the -1 either.
//       FastDeploy [B] proposed end_ids[0] there; [C] wrote -1 (and skips such requests earlier).
//   * A draft EOS does not stop the slot (era [C]'s fix): a draft is only a proposal and
//     verification decides stopping. Drafts after an EOS draft are never emitted (the target
//     either rejects the EOS or stops on it), so stopping would only save work, at the cost of
//     the draft carrying a stop that the target did not make; end_ids is accepted for
//     FastDeploy compatibility and is not read.
// not_need_stop[0] = some slot b < bsz is running afterwards (on the device, no host copy).
// A stop set here lasts until the next round's draft_model_preprocess, which restarts every slot
// whose target is running (FastDeploy [B] restarts stopped draft slots, [C] re-derives every round).
//
// Bad values, CPU vs CUDA: the CPU kernel raises (before writing anything) for a running slot
// whose last row is missing (cu[b + 1] <= cu[b], cu[b] < 0 or cu[b + 1] > rows). The CUDA kernel
// cannot raise without a host sync; it makes such a slot propose -1 and stop.
#include <vector>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "draft_model_update_cuda.h"
#endif

namespace {

constexpr const char* kOp = "draft_model_update";
using paddle::DataType;

// A 1-D tensor [n] or FastDeploy's column [n, 1]; returns n.
int64_t CheckColumn(const char* name, const paddle::Tensor& x, DataType want) {
  specworker::CheckDtype(kOp, name, x, want);
  const auto& s = x.shape();
  PD_CHECK(s.size() == 1 || (s.size() == 2 && s[1] == 1), kOp, ": ", name, " has shape ",
           specworker::ShapeStr(s), ", expected a 1-D tensor [n] or [n, 1]");
  return s[0];
}

void CheckArgs(const paddle::Tensor& inter_next_tokens, const paddle::Tensor& draft_tokens,
               const paddle::Tensor& pre_ids, const paddle::Tensor& seq_lens_this_time,
               const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
               const paddle::Tensor& step_idx, const paddle::Tensor& cu_seqlens_q_output,
               const paddle::Tensor& stop_flags, const paddle::Tensor& not_need_stop,
               const paddle::Tensor& max_dec_len, const paddle::Tensor& end_ids,
               const paddle::Tensor& base_model_draft_tokens, int substep) {
  using specworker::CheckPerSlot;
  using specworker::ShapeStr;
  const int64_t bsz = CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlot(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  CheckPerSlot(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  CheckPerSlot(kOp, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  const int64_t rows = CheckColumn("inter_next_tokens", inter_next_tokens, DataType::INT64);
  const int64_t D = specworker::CheckSlotRows(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  PD_CHECK(D >= 1, kOp, ": draft_tokens has shape ", ShapeStr(draft_tokens.shape()),
           ", expected [N, D] with D >= 1 (column 0 is written)");
  specworker::CheckSlotRows(kOp, "pre_ids", pre_ids, DataType::INT64, bsz);
  const int64_t width = specworker::CheckSlotRows(kOp, "base_model_draft_tokens",
                                                  base_model_draft_tokens, DataType::INT64, bsz);
  PD_CHECK(substep >= 0 && substep + 1 < width, kOp, ": substep = ", substep,
           " writes base_model_draft_tokens[:, ", static_cast<int64_t>(substep) + 1,
           "], but base_model_draft_tokens has shape ", ShapeStr(base_model_draft_tokens.shape()),
           "; expected 0 <= substep < ", width - 1, " (its width - 1)");
  specworker::CheckDtype(kOp, "cu_seqlens_q_output", cu_seqlens_q_output, DataType::INT32);
  PD_CHECK(cu_seqlens_q_output.shape() == std::vector<int64_t>{bsz + 1}, kOp,
           ": cu_seqlens_q_output has shape ", ShapeStr(cu_seqlens_q_output.shape()),
           ", expected [bsz + 1] = [", bsz + 1, "]");
  specworker::CheckDtype(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  PD_CHECK(not_need_stop.shape() == std::vector<int64_t>{1}, kOp, ": not_need_stop has shape ",
           ShapeStr(not_need_stop.shape()), ", expected [1]");
  CheckColumn("end_ids", end_ids, DataType::INT64);
  PD_CHECK(rows <= INT32_MAX && pre_ids.shape()[1] <= INT32_MAX && bsz < INT32_MAX, kOp,
           ": inter_next_tokens has ", rows, " rows and pre_ids ", pre_ids.shape()[1],
           " columns; both must fit in int32");
  const paddle::Tensor* all[] = {&inter_next_tokens, &draft_tokens, &pre_ids, &seq_lens_encoder,
                                 &seq_lens_decoder, &step_idx, &cu_seqlens_q_output, &stop_flags,
                                 &not_need_stop, &max_dec_len, &end_ids, &base_model_draft_tokens};
  const char* names[] = {"inter_next_tokens", "draft_tokens", "pre_ids", "seq_lens_encoder",
                         "seq_lens_decoder", "step_idx", "cu_seqlens_q_output", "stop_flags",
                         "not_need_stop", "max_dec_len", "end_ids", "base_model_draft_tokens"};
  for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); ++k) {
    specworker::CheckSamePlace(kOp, names[k], *all[k], seq_lens_this_time, "seq_lens_this_time");
  }
}

// Every running slot needs its last row inside inter_next_tokens; checked before any write.
void CheckRowsCPU(const bool* stop, const int32_t* cu, int64_t bsz, int64_t rows) {
  for (int64_t b = 0; b < bsz; ++b) {
    if (stop[b]) continue;
    PD_CHECK(cu[b] >= 0 && cu[b + 1] > cu[b] && cu[b + 1] <= rows, kOp, ": running slot ", b,
             " (stop_flags[", b, "] = false) owns output rows [cu_seqlens_q_output[", b,
             "], cu_seqlens_q_output[", b + 1, "]) = [", cu[b], ", ", cu[b + 1],
             "); expected at least one row, within inter_next_tokens' ", rows, " rows");
  }
}

void DraftModelUpdateCPU(const paddle::Tensor& inter_next_tokens, paddle::Tensor& draft_tokens,
                         paddle::Tensor& pre_ids, paddle::Tensor& seq_lens_this_time,
                         paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                         paddle::Tensor& step_idx, const paddle::Tensor& cu_seqlens_q_output,
                         paddle::Tensor& stop_flags, paddle::Tensor& not_need_stop,
                         const paddle::Tensor& max_dec_len,
                         paddle::Tensor& base_model_draft_tokens, int substep) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t D = draft_tokens.shape()[1], S = pre_ids.shape()[1];
  const int64_t width = base_model_draft_tokens.shape()[1];
  const int64_t* next_tokens = inter_next_tokens.data<int64_t>();
  int64_t* next_input = draft_tokens.data<int64_t>();
  int64_t* history = pre_ids.data<int64_t>();
  int32_t* lens = seq_lens_this_time.data<int32_t>();
  int32_t* enc = seq_lens_encoder.data<int32_t>();
  int32_t* dec = seq_lens_decoder.data<int32_t>();
  int64_t* steps = step_idx.data<int64_t>();
  const int32_t* cu = cu_seqlens_q_output.data<int32_t>();
  bool* stop = stop_flags.data<bool>();
  const int64_t* max_len = max_dec_len.data<int64_t>();
  int64_t* proposals = base_model_draft_tokens.data<int64_t>();
  CheckRowsCPU(stop, cu, bsz, inter_next_tokens.shape()[0]);

  bool any_running = false;
  for (int64_t b = 0; b < bsz; ++b) {
    int64_t& proposal = proposals[b * width + substep + 1];
    if (stop[b]) {
      next_input[b * D] = -1;
      proposal = -1;
      lens[b] = 0;
      enc[b] = 0;
      continue;
    }
    const int64_t token = next_tokens[cu[b + 1] - 1];
    if (enc[b] > 0) {
      dec[b] += enc[b];
      enc[b] = 0;
      steps[b] += 1;
    } else {
      dec[b] += lens[b];
      steps[b] += lens[b];
    }
    if (steps[b] >= 0 && steps[b] < S) history[b * S + steps[b]] = token;
    const bool verifiable = steps[b] < max_len[b];
    next_input[b * D] = verifiable ? token : -1;
    proposal = verifiable ? token : -1;
    lens[b] = verifiable ? 1 : 0;
    stop[b] = !verifiable;
    any_running = any_running || verifiable;
  }
  not_need_stop.data<bool>()[0] = any_running;
}

}  // namespace

void DraftModelUpdate(const paddle::Tensor& inter_next_tokens, paddle::Tensor& draft_tokens,
                      paddle::Tensor& pre_ids, paddle::Tensor& seq_lens_this_time,
                      paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                      paddle::Tensor& step_idx, const paddle::Tensor& cu_seqlens_q_output,
                      paddle::Tensor& stop_flags, paddle::Tensor& not_need_stop,
                      const paddle::Tensor& max_dec_len, const paddle::Tensor& end_ids,
                      paddle::Tensor& base_model_draft_tokens, int max_seq_len, int substep) {
  specworker::CheckGiven(kOp, {{"inter_next_tokens", &inter_next_tokens},
                               {"draft_tokens", &draft_tokens}, {"pre_ids", &pre_ids},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}, {"step_idx", &step_idx},
                               {"cu_seqlens_q_output", &cu_seqlens_q_output},
                               {"stop_flags", &stop_flags}, {"not_need_stop", &not_need_stop},
                               {"max_dec_len", &max_dec_len}, {"end_ids", &end_ids},
                               {"base_model_draft_tokens", &base_model_draft_tokens}});
  (void)max_seq_len;  // FastDeploy [A]'s padded width; rows come from cu_seqlens_q_output
  CheckArgs(inter_next_tokens, draft_tokens, pre_ids, seq_lens_this_time, seq_lens_encoder,
            seq_lens_decoder, step_idx, cu_seqlens_q_output, stop_flags, not_need_stop,
            max_dec_len, end_ids, base_model_draft_tokens, substep);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    DraftModelUpdateCUDA(inter_next_tokens, draft_tokens, pre_ids, seq_lens_this_time,
                         seq_lens_encoder, seq_lens_decoder, step_idx, cu_seqlens_q_output,
                         stop_flags, not_need_stop, max_dec_len, base_model_draft_tokens, substep);
    return;
#else
    PD_THROW(kOp, ": got GPU tensors but the extension was built without CUDA");
#endif
  }
  DraftModelUpdateCPU(inter_next_tokens, draft_tokens, pre_ids, seq_lens_this_time,
                      seq_lens_encoder, seq_lens_decoder, step_idx, cu_seqlens_q_output,
                      stop_flags, not_need_stop, max_dec_len, base_model_draft_tokens, substep);
}

PD_BUILD_OP(draft_model_update)
    .Inputs({"inter_next_tokens", "draft_tokens", "pre_ids", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "step_idx", "cu_seqlens_q_output",
             "stop_flags", "not_need_stop", "max_dec_len", "end_ids", "base_model_draft_tokens"})
    .Outputs({"draft_tokens_out", "pre_ids_out", "seq_lens_this_time_out",
              "seq_lens_encoder_out", "seq_lens_decoder_out", "step_idx_out", "stop_flags_out",
              "not_need_stop_out", "base_model_draft_tokens_out"})
    .Attrs({"max_seq_len: int", "substep: int"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"pre_ids", "pre_ids_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"step_idx", "step_idx_out"},
                    {"stop_flags", "stop_flags_out"},
                    {"not_need_stop", "not_need_stop_out"},
                    {"base_model_draft_tokens", "base_model_draft_tokens_out"}})
    .SetKernelFn(PD_KERNEL(DraftModelUpdate));
