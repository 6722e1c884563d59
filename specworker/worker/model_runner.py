"""ModelRunner: one engine step over the InputBatch (docs/spec.md §2). Orchestration only: every number is
computed by pre_process, the model, the samplers and the state ops. The step's one device-to-host copy
is `_copy_step_outputs_sync`; nothing else in `step()` reads a device value on the host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import types
from collections.abc import Callable

import numpy as np
import paddle

from specworker.config import WorkerConfig
from specworker.model_executor import ops
from specworker.model_executor.layers.logprobs import LogprobsTensors, compute_logprobs
from specworker.model_executor.layers.sampler import SamplingMetadata
from specworker.model_executor.pre_and_post_process import gather_logit_rows, pre_process
from specworker.spec_decode.base import Proposer
from specworker.spec_decode.metadata import ProposerInputs, VerifyInputs, VerifyOutput
from specworker.spec_decode.policy import PolicyStep, SpeculationPolicy, build_policy
from specworker.spec_decode.step_cost_model import StepCost
from specworker.spec_decode.speculative_sampler import ReasoningConstraint, SpeculativeSampler
from specworker.worker.input_batch import InputBatch, SlotRequest

__all__ = ["ModelRunner", "StepLogprobs", "StepOutput", "STEP_PHASES"]

logger = logging.getLogger(__name__)

STEP_PHASES = ("pre_process", "target_forward", "sampling_verify", "update", "proposer")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepLogprobs:
    """Host copies of LogprobsTensors: entry (b, j) belongs to accept_tokens[b, j]."""

    token_logprobs: np.ndarray  # [N, D] float32
    top_ids: np.ndarray  # [N, D, W] int64, most likely first
    top_logprobs: np.ndarray  # [N, D, W] float32


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepOutput:
    """Host copies of what verification emitted, per slot (the step's one device-to-host copy)."""

    accept_tokens: np.ndarray  # [N, D] int64: accept_tokens[b, :accept_num[b]] were emitted
    accept_num: np.ndarray  # [N] int64
    stop_flags: np.ndarray  # [N] bool: the slot stopped (eos / max_tokens) or was already empty
    seq_lens_this_time: np.ndarray  # [N] int64: L_b the step fed (1 + drafts for a decode slot)
    layout_version: int  # the slot layout these rows refer to
    logprobs: StepLogprobs | None  # when the step was asked for logprobs
    seconds: dict  # phase -> host wall seconds (STEP_PHASES; on GPU, launch time unless synchronized)
    draft_lens: np.ndarray | None = None  # [N] int64: the policy's k_b for the next step, -1 if not decoding


def _tokens_left(remaining: Callable[[], np.ndarray], emitted: np.ndarray) -> np.ndarray:
    """[N] the tokens each slot may still emit after a step that emitted `emitted`, from those before it."""
    return np.maximum(remaining() - emitted, 0)


class PhaseTimer:
    """Host wall seconds per named phase of a step (on GPU: launch time unless synchronized)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        yield
        self.seconds[phase] = time.perf_counter() - start


class ModelRunner:
    """Owns the InputBatch, the target model with its KV cache, the speculative sampler and the proposer.

    Between steps the engine moves requests in and out through `input_batch` (insert / clear_slot /
    swap_states / condense / reorder_split_prefill_and_decode, which the proposer's per-slot state
    follows) and `write_prefill` / `pause`; `step()` then runs pre_process -> target forward -> logit rows
    -> logits -> sample + verify -> host copy -> update -> propose.
    """

    def __init__(self, config: WorkerConfig, *, model, kv_cache, proposer: Proposer, place, vocab_size: int,
                 eos_token_ids: list[int], reasoning: ReasoningConstraint | None = None,
                 policy: SpeculationPolicy | None = None):
        self.config = config
        self.model = model
        self.kv_cache = kv_cache
        self.proposer = proposer
        self.input_batch = InputBatch(config, place, vocab_size=vocab_size)
        self.input_batch.set_eos_token_ids(eos_token_ids)
        for follower in proposer.followers():
            self.input_batch.follow(follower)
        self.share_inputs = self.input_batch.share_inputs
        self.sampler = SpeculativeSampler(config.speculative_config, config.scheduler.max_model_len,
                                          config.max_output_token_num, reasoning=reasoning, place=place,
                                          draft_probs=proposer.draft_probs, debug_checks=config.debug_checks)
        # Typed views of the fixed buffers, built once: the step names fields instead of looking up keys.
        self._buffers = types.SimpleNamespace(**self.share_inputs)
        self._sampling = SamplingMetadata.from_share_inputs(self.share_inputs)
        self._verify_inputs = VerifyInputs.from_share_inputs(self.share_inputs)
        self._proposer_inputs = ProposerInputs.from_share_inputs(self.share_inputs)
        self.last_verify_output: VerifyOutput | None = None  # the last step's (tests and logprob consumers)
        self._chunk_next_token: dict[str, int] = {}  # req_id -> next prompt token, for middle chunks
        self.policy = policy or build_policy(config.speculative_config, config.scheduler.max_num_seqs)
        self.input_batch.follow(self.policy)
        self._prefill_slots: set[int] = set()  # slots given a prefill chunk for this step
        self._last_step: tuple[float, StepCost | None] | None = None  # (start, shape) of the previous step
        # the step-cost clock: wall seconds, or a lockstep bench's own time of this worker (batch_run.OwnClock)
        self.clock: Callable[[], float] = time.perf_counter

    # ---- between steps (host writes only) ----
    def insert(self, slot: int, request: SlotRequest) -> None:
        self.input_batch.insert(slot, request)

    def clear_slot(self, slot: int) -> None:
        self.input_batch.clear_slot(slot)
        if not self.input_batch.req_id_to_slot:
            # the batch is empty: the time until the next step (the next request's arrival) is idle, not the last
            # step's cost; a stop on the host (max_tokens, a stop token) leaves the slot live in that step's shape
            self._last_step = None

    def swap_states(self, i: int, j: int) -> None:
        self.input_batch.swap_states(i, j)

    def condense(self) -> None:
        self.input_batch.condense()

    def reorder_split_prefill_and_decode(self) -> None:
        self.input_batch.reorder_split_prefill_and_decode()

    def write_prefill(self, slot: int, prompt_token_ids: list[int], start: int, length: int, *,
                      remaining: np.ndarray | None = None, prompt_left: np.ndarray | None = None) -> None:
        """This step prefills prompt[start:start + length] of `slot` (a whole prompt or one chunk). remaining: [N]
        tokens each occupied slot may still generate when no request waits after this step's admissions, else None;
        prompt_left: [N] prompt tokens each occupied slot has still to prefill, this step's chunks included, given
        with remaining (the policy's admission reads both: SpeculationPolicy.admit).

        Also undoes what the previous chunk's step did to the row (it emitted a token the host
        discards: step_idx, history, stop flag, KV length), so every chunk starts from the same state.
        """
        self._prefill_slots.add(slot)
        chunk = prompt_token_ids[start:start + length]
        if start + length < len(prompt_token_ids):
            # A middle chunk's sampled token is discarded; the proposer must see the true next prompt
            # token instead (its draft prefill pairs it with this chunk's last hidden row).
            self._chunk_next_token[self.input_batch.req_ids[slot]] = prompt_token_ids[start + length]
        row = {"input_ids": chunk, "seq_lens_this_time": length, "seq_lens_encoder": length,
               "seq_lens_decoder": start, "step_idx": 0, "stop_flags": False, "is_block_step": False}
        if start > 0:
            row["pre_ids"] = np.full([self.input_batch.dims["max_model_len"]], -1, dtype=np.int64)
        self.input_batch.write_row(slot, row)
        if start == 0:  # the request's first chunk: the batch it joins is known (every admission is inserted)
            self.policy.admit(slot, num_slots=len(self.input_batch.req_id_to_slot), remaining=remaining,
                              prompt_left=prompt_left)
        self.proposer.write_prefill(slot, prompt_token_ids, start, length,
                                    draft_less=not self.policy.may_draft(slot))

    def pause(self, slot: int) -> None:
        """The slot's prefill waits this step (no token budget left): it feeds nothing."""
        self.input_batch.write_row(slot, {"seq_lens_this_time": 0, "seq_lens_encoder": 0, "is_block_step": True})

    def decode_token_bound(self, slots: list[int]) -> int:
        """Tokens the decode `slots` feed next step at most: 1 + k_b each (k_b from the policy_draft_len host
        mirror, which follows row moves); a host read of a mirror, no device value."""
        k_b = self.share_inputs["policy_draft_len_cpu"].numpy()[slots]
        return int(np.minimum(k_b + 1, self.config.speculative_config.max_draft_token_num).sum())

    def _logit_row_bound(self) -> int:
        """Logit rows this step needs at most (ForwardMeta.logit_rows): 1 per slot given a prefill chunk, the
        decode bound for every other occupied slot that is not paused. A paused slot (a prompt waiting for token
        budget, a preempted request) feeds nothing: pause writes seq_lens_this_time = 0 and only the host writes
        is_block_step, so its mirror is exact. Counting it at 1 + k_b (the policy's cap for a slot that does not
        decode) put 3-4x the rows through the lm_head and the sampler while a batch's prompts were admitted."""
        paused = self.share_inputs["is_block_step_cpu"].numpy()
        decode = [slot for slot, req_id in enumerate(self.input_batch.req_ids)
                  if req_id is not None and slot not in self._prefill_slots and not paused[slot]]
        return len(self._prefill_slots) + self.decode_token_bound(decode)

    # ---- the step ----
    def step(self, token_num: int, *, all_greedy: bool = False, num_logprobs: int | None = None,
             remaining: Callable[[], np.ndarray] | None = None) -> StepOutput:
        """One engine step. token_num: host bound on the packed tokens (chunk lengths + D per decode slot);
        all_greedy: every request in the batch is greedy (host knowledge), so the sampler skips its draw;
        num_logprobs: the most alternatives a request of the batch asked for (None: nobody asked, and no
        logprob is computed); remaining: builds the [N] tokens each slot's request may still generate before this
        step, when no request waits, else None; the policy's PolicyStep.remaining builds them less this step's tokens,
        and only if a decision reads them.
        """
        timer = PhaseTimer()
        start = self.clock()
        cost = self._previous_cost(start)
        with timer("pre_process"):
            meta = self._pre_process(token_num)
        with timer("target_forward"):
            hidden, logits = self._target_forward(meta)
        with timer("sampling_verify"):
            verified = self._sample_and_verify(logits, meta, all_greedy)
            logprobs = self._logprobs(verified, meta, num_logprobs)
            host = self._copy_step_outputs_sync(logprobs)
            live, drafted = self._decoding_next(host)
            self._restore_chunk_tokens()
        with timer("update"):
            self._update_states()
            left = None if remaining is None else functools.partial(_tokens_left, remaining, host.accept_num)
            draft_lens = self._choose_draft_lens(PolicyStep(live=live, drafted=drafted, emitted=host.accept_num,
                                                            cost=cost, remaining=left))
        with timer("proposer"):
            out = self._propose(hidden, meta, draft_lens[live])
        self._last_step = (start, self._step_shape(host, live, out.num_substeps, timer.seconds))
        self._prefill_slots.clear()
        return dataclasses.replace(host, seconds=timer.seconds, draft_lens=np.where(live, draft_lens, -1))

    def _propose(self, hidden, meta, lens: np.ndarray):
        """The proposer's drafts for next step, told the largest and smallest k_b of the slots that decode (both 0
        when none does). The smallest decides whether drafts need cutting per slot (MTPProposer._cap_drafts):
        `lens.min(initial=0)` read 0 whatever the slots held, and every round of every MTP worker paid the cut's two
        device ops."""
        meta.require_current(self.input_batch.layout_version, "the proposer")
        return self.proposer.run(self._proposer_inputs.for_step(
            hidden, meta, max_draft_len=int(lens.max(initial=0)), min_draft_len=int(lens.min()) if lens.size else 0))

    def _step_shape(self, host: StepOutput, live: np.ndarray, num_substeps: int, seconds: dict) -> StepCost | None:
        """This step's shape for the policy's cost model (its wall seconds are filled in at the next step), or None
        when it held a prefill chunk or no slot decodes after it (the time to the next step is then idle, not
        cost)."""
        if self._prefill_slots or not live.any():
            return None
        fed = host.seq_lens_this_time
        verify = sum(seconds[p] for p in ("pre_process", "target_forward", "sampling_verify"))
        return StepCost(num_slots=int((fed > 0).sum()), num_drafts=int(np.maximum(fed - 1, 0).sum()),
                        num_substeps=num_substeps, seconds=0.0, verify_seconds=verify)

    def _previous_cost(self, now: float) -> StepCost | None:
        """The previous step's shape with its wall seconds (its start to this one's), if it was pure decode."""
        if self._last_step is None or self._last_step[1] is None:
            return None
        start, shape = self._last_step
        return dataclasses.replace(shape, seconds=now - start)

    def _decoding_next(self, host: StepOutput) -> tuple[np.ndarray, np.ndarray]:
        """([N] bool slots that decode next step, [N] int64 drafts this step verified), from host values:
        occupied, not stopped, not paused, no prompt chunk left."""
        batch = self.input_batch
        middle = {batch.slot_of(req_id) for req_id in self._chunk_next_token}
        occupied = np.array([r is not None and slot not in middle for slot, r in enumerate(batch.req_ids)])
        paused = self.share_inputs["is_block_step_cpu"].numpy()
        live = occupied & ~host.stop_flags & ~paused
        prefill = np.zeros_like(live)
        prefill[list(self._prefill_slots)] = True
        drafted = np.where(prefill, 0, np.maximum(host.seq_lens_this_time - 1, 0))
        return live, drafted

    def _choose_draft_lens(self, step: PolicyStep) -> np.ndarray:
        """The policy's k_b -> policy_draft_len (an upload when it changed; no read), then, for a proposer that caps
        by speculate_update's budget (reads_draft_budget), that budget shifted up by a raise of k_b and capped by
        k_b (docs/spec.md §2.3). MTP caps by policy_draft_len itself: nothing more runs."""
        draft_lens = self.policy.choose(step)
        b, mirror = self._buffers, self.share_inputs["policy_draft_len_cpu"]
        reads_budget = self.proposer.reads_draft_budget and (not self.policy.steady_k
                                                             or (draft_lens[step.live] < self.policy.k_max).any())
        previous, raised = mirror.numpy(), None  # the mirror: what the device holds
        if not np.array_equal(previous, draft_lens):
            before = b.policy_draft_len.clone() if reads_budget and (draft_lens > previous).any() else None
            values = draft_lens.astype(np.int32)
            b.policy_draft_len.set_value(values)
            mirror.set_value(values)
            if before is not None:
                raised = (b.policy_draft_len - before).clip(min=0)
        if reads_budget:
            # budget := min(budget + raise, k_b), raise = max(k_b - previous k_b, 0): a slot raised from k to k'
            # drafts about as a worker held at k' would after the same steps (fixed k''s budget runs up to k' - k
            # above fixed k's: both shrink by 1, grow by 2 to their cap). A budget of 0 (the slot was held at
            # k_b = 0) restarts at k_b, as a new request's does. Under a steady k (fixed) only an override below
            # k_max needs it.
            budget = b.actual_draft_token_nums
            grown = budget if raised is None else budget + raised
            paddle.assign(paddle.where(budget > 0, paddle.minimum(grown, b.policy_draft_len), b.policy_draft_len),
                          output=budget)
        return draft_lens

    def _pre_process(self, token_num: int):
        b = self._buffers
        meta = pre_process(
            input_ids=b.input_ids, seq_lens_this_time=b.seq_lens_this_time, seq_lens_encoder=b.seq_lens_encoder,
            seq_lens_decoder=b.seq_lens_decoder, token_num_cpu=max(token_num, 1), draft_tokens=b.draft_tokens,
            layout_version=self.input_batch.layout_version, step_buffers=self.share_inputs,
            logit_rows_cpu=self._logit_row_bound())
        if self.config.debug_checks:
            meta.check()
        return meta

    def _target_forward(self, meta):
        """The target over the packed tokens -> (hidden rows [T, H], logits of the rows needing them [N * D, V])."""
        hidden = self.model.forward(meta.ids_remove_padding, meta, self.kv_cache, self._buffers.block_tables)
        return hidden, self.model.compute_logits(gather_logit_rows(hidden, meta))

    def _sample_and_verify(self, logits, meta, all_greedy: bool) -> VerifyOutput:
        meta.require_current(self.input_batch.layout_version, "the speculative sampler")
        self.last_verify_output = self.sampler(logits, meta, self._sampling, self._verify_inputs,
                                               all_greedy=all_greedy)
        return self.last_verify_output

    @staticmethod
    def _logprobs(verified: VerifyOutput, meta, num_logprobs: int | None) -> LogprobsTensors | None:
        if num_logprobs is None:
            return None
        return compute_logprobs(verified.sampler.logits, meta.cu_seqlens_q_output, verified.accept_tokens,
                                num_logprobs)

    def _restore_chunk_tokens(self) -> None:
        """A middle prefill chunk's emitted token is discarded: the proposer sees the next prompt token."""
        for req_id, token in self._chunk_next_token.items():  # host values -> device: an upload, no read
            self._buffers.accept_tokens[self.input_batch.slot_of(req_id), 0] = token
        self._chunk_next_token.clear()

    def _update_states(self) -> None:
        """Lengths, stop state and the draft budget (speculate_update), then the history (pre_ids, step_idx)."""
        b = self._buffers
        ops.speculate_update(b.seq_lens_encoder, b.seq_lens_decoder, b.not_need_stop, b.draft_tokens,
                             b.actual_draft_token_nums, b.accept_tokens, b.accept_num, b.stop_flags,
                             b.seq_lens_this_time, b.is_block_step, b.stop_nums, b.mask_rollback)
        ops.speculate_set_value_by_flags_and_idx(b.pre_ids, b.accept_tokens, b.accept_num, b.stop_flags,
                                                 b.seq_lens_this_time, b.seq_lens_encoder, b.seq_lens_decoder,
                                                 b.step_idx)

    def _copy_step_outputs_sync(self, logprobs: LogprobsTensors | None = None) -> StepOutput:
        """The step's one device-to-host copy: accept_tokens, accept_num, stop_flags and the step's
        seq_lens_this_time packed in one int64 tensor, followed by the logprobs when given (float32 bits
        widened from int32); also refreshes the first three's host mirrors."""
        si = self.share_inputs
        num_slots, width = si["accept_tokens"].shape
        parts = [si["accept_tokens"].reshape([-1]), si["accept_num"].astype("int64"),
                 si["stop_flags"].astype("int64"), si["seq_lens_this_time"].astype("int64")]
        if logprobs is not None:
            parts += [logprobs.top_ids.reshape([-1])] + [paddle.view(t.reshape([-1]), "int32").astype("int64")
                                                          for t in (logprobs.token_logprobs, logprobs.top_logprobs)]
        packed = paddle.concat([p for p in parts if p.shape[0] > 0]).numpy()
        tokens = packed[:num_slots * width].reshape(num_slots, width)
        end = num_slots * width + 3 * num_slots
        accept_num, stop_flags, lens = packed[num_slots * width:end].reshape(3, num_slots)
        stop_flags = stop_flags.astype(bool)
        for name, value in (("accept_tokens", tokens), ("accept_num", accept_num), ("stop_flags", stop_flags)):
            mirror = si[name + "_cpu"]
            mirror.set_value(value.astype(np.dtype(str(mirror.dtype).split(".")[-1])))
        host_logprobs = None if logprobs is None else _unpack_logprobs(packed[end:], logprobs)
        return StepOutput(accept_tokens=tokens, accept_num=accept_num, stop_flags=stop_flags,
                          seq_lens_this_time=lens, layout_version=self.input_batch.layout_version,
                          logprobs=host_logprobs, seconds={})


def _unpack_logprobs(section: np.ndarray, logprobs: LogprobsTensors) -> StepLogprobs:
    """The logprob part of the packed copy: top ids, then the float32 bits of token and top logprobs."""
    shape = tuple(logprobs.top_ids.shape)  # (N, D, W)
    num_top, num_tokens = int(np.prod(shape)), shape[0] * shape[1]
    bits = section[num_top:].astype(np.int32).view(np.float32)
    return StepLogprobs(token_logprobs=bits[:num_tokens].reshape(shape[:2]),
                        top_ids=section[:num_top].reshape(shape), top_logprobs=bits[num_tokens:].reshape(shape))
