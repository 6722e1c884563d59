"""MTPProposer: drafts k tokens per running slot with the MTP module (docs/spec.md §5; FastDeploy's flow in
docs/spec.md §8.18): draft_model_preprocess -> eagle_get_hidden_states -> num_model_steps x
(pre_process -> MTP forward -> logit rows -> greedy draft -> draft_model_update) -> draft_model_postprocess
[-> hybrid_mtp_ngram with mtp_strategy with_ngram, docs/spec.md §5.8].
Its batch (DRAFT_BUFFERS) follows the target's row moves; its KV cache shares the target's block tables.
"""

from __future__ import annotations

import logging

import numpy as np
import paddle

from specworker.config import WorkerConfig
from specworker.model_executor import ops
from specworker.model_executor.layers.sampler import GREEDY_TEMPERATURE, sample_rows
from specworker.model_executor.pre_and_post_process import pre_process
from specworker.model_executor.slot_buffers import buffer_dims
from specworker.spec_decode.base import Proposer, feed_last_tokens
from specworker.spec_decode.metadata import ProposerInputs, ProposerOutput
from specworker.spec_decode.mtp_buffers import DRAFT_BUFFERS, DraftBatch

__all__ = ["DRAFT_SEED_OFFSET", "MTPProposer"]

DRAFT_SEED_OFFSET = 0x6A09E667  # the draft's random stream: infer_seed + this (mod 2**32)

logger = logging.getLogger(__name__)


