"""pre_process: literal and randomized cases, fused == unfused field by field, the host-read guard,
and review defects 1, 2, 3, 6."""

import ast
import dataclasses
import inspect

import numpy as np
import paddle
import pytest

from specworker.model_executor import ops, pre_and_post_process
from specworker.model_executor.forward_meta import ForwardMeta, StaleForwardMetaError
from specworker.model_executor.pre_and_post_process import gather_logit_rows, pre_process, pre_process_unfused
from reference.cases.step_batch import all_cases, make_step_batch
from reference.pre_process import ref_pre_process
from tests.sync_guard import HostReadError, forbid_host_reads

FIELDS = ("ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k", "seq_lens_output",
          "batch_id_per_token_output", "cu_seqlens_q_output")


def _t(a):
    return paddle.to_tensor(np.asarray(a))


def _non_speculative(batch):
    """Non-speculative decode slots feed exactly one token."""
    batch.seq_lens_this_time = np.where(batch.seq_lens_encoder > 0, batch.seq_lens_this_time,
                                        np.minimum(batch.seq_lens_this_time, 1)).astype(np.int32)
    return batch


def _inputs(batch, speculative, capacity=None):
    if not speculative:
        _non_speculative(batch)
    return dict(
        input_ids=_t(batch.input_ids),
        seq_lens_this_time=_t(batch.seq_lens_this_time),
        seq_lens_encoder=_t(batch.seq_lens_encoder),
        seq_lens_decoder=_t(batch.seq_lens_decoder),
        token_num_cpu=batch.token_num if capacity is None else capacity,
        draft_tokens=_t(batch.draft_tokens) if speculative else None,
    )


def _run(batch, speculative, capacity=None):
    return pre_process(**_inputs(batch, speculative, capacity))


def _assert_matches_reference(meta, batch, speculative, capacity=None):
    token_num = batch.token_num if capacity is None else capacity
    ref = ref_pre_process(batch.input_ids, batch.seq_lens_this_time, batch.seq_lens_encoder, token_num,
                          batch.draft_tokens if speculative else None)
    meta.check()
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(meta, name).numpy(), ref[name], err_msg=name)


def test_pre_process_three_slots_literal():
    """Slot 0 decodes 3 tokens (last accepted + 2 drafts), slot 1 is idle, slot 2 prefills 4."""
    input_ids = np.array([[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]], np.int64)
    draft_tokens = np.array([[7, 8, 9], [-1, -1, -1], [-1, -1, -1]], np.int64)
    meta = pre_process(
        input_ids=_t(input_ids),
        seq_lens_this_time=_t(np.array([3, 0, 4], np.int32)),
        seq_lens_encoder=_t(np.array([0, 0, 4], np.int32)),
        seq_lens_decoder=_t(np.array([5, 0, 0], np.int32)),
        token_num_cpu=7,
        draft_tokens=_t(draft_tokens),
    )
    np.testing.assert_array_equal(meta.ids_remove_padding.numpy(), [7, 8, 9, 30, 31, 32, 33])
    np.testing.assert_array_equal(meta.batch_id_per_token.numpy(), [0, 0, 0, 2, 2, 2, 2])
    np.testing.assert_array_equal(meta.cu_seqlens_q.numpy(), [0, 3, 3, 7])
    np.testing.assert_array_equal(meta.cu_seqlens_k.numpy(), [0, 3, 3, 7])
    np.testing.assert_array_equal(meta.seq_lens_output.numpy(), [3, 0, 1])
    np.testing.assert_array_equal(meta.cu_seqlens_q_output.numpy(), [0, 3, 3, 4])
    np.testing.assert_array_equal(meta.batch_id_per_token_output.numpy(), [0, 0, 0, 2, -1, -1, -1, -1, -1])
    assert meta.output_capacity == 9 and meta.num_draft_tokens == 2 and meta.speculative


def test_pre_process_non_speculative_literal():
    """Non-speculative: decode slots read input_ids[b, 0]; one output row per running slot."""
    input_ids = np.array([[10, 11, 12], [20, 21, 22], [30, 31, 32]], np.int64)
    meta = pre_process(
        input_ids=_t(input_ids),
        seq_lens_this_time=_t(np.array([1, 2, 0], np.int32)),
        seq_lens_encoder=_t(np.array([0, 2, 0], np.int32)),
        seq_lens_decoder=_t(np.array([9, 0, 0], np.int32)),
        token_num_cpu=4,
    )
    np.testing.assert_array_equal(meta.ids_remove_padding.numpy(), [10, 20, 21, -1])
    np.testing.assert_array_equal(meta.batch_id_per_token.numpy(), [0, 1, 1, -1])
    np.testing.assert_array_equal(meta.cu_seqlens_q_output.numpy(), [0, 1, 2, 2])
    np.testing.assert_array_equal(meta.batch_id_per_token_output.numpy(), [0, 1, -1])
    assert not meta.speculative and meta.output_capacity == 3


