"""Typed Python wrappers of the specworker custom ops.

Every wrapper accepts CPU or GPU tensors; the C++ op dispatches on place, so no Python code
branches on the platform (pack_linear_weight aside: it picks the weight layout the device's linear
kernel streams fastest, once at load). _extension.py is the only importer of the compiled library; the
wrappers live by op family (index_ops, sampling_ops, state_ops, ngram_ops, model_ops) and are re-exported here.
"""

from specworker.model_executor.ops._extension import OpsNotBuiltError, _check_current, load_ops  # noqa: F401
from specworker.model_executor.ops.index_ops import (  # noqa: F401
    PaddingOffsetOutput,
    get_padding_offset,
    speculate_get_seq_lens_output,
    SpeculatePreProcessOutput,
    speculate_pre_process,
    rebuild_padding,
)
from specworker.model_executor.ops.sampling_ops import (  # noqa: F401
    TopPCandidatesOutput,
    top_p_candidates,
    reasoning_phase_token_constraint,
    VERIFY_STRATEGIES,
    ACCEPT_POLICIES,
    speculate_verify,
    speculate_get_token_penalty_multi_scores,
)
from specworker.model_executor.ops.state_ops import (  # noqa: F401
    speculate_update,
    speculate_set_value_by_flags_and_idx,
    draft_model_preprocess,
    EagleHiddenStatesOutput,
    eagle_get_hidden_states,
    draft_model_update,
    draft_model_postprocess,
)
from specworker.model_executor.ops.ngram_ops import hybrid_mtp_ngram, ngram_match  # noqa: F401
from specworker.model_executor.ops.model_ops import (  # noqa: F401
    paged_attention,
    LINEAR_WEIGHT_DTYPES,
    batch_invariant_linear,
    batch_invariant_linear_bf16,
    pack_linear_weight,
    FusedRmsNormOutput,
    fused_rms_norm,
    RotatedQKV,
    qkv_norm_rotary,
    fused_swiglu,
)

__all__ = [
    "OpsNotBuiltError",
    "load_ops",
    "PaddingOffsetOutput",
    "get_padding_offset",
    "speculate_get_seq_lens_output",
    "SpeculatePreProcessOutput",
    "speculate_pre_process",
    "rebuild_padding",
    "TopPCandidatesOutput",
    "top_p_candidates",
    "reasoning_phase_token_constraint",
    "VERIFY_STRATEGIES",
    "ACCEPT_POLICIES",
    "speculate_verify",
    "speculate_get_token_penalty_multi_scores",
    "speculate_update",
    "speculate_set_value_by_flags_and_idx",
    "draft_model_preprocess",
    "EagleHiddenStatesOutput",
    "eagle_get_hidden_states",
    "draft_model_update",
    "draft_model_postprocess",
    "ngram_match",
    "hybrid_mtp_ngram",
    "paged_attention",
    "LINEAR_WEIGHT_DTYPES",
    "batch_invariant_linear",
    "batch_invariant_linear_bf16",
    "pack_linear_weight",
    "FusedRmsNormOutput",
    "fused_rms_norm",
    "RotatedQKV",
    "qkv_norm_rotary",
    "fused_swiglu",
]
