"""One measured batch: prompts through a fresh Worker to completion, timed, with the step-time split and the
acceptance counters (what `specworker run` and `specworker bench` report). Also the prompts file and the
user-facing load errors. Prints nothing; formatting lives in specworker.report.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from specworker.config import ConfigError, WorkerConfig
from specworker.sampling_params import SamplingParams
from specworker.spec_decode.metrics import DraftLenStats, SpecDecodeStats
from specworker.hf_tokenizer import load_tokenizer
from specworker.worker.request import FinishReason

__all__ = ["DEFAULT_PROMPTS", "BatchRun", "OwnClock", "UserError", "describe_model", "encode_prompts", "load_prompts",
           "load_worker", "queue_prompts", "run_batch", "run_lockstep", "run_queued"]

DEFAULT_PROMPTS = Path(__file__).resolve().parent / "data" / "prompts.txt"


class UserError(ValueError):
    """A mistake the user can fix (a file, a flag, the config vs the installed Paddle); the CLI shows it
    as one line."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BatchRun:
    """What one batch produced and what it cost. Seconds are host wall time of the step loop only
    (the worker's construction and add_request are outside it)."""

    prompts: list[str]
    token_ids: list[list[int]]  # generated ids per prompt, in prompt order
    texts: list[str]  # token_ids decoded (special ids dropped)
    finish_reasons: list[FinishReason]
    seconds: float
    num_steps: int
    phase_seconds: dict[str, float]  # phase -> seconds summed over steps (Worker.phase_seconds)
    spec_stats: SpecDecodeStats | None  # None for a non-speculative worker
    draft_lens: DraftLenStats | None = None  # the policy's drafts per step, per batch size (None: no proposer)

    @property
    def num_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else 0.0


def load_prompts(path: str | Path) -> list[str]:
    """The prompts of a file: one per line (blank lines skipped), or JSON Lines ({"prompt": "..."} a line,
    prompts may span lines) when the file name ends in .jsonl or its first line is a JSON object.
    Raises UserError naming the file (and the line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: prompts file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read prompts file ({type(err).__name__}: {err})") from None
    lines = text.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    if str(path).endswith(".jsonl") or first.startswith("{"):
        prompts = [_jsonl_prompt(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise UserError(f"{path}: no prompts; allowed: one prompt per line (blank lines are skipped), or JSON Lines "
                        'with {"prompt": "..."} a line')
    return prompts


def _jsonl_prompt(path, line_no: int, line: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{line_no}: not a JSON object ({err.msg}); allowed: "
                        '{"prompt": "..."} a line') from None
    prompt = record.get("prompt") if isinstance(record, dict) else None
    if not isinstance(prompt, str) or not prompt:
        raise UserError(f"{path}:{line_no}: needs a non-empty string field \"prompt\"; got "
                        f"{type(record).__name__ if not isinstance(record, dict) else record.get('prompt')!r}")
    return prompt


def load_worker(config: WorkerConfig, *, source: str = "config"):
    """A Worker for config. Raises UserError for `device: gpu` without a CUDA build of Paddle, for KV caches
    larger than the available memory, and for weights that cannot be loaded (missing or malformed checkpoint files)."""
    from specworker.worker.model_loading import ResourceError
    from specworker.worker.worker import Worker, device_error

    if (why := device_error(config.device)) is not None:
        raise UserError(f"{source}: {why}")
    try:
        return Worker(config)
    except ConfigError as err:  # parallel_config vs the checkpoint's architecture or the launched ranks
        raise err.in_source(source) from None
    except ResourceError as err:  # the KV caches do not fit in the available memory
        raise UserError(f"{source}: {err}") from None
    except (FileNotFoundError, ValueError) as err:  # load_target / load_mtp's documented errors
        raise UserError(f"{source}: cannot load the model weights: {err}") from None


def encode_prompts(tokenizer, prompts: Sequence[str], *, chat: bool = False) -> list[list[int]]:
    """Token ids of each prompt: the tokenizer's encode (the byte tokenizer prepends BOS), or with chat the
    prompt as one user message through the model's chat template. Raises UserError without a template."""
    if not chat:
        return [tokenizer.encode(p) for p in prompts]
    try:
        return [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": p}]),
                                 add_special_tokens=False) for p in prompts]
    except ValueError as err:
        raise UserError(f"--chat: {err}") from None


def tokenizer_of(worker):
    """The tokenizer of the worker's model (load_tokenizer). Raises UserError when it cannot be loaded."""
    try:
        return load_tokenizer(worker.config.model.path)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(f"cannot load the tokenizer: {err}") from None


