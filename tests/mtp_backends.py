"""The two backends of the composed MTP round (tests/mtp_round.py): every op of one round as the
compiled CPU op over persistent Paddle buffers (OpsBackend) and as its numpy reference over numpy
buffers (RefBackend), behind one interface, so the engine can run both in lockstep and compare
them stage by stage (assert_same). The buffer table and each op's argument -> buffer tables are
shared, so both backends feed an op exactly the same buffers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import paddle

from specworker.model_executor import ops
from specworker.model_executor.pre_and_post_process import gather_logit_rows, pre_process
from reference.draft_model_postprocess import ref_draft_model_postprocess
from reference.draft_model_preprocess import INPUT_KEYS as PREPROCESS_INPUTS
from reference.draft_model_preprocess import UPDATED_KEYS as PREPROCESS_UPDATES
from reference.draft_model_preprocess import ref_draft_model_preprocess
from reference.draft_model_update import STATE_KEYS as DRAFT_UPDATE_KEYS
from reference.draft_model_update import ref_draft_model_update
from reference.eagle_get_hidden_states import ref_eagle_get_hidden_states
from reference.pre_process import ref_pre_process
from reference.rebuild_padding import ref_rebuild_padding
from reference.speculate_set_value_by_flags_and_idx import ref_speculate_set_value_by_flags_and_idx
from reference.speculate_update import WRITES as UPDATE_WRITES
from reference.speculate_update import ref_speculate_update
from reference.speculate_verify import ref_speculate_verify

# name -> (dims, dtype, fill). Target buffers unprefixed, the proposer's batch "d_".
BUFFERS = {
    "input_ids": (("N", "S"), np.int64, -1), "pre_ids": (("N", "S"), np.int64, -1),
    "seq_lens_this_time": (("N",), np.int32, 0), "seq_lens_encoder": (("N",), np.int32, 0),
    "seq_lens_decoder": (("N",), np.int32, 0), "step_idx": (("N",), np.int64, 0),
    "stop_flags": (("N",), np.bool_, True), "is_block_step": (("N",), np.bool_, False),
    "max_dec_len": (("N",), np.int64, 1), "draft_tokens": (("N", "D"), np.int64, -1),
    "accept_tokens": (("N", "D"), np.int64, -1), "accept_num": (("N",), np.int32, 0),
    "actual_draft_token_nums": (("N",), np.int32, 1), "mask_rollback": (("N",), np.int32, 0),
    "not_need_stop": ((1,), np.bool_, False), "stop_nums": ((1,), np.int64, "N"),
    "topp": (("N",), np.float32, 1.0), "end_tokens": (("E",), np.int64, 0),
    "d_input_ids": (("N", "S"), np.int64, -1), "d_pre_ids": (("N", "S"), np.int64, -1),
    "d_draft_tokens": (("N", "D"), np.int64, -1), "d_seq_lens_this_time": (("N",), np.int32, 0),
    "d_seq_lens_encoder": (("N",), np.int32, 0), "d_seq_lens_decoder": (("N",), np.int32, 0),
    "d_step_idx": (("N",), np.int64, 0), "d_stop_flags": (("N",), np.bool_, True),
    "d_not_need_stop": ((1,), np.bool_, False),
}
# Each op's argument names -> buffer names (both backends call the op / reference through these).
UPDATE_ARGS = {k: k for k in ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens",
                              "actual_draft_token_nums", "accept_tokens", "accept_num", "stop_flags",
                              "seq_lens_this_time", "is_block_step", "stop_nums", "mask_rollback")}
SET_VALUE_ARGS = {"pre_ids": "pre_ids", **{k: k for k in ("accept_tokens", "accept_num", "stop_flags",
                                                           "seq_lens_this_time", "seq_lens_encoder",
                                                           "seq_lens_decoder", "step_idx")}}
SET_VALUE_WRITES = ("pre_ids", "accept_num", "seq_lens_decoder")
PREPROCESS_ARGS = {
    **{k: "d_" + k for k in ("draft_tokens", "input_ids", "stop_flags", "seq_lens_this_time", "seq_lens_encoder",
                             "seq_lens_decoder", "step_idx", "not_need_stop", "pre_ids")},
    "accept_tokens": "accept_tokens", "accept_num": "accept_num",
    "target_model_seq_lens_encoder": "seq_lens_encoder", "target_model_seq_lens_decoder": "seq_lens_decoder",
    "target_model_step_idx": "step_idx", "target_model_stop_flags": "stop_flags", "max_dec_len": "max_dec_len",
    "target_model_draft_tokens": "draft_tokens", "target_model_is_block_step": "is_block_step",
}
EAGLE_ARGS = {"seq_lens_this_time": "d_seq_lens_this_time", "seq_lens_encoder": "d_seq_lens_encoder",
              "seq_lens_decoder": "d_seq_lens_decoder", "stop_flags": "d_stop_flags", "accept_num": "accept_num",
              "target_model_seq_lens_this_time": "seq_lens_this_time",
              "target_model_seq_lens_encoder": "seq_lens_encoder"}
DRAFT_UPDATE_ARGS = {**{k: "d_" + k for k in DRAFT_UPDATE_KEYS if k != "base_model_draft_tokens"},
                     "base_model_draft_tokens": "draft_tokens"}
POSTPROCESS_ARGS = {"base_model_draft_tokens": "draft_tokens", "base_model_seq_lens_this_time": "seq_lens_this_time",
                    "base_model_seq_lens_encoder": "seq_lens_encoder", "base_model_stop_flags": "stop_flags",
                    "base_model_is_block_step": "is_block_step"}
META_FIELDS = ("ids_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k", "seq_lens_output",
               "batch_id_per_token_output", "cu_seqlens_q_output")


def _prefix(side: str) -> str:
    return "" if side == "target" else "d_"


def allocate(num_slots: int, max_model_len: int, k: int, end_tokens) -> dict[str, np.ndarray]:
    sizes = {"N": num_slots, "S": max_model_len, "D": k + 1, "E": len(end_tokens)}
    state = {}
    for name, (dims, dtype, fill) in BUFFERS.items():
        state[name] = np.full([sizes.get(d, d) for d in dims], sizes.get(fill, fill), dtype=dtype)
    state["end_tokens"][:] = end_tokens
    state["actual_draft_token_nums"][:] = k
    return state


class RefBackend:
    """The round's ops as their numpy references, over numpy buffers."""

    def __init__(self, init: dict[str, np.ndarray]):
        self.state = {k: v.copy() for k, v in init.items()}
        self.meta = {}

    def numpy(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.state.items()}

    def set_rows(self, slot: int, values: dict) -> None:
        for name, value in values.items():
            self.state[name][slot] = value

    def _call(self, ref, args: dict, writes, *extra, **kw):
        new = ref({a: self.state[b] for a, b in args.items()}, *extra, **kw)
        for a in writes:
            self.state[args[a]][...] = new[a]
        return new

    def pre_process(self, side: str, token_num: int) -> dict:
        p, s = _prefix(side), self.state
        self.meta[side] = ref_pre_process(s[p + "input_ids"], s[p + "seq_lens_this_time"], s[p + "seq_lens_encoder"],
                                          token_num, s[p + "draft_tokens"])
        return self.meta[side]

    def rebuild_padding(self, side: str, hidden: np.ndarray) -> np.ndarray:
        p, s, m = _prefix(side), self.state, self.meta[side]
        out, _ = ref_rebuild_padding(hidden, m["cu_seqlens_q"], s[p + "seq_lens_this_time"],
                                     s[p + "seq_lens_decoder"], s[p + "seq_lens_encoder"],
                                     m["batch_id_per_token_output"], m["cu_seqlens_q_output"])
        return out

    def verify(self, verify_tokens: np.ndarray) -> None:
        s, rows = self.state, verify_tokens.shape[0]
        out = ref_speculate_verify(
            verify_tokens[:, 0], s["accept_tokens"], s["accept_num"], s["step_idx"], s["stop_flags"],
            s["seq_lens_encoder"], s["seq_lens_decoder"], s["draft_tokens"], s["seq_lens_this_time"], verify_tokens,
            np.ones((rows, 1), np.float32), s["max_dec_len"], s["end_tokens"], s["is_block_step"],
            self.meta["target"]["cu_seqlens_q_output"], np.ones(rows, np.int32), s["actual_draft_token_nums"],
            s["topp"], verify_strategy="greedy")
        for k, v in out.items():
            s[k][...] = v

    def speculate_update(self) -> None:
        self._call(ref_speculate_update, UPDATE_ARGS, UPDATE_WRITES)

    def set_value(self) -> None:
        self._call(ref_speculate_set_value_by_flags_and_idx, SET_VALUE_ARGS, SET_VALUE_WRITES)

    def draft_preprocess(self, num_model_steps: int) -> None:
        self._call(ref_draft_model_preprocess, PREPROCESS_ARGS, PREPROCESS_UPDATES, num_model_steps)

    def eagle(self, hidden: np.ndarray):
        return ref_eagle_get_hidden_states(hidden, {a: self.state[b] for a, b in EAGLE_ARGS.items()})

    def draft_update(self, tokens: np.ndarray, substep: int) -> None:
        self._call(ref_draft_model_update, DRAFT_UPDATE_ARGS, DRAFT_UPDATE_KEYS, tokens,
                   self.meta["draft"]["cu_seqlens_q_output"], self.state["max_dec_len"], self.state["end_tokens"],
                   substep=substep)

    def draft_postprocess(self) -> None:
        self._call(ref_draft_model_postprocess, POSTPROCESS_ARGS, ("base_model_seq_lens_this_time",))


