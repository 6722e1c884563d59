"""InputBatch: allocation from the table, row moves of every PER_SLOT buffer (driven by the table, so a
new buffer is covered automatically), bookkeeping, the stale-read guard (defect 4) and insert checks."""

from __future__ import annotations

import ast
import inspect
import random
import textwrap

import numpy as np
import paddle
import pytest

from specworker.config import config_from_dict
from specworker.model_executor.forward_meta import StaleForwardMetaError
from specworker.model_executor import ops
from specworker.model_executor.pre_and_post_process import pre_process
from specworker.model_executor.slot_buffers import TARGET_BUFFERS, BufferKind, BufferSpec
from specworker.worker.input_batch import InputBatch
from tests.sync_guard import HostReadError, forbid_host_reads
from tests.worker.slot_patterns import (CONFIGS, assert_share_inputs, expected_per_slot, is_decode_origin,
                                        make_config, mark_fixed_buffers, request, write_origin)

CPU = paddle.CPUPlace()


def _batch(config_name="mtp_n5_k2", **kwargs):
    return InputBatch(make_config(config_name), CPU, **kwargs)


def _patterned(config_name="mtp_n5_k2", **kwargs):
    """A full batch: slot b holds request r<b> and pattern b in every PER_SLOT row; PER_STEP / GLOBAL marked."""
    batch = _batch(config_name, **kwargs)
    origins = list(range(batch.num_slots))
    for slot in origins:
        batch.insert(slot, request(f"r{slot}"))
        write_origin(batch, slot, slot)
    return batch, origins, mark_fixed_buffers(batch)


def _other_parity_slot(n):
    """An even slot, so every bool row differs between slot 1 and it (slot_patterns.pattern)."""
    return max(j for j in range(n) if j % 2 == 0 and j != 1)


def test_input_batch_allocates_exactly_the_table():
    batch = _batch()
    declared = {s.name for s in TARGET_BUFFERS} | {s.mirror_name for s in TARGET_BUFFERS if s.cpu_mirror}
    assert set(batch.share_inputs) == declared
    for spec in TARGET_BUFFERS:
        for key in [spec.name] + ([spec.mirror_name] if spec.cpu_mirror else []):
            t = batch.share_inputs[key]
            assert list(t.shape) == spec.shape(batch.dims), key
            assert t.dtype == getattr(paddle, spec.dtype), key
            assert (t.numpy() == spec.fill_value(batch.dims)).all(), key
    batch.check()


def test_input_batch_check_rejects_undeclared_buffer():
    batch = _batch()
    batch.share_inputs["rogue_buffer"] = paddle.zeros([batch.num_slots], dtype="int32")
    with pytest.raises(ValueError, match="undeclared \\['rogue_buffer'\\]"):
        batch.check()
    del batch.share_inputs["rogue_buffer"]
    batch.share_inputs.pop("top_k")
    with pytest.raises(ValueError, match="missing \\['top_k'\\]"):
        batch.check()
    batch.share_inputs["top_k"] = paddle.zeros([batch.num_slots, 1], dtype="int64")
    with pytest.raises(ValueError, match="share_inputs\\['top_k'\\] is \\[5, 1\\]"):
        batch.check()


@pytest.mark.parametrize("config_name", CONFIGS)
def test_input_batch_swap_moves_every_per_slot_buffer(config_name):
    batch, origins, fixed = _patterned(config_name)
    j = _other_parity_slot(batch.num_slots)
    batch.swap_states(1, j)
    origins[1], origins[j] = origins[j], origins[1]
    assert (batch.req_ids[1], batch.req_ids[j], batch.slot_of("r1")) == (f"r{j}", "r1", j)
    assert_share_inputs(batch, expected_per_slot(batch, origins), f"after swap_states(1, {j})")
    assert_share_inputs(batch, fixed, "PER_STEP / GLOBAL after swap")


@pytest.mark.parametrize("config_name", CONFIGS)
def test_input_batch_swap_twice_is_identity(config_name):
    batch, origins, fixed = _patterned(config_name)
    j = _other_parity_slot(batch.num_slots)
    batch.swap_states(1, j)
    assert batch.slot_of("r1") == j
    batch.swap_states(1, j)
    assert batch.slot_of("r1") == 1
    assert_share_inputs(batch, {**expected_per_slot(batch, origins), **fixed}, "after two swaps")


