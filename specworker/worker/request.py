"""Per-request host state (RequestState) and what the engine gets back each step (RequestOutput).
No tensors here: the device side of a request is its InputBatch row.
"""

from __future__ import annotations

import dataclasses
import enum

from specworker.sampling_params import SamplingParams
from specworker.spec_decode.metrics import SpecDecodeStats

__all__ = ["FinishReason", "RequestOutput", "RequestState", "RequestStatus", "TokenLogprob"]


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued: no slot or not enough free KV blocks yet
    RUNNING = "running"  # holds a slot and its blocks (prefilling or decoding)
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"  # an eos id or one of the request's stop_token_ids was emitted (and is included)
    LENGTH = "length"  # max_tokens generated
    ABORT = "abort"  # the engine called abort()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TokenLogprob:
    """One generated token's logprob and the top alternatives of the distribution it was drawn from
    (SamplingParams.logprobs says which distribution)."""

    token_id: int
    logprob: float  # of token_id
    top_logprobs: dict[int, float]  # the SamplingParams.logprobs most likely ids -> logprob, most likely first


@dataclasses.dataclass(slots=True, kw_only=True)
class RequestState:
    """Host bookkeeping of one request. `num_prefilled` prompt tokens are in the KV cache; the prefill is
    done when it reaches the prompt length, after which every step appends accepted tokens."""

    req_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival: int  # admission order (FCFS)
    status: RequestStatus = RequestStatus.WAITING
    block_ids: list[int] = dataclasses.field(default_factory=list)
    num_prefilled: int = 0
    output_token_ids: list[int] = dataclasses.field(default_factory=list)
    finish_reason: FinishReason | None = None
    spec_stats: SpecDecodeStats | None = None  # speculative workers only
    logprobs: list[TokenLogprob] | None = None  # one per output token when params.logprobs is set

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def prefill_done(self) -> bool:
        return self.num_prefilled >= self.num_prompt


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RequestOutput:
    """One request's news from one step: the tokens it gained and whether it is finished."""

    request_id: str
    new_token_ids: list[int]  # tokens emitted this step (several with speculation)
    output_token_ids: list[int]  # every token generated so far, new ones included
    finished: bool
    finish_reason: FinishReason | None = None
    spec_stats: SpecDecodeStats | None = None  # the request's acceptance so far (speculative workers)
    new_logprobs: list[TokenLogprob] | None = None  # one per new token (SamplingParams.logprobs set)
    logprobs: list[TokenLogprob] | None = None  # one per output token so far
