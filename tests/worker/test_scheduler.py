"""Scheduler and BlockManager (host only): FCFS admission, whole-budget block reservation, KV
exhaustion queues instead of corrupting, prefill chunking by max_num_batched_tokens, decode first."""

import pytest

from specworker.config import config_from_dict
from specworker.sampling_params import SamplingParams
from specworker.worker.block_manager import BlockManager
from specworker.worker.request import RequestState, RequestStatus
from specworker.worker.scheduler import Scheduler


def _config(**sched):
    base = dict(max_num_seqs=3, max_model_len=32, block_size=4, num_blocks=16, max_num_batched_tokens=12)
    base.update(sched)
    return config_from_dict({"scheduler": base}, check_paths=False)


def _req(i, prompt_len, max_tokens=4):
    return RequestState(req_id=f"r{i}", prompt_token_ids=[1] * prompt_len,
                        params=SamplingParams(max_tokens=max_tokens), arrival=i)


def test_block_manager_allocates_all_or_nothing_and_rejects_double_free():
    bm = BlockManager(4, 2)
    assert bm.blocks_for(5) == 3 and bm.blocks_for(4) == 2 and bm.blocks_for(0) == 0
    a = bm.allocate(3)
    assert a == [0, 1, 2] and bm.num_free == 1 and not bm.can_allocate(2)
    with pytest.raises(RuntimeError, match="1 of 4 free"):
        bm.allocate(2)
    assert bm.num_free == 1
    bm.free(a[:2])
    with pytest.raises(ValueError, match="block 0 is not allocated"):
        bm.free([0])
    assert bm.num_free == 3


def test_scheduler_reserves_prompt_plus_max_tokens_plus_lookahead():
    sched = Scheduler(_config(), BlockManager(16, 4))
    # 5 prompt + 4 generated + D = 1 lookahead = 10 positions -> 3 blocks of 4
    assert sched.blocks_needed(_req(0, 5, 4)) == 3


def test_scheduler_admits_fcfs_until_slots_run_out():
    sched = Scheduler(_config(), BlockManager(16, 4))
    reqs = [_req(i, 2) for i in range(5)]
    for r in reqs:
        sched.add(r)
    out = sched.schedule()
    assert [r.req_id for r in out.admitted] == ["r0", "r1", "r2"]
    assert [c.req.req_id for c in out.prefill] == ["r0", "r1", "r2"]
    assert [r.req_id for r in sched.waiting] == ["r3", "r4"]
    assert out.token_num == 6


def test_scheduler_kv_exhaustion_queues_then_completes():
    """Two requests need 3 blocks each, only 4 exist: the second waits (never shares or steals blocks)
    and is admitted once the first returns its blocks."""
    bm = BlockManager(4, 4)
    sched = Scheduler(_config(num_blocks=8), bm)
    a, b = _req(0, 5, 4), _req(1, 5, 4)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert out.admitted == [a] and b.status is RequestStatus.WAITING and bm.num_free == 1
    assert sched.schedule().admitted == []  # still no room
    sched.remove(a)
    assert bm.num_free == 4 and a.status is RequestStatus.FINISHED
    out = sched.schedule()
    assert out.admitted == [b] and set(b.block_ids).isdisjoint(set()) and len(b.block_ids) == 3


def test_scheduler_fcfs_head_blocks_later_small_requests():
    """Strict FCFS: a big request at the head is not overtaken by a small one behind it."""
    bm = BlockManager(4, 4)
    sched = Scheduler(_config(num_blocks=8), bm)
    big, small1, small2 = _req(0, 9, 4), _req(1, 1, 1), _req(2, 1, 1)  # 4 blocks, 1 block, 1 block
    sched.add(small1)
    sched.add(big)
    sched.add(small2)
    assert sched.schedule().admitted == [small1]  # big needs 4, only 3 left: small2 waits behind it
    assert list(sched.waiting) == [big, small2]


def test_scheduler_chunks_prefill_after_decode_budget():
    """Budget 12: two decode slots take D = 1 each; the prefills share the remaining 10 in FCFS order,
    and a prefill with nothing left is paused."""
    sched = Scheduler(_config(max_num_seqs=4, max_model_len=64, num_blocks=64), BlockManager(64, 4))
    d1, d2, p1, p2 = _req(0, 3), _req(1, 3), _req(2, 7), _req(3, 9)
    for r in (d1, d2, p1, p2):
        sched.add(r)
    sched.schedule()
    d1.num_prefilled, d2.num_prefilled = 3, 3
    p1.num_prefilled = 0
    p2.num_prefilled = 0
    out = sched.schedule()
    assert out.decode == [d1, d2]
    assert [(c.req.req_id, c.start, c.length, c.is_last) for c in out.prefill] == [("r2", 0, 7, True),
                                                                                   ("r3", 0, 3, False)]
    assert out.paused == [] and out.token_num == 12
    p1.num_prefilled, p2.num_prefilled = 7, 3
    out = sched.schedule()
    assert [(c.req.req_id, c.start, c.length, c.is_last) for c in out.prefill] == [("r3", 3, 6, True)]
    assert out.token_num == 3 + 6


def test_scheduler_pauses_prefill_without_budget():
    """Budget 3: one decode slot takes 1, the first prefill gets a 2-token chunk, the second is paused."""
    sched = Scheduler(_config(max_num_seqs=3, max_num_batched_tokens=3), BlockManager(16, 4))
    a, b, c = _req(0, 1), _req(1, 5), _req(2, 5)
    for r in (a, b, c):
        sched.add(r)
    sched.schedule()
    a.num_prefilled = 1
    out = sched.schedule()
    assert out.decode == [a]
    assert [(ch.req.req_id, ch.start, ch.length) for ch in out.prefill] == [("r1", 0, 2)]
    assert out.paused == [c] and out.token_num == 3


def test_scheduler_gives_unused_decode_lookahead_to_prefills():
    """D = 3 (k = 2), budget 12: two decode slots whose policy allows k_b = 0 feed 1 token each, so the prefill
    gets 10 tokens, not 12 - 2 * 3 = 6; a bound outside 0..D per slot is a bug and raises."""
    config = config_from_dict({"scheduler": dict(max_num_seqs=3, max_model_len=64, block_size=4, num_blocks=64,
                                                 max_num_batched_tokens=12),
                               "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}},
                              check_paths=False)
    sched = Scheduler(config, BlockManager(64, 4))
    d1, d2, p = _req(0, 3), _req(1, 3), _req(2, 20)
    for r in (d1, d2, p):
        sched.add(r)
    sched.schedule()
    d1.num_prefilled, d2.num_prefilled, p.num_prefilled = 3, 3, 0
    out = sched.schedule()  # default: D each
    assert [(c.start, c.length) for c in out.prefill] == [(0, 6)] and out.token_num == 12
    seen = []
    out = sched.schedule(lambda decode: seen.append(list(decode)) or len(decode))
    assert seen == [[d1, d2]]
    assert [(c.start, c.length) for c in out.prefill] == [(0, 10)] and out.token_num == 12
    with pytest.raises(AssertionError, match="decode_tokens gave 7 for 2 decode requests"):
        sched.schedule(lambda decode: 7)