@pytest.mark.parametrize("config_name", CONFIGS)
def test_input_batch_clear_slot_resets_every_per_slot_buffer(config_name):
    batch, origins, fixed = _patterned(config_name)
    slot = 1  # odd origin: every row differs from its fill (slot_patterns.pattern)
    assert batch.clear_slot(slot) == "r1" and batch.req_ids[slot] is None and "r1" not in batch.req_id_to_slot
    origins[slot] = None
    assert_share_inputs(batch, expected_per_slot(batch, origins), f"after clear_slot({slot})")
    assert_share_inputs(batch, fixed, "PER_STEP / GLOBAL after clear")


def test_input_batch_condense_keeps_running_requests_in_order():
    """Occupied [0, 2, 4] of 5 -> rows 0, 1, 2 hold requests 0, 2, 4 in that order; rows 3, 4 are fills."""
    batch = _batch()
    for slot in (0, 2, 4):
        batch.insert(slot, request(f"r{slot}"))
        write_origin(batch, slot, slot)
    fixed = mark_fixed_buffers(batch)
    moves = batch.condense()
    assert moves == [(2, 1), (4, 2)]
    assert batch.req_ids == ["r0", "r2", "r4", None, None]
    assert batch.req_id_to_slot == {"r0": 0, "r2": 1, "r4": 2}
    assert_share_inputs(batch, expected_per_slot(batch, [0, 2, 4, None, None]), "after condense")
    assert_share_inputs(batch, fixed, "PER_STEP / GLOBAL after condense")


def test_input_batch_reorder_puts_decode_slots_first():
    """E = [5, 0, 7, 0] on occupied slots 0..3 -> one swap (0, 3): E = [0, 0, 7, 5], decode slots first."""
    batch = _batch()
    for slot in range(4):
        batch.insert(slot, request(f"r{slot}"))
        write_origin(batch, slot, slot)
    for slot, e in enumerate([5, 0, 7, 0]):
        batch.share_inputs["seq_lens_encoder"][slot] = e
        batch.share_inputs["seq_lens_encoder_cpu"][slot] = e
    swaps = batch.reorder_split_prefill_and_decode()
    assert swaps == [(0, 3)]
    assert batch.req_ids == ["r3", "r1", "r2", "r0", None]
    assert batch.share_inputs["seq_lens_encoder"].numpy().tolist() == [0, 0, 7, 5, 0]
    assert batch.share_inputs["seq_lens_encoder_cpu"].numpy().tolist() == [0, 0, 7, 5, 0]
    assert batch.share_inputs["input_ids"].numpy()[0, 0] == 1000 * (3 + 1)


def _model_after(op, batch, rng, model, next_origin):
    """Applies one random op to batch and returns the model's new slot -> origin list."""
    n = batch.num_slots
    if op == "insert":
        empty = [s for s in range(n) if model[s] is None]
        if not empty:
            return model
        slot = rng.choice(empty)
        batch.insert(slot, request(f"r{next_origin}", num_prompt=rng.randint(1, 4)))
        write_origin(batch, slot, next_origin)
        return model[:slot] + [next_origin] + model[slot + 1:]
    if op == "clear":
        slot = rng.randrange(n)
        batch.clear_slot(slot)
        return model[:slot] + [None] + model[slot + 1:]
    if op == "swap":
        i, j = rng.randrange(n), rng.randrange(n)
        batch.swap_states(i, j)
        model = list(model)
        model[i], model[j] = model[j], model[i]
        return model
    if op == "condense":
        moves = batch.condense()
        packed = [o for o in model if o is not None]
        new = packed + [None] * (n - len(packed))
        assert all(model[src] == new[dst] for src, dst in moves), moves
        return new
    swaps = batch.reorder_split_prefill_and_decode()  # "reorder"
    model = list(model)
    for i, j in swaps:
        model[i], model[j] = model[j], model[i]
    running = [is_decode_origin(o) for o in model if o is not None]
    assert running == sorted(running, reverse=True), f"a prefill slot precedes a decode slot: {model}"
    return model


@pytest.mark.parametrize("config_name", CONFIGS)
def test_input_batch_random_ops_match_slot_model(config_name):
    """200 seeded random inserts / clears / swaps / condenses / reorders against a list slot -> request."""
    rng = random.Random(1234)
    batch = _batch(config_name)
    fixed = mark_fixed_buffers(batch)
    model: list[int | None] = [None] * batch.num_slots
    op_names = ["insert", "insert", "clear", "swap", "swap", "condense", "reorder"]
    for step in range(200):
        op = rng.choice(op_names)
        version = batch.layout_version
        new = _model_after(op, batch, rng, model, next_origin=step)
        if op == "insert" and new is model:
            continue
        model = new
        assert batch.layout_version > version, op
        context = f"step {step} ({op}), model {model}"
        assert batch.req_ids == [None if o is None else f"r{o}" for o in model], context
        assert batch.req_id_to_slot == {f"r{o}": s for s, o in enumerate(model) if o is not None}, context
        assert_share_inputs(batch, {**expected_per_slot(batch, model), **fixed}, context)