def describe_model(config: WorkerConfig, *, source: str = "config") -> str:
    """One line about the target model: architecture, shape, parameters and stored weights. Opens config.json
    and every weights file's header (not the data). Raises UserError when they cannot be read."""
    from specworker.model_executor.models.checkpoint import TARGET_FILE, read_arch, target_dir
    from specworker.model_executor.models.hf_checkpoint import HFWeights
    from specworker.model_executor.models.hf_config import is_hf_checkpoint, read_hf_config
    from specworker.model_executor.models.safetensors_io import SafetensorsFile

    model_dir = target_dir(config.model)
    try:
        if is_hf_checkpoint(model_dir):
            info = read_hf_config(model_dir)
            name, arch = info.architecture, info.arch
            weights = HFWeights(model_dir)
            dtypes, files = weights.check_headers(), len(set(weights.files.values()))
        else:
            name, arch = f"{config.model.path} (specworker tiny layout)", read_arch(model_dir)
            f = SafetensorsFile(model_dir / TARGET_FILE)
            dtypes, files = {}, 1
            for n in f.names:
                dtypes[f.dtype(n)] = dtypes.get(f.dtype(n), 0) + 1
    except (FileNotFoundError, ValueError) as err:
        raise UserError(f"{source}: cannot read the model: {err}") from None
    tied = ", tied embeddings" if arch.tie_word_embeddings else ""
    stored = ", ".join(f"{n} {d}" for d, n in sorted(dtypes.items()))
    return (f"model: {name}, {arch.num_layers} layers, hidden {arch.hidden_size}, heads {arch.num_heads} / kv "
            f"{arch.num_kv_heads}, head_dim {arch.head_dim}, intermediate {arch.intermediate_size}, vocab "
            f"{arch.vocab_size}{tied}; {arch.num_parameters / 1e6:.1f}M parameters; weights: {files} file(s), "
            f"{stored} tensors")


def queue_prompts(worker, prompts: Sequence[str], params: SamplingParams, *, tokenizer=None,
                  chat: bool = False) -> list[str]:
    """Adds every prompt (encoded by encode_prompts; tokenizer defaults to the model's) to an idle worker;
    returns the request ids in prompt order. Raises UserError, with nothing left queued, when a prompt
    cannot run (too long for max_model_len or the KV cache)."""
    if worker.has_unfinished():
        raise ValueError("queue_prompts: the worker has unfinished requests; allowed: an idle worker")
    tokenizer = tokenizer or tokenizer_of(worker)
    req_ids = [f"batch{worker.num_steps}-{i}" for i in range(len(prompts))]
    for i, (req_id, prompt, ids) in enumerate(zip(req_ids, prompts, encode_prompts(tokenizer, prompts, chat=chat))):
        try:
            worker.add_request(req_id, ids, params)
        except ValueError as err:
            for queued in req_ids[:i]:
                worker.abort(queued)
            shown = prompt if len(prompt) <= 40 else prompt[:40] + "..."
            raise UserError(f"prompt {i + 1} ({shown!r}): {err}") from None
    return req_ids


class OwnClock:
    """Seconds that advance only while its worker steps (inside `with clock:`): in a lockstep run every worker's
    steps alternate with the others', and a worker's own time, step cost and throughput must not count theirs.
    Callable, like time.perf_counter (ModelRunner.clock)."""

    def __init__(self):
        self.total, self._entered = 0.0, None

    def __call__(self) -> float:
        return self.total + (0.0 if self._entered is None else time.perf_counter() - self._entered)

    def __enter__(self) -> OwnClock:
        self._entered = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.total += time.perf_counter() - self._entered
        self._entered = None


