"""Random inputs for speculate_get_token_penalty_multi_scores, shared by the CPU op tests
(tests/ops) and the CUDA tests (tests/gpu). Plain numpy only (the GPU machine has no Paddle).

A case is one engine step's sampling inputs built on reference.cases.step_batch.make_step_batch: O_b from its
definition (docs/spec.md §4.2), the output index tensors from reference.cases.step_batch.pack_output_index, and
per-slot histories with repeated ids, out-of-range ids and min-length rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reference.cases.step_batch import make_step_batch, pack_output_index

# Argument names in the op's order (FastDeploy era [B]), then our appended draft_tokens.
ARG_NAMES = (
    "pre_ids",
    "logits",
    "penalty_scores",
    "frequency_scores",
    "presence_scores",
    "temperatures",
    "bad_tokens",
    "bad_tokens_len",
    "cur_len",
    "min_len",
    "eos_token_id",
    "seq_lens_this_time",
    "batch_id_per_token_output",
    "cu_seqlens_q_output",
)


@dataclasses.dataclass
class PenaltyCase:
    pre_ids: np.ndarray  # [N, S] int64, pre_ids[b, 1..cur_len[b]] = history, -1 elsewhere
    logits: np.ndarray  # [rows, V] float32 (rows = T_out or the capacity N * D)
    penalty_scores: np.ndarray  # [N] float32
    frequency_scores: np.ndarray  # [N] float32
    presence_scores: np.ndarray  # [N] float32
    temperatures: np.ndarray  # [N] float32, > 0
    bad_tokens: np.ndarray  # [N, W] int64
    bad_tokens_len: np.ndarray  # [N] int64
    cur_len: np.ndarray  # [N] int64
    min_len: np.ndarray  # [N] int64
    eos_token_id: np.ndarray  # [E] int64
    seq_lens_this_time: np.ndarray  # [bsz] int32
    batch_id_per_token_output: np.ndarray  # [capacity] int32
    cu_seqlens_q_output: np.ndarray  # [bsz + 1] int32
    draft_tokens: np.ndarray | None  # [N, D] int64
    max_seq_len: int = 0

    @property
    def bsz(self) -> int:
        return int(self.seq_lens_this_time.shape[0])

    @property
    def seq_lens_output(self) -> np.ndarray:
        return np.diff(self.cu_seqlens_q_output)

    def args(self) -> list:
        """The op's inputs in order (max_seq_len and draft_tokens not included)."""
        return [getattr(self, name) for name in ARG_NAMES]

    def copy(self) -> "PenaltyCase":
        return dataclasses.replace(
            self, **{f.name: np.copy(getattr(self, f.name)) for f in dataclasses.fields(self)
                     if isinstance(getattr(self, f.name), np.ndarray)})


def seq_lens_output(lens: np.ndarray, encoder: np.ndarray) -> np.ndarray:
    """O_b (docs/spec.md §4.2): 0 idle, 1 for a one-token or prefill step, else L_b."""
    return np.where(lens == 0, 0, np.where((lens == 1) | (encoder != 0), 1, lens)).astype(np.int32)