MUTATIONS = {
    "insert": lambda b: b.insert(2, request("new")),
    "clear_slot": lambda b: b.clear_slot(0),
    "clear_empty_slot": lambda b: b.clear_slot(4),
    "swap_states": lambda b: b.swap_states(0, 1),
    "condense": lambda b: b.condense(),
    "condense_without_holes": lambda b: (b.condense(), b.condense()),
    "reorder_split_prefill_and_decode": lambda b: b.reorder_split_prefill_and_decode(),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_input_batch_layout_version_bumps_on_every_mutation(mutation):
    batch = _batch()
    batch.insert(0, request("a"))
    batch.insert(1, request("b"))
    version = batch.layout_version
    MUTATIONS[mutation](batch)
    assert batch.layout_version > version
    version = batch.layout_version
    batch.check()
    batch.slot_of("b")
    assert batch.occupied_slots
    assert batch.layout_version == version, "read-only calls must not bump"


def _meta(batch):
    si = batch.share_inputs
    return pre_process(input_ids=si["input_ids"], seq_lens_this_time=si["seq_lens_this_time"],
                       seq_lens_encoder=si["seq_lens_encoder"], seq_lens_decoder=si["seq_lens_decoder"],
                       token_num_cpu=batch.dims["max_num_batched_tokens"], draft_tokens=si["draft_tokens"],
                       layout_version=batch.layout_version)


def test_reorder_defect4_stale_output_index_rejected():
    """Defect 4: the refactor's review asked to swap batch_id_per_token_output together with
    cu_seqlens_q_output when the batch is reordered. Per-token slot ids and prefix sums cannot be
    permuted row-wise (a swap changes which rows every later slot owns), so ours never swaps them;
    instead a ForwardMeta built before the reorder is rejected. Slot 0 prefills 4 tokens (1 output
    row), slot 1 decodes 3 (3 rows); the reorder swaps them, so the stale cu_seqlens_q_output
    [0, 1, 4, ...] would give the decode request 1 row and the prefill request 3."""
    batch = _batch()
    batch.insert(0, request("prefill", num_prompt=4))
    batch.insert(1, request("decode", num_prompt=4))
    si = batch.share_inputs
    for key, value in (("seq_lens_encoder", 0), ("seq_lens_this_time", 3), ("seq_lens_decoder", 4)):
        si[key][1] = value
        si[key + "_cpu"][1] = value
    si["draft_tokens"][1] = paddle.to_tensor([40, 41, 42])
    stale = _meta(batch)
    stale.require_current(batch.layout_version, "speculative_sampler")
    assert stale.cu_seqlens_q_output.numpy()[:3].tolist() == [0, 1, 4]
    assert batch.reorder_split_prefill_and_decode() == [(0, 1)]
    with pytest.raises(StaleForwardMetaError, match="speculative_sampler: ForwardMeta was built for batch layout"):
        stale.require_current(batch.layout_version, "speculative_sampler")
    fresh = _meta(batch)
    fresh.require_current(batch.layout_version, "speculative_sampler")
    assert fresh.cu_seqlens_q_output.numpy()[:3].tolist() == [0, 3, 4]
    assert fresh.batch_id_per_token_output.numpy()[:4].tolist() == [0, 0, 0, 1]


def test_input_batch_buffers_feed_the_ops_as_declared():
    """share_inputs entries go straight into the ops (shapes, dtypes, [1] globals): slot 0 prefills 3
    tokens, slot 1 decodes 3; penalties and the state update accept every buffer without a reshape."""
    batch = _batch()
    batch.insert(0, request("p"))
    batch.insert(1, request("d", num_prompt=4))
    batch.set_eos_token_ids([2])
    si = batch.share_inputs
    si["seq_lens_encoder"][1], si["seq_lens_this_time"][1], si["seq_lens_decoder"][1] = 0, 3, 4
    meta = _meta(batch)
    logits = paddle.zeros([meta.output_capacity, 259], dtype="float32")
    ops.speculate_get_token_penalty_multi_scores(
        si["pre_ids"], logits, si["penalty_score"], si["frequency_score"], si["presence_score"], si["temperature"],
        si["bad_tokens"], si["bad_tokens_len"], si["step_idx"], si["min_dec_len"], si["eos_token_id"],
        si["seq_lens_this_time"], meta.batch_id_per_token_output, meta.cu_seqlens_q_output,
        draft_tokens=si["draft_tokens"])
    si["accept_num"][0] = 1
    si["accept_tokens"][0] = paddle.to_tensor([7, -1, -1])
    ops.speculate_update(si["seq_lens_encoder"], si["seq_lens_decoder"], si["not_need_stop"], si["draft_tokens"],
                         si["actual_draft_token_nums"], si["accept_tokens"], si["accept_num"], si["stop_flags"],
                         si["seq_lens_this_time"], si["is_block_step"], si["stop_nums"], si["mask_rollback"])
    assert si["seq_lens_decoder"].numpy()[:2].tolist() == [3, 4]  # prefill committed: Dec += E
    assert si["draft_tokens"].numpy()[0, 0] == 7 and bool(si["not_need_stop"].numpy()[0])
    batch.check()


def test_input_batch_row_moves_make_no_device_reads():
    batch = _batch()
    mirrors = [batch.share_inputs[s.mirror_name] for s in TARGET_BUFFERS if s.cpu_mirror]
    with forbid_host_reads(allow=mirrors):
        for slot in (0, 2, 3):
            batch.insert(slot, request(f"r{slot}"))
        batch.swap_states(0, 3)
        batch.clear_slot(2)
        batch.condense()
        batch.reorder_split_prefill_and_decode()
        batch.set_eos_token_ids([2])
    with forbid_host_reads(), pytest.raises(HostReadError):  # the guard is live
        batch.share_inputs["seq_lens_encoder"].numpy()


ROW_MOVES = ("_slot_tensors", "_reset_row", "_move_row", "_swap_rows", "swap_states", "condense", "clear_slot")


@pytest.mark.parametrize("method", ROW_MOVES)
def test_input_batch_row_moves_name_no_buffer(method):
    """swap / condense / clear loop over the table: no buffer name appears as a literal in them."""
    names = {s.name for s in TARGET_BUFFERS} | {s.mirror_name for s in TARGET_BUFFERS if s.cpu_mirror}
    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(InputBatch, method))))
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not literals & names, f"InputBatch.{method} names {sorted(literals & names)}"