@pytest.mark.parametrize("speculative", [True, False], ids=["spec", "nonspec"])
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_pre_process_matches_reference(bsz, kind, seed, speculative):
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    _assert_matches_reference(_run(batch, speculative), batch, speculative)


@pytest.mark.parametrize("extra", [1, 57])
def test_pre_process_capacity_above_token_num(extra):
    batch = make_step_batch(np.random.default_rng(extra), 17, "mixed")
    meta = _run(batch, True, capacity=batch.token_num + extra)
    _assert_matches_reference(meta, batch, True, capacity=batch.token_num + extra)
    assert (meta.batch_id_per_token.numpy()[batch.token_num:] == -1).all()


def test_pre_process_zero_tokens():
    batch = make_step_batch(np.random.default_rng(3), 5, "all_stopped")
    meta = _run(batch, True)
    _assert_matches_reference(meta, batch, True)
    assert meta.token_num == 0 and meta.cu_seqlens_q_output.numpy().tolist() == [0] * 6


def _assert_same_meta(fused, unfused):
    for field in dataclasses.fields(ForwardMeta):
        a, b = getattr(fused, field.name), getattr(unfused, field.name)
        if isinstance(b, paddle.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape, (field.name, a.dtype, a.shape, b.dtype, b.shape)
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=field.name)
        else:
            assert type(a) is type(b) and a == b, (field.name, a, b)


@pytest.mark.parametrize("extra", [0, 9])
@pytest.mark.parametrize("speculative", [True, False], ids=["spec", "nonspec"])
@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_pre_process_fused_equals_unfused_field_by_field(bsz, kind, seed, speculative, extra):
    """pre_process (one speculate_pre_process op) and pre_process_unfused (three ops) build the same
    ForwardMeta: every tensor field equal in dtype, shape and value, every host field equal."""
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    inputs = _inputs(batch, speculative, capacity=batch.token_num + extra)
    fused = pre_process(**inputs, layout_version=seed)
    unfused = pre_process_unfused(**inputs, layout_version=seed)
    fused.check()
    _assert_same_meta(fused, unfused)


def test_pre_process_fused_equality_check_can_fail():
    """The field-by-field comparison catches a one-entry difference in an output-side tensor."""
    batch = make_step_batch(np.random.default_rng(2), 17, "mixed")
    inputs = _inputs(batch, True)
    fused, unfused = pre_process(**inputs), pre_process_unfused(**inputs)
    broken = fused.batch_id_per_token_output.numpy().copy()
    broken[-1] = 0
    fused.batch_id_per_token_output = _t(broken)
    with pytest.raises(AssertionError, match="batch_id_per_token_output"):
        _assert_same_meta(fused, unfused)


@pytest.mark.parametrize("speculative", [True, False])
def test_pre_process_reads_no_device_value_on_host(speculative):
    """docs/spec.md §2: the step path never reads a device value on the host (no .item()/.numpy()/bool())."""
    batch = make_step_batch(np.random.default_rng(11), 17, "mixed")
    if not speculative:
        _non_speculative(batch)
    inputs = dict(input_ids=_t(batch.input_ids), seq_lens_this_time=_t(batch.seq_lens_this_time),
                  seq_lens_encoder=_t(batch.seq_lens_encoder), seq_lens_decoder=_t(batch.seq_lens_decoder),
                  token_num_cpu=batch.token_num, draft_tokens=_t(batch.draft_tokens) if speculative else None)
    ops.load_ops()
    hidden = paddle.randn([batch.token_num, 8])
    with forbid_host_reads():
        meta = pre_process(**inputs)
        gather_logit_rows(hidden, meta)
    _assert_matches_reference(meta, batch, speculative)


def test_host_read_guard_can_fail():
    """The guard itself catches the refactor's `.item()` on the output count."""
    with forbid_host_reads(), pytest.raises(HostReadError):
        paddle.to_tensor([1, 2]).sum().item()


def test_pre_process_step_path_has_no_host_read_calls():
    """Static check of the step-path module: no .item()/.numpy()/.tolist() and no platform branch."""
    tree = ast.parse(inspect.getsource(pre_and_post_process))
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert not {"item", "numpy", "tolist", "cpu"} & set(calls)


def test_pre_process_defect1_no_platform_branch_leaves_variables_undefined():
    """Defect 1: the refactor's pre_process special-cased CUDA/MACA/Iluvatar non-speculative and
    left outputs undefined on any other platform/mode pair. Ours has one path: no branch on the
    platform, and every (device, mode) combination returns a fully populated ForwardMeta."""
    tree = ast.parse(inspect.getsource(pre_and_post_process))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.kwonlyargs + n.args.args}
    for marker in ("is_compiled_with_cuda", "current_platform", "is_cuda", "get_device", "place", "CUDAPlace"):
        assert marker not in names, f"pre_and_post_process branches on the platform ({marker})"
    batch = make_step_batch(np.random.default_rng(5), 3, "mixed")
    for speculative in (True, False):
        meta = _run(batch, speculative)
        missing = [f.name for f in ForwardMeta.__dataclass_fields__.values() if getattr(meta, f.name) is None]
        assert not missing, f"speculative={speculative}: fields left unset: {missing}"