def make_penalty_case(rng: np.random.Generator, bsz: int, kind: str = "mixed", vocab_size: int = 111,
                      num_draft: int = 3, max_model_len: int = 48, extra_slots: int = 0,
                      with_drafts: bool = True, pad_rows: bool = True) -> PenaltyCase:
    """A valid random step. Histories leave room for num_draft more ids (cur_len <= S - 1 - k),
    so the lossless test can append a row's drafts. extra_slots adds idle buffer rows (N > bsz);
    pad_rows gives logits the capacity bsz * (k + 1) rows, the ones past T_out with batch id -1."""
    V, S, D = vocab_size, max_model_len, num_draft + 1
    N = bsz + extra_slots
    sb = make_step_batch(rng, bsz, kind, max_model_len=S, num_draft=num_draft)
    out_lens = seq_lens_output(sb.seq_lens_this_time, sb.seq_lens_encoder)
    capacity = bsz * D
    batch_ids, cu = pack_output_index(out_lens, capacity)
    rows = capacity if pad_rows else int(out_lens.sum())

    # Histories draw from a small per-slot pool so ids repeat; a few are out of range.
    pool = rng.integers(0, V, size=(N, 6))
    cur_len = rng.integers(0, S - D, size=N).astype(np.int64)
    cur_len[rng.random(N) < 0.1] = 0
    cur_len[rng.random(N) < 0.05] = -1  # not counted at all
    pre_ids = np.full((N, S), -1, np.int64)
    for b in range(N):
        n = max(int(cur_len[b]), 0)
        hist = np.where(rng.random(n) < 0.6, pool[b, rng.integers(0, 6, size=n)], rng.integers(0, V, size=n))
        hist[rng.random(n) < 0.05] = V + 3
        hist[rng.random(n) < 0.03] = -7
        pre_ids[b, 1:n + 1] = hist
    drafts = np.full((N, D), -1, np.int64)
    drafts[:bsz] = sb.draft_tokens
    live = drafts >= 0
    drafts[live] = np.where(rng.random(live.sum()) < 0.5, pool[np.nonzero(live)[0], rng.integers(0, 6, size=live.sum())],
                            rng.integers(0, V, size=live.sum()))
    drafts[live & (rng.random(drafts.shape) < 0.05)] = V  # out of range: skipped

    def pick(lo, hi, special, p_special):
        x = rng.uniform(lo, hi, size=N).astype(np.float32)
        x[rng.random(N) < p_special] = special
        return x

    W = 4
    bad_tokens = rng.integers(0, V, size=(N, W)).astype(np.int64)
    bad_tokens[rng.random((N, W)) < 0.1] = -1
    bad_tokens[rng.random((N, W)) < 0.05] = V + 11
    bad_len = rng.integers(0, W + 1, size=N).astype(np.int64)
    bad_len[rng.random(N) < 0.05] = W + 2  # clamped to W
    min_len = (np.maximum(cur_len, 0) + rng.integers(-2, D + 2, size=N)).astype(np.int64)
    eos = np.array([rng.integers(0, V), rng.integers(0, V), V + 1], np.int64)
    logits = (rng.standard_normal((rows, V)) * 4).astype(np.float32)
    return PenaltyCase(
        pre_ids=pre_ids,
        logits=logits,
        penalty_scores=pick(1.0, 2.0, 1.0, 0.2),
        frequency_scores=pick(0.0, 1.0, 0.0, 0.2),
        presence_scores=pick(0.0, 1.0, 0.0, 0.2),
        temperatures=pick(0.3, 1.5, 1.0, 0.2),
        bad_tokens=bad_tokens,
        bad_tokens_len=bad_len,
        cur_len=cur_len,
        min_len=min_len,
        eos_token_id=eos,
        seq_lens_this_time=sb.seq_lens_this_time.astype(np.int32),
        batch_id_per_token_output=batch_ids,
        cu_seqlens_q_output=cu,
        draft_tokens=drafts if with_drafts else None,
        max_seq_len=S,
    )


def nonspeculative_case_for_draft_position(case: PenaltyCase, i: int) -> tuple[PenaltyCase, np.ndarray]:
    """What non-speculative decoding sees at draft position i if the drafts before it are accepted.

    Every slot with a row at local index i gets one row (O_b = 1), no draft_tokens, history
    pre_ids[b] extended by draft_tokens[b, 1..i] at positions cur_len[b] + 1 .. cur_len[b] + i,
    cur_len[b] + i, and the input logits of its speculative row i. Returns the case and, per
    row, the speculative row index it must equal.
    """
    out_lens = case.seq_lens_output
    slots = [b for b in range(case.bsz) if out_lens[b] > i and case.cur_len[b] >= 0]
    spec_rows = np.array([case.cu_seqlens_q_output[b] + i for b in slots], np.int64)
    ns = case.copy()
    ns.draft_tokens = None
    ns_lens = np.zeros(case.bsz, np.int32)
    ns_lens[slots] = 1
    ns.batch_id_per_token_output, ns.cu_seqlens_q_output = pack_output_index(ns_lens)
    ns.logits = case.logits[spec_rows].copy()
    for b in slots:
        c = int(case.cur_len[b])
        ns.pre_ids[b, c + 1:c + i + 1] = case.draft_tokens[b, 1:i + 1]
        ns.cur_len[b] = c + i
    return ns, spec_rows


