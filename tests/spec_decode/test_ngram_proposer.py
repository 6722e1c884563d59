"""NgramProposer: drafts from the target batch's own history (prompt_ids + pre_ids), which moves with the
slot on swap / condense / reorder; wired by model_loading for method ngram."""

import dataclasses

import numpy as np
import paddle
import pytest

from specworker.spec_decode.metadata import ProposerInputs
from specworker.spec_decode.ngram_proposer import NgramProposer
from specworker.worker.input_batch import InputBatch
from specworker.worker.model_loading import build_model_and_proposer
from specworker.slot_request import SlotRequest
from tests.worker.worker_harness import make_config

CPU = paddle.CPUPlace()

# req_id -> (prompt, generated tokens); expected drafts with k = 3, n = 3 .. 1 (docs/spec.md):
#   a: h = [5 6 7 8 5 6 | 7]         n = 3 [5 6 7] at 0        -> [8 5 6]
#   b: h = [1 2 3 | 4 1 2]           n = 2 [1 2] at 0 (3 fails) -> [3 4 1]
#   c: h = [9 9 | 3]                 no earlier 3              -> []
HISTORIES = {"a": ([5, 6, 7, 8, 5, 6], [7]), "b": ([1, 2, 3], [4, 1, 2]), "c": ([9, 9], [3])}
DRAFTS = {"a": [8, 5, 6], "b": [3, 4, 1], "c": []}


def _batch_with(slots: dict) -> InputBatch:
    """slot -> req_id: each request inserted and brought to a decode state with its generated tokens."""
    config = make_config("ngram", k=3)
    batch = InputBatch(config, CPU)
    for slot, req_id in slots.items():
        prompt, generated = HISTORIES[req_id]
        batch.insert(slot, SlotRequest(req_id=req_id, prompt_token_ids=prompt, max_tokens=20))
        # after the prefill and len(generated) decode steps; input_ids now holds junk (a later chunk, say)
        batch.write_row(slot, {"input_ids": [77] * 8, "pre_ids": [-1] + generated, "step_idx": len(generated),
                               "seq_lens_encoder": 0, "seq_lens_decoder": len(prompt) + len(generated) - 1,
                               "seq_lens_this_time": 1})
    return batch


def _run(batch, max_draft_len: int | None = None) -> None:
    """The proposer as the runner calls it: max_draft_len = the largest k_b of the step (default k)."""
    spec = batch.config.speculative_config
    k = spec.num_speculative_tokens if max_draft_len is None else max_draft_len
    inputs = dataclasses.replace(ProposerInputs.from_share_inputs(batch.share_inputs), max_draft_len=k)
    NgramProposer(spec).run(inputs)


def _assert_drafts(batch, slots: dict):
    drafts = batch.share_inputs["draft_tokens"].numpy()
    lens = batch.share_inputs["seq_lens_this_time"].numpy()
    for slot in range(batch.num_slots):
        req_id = slots.get(slot)
        if req_id is None:
            assert lens[slot] == 0, slot  # empty slot: Dec 0
            continue
        want = DRAFTS[req_id]
        np.testing.assert_array_equal(drafts[slot, 1:], want + [-1] * (3 - len(want)), err_msg=req_id)
        assert lens[slot] == 1 + len(want), req_id


def test_ngram_proposer_drafts_from_prompt_ids_and_pre_ids():
    slots = {0: "a", 1: "b", 3: "c"}
    batch = _batch_with(slots)
    _run(batch)
    _assert_drafts(batch, slots)


def test_ngram_proposer_history_follows_swap_condense_and_reorder():
    batch = _batch_with({0: "a", 2: "b", 3: "c"})
    batch.swap_states(0, 3)  # c, -, b, a
    batch.condense()  # c, b, a, -
    batch.write_row(2, {"seq_lens_encoder": 5})  # a prefill slot goes behind the decode slots
    batch.reorder_split_prefill_and_decode()
    assert batch.req_ids == ["c", "b", "a", None]
    batch.write_row(2, {"seq_lens_encoder": 0})
    _run(batch)
    _assert_drafts(batch, {0: "c", 1: "b", 2: "a"})


def test_ngram_proposer_skips_the_search_when_no_slot_may_draft():
    """max_draft_len = 0 (every live slot at k_b = 0): no drafts, running slots feed 1 token, paused ones 0."""
    batch = _batch_with({0: "a", 1: "b"})
    batch.write_row(1, {"is_block_step": True})
    before = batch.share_inputs["draft_tokens"].numpy().copy()
    _run(batch, max_draft_len=0)
    np.testing.assert_array_equal(batch.share_inputs["seq_lens_this_time"].numpy()[:2], [1, 0])
    np.testing.assert_array_equal(batch.share_inputs["draft_tokens"].numpy(), before)


def test_ngram_proposer_respects_adaptive_budget_and_paused_slots():
    slots = {0: "a", 1: "b"}
    batch = _batch_with(slots)
    batch.write_row(0, {"actual_draft_token_nums": 1})
    batch.write_row(1, {"is_block_step": True})
    _run(batch)
    np.testing.assert_array_equal(batch.share_inputs["draft_tokens"].numpy()[0, 1:], [8, -1, -1])
    np.testing.assert_array_equal(batch.share_inputs["seq_lens_this_time"].numpy()[:2], [2, 0])


@pytest.mark.parametrize("method, proposer", [("ngram", "NgramProposer"), ("none", "NaiveProposer"),
                                              ("mtp", "MTPProposer")])
def test_model_loading_builds_the_method_proposer(method, proposer):
    config = make_config(method, k=2 if method != "none" else 0)
    parts = build_model_and_proposer(config, CPU)
    assert type(parts.proposer).__name__ == proposer