def test_pre_process_defect2_single_return_type():
    """Defect 2: the refactor returned a tuple whose arity changed between callers/platforms.
    Ours returns a ForwardMeta in every mode, with the same set of fields."""
    batch = make_step_batch(np.random.default_rng(6), 3, "mixed")
    metas = [_run(batch, s) for s in (True, False)]
    assert all(type(m) is ForwardMeta for m in metas)
    assert not isinstance(metas[0], tuple)
    assert inspect.signature(pre_process).return_annotation in (ForwardMeta, "ForwardMeta")


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_pre_process_defect3_output_side_copies_no_input_ids(monkeypatch, fused):
    """Defect 3: the refactor passed `input_ids + 0` to the output-side get_padding_offset only to
    discard the packed ids. Ours hands input_ids itself to exactly one op (the fused op, or the
    input-side get_padding_offset with the output side index-only) and never copies it."""
    calls = {"get_padding_offset": [], "speculate_pre_process": []}
    real_gpo, real_spp = ops.get_padding_offset, ops.speculate_pre_process

    def spy_gpo(input_ids, *args):
        calls["get_padding_offset"].append(input_ids)
        return real_gpo(input_ids, *args)

    def spy_spp(token_num_cpu, input_ids, *args):
        calls["speculate_pre_process"].append(input_ids)
        return real_spp(token_num_cpu, input_ids, *args)

    monkeypatch.setattr(ops, "get_padding_offset", spy_gpo)
    monkeypatch.setattr(ops, "speculate_pre_process", spy_spp)
    batch = make_step_batch(np.random.default_rng(7), 17, "mixed")
    input_ids = _t(batch.input_ids)
    copies = []
    for name in ("__add__", "__radd__", "clone"):
        orig = getattr(paddle.Tensor, name)

        def watch(self, *a, _orig=orig, _name=name, **k):
            if self is input_ids:
                copies.append(_name)
            return _orig(self, *a, **k)

        monkeypatch.setattr(paddle.Tensor, name, watch)
    (pre_process if fused else pre_process_unfused)(
        input_ids=input_ids, seq_lens_this_time=_t(batch.seq_lens_this_time),
        seq_lens_encoder=_t(batch.seq_lens_encoder), seq_lens_decoder=_t(batch.seq_lens_decoder),
        token_num_cpu=batch.token_num, draft_tokens=_t(batch.draft_tokens))
    gpo, spp = calls["get_padding_offset"], calls["speculate_pre_process"]
    if fused:
        assert not gpo and len(spp) == 1 and spp[0] is input_ids, calls
    else:
        assert not spp and len(gpo) == 2 and gpo[0] is input_ids and gpo[1] is None, calls
    assert not copies, f"input_ids was copied via {copies}"


@pytest.mark.parametrize("bsz", [1, 3, 256])
def test_pre_process_defect6_cu_seqlens_q_output_is_1d(bsz):
    """Defect 6: the refactor's share_inputs held cu_seqlens_q_output as [N+1, 1] while the op
    produced [B+1]. Ours is 1-D [bsz + 1] in every mode."""
    batch = make_step_batch(np.random.default_rng(bsz), bsz, "mixed")
    for speculative in (True, False):
        meta = _run(batch, speculative)
        assert list(meta.cu_seqlens_q_output.shape) == [bsz + 1]
        assert list(meta.cu_seqlens_q.shape) == [bsz + 1]


def test_forward_meta_rejects_stale_layout():
    meta = ForwardMeta.make_dummy(bsz=4, token_num=8, num_draft_tokens=2, layout_version=3)
    meta.check()
    meta.require_current(3, "sampler")
    with pytest.raises(StaleForwardMetaError, match="built for batch layout 3, but the batch is now at layout 4"):
        meta.require_current(4, "sampler")


def test_gather_logit_rows_uses_output_side():
    """Decode rows take their own token's hidden row; prefill takes the last prompt token; the rows are the
    logit_rows = min(token_num, B * D) = 7 bound on T_out = 4, not the capacity 9."""
    batch_lens = np.array([3, 0, 4], np.int32)
    meta = pre_process(
        input_ids=_t(np.arange(12, dtype=np.int64).reshape(3, 4)),
        seq_lens_this_time=_t(batch_lens),
        seq_lens_encoder=_t(np.array([0, 0, 4], np.int32)),
        seq_lens_decoder=_t(np.array([5, 0, 0], np.int32)),
        token_num_cpu=7,
        draft_tokens=_t(np.array([[7, 8, 9], [-1] * 3, [-1] * 3], np.int64)),
    )
    hidden = paddle.to_tensor(np.arange(7, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32))
    assert (meta.output_capacity, meta.logit_rows) == (9, 7)
    rows = gather_logit_rows(hidden, meta).numpy()
    np.testing.assert_array_equal(rows[:, 0], [0, 1, 2, 6, 0, 0, 0])
