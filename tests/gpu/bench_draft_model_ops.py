"""Benchmark of the draft_model_preprocess and eagle_get_hidden_states CUDA launchers (not a test).

    python -m tests.gpu.bench_draft_model_ops            # prints one line per configuration

Decode-heavy MTP rounds (k = 1 and 3) and a prefill mix at bsz 64 .. 5000, H = 7168 bf16 (moved
as uint16; the kernel only copies bytes). Times are CUDA-event medians over 50 launches after 5
warmups; GB/s counts the bytes eagle_get_hidden_states must move (kept rows read + every output
row written), so it can be compared with the device's copy bandwidth.
"""

from __future__ import annotations

import ctypes

import numpy as np

from tests.gpu.harness import kernels_lib, require_gpu, stream
from tests.mtp_cases import make_round_state
from tests.reference.draft_model_preprocess import ref_draft_model_preprocess

_P, _I = ctypes.c_void_p, ctypes.c_int
ROW_BUFFERS = ("draft_tokens", "input_ids", "pre_ids", "accept_tokens", "target_model_draft_tokens")


def launcher(name, argtypes):
    """The raw extern "C" launcher: no synchronize after each call (the harness's adds one)."""
    fn = getattr(kernels_lib(), name)
    fn.argtypes, fn.restype = argtypes, ctypes.c_int

    def call(*args):
        err = fn(*args)
        if err != 0:
            raise RuntimeError(f"{name} returned cudaError {err}")

    return call


def _median_us(cp, fn, iters=50, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1000.0)
    return float(np.median(times))


def bench_preprocess(cp, st):
    fn = launcher("specworker_draft_model_preprocess_launch", [
        _P, _I, _P, _I, _P, _P, _P, _P, _P, _P, _P, _I, _P, _I, _P, _P, _P, _P, _P, _P, _I, _P, _I, _I, _I, _I, _P])
    d = {k: cp.asarray(v) for k, v in st.items() if v is not None}
    p = {k: ctypes.c_void_p(a.data.ptr) for k, a in d.items()}
    w = {k: int(st[k].shape[1]) for k in ROW_BUFFERS}
    bsz = int(st["seq_lens_this_time"].size)

    def once():
        fn(p["draft_tokens"], w["draft_tokens"], p["input_ids"], w["input_ids"], p["stop_flags"],
           p["seq_lens_this_time"], p["seq_lens_encoder"], p["seq_lens_decoder"], p["step_idx"], p["not_need_stop"],
           p["pre_ids"], w["pre_ids"], p["accept_tokens"], w["accept_tokens"], p["accept_num"],
           p["target_model_seq_lens_decoder"], p["target_model_step_idx"], p["target_model_stop_flags"],
           p["max_dec_len"], p["target_model_draft_tokens"], w["target_model_draft_tokens"],
           p.get("target_model_is_block_step"), bsz, 1, 0, 1, stream())

    return _median_us(cp, once)


def bench_hidden_states(cp, st, H):
    fn = launcher("specworker_eagle_get_hidden_states_launch", [_P, _I, _I, _I, _P, _P, _P, _P, _I, _P, _P, _I, _P, _P])
    bsz = int(st["seq_lens_this_time"].size)
    T = int(st["target_model_seq_lens_this_time"].sum())
    hidden = cp.random.randint(0, 1 << 16, size=(T, H), dtype=cp.uint16)
    out = cp.empty((T, H), dtype=cp.uint16)
    lens = {k: cp.asarray(np.asarray(st[k], np.int32)) for k in
            ("seq_lens_this_time", "seq_lens_encoder", "accept_num", "target_model_seq_lens_this_time")}
    scratch, count = cp.empty(2 * bsz + 1, cp.int32), cp.empty(1, cp.int32)
    P = lambda a: ctypes.c_void_p(a.data.ptr)  # noqa: E731

    def once():
        fn(P(hidden), T, H, 2, P(lens["seq_lens_this_time"]), P(lens["seq_lens_encoder"]), P(lens["accept_num"]),
           P(lens["target_model_seq_lens_this_time"]), bsz, P(scratch), P(out), T, P(count), stream())

    us = _median_us(cp, once)
    kept = int(st["seq_lens_this_time"].sum())
    moved = (kept + T) * H * 2  # read the kept rows, write every output row
    return us, T, kept, moved / us / 1e3


def main():
    cp = require_gpu()
    H = 7168
    print(f"{'config':34s} {'preprocess us':>14s} {'hidden us':>10s} {'T':>7s} {'kept':>7s} {'GB/s':>7s}")
    for bsz in (64, 256, 1024, 5000):
        for kind, k, S in (("all_decode", 1, 64), ("all_decode", 3, 64), ("mixed", 3, 256)):
            st = make_round_state(np.random.default_rng(bsz), bsz, kind, max_model_len=S, num_draft=k)
            pre_us = bench_preprocess(cp, st)
            post = ref_draft_model_preprocess(st, 1)
            hid_us, T, kept, gbs = bench_hidden_states(cp, post, H)
            name = f"bsz={bsz} {kind} k={k} S={S}"
            print(f"{name:34s} {pre_us:14.1f} {hid_us:10.1f} {T:7d} {kept:7d} {gbs:7.0f}")


if __name__ == "__main__":
    main()