def test_input_batch_new_buffer_is_covered_automatically():
    """A PER_SLOT buffer added to the table (with a mirror) is allocated, swapped, condensed and cleared."""
    extra = BufferSpec("new_per_slot_state", ("max_num_seqs", "max_model_len"), "int32", -5, BufferKind.PER_SLOT,
                       True, "a buffer no InputBatch method knows by name")
    batch, origins, fixed = _patterned(table=TARGET_BUFFERS + (extra,))
    assert {"new_per_slot_state", "new_per_slot_state_cpu"} <= set(batch.share_inputs)
    batch.swap_states(1, 4)
    batch.clear_slot(2)
    batch.condense()
    want = expected_per_slot(batch, [0, 4, 3, 1, None])
    assert_share_inputs(batch, {k: v for k, v in want.items() if k.startswith("new_per_slot_state")})
    assert_share_inputs(batch, {**want, **fixed})


def test_input_batch_insert_writes_request_fields():
    """Every field insert writes, device and mirror; everything else keeps its fill."""
    batch = _batch()
    req = request("a", num_prompt=4, max_tokens=6, min_tokens=2, temperature=0.5, top_p=0.9, top_k=7,
                  min_p=0.05, repetition_penalty=1.2, frequency_penalty=0.1, presence_penalty=0.3, seed=99,
                  bad_words_token_ids=[5, 6], enable_thinking=True, block_ids=[3, 9])
    batch.insert(2, req)
    row = {key: t.numpy()[2] for key, t in batch.share_inputs.items() if list(t.shape)[:1] == [batch.num_slots]}
    np.testing.assert_array_equal(row["input_ids"][:6], [10, 11, 12, 13, -1, -1])
    np.testing.assert_array_equal(row["prompt_ids"][:6], [10, 11, 12, 13, -1, -1])
    np.testing.assert_array_equal(row["bad_tokens"][:3], [5, 6, -1])
    np.testing.assert_array_equal(row["block_tables"], [3, 9, -1, -1])
    written = {"prompt_lens": 4, "seq_lens_this_time": 4, "seq_lens_encoder": 4, "seq_lens_decoder": 0,
               "step_idx": 0, "stop_flags": False, "is_block_step": False, "min_dec_len": 2, "max_dec_len": 7,
               "top_k": 7, "infer_seed": 99, "bad_tokens_len": 2, "enable_thinking": True, "accept_num": 0,
               "actual_draft_token_nums": 2}
    for key, want in written.items():
        assert row[key] == want, key
        if key + "_cpu" in row:
            assert row[key + "_cpu"] == want, key + "_cpu"
    np.testing.assert_allclose([row[k] for k in ("temperature", "top_p", "penalty_score", "frequency_score",
                                                 "presence_score", "min_p")], [0.5, 0.9, 1.2, 0.1, 0.3, 0.05],
                               rtol=1e-6)
    np.testing.assert_array_equal(row["draft_tokens"], [-1, -1, -1])
    assert batch.req_ids[2] == "a" and batch.slot_of("a") == 2
    assert batch.share_inputs["stop_flags"].numpy().tolist() == [True, True, False, True, True]


