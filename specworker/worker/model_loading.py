"""Builds what a Worker runs from its config: the target model and its KV cache, the proposer, the
vocabulary size and the eos ids. The one place that maps config choices (method, model path) to objects.
"""

from __future__ import annotations

import dataclasses

import paddle

from specworker.config import WorkerConfig
from specworker.model_executor.parallel import SINGLE_RANK, TensorParallel
from specworker.spec_decode.base import NaiveProposer, Proposer
from specworker.tokenizer import EOS_TOKEN_ID

__all__ = ["KV_BYTES_PER_ELEMENT", "ResourceError", "WorkerParts", "available_memory", "build_model_and_proposer",
           "check_kv_cache_fits", "kv_cache_bytes"]

KV_BYTES_PER_ELEMENT = 4  # float32 caches


class ResourceError(ValueError):
    """The config asks for more device memory than is available (raised before allocating)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerParts:
    model: object  # forward(ids, meta, kv_cache, block_tables) -> [T, H]; compute_logits(rows); new_kv_cache(...)
    kv_cache: object
    proposer: Proposer
    vocab_size: int
    eos_token_ids: list[int]


def kv_cache_bytes(config: WorkerConfig, arch) -> int:
    """Bytes of the target's KV cache plus the MTP draft's (one layer), k and v, float32, on one rank (which
    holds num_kv_heads / tensor_parallel_size heads)."""
    s = config.scheduler
    layers = arch.num_layers + (1 if config.speculative_config.method == "mtp" else 0)
    kv_heads = arch.num_kv_heads // config.parallel_config.tensor_parallel_size
    return s.num_blocks * s.block_size * kv_heads * arch.head_dim * 2 * layers * KV_BYTES_PER_ELEMENT


def available_memory(place) -> int | None:
    """Free bytes where the KV cache goes: MemAvailable of /proc/meminfo on CPU, the device's free memory on
    GPU (paddle.device.cuda.mem_get_info). None when this platform does not say."""
    if isinstance(place, paddle.CUDAPlace):
        mem_get_info = getattr(paddle.device.cuda, "mem_get_info", None)
        return None if mem_get_info is None else int(mem_get_info(place.get_device_id())[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_kv_cache_fits(config: WorkerConfig, arch, place) -> None:
    """Raises ResourceError naming scheduler.num_blocks when the KV caches need more than available_memory."""
    need, free = kv_cache_bytes(config, arch), available_memory(place)
    if free is not None and need > free:
        s = config.scheduler
        per_block = need // s.num_blocks
        raise ResourceError(f"scheduler.num_blocks = {s.num_blocks}: the KV caches need {need} bytes "
                            f"({per_block} per block), but only {free} bytes are available on "
                            f"{'gpu' if isinstance(place, paddle.CUDAPlace) else 'cpu'}; allowed: "
                            f"num_blocks <= {free // per_block}")


def build_model_and_proposer(config: WorkerConfig, place, *, model=None, proposer=None,
                             tp: TensorParallel = SINGLE_RANK) -> WorkerParts:
    """Loads the target from config.model (unless `model` is given; this rank's shard under tp) and builds
    the proposer the method asks for (NaiveProposer for none / naive, MTPProposer for mtp, NgramProposer for
    ngram, SuffixProposer for suffix) unless `proposer` is given."""
    from specworker.model_executor.models.checkpoint import load_target

    if model is None:
        model = load_target(config.model, place, tp)
    model_tp = getattr(model, "tp", SINGLE_RANK)  # wrappers injected by tests are single-rank
    if model_tp.size != config.parallel_config.tensor_parallel_size:
        raise ValueError(f"parallel_config.tensor_parallel_size = {config.parallel_config.tensor_parallel_size}, "
                         f"but the injected model is sharded over {model_tp.size} ranks; allowed: the same size")
    arch = model.arch
    need = config.scheduler.max_model_len + config.speculative_config.max_draft_token_num
    if need > arch.max_position:
        raise ValueError(f"scheduler.max_model_len = {config.scheduler.max_model_len}: with the verify lookahead "
                         f"({config.speculative_config.max_draft_token_num}) positions reach {need}, past the model's "
                         f"{arch.max_position} rotary positions (max_position_embeddings); allowed: "
                         f"max_model_len <= {arch.max_position - config.speculative_config.max_draft_token_num}")
    check_kv_cache_fits(config, arch, place)
    kv_cache = model.new_kv_cache(config.scheduler.num_blocks, config.scheduler.block_size, place)
    if proposer is None:
        if config.speculative_config.method == "ngram":
            from specworker.spec_decode.ngram_proposer import NgramProposer

            proposer = NgramProposer(config.speculative_config)
        elif config.speculative_config.method == "suffix":
            from specworker.spec_decode.suffix_proposer import SuffixProposer

            proposer = SuffixProposer(config)
        elif config.speculative_config.needs_proposer:
            from specworker.spec_decode.mtp_proposer import MTPProposer

            proposer = MTPProposer(config, target=model, place=place)
        else:
            proposer = NaiveProposer()
    eos = getattr(model, "eos_token_ids", None)  # a checkpoint's generation_config.json, else the byte eos
    if eos is not None and not eos:
        raise ValueError(f"{config.model.path}: no eos_token_id in generation_config.json or config.json; "
                         "allowed: a checkpoint that names its end-of-sequence token(s)")
    eos = list(eos or [EOS_TOKEN_ID])
    return WorkerParts(model=model, kv_cache=kv_cache, proposer=proposer, vocab_size=arch.vocab_size,
                       eos_token_ids=eos)
