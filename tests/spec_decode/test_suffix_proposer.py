"""SuffixProposer: drafts from each request's own tree (prompt + the tokens of the accept mirrors) or the global
tree of finished outputs, written into draft_tokens / seq_lens_this_time with the device caps; its per-slot
state follows swap / condense; middle prefill chunks add nothing; stopped and paused slots get L = 0."""

import numpy as np
import paddle
import pytest

from specworker.spec_decode.metadata import ProposerInputs
from specworker.spec_decode.suffix_proposer import SuffixProposer
from specworker.worker.input_batch import InputBatch
from specworker.worker.model_loading import build_model_and_proposer
from specworker.slot_request import SlotRequest
from tests.worker.worker_harness import make_config

CPU = paddle.CPUPlace()

# req -> (prompt, first emitted token); expected drafts with k = 3, spec_factor 1 (drafts <= match length):
#   a: [5 6 7 8 9 5 6] + 7 -> suffix [5 6 7] seen at the start, followed by 8 9 5      -> [8 9 5]
#   b: [1 2 3 4 1] + 2     -> [1 2] seen before, followed by 3 4; 2 tokens matched     -> [3 4]
#   c: [9 9 8] + 3         -> 3 never seen                                             -> []
REQUESTS = {"a": ([5, 6, 7, 8, 9, 5, 6], 7), "b": ([1, 2, 3, 4, 1], 2), "c": ([9, 9, 8], 3)}
DRAFTS = {"a": [8, 9, 5], "b": [3, 4], "c": []}


class Setup:
    """An InputBatch and a SuffixProposer that follows it, as the ModelRunner wires them."""

    def __init__(self, k=3, **suffix):
        self.config = make_config("suffix", k=k, suffix=suffix)
        self.batch = InputBatch(self.config, CPU)
        self.proposer = SuffixProposer(self.config)
        for follower in self.proposer.followers():
            self.batch.follow(follower)

    def admit(self, slot, req_id, prompt, max_tokens=20):
        self.batch.insert(slot, SlotRequest(req_id=req_id, prompt_token_ids=prompt, max_tokens=max_tokens))

    def prefill(self, slot, prompt, start, length):
        self.batch.write_row(slot, {"seq_lens_this_time": length, "seq_lens_encoder": length})
        self.proposer.write_prefill(slot, prompt, start, length)

    def emitted(self, slot, tokens, *, stopped=False, step_idx=None):
        """The state the step's copy and update leave: accept mirrors, a decode slot, step_idx advanced."""
        row = self.batch.share_inputs["step_idx_cpu"].numpy()[slot] + len(tokens) if step_idx is None else step_idx
        self.batch.write_row(slot, {"accept_tokens": tokens, "accept_num": len(tokens), "stop_flags": stopped,
                                    "seq_lens_encoder": 0, "step_idx": int(row)})

    def run(self):
        self.proposer.run(ProposerInputs.from_share_inputs(self.batch.share_inputs))
        si = self.batch.share_inputs
        return si["draft_tokens"].numpy()[:, 1:], si["seq_lens_this_time"].numpy()

    def swap(self, i, j):
        self.batch.swap_states(i, j)

    def condense(self):
        self.batch.condense()


def _start(setup, slots):
    for slot, req_id in slots.items():
        prompt, first = REQUESTS[req_id]
        setup.admit(slot, req_id, prompt)
        setup.prefill(slot, prompt, 0, len(prompt))
        setup.emitted(slot, [first])


def _assert_drafts(drafts, lens, slots, k=3):
    for slot in range(len(lens)):
        req_id = slots.get(slot)
        want = DRAFTS[req_id] if req_id is not None else []
        np.testing.assert_array_equal(drafts[slot], want + [-1] * (k - len(want)), err_msg=str(req_id))
        assert lens[slot] == (1 + len(want) if req_id is not None else 0), (slot, req_id)


def test_suffix_proposer_drafts_from_prompt_and_accepted_tokens():
    setup = Setup()
    slots = {0: "a", 1: "b", 3: "c"}
    _start(setup, slots)
    _assert_drafts(*setup.run(), slots)
    assert setup.proposer.times.runs == 1 and setup.proposer.times.step_seconds > 0