class MTPProposer(Proposer):
    """MTP drafts: greedy (argmax of the draft's logits), or sampled from the request's sampling
    distribution under rejection verification, which needs the distributions (`draft_probs`). Substep s
    writes the target's draft_tokens[b, s + 1]; with num_model_steps < k the remaining columns stay -1 and
    the target verifies 1 + num_model_steps tokens, unless mtp_strategy with_ngram fills them by n-gram
    lookup in the slot's prompt + generated tokens + MTP drafts. Its batch follows the target batch's row moves.
    With speculative_config.draft_vocab_size > 0 the draft scores only its draft vocabulary (the draft's
    DraftVocab): drafts are mapped back to token ids, and sampled q is zero outside it (docs/spec.md §5.3).

    Vocabulary: the draft prompt is the target prompt shifted left by one (draft position i holds
    token i + 1, paired with the target's hidden row of position i); after a prefill the draft's last
    prompt slot is the target's first emitted token (draft_model_preprocess writes it).
    """

    def __init__(self, config: WorkerConfig, *, target, place, draft=None):
        from specworker.model_executor.models.checkpoint import load_mtp

        spec = config.speculative_config
        self.num_model_steps = spec.num_model_steps
        self.k = spec.num_speculative_tokens
        self.max_model_len = config.scheduler.max_model_len
        # (max_ngram_size, min_ngram_size) of hybrid_mtp_ngram, None without mtp_strategy with_ngram
        self.ngram_sizes = (spec.max_ngram_size, spec.min_ngram_size) if spec.with_ngram else None
        self.reads_draft_budget = spec.with_ngram  # hybrid_mtp_ngram caps the n-gram part by the budget
        if draft is None:
            draft = load_mtp(spec.model, target, place, linear_weight_dtype=config.model.linear_weight_dtype,
                             draft_vocab_size=spec.draft_vocab_size)
        self.draft = draft
        self.vocab = draft.vocab  # DraftVocab, or None: draft logits cover the whole vocabulary
        arch = target.arch
        dims = buffer_dims(config, hidden_size=arch.hidden_size, vocab_size=arch.vocab_size)
        self.batch = DraftBatch(DRAFT_BUFFERS, dims, place)
        self.buffers = self.batch.share_inputs
        self.kv_cache = self.draft.new_kv_cache(config.scheduler.num_blocks, config.scheduler.block_size, place)
        # rejection verification needs the distribution each draft was drawn from: drafts are then sampled
        # (temperature / top-k / top-p / min-p of the request) and their distributions kept; other
        # strategies verify greedy drafts, whose distribution is one-hot (None to the verify op).
        self.sample_drafts = spec.verify_strategy == "rejection"
        self.draft_probs = self.buffers["draft_probs"] if self.sample_drafts else None
        self._draft_tokens = self._sample if self.sample_drafts else self._argmax
        # cu_seqlens_q_output for draft_model_update when `tokens` holds one row per slot
        self._one_row_per_slot = paddle.arange(config.scheduler.max_num_seqs + 1, dtype="int32").to(place)
        self._draft_cols = paddle.arange(self.k, dtype="int32").unsqueeze(0).to(place)  # [1, k]: column j + 1
        self._vocab_ids = paddle.arange(arch.vocab_size, dtype="int64").to(place)  # [V]: one-hot n-gram drafts
        self._prefilled = False  # a chunk was written this step: substep 0 must run (the draft prefills it)

    # ---- row moves (the draft batch follows the target's) and host writes, between steps ----
    def followers(self):
        return (self.batch,)

    def write_prefill(self, slot: int, prompt_token_ids: list[int], start: int, length: int, *,
                      draft_less: bool = False) -> None:
        """Draft chunk = target chunk shifted left by one. A middle chunk takes the next chunk's first
        token as its last; the final chunk is one shorter and draft_model_preprocess appends the target's
        first emitted token. A draft-less slot gets no draft prefill: its draft row stays as insert left it, the
        draft KV of its positions is never written, and when the draft runs for other slots it runs the slot as a
        decode row whose drafts _cap_drafts discards (k_b = 0), so its output is the target's alone."""
        if draft_less:
            return
        shifted = prompt_token_ids[start + 1:start + length + 1]
        row = {"input_ids": shifted, "seq_lens_this_time": length, "seq_lens_encoder": length,
               "seq_lens_decoder": start, "step_idx": 0, "stop_flags": False}
        if start > 0:
            row["pre_ids"] = np.full([self.max_model_len], -1, dtype=np.int64)
        self.batch.write_row(slot, row)
        self._prefilled = True

    def _argmax(self, logits, t: ProposerInputs, substep: int):
        best = paddle.argmax(logits, axis=-1)  # [N] int64, a column of the draft logits
        return best if self.vocab is None else self.vocab.to_token_ids(best)

    def _sample(self, logits, t: ProposerInputs, substep: int):
        """Draft token of every slot drawn from q = the request's sampling distribution over the draft's
        logits (greedy requests: one-hot argmax); q goes to draft_probs[:, substep] for verification.
        The draw uses the counter generator keyed by (infer_seed + DRAFT_SEED_OFFSET, step_idx + substep),
        a stream apart from the target's (seed, step_idx + j). With a draft vocabulary q is drawn over its ids and
        is zero at every other id (docs/spec.md §5.3)."""
        greedy = t.temperature < GREEDY_TEMPERATURE  # [N]
        scale = paddle.where(greedy, paddle.ones_like(t.temperature), t.temperature)
        tokens, probs = sample_rows(
            logits / scale.unsqueeze(-1), greedy=greedy, top_k=t.top_k, top_p=t.top_p, min_p=t.min_p,
            seed=(t.infer_seed + DRAFT_SEED_OFFSET) % (1 << 32), counter=t.step_idx + substep)
        if self.vocab is not None:  # columns of the draft logits -> token ids, q [N, V_d] -> [N, V]
            tokens, probs = self.vocab.to_token_ids(tokens), self.vocab.to_full_probs(probs)
        self.buffers["draft_probs"][:, substep] = probs
        return tokens

    # ---- the proposer's part of the step ----
    def num_substeps(self, inputs: ProposerInputs) -> int:
        """Substeps this round: the most drafts a slot may get (the policy's max k_b, at most num_model_steps),
        and at least one when a prefill chunk was written this step (the draft must prefill it too)."""
        return min(self.num_model_steps, max(inputs.max_draft_len, int(self._prefilled)))

    def run(self, inputs: ProposerInputs) -> ProposerOutput:
        d, t = self.buffers, inputs
        substeps = self.num_substeps(t)
        self._prefilled = False
        if substeps == 0:
            # No slot drafts and no draft prefill is pending: the draft model does not run. Its batch is
            # re-derived from the target by the next round's draft_model_preprocess (docs/spec.md §2.3).
            feed_last_tokens(t)
            return ProposerOutput.of(inputs, self.draft_probs)
        self.batch.mark_written()  # the draft ops below may write every row (DraftBatch)
        ops.draft_model_preprocess(
            d["draft_tokens"], d["input_ids"], d["stop_flags"], d["seq_lens_this_time"], d["seq_lens_encoder"],
            d["seq_lens_decoder"], d["step_idx"], d["not_need_stop"], d["pre_ids"], t.accept_tokens,
            t.accept_num, t.seq_lens_encoder, t.seq_lens_decoder, t.step_idx, t.stop_flags, t.max_dec_len,
            t.draft_tokens, substeps, target_model_is_block_step=t.is_block_step)
        # Substep 0 pairs draft token p + 1 with the target's hidden row of position p: [T, H] packed like
        # the draft's own tokens (eagle_get_hidden_states keeps accept_num rows per decode slot).
        prev_hidden = ops.eagle_get_hidden_states(
            t.target_hidden, d["seq_lens_this_time"], d["seq_lens_encoder"], d["seq_lens_decoder"],
            d["stop_flags"], t.accept_num, t.seq_lens_this_time, t.seq_lens_encoder, self.k).out
        for substep in range(substeps):
            token_num = t.meta.token_num if substep == 0 else d["last_hidden"].shape[0]
            dmeta = pre_process(
                input_ids=d["input_ids"], seq_lens_this_time=d["seq_lens_this_time"],
                seq_lens_encoder=d["seq_lens_encoder"], seq_lens_decoder=d["seq_lens_decoder"],
                token_num_cpu=token_num, draft_tokens=d["draft_tokens"], layout_version=self.batch.layout_version,
                step_buffers=d)
            if substep > 0:  # later substeps continue from the draft's own last hidden row of each slot
                prev_hidden = paddle.gather(d["last_hidden"], paddle.clip(dmeta.batch_id_per_token, min=0))
            prev = self.draft.prepare_hidden(prev_hidden[:token_num], from_target=substep == 0)
            hidden = self.draft.forward(dmeta.ids_remove_padding, prev, dmeta, self.kv_cache, t.block_tables)
            # Only each slot's last row drafts (the row draft_model_update reads): gather those [N, H] rows
            # straight from the packed hidden states instead of every output row. Idle slots gather a
            # neighbour's row; draft_model_update ignores stopped slots.
            last = paddle.gather(hidden, paddle.clip(dmeta.cu_seqlens_q[1:] - 1, min=0))  # [N, H]
            paddle.assign(last, output=d["last_hidden"])
            logits = self.draft.draft_logits(last)  # [N, V], or [N, V_d] with a draft vocabulary
            tokens = self._draft_tokens(logits, t, substep)  # [N] int64
            ops.draft_model_update(
                tokens, d["draft_tokens"], d["pre_ids"], d["seq_lens_this_time"], d["seq_lens_encoder"],
                d["seq_lens_decoder"], d["step_idx"], self._one_row_per_slot, d["stop_flags"],
                d["not_need_stop"], t.max_dec_len, t.eos_token_id, t.draft_tokens, self.max_model_len, substep)
        ops.draft_model_postprocess(t.draft_tokens, t.seq_lens_this_time, t.seq_lens_encoder, t.stop_flags,
                                    t.is_block_step)
        if self.ngram_sizes is not None:
            self._extend_with_ngram(t)
        if t.min_draft_len < (self.k if self.ngram_sizes is not None else substeps):
            self._cap_drafts(t)  # some slot may keep fewer drafts than were written
        return ProposerOutput.of(inputs, self.draft_probs, num_substeps=substeps)

    def _extend_with_ngram(self, t: ProposerInputs) -> None:
        """Slots whose MTP chain is complete get n-gram drafts after it, up to k in all (and the adaptive
        budget and room caps of ngram_match); the history is the target's prompt_ids + pre_ids, PER_SLOT
        buffers that every row move of the batch carries, followed by the MTP drafts."""
        max_ngram_size, min_ngram_size = self.ngram_sizes
        ops.hybrid_mtp_ngram(
            t.prompt_ids, t.prompt_lens, t.pre_ids, t.step_idx, t.actual_draft_token_nums, t.draft_tokens,
            t.seq_lens_this_time, t.seq_lens_decoder, t.max_dec_len, max_ngram_size, min_ngram_size, self.k,
            self.num_model_steps, seq_lens_encoder=t.seq_lens_encoder)
        if self.sample_drafts:
            self._one_hot_ngram_probs(t)

    def _one_hot_ngram_probs(self, t: ProposerInputs) -> None:
        """Under rejection verification an n-gram draft x was proposed with certainty: q = one-hot(x), so it is
        accepted with probability p(x) and a rejection draws from normalize(p - q), which keeps the target's
        distribution exactly (docs/spec.md §5.8). Columns num_model_steps.. of draft_probs; a column without a
        draft (-1) gets zeros and is not read."""
        drafts = t.draft_tokens[:, 1 + self.num_model_steps:1 + self.k]  # [N, k - m]
        probs = self.buffers["draft_probs"]
        probs[:, self.num_model_steps:] = (self._vocab_ids == drafts.unsqueeze(-1)).astype("float32")

    def _cap_drafts(self, t: ProposerInputs) -> None:
        """Per slot: drafts past policy_draft_len[b] become -1 and L_b = min(L_b, 1 + policy_draft_len[b])."""
        keep = self._draft_cols < t.policy_draft_len.unsqueeze(1)  # [N, k]
        drafts = t.draft_tokens[:, 1:]
        t.draft_tokens[:, 1:] = paddle.where(keep, drafts, paddle.full_like(drafts, -1))
        paddle.assign(paddle.minimum(t.seq_lens_this_time, t.policy_draft_len + 1), output=t.seq_lens_this_time)

