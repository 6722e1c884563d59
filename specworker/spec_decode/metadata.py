"""The typed boundaries of a speculative step (docs/spec.md §2): what verification reads (VerifyInputs) and
returns (VerifyOutput), what a proposer reads of the target (ProposerInputs) and returns (ProposerOutput).
Every tensor field is a view of a preallocated buffer (share_inputs or the draft batch), never a new
allocation, so building one per step costs a Python object and no device work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import paddle

from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.sampler import SamplerOutput

__all__ = ["ProposerInputs", "ProposerOutput", "VerifyInputs", "VerifyOutput"]


def _views(cls, share_inputs: Mapping[str, paddle.Tensor], skip: tuple[str, ...] = ()) -> dict:
    names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    missing = [n for n in names if n not in share_inputs]
    if missing:
        raise ValueError(f"{cls.__name__}.from_share_inputs: share_inputs lacks {missing}")
    return {n: share_inputs[n] for n in names}


@dataclasses.dataclass(slots=True, kw_only=True)
class VerifyInputs:
    """The per-slot buffers verification reads and writes (share_inputs entries, never copies)."""

    accept_tokens: paddle.Tensor  # [N, D] int64, written
    accept_num: paddle.Tensor  # [N] int32, written
    step_idx: paddle.Tensor  # [N] int64, written
    stop_flags: paddle.Tensor  # [N] bool, written
    seq_lens_encoder: paddle.Tensor  # [N] int32
    seq_lens_decoder: paddle.Tensor  # [N] int32
    draft_tokens: paddle.Tensor  # [N, D] int64
    seq_lens_this_time: paddle.Tensor  # [N] int32
    max_dec_len: paddle.Tensor  # [N] int64
    eos_token_id: paddle.Tensor  # [E] int64
    is_block_step: paddle.Tensor  # [N] bool
    actual_draft_token_nums: paddle.Tensor  # [N] int32
    top_p: paddle.Tensor  # [N] float32
    infer_seed: paddle.Tensor  # [N] int64
    reasoning_status: paddle.Tensor  # [N] int32, written by the reasoning constraint
    enable_thinking: paddle.Tensor  # [N] bool

    @classmethod
    def from_share_inputs(cls, share_inputs: Mapping[str, paddle.Tensor]) -> VerifyInputs:
        return cls(**_views(cls, share_inputs))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class VerifyOutput:
    """What one verification emitted (views of the buffers VerifyInputs names as written)."""

    accept_tokens: paddle.Tensor  # [N, D] int64: accept_tokens[b, :accept_num[b]] were emitted
    accept_num: paddle.Tensor  # [N] int32
    stop_flags: paddle.Tensor  # [N] bool: the slot stopped this step or was already idle
    step_idx: paddle.Tensor  # [N] int64, advanced by accept_num
    sampler: SamplerOutput  # the sampled rows and the distributions they came from (logprobs read them)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProposerInputs:
    """What a proposer reads of the target after its verify + update: views of the target's share_inputs
    (the same tensors for the worker's life) plus this step's target hidden rows and ForwardMeta
    (`for_step`). The `_cpu` fields are host mirrors refreshed by the step's one device-to-host copy."""

    target_hidden: paddle.Tensor | None  # [T, H] float32 hidden rows of the target's packed tokens
    meta: ForwardMeta | None  # the target's ForwardMeta of this step
    # request state
    prompt_ids: paddle.Tensor  # [N, S] int64 whole prompt, -1 after
    prompt_lens: paddle.Tensor  # [N] int64
    pre_ids: paddle.Tensor  # [N, S] int64 generated history, pre_ids[b, step_idx[b]] the last
    step_idx: paddle.Tensor  # [N] int64
    max_dec_len: paddle.Tensor  # [N] int64
    eos_token_id: paddle.Tensor  # [E] int64
    block_tables: paddle.Tensor  # [N, max_blocks_per_seq] int32 (the draft's KV cache shares them)
    seq_lens_encoder: paddle.Tensor  # [N] int32
    seq_lens_decoder: paddle.Tensor  # [N] int32
    stop_flags: paddle.Tensor  # [N] bool
    is_block_step: paddle.Tensor  # [N] bool
    accept_tokens: paddle.Tensor  # [N, D] int64, this step's emitted tokens
    accept_num: paddle.Tensor  # [N] int32
    actual_draft_token_nums: paddle.Tensor  # [N] int32 adaptive draft budget (<= k)
    policy_draft_len: paddle.Tensor  # [N] int32 the speculation policy's k_b for the next step (0..k)
    # the request's sampling parameters (sampled drafts)
    temperature: paddle.Tensor  # [N] float32
    top_k: paddle.Tensor  # [N] int64
    top_p: paddle.Tensor  # [N] float32
    min_p: paddle.Tensor  # [N] float32
    infer_seed: paddle.Tensor  # [N] int64
    # host mirrors
    accept_tokens_cpu: paddle.Tensor  # [N, D] int64
    accept_num_cpu: paddle.Tensor  # [N] int32
    stop_flags_cpu: paddle.Tensor  # [N] bool
    is_block_step_cpu: paddle.Tensor  # [N] bool
    # the next step's query, which the proposer writes (ProposerOutput names the same tensors)
    draft_tokens: paddle.Tensor  # [N, D] int64: [b, 0] the last accepted token, [b, 1..] drafts
    seq_lens_this_time: paddle.Tensor  # [N] int32: 1 + drafts for a running decode slot, 0 idle
    # host ints from the policy's choice (no device read): max and min of k_b over the slots decoding next step
    max_draft_len: int = 0
    min_draft_len: int = 0

    HOST_FIELDS = ("target_hidden", "meta", "max_draft_len", "min_draft_len")

    @classmethod
    def from_share_inputs(cls, share_inputs: Mapping[str, paddle.Tensor]) -> ProposerInputs:
        return cls(target_hidden=None, meta=None, **_views(cls, share_inputs, skip=cls.HOST_FIELDS))

    def for_step(self, target_hidden: paddle.Tensor, meta: ForwardMeta, *, max_draft_len: int,
                 min_draft_len: int) -> ProposerInputs:
        return dataclasses.replace(self, target_hidden=target_hidden, meta=meta, max_draft_len=max_draft_len,
                                   min_draft_len=min_draft_len)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProposerOutput:
    """The drafts a proposer wrote: the target's next-step query, and for sampled drafts the distribution
    each was drawn from (rejection verification reads it next step; None: drafts are one-hot)."""

    draft_tokens: paddle.Tensor  # [N, D] int64, the target's buffer
    seq_lens_this_time: paddle.Tensor  # [N] int32, the target's buffer
    draft_probs: paddle.Tensor | None  # [N, D - 1, V] float32, the draft batch's buffer
    num_substeps: int = 0  # draft-model forward passes this round (host int; 0 without a draft model)

    @classmethod
    def of(cls, inputs: ProposerInputs, draft_probs: paddle.Tensor | None = None,
           num_substeps: int = 0) -> ProposerOutput:
        return cls(draft_tokens=inputs.draft_tokens, seq_lens_this_time=inputs.seq_lens_this_time,
                   draft_probs=draft_probs, num_substeps=num_substeps)
