"""Worker configuration: frozen dataclasses per concern, validated on construction, loaded from YAML.

Owns every user-set knob and its allowed values. Runtime-derived state (KV blocks sized from free memory,
eos ids) lives in runtime objects, never here. Reads no environment variable and never imports paddle.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from specworker.config_checks import ConfigError, check, check_at_least, check_choice, check_types, invalid, show

__all__ = ["ConfigError", "ModelConfig", "ParallelConfig", "SchedulerConfig", "SpeculativeConfig", "WorkerConfig",
           "check_draft_vocab_size", "check_tensor_parallel", "config_from_dict", "launched_world", "load_config"]

logger = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
# Built-in target models and their architecture. Byte-level: 256 byte ids plus bos, eos and pad
# (the tokenizer owns the special ids).
BUILTIN_TARGETS: dict[str, dict[str, Any]] = {
    "builtin:tiny": dict(vocab_size=259, hidden_size=192, num_layers=4, num_heads=6, num_kv_heads=2,
                         intermediate_size=512, rope_theta=10000.0, rms_norm_eps=1e-6),
}
# Built-in MTP drafts -> the built-in target whose embedding, final norm and lm_head they share (docs/spec.md §5).
BUILTIN_DRAFTS = {"builtin:tiny-mtp": "builtin:tiny"}
ARCH_FIELDS = tuple(BUILTIN_TARGETS["builtin:tiny"])

DTYPES = ("float32", "float16", "bfloat16")
CPU_DTYPES = ("float32",)  # Paddle's CPU matmul has no float16 / bfloat16 kernel
# Storage of the linear weights on the inference path (ops.pack_linear_weight): bfloat16 halves the
# bytes a step reads; compute stays float32 (a different, rounded model, equally lossless).
LINEAR_WEIGHT_DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "gpu")
METHODS = ("none", "naive", "mtp", "ngram", "suffix")
PROPOSER_METHODS = ("mtp", "ngram", "suffix")  # the methods that draft tokens
MAX_SUFFIX_DEPTH = 64  # suffix: longest context + draft a suffix tree path holds
MAX_SUFFIX_CACHED_REQUESTS = 100_000  # suffix: finished requests in the global tree
VERIFY_STRATEGIES = ("greedy", "topp", "target_match", "rejection")
LOSSY_VERIFY_STRATEGIES = ("topp",)  # sampled requests do not keep the target's distribution
ACCEPT_POLICIES = ("normal", "accept_all", "reject_all")
MTP_STRATEGIES = ("default", "with_ngram")  # with_ngram: hybrid_mtp_ngram extends the MTP drafts
POLICIES = ("fixed", "schedule", "adaptive")  # speculation policies: how many drafts a slot gets per step
MAX_NUM_SPECULATIVE_TOKENS = 5  # FastDeploy's bound on k and on num_model_steps
MAX_PROFILE_ROUNDS = 64  # speculative_config.profile_rounds: each round holds every K a few steps per batch size
MAX_NGRAM_SIZE = 64  # ngram_match's bound on max_ngram_size
MAX_CANDIDATE_LENS = tuple(range(1, 11)) + tuple(range(20, 101, 10))  # top_p_candidates' supported C
MAX_BLOCK_SIZE = 1024
INT32_MAX = 2**31 - 1  # offsets, cu_seqlens and KV slot ids are int32
MAX_SEED = 2**32 - 1  # the widest range every RNG we seed (numpy, paddle, random) accepts
MAX_BAD_WORDS = 64  # W, bad-word ids per request (FastDeploy sizes bad_tokens [N, V]; a cap costs N * W, not N * V)
MAX_STOP_TOKENS = 8  # E, capacity of eos_token_id; unused entries are NO_TOKEN, which no op matches
MAX_TENSOR_PARALLEL_SIZE = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """Target model: a checkpoint path or a `builtin:` name, the compute dtype, the storage dtype of the
    linear weights (float32, or bfloat16: rounded once at load, half the bytes per step), and the architecture.

    The architecture fields define a built-in model (None = the built-in's own value; override for
    experiments). A checkpoint's architecture comes from its config.json, so with a path they stay None.
    """

    SECTION: ClassVar[str] = "model"
    path: str = "builtin:tiny"
    dtype: str = "float32"
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    intermediate_size: int | None = None
    rope_theta: float | None = None
    rms_norm_eps: float | None = None
    linear_weight_dtype: str = "float32"

    def __post_init__(self) -> None:
        check_types(self)
        check(self.path != "", "model.path", self.path, "a checkpoint path or a builtin: name", "empty")
        check_choice("model.dtype", self.dtype, DTYPES)
        check_choice("model.linear_weight_dtype", self.linear_weight_dtype, LINEAR_WEIGHT_DTYPES)
        if not self.is_builtin:
            for name in ARCH_FIELDS:
                check(getattr(self, name) is None, f"model.{name}", getattr(self, name),
                      "null (or a builtin: model.path)", "set for a checkpoint, whose config.json defines it")
            return
        check(self.path in BUILTIN_TARGETS, "model.path", self.path,
              "a checkpoint path or " + ", ".join(map(repr, BUILTIN_TARGETS)), "unknown built-in target model")
        for name, default in BUILTIN_TARGETS[self.path].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        self._check_arch()

    def _check_arch(self) -> None:
        check(self.vocab_size > 256, "model.vocab_size", self.vocab_size, "an integer > 256",
              "a byte-level model needs 256 byte ids plus special tokens")
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            check_at_least(f"model.{name}", getattr(self, name), 1)
        check(self.hidden_size % self.num_heads == 0, "model.hidden_size", self.hidden_size,
              f"a multiple of model.num_heads = {self.num_heads}", "not divisible by num_heads")
        check(self.head_dim % 2 == 0, "model.hidden_size", self.hidden_size,
              "hidden_size / num_heads even", f"head_dim {self.head_dim} is odd (rotary embedding pairs)")
        check(self.num_heads % self.num_kv_heads == 0, "model.num_kv_heads", self.num_kv_heads,
              f"a divisor of model.num_heads = {self.num_heads}", "grouped-query attention needs a divisor")
        check(self.rope_theta > 0, "model.rope_theta", self.rope_theta, "a number > 0", "out of range")
        check(0 < self.rms_norm_eps < 1, "model.rms_norm_eps", self.rms_norm_eps, "0 < eps < 1", "out of range")

    @property
    def is_builtin(self) -> bool:
        return self.path.startswith(BUILTIN_PREFIX)

    @property
    def head_dim(self) -> int | None:
        return None if self.hidden_size is None else self.hidden_size // self.num_heads


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """Capacities: slots, tokens per sequence and per step, KV cache blocks."""

    SECTION: ClassVar[str] = "scheduler"
    max_num_seqs: int = 8  # N, rows of every per-slot buffer
    max_model_len: int = 512  # S, prompt + generated tokens of one sequence
    block_size: int = 16  # tokens per KV block
    num_blocks: int = 256  # KV blocks of the target cache
    max_num_batched_tokens: int = 2048  # packed input tokens per step (prefill chunks + decode)

    def __post_init__(self) -> None:
        check_types(self)
        check_at_least("scheduler.max_num_seqs", self.max_num_seqs, 1)
        check_at_least("scheduler.max_model_len", self.max_model_len, 2)
        check_at_least("scheduler.num_blocks", self.num_blocks, 1)
        bs = self.block_size
        check(1 <= bs <= MAX_BLOCK_SIZE and bs & (bs - 1) == 0, "scheduler.block_size", bs,
              f"a power of two in 1..{MAX_BLOCK_SIZE}", "not a power of two in range")
        check(self.max_num_batched_tokens >= self.max_num_seqs, "scheduler.max_num_batched_tokens",
              self.max_num_batched_tokens, f">= scheduler.max_num_seqs = {self.max_num_seqs}",
              "a full batch of decode slots would not fit in one step")
        check(self.num_blocks * bs >= self.max_model_len, "scheduler.num_blocks", self.num_blocks,
              f">= ceil(max_model_len / block_size) = {self.blocks_per_full_seq}",
              f"num_blocks * block_size = {self.num_blocks * bs} < max_model_len = {self.max_model_len}")
        check(self.num_blocks * bs <= INT32_MAX, "scheduler.num_blocks", self.num_blocks,
              f"num_blocks * block_size <= {INT32_MAX}", "KV slot ids are int32")
        check(self.max_num_seqs * self.max_model_len <= INT32_MAX, "scheduler.max_model_len",
              self.max_model_len, f"max_num_seqs * max_model_len <= {INT32_MAX}", "offsets are int32")

    @property
    def blocks_per_full_seq(self) -> int:
        """KV blocks of one full-length sequence: ceil(max_model_len / block_size). The block table is wider
        (WorkerConfig.max_blocks_per_seq: a verify step looks k + 1 positions ahead)."""
        return -(-self.max_model_len // self.block_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """FastDeploy's `speculative_config` keys (docs/spec.md §8.19).

    method `none`: plain decoding. `naive`: the speculative sampler path with no drafts (k = 0).
    `mtp`: an MTP draft module proposes up to k drafts per step. `ngram`: prompt lookup (ngram_match)
    proposes up to k tokens that followed the most recent earlier occurrence of the slot's last
    max_ngram_size .. min_ngram_size tokens; no draft model. `suffix`: suffix decoding on the host: a
    suffix tree per request over its prompt and output (and one over recent requests' outputs) proposes
    the most frequent continuation of the longest matching context, as long as its estimated probability
    stays >= suffix_min_token_prob. Without a proposer, k must be 0 and `num_model_steps` / `model` unset;
    verify settings are then unused. `mtp_strategy: with_ngram` (method mtp, k > num_model_steps): after the
    MTP drafts, hybrid_mtp_ngram appends n-gram lookup drafts up to k in all (FastDeploy's hybrid). The
    n-gram sizes are ngram's and with_ngram's only, the suffix_* keys suffix's only.
    """

    SECTION: ClassVar[str] = "speculative_config"
    method: str = "none"
    num_speculative_tokens: int = 0  # k; 1..5 for mtp, 0 otherwise (no FastDeploy default of 1)
    num_model_steps: int = 1  # draft forward passes per engine step
    model: str | None = None  # draft (MTP) weights: checkpoint path or builtin: name
    # Lossless by default: rejection sampling keeps the target's distribution and accepted more than
    # target_match on the tiny pair (AL 2.46 vs 2.07 at temperature 0.7, 2.33 vs 1.84 at 1.0, k 2).
    # FastDeploy's default, topp, is lossy for sampled requests (available, documented as such).
    verify_strategy: str = "rejection"
    accept_policy: str = "normal"
    max_candidate_len: int = 5  # C of top_p_candidates (topp)
    verify_window: int = 2  # FastDeploy's topp verify window; no effect (docs/architecture.md, Top-p verification)
    benchmark_mode: bool = False  # reject every draft (acceptance 0), for measuring overhead
    mtp_strategy: str = "default"  # mtp: "with_ngram" extends the MTP drafts by n-gram lookup up to k
    max_ngram_size: int = 3  # ngram: longest suffix looked up (FastDeploy's default 5)
    min_ngram_size: int = 1  # ngram: shortest suffix looked up (FastDeploy's default 2)
    suffix_max_depth: int = 24  # suffix: tree depth = longest matched context + draft (vLLM's default 24)
    suffix_max_cached_requests: int = 64  # suffix: finished requests whose outputs the global tree holds (0: off)
    suffix_max_spec_factor: float = 1.0  # suffix: drafts <= this * matched context length
    suffix_min_token_prob: float = 0.1  # suffix: stop drafting once the path's estimated probability drops below
    # How many drafts each slot gets per step (docs/spec.md §2.3): fixed (k_max every
    # step, speculate_update's adaptive budget as before), schedule (k per batch-size range) or adaptive.
    policy: str = "fixed"
    # policy schedule: {smallest batch size: k}; the entry with the largest key <= B applies (must hold key 1);
    # kept as a tuple of (batch size, k) pairs, sorted.
    schedule: tuple | None = None
    # policy adaptive: rounds of the step-cost profile measured at worker start (docs/adaptive.md, "Profiled step
    # costs"); 0: no profile, costs measured while serving. Read by the adaptive policy only.
    profile_rounds: int = 6
    # mtp: the draft scores only the first draft_vocab_size ids of its ranked draft vocabulary (docs/spec.md §5.3;
    # draft_vocab.safetensors next to its weights); 0: the whole vocabulary.
    draft_vocab_size: int = 0

    def __post_init__(self) -> None:
        s = "speculative_config"
        if isinstance(self.schedule, Mapping):
            object.__setattr__(self, "schedule", _schedule_pairs(f"{s}.schedule", self.schedule))
        check_types(self)
        check_choice(f"{s}.method", self.method, METHODS)
        check_choice(f"{s}.verify_strategy", self.verify_strategy, VERIFY_STRATEGIES)
        check_choice(f"{s}.accept_policy", self.accept_policy, ACCEPT_POLICIES)
        check_choice(f"{s}.mtp_strategy", self.mtp_strategy, MTP_STRATEGIES)
        check(self.max_candidate_len in MAX_CANDIDATE_LENS, f"{s}.max_candidate_len", self.max_candidate_len,
              "1..10 or 20..100 in steps of 10", "unsupported candidate count")
        check_at_least(f"{s}.verify_window", self.verify_window, 1)
        check(not (self.benchmark_mode and self.accept_policy == "accept_all"), f"{s}.accept_policy",
              self.accept_policy, "'normal' or 'reject_all' with benchmark_mode: true",
              "benchmark_mode rejects every draft")
        k, steps = self.num_speculative_tokens, self.num_model_steps
        check(self.draft_vocab_size >= 0, f"{s}.draft_vocab_size", self.draft_vocab_size,
              "0 (the whole vocabulary) or an integer >= 1 (with method: mtp)", "out of range")
        self._check_method_keys(s)
        self._check_policy(s)
        if not self.needs_proposer:
            why = f"method {self.method!r} has no proposer"
            check(k == 0, f"{s}.num_speculative_tokens", k, "0 (or method: mtp, ngram or suffix)", why)
            check(steps == 1, f"{s}.num_model_steps", steps, "1 (or method: mtp)", why)
            check(self.model is None, f"{s}.model", self.model, "null (or method: mtp)", why)
            return
        check(1 <= k <= MAX_NUM_SPECULATIVE_TOKENS, f"{s}.num_speculative_tokens", k,
              f"1..{MAX_NUM_SPECULATIVE_TOKENS} with method {self.method!r}", "out of range")
        if self.method in ("ngram", "suffix"):
            why = f"method {self.method!r} drafts by lookup in the request's own tokens, without a draft model"
            check(steps == 1, f"{s}.num_model_steps", steps, "1 (or method: mtp)", why)
            check(self.model is None, f"{s}.model", self.model, "null (or method: mtp)", why)
            return
        check(1 <= steps <= k, f"{s}.num_model_steps", steps, f"1..num_speculative_tokens = {k}",
              "each draft step proposes one token into one of the k draft slots")
        check(self.model is not None and self.model != "", f"{s}.model", self.model,
              "a draft checkpoint path or " + ", ".join(map(repr, BUILTIN_DRAFTS)), "method 'mtp' needs draft weights")
        check(not self.model.startswith(BUILTIN_PREFIX) or self.model in BUILTIN_DRAFTS, f"{s}.model", self.model,
              "a draft checkpoint path or " + ", ".join(map(repr, BUILTIN_DRAFTS)), "unknown built-in draft model")
        if self.with_ngram:
            check(k > steps, f"{s}.num_speculative_tokens", k,
                  f"> num_model_steps = {steps} with mtp_strategy 'with_ngram'",
                  "the n-gram drafts fill the draft slots after the MTP drafts")

    # Keys that only one method reads; with any other method they must keep their defaults.
    METHOD_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "mtp": ("draft_vocab_size",),
        "ngram": ("max_ngram_size", "min_ngram_size"),
        "suffix": ("suffix_max_depth", "suffix_max_cached_requests", "suffix_max_spec_factor", "suffix_min_token_prob"),
    }

    def _check_method_keys(self, s: str) -> None:
        check(self.mtp_strategy == "default" or self.method == "mtp", f"{s}.mtp_strategy", self.mtp_strategy,
              "'default' (or method: mtp)", f"method {self.method!r} has no MTP drafts to extend")
        for method, names in self.METHOD_KEYS.items():
            if self.method == method or (method == "ngram" and self.with_ngram):
                continue
            why = f"method {self.method!r} does not read it"
            if method == "ngram" and self.method == "mtp":
                why = "method 'mtp' reads it only with mtp_strategy 'with_ngram'"
            for name in names:
                default = self.__dataclass_fields__[name].default
                check(getattr(self, name) == default, f"{s}.{name}", getattr(self, name),
                      f"{show(default)}, the default (or method: {method})", why)
        if self.method == "ngram" or self.with_ngram:
            lo, hi = self.min_ngram_size, self.max_ngram_size
            check(1 <= lo <= MAX_NGRAM_SIZE, f"{s}.min_ngram_size", lo, f"1..{MAX_NGRAM_SIZE}", "out of range")
            check(lo <= hi <= MAX_NGRAM_SIZE, f"{s}.max_ngram_size", hi, f"min_ngram_size = {lo}..{MAX_NGRAM_SIZE}",
                  "out of range")
        if self.method == "suffix":
            low = self.num_speculative_tokens + 1  # a path holds at least one context token and k drafts
            check(low <= self.suffix_max_depth <= MAX_SUFFIX_DEPTH, f"{s}.suffix_max_depth", self.suffix_max_depth,
                  f"num_speculative_tokens + 1 = {low}..{MAX_SUFFIX_DEPTH}", "out of range")
            check(0 <= self.suffix_max_cached_requests <= MAX_SUFFIX_CACHED_REQUESTS,
                  f"{s}.suffix_max_cached_requests", self.suffix_max_cached_requests,
                  f"0 (no global tree)..{MAX_SUFFIX_CACHED_REQUESTS}", "out of range")
            check(self.suffix_max_spec_factor > 0 and math.isfinite(self.suffix_max_spec_factor),
                  f"{s}.suffix_max_spec_factor", self.suffix_max_spec_factor, "a number > 0", "out of range")
            check(0 <= self.suffix_min_token_prob <= 1, f"{s}.suffix_min_token_prob", self.suffix_min_token_prob,
                  "0..1", "out of range")

    def _check_policy(self, s: str) -> None:
        check_choice(f"{s}.policy", self.policy, POLICIES)
        check(self.profile_rounds == 0 or 2 <= self.profile_rounds <= MAX_PROFILE_ROUNDS, f"{s}.profile_rounds",
              self.profile_rounds, f"0 (no profile) or 2..{MAX_PROFILE_ROUNDS}",
              "a profile needs two rounds for its error estimate" if self.profile_rounds == 1 else "out of range")
        check(self.policy == "fixed" or self.needs_proposer, f"{s}.policy", self.policy,
              "'fixed' (or method: mtp, ngram or suffix)", f"method {self.method!r} drafts nothing")
        if self.policy != "schedule":
            check(self.schedule is None, f"{s}.schedule", self.schedule, "null (or policy: schedule)",
                  f"policy {self.policy!r} does not read it")
            return
        check(self.schedule is not None, f"{s}.schedule", self.schedule,
              "a mapping {smallest batch size: k}, e.g. {1: 2, 16: 1, 32: 0}", "policy 'schedule' needs one")
        pairs = _schedule_pairs(f"{s}.schedule", dict(self.schedule))  # also a tuple written by hand
        check(pairs[0][0] == 1, f"{s}.schedule", dict(pairs), "a key 1 (every batch size needs an entry)",
              f"the smallest key is {pairs[0][0]}")
        k_max = self.max_policy_draft_len
        for size, k in pairs:
            check(0 <= k <= k_max, f"{s}.schedule.{size}", k, f"0..{k_max} (the drafts a step can hold: "
                  + ("num_model_steps" if self.method == "mtp" and not self.with_ngram else "num_speculative_tokens")
                  + ")", "out of range")
        object.__setattr__(self, "schedule", pairs)

    @property
    def max_policy_draft_len(self) -> int:
        """k_max: the most drafts a slot can get in one step (MTP: num_model_steps substeps; MTP with_ngram, whose
        n-gram extension fills up to k, and the other methods: k)."""
        if self.method == "mtp" and not self.with_ngram:
            return self.num_model_steps
        return self.num_speculative_tokens

    def schedule_k(self, batch_size: int) -> int:
        """policy schedule: k of the range that holds batch_size (the largest key <= batch_size)."""
        return next(k for size, k in reversed(self.schedule) if size <= max(batch_size, 1))

    @property
    def enabled(self) -> bool:
        """The speculative path (sampler, output-side indices) runs: method naive, mtp, ngram or suffix (FastDeploy)."""
        return self.method != "none"

    @property
    def with_ngram(self) -> bool:
        """MTP drafts are extended by n-gram lookup (method mtp, mtp_strategy with_ngram)."""
        return self.method == "mtp" and self.mtp_strategy == "with_ngram"

    @property
    def needs_proposer(self) -> bool:
        """A proposer drafts tokens (method mtp: a draft model; ngram, suffix: lookup in the request's tokens)."""
        return self.method in PROPOSER_METHODS

    @property
    def max_draft_token_num(self) -> int:
        """D = k + 1, the width of draft_tokens / accept_tokens. FastDeploy's attribute of this name is k."""
        return self.num_speculative_tokens + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """Tensor parallelism (docs/tensor_parallel.md): the target and the MTP draft are sharded over
    tensor_parallel_size ranks, each running the same worker on the same inputs."""

    SECTION: ClassVar[str] = "parallel_config"
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        check_types(self)
        check(1 <= self.tensor_parallel_size <= MAX_TENSOR_PARALLEL_SIZE, "parallel_config.tensor_parallel_size",
              self.tensor_parallel_size, f"1..{MAX_TENSOR_PARALLEL_SIZE}", "out of range")


def check_tensor_parallel(size: int, *, num_heads: int, num_kv_heads: int, intermediate_size: int,
                          where: str = "model") -> None:
    """ConfigError naming parallel_config.tensor_parallel_size and the first architecture field it does not
    divide (attention heads, KV heads, MLP intermediate size; the vocabulary is padded, docs/tensor_parallel.md).
    `where` names the architecture's source (model, or a checkpoint's config.json)."""
    for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads),
                        ("intermediate_size", intermediate_size)):
        check(value % size == 0, "parallel_config.tensor_parallel_size", size,
              f"a common divisor of {where}'s num_heads = {num_heads}, num_kv_heads = {num_kv_heads} and "
              f"intermediate_size = {intermediate_size}", f"does not divide {where}'s {name} = {value}")


def check_draft_vocab_size(size: int, *, vocab_size: int, where: str = "model") -> None:
    """ConfigError naming speculative_config.draft_vocab_size when it exceeds the target's vocabulary (`where`
    names the vocabulary's source: model, or a draft checkpoint)."""
    check(size <= vocab_size, "speculative_config.draft_vocab_size", size,
          f"0 (the whole vocabulary) or 1..{vocab_size}, the vocabulary size of {where}", "larger than the vocabulary")


def launched_world() -> int | None:
    """Ranks of the paddle.distributed.launch job this process belongs to (PADDLE_TRAINERS_NUM), None when it
    was not started by a launcher."""
    world = os.environ.get("PADDLE_TRAINERS_NUM")
    return int(world) if world and world.isdigit() else None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Everything one worker needs; cross-section constraints are checked here."""

    SECTION: ClassVar[str] = ""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    scheduler: SchedulerConfig = dataclasses.field(default_factory=SchedulerConfig)
    speculative_config: SpeculativeConfig = dataclasses.field(default_factory=SpeculativeConfig)
    parallel_config: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    device: str = "cpu"
    seed: int = 0
    debug_checks: bool = False  # run ForwardMeta.check(), SamplingMetadata.check() and friends every step

    def __post_init__(self) -> None:
        check_types(self)
        check_choice("device", self.device, DEVICES)
        check(0 <= self.seed <= MAX_SEED, "seed", self.seed, f"0..{MAX_SEED}", "out of range")
        if self.device == "cpu":
            check(self.model.dtype in CPU_DTYPES, "model.dtype", self.model.dtype,
                  ", ".join(map(repr, CPU_DTYPES)) + " on device 'cpu'", "Paddle's CPU kernels lack it")
        sched, spec = self.scheduler, self.speculative_config
        k, n, d = spec.num_speculative_tokens, sched.max_num_seqs, spec.max_draft_token_num
        check(sched.max_model_len >= k + 2, "scheduler.max_model_len", sched.max_model_len,
              f">= num_speculative_tokens + 2 = {k + 2}", "one prompt token plus one verify step must fit")
        check(sched.max_num_batched_tokens >= n * d, "scheduler.max_num_batched_tokens",
              sched.max_num_batched_tokens, f">= max_num_seqs * (num_speculative_tokens + 1) = {n * d}",
              "every running slot must be able to verify its drafts in one step")
        target = BUILTIN_DRAFTS.get(spec.model or "")
        check(target is None or self.model.path == target, "speculative_config.model", spec.model,
              f"a draft of model.path {self.model.path!r}", f"this built-in draft shares the weights of {target!r}")
        # Every rank runs the same worker and must feed the same tokens: the adaptive policy decides from the wall
        # seconds each rank measures itself, which differ between ranks (its choices could part, and the ranks'
        # collectives with them). schedule decides from the batch size alone.
        check(spec.policy != "adaptive" or self.parallel_config.tensor_parallel_size == 1,
              "speculative_config.policy", spec.policy,
              "'fixed' or 'schedule' with parallel_config.tensor_parallel_size > 1",
              "the adaptive policy decides from each rank's own step timings, which differ between ranks")
        # a draft vocabulary gathers the lm_head columns it keeps; a sharded target holds only its own columns
        check(spec.draft_vocab_size == 0 or self.parallel_config.tensor_parallel_size == 1,
              "speculative_config.draft_vocab_size", spec.draft_vocab_size,
              "0 with parallel_config.tensor_parallel_size > 1", "each rank holds only its part of the lm_head")
        m = self.model
        if m.is_builtin and spec.draft_vocab_size > 0:
            check_draft_vocab_size(spec.draft_vocab_size, vocab_size=m.vocab_size, where=f"model.path {m.path!r}")
        if m.is_builtin:  # a checkpoint's architecture is checked when its config.json is read
            check_tensor_parallel(self.parallel_config.tensor_parallel_size, num_heads=m.num_heads,
                                  num_kv_heads=m.num_kv_heads, intermediate_size=m.intermediate_size)

    @property
    def max_blocks_per_seq(self) -> int:
        """Width of `block_tables`: ceil((max_model_len + k + 1) / block_size), one step's verify / draft
        lookahead past the last token (docs/spec.md §3.3)."""
        return -(-(self.scheduler.max_model_len + self.speculative_config.max_draft_token_num)
                 // self.scheduler.block_size)

    @property
    def max_output_token_num(self) -> int:
        """Capacity of the output side (logit rows per step): max_num_seqs * D."""
        return self.scheduler.max_num_seqs * self.speculative_config.max_draft_token_num

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of every field (derived properties excluded); config_from_dict reads it back."""
        out = dataclasses.asdict(self)
        schedule = out["speculative_config"]["schedule"]
        if schedule is not None:  # the YAML form, {smallest batch size: k}
            out["speculative_config"]["schedule"] = {int(size): int(k) for size, k in schedule}
        return out

    def describe(self) -> str:
        """The resolved config as YAML (loadable again), then the derived quantities as comments."""
        spec = self.speculative_config
        derived = {
            "speculative_config.enabled": spec.enabled,
            "speculative_config.needs_proposer": spec.needs_proposer,
            "speculative_config.max_draft_token_num": spec.max_draft_token_num,
            "max_blocks_per_seq": self.max_blocks_per_seq,
            "max_output_token_num": self.max_output_token_num,
        }
        lines = [yaml.safe_dump(self.to_dict(), sort_keys=False).rstrip(), "# derived (not settable):"]
        lines += [f"#   {name}: {show(value)}" for name, value in derived.items()]
        return "\n".join(lines)


def _schedule_pairs(key: str, schedule: Mapping) -> tuple[tuple[int, int], ...]:
    """{smallest batch size: k} -> sorted ((size, k), ...); keys >= 1 and integer values, else ConfigError."""
    check(len(schedule) > 0, key, dict(schedule), "a mapping {smallest batch size: k}, e.g. {1: 2, 16: 1, 32: 0}",
          "empty")
    for size, k in schedule.items():
        ok = isinstance(size, int) and not isinstance(size, bool) and size >= 1
        check(ok, f"{key}.{size}", k, "keys: batch sizes >= 1 (integers)", f"bad key {show(size)}")
        check(isinstance(k, int) and not isinstance(k, bool), f"{key}.{size}", k, "an integer k >= 0",
              f"wrong type {type(k).__name__}")
    return tuple(sorted((int(size), int(k)) for size, k in schedule.items()))


_SECTIONS = {"model": ModelConfig, "scheduler": SchedulerConfig, "speculative_config": SpeculativeConfig,
             "parallel_config": ParallelConfig}
_PATH_KEYS = {"model": "path", "speculative_config": "model"}


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _check_mapping(value: Any, key: str, cls: type) -> None:
    """A mapping whose keys are all fields of cls (unknown keys rejected, first one reported)."""
    allowed = ", ".join(_names(cls))
    check(isinstance(value, Mapping), key, value, f"a mapping with keys {allowed}", "not a mapping")
    for name in value:
        check(name in _names(cls), f"{key}.{name}" if key != "(top level)" else str(name), value[name],
              allowed, "unknown key")


def _resolve_path(key: str, value: Any, base_dir: Path | None, check_paths: bool) -> Any:
    """A checkpoint path made absolute against base_dir (the config file's folder); builtin: names as is."""
    if not isinstance(value, str) or value == "" or value.startswith(BUILTIN_PREFIX):
        return value
    path = Path(os.path.abspath(Path(base_dir or ".") / os.path.expanduser(value)))
    check(not check_paths or path.exists(), key, value, "an existing checkpoint path or a builtin: name",
          f"{path} does not exist")
    return str(path)


def config_from_dict(data: Any, *, source: str = "<dict>", check_paths: bool = True,
                     base_dir: str | Path | None = None) -> WorkerConfig:
    """Build a validated WorkerConfig from plain data (parsed YAML); errors name `source`.

    Relative checkpoint paths are resolved against base_dir (default: the working directory); with
    check_paths they must exist. Raises ConfigError.
    """
    base = Path(base_dir) if base_dir is not None else None
    try:
        _check_mapping(data, "(top level)", WorkerConfig)
        kwargs = dict(data)
        for name, cls in _SECTIONS.items():
            if name not in kwargs:
                continue
            _check_mapping(kwargs[name], name, cls)
            section = dict(kwargs[name])
            path_key = _PATH_KEYS.get(name)
            if path_key in section:
                section[path_key] = _resolve_path(f"{name}.{path_key}", section[path_key], base, check_paths)
            kwargs[name] = cls(**section)
        return WorkerConfig(**kwargs)
    except ConfigError as err:
        raise err.in_source(source) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports unhashable keys itself
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}", key=str(key))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path, *, check_paths: bool = True) -> WorkerConfig:
    """Read and validate a YAML config file. Raises ConfigError naming the file on any problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config file not found", source=source) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read config file ({type(err).__name__}: {err})", source=source) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except ConfigError as err:
        raise err.in_source(source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"invalid YAML{where}: {problem}", source=source) from None
    config = config_from_dict(data, source=source, check_paths=check_paths, base_dir=Path(path).parent)
    logger.debug("loaded config %s", source)
    return config