def test_input_batch_insert_seeds_unseeded_requests_distinctly():
    batch = _batch()
    batch.insert(0, request("a"))
    batch.insert(1, request("b"))
    batch.insert(2, request("c", seed=5))
    assert batch.share_inputs["infer_seed"].numpy()[:3].tolist() == [0, 1, 5]  # config.seed = 0


INSERT_ERRORS = {
    "empty_prompt": (2, dict(num_prompt=0), "prompt_token_ids has 0 tokens; allowed: 1..max_model_len - 1 = 11"),
    "prompt_fills_max_model_len": (2, dict(num_prompt=12), "prompt_token_ids has 12 tokens"),
    "max_tokens_past_max_model_len": (2, dict(num_prompt=10, max_tokens=3),
                                      "max_tokens = 3; allowed: 1..max_model_len - prompt length = 2"),
    "token_id_at_vocab_size": (2, dict(prompt_token_ids=[1, 259]),
                               "prompt_token_ids\\[1\\] = 259; allowed: 0..vocab_size - 1 = 258"),
    "negative_token_id": (2, dict(prompt_token_ids=[-1]), "prompt_token_ids\\[0\\] = -1"),
    "bad_word_id": (2, dict(bad_words_token_ids=[300]), "bad_words_token_ids\\[0\\] = 300"),
    "too_many_bad_words": (2, dict(bad_words_token_ids=[1] * 65),
                           "bad_words_token_ids has 65 entries; allowed: at most 64"),
    "block_id_past_num_blocks": (2, dict(block_ids=[64]),
                                 "block_ids\\[0\\] = 64; allowed: 0..scheduler.num_blocks - 1"),
    "too_many_blocks": (2, dict(block_ids=[0, 1, 2, 3, 4]), "block_ids has 5 entries; allowed: at most 4"),
    "slot_out_of_range": (5, {}, "insert: slot = 5; allowed: 0..max_num_seqs - 1 = 4"),
    "slot_occupied": (0, {}, "slot 0 holds request 'r0'"),
    "duplicate_req_id": (2, dict(req_id="r0"), "req_id 'r0' is already in slot 0"),
}


@pytest.mark.parametrize("case", INSERT_ERRORS)
def test_input_batch_insert_rejects_bad_request(case):
    slot, kwargs, message = INSERT_ERRORS[case]
    batch = _batch()
    batch.insert(0, request("r0"))
    version, before = batch.layout_version, {k: t.numpy().copy() for k, t in batch.share_inputs.items()}
    req = request(kwargs.pop("req_id", "new"), **kwargs)
    with pytest.raises(ValueError, match=message):
        batch.insert(slot, req)
    assert batch.layout_version == version and batch.req_ids[1:] == [None] * 4, "a refused insert changes nothing"
    assert_share_inputs(batch, before, "after a refused insert")


def test_input_batch_set_eos_token_ids():
    batch = _batch()
    batch.set_eos_token_ids([2, 7])
    assert batch.share_inputs["eos_token_id"].numpy().tolist() == [2, 7, -1, -1, -1, -1, -1, -1]
    for bad in ([], [259], list(range(9))):
        with pytest.raises(ValueError, match="eos_token_ids = .*allowed: 1..8 ids in 0..vocab_size - 1 = 258"):
            batch.set_eos_token_ids(bad)


def test_input_batch_needs_a_vocab_size_for_a_checkpoint():
    config = config_from_dict({"model": {"path": "/nonexistent/ckpt"}}, check_paths=False)
    with pytest.raises(ValueError, match="InputBatch vocab_size = None; allowed: an int >= 1"):
        InputBatch(config, CPU)
    assert InputBatch(config, CPU, vocab_size=1000).vocab_size == 1000
