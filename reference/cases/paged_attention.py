"""paged_attention inputs shared by the CPU op tests (tests/ops), the CUDA tests (tests/gpu) and
benchmarks/cpu_paged_attention.py.

Plain numpy only (the GPU machine has no Paddle). A case is built from per-slot specs (the
slot's cached history and this step's q/k/v rows): blocks are handed out in random physical
order, the cache starts as garbage (NaN or large values) that must be overwritten exactly where
this step writes and never read or touched elsewhere, and the packed rows get padding past T.
The batch-invariance scenarios take a `run(case) -> (out, key_cache, value_cache)` callable, so
the same checks drive the Paddle op and the bare CUDA launcher.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reference.cases.step_batch import KINDS, make_step_batch

BATCH_SIZES = (1, 3, 17, 64)
# (num_heads, num_kv_heads): GQA 4:2 and 8:1 (multi-query).
HEAD_LAYOUTS = ((4, 2), (8, 1))
HEAD_DIMS = (32, 64, 128)
BLOCK_SIZES = (16, 64)
GARBAGE = ("nan", "large")
# The op's query count per decode slot: the last accepted token plus k = 3 drafts.
NUM_DRAFT = 3


@dataclasses.dataclass
class SlotSpec:
    """One slot of a step: what its cache already holds and what it feeds this step."""

    hist_k: np.ndarray  # [Dec, num_kv_heads, head_dim], positions 0 .. Dec-1 already cached
    hist_v: np.ndarray  # [Dec, num_kv_heads, head_dim]
    q: np.ndarray  # [L, num_heads, head_dim], this step's queries at positions Dec .. Dec+L-1
    k: np.ndarray  # [L, num_kv_heads, head_dim]
    v: np.ndarray  # [L, num_kv_heads, head_dim]

    @property
    def dec(self) -> int:
        return int(self.hist_k.shape[0])

    @property
    def length(self) -> int:
        return int(self.q.shape[0])


@dataclasses.dataclass
class AttentionCase:
    q: np.ndarray  # [T_cap, num_heads, head_dim]
    k: np.ndarray  # [T_cap, num_kv_heads, head_dim]
    v: np.ndarray  # [T_cap, num_kv_heads, head_dim]
    key_cache: np.ndarray  # [num_blocks, num_kv_heads, block_size, head_dim]
    value_cache: np.ndarray  # [num_blocks, num_kv_heads, block_size, head_dim]
    block_tables: np.ndarray  # [bsz + spare_rows, max_blocks_per_seq] int32, -1 = unallocated
    cu_seqlens_q: np.ndarray  # [bsz + 1] int32
    seq_lens_decoder: np.ndarray  # [bsz] int32
    seq_lens_this_time: np.ndarray  # [bsz] int32
    batch_id_per_token: np.ndarray  # [T_cap] int32, -1 past T
    block_size: int
    scale: float

    def args(self) -> tuple:
        """The op's inputs in its argument order (attributes excluded)."""
        return (self.q, self.k, self.v, self.key_cache, self.value_cache, self.block_tables,
                self.cu_seqlens_q, self.seq_lens_decoder, self.seq_lens_this_time, self.batch_id_per_token)

    def rows(self, b: int) -> slice:
        """Packed rows of slot b."""
        return slice(int(self.cu_seqlens_q[b]), int(self.cu_seqlens_q[b + 1]))


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """x (float32) rounded to `dtype` and returned as float32: the values a 16-bit op sees."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    assert dtype == "bfloat16", dtype
    u = np.ascontiguousarray(x).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)  # round to nearest even
    out = (bits << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def random_slot(rng, dec: int, length: int, num_heads: int, num_kv_heads: int, head_dim: int,
                dtype: str = "float32") -> SlotSpec:
    def normal(*shape):
        return round_to(rng.standard_normal(shape).astype(np.float32), dtype)

    return SlotSpec(hist_k=normal(dec, num_kv_heads, head_dim), hist_v=normal(dec, num_kv_heads, head_dim),
                    q=normal(length, num_heads, head_dim), k=normal(length, num_kv_heads, head_dim),
                    v=normal(length, num_kv_heads, head_dim))


def pack_case(rng, slots: list[SlotSpec], block_size: int, *, extra_blocks: int = 5, pad_rows: int = 3,
              spare_table_cols: int = 2, spare_table_rows: int = 0, garbage: str = "nan",
              scale: float | None = None, reserve: int = 0, dtype: str = "float32") -> AttentionCase:
    """Packs slot specs into one step. Each slot with L > 0 owns ceil((Dec + L + reserve) /
    block_size) blocks drawn in random physical order (stopped slots own none: their table row is
    -1); extra_blocks more blocks exist that no table names; table columns past a slot's need are
    -1. The cache is garbage except the slots' history; q/k/v rows past T are garbage too.
    Garbage is rounded to `dtype` like the slots' values, so it survives the op's cast unchanged."""
    bsz = len(slots)
    num_heads, head_dim = (slots[0].q.shape[1:] if slots else (1, 8))
    num_kv_heads = slots[0].k.shape[1] if slots else 1
    need = [-(-(s.dec + s.length + reserve) // block_size) if s.length > 0 else 0 for s in slots]
    num_blocks = sum(need) + extra_blocks
    max_blocks = max(need, default=0) + spare_table_cols
    fill = np.float32(np.nan) if garbage == "nan" else None

    def garbage_array(*shape):
        if fill is not None:
            return np.full(shape, fill, dtype=np.float32)
        return round_to((rng.standard_normal(shape) * 1e4).astype(np.float32), dtype)

    key_cache = garbage_array(num_blocks, num_kv_heads, block_size, head_dim)
    value_cache = garbage_array(num_blocks, num_kv_heads, block_size, head_dim)
    tables = np.full((bsz + spare_table_rows, max_blocks), -1, dtype=np.int32)
    order = rng.permutation(num_blocks).astype(np.int32)
    taken = 0
    for b, s in enumerate(slots):
        tables[b, :need[b]] = order[taken:taken + need[b]]
        taken += need[b]
        if s.length == 0:
            continue  # a stopped slot's history is never read; it stays garbage
        for p in range(s.dec):
            block = tables[b, p // block_size]
            key_cache[block, :, p % block_size] = s.hist_k[p]
            value_cache[block, :, p % block_size] = s.hist_v[p]
    if spare_table_rows:  # rows past bsz name blocks nobody may touch through them
        tables[bsz:] = rng.integers(0, num_blocks, size=(spare_table_rows, max_blocks))

    lens = np.array([s.length for s in slots], dtype=np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    token_num = int(cu[-1])
    token_cap = token_num + pad_rows
    q = garbage_array(token_cap, num_heads, head_dim)
    k = garbage_array(token_cap, num_kv_heads, head_dim)
    v = garbage_array(token_cap, num_kv_heads, head_dim)
    batch_ids = np.full(token_cap, -1, dtype=np.int32)
    for b, s in enumerate(slots):
        rows = slice(int(cu[b]), int(cu[b + 1]))
        q[rows], k[rows], v[rows] = s.q, s.k, s.v
        batch_ids[rows] = b
    dec = np.array([s.dec for s in slots], dtype=np.int32)
    return AttentionCase(q=q, k=k, v=v, key_cache=key_cache, value_cache=value_cache, block_tables=tables,
                         cu_seqlens_q=cu, seq_lens_decoder=dec, seq_lens_this_time=lens,
                         batch_id_per_token=batch_ids, block_size=block_size,
                         scale=float(1.0 / np.sqrt(head_dim)) if scale is None else float(scale))


def make_attention_case(seed: int, bsz: int, kind: str, *, block_size: int = 16, head_dim: int = 64,
                        heads: tuple[int, int] = (4, 2), garbage: str = "nan", dtype: str = "float32",
                        max_model_len: int = 48) -> AttentionCase:
    """A random step of `kind` (reference.cases.step_batch.KINDS): prefill slots feed up to max_model_len tokens,
    half of them as a later chunk (Dec > 0); decode slots feed 1 .. NUM_DRAFT + 1 tokens
    (speculative verify) on top of up to 4 * max_model_len cached tokens; stopped slots feed 0."""
    rng = np.random.default_rng(seed)
    batch = make_step_batch(rng, bsz, kind, max_model_len=max_model_len, num_draft=NUM_DRAFT)
    # Stopped slots keep a stale seq_lens_decoder (and own no blocks): the op must ignore both.
    slots = [random_slot(rng, int(batch.seq_lens_decoder[b]), int(batch.seq_lens_this_time[b]), *heads, head_dim,
                         dtype) for b in range(bsz)]
    return pack_case(rng, slots, block_size, garbage=garbage, spare_table_rows=int(rng.integers(0, 3)), dtype=dtype)


def grid_cases():
    """(seed, bsz, kind, block_size, head_dim, heads, garbage): every bsz x kind, rotating through
    the block sizes, head dims, GQA layouts and garbage kinds, plus every block size x head dim x
    layout at bsz 17 mixed."""
    cases = []
    for i, bsz in enumerate(BATCH_SIZES):
        for j, kind in enumerate(KINDS):
            n = i * len(KINDS) + j
            cases.append((100 * n + 7, bsz, kind, BLOCK_SIZES[n % 2], HEAD_DIMS[n % 3], HEAD_LAYOUTS[(n // 2) % 2],
                          GARBAGE[(n // 3) % 2]))
    n = 0
    for block_size in BLOCK_SIZES:
        for head_dim in HEAD_DIMS:
            for heads in HEAD_LAYOUTS:
                cases.append((5000 + n, 17, "mixed", block_size, head_dim, heads, GARBAGE[n % 2]))
                n += 1
    return cases


def case_id(c) -> str:
    seed, bsz, kind, block_size, head_dim, heads, garbage = c
    return f"bsz{bsz}-{kind}-bs{block_size}-d{head_dim}-h{heads[0]}kv{heads[1]}-{garbage}-s{seed}"


# --- literal three-slot step ------------------------------------------------------------------------
# block_size 2, head_dim 2, two query heads sharing one kv head, scale 1.
#   slot 0: decode, Dec 2 (history k = 0, v = [2, 4], [4, 8] in block 3), L 2: new k = 0,
#           v = [6, 12], [8, 16] at positions 2, 3 (block 0). q = 0: uniform weights, so query 0
#           averages positions 0..2 -> [4, 8] and query 1 positions 0..3 -> [5, 10] (causal: the
#           first query must not see the second token).
#   slot 1: stopped (L 0).
#   slot 2: prefill, Dec 0, L 2 into block 1: k = [1, 0], [0, 0]; v = [1, 1], [3, 5].
#           query 0 sees only itself -> [1, 1] on both heads; query 1 head 0 (q = 0) averages
#           -> [2, 3], head 1 (q = [100, 0]) puts all weight (e^-100 rounds away) on position 0 -> [1, 1].
#   One padding row (batch id -1) -> zeros. Blocks 2 and 4 are named by no table.
def literal_case() -> AttentionCase:
    key_cache = np.full((5, 1, 2, 2), np.nan, np.float32)
    value_cache = np.full((5, 1, 2, 2), np.nan, np.float32)
    key_cache[3, 0] = 0.0
    value_cache[3, 0] = [[2, 4], [4, 8]]
    q = np.zeros((5, 2, 2), np.float32)
    q[3, 1] = [100, 0]
    q[4] = 7.0  # padding row
    k = np.zeros((5, 1, 2), np.float32)
    k[2, 0] = [1, 0]
    k[4] = 7.0
    v = np.stack([[[6, 12]], [[8, 16]], [[1, 1]], [[3, 5]], [[7, 7]]]).astype(np.float32)
    return AttentionCase(
        q=q, k=k, v=v, key_cache=key_cache, value_cache=value_cache,
        block_tables=np.array([[3, 0, -1], [-1, -1, -1], [1, -1, -1]], np.int32),
        cu_seqlens_q=np.array([0, 2, 2, 4], np.int32), seq_lens_decoder=np.array([2, 5, 0], np.int32),
        seq_lens_this_time=np.array([2, 0, 2], np.int32), batch_id_per_token=np.array([0, 0, 2, 2, -1], np.int32),
        block_size=2, scale=1.0)


LITERAL_OUT = np.array([[[4, 8], [4, 8]], [[5, 10], [5, 10]], [[1, 1], [1, 1]], [[2, 3], [1, 1]], [[0, 0], [0, 0]]],
                       np.float32)


def literal_caches_after(case: AttentionCase):
    """The literal case's caches after the step, written out by hand."""
    key_cache, value_cache = case.key_cache.copy(), case.value_cache.copy()
    key_cache[0, 0] = [[0, 0], [0, 0]]  # slot 0 positions 2, 3
    value_cache[0, 0] = [[6, 12], [8, 16]]
    key_cache[1, 0] = [[1, 0], [0, 0]]  # slot 2 positions 0, 1
    value_cache[1, 0] = [[1, 1], [3, 5]]
    return key_cache, value_cache


