"""LLM: text in, text out over a Worker and the byte-level tokenizer (the convenience API; engines
embed Worker directly)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from specworker.config import WorkerConfig
from specworker.sampling_params import SamplingParams
from specworker.tokenizer import ByteTokenizer
from specworker.worker.request import FinishReason
from specworker.worker.worker import Worker

__all__ = ["CompletionOutput", "LLM"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompletionOutput:
    prompt: str
    text: str  # the generation decoded (special ids dropped)
    token_ids: list[int]
    finish_reason: FinishReason


class LLM:
    """`LLM(config).generate(prompts, params)` -> one CompletionOutput per prompt, in prompt order."""

    def __init__(self, config: WorkerConfig, **worker_kwargs):
        self.worker = Worker(config, **worker_kwargs)
        self.tokenizer = ByteTokenizer()
        self._num_calls = 0

    def generate(self, prompts: Sequence[str], sampling_params: SamplingParams | Sequence[SamplingParams],
                 *, on_step: Callable[[list], None] | None = None) -> list[CompletionOutput]:
        """Runs every prompt to completion. sampling_params: one for all, or one per prompt. on_step gets
        each step's RequestOutputs (progress bars)."""
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise TypeError(f"LLM.generate: prompts is a {type(prompts).__name__}; allowed: a list of str")
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"LLM.generate: {len(sampling_params)} sampling_params for {len(prompts)} prompts; "
                             "allowed: one, or one per prompt")
        ids = [f"llm-{self._num_calls}-{i}" for i in range(len(prompts))]
        self._num_calls += 1
        for req_id, prompt, params in zip(ids, prompts, sampling_params):
            self.worker.add_request(req_id, self.tokenizer.encode(prompt), params)
        done = {}
        while self.worker.has_unfinished():
            outs = self.worker.step()
            for out in outs:
                if out.finished:
                    done[out.request_id] = out
            if on_step is not None:
                on_step(outs)
        return [CompletionOutput(prompt=p, text=self.tokenizer.decode(done[i].output_token_ids),
                                 token_ids=done[i].output_token_ids, finish_reason=done[i].finish_reason)
                for i, p in zip(ids, prompts)]
