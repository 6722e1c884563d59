"""The buffer table: declarations checked by BufferSpec, shapes and dtypes of docs/spec.md §3, names of the ops'
arguments, dims resolved from the config, and review defect 6."""

from __future__ import annotations

import inspect

import pytest

from specworker.config import BUILTIN_TARGETS

from specworker.model_executor import ops
from specworker.model_executor.slot_buffers import (DIM_NAMES, TARGET_BUFFERS, BufferKind, BufferSpec, buffer_dims,
                                       check_table)
from tests.worker.slot_patterns import make_config

BY_NAME = {s.name: s for s in TARGET_BUFFERS}
K = BufferKind

# docs/spec.md §3, written out by hand: name -> (dims, dtype). N = max_num_seqs, S = max_model_len, D = k + 1.
SPEC_CORE = {
    "input_ids": (("max_num_seqs", "max_model_len"), "int64"),
    "prompt_lens": (("max_num_seqs",), "int64"),
    "pre_ids": (("max_num_seqs", "max_model_len"), "int64"),
    "seq_lens_this_time": (("max_num_seqs",), "int32"),
    "seq_lens_encoder": (("max_num_seqs",), "int32"),
    "seq_lens_decoder": (("max_num_seqs",), "int32"),
    "step_idx": (("max_num_seqs",), "int64"),
    "stop_flags": (("max_num_seqs",), "bool"),
    "is_block_step": (("max_num_seqs",), "bool"),
    "min_dec_len": (("max_num_seqs",), "int64"),
    "max_dec_len": (("max_num_seqs",), "int64"),
    "temperature": (("max_num_seqs",), "float32"),
    "top_p": (("max_num_seqs",), "float32"),
    "penalty_score": (("max_num_seqs",), "float32"),
    "frequency_score": (("max_num_seqs",), "float32"),
    "presence_score": (("max_num_seqs",), "float32"),
    "top_k": (("max_num_seqs",), "int64"),
    "min_p": (("max_num_seqs",), "float32"),
    "infer_seed": (("max_num_seqs",), "int64"),
    "bad_tokens": (("max_num_seqs", "max_bad_words"), "int64"),
    "bad_tokens_len": (("max_num_seqs",), "int64"),
    "block_tables": (("max_num_seqs", "max_blocks_per_seq"), "int32"),
    "draft_tokens": (("max_num_seqs", "max_draft_token_num"), "int64"),
    "accept_tokens": (("max_num_seqs", "max_draft_token_num"), "int64"),
    "accept_num": (("max_num_seqs",), "int32"),
    "actual_draft_token_nums": (("max_num_seqs",), "int32"),
    "policy_draft_len": (("max_num_seqs",), "int32"),
    "reasoning_status": (("max_num_seqs",), "int32"),
    "enable_thinking": (("max_num_seqs",), "bool"),
}
SPEC_PER_STEP = {"ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k", "seq_lens_output",
                 "batch_id_per_token_output", "cu_seqlens_q_output"}


def test_buffers_table_declares_spec_core_buffers():
    for name, (dims, dtype) in SPEC_CORE.items():
        spec = BY_NAME[name]
        assert (spec.dims, spec.dtype, spec.kind) == (dims, dtype, K.PER_SLOT), name


def test_buffers_per_step_kind_is_exactly_the_index_tensors():
    assert {s.name for s in TARGET_BUFFERS if s.kind is K.PER_STEP} == SPEC_PER_STEP


def test_buffers_defect6_cu_seqlens_q_output_is_1d():
    """Defect 6: the seed held cu_seqlens_q_output as an [N + 1, 1] buffer while the op produced [N + 1],
    so the same quantity had two shapes. Every cu_* buffer is 1-D [N + 1] int32, also with k = 0, where a
    width of D would resolve to 1 and hide a second dimension."""
    for config_name in ("mtp_n5_k2", "none_n3"):
        dims = buffer_dims(make_config(config_name))
        for name in ("cu_seqlens_q", "cu_seqlens_k", "cu_seqlens_q_output"):
            spec = BY_NAME[name]
            assert spec.shape(dims) == [dims["max_num_seqs"] + 1], (config_name, name)
            assert (spec.dtype, spec.kind, spec.fill) == ("int32", K.PER_STEP, 0), name