class OpsBackend:
    """The round's ops as the compiled CPU ops, over persistent Paddle buffers updated in place."""

    def __init__(self, init: dict[str, np.ndarray]):
        self.t = {k: paddle.to_tensor(v) for k, v in init.items()}
        self.meta = {}

    def numpy(self) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in self.t.items()}

    def set_rows(self, slot: int, values: dict) -> None:
        for name, value in values.items():
            arr = self.t[name].numpy()
            arr[slot] = value
            self.t[name].set_value(arr)  # copies into the same allocation

    def _args(self, args: dict) -> list:
        return [self.t[b] for b in args.values()]

    def pre_process(self, side: str, token_num: int) -> dict:
        p, t = _prefix(side), self.t
        meta = pre_process(input_ids=t[p + "input_ids"], seq_lens_this_time=t[p + "seq_lens_this_time"],
                           seq_lens_encoder=t[p + "seq_lens_encoder"], seq_lens_decoder=t[p + "seq_lens_decoder"],
                           token_num_cpu=token_num, draft_tokens=t[p + "draft_tokens"])
        meta.check()
        self.meta[side] = meta
        return {f: getattr(meta, f).numpy() for f in META_FIELDS}

    def rebuild_padding(self, side: str, hidden: np.ndarray) -> np.ndarray:
        """The op over the whole output capacity (what the reference models; gather_logit_rows keeps the first
        meta.logit_rows of these rows)."""
        meta = self.meta[side]
        rows = gather_logit_rows(paddle.to_tensor(hidden), dataclasses.replace(meta, logit_rows=meta.output_capacity))
        return rows.numpy()

    def verify(self, verify_tokens: np.ndarray) -> None:
        t, rows = self.t, verify_tokens.shape[0]
        ops.speculate_verify(
            paddle.to_tensor(verify_tokens[:, 0]), t["accept_tokens"], t["accept_num"], t["step_idx"],
            t["stop_flags"], t["seq_lens_encoder"], t["seq_lens_decoder"], t["draft_tokens"],
            t["seq_lens_this_time"], paddle.to_tensor(verify_tokens), paddle.ones([rows, 1], "float32"),
            t["max_dec_len"], t["end_tokens"], t["is_block_step"], self.meta["target"].cu_seqlens_q_output,
            paddle.ones([rows], "int32"), t["actual_draft_token_nums"], t["topp"], verify_strategy="greedy")

    def speculate_update(self) -> None:
        ops.speculate_update(*self._args(UPDATE_ARGS))

    def set_value(self) -> None:
        ops.speculate_set_value_by_flags_and_idx(*self._args(SET_VALUE_ARGS))

    def draft_preprocess(self, num_model_steps: int) -> None:
        assert list(PREPROCESS_ARGS) == list(PREPROCESS_INPUTS), "argument table out of the op's order"
        *args, block = self._args(PREPROCESS_ARGS)
        ops.draft_model_preprocess(*args, num_model_steps, False, target_model_is_block_step=block)

    def eagle(self, hidden: np.ndarray):
        out, count = ops.eagle_get_hidden_states(paddle.to_tensor(hidden), *self._args(EAGLE_ARGS), 1)
        return out.numpy(), count.numpy()

    def draft_update(self, tokens: np.ndarray, substep: int) -> None:
        t = self.t
        ops.draft_model_update(
            paddle.to_tensor(tokens), t["d_draft_tokens"], t["d_pre_ids"], t["d_seq_lens_this_time"],
            t["d_seq_lens_encoder"], t["d_seq_lens_decoder"], t["d_step_idx"],
            self.meta["draft"].cu_seqlens_q_output, t["d_stop_flags"], t["d_not_need_stop"], t["max_dec_len"],
            t["end_tokens"], t["draft_tokens"], t["input_ids"].shape[1], substep)

    def draft_postprocess(self) -> None:
        ops.draft_model_postprocess(*self._args(POSTPROCESS_ARGS))


def assert_same(where: str, got, want) -> None:
    """Exact equality of two results (array, tuple of arrays or dict of arrays)."""
    if isinstance(want, dict):
        for k in want:
            assert_same(f"{where}: {k}", got[k], want[k])
        return
    if isinstance(want, tuple):
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(f"{where}[{i}]", g, w)
        return
    if want is None:
        assert got is None, f"{where}: op returned {got!r}, reference None"
        return
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or not np.array_equal(g, w):
        diff = np.argwhere(g != w)[0] if g.shape == w.shape else "shape"
        raise AssertionError(f"{where}: op and reference differ at {diff}: op {g.tolist()} vs reference {w.tolist()}"
                             if g.size <= 64 else f"{where}: op and reference differ at {diff}")
