"""LlamaModel: inference path vs training path, bit-exact batch invariance (packing, chunked prefill,
decode vs verify), RMSNorm invariance, token positions, and no host read in the step path.

The step helpers (make_meta, rows_of, TinySetup) are reused by test_mtp_model.py.
"""

import numpy as np
import paddle
import pytest

from specworker.model_executor.layers.rms_norm import RMSNorm
from specworker.model_executor.layers.rotary import RotaryEmbedding, apply_rotary, apply_rotary_factors
from specworker.model_executor.models.llama import LlamaArch, LlamaModel, token_positions
from specworker.model_executor.pre_and_post_process import pre_process
from tests.sync_guard import forbid_host_reads

ARCH = LlamaArch(vocab_size=259, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96,
                 rope_theta=10000.0, rms_norm_eps=1e-6)
BLOCK_SIZE, MAX_BLOCKS, MAX_LEN = 4, 16, 64  # 64 positions per slot
ATOL = 2e-5  # inference (fixed-order sums, paged attention) vs training (BLAS matmul, dense softmax)


def _t(a):
    return paddle.to_tensor(np.asarray(a))


def make_meta(slots: dict, n_slots: int, width: int, pad: int = 2):
    """ForwardMeta from per-slot (tokens, dec, prefill); prefill tokens via input_ids, decode via draft_tokens.

    Returns (meta, cu) with cu the numpy exclusive prefix sum of L (row start of each slot).
    """
    input_ids = np.full([n_slots, MAX_LEN], -1, np.int64)
    draft = np.full([n_slots, width], -1, np.int64)
    lens, enc, dec = (np.zeros(n_slots, np.int32) for _ in range(3))
    for b, (tokens, cached, prefill) in slots.items():
        lens[b], dec[b] = len(tokens), cached
        if prefill:
            input_ids[b, :len(tokens)], enc[b] = tokens, len(tokens)
        else:
            draft[b, :len(tokens)] = tokens
    meta = pre_process(input_ids=_t(input_ids), seq_lens_this_time=_t(lens), seq_lens_encoder=_t(enc),
                       seq_lens_decoder=_t(dec), token_num_cpu=int(lens.sum()) + pad, draft_tokens=_t(draft))
    return meta, np.concatenate([[0], np.cumsum(lens)])


def rows_of(array: np.ndarray, cu: np.ndarray, slot: int) -> np.ndarray:
    return array[cu[slot]:cu[slot + 1]]


def block_tables(n_slots: int) -> paddle.Tensor:
    """Slot b owns blocks b * MAX_BLOCKS .. (b + 1) * MAX_BLOCKS - 1."""
    return _t(np.arange(n_slots * MAX_BLOCKS, dtype=np.int32).reshape(n_slots, MAX_BLOCKS))


class TargetRunner:
    """Runs steps of the target on one fresh KV cache; returns hidden rows and logits as numpy."""

    def __init__(self, model: LlamaModel, n_slots: int):
        self.model, self.n_slots = model, n_slots
        self.kv = model.new_kv_cache(n_slots * MAX_BLOCKS, BLOCK_SIZE)
        self.tables = block_tables(n_slots)

    def step(self, slots: dict, width: int = 4):
        meta, cu = make_meta(slots, self.n_slots, width)
        hidden = self.model(meta.ids_remove_padding, meta, self.kv, self.tables)
        return hidden.numpy(), self.model.compute_logits(hidden).numpy(), cu


@pytest.fixture(scope="module")
def model():
    paddle.seed(7)
    return LlamaModel(ARCH)


def _tokens(seed: int, n: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 256, n).tolist()


