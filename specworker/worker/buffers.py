"""The share_inputs buffer table: every buffer of the target batch declared once (name, symbolic dims,
dtype, fill, kind, host mirror, doc). It owns no tensors; input_batch.py allocates and moves them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from specworker.config import WorkerConfig

__all__ = ["BufferKind", "BufferSpec", "DIM_NAMES", "DTYPES", "MAX_BAD_WORDS", "MAX_STOP_TOKENS", "MIRROR_SUFFIX",
           "NO_BLOCK", "NO_SLOT", "NO_TOKEN", "TARGET_BUFFERS", "buffer_dims", "check_table"]

NO_TOKEN = -1  # "no token" in token-id buffers (docs/spec.md §1)
NO_SLOT = -1  # "no slot" in batch-id buffers
NO_BLOCK = -1  # unused block_tables entry
MAX_BAD_WORDS = 64  # W, bad-word ids per request (FastDeploy sizes bad_tokens [N, V]; a cap costs N * W, not N * V)
MAX_STOP_TOKENS = 8  # E, capacity of eos_token_id; unused entries are NO_TOKEN, which no op matches
MIRROR_SUFFIX = "_cpu"  # x_cpu is the host mirror of x (STYLE §2.4)
DTYPES = ("bool", "int32", "int64", "float32")

# Symbolic dims and what they resolve to (buffer_dims). A literal int is allowed only as the [1] of a
# one-element GLOBAL buffer, the shape the ops take for not_need_stop / stop_nums.
DIM_NAMES = (
    "max_num_seqs",  # N, rows of every PER_SLOT buffer
    "max_num_seqs_plus_1",  # N + 1, every cu_* prefix sum
    "max_model_len",  # S
    "num_speculative_tokens",  # k
    "max_draft_token_num",  # D = k + 1 (FastDeploy's attribute of this name is k; ours counts slot 0 too)
    "max_blocks_per_seq",  # ceil((S + k + 1) / block_size), width of block_tables (WorkerConfig.max_blocks_per_seq)
    "max_bad_words",  # W = MAX_BAD_WORDS
    "max_stop_tokens",  # E = MAX_STOP_TOKENS
    "max_num_batched_tokens",  # capacity of the packed input side (token_num_cpu)
    "max_output_token_num",  # N * D, capacity of the output side
    "hidden_size",  # H of the model (the proposer's per-slot hidden rows)
    "vocab_size",  # V of the model (the proposer's draft distributions)
)


class BufferKind(enum.Enum):
    """How a buffer's rows relate to slots (docs/spec.md §3)."""

    PER_SLOT = "per_slot"  # row b belongs to slot b: swapped, condensed and cleared with the slot
    PER_STEP = "per_step"  # rebuilt by pre_process every step; never swapped (prefix sums, per-token ids)
    GLOBAL = "global"  # not per slot (eos ids, stop counters)


def _fail(name: str, field: str, value, allowed: str) -> ValueError:
    return ValueError(f"BufferSpec {name!r}: {field} = {value!r}; allowed: {allowed}")


