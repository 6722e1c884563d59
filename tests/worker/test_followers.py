"""Followers of the target batch (SlotBuffers.follow): a following SlotBuffers (the MTP draft batch) and any
SlotFollower receive every insert / clear / swap / condense move / reorder of the InputBatch through one path,
and the follower batch reports the leader's layout_version."""

from __future__ import annotations

import random

import numpy as np
import paddle
import pytest

from specworker.model_executor.slot_buffers import SlotBuffers, buffer_dims
from specworker.spec_decode.mtp_buffers import DRAFT_BUFFERS, DraftBatch
from specworker.worker.input_batch import InputBatch
from tests.worker.slot_patterns import (CONFIGS, assert_share_inputs, expected_per_slot, make_config, request,
                                        write_origin)
from tests.worker.test_input_batch import _model_after

CPU = paddle.CPUPlace()


class Recorder:
    """A SlotFollower keeping its own slot -> req_id list from the hooks alone."""

    def __init__(self, num_slots: int):
        self.slots: list[str | None] = [None] * num_slots
        self.calls: list[tuple] = []

    def on_insert(self, slot, request):
        assert self.slots[slot] is None, f"insert into occupied slot {slot}"
        self.slots[slot] = request.req_id
        self.calls.append(("insert", slot))

    def on_clear(self, slot):
        self.slots[slot] = None
        self.calls.append(("clear", slot))

    def on_swap(self, i, j):
        self.slots[i], self.slots[j] = self.slots[j], self.slots[i]
        self.calls.append(("swap", i, j))

    def on_move(self, src, dst):
        assert self.slots[dst] is None, f"move into occupied slot {dst}"
        self.slots[dst], self.slots[src] = self.slots[src], None
        self.calls.append(("move", src, dst))


def _wired(config_name):
    config = make_config(config_name)
    batch = InputBatch(config, CPU)
    draft = SlotBuffers(DRAFT_BUFFERS, buffer_dims(config, hidden_size=8, vocab_size=16), CPU)
    recorder = Recorder(batch.num_slots)
    batch.follow(draft)
    batch.follow(recorder)
    return batch, draft, recorder


@pytest.mark.parametrize("config_name", CONFIGS)
def test_followers_track_200_random_row_moves(config_name):
    rng = random.Random(99)
    batch, draft, recorder = _wired(config_name)
    model: list[int | None] = [None] * batch.num_slots
    for step in range(200):
        op = rng.choice(["insert", "insert", "clear", "swap", "swap", "condense", "reorder"])
        new = _model_after(op, batch, rng, model, next_origin=step)
        if op == "insert" and new is not model:
            slot = next(s for s in range(batch.num_slots) if new[s] == step)
            write_origin(draft, slot, step)  # the draft row of the new request gets its own pattern
        model = new
        context = f"step {step} ({op}), model {model}"
        assert recorder.slots == batch.req_ids, context
        assert draft.layout_version == batch.layout_version, context
        assert_share_inputs(draft, expected_per_slot(draft, model), context)


def test_followers_hear_each_move_once_in_order():
    batch, _, recorder = _wired("mtp_n5_k2")
    batch.insert(0, request("a"))
    batch.insert(2, request("b"))
    batch.insert(4, request("c"))
    batch.clear_slot(0)
    batch.condense()  # [None, None, b, None, c] -> moves (2, 0), (4, 1)
    batch.swap_states(0, 1)
    assert recorder.calls == [("insert", 0), ("insert", 2), ("insert", 4), ("clear", 0), ("move", 2, 0),
                              ("move", 4, 1), ("swap", 0, 1)]
    assert recorder.slots == ["c", "b", None, None, None]


def test_follow_twice_is_refused():
    batch, draft, recorder = _wired("none_n3")
    for follower in (draft, recorder):
        with pytest.raises(ValueError, match="already follows this batch"):
            batch.follow(follower)
    with pytest.raises(ValueError, match="cannot follow itself"):
        batch.follow(batch)


def test_draft_batch_skips_only_the_row_writes_that_change_nothing(monkeypatch):
    """DraftBatch (the MTP proposer's batch) skips resetting, swapping or moving rows that hold their fills since
    their last reset; under 400 random inserts, clears, swaps, condenses, reorders, draft prefills (write_row) and
    draft-model rounds (mark_written, then every row written), it holds the same tensors as a plain SlotBuffers
    following the same batch, and skips most resets while no round runs (a draft-less batch)."""
    config = make_config("mtp_n5_k2")
    batch = InputBatch(config, CPU)
    dims = buffer_dims(config, hidden_size=8, vocab_size=16)
    plain, draft = SlotBuffers(DRAFT_BUFFERS, dims, CPU), DraftBatch(DRAFT_BUFFERS, dims, CPU)
    batch.follow(plain)
    batch.follow(draft)
    resets = {id(plain): 0, id(draft): 0}
    reset_row = SlotBuffers._reset_row

    def counted(self, slot):
        if id(self) in resets:  # the followers' (the leader's own resets run here too)
            resets[id(self)] += 1
        return reset_row(self, slot)

    monkeypatch.setattr(SlotBuffers, "_reset_row", counted)
    rng = random.Random(5)
    per_slot = [spec for spec in DRAFT_BUFFERS if spec.kind.name == "PER_SLOT"]
    rounds_from = 200  # no draft round before: the draft-less stretch
    for step in range(400):
        occupied = [s for s in range(batch.num_slots) if batch.req_ids[s] is not None]
        free = [s for s in range(batch.num_slots) if batch.req_ids[s] is None]
        op = rng.choice(["insert", "insert", "clear", "swap", "condense", "reorder", "prefill", "round"])
        if op == "insert" and free:
            batch.insert(rng.choice(free), request(f"r{step}"))
        elif op == "clear" and occupied:
            batch.clear_slot(rng.choice(occupied))
        elif op == "swap":
            batch.swap_states(*rng.sample(range(batch.num_slots), 2))
        elif op == "condense":
            batch.condense()
        elif op == "reorder":
            batch.reorder_split_prefill_and_decode()
        elif op == "prefill" and occupied:
            slot, row = rng.choice(occupied), {"input_ids": [step, step + 1], "seq_lens_this_time": 2,
                                               "stop_flags": False}
            plain.write_row(slot, row)
            draft.write_row(slot, row)
        elif op == "round" and step >= rounds_from:
            draft.mark_written()
            for spec in per_slot:
                values = np.random.default_rng(step).integers(0, 7, plain.share_inputs[spec.name].shape)
                for b in (plain, draft):
                    b.share_inputs[spec.name][:] = paddle.to_tensor(values.astype(spec.dtype))
        for name in plain.share_inputs:
            np.testing.assert_array_equal(draft.share_inputs[name].numpy(), plain.share_inputs[name].numpy(),
                                          err_msg=f"step {step} ({op}): {name}")
        if step == rounds_from - 1:
            assert resets[id(draft)] < resets[id(plain)] / 3, resets
    assert resets[id(draft)] < resets[id(plain)], resets

