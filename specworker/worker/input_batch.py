"""InputBatch: the target's SlotBuffers with the request bookkeeping, and the slot moves between steps
(insert, clear, swap, condense, prefill/decode split), which its followers follow. Computes nothing per
step; reads no device value.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from specworker.config import MAX_SEED, WorkerConfig
from specworker.model_executor.slot_buffers import TARGET_BUFFERS, BufferSpec, SlotBuffers, buffer_dims
from specworker.slot_request import SlotRequest

__all__ = ["InputBatch", "SlotRequest"]

logger = logging.getLogger(__name__)


class InputBatch(SlotBuffers):
    """The target batch: SlotBuffers over TARGET_BUFFERS (`share_inputs`, every entry plus `x_cpu` host
    mirrors) and the host bookkeeping of which request occupies which slot.

    Every insert, clear, swap, condense and reorder (even one that moves nothing) bumps `layout_version`
    and reaches the followers (the proposer's per-slot state: SlotBuffers.follow) in the same call. Methods
    run between steps and never read a device value: host decisions come from the bookkeeping and the
    `x_cpu` mirrors.
    """

    def __init__(self, config: WorkerConfig, place, *, vocab_size: int | None = None,
                 table: Sequence[BufferSpec] = TARGET_BUFFERS, hidden_size: int | None = None):
        """Allocates every buffer of `table` on `place` (mirrors on the host).

        Args:
            config: sizes the buffers (buffer_dims).
            place: paddle place of the device buffers (paddle.CPUPlace() or paddle.CUDAPlace(i)).
            vocab_size: V for token-id checks; default config.model.vocab_size (None for a checkpoint,
                whose config.json defines it, so the caller must pass it).
            table: the buffer declarations (TARGET_BUFFERS; tests extend it).
            hidden_size: H for tables with hidden_size dims (default config.model.hidden_size).
        """
        self.config = config
        self.vocab_size = config.model.vocab_size if vocab_size is None else vocab_size
        if not isinstance(self.vocab_size, int) or self.vocab_size < 1:
            raise ValueError(f"InputBatch vocab_size = {self.vocab_size!r}; allowed: an int >= 1 (pass it when "
                             "model.path is a checkpoint, whose config.json defines it)")
        super().__init__(table, buffer_dims(config, hidden_size=hidden_size, vocab_size=self.vocab_size), place)
        self.req_ids: list[str | None] = [None] * self.num_slots
        self.req_id_to_slot: dict[str, int] = {}
        self._num_unseeded = 0
        logger.debug("InputBatch: %d buffers + %d host mirrors for %d slots on %s", len(self.table),
                     sum(s.cpu_mirror for s in self.table), self.num_slots, place)

    @property
    def occupied_slots(self) -> list[int]:
        """Slots holding a request, ascending."""
        return [slot for slot, req_id in enumerate(self.req_ids) if req_id is not None]

    def slot_of(self, req_id: str) -> int:
        """The slot currently holding req_id (moves with swap / condense / reorder)."""
        if req_id not in self.req_id_to_slot:
            raise KeyError(f"request {req_id!r} is not in the batch")
        return self.req_id_to_slot[req_id]

    def insert(self, slot: int, request: SlotRequest) -> None:
        """Writes `request` into the empty `slot`, ready for its prefill (E_b = L_b = prompt length).

        Every PER_SLOT row is first reset to its fill, then the request's fields are written (device and
        host mirror). A chunking scheduler may lower seq_lens_this_time afterwards.

        Args:
            slot: an empty slot, 0..max_num_seqs - 1.
            request: prompt ids in 0..V - 1, 1..S - 1 of them; prompt + max_tokens <= S; at most
                max_bad_words bad words and max_blocks_per_seq block ids in 0..num_blocks - 1. An
                unseeded request gets config.seed + (number of unseeded inserts so far).
        Raises:
            ValueError naming the field, the value and what is allowed; nothing is written then.
        """
        self._check_slot(slot, "insert")
        self._check_request(slot, request)
        if request.seed is None:
            seed = (self.config.seed + self._num_unseeded) % (MAX_SEED + 1)
            self._num_unseeded += 1
        else:
            seed = request.seed
        num_prompt = len(request.prompt_token_ids)
        # max_dec_len is one past max_tokens: the verify op (FastDeploy's semantics) replaces the token that
        # reaches max_dec_len with eos, so the device must never length-stop a request; the worker finishes
        # it on the host when it holds max_tokens tokens, before the next step.
        scalars = {
            "prompt_lens": num_prompt, "seq_lens_this_time": num_prompt, "seq_lens_encoder": num_prompt,
            "stop_flags": False, "min_dec_len": request.min_tokens, "max_dec_len": request.max_tokens + 1,
            "temperature": float(request.temperature), "top_p": float(request.top_p), "top_k": request.top_k,
            "min_p": float(request.min_p),
            "penalty_score": float(request.repetition_penalty),
            "frequency_score": float(request.frequency_penalty),
            "presence_score": float(request.presence_penalty), "infer_seed": seed,
            "bad_tokens_len": len(request.bad_words_token_ids), "enable_thinking": request.enable_thinking,
        }
        prefixes = {"input_ids": request.prompt_token_ids, "prompt_ids": request.prompt_token_ids,
                    "bad_tokens": request.bad_words_token_ids,
                    "block_tables": request.block_ids}
        self._reset_row(slot)
        for name, value in scalars.items():
            self._write(name, slot, value)
        for name, values in prefixes.items():
            if values:  # host array -> device row prefix: an upload, never a read
                self._write(name, (slot, slice(0, len(values))), np.asarray(values, dtype=self._specs[name].dtype))
        self.req_ids[slot] = request.req_id
        self.req_id_to_slot[request.req_id] = slot
        self._moved("on_insert", slot, request)

    def _check_request(self, slot: int, request: SlotRequest) -> None:
        """Capacity and id-range checks of insert (host values only)."""
        if not isinstance(request, SlotRequest):
            raise TypeError(f"insert(slot={slot}): request is a {type(request).__name__}; allowed: a SlotRequest")
        where = f"insert(slot={slot}, req_id={request.req_id!r})"
        if self.req_ids[slot] is not None:
            raise ValueError(f"{where}: slot {slot} holds request {self.req_ids[slot]!r}; allowed: an empty slot "
                             "(clear_slot first)")
        if request.req_id in self.req_id_to_slot:
            raise ValueError(f"{where}: req_id {request.req_id!r} is already in slot "
                             f"{self.req_id_to_slot[request.req_id]}; allowed: a req_id not in the batch")
        max_len, num_prompt = self.dims["max_model_len"], len(request.prompt_token_ids)
        if not 1 <= num_prompt <= max_len - 1:
            raise ValueError(f"{where}: SlotRequest.prompt_token_ids has {num_prompt} tokens; allowed: "
                             f"1..max_model_len - 1 = {max_len - 1} (one generated token must fit)")
        if num_prompt + request.max_tokens > max_len:
            raise ValueError(f"{where}: SlotRequest.max_tokens = {request.max_tokens}; allowed: 1..max_model_len - "
                             f"prompt length = {max_len - num_prompt}")
        id_lists = (  # field, most entries, ids in 0..bound - 1, the bound's name
            ("prompt_token_ids", max_len, self.vocab_size, "vocab_size"),
            ("bad_words_token_ids", self.dims["max_bad_words"], self.vocab_size, "vocab_size"),
            ("block_ids", self.dims["max_blocks_per_seq"], self.config.scheduler.num_blocks, "scheduler.num_blocks"),
        )
        for field, cap, bound, bound_name in id_lists:
            values = getattr(request, field)
            if len(values) > cap:
                raise ValueError(f"{where}: SlotRequest.{field} has {len(values)} entries; allowed: at most {cap}")
            for i, value in enumerate(values):
                if not 0 <= value < bound:
                    raise ValueError(f"{where}: SlotRequest.{field}[{i}] = {value}; allowed: "
                                     f"0..{bound_name} - 1 = {bound - 1}")

    def clear_slot(self, slot: int) -> str | None:
        """Resets every PER_SLOT row of `slot` to its fill and frees the slot; returns the request it held."""
        self._check_slot(slot, "clear_slot")
        req_id = self.req_ids[slot]
        self._reset_row(slot)
        if req_id is not None:
            self.req_ids[slot] = None
            del self.req_id_to_slot[req_id]
        self._moved("on_clear", slot)
        return req_id

    def swap_states(self, i: int, j: int) -> None:
        """Exchanges slots i and j in every PER_SLOT buffer, its mirror and the bookkeeping."""
        self._check_slot(i, "swap_states")
        self._check_slot(j, "swap_states")
        self._swap_rows(i, j)
        self._swap_owners(i, j)
        self._moved("on_swap", i, j)

    def _swap_owners(self, i: int, j: int) -> None:
        self.req_ids[i], self.req_ids[j] = self.req_ids[j], self.req_ids[i]  # Python objects: safe to tuple-swap
        for slot in (i, j):
            if self.req_ids[slot] is not None:
                self.req_id_to_slot[self.req_ids[slot]] = slot

    def condense(self) -> list[tuple[int, int]]:
        """Packs the occupied slots into 0..num_reqs - 1, keeping their order; returns the (src, dst) moves.

        Order-preserving (FastDeploy's condense), not vLLM's "last row into the first hole", which moves
        fewer rows but reorders requests. Example: occupied [0, 2, 4] -> moves [(2, 1), (4, 2)].
        """
        moves = []
        for dst, src in enumerate(self.occupied_slots):
            if src == dst:
                continue
            self._move_row(src, dst)  # dst < src, and dst is a hole: nothing is overwritten
            req_id = self.req_ids[src]
            self.req_ids[dst], self.req_ids[src] = req_id, None
            self.req_id_to_slot[req_id] = dst
            self._tell("on_move", src, dst)
            moves.append((src, dst))
        self._bump()
        return moves

    def reorder_split_prefill_and_decode(self) -> list[tuple[int, int]]:
        """Puts every occupied decode slot (E_b == 0) before every occupied prefill slot; returns the swaps.

        Decode first, as FastDeploy and vLLM do: attention backends then split the batch at one index.
        Minimal swaps (two pointers: the first prefill with the last decode), so not stable; holes stay
        where they are. Classifies from the host mirror seq_lens_encoder_cpu: no device read. Example:
        occupied [0, 1, 2, 3] with E = [5, 0, 7, 0] -> swaps [(0, 3)], then E = [0, 0, 7, 5].
        """
        slots = self.occupied_slots
        encoder_lens = self.share_inputs["seq_lens_encoder_cpu"].numpy()
        is_prefill = [bool(encoder_lens[s] > 0) for s in slots]
        swaps = []
        lo, hi = 0, len(slots) - 1
        while True:
            while lo < hi and not is_prefill[lo]:
                lo += 1
            while lo < hi and is_prefill[hi]:
                hi -= 1
            if lo >= hi:
                break
            self._swap_rows(slots[lo], slots[hi])
            self._swap_owners(slots[lo], slots[hi])
            self._tell("on_swap", slots[lo], slots[hi])
            swaps.append((slots[lo], slots[hi]))
            lo, hi = lo + 1, hi - 1
        self._bump()
        return swaps

    def set_eos_token_ids(self, eos_token_ids: Sequence[int]) -> None:
        """Writes the end-of-sequence ids (from the tokenizer) to the front of eos_token_id, -1 after."""
        ids = [int(t) for t in eos_token_ids]
        cap = self.dims["max_stop_tokens"]
        if not 1 <= len(ids) <= cap or not all(0 <= t < self.vocab_size for t in ids):
            raise ValueError(f"eos_token_ids = {ids}; allowed: 1..{cap} ids in 0..vocab_size - 1 = "
                             f"{self.vocab_size - 1}")
        padded = np.full([cap], self._specs["eos_token_id"].fill_value(self.dims), dtype=np.int64)
        padded[:len(ids)] = ids
        self._write("eos_token_id", slice(None), padded)
