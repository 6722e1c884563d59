"""Worker: the engine-facing API (add_request / abort / step / has_unfinished). Wires the scheduler,
the block manager and the ModelRunner; turns each step's host copy into RequestOutputs. No tensor math.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import paddle

from specworker.config import LOSSY_VERIFY_STRATEGIES, WorkerConfig
from specworker.model_executor.layers.sampler import GREEDY_TEMPERATURE
from specworker.model_executor.parallel import TensorParallel, init_tensor_parallel
from specworker.sampling_params import SamplingParams
from specworker.spec_decode.metrics import DraftLenStats, SpecDecodeStats
from specworker.spec_decode.policy import AdaptivePolicy, SpeculationPolicy
from specworker.spec_decode.speculative_sampler import ReasoningConstraint
from specworker.worker.block_manager import BlockManager
from specworker.worker.model_runner import STEP_PHASES, ModelRunner, StepLogprobs, StepOutput
from specworker.worker.request import FinishReason, RequestOutput, RequestState, RequestStatus, TokenLogprob
from specworker.worker.scheduler import Scheduler, SchedulerOutput

__all__ = ["Worker", "device_error"]

logger = logging.getLogger(__name__)


def device_error(device: str) -> str | None:
    """Why `device` cannot be used with this Paddle build (None: it can)."""
    if device == "gpu" and not paddle.is_compiled_with_cuda():
        return (f"device = 'gpu', but this Paddle ({paddle.__version__}) is a CPU-only build; "
                "allowed: device: cpu, or install paddlepaddle-gpu (README: GPU install)")
    return None


def _place(device: str, tp: TensorParallel):
    if (why := device_error(device)) is not None:
        raise ValueError(why)
    if device != "gpu":
        return paddle.CPUPlace()
    if tp.size == 1:
        return paddle.CUDAPlace(0)
    import paddle.distributed as dist

    device_id = dist.ParallelEnv().device_id  # this rank's GPU (the launcher assigns it)
    paddle.set_device(f"gpu:{device_id}")  # tensors made without a place (aranges, constants) go there too
    return paddle.CUDAPlace(device_id)


class Worker:
    """A speculative-decoding worker a serving engine embeds.

    >>> worker = Worker(load_config("configs/mtp_tiny.yaml"))
    >>> worker.add_request("r0", [256, 72, 105], SamplingParams(max_tokens=8, temperature=0))
    >>> while worker.has_unfinished():
    ...     for out in worker.step(): print(out.request_id, out.new_token_ids, out.finished)

    Every call validates its arguments and raises ValueError / TypeError / KeyError naming what is wrong
    before changing anything, so the worker stays usable after a rejected call.
    """

    def __init__(self, config: WorkerConfig, *, model=None, proposer=None,
                 reasoning: ReasoningConstraint | None = None, policy: SpeculationPolicy | None = None):
        """Args: config; model / proposer / policy: injected instances (tests); default: built from config.
        reasoning: the reasoning-phase constraint of a reasoning model's tokenizer (None: off)."""
        from specworker.worker.model_loading import build_model_and_proposer  # heavy imports, once

        if not isinstance(config, WorkerConfig):
            raise TypeError(f"Worker(config): got a {type(config).__name__}; allowed: a WorkerConfig "
                            "(specworker.config.load_config)")
        self.config = config
        # Tensor parallelism (docs/tensor_parallel.md): every rank runs this same worker on the same calls;
        # the model's collectives make every logit row, hence every sampled token, identical on all ranks.
        self.tp = init_tensor_parallel(config.parallel_config.tensor_parallel_size)
        place = _place(config.device, self.tp)
        paddle.seed(config.seed)
        parts = build_model_and_proposer(config, place, model=model, proposer=proposer, tp=self.tp)
        self.vocab_size = parts.vocab_size
        self.eos_token_ids = parts.eos_token_ids
        self.runner = ModelRunner(config, model=parts.model, kv_cache=parts.kv_cache, proposer=parts.proposer,
                                  place=place, vocab_size=parts.vocab_size, eos_token_ids=parts.eos_token_ids,
                                  reasoning=reasoning, policy=policy)
        self.blocks = BlockManager(config.scheduler.num_blocks, config.scheduler.block_size)
        self.scheduler = Scheduler(config, self.blocks)
        self.k = config.speculative_config.num_speculative_tokens
        self.requests: dict[str, RequestState] = {}
        self._arrivals = 0
        self._warned_lossy = False  # one warning per worker (_warn_if_lossy)
        self.reset_stats()
        # the adaptive policy's step costs, measured before the first request (docs/adaptive.md, "Profiled step
        # costs"); None: measured while serving
        self.cost_profile = None
        rounds = config.speculative_config.profile_rounds
        if policy is None and isinstance(self.runner.policy, AdaptivePolicy) and rounds > 0:  # not an injected one
            from specworker.worker.cost_profiling import profile_step_costs

            self.cost_profile = profile_step_costs(self, rounds=rounds)
            if self.cost_profile is not None:
                self.runner.policy.use_profile(self.cost_profile)

    def reset_stats(self) -> None:
        """Step counts, phase seconds and speculation statistics back to zero (also after the cost profile)."""
        self.spec_stats = SpecDecodeStats(self.k) if self.k else None  # every finished or running request
        self.num_steps = 0
        self.phase_seconds = dict.fromkeys(STEP_PHASES, 0.0)  # host wall time per step phase, summed
        self.draft_len_stats = DraftLenStats() if self.k else None  # the policy's choices, per batch size

    @property
    def input_batch(self):
        return self.runner.input_batch

    # ---- engine API ----
    def add_request(self, request_id: str, prompt_token_ids: Sequence[int], params: SamplingParams) -> None:
        """Queues a request (FCFS). Raises before queuing anything if the request can never run."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"add_request: request_id = {request_id!r}; allowed: a non-empty str")
        if request_id in self.requests:
            raise ValueError(f"add_request: request_id {request_id!r} is already in the worker; allowed: an id "
                             "not queued or running (finished ids may be reused)")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"add_request({request_id!r}): params is a {type(params).__name__}; allowed: "
                            "a SamplingParams")
        prompt = self._check_prompt(request_id, prompt_token_ids, params)
        req = RequestState(req_id=request_id, prompt_token_ids=prompt, params=params, arrival=self._arrivals,
                           spec_stats=SpecDecodeStats(self.k) if self.k else None,
                           logprobs=None if params.logprobs is None else [])
        need = self.scheduler.blocks_needed(req)
        if need > self.blocks.num_blocks:
            raise ValueError(f"add_request({request_id!r}): prompt + max_tokens = {len(prompt) + params.max_tokens} "
                             f"tokens need {need} KV blocks; allowed: at most scheduler.num_blocks = "
                             f"{self.blocks.num_blocks}")
        params.to_slot_request(request_id, prompt)  # the slot's own checks (vocab-free), before queuing
        self._warn_if_lossy(params)
        self._arrivals += 1
        self.requests[request_id] = req
        self.scheduler.add(req)

    def _warn_if_lossy(self, params: SamplingParams) -> None:
        """Logs once per worker when a sampled request meets a lossy verify strategy (topp)."""
        spec = self.config.speculative_config
        if (spec.needs_proposer and spec.verify_strategy in LOSSY_VERIFY_STRATEGIES
                and params.temperature >= GREEDY_TEMPERATURE and not self._warned_lossy):
            self._warned_lossy = True
            logger.warning("speculative_config.verify_strategy = %r is lossy for sampled requests (temperature "
                           "%s): their tokens do not follow the target's distribution; 'rejection' (the default) "
                           "and 'target_match' are lossless", spec.verify_strategy, params.temperature)

    def _check_prompt(self, request_id: str, prompt_token_ids, params: SamplingParams) -> list[int]:
        where = f"add_request({request_id!r})"
        if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
            raise TypeError(f"{where}: prompt_token_ids is a {type(prompt_token_ids).__name__}; allowed: a "
                            "sequence of int token ids")
        prompt = []
        for i, t in enumerate(prompt_token_ids):
            if isinstance(t, bool) or not isinstance(t, int) and not hasattr(t, "__index__"):
                raise TypeError(f"{where}: prompt_token_ids[{i}] = {t!r}; allowed: an int token id")
            if not 0 <= int(t) < self.vocab_size:
                raise ValueError(f"{where}: prompt_token_ids[{i}] = {int(t)}; allowed: 0..vocab_size - 1 = "
                                 f"{self.vocab_size - 1}")
            prompt.append(int(t))
        max_len = self.config.scheduler.max_model_len
        if not prompt:
            raise ValueError(f"{where}: prompt_token_ids is empty; allowed: 1..max_model_len - 1 = {max_len - 1} "
                             "tokens")
        if len(prompt) + params.max_tokens > max_len:
            raise ValueError(f"{where}: prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) = "
                             f"{len(prompt) + params.max_tokens}; allowed: at most scheduler.max_model_len = "
                             f"{max_len}")
        for field in ("stop_token_ids", "bad_words_token_ids"):
            for t in getattr(params, field):
                if not 0 <= t < self.vocab_size:
                    raise ValueError(f"{where}: SamplingParams.{field} holds {t}; allowed: ids in "
                                     f"0..vocab_size - 1 = {self.vocab_size - 1}")
        return prompt

    def abort(self, request_id: str) -> RequestOutput:
        """Removes a queued or running request now (its slot and blocks are freed before the next step)."""
        req = self.requests.get(request_id)
        if req is None:
            raise KeyError(f"abort: request_id {request_id!r} is not queued or running")
        self._finish(req, FinishReason.ABORT)
        return RequestOutput(request_id=request_id, new_token_ids=[], output_token_ids=list(req.output_token_ids),
                             finished=True, finish_reason=FinishReason.ABORT,
                             new_logprobs=None if req.logprobs is None else [],
                             logprobs=None if req.logprobs is None else list(req.logprobs))

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """Schedules, runs one engine step, and returns the requests that gained tokens or finished."""
        # A decode slot feeds at most 1 + k_b tokens (the policy's choice): the prefills get the rest of the budget.
        batch = self.runner.input_batch
        plan = self.scheduler.schedule(
            lambda decode: self.runner.decode_token_bound([batch.slot_of(r.req_id) for r in decode]))
        if not (plan.decode or plan.prefill):
            return []
        self._apply_plan(plan)
        running = [r.params for r in self.scheduler.running]
        all_greedy = all(p.temperature < GREEDY_TEMPERATURE for p in running)
        num_logprobs = max((p.logprobs for p in running if p.logprobs is not None), default=None)
        out = self.runner.step(plan.token_num, all_greedy=all_greedy, num_logprobs=num_logprobs,
                               remaining=self._remaining_now if self._tells_remaining() else None)
        self.num_steps += 1
        for phase, seconds in out.seconds.items():
            self.phase_seconds[phase] += seconds
        if self.draft_len_stats is not None and out.draft_lens is not None:
            self.draft_len_stats.observe(out.draft_lens)
        return self._collect(plan, out)

    # ---- internals ----
    def _remaining_tokens(self) -> np.ndarray | None:
        """[N] int64 tokens each slot's request may still generate before this step (max_tokens less its output; 0
        for a free slot), when no request waits for a slot: the batch drains, and the adaptive policy weighs its
        choice by the time to finish (docs/adaptive.md, "Draining batches"); None while requests wait, or when the
        policy does not read it."""
        return self._remaining_now() if self._tells_remaining() else None

    def _tells_remaining(self) -> bool:
        """No request waits for a slot (the batch drains) and the policy reads the remaining tokens."""
        return not self.scheduler.waiting and self.runner.policy.reads_remaining

    def _remaining_now(self) -> np.ndarray:
        """[N] int64 max_tokens less each running request's output (0 for a free slot), as the requests stand."""
        return self._per_slot(lambda req: req.params.max_tokens - len(req.output_token_ids))

    def _per_slot(self, value) -> np.ndarray:
        """[N] int64: value(request) at each running request's slot, 0 at the others."""
        batch = self.runner.input_batch
        out = np.zeros(batch.num_slots, dtype=np.int64)
        for req in self.scheduler.running:
            out[batch.slot_of(req.req_id)] = value(req)
        return out

    def _apply_plan(self, plan: SchedulerOutput) -> None:
        batch = self.runner.input_batch
        free = [slot for slot in range(batch.num_slots) if batch.req_ids[slot] is None]
        for req, slot in zip(plan.admitted, free):
            params = req.params
            self.runner.insert(slot, params.to_slot_request(req.req_id, req.prompt_token_ids, req.block_ids))
        # the batch the admissions join, and whether it drains (nothing waits): the policy's admission reads it at a
        # request's first chunk, which may come steps after its admission (a prefill paused for the token budget)
        remaining = self._remaining_tokens() if any(chunk.start == 0 for chunk in plan.prefill) else None
        # with remaining: the prompt tokens each slot has still to prefill (its draft prefill)
        prompt_left = None if remaining is None else self._per_slot(lambda req: req.num_prompt - req.num_prefilled)
        for chunk in plan.prefill:
            slot = batch.slot_of(chunk.req.req_id)
            self.runner.write_prefill(slot, chunk.req.prompt_token_ids, chunk.start, chunk.length,
                                      remaining=remaining, prompt_left=prompt_left)
        for req in plan.paused:
            self.runner.pause(batch.slot_of(req.req_id))

    def _collect(self, plan: SchedulerOutput, out: StepOutput) -> list[RequestOutput]:
        batch, outputs = self.runner.input_batch, []
        chunks = {c.req.req_id: c for c in plan.prefill}
        for req in plan.decode + [c.req for c in plan.prefill]:
            slot = batch.slot_of(req.req_id)
            chunk = chunks.get(req.req_id)
            if chunk is not None:
                req.num_prefilled = chunk.start + chunk.length
                if not chunk.is_last:
                    continue  # the token sampled after a partial prompt is discarded
            emitted = [int(t) for t in out.accept_tokens[slot, :int(out.accept_num[slot])]]
            num_drafted = int(out.seq_lens_this_time[slot]) - 1
            if chunk is None and num_drafted > 0 and emitted:
                req.spec_stats.observe(num_drafted, len(emitted))
                self.spec_stats.observe(num_drafted, len(emitted))
            new, reason = self._cut(req, emitted, bool(out.stop_flags[slot]))
            req.output_token_ids.extend(new)
            new_logprobs = None
            if req.logprobs is not None:
                new_logprobs = _token_logprobs(out.logprobs, slot, new, req.params.logprobs)
                req.logprobs.extend(new_logprobs)
            if reason is not None:
                self._finish(req, reason)
            outputs.append(RequestOutput(request_id=req.req_id, new_token_ids=new,
                                         output_token_ids=list(req.output_token_ids), finished=reason is not None,
                                         finish_reason=reason, spec_stats=req.spec_stats, new_logprobs=new_logprobs,
                                         logprobs=None if req.logprobs is None else list(req.logprobs)))
        return outputs

    def _cut(self, req: RequestState, emitted: list[int], stopped: bool):
        """The tokens the request keeps, and why it finishes (None: it goes on). An eos id or a stop
        token is kept and ends the request; so does the max_tokens-th token."""
        params, new = req.params, []
        for t in emitted:
            new.append(t)
            if t in params.stop_token_ids or (t in self.eos_token_ids and not params.ignore_eos):
                return new, FinishReason.STOP
            if len(req.output_token_ids) + len(new) >= params.max_tokens:
                return new, FinishReason.LENGTH
        if stopped:  # the verify op only stops a slot at an eos id or max_tokens, both caught above
            raise AssertionError(f"request {req.req_id!r}: the slot stopped after {emitted} without eos or "
                                 "max_tokens")
        return new, None

    def _finish(self, req: RequestState, reason: FinishReason) -> None:
        batch = self.runner.input_batch
        if req.status is RequestStatus.RUNNING and req.req_id in batch.req_id_to_slot:
            self.runner.clear_slot(batch.slot_of(req.req_id))
        self.scheduler.remove(req)
        req.finish_reason = reason
        del self.requests[req.req_id]


def _token_logprobs(host: StepLogprobs, slot: int, tokens: list[int], num: int) -> list[TokenLogprob]:
    """TokenLogprobs of the slot's emitted tokens (entry j belongs to tokens[j]), top-num alternatives each."""
    return [TokenLogprob(token_id=t, logprob=float(host.token_logprobs[slot, j]),
                         top_logprobs=dict(zip(host.top_ids[slot, j, :num].tolist(),
                                               host.top_logprobs[slot, j, :num].tolist())))
            for j, t in enumerate(tokens)]
