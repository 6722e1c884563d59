"""LLM: text in, text out over a Worker and the model's tokenizer (the convenience API; engines embed
Worker directly). `generate` takes plain prompts, `chat` lists of messages through the chat template."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from specworker.config import WorkerConfig
from specworker.sampling_params import SamplingParams
from specworker.hf_tokenizer import check_messages, load_tokenizer
from specworker.worker.request import FinishReason, TokenLogprob
from specworker.worker.worker import Worker

__all__ = ["CompletionOutput", "LLM"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompletionOutput:
    prompt: str
    text: str  # the generation decoded (special ids dropped)
    token_ids: list[int]
    finish_reason: FinishReason
    logprobs: list[TokenLogprob] | None = None  # one per token id when SamplingParams.logprobs is set


class LLM:
    """`LLM(config).generate(prompts, params)` -> one CompletionOutput per prompt, in prompt order."""

    def __init__(self, config: WorkerConfig, **worker_kwargs):
        self.worker = Worker(config, **worker_kwargs)
        self.tokenizer = load_tokenizer(config.model.path)
        self._num_calls = 0

    def generate(self, prompts: Sequence[str], sampling_params: SamplingParams | Sequence[SamplingParams],
                 *, on_step: Callable[[list], None] | None = None) -> list[CompletionOutput]:
        """Runs every prompt to completion. sampling_params: one for all, or one per prompt. on_step gets
        each step's RequestOutputs (progress bars)."""
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise TypeError(f"LLM.generate: prompts is a {type(prompts).__name__}; allowed: a list of str")
        for i, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise TypeError(f"LLM.generate: prompts[{i}] is a {type(prompt).__name__}; allowed: a str")
        return self._run(prompts, [self.tokenizer.encode(p) for p in prompts], sampling_params, on_step)

    def chat(self, conversations: Sequence[Sequence[dict]], sampling_params: SamplingParams | Sequence[SamplingParams],
             *, on_step: Callable[[list], None] | None = None) -> list[CompletionOutput]:
        """Like generate, for conversations ([{"role": "user", "content": "..."}, ...] each) rendered by the
        model's chat template with the assistant's turn opened. CompletionOutput.prompt is the rendered text."""
        if isinstance(conversations, (str, dict)) or not isinstance(conversations, Sequence):
            raise TypeError(f"LLM.chat: conversations is a {type(conversations).__name__}; allowed: a list of "
                            "message lists")
        for i, messages in enumerate(conversations):
            try:
                check_messages(messages)
            except (TypeError, ValueError) as err:
                raise type(err)(f"LLM.chat: conversations[{i}]: {err}") from None
        texts = [self.tokenizer.apply_chat_template(m) for m in conversations]
        ids = [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        return self._run(texts, ids, sampling_params, on_step)

    def _run(self, prompts, prompt_ids, sampling_params, on_step) -> list[CompletionOutput]:
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"LLM: {len(sampling_params)} sampling_params for {len(prompts)} prompts; "
                             "allowed: one, or one per prompt")
        ids = [f"llm-{self._num_calls}-{i}" for i in range(len(prompts))]
        self._num_calls += 1
        queued = []
        try:
            for req_id, token_ids, params in zip(ids, prompt_ids, sampling_params):
                self.worker.add_request(req_id, token_ids, params)
                queued.append(req_id)
        except (TypeError, ValueError, KeyError):
            for req_id in queued:  # all or nothing: a bad prompt leaves no earlier prompt queued
                self.worker.abort(req_id)
            raise
        done = {}
        while self.worker.has_unfinished():
            outs = self.worker.step()
            for out in outs:
                if out.finished:
                    done[out.request_id] = out
            if on_step is not None:
                on_step(outs)
        return [CompletionOutput(prompt=p, text=self.tokenizer.decode(done[i].output_token_ids),
                                 token_ids=done[i].output_token_ids, finish_reason=done[i].finish_reason,
                                 logprobs=done[i].logprobs)
                for i, p in zip(ids, prompts)]