def test_buffers_names_match_op_arguments():
    """Buffers that ops consume carry the ops' argument names (actual_draft_token_nums, not ..._num)."""
    arguments = set()
    for name in ops.__all__:
        fn = getattr(ops, name)
        if inspect.isfunction(fn):
            arguments |= set(inspect.signature(fn).parameters)
    consumed = {"seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "step_idx", "stop_flags",
                "is_block_step", "pre_ids", "draft_tokens", "accept_tokens", "accept_num", "actual_draft_token_nums",
                "reasoning_status", "enable_thinking", "bad_tokens", "bad_tokens_len", "max_dec_len", "infer_seed",
                "mask_rollback", "not_need_stop", "stop_nums", "eos_token_id", "batch_id_per_token_output",
                "cu_seqlens_q_output", "cu_seqlens_q", "input_ids", "top_p"}
    assert consumed <= set(BY_NAME)
    assert not consumed - arguments, sorted(consumed - arguments)


def test_buffers_dims_resolve_every_name():
    dims = buffer_dims(make_config("mtp_n5_k2"))  # N 5, S 12, k 2, block_size 4, 128 batched tokens; blocks cover S + D = 15 positions
    assert dims == {"max_num_seqs": 5, "max_num_seqs_plus_1": 6, "max_model_len": 12, "num_speculative_tokens": 2,
                    "max_draft_token_num": 3, "max_blocks_per_seq": 4, "max_bad_words": 64, "max_stop_tokens": 8,
                    "max_num_batched_tokens": 128, "max_output_token_num": 15,
                    "hidden_size": BUILTIN_TARGETS["builtin:tiny"]["hidden_size"], "vocab_size": 259}
    assert tuple(dims) == DIM_NAMES


def test_buffers_per_slot_rows_end_in_1_only_for_width_d():
    """With k = 0 only the [N, D] rows resolve to a trailing 1; no per-slot scalar is [N, 1]."""
    dims = buffer_dims(make_config("none_n3"))
    ending_in_1 = {s.name for s in TARGET_BUFFERS if len(s.dims) > 1 and s.shape(dims)[-1] == 1}
    assert ending_in_1 == {"draft_tokens", "accept_tokens"}
    assert all(len(s.dims) == 1 for s in TARGET_BUFFERS if s.dtype == "bool" or s.name.endswith(("_len", "_lens")))


def _spec(**overrides):
    fields = dict(name="x", dims=("max_num_seqs",), dtype="int32", fill=0, kind=K.PER_SLOT, cpu_mirror=False,
                  doc="a test buffer")
    return BufferSpec(**{**fields, **overrides})


@pytest.mark.parametrize("dims, kind", [
    (("max_num_seqs", 1), K.PER_SLOT), ((1,), K.PER_SLOT),
    (("max_num_batched_tokens", 1), K.PER_STEP), (("max_stop_tokens", 1), K.GLOBAL),
])
def test_buffers_spec_rejects_trailing_one(dims, kind):
    with pytest.raises(ValueError, match="BufferSpec 'x': dims = .*no trailing dimension of 1: a per-slot scalar is"):
        _spec(dims=dims, kind=kind)


def test_buffers_spec_allows_one_element_global():
    assert _spec(dims=(1,), kind=K.GLOBAL).shape({}) == [1]


BAD_SPECS = {
    "unknown_dim": (dict(dims=("max_num_seq",)), "dims = .*'max_num_seq' is unknown"),
    "zero_dim": (dict(dims=("max_num_seqs", 0)), "dims = .*a positive int"),
    "per_slot_not_by_slot": (dict(dims=("max_model_len",)), "a PER_SLOT buffer starting with 'max_num_seqs'"),
    "dtype": (dict(dtype="float64"), "dtype = 'float64'; allowed: bool, int32, int64, float32"),
    "bool_fill_on_int": (dict(fill=True), "fill = True; allowed: a int32 value"),
    "float_fill_on_int": (dict(fill=0.5), "fill = 0.5"),
    "unknown_fill_name": (dict(fill="max_num_seq"), "fill = 'max_num_seq'"),
    "int_fill_on_bool": (dict(dtype="bool", fill=1), "fill = 1; allowed: a bool value"),
    "mirror_suffix": (dict(name="x_cpu"), "name = 'x_cpu'.*reserved for mirrors"),
    "kind": (dict(kind="PER_SLOT"), "kind = 'PER_SLOT'; allowed: PER_SLOT, PER_STEP, GLOBAL"),
    "doc_two_lines": (dict(doc="a\nb"), "doc = .*one non-empty line"),
}


@pytest.mark.parametrize("case", BAD_SPECS)
def test_buffers_spec_rejects_bad_declaration(case):
    overrides, message = BAD_SPECS[case]
    with pytest.raises(ValueError, match=message):
        _spec(**overrides)


def test_buffers_check_table_rejects_duplicates():
    with pytest.raises(ValueError, match="declares 'top_k' twice"):
        check_table(TARGET_BUFFERS + (BY_NAME["top_k"],))