@dataclasses.dataclass(frozen=True, slots=True)
class BufferSpec:
    """One share_inputs entry. `dims` and a str `fill` are names from DIM_NAMES, resolved by buffer_dims.

    A literal trailing 1 is refused: a per-slot scalar is [max_num_seqs], never [max_num_seqs, 1]
    (docs/spec.md §1). A symbolic width may still resolve to 1 (draft_tokens [N, D] with k = 0): that is a
    row of D tokens, not a disguised scalar.
    """

    name: str
    dims: tuple[int | str, ...]
    dtype: str
    fill: bool | int | float | str
    kind: BufferKind
    cpu_mirror: bool
    doc: str

    def __post_init__(self) -> None:
        name = self.name
        if not name.isidentifier() or name.endswith(MIRROR_SUFFIX):
            raise _fail(name, "name", name, f"an identifier not ending in {MIRROR_SUFFIX!r} (reserved for mirrors)")
        if not isinstance(self.kind, BufferKind):
            raise _fail(name, "kind", self.kind, ", ".join(k.name for k in BufferKind))
        if self.dtype not in DTYPES:
            raise _fail(name, "dtype", self.dtype, ", ".join(DTYPES))
        if not self.doc or "\n" in self.doc:
            raise _fail(name, "doc", self.doc, "one non-empty line")
        self._check_dims()
        self._check_fill()

    def _check_dims(self) -> None:
        name, dims = self.name, self.dims
        if not isinstance(dims, tuple) or not dims:
            raise _fail(name, "dims", dims, "a non-empty tuple of names from DIM_NAMES")
        for d in dims:
            if isinstance(d, str) and d not in DIM_NAMES:
                raise _fail(name, "dims", dims, f"names from DIM_NAMES ({', '.join(DIM_NAMES)}); {d!r} is unknown")
            if not isinstance(d, str) and (isinstance(d, bool) or not isinstance(d, int) or d < 1):
                raise _fail(name, "dims", dims, "dim names, or a positive int")
        if dims[-1] == 1 and not (len(dims) == 1 and self.kind is BufferKind.GLOBAL):
            raise _fail(name, "dims", dims, "no trailing dimension of 1: a per-slot scalar is ('max_num_seqs',), "
                        "not ('max_num_seqs', 1) (docs/spec.md §1); only a one-element GLOBAL buffer may be (1,)")
        if self.kind is BufferKind.PER_SLOT and dims[0] != "max_num_seqs":
            raise _fail(name, "dims", dims, "a PER_SLOT buffer starting with 'max_num_seqs' (row b = slot b)")

    def _check_fill(self) -> None:
        fill, dtype = self.fill, self.dtype
        if isinstance(fill, str):
            ok = fill in DIM_NAMES and dtype in ("int32", "int64")
        elif dtype == "bool":
            ok = isinstance(fill, bool)
        elif dtype == "float32":
            ok = isinstance(fill, (int, float)) and not isinstance(fill, bool)
        else:
            ok = isinstance(fill, int) and not isinstance(fill, bool)
        if not ok:
            raise _fail(self.name, "fill", fill, f"a {dtype} value (an integer buffer may name a dim)")

    @property
    def mirror_name(self) -> str | None:
        """share_inputs key of the host mirror, or None."""
        return self.name + MIRROR_SUFFIX if self.cpu_mirror else None

    def shape(self, dims: Mapping[str, int]) -> list[int]:
        """The concrete shape under `dims` (from buffer_dims)."""
        return [d if isinstance(d, int) else dims[d] for d in self.dims]

    def fill_value(self, dims: Mapping[str, int]) -> bool | int | float:
        """The concrete fill under `dims`."""
        return dims[self.fill] if isinstance(self.fill, str) else self.fill


def buffer_dims(config: WorkerConfig, *, hidden_size: int | None = None, vocab_size: int | None = None
                ) -> dict[str, int]:
    """Every name of DIM_NAMES resolved from the config (capacities only, nothing runtime-derived).
    hidden_size / vocab_size default to config.model's (0 when a checkpoint's config.json holds them and
    the caller passes none: only tables that use them need them)."""
    sched, spec = config.scheduler, config.speculative_config
    n = sched.max_num_seqs
    dims = {
        "max_num_seqs": n,
        "max_num_seqs_plus_1": n + 1,
        "max_model_len": sched.max_model_len,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "max_draft_token_num": spec.max_draft_token_num,
        # Block table width covers max_model_len plus the verify / draft lookahead of one step: a
        # running slot writes K/V up to k positions past its last token (rejected drafts included).
        "max_blocks_per_seq": config.max_blocks_per_seq,
        "max_bad_words": MAX_BAD_WORDS,
        "max_stop_tokens": MAX_STOP_TOKENS,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "max_output_token_num": config.max_output_token_num,
        "hidden_size": hidden_size if hidden_size is not None else config.model.hidden_size or 0,
        "vocab_size": vocab_size if vocab_size is not None else config.model.vocab_size or 0,
    }
    assert tuple(dims) == DIM_NAMES, f"buffer_dims resolves {tuple(dims)}, DIM_NAMES is {DIM_NAMES}"
    return dims


def check_table(table: tuple[BufferSpec, ...]) -> None:
    """Names (and mirror names) unique across the table; raises ValueError naming the duplicate."""
    seen: set[str] = set()
    for spec in table:
        for key in (spec.name, spec.mirror_name):
            if key is None:
                continue
            if key in seen:
                raise ValueError(f"buffer table declares {key!r} twice")
            seen.add(key)


_K = BufferKind
N, S, D = "max_num_seqs", "max_model_len", "max_draft_token_num"


def _slot(name, dims, dtype, fill, doc, mirror=False) -> BufferSpec:
    return BufferSpec(name, dims, dtype, fill, _K.PER_SLOT, mirror, doc)


def _step(name, dims, dtype, fill, doc) -> BufferSpec:
    return BufferSpec(name, dims, dtype, fill, _K.PER_STEP, False, doc)


def _global(name, dims, dtype, fill, doc, mirror=False) -> BufferSpec:
    return BufferSpec(name, dims, dtype, fill, _K.GLOBAL, mirror, doc)


