"""Randomized step batches shared by the CPU op tests (tests/ops), the CUDA tests (tests/gpu)
and benchmarks/gpu_pre_process.py.

Plain numpy only (the GPU machine has no Paddle). A batch is what pre_process sees for one
engine step: per-slot lengths and the padded token buffers the packed ids are read from.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output

BATCH_SIZES = (1, 3, 17, 256)
KINDS = ("mixed", "all_prefill", "all_decode", "stopped", "all_stopped", "len_one")
# Which token buffers get_padding_offset is given: both (speculative), input_ids only, none.
PADDING_OFFSET_MODES = ("drafts", "no_drafts", "index_only")


@dataclasses.dataclass
class StepBatch:
    input_ids: np.ndarray  # [bsz, S] int64
    draft_tokens: np.ndarray  # [bsz, D] int64, -1 past the slot's drafts
    seq_lens_this_time: np.ndarray  # [bsz] int32
    seq_lens_encoder: np.ndarray  # [bsz] int32, > 0 on prefill slots
    seq_lens_decoder: np.ndarray  # [bsz] int32
    stop_flags: np.ndarray  # [bsz] bool

    @property
    def bsz(self) -> int:
        return int(self.seq_lens_this_time.shape[0])

    @property
    def token_num(self) -> int:
        return int(self.seq_lens_this_time.sum())


def make_step_batch(rng: np.random.Generator, bsz: int, kind: str = "mixed", max_model_len: int = 64,
                    num_draft: int = 3) -> StepBatch:
    """A random but valid batch: prefill slots feed L_b <= S prompt tokens, decode slots L_b <= D."""
    S, D = max_model_len, num_draft + 1
    input_ids = rng.integers(0, 1000, size=(bsz, S), dtype=np.int64)
    draft_tokens = rng.integers(1000, 2000, size=(bsz, D), dtype=np.int64)
    if kind == "all_prefill":
        is_prefill = np.ones(bsz, dtype=bool)
    elif kind == "all_decode":
        is_prefill = np.zeros(bsz, dtype=bool)
    else:
        is_prefill = rng.random(bsz) < 0.4
    prefill_len = rng.integers(1, S + 1, size=bsz)
    decode_len = rng.integers(1, D + 1, size=bsz)
    lens = np.where(is_prefill, prefill_len, decode_len).astype(np.int32)
    stop = np.zeros(bsz, dtype=bool)
    if kind == "stopped":
        stop = rng.random(bsz) < 0.35
    elif kind == "all_stopped":
        stop[:] = True
    elif kind == "len_one":
        lens[:] = 1
    lens[stop] = 0
    encoder = np.where(is_prefill & ~stop, lens, 0).astype(np.int32)
    decoder = np.where(is_prefill, rng.integers(0, 2, size=bsz) * rng.integers(0, S, size=bsz),
                       rng.integers(1, 4 * S, size=bsz)).astype(np.int32)
    for b in range(bsz):  # drafts past L_b are the -1 sentinel, as the proposer leaves them
        if not is_prefill[b]:
            draft_tokens[b, lens[b]:] = -1
    return StepBatch(input_ids, draft_tokens, lens, encoder, decoder, stop)


def all_cases():
    """(bsz, kind, seed) for every batch size x kind: the shared randomized grid."""
    return [(bsz, kind, 1000 * i + j) for i, bsz in enumerate(BATCH_SIZES) for j, kind in enumerate(KINDS)]


def padding_offset_inputs(batch: StepBatch, mode: str, extra_rows: int = 0):
    """(input_ids, draft_tokens, seq_lens_encoder) for a PADDING_OFFSET_MODES mode. extra_rows
    appends garbage rows past bsz to the [N, *] buffers, as FastDeploy passes whole buffers."""
    def pad(a):
        return np.concatenate([a, np.full((extra_rows, a.shape[1]), 7777, a.dtype)])

    if mode == "index_only":
        return None, None, None
    if mode == "no_drafts":
        return pad(batch.input_ids), None, None
    return pad(batch.input_ids), pad(batch.draft_tokens), batch.seq_lens_encoder


def pack_output_index(seq_lens_output: np.ndarray, capacity: int | None = None):
    """Test-side output index tensors, built from their definition (docs/spec.md §7 items 7, 9):
    batch_id_per_token_output = slot ids repeated O_b times (-1 past T_out up to capacity),
    cu_seqlens_q_output = 1-D exclusive prefix sum of O_b with a leading zero.
    """
    lens = np.asarray(seq_lens_output, dtype=np.int64).reshape(-1)
    batch_ids = np.repeat(np.arange(lens.shape[0], dtype=np.int32), lens)
    if capacity is not None:
        batch_ids = np.concatenate([batch_ids, np.full(capacity - batch_ids.shape[0], -1, np.int32)])
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return batch_ids, cu


def seq_lens_output(seq_lens_this_time: np.ndarray, seq_lens_encoder: np.ndarray) -> np.ndarray:
    """O_b per docs/spec.md §4.2 (the reference of speculate_get_seq_lens_output): 0 for an idle slot, 1 for
    L_b == 1 or a prefill slot (only the last prompt token needs a logit), else L_b."""
    return ref_speculate_get_seq_lens_output(seq_lens_this_time, seq_lens_encoder, None)
