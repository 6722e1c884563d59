"""Slot buffers: the share_inputs buffer table (every buffer of the target batch declared once: name, symbolic
dims, dtype, fill, kind, host mirror, doc) and SlotBuffers, which allocates a table's tensors and moves their
rows between steps. A batch that must stay row-aligned with another one (the MTP draft batch, a proposer's
per-slot host state) follows it: every insert, clear, swap and move of the leader reaches its followers through
one path, and followers share the leader's layout_version.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import paddle

from specworker.config import MAX_BAD_WORDS, MAX_STOP_TOKENS, WorkerConfig
from specworker.slot_request import SlotRequest

__all__ = ["BufferKind", "BufferSpec", "DIM_NAMES", "DTYPES", "MIRROR_SUFFIX", "NO_BLOCK", "NO_SLOT", "NO_TOKEN",
           "SlotBuffers", "SlotFollower", "TARGET_BUFFERS", "buffer_dims", "check_table"]

NO_TOKEN = -1  # "no token" in token-id buffers (docs/spec.md §1)
NO_SLOT = -1  # "no slot" in batch-id buffers
NO_BLOCK = -1  # unused block_tables entry
MIRROR_SUFFIX = "_cpu"  # x_cpu is the host mirror of x (docs/spec.md §3)
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


class SlotFollower(Protocol):
    """Per-slot state kept row-aligned with a leading SlotBuffers (SlotBuffers.follow). Each hook runs after
    the leader applied the move to its own rows, between steps; none may read a device value."""

    def on_insert(self, slot: int, request: SlotRequest) -> None:
        """`request` entered the empty `slot` (its prefill is next)."""

    def on_clear(self, slot: int) -> None:
        """The request in `slot` left; the slot is empty."""

    def on_swap(self, i: int, j: int) -> None:
        """Slots i and j exchanged their requests."""

    def on_move(self, src: int, dst: int) -> None:
        """The request in `src` moved to the empty slot `dst`; `src` is empty."""


class SlotBuffers:
    """The tensors of a buffer table on one place (`share_inputs`: every table entry plus `x_cpu` host mirrors)
    and their row moves. Row moves loop over the table and name no buffer; a row a slot leaves goes back
    to its fills.

    `layout_version` (a Python int) grows on every row move (even one that moves nothing), so a ForwardMeta
    built before it is rejected by `ForwardMeta.require_current`. A SlotBuffers that follows another one
    (`leader.follow(self)`) moves its rows through the SlotFollower hooks and reports the leader's version.
    """

    def __init__(self, table: Sequence[BufferSpec], dims: Mapping[str, int], place):
        """Allocates every buffer of `table` on `place` (mirrors on the host), shaped by `dims` (buffer_dims)."""
        self.place = place
        self.table = tuple(table)
        check_table(self.table)
        self.dims = dict(dims)
        self.num_slots = self.dims["max_num_seqs"]
        self.share_inputs: dict[str, paddle.Tensor] = {}
        for spec in self.table:
            shape, fill = spec.shape(self.dims), spec.fill_value(self.dims)
            self.share_inputs[spec.name] = paddle.full(shape, fill, dtype=spec.dtype, device=place)
            if spec.cpu_mirror:
                # TODO(inputbatch): pinned host memory once the step's async D2H copy lands.
                self.share_inputs[spec.mirror_name] = paddle.full(shape, fill, dtype=spec.dtype,
                                                                  device=paddle.CPUPlace())
        self._specs = {spec.name: spec for spec in self.table}
        self._slot_specs = tuple(s for s in self.table if s.kind is BufferKind.PER_SLOT)
        self._followers: list[SlotFollower] = []
        self._leader: SlotBuffers | None = None
        self._layout_version = 0

    # ---- followers ----
    def follow(self, follower: SlotFollower) -> None:
        """`follower` receives every later insert / clear / swap / move of this batch's slots."""
        if follower is self:
            raise ValueError("follow: a batch cannot follow itself")
        if any(f is follower for f in self._followers):
            raise ValueError(f"follow: this {type(follower).__name__} already follows this batch")
        self._followers.append(follower)
        if isinstance(follower, SlotBuffers):
            follower._leader = self

    @property
    def layout_version(self) -> int:
        return self._leader.layout_version if self._leader is not None else self._layout_version

    def _moved(self, hook: str, *args) -> None:
        """After a row move of this batch: the same move for every follower, then a version bump."""
        self._tell(hook, *args)
        self._bump()

    def _tell(self, hook: str, *args) -> None:
        for follower in self._followers:
            getattr(follower, hook)(*args)

    def _bump(self) -> None:
        self._layout_version += 1

    # SlotFollower: a following SlotBuffers applies the leader's moves to its own rows.
    def on_insert(self, slot: int, request: SlotRequest) -> None:
        self._reset_row(slot)
        self._moved("on_insert", slot, request)

    def on_clear(self, slot: int) -> None:
        self._reset_row(slot)
        self._moved("on_clear", slot)

    def on_swap(self, i: int, j: int) -> None:
        self._swap_rows(i, j)
        self._moved("on_swap", i, j)

    def on_move(self, src: int, dst: int) -> None:
        self._move_row(src, dst)
        self._moved("on_move", src, dst)

    # ---- checks and host writes ----
    def check(self) -> None:
        """share_inputs holds exactly the table's buffers and mirrors, each with its declared shape and
        dtype (host metadata only; no device read). Raises ValueError naming the offending key."""
        expected = {}
        for spec in self.table:
            expected[spec.name] = spec
            if spec.cpu_mirror:
                expected[spec.mirror_name] = spec
        undeclared = sorted(set(self.share_inputs) - set(expected))
        missing = sorted(set(expected) - set(self.share_inputs))
        if undeclared or missing:
            raise ValueError(f"share_inputs does not match the buffer table: undeclared {undeclared}, "
                             f"missing {missing}; declare every buffer in model_executor/slot_buffers.py")
        for key, spec in expected.items():
            t, shape = self.share_inputs[key], spec.shape(self.dims)
            if list(t.shape) != shape or t.dtype != getattr(paddle, spec.dtype):
                raise ValueError(f"share_inputs[{key!r}] is {list(t.shape)} {t.dtype}, "
                                 f"declared {shape} {spec.dtype}")

    def _check_slot(self, slot, what: str) -> None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.num_slots:
            raise ValueError(f"{what}: slot = {slot!r}; allowed: 0..max_num_seqs - 1 = {self.num_slots - 1}")

    def _write(self, name: str, index, value) -> None:
        """share_inputs[name][index] = value, and the same in its host mirror."""
        self.share_inputs[name][index] = value
        if self._specs[name].cpu_mirror:
            self.share_inputs[self._specs[name].mirror_name][index] = value

    def write_row(self, slot: int, values: dict) -> None:
        """Host values -> slot's row of PER_SLOT buffers (device and mirror); uploads only, no read.

        Args:
            slot: 0..max_num_seqs - 1.
            values: buffer name -> a scalar, or a 1-D sequence written to the front of the row.
        Raises:
            ValueError for an unknown or non-PER_SLOT buffer name, or a row prefix longer than the row.
        """
        self._check_slot(slot, "write_row")
        for name, value in values.items():
            spec = self._specs.get(name)
            if spec is None or spec.kind is not BufferKind.PER_SLOT:
                raise ValueError(f"write_row(slot={slot}): {name!r} is not a PER_SLOT buffer; allowed: "
                                 + ", ".join(s.name for s in self._slot_specs))
            if np.ndim(value) == 0:
                self._write(name, slot, value)
                continue
            row = np.asarray(value, dtype=spec.dtype)
            width = spec.shape(self.dims)[1] if len(spec.dims) > 1 else 0
            if row.ndim != 1 or len(row) > width:
                raise ValueError(f"write_row(slot={slot}): {name} gets {row.shape} values; allowed: a 1-D "
                                 f"prefix of at most {width}")
            if len(row):
                self._write(name, (slot, slice(0, len(row))), row)

    # ---- the row primitives (no bump, no followers: callers do both through _moved) ----
    def _slot_tensors(self):
        """Every PER_SLOT tensor (device buffers, then their host mirrors) with its spec."""
        for spec in self._slot_specs:
            yield spec, self.share_inputs[spec.name]
            if spec.cpu_mirror:
                yield spec, self.share_inputs[spec.mirror_name]

    def _reset_row(self, slot: int) -> None:
        for spec, t in self._slot_tensors():
            t[slot] = spec.fill_value(self.dims)

    def _move_row(self, src: int, dst: int) -> None:
        """Row src -> dst in every PER_SLOT tensor, then src back to its fills (it becomes a hole)."""
        for _, t in self._slot_tensors():
            t[dst] = t[src]
        self._reset_row(src)

    def _swap_rows(self, i: int, j: int) -> None:
        # t[i] is a view: tuple-swapping views would leave both rows equal, so row i goes through a copy.
        for _, t in self._slot_tensors():
            saved = t[i].clone()
            t[i] = t[j]
            t[j] = saved


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
    _slot("policy_draft_len", (N,), "int32", "num_speculative_tokens",
          "drafts the speculation policy allows the slot next step (0..k)", mirror=True),
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