# The literal case of the CPU and CUDA tests, worked by hand.
def three_slot_case() -> PenaltyCase:
    """Slot 0 decodes 3 rows (last accepted token 3, drafts 5, 3), slot 1 is idle, slot 2 is a
    prefill step with one row; logits rows are [-2 .. 5], one padding row (batch id -1)."""
    V = 8
    row = np.arange(V, dtype=np.float32) - 2
    batch_ids, cu = pack_output_index([3, 0, 1], capacity=9)
    return PenaltyCase(
        pre_ids=np.array([[-1, 3, 3, -1, -1, -1],
                          [-1, -1, -1, -1, -1, -1],
                          [5, 7, 4, -1, -1, -1]], np.int64),  # slot 2: position 0 and past cur_len ignored
        logits=np.tile(row, (5, 1)),
        penalty_scores=np.array([2.0, 1.0, 1.5], np.float32),
        frequency_scores=np.array([0.5, 0.0, 0.0], np.float32),
        presence_scores=np.array([0.25, 0.0, 1.0], np.float32),
        temperatures=np.array([0.5, 0.0, 2.0], np.float32),  # slot 1 has no row: 0 is not read
        bad_tokens=np.array([[6, -1], [1, 2], [0, 1]], np.int64),
        bad_tokens_len=np.array([1, 2, 5], np.int64),  # 5 > W = 2: clamped
        cur_len=np.array([2, 0, 1], np.int64),
        min_len=np.array([4, 0, 3], np.int64),
        eos_token_id=np.array([7, 8, -1], np.int64),  # 8 and -1 are outside [0, V)
        seq_lens_this_time=np.array([3, 0, 4], np.int32),
        batch_id_per_token_output=batch_ids,
        cu_seqlens_q_output=cu,
        draft_tokens=np.array([[3, 5, 3], [-1, -1, -1], [-1, -1, -1]], np.int64),
        max_seq_len=6,
    )


MASK = M = -1e10  # float32 mask value, exact in float32
# Slot 0, T = 0.5 (x2), alpha 2, beta 0.5, gamma 0.25; eos 7 masked on rows 0, 1 (cur_len + i < 4):
#   id 3 (logit 1) count 2: 1/2 - 2*0.5 - 0.25 = -0.75 -> -1.5; count 3: 0.5 - 1.5 - 0.25 -> -2.5
#   id 5 (logit 3) count 1: 3/2 - 0.5 - 0.25 = 0.75 -> 1.5; bad id 6 -> -1e10; eos -1e10 -> -2e10
# Slot 2, T = 2, alpha 1.5, gamma 1: eos 7 masked (1 + 0 < 3) and in the history once:
#   -1e10 * 1.5 - 1 -> /2 = -7.5e9; bad ids 0, 1 -> -1e10; ids 5 (position 0) and 4 (past cur_len) untouched.
ROW3 = [M, M, 0, 0.5, 1, 1.5, 2, -7.5e9]
PAD = [-2, -1, 0, 1, 2, 3, 4, 5]
EXPECTED_WITH_DRAFTS = np.array([
    [-4, -2, 0, -1.5, 4, 6, M, -2e10],
    [-4, -2, 0, -1.5, 4, 1.5, M, -2e10],  # + draft 5
    [-4, -2, 0, -2.5, 4, 1.5, M, 10],  # + drafts 5, 3; min length reached
    ROW3,
    PAD,
], np.float32)
EXPECTED_WITHOUT_DRAFTS = np.array([
    [-4, -2, 0, -1.5, 4, 6, M, -2e10],
    [-4, -2, 0, -1.5, 4, 6, M, -2e10],
    [-4, -2, 0, -1.5, 4, 6, M, 10],
    ROW3,
    PAD,
], np.float32)
