"""SpeculativeSampler: logits of one step -> emitted tokens, through the optional reasoning constraint, the
Sampler (penalties, temperature / top-k / top-p / min-p, seeded draws) and speculate_verify with
the configured verify_strategy and accept_policy. Non-speculative steps are the k = 0 case: the one row
of a slot is its bonus token. Writes accept_tokens / accept_num / step_idx / stop_flags in place and returns
them as a VerifyOutput.
"""

from __future__ import annotations

import dataclasses

import paddle

from specworker.config import SpeculativeConfig
from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.sampler import Sampler, SamplerOutput, SamplingMetadata
from specworker.spec_decode.metadata import VerifyInputs, VerifyOutput

__all__ = ["ReasoningConstraint", "SpeculativeSampler"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningConstraint:
    """The reasoning-phase constraint of reasoning models (reasoning_phase_token_constraint): right after
    "\n</think>\n\n" the next token of a request with enable_thinking must be one of allowed_token_ids."""

    think_end_id: int
    line_break_id: int
    allowed_token_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("think_end_id", "line_break_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ReasoningConstraint.{name} = {value!r}; allowed: a token id >= 0")
        ids = tuple(self.allowed_token_ids)
        if not ids or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids):
            raise ValueError(f"ReasoningConstraint.allowed_token_ids = {ids!r}; allowed: one or more token ids >= 0")
        object.__setattr__(self, "allowed_token_ids", ids)


class SpeculativeSampler:
    """Samples every logit row, then verifies the drafts.

    Strategies (docs/spec.md §4.5): greedy / target_match accept a draft when it equals the token the Sampler
    drew for its row (greedy rows: the argmax; sampled rows: a draw keyed by (seed, generated index), so
    the emitted tokens are exactly those of non-speculative decoding with the same seeds: lossless);
    rejection uses the Sampler's probabilities and the proposer's draft probabilities; topp checks the
    draft against the top-C candidates (FastDeploy's default; lossy by design).
    """

    def __init__(self, spec: SpeculativeConfig, max_model_len: int, output_capacity: int, *,
                 reasoning: ReasoningConstraint | None = None, place=None, draft_probs: paddle.Tensor | None = None,
                 debug_checks: bool = False):
        """draft_probs: the proposer's [N, D - 1, V] buffer of draft distributions (Proposer.draft_probs),
        read by "rejection"; None: drafts are one-hot. debug_checks: the Sampler checks its metadata every
        call (WorkerConfig.debug_checks)."""
        self.strategy = spec.verify_strategy if spec.enabled else "greedy"
        self.policy = spec.accept_policy
        self.benchmark_mode = spec.benchmark_mode
        self.candidates_len = spec.max_candidate_len
        self.verify_window = spec.verify_window
        self.max_model_len = max_model_len
        self.sampler = Sampler(debug_checks=debug_checks)
        # Fixed-shape inputs the greedy / target_match / rejection strategies do not read.
        self._ones_scores = paddle.ones([output_capacity, 1], dtype="float32")
        self._ones_lens = paddle.ones([output_capacity], dtype="int32")
        self.reasoning = reasoning
        if reasoning is not None:
            self._allowed = paddle.to_tensor(list(reasoning.allowed_token_ids), dtype="int64", place=place)
        # The strategy resolved once: what the verify op compares drafts against, and the distributions it
        # reads (rejection only).
        self._candidates = self._top_p_candidates if self.strategy == "topp" else self._sampled_tokens
        self._uses_probs = self.strategy == "rejection"
        self._draft_probs = draft_probs if self._uses_probs else None

    def _sampled_tokens(self, out: SamplerOutput, meta: ForwardMeta, verify: VerifyInputs):
        """Each row's one candidate: the token the Sampler drew (score 1)."""
        rows = out.sampled_token_ids.shape[0]
        return out.sampled_token_ids.reshape([-1, 1]), self._ones_scores[:rows], self._ones_lens[:rows]  # [rows, 1]

    def _top_p_candidates(self, out: SamplerOutput, meta: ForwardMeta, verify: VerifyInputs):
        cand = ops.top_p_candidates(out.probs, verify.top_p, meta.batch_id_per_token_output,
                                    self.candidates_len, self.max_model_len)
        return cand.verify_tokens, cand.verify_scores, cand.actual_candidate_lens

    def __call__(self, logits: paddle.Tensor, meta: ForwardMeta, sampling: SamplingMetadata,
                 verify: VerifyInputs, all_greedy: bool = False) -> VerifyOutput:
        """Args: logits [meta.logit_rows, V] float32 (rows past T_out ignored); all_greedy: every slot is
        greedy (host knowledge; skips the draw). Returns what verification emitted."""
        if self.reasoning is not None:
            ops.reasoning_phase_token_constraint(
                logits, sampling.pre_ids, verify.stop_flags, verify.seq_lens_this_time, verify.seq_lens_encoder,
                verify.step_idx, self._allowed, verify.reasoning_status, meta.batch_id_per_token_output,
                meta.cu_seqlens_q_output, verify.enable_thinking, self.reasoning.think_end_id,
                self.reasoning.line_break_id)
        out = self.sampler(logits, meta, sampling, all_greedy=all_greedy)
        tokens, scores, candidate_lens = self._candidates(out, meta, verify)
        ops.speculate_verify(
            out.sampled_token_ids, verify.accept_tokens, verify.accept_num, verify.step_idx, verify.stop_flags,
            verify.seq_lens_encoder, verify.seq_lens_decoder, verify.draft_tokens, verify.seq_lens_this_time,
            tokens, scores, verify.max_dec_len, verify.eos_token_id, verify.is_block_step,
            meta.cu_seqlens_q_output, candidate_lens, verify.actual_draft_token_nums, verify.top_p,
            max_seq_len=self.max_model_len, verify_window=self.verify_window, enable_topp=True,
            benchmark_mode=self.benchmark_mode,
            target_probs=out.probs if self._uses_probs else None, draft_probs=self._draft_probs,
            infer_seed=verify.infer_seed, reasoning_status=verify.reasoning_status,
            verify_strategy=self.strategy, accept_policy=self.policy,
        )
        return VerifyOutput(accept_tokens=verify.accept_tokens, accept_num=verify.accept_num,
                            stop_flags=verify.stop_flags, step_idx=verify.step_idx, sampler=out)
