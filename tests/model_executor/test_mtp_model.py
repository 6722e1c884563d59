"""MTPDraft: inference vs training path, bit-exact batch invariance (packing, chunked prefill, decode vs
verify), shared target weights, and no host read in the step path.
"""

import numpy as np
import paddle
import pytest

from specworker.model_executor.models.llama import LlamaModel
from specworker.model_executor.models.mtp import MTPDraft
from tests.model_executor.test_llama import ARCH, ATOL, BLOCK_SIZE, MAX_BLOCKS, block_tables, make_meta, rows_of
from tests.sync_guard import forbid_host_reads

H = ARCH.hidden_size


class DraftRunner:
    """Runs draft steps on one fresh one-layer KV cache; per-slot (tokens, prev_hidden rows, dec, prefill)."""

    def __init__(self, draft: MTPDraft, n_slots: int):
        self.draft, self.n_slots = draft, n_slots
        self.kv = draft.new_kv_cache(n_slots * MAX_BLOCKS, BLOCK_SIZE)
        self.tables = block_tables(n_slots)

    def step(self, slots: dict, width: int = 4):
        meta, cu = make_meta({b: (tok, dec, pre) for b, (tok, _, dec, pre) in slots.items()}, self.n_slots, width)
        prev = np.zeros([meta.token_num, H], np.float32)
        for b, (_, hid, _, _) in slots.items():
            prev[cu[b]:cu[b + 1]] = hid
        out = self.draft(meta.ids_remove_padding, paddle.to_tensor(prev), meta, self.kv, self.tables)
        return out.numpy(), self.draft.compute_logits(out).numpy(), cu


@pytest.fixture(scope="module")
def draft():
    paddle.seed(11)
    return MTPDraft(LlamaModel(ARCH))


def _request(seed: int, n: int):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, n).tolist(), rng.standard_normal([n, H]).astype(np.float32)


def test_mtp_inference_matches_training_path(draft):
    (a, ha), (b, hb) = _request(1, 17), _request(2, 6)
    run = DraftRunner(draft, 2)
    o1, _, cu1 = run.step({0: (a[:10], ha[:10], 0, True), 1: (b[:4], hb[:4], 0, True)})
    o2, _, cu2 = run.step({0: (a[10:17], ha[10:17], 10, True), 1: (b[4:6], hb[4:6], 4, False)})
    for slot, seq, hid in ((0, a, ha), (1, b, hb)):
        got = np.concatenate([rows_of(o1, cu1, slot), rows_of(o2, cu2, slot)])
        want = draft.forward_train(paddle.to_tensor([seq]), paddle.to_tensor(hid[None])).numpy()[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_mtp_rows_invariant_to_packing(draft):
    (a, ha), (b, hb), (c, hc) = _request(3, 5), _request(4, 12), _request(5, 8)
    o_alone, l_alone, cu_alone = DraftRunner(draft, 3).step({0: (a, ha, 0, True)})
    packed = DraftRunner(draft, 3)
    packed.step({0: (c[:6], hc[:6], 0, True)})
    o_pack, l_pack, cu_pack = packed.step({0: (c[6:8], hc[6:8], 6, False), 1: (a, ha, 0, True), 2: (b, hb, 0, True)})
    assert np.array_equal(rows_of(o_alone, cu_alone, 0), rows_of(o_pack, cu_pack, 1))
    assert np.array_equal(rows_of(l_alone, cu_alone, 0), rows_of(l_pack, cu_pack, 1))


def test_mtp_chunked_prefill_bit_exact(draft):
    a, ha = _request(6, 19)
    o_one, _, cu_one = DraftRunner(draft, 1).step({0: (a, ha, 0, True)})
    run = DraftRunner(draft, 1)
    parts = [run.step({0: (a[s:e], ha[s:e], s, True)}) for s, e in ((0, 4), (4, 13), (13, 19))]
    assert np.array_equal(np.concatenate([rows_of(o, cu, 0) for o, _, cu in parts]), rows_of(o_one, cu_one, 0))


def test_mtp_verify_rows_equal_decode_rows(draft):
    (p, hp), (new, hnew) = _request(7, 9), _request(8, 3)
    dec = DraftRunner(draft, 2)
    dec.step({0: (p, hp, 0, True)})
    singles = [dec.step({0: ([new[i]], hnew[i:i + 1], 9 + i, False)}) for i in range(3)]
    ver = DraftRunner(draft, 2)
    ver.step({0: (p, hp, 0, True), 1: _request(9, 4)[:2] + (0, True)})
    o_ver, l_ver, cu_ver = ver.step({0: (new, hnew, 9, False)})
    assert np.array_equal(np.concatenate([rows_of(o, cu, 0) for o, _, cu in singles]), rows_of(o_ver, cu_ver, 0))
    assert np.array_equal(np.concatenate([rows_of(lg, cu, 0) for _, lg, cu in singles]), rows_of(l_ver, cu_ver, 0))


def test_mtp_shares_target_embedding_norm_and_lm_head(draft):
    """Only enorm, hnorm, eh_proj and the layer are the draft's own; logits are the target's."""
    names = {name.split(".")[0] for name, _ in draft.named_parameters()}
    assert names == {"enorm", "hnorm", "eh_proj", "layer"}
    rows = paddle.to_tensor(np.random.default_rng(0).standard_normal([3, H]).astype(np.float32))
    assert np.array_equal(draft.compute_logits(rows).numpy(), draft.target.compute_logits(rows).numpy())


def test_mtp_forward_makes_no_host_read(draft):
    run = DraftRunner(draft, 2)
    (a, ha) = _request(10, 4)
    meta, _ = make_meta({1: (a, 0, True)}, 2, 3)
    prev = paddle.to_tensor(np.concatenate([ha, np.zeros([2, H], np.float32)]))
    with forbid_host_reads():
        out = draft(meta.ids_remove_padding, prev, meta, run.kv, run.tables)
        draft.compute_logits(out)


@pytest.mark.parametrize("anchor", [0, 5])
def test_mtp_unrolled_training_matches_chained_substeps(draft, anchor):
    """forward_train_unrolled's substep s at position anchor + s - 1 equals the engine's chain: substep 1 over
    positions 0..anchor (token, target hidden), then one position per substep fed the draft's own last hidden
    row; the draft KV of position anchor + 1 is substep 2's when substep 3 reads it (anchor 0: no earlier
    substep-1 keys besides position 0)."""
    tokens, hidden = _request(12 + anchor, anchor + 3)
    run = DraftRunner(draft, 1)
    out, _, cu = run.step({0: (tokens[:anchor + 1], hidden[:anchor + 1], 0, True)})
    chain = [rows_of(out, cu, 0)[-1]]
    for s in (1, 2):
        out, _, cu = run.step({0: ([tokens[anchor + s]], chain[-1][None], anchor + s, False)})
        chain.append(rows_of(out, cu, 0)[0])
    unrolled = draft.forward_train_unrolled(paddle.to_tensor([tokens]), paddle.to_tensor(hidden[None]), 3)
    for s in range(3):
        np.testing.assert_allclose(chain[s], unrolled[s].numpy()[0, anchor + s], rtol=0, atol=ATOL)


def test_mtp_unrolled_first_substep_is_forward_train(draft):
    tokens, hidden = _request(20, 9)
    ids, hid = paddle.to_tensor([tokens]), paddle.to_tensor(hidden[None])
    np.testing.assert_allclose(draft.forward_train_unrolled(ids, hid, 2)[0].numpy(),
                               draft.forward_train(ids, hid).numpy(), rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match="num_substeps = 0"):
        draft.forward_train_unrolled(ids, hid, 0)