# FastDeploy's share_inputs names (docs/spec.md §8.17), shapes per docs/spec.md §1 ([N], never [N, 1]).
TARGET_BUFFERS: tuple[BufferSpec, ...] = (
    # request and sequence state
    _slot("input_ids", (N, S), "int64", NO_TOKEN, "prompt (or prefill chunk) tokens; prefill slots feed [b, :L_b]"),
    _slot("prompt_ids", (N, S), "int64", NO_TOKEN, "whole prompt (input_ids holds the current chunk); ngram history"),
    _slot("prompt_lens", (N,), "int64", 0, "prompt length P_b", mirror=True),
    _slot("pre_ids", (N, S), "int64", NO_TOKEN, "generated history, pre_ids[b, step_idx[b]] the last; -1 after"),
    _slot("seq_lens_this_time", (N,), "int32", 0, "L_b, tokens fed this step (0: idle)", mirror=True),
    _slot("seq_lens_encoder", (N,), "int32", 0, "E_b, prompt tokens this step (> 0: prefill)", mirror=True),
    _slot("seq_lens_decoder", (N,), "int32", 0, "Dec_b, tokens already in the KV cache", mirror=True),
    _slot("step_idx", (N,), "int64", 0, "tokens generated so far", mirror=True),
    _slot("stop_flags", (N,), "bool", True, "slot finished or empty", mirror=True),
    _slot("is_block_step", (N,), "bool", False, "slot paused (preempted, blocks released)", mirror=True),
    _slot("min_dec_len", (N,), "int64", 0, "eos masked until this many tokens are generated"),
    _slot("max_dec_len", (N,), "int64", 0, "the slot stops at this many generated tokens"),
    _slot("block_tables", (N, "max_blocks_per_seq"), "int32", NO_BLOCK, "KV block ids of the slot, -1 unused"),
    # sampling parameters
    _slot("temperature", (N,), "float32", 1.0, "sampling temperature (0: greedy)"),
    _slot("top_p", (N,), "float32", 1.0, "nucleus mass"),
    _slot("top_k", (N,), "int64", 0, "top-k cut (0: off)"),
    _slot("min_p", (N,), "float32", 0.0, "min-p cut relative to the top probability (0: off)"),
    _slot("penalty_score", (N,), "float32", 1.0, "repetition penalty alpha (1: off)"),
    _slot("frequency_score", (N,), "float32", 0.0, "frequency penalty beta"),
    _slot("presence_score", (N,), "float32", 0.0, "presence penalty gamma"),
    _slot("infer_seed", (N,), "int64", 0, "per-request seed of the counter RNG"),
    _slot("bad_tokens", (N, "max_bad_words"), "int64", NO_TOKEN, "banned token ids, -1 unused"),
    _slot("bad_tokens_len", (N,), "int64", 0, "valid entries of bad_tokens[b]"),
    # speculative decoding
    _slot("draft_tokens", (N, D), "int64", NO_TOKEN, "next decode query: [b, 0] last accepted token, then drafts"),
    _slot("accept_tokens", (N, D), "int64", NO_TOKEN, "tokens emitted by verify this step", mirror=True),
    _slot("accept_num", (N,), "int32", 0, "entries of accept_tokens[b] emitted this step", mirror=True),
    _slot("actual_draft_token_nums", (N,), "int32", "num_speculative_tokens", "draft budget of the slot (<= k)"),
    _slot("mask_rollback", (N,), "int32", 0, "rejected draft positions to roll back in the KV cache"),
    # reasoning models
    _slot("reasoning_status", (N,), "int32", 0, "phase of the </think> status machine (docs/spec.md §8.7)"),
    _slot("enable_thinking", (N,), "bool", False, "the request reasons before answering"),
    # packed index tensors, rebuilt by pre_process
    _step("ids_remove_padding", ("max_num_batched_tokens",), "int64", NO_TOKEN, "packed input tokens, -1 past T"),
    _step("batch_id_per_token", ("max_num_batched_tokens",), "int32", NO_SLOT, "slot of each packed token"),
    _step("cu_seqlens_q", ("max_num_seqs_plus_1",), "int32", 0, "exclusive prefix sum of L_b"),
    _step("cu_seqlens_k", ("max_num_seqs_plus_1",), "int32", 0, "equals cu_seqlens_q"),
    _step("seq_lens_output", (N,), "int32", 0, "O_b, logit rows of slot b this step"),
    _step("batch_id_per_token_output", ("max_output_token_num",), "int32", NO_SLOT, "slot of each logit row"),
    _step("cu_seqlens_q_output", ("max_num_seqs_plus_1",), "int32", 0, "exclusive prefix sum of O_b"),
    # not per slot
    _global("not_need_stop", (1,), "bool", False, "some slot still runs", mirror=True),
    _global("stop_nums", (1,), "int64", "max_num_seqs", "stopped-slot count at which not_need_stop clears"),
    _global("eos_token_id", ("max_stop_tokens",), "int64", NO_TOKEN, "end-of-sequence ids, -1 unused"),
)
check_table(TARGET_BUFFERS)
