"""Composed MTP engine rounds for tests/spec_decode: the target step and the MTP proposer chained
from the real ops (OpsBackend) and, in lockstep, from their numpy references (RefBackend), with
the fake models of tests/mtp_fake_models.py and a host-side scheduler that inserts, aborts and
preempts requests between rounds. Every stage's outputs and the whole state are compared
between the two backends right after the stage, so a divergence names its op and round.
The invariants themselves are checked by the test, on the RoundRecord each round returns.

One round (docs/spec.md §2, docs/spec.md §8.18):
    target pre_process -> FakeTarget -> rebuild_padding -> logits -> argmax -> speculate_verify
    (greedy) -> host copy -> speculate_update -> speculate_set_value_by_flags_and_idx
    -> draft_model_preprocess -> eagle_get_hidden_states
    -> num_model_steps x (draft pre_process -> FakeDraft -> rebuild_padding -> sample
                          -> draft_model_update(substep))
    -> draft_model_postprocess
Substep s proposes draft s + 1 (target draft_tokens[b, s + 1]), so with num_model_steps < k the
drafts fill columns 1 .. num_model_steps, the rest stay -1 and L_b = 1 + num_model_steps (no
n-gram extension); draft_model_preprocess proposes nothing (L_b = 1) for a request with
step_idx + num_model_steps >= max_dec_len.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tests.mtp_backends import OpsBackend, RefBackend, allocate, assert_same
from tests.mtp_fake_models import FakeDraft, FakeTarget, greedy_reference


@dataclasses.dataclass(frozen=True)
class RoundConfig:
    """One composed run: batch shape, speculation shape and how requests come and go."""

    num_slots: int
    k: int
    num_model_steps: int
    rounds: int = 20
    seed: int = 0
    vocab: int = 29
    end_tokens: tuple = (2,)
    max_prompt_len: int = 10
    max_dec_len: int = 24  # upper bound of the per-request max_dec_len
    miss_rate: float = 0.3  # how often the draft proposes something else than the target's greedy token
    insert_rate: float = 0.6
    abort_rate: float = 0.03
    preempt_rate: float = 0.05

    @property
    def max_model_len(self) -> int:  # prompt + every generated token + a verify window, with room
        return self.max_prompt_len + self.max_dec_len + self.k + 4


@dataclasses.dataclass
class Request:
    req_id: int
    slot: int
    prompt: list[int]
    max_dec_len: int
    greedy: list[int]  # what the target alone emits: the lossless reference
    emitted: list[int] = dataclasses.field(default_factory=list)
    status: str = "running"  # running | preempted | finished | aborted
    resume_in: int = 0
    stash: dict | None = None  # preempted: the rows recover_decode_task restores


@dataclasses.dataclass
class Substep:
    meta: dict  # the draft's pre_process outputs
    before: dict  # state before the draft forward
    prev_hidden: np.ndarray  # [token_num, H] hidden row paired with each packed draft token
    rows: np.ndarray  # rebuild_padding of the draft's hidden
    tokens: np.ndarray  # the draft's sampled token per output row
    after: dict  # state after draft_model_update


@dataclasses.dataclass
class RoundRecord:
    """Snapshots of one round (numpy copies of the ops backend's state at each point)."""

    round: int
    requests: dict  # slot -> Request, every request holding a slot this round (after scheduling)
    emitted_before: dict  # slot -> len(emitted) at the start of the round
    before: dict  # state after scheduling, before pre_process
    token_num: int  # token_num_cpu of the target's pre_process
    meta: dict = None  # the target's pre_process outputs
    hidden: np.ndarray = None  # [token_num, H] FakeTarget output
    rows: np.ndarray = None  # rebuild_padding of it, [N * D, H]
    verify_tokens: np.ndarray = None  # [N * D, 1] argmax of the logits
    after_verify: dict = None  # includes the host copy: accept_tokens, accept_num, stop_flags
    after_update: dict = None
    after_set_value: dict = None
    # proposer (Engine.propose)
    after_preprocess: dict = None
    eagle_out: np.ndarray = None
    eagle_count: np.ndarray = None
    substeps: list = dataclasses.field(default_factory=list)
    after: dict = None  # after draft_model_postprocess


class Engine:
    """Runs rounds on both backends in lockstep and keeps the host-side request table.

    preempt_stops: preemption as FastDeploy's speculate_schedule_cache does it (stop flag and
    is_block_step, L = Dec = 0, rows stashed and restored on resume); False pauses a slot with
    is_block_step alone (L = 0, stop flag clear).
    """

    def __init__(self, cfg: RoundConfig, preempt_stops: bool = True):
        self.cfg = cfg
        self.preempt_stops = preempt_stops
        self.rng = np.random.default_rng(cfg.seed)
        init = allocate(cfg.num_slots, cfg.max_model_len, cfg.k, cfg.end_tokens)
        self.ops, self.ref = OpsBackend(init), RefBackend(init)
        self.target = FakeTarget(cfg.num_slots, cfg.max_model_len + cfg.k + 1, cfg.vocab)
        self.draft = FakeDraft(cfg.vocab, cfg.seed, cfg.miss_rate)
        self.slots: dict[int, Request] = {}
        self.done: list[Request] = []
        self.round = 0
        self.next_id = 0

    def _both(self, stage: str, *args):
        got = getattr(self.ops, stage)(*args)
        want = getattr(self.ref, stage)(*args)
        where = f"round {self.round}, {stage}" + (f" ({args[0]})" if args and isinstance(args[0], str) else "")
        assert_same(where, got, want)
        assert_same(f"{where}: state", self.ops.numpy(), self.ref.state)
        return got

    def _set_rows(self, slot: int, values: dict) -> None:
        self.ops.set_rows(slot, values)
        self.ref.set_rows(slot, values)

    # ---- host-side scheduler (between rounds) ----
    def _schedule(self) -> None:
        cfg, rng = self.cfg, self.rng
        for slot, req in list(self.slots.items()):
            if req.status == "preempted":
                req.resume_in -= 1
                if req.resume_in <= 0:  # recover_decode_task: restore the stashed rows
                    self._set_rows(slot, {**req.stash, "stop_flags": False, "is_block_step": False})
                    req.status, req.stash = "running", None
            if rng.random() < cfg.abort_rate:
                self._set_rows(slot, {"stop_flags": True, "is_block_step": False, "seq_lens_this_time": 0,
                                      "seq_lens_encoder": 0, "seq_lens_decoder": 0})
                req.status = "aborted"
                self.done.append(self.slots.pop(slot))
            elif req.status == "running" and req.emitted and rng.random() < cfg.preempt_rate:
                self._preempt(slot, req, int(rng.integers(1, 4)))
        for slot in range(cfg.num_slots):
            if slot not in self.slots and rng.random() < (0.8 if self.round == 0 else cfg.insert_rate):
                self._insert(slot)

    def _preempt(self, slot: int, req: Request, rounds: int) -> None:
        """speculate_schedule_cache's block step: stop + is_block_step, L = Dec = 0, rows stashed.
        With preempt_stops=False the slot is only paused (is_block_step, L = 0; stop flag clear)."""
        state = self.ops.numpy()
        req.stash = {k: state[k][slot].copy() for k in ("seq_lens_this_time", "seq_lens_decoder", "draft_tokens")}
        req.status, req.resume_in = "preempted", rounds
        if self.preempt_stops:
            self._set_rows(slot, {"is_block_step": True, "stop_flags": True, "seq_lens_this_time": 0,
                                  "seq_lens_decoder": 0})
        else:
            self._set_rows(slot, {"is_block_step": True, "seq_lens_this_time": 0})

    def _insert(self, slot: int) -> None:
        cfg, rng = self.cfg, self.rng
        prompt = [int(x) for x in rng.integers(0, cfg.vocab, size=int(rng.integers(1, cfg.max_prompt_len + 1)))]
        max_dec_len = int(rng.integers(1, cfg.max_dec_len + 1))
        P, S = len(prompt), cfg.max_model_len
        row, shifted = np.full(S, -1, np.int64), np.full(S, -1, np.int64)
        row[:P], shifted[:P - 1] = prompt, prompt[1:]  # the draft prompt is the target's shifted by one
        self._set_rows(slot, {
            "input_ids": row, "pre_ids": -1, "seq_lens_this_time": P, "seq_lens_encoder": P, "seq_lens_decoder": 0,
            "step_idx": 0, "stop_flags": False, "is_block_step": False, "max_dec_len": max_dec_len,
            "draft_tokens": -1, "accept_tokens": -1, "accept_num": 0, "actual_draft_token_nums": cfg.k,
            "mask_rollback": 0,
            "d_input_ids": shifted, "d_pre_ids": -1, "d_draft_tokens": -1, "d_seq_lens_this_time": P,
            "d_seq_lens_encoder": P, "d_seq_lens_decoder": 0, "d_step_idx": 0, "d_stop_flags": False,
        })
        self.slots[slot] = Request(self.next_id, slot, prompt, max_dec_len,
                                   greedy_reference(prompt, max_dec_len, cfg.vocab, cfg.end_tokens))
        self.next_id += 1

    def _token_bound(self) -> int:
        """token_num_cpu from the host's request table: the prompt of a prefill, D per decode."""
        bound = 3  # capacity beyond T on purpose: rows past T must stay -1 and unread
        for req in self.slots.values():
            if req.status == "running":
                bound += self.cfg.k + 1 if req.emitted else len(req.prompt)
        return bound

    # ---- one engine step: the target's step, then the proposer ----
    def target_step(self) -> RoundRecord:
        """Scheduling, then pre_process .. speculate_set_value_by_flags_and_idx (the committed step)."""
        self._schedule()
        rec = RoundRecord(self.round, dict(self.slots), {s: len(r.emitted) for s, r in self.slots.items()},
                          self.ops.numpy(), self._token_bound())
        rec.meta = m = self._both("pre_process", "target", rec.token_num)
        rec.hidden = self.target.forward(m["ids_remove_padding"], m["batch_id_per_token"], m["cu_seqlens_q"],
                                         rec.before["seq_lens_decoder"])
        rec.rows = self._both("rebuild_padding", "target", rec.hidden)
        rec.verify_tokens = self.target.logits(rec.rows).argmax(axis=1).astype(np.int64)[:, None]
        self._both("verify", rec.verify_tokens)
        rec.after_verify = self.ops.numpy()  # the step's one device-to-host copy: tokens, counts, stop flags
        self._commit(rec.after_verify)
        self._both("speculate_update")
        rec.after_update = self.ops.numpy()
        self._both("set_value")
        rec.after_set_value = self.ops.numpy()
        return rec

    def propose(self, rec: RoundRecord) -> None:
        """The MTP proposer over the target's committed step: preprocess, hidden states, substeps,
        postprocess; fills the rest of `rec`."""
        cfg = self.cfg
        self._both("draft_preprocess", cfg.num_model_steps)
        rec.after_preprocess = self.ops.numpy()
        rec.eagle_out, rec.eagle_count = self._both("eagle", rec.hidden)
        prev = rec.eagle_out  # substep 0: token p + 1 paired with the target's hidden row of position p
        for s in range(cfg.num_model_steps):
            m = self._both("pre_process", "draft", rec.token_num if s == 0 else cfg.num_slots)
            before = self.ops.numpy()
            if s > 0:  # later substeps continue from the draft's own last hidden row per slot
                prev = last[np.maximum(m["batch_id_per_token"], 0)]
            hidden = self.draft.forward(m["ids_remove_padding"], m["batch_id_per_token"], m["cu_seqlens_q"],
                                        before["d_seq_lens_decoder"], prev, self.round)
            rows = self._both("rebuild_padding", "draft", hidden)
            tokens = self.draft.sample(rows)
            last = rows[np.maximum(m["cu_seqlens_q_output"][1:] - 1, 0)]
            self._both("draft_update", tokens, s)
            rec.substeps.append(Substep(m, before, prev[:m["cu_seqlens_q"][-1]], rows, tokens, self.ops.numpy()))
        self._both("draft_postprocess")
        rec.after = self.ops.numpy()
        self.round += 1

    def _commit(self, host: dict) -> None:
        """The engine's side of the host copy: append each request's tokens, retire finished ones."""
        for slot, req in list(self.slots.items()):
            n = int(host["accept_num"][slot])
            req.emitted += [int(x) for x in host["accept_tokens"][slot, :n]]
            if n > 0 and host["stop_flags"][slot]:
                req.status = "finished"
                self.done.append(self.slots.pop(slot))