# --- batch invariance ---------------------------------------------------------------------------------

def _others(rng, n: int, heads, head_dim, dtype) -> list[SlotSpec]:
    """n random neighbours: prefill (fresh or chunked), decode with 1..4 queries, stopped."""
    slots = []
    for _ in range(n):
        kind = rng.integers(0, 4)
        if kind == 0:
            dec, length = int(rng.integers(0, 2) * rng.integers(1, 40)), int(rng.integers(1, 40))
        elif kind == 3:
            dec, length = 0, 0
        else:
            dec, length = int(rng.integers(1, 150)), int(rng.integers(1, NUM_DRAFT + 2))
        slots.append(random_slot(rng, dec, length, *heads, head_dim, dtype))
    return slots


def _sub(slot: SlotSpec, start: int, stop: int) -> SlotSpec:
    """The slot after its first `start` new tokens were cached, feeding tokens start..stop-1."""
    hist_k = np.concatenate([slot.hist_k, slot.k[:start]])
    hist_v = np.concatenate([slot.hist_v, slot.v[:start]])
    return SlotSpec(hist_k, hist_v, slot.q[start:stop], slot.k[start:stop], slot.v[start:stop])


def invariance_runs(run, seed: int, *, block_size: int, head_dim: int, heads, dtype: str = "float32",
                    dec: int = 37, length: int = NUM_DRAFT + 1, neighbours: int = 17):
    """Computes one slot's `length` queries (positions dec .. dec+length-1) in several ways and
    returns {name: out rows [length, num_heads, head_dim]}; a batch-invariant op gives identical bits:
      alone          the slot alone, all queries in one step (a verify step, or one prefill chunk)
      one_by_one     `length` steps of one query each, the cache carried over from the op's own writes
      in_batch       the same step at slot index 9 among `neighbours` random slots, T_cap padded by 11
      in_batch_first / in_batch_last   ... at slot index 0 / last, other neighbours, other blocks
      one_by_one_in_batch   one query per step, each step among different random neighbours
      split          two steps (a chunked prefill split at length // 3) among random neighbours
    """
    rng = np.random.default_rng(seed)
    target = random_slot(rng, dec, length, *heads, head_dim, dtype)
    results = {}

    def one_step(target_spec, position, n_neighbours, pad_rows=3, garbage="nan"):
        slots = _others(rng, n_neighbours, heads, head_dim, dtype)
        slots.insert(position, target_spec)
        case = pack_case(rng, slots, block_size, pad_rows=pad_rows, garbage=garbage,
                         extra_blocks=int(rng.integers(0, 9)), dtype=dtype)
        out, _, _ = run(case)
        return np.asarray(out)[case.rows(position)]

    results["alone"] = one_step(target, 0, 0, pad_rows=0)
    results["in_batch"] = one_step(target, 9 if neighbours >= 9 else neighbours, neighbours, pad_rows=11)
    results["in_batch_first"] = one_step(target, 0, neighbours, garbage="large")
    results["in_batch_last"] = one_step(target, neighbours, neighbours)
    results["one_by_one_in_batch"] = np.concatenate(
        [one_step(_sub(target, i, i + 1), int(rng.integers(0, neighbours + 1)), neighbours) for i in range(length)])
    cut = max(1, length // 3)
    results["split"] = np.concatenate([one_step(_sub(target, 0, cut), 4, 6), one_step(_sub(target, cut, length), 2, 6)])

    # One query per step on the op's own cache: each step writes position dec + i, the next reads it.
    case = pack_case(rng, [_sub(target, 0, 1)], block_size, pad_rows=0, reserve=length - 1)
    rows = []
    for i in range(length):
        out, key_cache, value_cache = run(case)
        rows.append(np.asarray(out)[0:1])
        if i + 1 < length:
            nxt = _sub(target, i + 1, i + 2)
            case = dataclasses.replace(case, q=nxt.q, k=nxt.k, v=nxt.v, key_cache=np.asarray(key_cache),
                                       value_cache=np.asarray(value_cache),
                                       seq_lens_decoder=np.array([dec + i + 1], np.int32))
    results["one_by_one"] = np.concatenate(rows)
    return results