def test_llama_inference_matches_training_path(model):
    """Two prompts prefilled together, then chunked continuation and decode, vs forward_train on whole sequences."""
    a, b = _tokens(1, 23), _tokens(2, 11)
    run = TargetRunner(model, 2)
    h1, _, cu1 = run.step({0: (a[:9], 0, True), 1: (b[:8], 0, True)})
    h2, _, cu2 = run.step({0: (a[9:20], 9, True), 1: (b[8:11], 8, False)})
    h3, _, cu3 = run.step({0: (a[20:23], 20, False)})
    got_a = np.concatenate([rows_of(h1, cu1, 0), rows_of(h2, cu2, 0), rows_of(h3, cu3, 0)])
    got_b = np.concatenate([rows_of(h1, cu1, 1), rows_of(h2, cu2, 1)])
    for got, seq in ((got_a, a), (got_b, b)):
        want = model.forward_train(_t(np.array([seq], np.int64))).numpy()[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
        logits_want = model.logits_train(_t(want)).numpy()
        np.testing.assert_allclose(model.compute_logits(_t(got)).numpy(), logits_want, rtol=0, atol=ATOL * 10)


def test_llama_rows_invariant_to_packing(model):
    """A request's rows and logits are bit-identical alone in slot 0 and packed in slot 2 with other lengths."""
    a, b, c = _tokens(3, 7), _tokens(4, 13), _tokens(5, 9)
    alone = TargetRunner(model, 3)
    h_alone, l_alone, cu_alone = alone.step({0: (a, 0, True)})
    packed = TargetRunner(model, 3)
    packed.step({1: (c[:6], 0, True)})
    h_packed, l_packed, cu_packed = packed.step({0: (b, 0, True), 1: (c[6:9], 6, False), 2: (a, 0, True)})
    assert np.array_equal(rows_of(h_alone, cu_alone, 0), rows_of(h_packed, cu_packed, 2))
    assert np.array_equal(rows_of(l_alone, cu_alone, 0), rows_of(l_packed, cu_packed, 2))


def test_llama_chunked_prefill_bit_exact(model):
    """Prefill in one step vs in chunks of 8, 7, 5: identical rows and logits."""
    a = _tokens(6, 20)
    h_one, l_one, cu_one = TargetRunner(model, 1).step({0: (a, 0, True)})
    run = TargetRunner(model, 1)
    parts = [run.step({0: (a[s:e], s, True)}) for s, e in ((0, 8), (8, 15), (15, 20))]
    assert np.array_equal(np.concatenate([rows_of(h, cu, 0) for h, _, cu in parts]), rows_of(h_one, cu_one, 0))
    assert np.array_equal(np.concatenate([rows_of(lg, cu, 0) for _, lg, cu in parts]), rows_of(l_one, cu_one, 0))


def test_llama_verify_rows_equal_decode_rows(model):
    """Decoding 4 tokens one per step vs one 4-token verify step after the same prefix: identical rows."""
    prefix, new = _tokens(7, 10), _tokens(8, 4)
    dec = TargetRunner(model, 2)
    dec.step({1: (prefix, 0, True)})
    one_by_one = [dec.step({1: ([tok], 10 + i, False)}) for i, tok in enumerate(new)]
    ver = TargetRunner(model, 2)
    ver.step({0: (_tokens(9, 5), 0, True), 1: (prefix, 0, True)})
    h_ver, l_ver, cu_ver = ver.step({0: (_tokens(10, 3), 5, False), 1: (new, 10, False)})
    assert np.array_equal(np.concatenate([rows_of(h, cu, 1) for h, _, cu in one_by_one]), rows_of(h_ver, cu_ver, 1))
    assert np.array_equal(np.concatenate([rows_of(lg, cu, 1) for _, lg, cu in one_by_one]), rows_of(l_ver, cu_ver, 1))


def test_llama_packed_weights_change_no_bit():
    """pack_weights() (float32 panels where N % 32 == 0: q/k/v, o, gate/up, down; the 259-wide lm_head
    stays [K, N]) gives the unpacked model's bits; bfloat16 packing gives the bits of a model whose
    weights were rounded to bfloat16, and packs the lm_head's rounded values too."""
    paddle.seed(7)
    plain, packed, bf16, rounded = (LlamaModel(ARCH) for _ in range(4))
    for m in (packed, bf16, rounded):
        m.set_state_dict(plain.state_dict())
    packed.pack_weights()
    bf16.pack_weights("bfloat16")
    assert len(packed.layers[0].attn.linear_weight("qkv_proj").shape) == 3
    assert packed.linear_weight("lm_head") is packed.lm_head
    slots = {0: (_tokens(12, 9), 0, True), 1: (_tokens(13, 4), 0, True)}
    h_plain, l_plain, _ = TargetRunner(plain, 2).step(slots)
    h_packed, l_packed, _ = TargetRunner(packed, 2).step(slots)
    assert np.array_equal(h_plain, h_packed) and np.array_equal(l_plain, l_packed)
    for name, p in rounded.named_parameters():
        if name.endswith(("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")):
            p.set_value(paddle.cast(paddle.cast(p, "bfloat16"), "float32"))
    h_bf16, l_bf16, _ = TargetRunner(bf16, 2).step(slots)
    h_rounded, l_rounded, _ = TargetRunner(rounded, 2).step(slots)
    assert np.array_equal(h_bf16, h_rounded) and np.array_equal(l_bf16, l_rounded)
    assert not np.array_equal(h_bf16, h_plain)


def test_llama_padding_rows_finite(model):
    """Rows past T (ids -1, batch id -1) never index the embedding out of range and stay finite."""
    hidden, logits, cu = TargetRunner(model, 2).step({1: (_tokens(11, 3), 0, True)})
    assert hidden.shape[0] == 5 and np.isfinite(hidden).all() and np.isfinite(logits).all()


def test_llama_forward_makes_no_host_read(model):
    run = TargetRunner(model, 2)
    meta, _ = make_meta({0: (_tokens(12, 5), 0, True), 1: (_tokens(13, 2), 0, True)}, 2, 3)
    with forbid_host_reads():
        hidden = model(meta.ids_remove_padding, meta, run.kv, run.tables)
        model.compute_logits(hidden)


def test_token_positions_literal():
    """cu_seqlens_q [0, 2, 2, 3], Dec [5, 0, 0], batch ids [0, 0, 2, -1] -> positions [5, 6, 0, (any)]."""
    meta, _ = make_meta({0: ([1, 2], 5, False), 2: ([3], 0, True)}, 3, 2, pad=1)
    np.testing.assert_array_equal(meta.cu_seqlens_q.numpy(), [0, 2, 2, 3])
    np.testing.assert_array_equal(token_positions(meta, 4).numpy()[:3], [5, 6, 0])


def test_rms_norm_batch_invariant():
    """A row normalised alone, among 3 rows, or among 257 rows has the same bits (odd width 67)."""
    paddle.seed(3)
    norm = RMSNorm(67, 1e-6)
    norm.weight.set_value(paddle.rand([67]) + 0.5)
    x = np.random.default_rng(0).standard_normal([257, 67]).astype(np.float32) * 3
    full = norm(_t(x)).numpy()
    for rows in ([5], [4, 5, 6], list(range(1, 257, 2))):
        part = norm(_t(x[rows])).numpy()
        assert np.array_equal(part[rows.index(5)], full[5])
    np.testing.assert_allclose(full, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * norm.weight.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_rotary_scores_depend_only_on_offset():
    """RoPE: <rot(q, m), rot(k, n)> depends on m - n only (checked against a numpy dot product)."""
    rope = RotaryEmbedding(8, 10000.0, 64)
    rng = np.random.default_rng(1)
    q, k = (_t(rng.standard_normal([1, 1, 8]).astype(np.float32)) for _ in range(2))

    def score(m, n):
        cq, sq = rope.tables(_t(np.array([m])))
        ck, sk = rope.tables(_t(np.array([n])))
        return float((apply_rotary(q, cq, sq) * apply_rotary(k, ck, sk)).sum())

    assert score(10, 7) == pytest.approx(score(33, 30), abs=1e-5)
    assert score(10, 7) != pytest.approx(score(10, 8), abs=1e-3)
    assert score(0, 0) == pytest.approx(float((q * k).sum()), abs=1e-6)


def test_rotary_factors_give_apply_rotary_bits():
    """The inference path's four-op rotation (x * [c, c] + roll(x) * [-s, s]) has the bits of the
    half-split formula at every position and head (large and odd values included)."""
    rope = RotaryEmbedding(64, 10000.0, 4096)
    rng = np.random.default_rng(2)
    positions = _t(np.array([0, 1, 7, 100, 4095, 5000], np.int32))  # 5000 is clamped to 4095
    x = _t((rng.standard_normal([6, 5, 64]) * np.array([1e-3, 1, 1e4, 3, 7])[None, :, None]).astype(np.float32))
    cos, sin = rope.tables(positions)
    want = apply_rotary(x, cos, sin)
    got = apply_rotary_factors(x, *rope.factors(positions))
    assert np.array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))