class _Progress:
    """One worker's queued batch, stepped to completion by run_queued (alone) or run_lockstep (in turns): the
    finished outputs and the counters' deltas. Counters are read as deltas, so a worker can serve several
    batches."""

    def __init__(self, worker, prompts: Sequence[str], req_ids: Sequence[str], clock: Callable[[], float],
                 on_tokens: Callable[[int], None] | None = None, tokenizer=None):
        self.worker, self.prompts, self.req_ids, self.clock = worker, list(prompts), list(req_ids), clock
        self.on_tokens, self.tokenizer = on_tokens, tokenizer
        self.phases_before, self.stats_before = dict(worker.phase_seconds), copy.deepcopy(worker.spec_stats)
        self.lens_before = copy.deepcopy(worker.draft_len_stats)
        self.steps_before, self.done = worker.num_steps, {}
        self.start = clock()

    def step(self) -> None:
        outs = self.worker.step()
        for out in outs:
            if out.finished:
                self.done[out.request_id] = out
        if self.on_tokens is not None:
            self.on_tokens(sum(len(out.new_token_ids) for out in outs))

    def result(self) -> BatchRun:
        worker = self.worker
        seconds = self.clock() - self.start
        token_ids = [self.done[r].output_token_ids for r in self.req_ids]
        tokenizer = self.tokenizer or tokenizer_of(worker)
        return BatchRun(prompts=self.prompts, token_ids=token_ids, texts=[tokenizer.decode(t) for t in token_ids],
                        finish_reasons=[self.done[r].finish_reason for r in self.req_ids], seconds=seconds,
                        num_steps=worker.num_steps - self.steps_before,
                        phase_seconds={p: s - self.phases_before[p] for p, s in worker.phase_seconds.items()},
                        spec_stats=_stats_delta(worker.spec_stats, self.stats_before),
                        draft_lens=(None if self.lens_before is None
                                    else worker.draft_len_stats.minus(self.lens_before)))


def run_queued(worker, prompts: Sequence[str], req_ids: Sequence[str], *,
               on_tokens: Callable[[int], None] | None = None, tokenizer=None) -> BatchRun:
    """Steps the worker until every queued request finishes; on_tokens gets each step's number of new
    tokens (progress bars). Counters are read as deltas, so a worker can serve several batches."""
    progress = _Progress(worker, prompts, req_ids, time.perf_counter, on_tokens, tokenizer)
    while worker.has_unfinished():
        progress.step()
    return progress.result()


def run_lockstep(workers: Sequence, prompts: Sequence[str], params: SamplingParams, *,
                 chat: bool = False) -> list[BatchRun]:
    """The same prompts through every worker, their steps taken in turns (one step of each in a round, the order
    reversed every other round), each worker timed by its own OwnClock (installed as its runner's step clock, so
    an adaptive policy's step costs are its own steps too). Side by side at the granularity of one step: a shared
    machine's speed, which moves by a third within a minute, reaches every worker alike, where runs one after the
    other each see their own stretch of it. Returns one BatchRun per worker, in order; raises UserError (nothing
    left queued) as queue_prompts."""
    # (each batch ends with no slot decoding, so no step cost spans two clocks: ModelRunner._step_shape)
    clocks = [OwnClock() for _ in workers]
    progress = []
    try:
        for worker, clock in zip(workers, clocks):
            worker.runner.clock = clock
            progress.append(_Progress(worker, prompts, queue_prompts(worker, prompts, params, chat=chat), clock))
    except UserError:
        for queued in progress:  # the workers before the one that refused: nothing left queued
            for req_id in queued.req_ids:
                queued.worker.abort(req_id)
        for worker in workers:
            worker.runner.clock = time.perf_counter
        raise
    try:
        turn = 0
        while any(w.has_unfinished() for w in workers):
            order = range(len(workers)) if turn % 2 == 0 else reversed(range(len(workers)))
            for i in order:
                if workers[i].has_unfinished():
                    with clocks[i]:
                        progress[i].step()
            turn += 1
        return [p.result() for p in progress]
    finally:
        for worker in workers:
            worker.runner.clock = time.perf_counter


def run_batch(worker, prompts: Sequence[str], params: SamplingParams, *, chat: bool = False,
              on_tokens: Callable[[int], None] | None = None) -> BatchRun:
    """queue_prompts then run_queued: every prompt through an idle worker to completion.

    Args:
        worker: a Worker with no unfinished request.
        prompts: the texts, encoded by the model's tokenizer.
        params: sampling parameters shared by every request.
        chat: send each prompt as one user message through the model's chat template (encode_prompts).
        on_tokens: called after each step with the number of tokens the step generated.
    Raises UserError when a prompt cannot be queued.
    """
    return run_queued(worker, prompts, queue_prompts(worker, prompts, params, chat=chat), on_tokens=on_tokens)


def _stats_delta(after: SpecDecodeStats | None, before: SpecDecodeStats | None) -> SpecDecodeStats | None:
    if after is None:
        return None
    return SpecDecodeStats(
        after.num_speculative_tokens, num_steps=after.num_steps - before.num_steps,
        num_drafted=after.num_drafted - before.num_drafted, num_accepted=after.num_accepted - before.num_accepted,
        accepted_per_position=[a - b for a, b in zip(after.accepted_per_position, before.accepted_per_position)],
        drafted_per_position=[a - b for a, b in zip(after.drafted_per_position, before.drafted_per_position)])
