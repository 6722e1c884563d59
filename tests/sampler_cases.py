"""Shared helpers of the Sampler tests (tests/model_executor/test_sampler*.py): per-slot parameter sets,
ForwardMeta / SamplingMetadata builders, and the runs of the Sampler and of its numpy reference."""

from __future__ import annotations

import numpy as np
import paddle

from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.sampler import Sampler, SamplingMetadata
from reference.cases.step_batch import pack_output_index
from reference.sampler import ref_sampler

FLOAT_BUFFERS = ("temperature", "top_p", "min_p", "penalty_score", "frequency_score", "presence_score")


def default_params(n: int, max_model_len: int = 16, max_bad_words: int = 4, eos=(2, -1)) -> dict:
    """Table fills of every sampling buffer for n slots: temperature 1, no cut, no penalty."""
    f32 = lambda v: np.full(n, v, np.float32)  # noqa: E731
    i64 = lambda v: np.full(n, v, np.int64)  # noqa: E731
    return dict(temperature=f32(1.0), top_p=f32(1.0), top_k=i64(0), min_p=f32(0.0), penalty_score=f32(1.0),
                frequency_score=f32(0.0), presence_score=f32(0.0), infer_seed=np.arange(n, dtype=np.int64),
                step_idx=i64(0), pre_ids=np.full((n, max_model_len), -1, np.int64),
                bad_tokens=np.full((n, max_bad_words), -1, np.int64), bad_tokens_len=i64(0), min_dec_len=i64(0),
                eos_token_id=np.asarray(eos, np.int64))


def random_params(rng: np.random.Generator, n: int, vocab: int, greedy_share: float = 0.2) -> dict:
    """Random parameters per slot: every cut on its own and combined, penalties, histories, bad words."""
    p = default_params(n)
    p["temperature"] = rng.choice([0.0, 0.5, 1.0, 1.7], n).astype(np.float32)
    p["temperature"][rng.random(n) < greedy_share] = 0.0
    p["top_k"] = rng.choice([0, 0, 1, 3, 10, vocab + 5], n).astype(np.int64)
    p["top_p"] = rng.choice([1.0, 0.9, 0.5, 0.05], n).astype(np.float32)
    p["min_p"] = rng.choice([0.0, 0.0, 0.1, 0.5], n).astype(np.float32)
    p["penalty_score"] = rng.choice([1.0, 1.3], n).astype(np.float32)
    p["frequency_score"] = rng.choice([0.0, 0.4], n).astype(np.float32)
    p["presence_score"] = rng.choice([0.0, 0.7], n).astype(np.float32)
    p["infer_seed"] = rng.integers(0, 2**32, n, dtype=np.int64)
    p["step_idx"] = rng.integers(0, 10, n).astype(np.int64)
    for b in range(n):
        p["pre_ids"][b, 1:1 + p["step_idx"][b]] = rng.integers(0, vocab, p["step_idx"][b])
    p["bad_tokens"][:, 0] = rng.integers(0, vocab, n)
    p["bad_tokens_len"] = rng.integers(0, 2, n).astype(np.int64)
    p["min_dec_len"] = rng.integers(0, 12, n).astype(np.int64)
    return p


def random_logits(rng: np.random.Generator, rows: int, vocab: int, scale: float = 3.0) -> np.ndarray:
    return (rng.standard_normal((rows, vocab)) * scale).astype(np.float32)


def output_index(seq_lens_output, capacity: int):
    """(batch_id_per_token_output [capacity] int32, cu_seqlens_q_output [bsz + 1] int32)."""
    return pack_output_index(np.asarray(seq_lens_output, np.int32), capacity)


def make_meta(seq_lens_output, num_draft_tokens: int = 0) -> ForwardMeta:
    """A ForwardMeta whose output side holds O_b = seq_lens_output (capacity bsz * (k + 1))."""
    lens = np.asarray(seq_lens_output, np.int32)
    meta = ForwardMeta.make_dummy(lens.shape[0], 1, num_draft_tokens)
    batch_ids, cu = output_index(lens, meta.output_capacity)
    meta.seq_lens_this_time = paddle.to_tensor(lens)
    meta.seq_lens_output = paddle.to_tensor(lens)
    meta.batch_id_per_token_output = paddle.to_tensor(batch_ids)
    meta.cu_seqlens_q_output = paddle.to_tensor(cu)
    return meta


def make_sampling(p: dict) -> SamplingMetadata:
    tensors = {k: paddle.to_tensor(v) for k, v in p.items()}
    return SamplingMetadata(**tensors)


def run_sampler(logits: np.ndarray, p: dict, seq_lens_output, num_draft_tokens: int = 0):
    """Runs Sampler on CPU; returns (tokens [R], probs [R, V], penalised logits [R, V]) as numpy."""
    meta = make_meta(seq_lens_output, num_draft_tokens)
    out = Sampler(debug_checks=True)(paddle.to_tensor(logits), meta, make_sampling(p))
    return out.sampled_token_ids.numpy(), out.probs.numpy(), out.logits.numpy()


def reference_index(seq_lens_output, rows: int):
    batch_ids, cu = output_index(seq_lens_output, rows)
    return batch_ids, cu, np.asarray(seq_lens_output, np.int32)


def run_reference(logits: np.ndarray, p: dict, seq_lens_output):
    batch_ids, cu, lens = reference_index(seq_lens_output, logits.shape[0])
    return ref_sampler(logits, p, batch_ids, cu, lens)


def kept_set(probs_row: np.ndarray) -> set[int]:
    return set(np.flatnonzero(probs_row > 0).tolist())