def test_suffix_proposer_state_follows_swap_and_condense():
    setup = Setup()
    _start(setup, {0: "a", 2: "b", 3: "c"})
    setup.swap(0, 3)  # c, -, b, a
    setup.condense()  # c, b, a, -
    assert setup.batch.req_ids == ["c", "b", "a", None]
    _assert_drafts(*setup.run(), {0: "c", 1: "b", 2: "a"})
    # a's next step accepts all three drafts plus 6: its tree grew by them (5 6 7 8 9 5 6 | 7 8 9 5 6)
    setup.emitted(2, [8, 9, 5, 6])
    drafts, lens = setup.run()
    assert drafts[2].tolist() == [7, 8, 9] and lens[2] == 4  # [.. 9 5 6] seen: followed by 7 8 9


def test_suffix_proposer_device_caps_stopped_and_paused_slots():
    setup = Setup()
    _start(setup, {0: "a", 1: "b", 2: "c"})
    setup.batch.write_row(0, {"actual_draft_token_nums": 1})  # the adaptive budget
    setup.batch.write_row(1, {"max_dec_len": 3})  # step_idx 1: room for 3 - 1 - 1 = 1 draft
    setup.batch.write_row(2, {"is_block_step": True})
    drafts, lens = setup.run()
    assert drafts[:3].tolist() == [[8, -1, -1], [3, -1, -1], [-1, -1, -1]] and lens[:3].tolist() == [2, 2, 0]
    setup.batch.write_row(0, {"actual_draft_token_nums": 3, "stop_flags": True})
    drafts, lens = setup.run()
    assert lens[0] == 0 and drafts[0].tolist() == [-1, -1, -1]


def test_suffix_proposer_ignores_the_token_after_a_middle_chunk():
    setup = Setup()
    prompt = [5, 6, 7, 8, 9, 5, 6]
    setup.admit(0, "a", prompt)
    setup.prefill(0, prompt, 0, 4)  # middle chunk: its sampled token (99) is discarded by the host
    setup.emitted(0, [99], step_idx=0)
    setup.run()
    assert setup.proposer.slots[0].output == []
    setup.prefill(0, prompt, 4, 3)  # the final chunk emits the first token
    setup.emitted(0, [7], step_idx=1)
    drafts, lens = setup.run()
    assert setup.proposer.slots[0].output == [7] and drafts[0].tolist() == [8, 9, 5] and lens[0] == 4


def _finish(setup, slot, req_id, prompt, output):
    """A request that emitted `output` one token a step, then left its slot."""
    setup.admit(slot, req_id, prompt)
    setup.prefill(slot, prompt, 0, len(prompt))
    for t in output:
        setup.emitted(slot, [t])
        setup.run()
    setup.batch.clear_slot(slot)


@pytest.mark.parametrize("max_cached, want", [(0, []), (2, [63, 64])])
def test_suffix_proposer_global_tree_holds_finished_outputs(max_cached, want):
    setup = Setup(max_cached_requests=max_cached)
    _finish(setup, 0, "old", [50, 51], [60, 61, 62, 63, 64])
    # a new request whose own tokens never repeat: [70 60 61] + 62; the old output continues [60 61 62] with 63 64
    setup.admit(0, "new", [70, 60, 61])
    setup.prefill(0, [70, 60, 61], 0, 3)
    setup.emitted(0, [62])
    drafts, lens = setup.run()
    assert drafts[0].tolist() == want + [-1] * (3 - len(want)) and lens[0] == 1 + len(want)


def test_suffix_proposer_global_tree_evicts_the_oldest_output():
    setup = Setup(max_cached_requests=1)
    _finish(setup, 1, "first", [50], [60, 61, 62, 63])
    _finish(setup, 1, "second", [51], [80, 81, 82, 83])  # evicts "first"
    setup.admit(0, "new", [70, 60])
    setup.prefill(0, [70, 60], 0, 2)
    setup.emitted(0, [61])
    drafts, lens = setup.run()
    assert lens[0] == 1 and setup.proposer.global_tree.draft(2, context=[80, 81], spec_factor=2.0).tokens == (82, 83)


def test_model_loading_builds_the_suffix_proposer():
    parts = build_model_and_proposer(make_config("suffix", k=2), CPU)
    assert type(parts.proposer).__name__ == "SuffixProposer"
