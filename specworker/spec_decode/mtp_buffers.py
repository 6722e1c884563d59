"""DRAFT_BUFFERS: the MTP proposer's own batch (docs/spec.md §3: "the proposer has its own batch of the same
kind"), declared like the target's and moved row by row with it. FastDeploy's proposer names."""

from __future__ import annotations

from specworker.model_executor.slot_buffers import NO_TOKEN, TARGET_BUFFERS, BufferKind, BufferSpec, check_table

__all__ = ["DRAFT_BUFFERS"]

N, S, D = "max_num_seqs", "max_model_len", "max_draft_token_num"


def _slot(name, dims, dtype, fill, doc) -> BufferSpec:
    return BufferSpec(name, dims, dtype, fill, BufferKind.PER_SLOT, False, doc)


DRAFT_BUFFERS: tuple[BufferSpec, ...] = (
    _slot("input_ids", (N, S), "int64", NO_TOKEN, "draft prompt chunk: the target's shifted left by one"),
    _slot("pre_ids", (N, S), "int64", NO_TOKEN, "draft history"),
    _slot("draft_tokens", (N, D), "int64", NO_TOKEN, "draft decode input: the tokens the target accepted"),
    _slot("seq_lens_this_time", (N,), "int32", 0, "draft L_b of the current substep"),
    _slot("seq_lens_encoder", (N,), "int32", 0, "draft E_b (> 0: the draft prefills this step)"),
    _slot("seq_lens_decoder", (N,), "int32", 0, "draft tokens in the draft KV cache"),
    _slot("step_idx", (N,), "int64", 0, "draft step index"),
    _slot("stop_flags", (N,), "bool", True, "draft slot idle"),
    _slot("draft_probs", (N, "num_speculative_tokens", "vocab_size"), "float32", 0.0,
          "distribution each draft was sampled from (rejection verification); moves with the slot"),
    BufferSpec("last_hidden", (N, "hidden_size"), "float32", 0.0, BufferKind.PER_STEP, False,
               "each slot's last draft hidden row, input of the next substep (rebuilt every substep)"),
    BufferSpec("not_need_stop", (1,), "bool", False, BufferKind.GLOBAL, False, "some draft slot runs"),
    # the draft's own packed index tensors, rebuilt by pre_process every substep (same specs as the target's)
    *(spec for spec in TARGET_BUFFERS if spec.kind is BufferKind.PER_STEP),
)
check_table(DRAFT_BUFFERS)
