"""pre_process on the GPU: the refactor's path (with its blocking read of the output count)
against ours (no sync), and rebuild_padding's bandwidth against a same-run device copy.

Runs on a GPU machine with nvcc + CuPy (no Paddle): the kernels are built by kernel_harness.
    python3 benchmarks/gpu_pre_process.py [--out benchmarks/results/gpu_pre_process.json]

(a) refactor ("[MTP] refactor MTP pre_process"): get_padding_offset (input side),
    speculate_get_seq_lens_output, sum + blocking device-to-host read of T_out, a copy of
    input_ids (`input_ids + 0`), get_padding_offset sized by T_out (output side).
(b) ours, unfused: the same two index launches with the output side sized by the capacity
    bsz*(k+1), index-only (no input_ids), no host read (three launches).
(c) ours, fused: speculate_pre_process, one launch computing all of (b) plus T_out on the device.
(b) and (c) are timed back to back with CUDA events (host launch cost included) and as a CUDA-graph
replay (device time; the step is capturable because nothing syncs). (c)'s outputs are checked
bit-equal to (b)'s before timing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_cli import device_row, kernel_bench_parser, write_report  # noqa: E402
from reference.cases.step_batch import make_step_batch  # noqa: E402
from benchmarks.timing import stream_ptr, time_events, time_graph  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402



def bench_pre_process(cp, bsz, k, iters):
    gpo = raw_launcher("specworker_get_padding_offset_launch")
    sgo = raw_launcher("specworker_speculate_get_seq_lens_output_launch")
    spp = raw_launcher("specworker_speculate_pre_process_launch")
    rng = np.random.default_rng(bsz * 10 + k)
    batch = make_step_batch(rng, bsz, "mixed", max_model_len=128, num_draft=k)
    S, D = batch.input_ids.shape[1], k + 1
    d = {name: cp.asarray(getattr(batch, name)) for name in
         ("input_ids", "draft_tokens", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder")}
    T, cap = batch.token_num, bsz * D
    ids = cp.empty(max(T, 1), cp.int64)
    bid = cp.empty(max(T, 1), cp.int32)
    cuq, cuk = cp.empty(bsz + 1, cp.int32), cp.empty(bsz + 1, cp.int32)
    o_lens = cp.empty(bsz, cp.int32)
    o_bid, o_cu, o_cuk = cp.empty(cap, cp.int32), cp.empty(bsz + 1, cp.int32), cp.empty(bsz + 1, cp.int32)
    o_ids = cp.empty(cap, cp.int64)
    f = {name: cp.empty_like(a) for name, a in
         (("ids", ids), ("bid", bid), ("cuq", cuq), ("cuk", cuk), ("o_cu", o_cu), ("o_bid", o_bid), ("o_lens", o_lens))}
    f["num"] = cp.empty(1, cp.int32)

    def input_side():
        gpo(ptr(d["input_ids"]), S, ptr(d["seq_lens_this_time"]), ptr(d["draft_tokens"]), D,
            ptr(d["seq_lens_encoder"]), bsz, T, ptr(ids), ptr(bid), ptr(cuq), ptr(cuk), stream_ptr(cp))
        sgo(ptr(d["seq_lens_this_time"]), ptr(d["seq_lens_encoder"]), bsz, ptr(o_lens), stream_ptr(cp))

    def refactor():
        input_side()
        t_out = int(o_lens.sum().get())  # the refactor's `.item()`: blocks until the GPU drains
        copy = d["input_ids"] + 0  # the refactor's throwaway input_ids copy
        gpo(ptr(copy), S, ptr(o_lens), None, 0, None, bsz, t_out, ptr(o_ids), ptr(o_bid), ptr(o_cu), ptr(o_cuk), stream_ptr(cp))

    def ours():
        input_side()
        gpo(None, S, ptr(o_lens), None, 0, None, bsz, cap, None, ptr(o_bid), ptr(o_cu), ptr(o_cuk), stream_ptr(cp))

    def fused():
        spp(ptr(d["input_ids"]), S, ptr(d["seq_lens_this_time"]), ptr(d["draft_tokens"]), D,
            ptr(d["seq_lens_encoder"]), bsz, T, cap, ptr(f["ids"]), ptr(f["bid"]), ptr(f["cuq"]), ptr(f["cuk"]),
            ptr(f["o_cu"]), ptr(f["o_bid"]), ptr(f["num"]), ptr(f["o_lens"]), stream_ptr(cp))

    ours()
    fused()
    cp.cuda.get_current_stream().synchronize()
    t_out = int(o_lens.get().sum())
    want_cu = np.concatenate([[0], np.cumsum(o_lens.get())])
    assert (o_cu.get() == want_cu).all() and (o_bid.get()[t_out:] == -1).all(), "pre_process check failed"
    for name, unfused in (("ids", ids), ("bid", bid), ("cuq", cuq), ("cuk", cuk), ("o_cu", o_cu), ("o_bid", o_bid),
                          ("o_lens", o_lens)):
        assert (f[name] == unfused).all(), f"fused pre_process differs from the unfused path in {name}"
    assert int(f["num"].get()[0]) == t_out, "fused real_output_token_num differs from T_out"
    a = time_events(cp, refactor, iters // 4)
    b = time_events(cp, ours, iters)
    g = time_graph(cp, ours, iters)
    c = time_events(cp, fused, iters)
    cg = time_graph(cp, fused, iters)
    return {"bsz": bsz, "k": k, "token_num": T, "output_token_num": t_out,
            "refactor_us": a, "ours_us": b, "ours_graph_us": g, "fused_us": c, "fused_graph_us": cg,
            "ratio_refactor_over_ours": a / b, "ratio_refactor_over_ours_graph": a / g,
            "ratio_refactor_over_fused": a / c, "ratio_refactor_over_fused_graph": a / cg}


def decode_gather_workload(cp, rows: int, hidden: int) -> dict:
    """rebuild_padding's decode-only batch on the device: rows // 4 slots of L = 4 decode tokens (Dec 100), so
    every packed row is gathered once; the cu_seqlens_q of the input side serves as the output side too.
    Keys: bsz, seq_lens_this_time, cu_seqlens_q, seq_lens_encoder, seq_lens_decoder, batch_id_per_token
    ([token_num] int32), hidden_states ([rows, hidden] uint16: bf16 bit patterns)."""
    bsz = rows // 4
    lens = np.full(bsz, 4, np.int32)
    return {"bsz": bsz, "seq_lens_this_time": cp.asarray(lens),
            "cu_seqlens_q": cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)),
            "seq_lens_encoder": cp.zeros(bsz, cp.int32), "seq_lens_decoder": cp.full(bsz, 100, cp.int32),
            "batch_id_per_token": cp.asarray(np.repeat(np.arange(bsz, dtype=np.int32), 4)),
            "hidden_states": cp.asarray(np.random.default_rng(0).integers(0, 65535, size=(rows, hidden),
                                                                         dtype=np.uint16))}


def bench_rebuild_padding(cp, rows=1024, hidden=7168, iters=200):
    """Decode-only batch: 256 slots x 4 rows, every packed row gathered once (bf16 as uint16)."""
    rb = raw_launcher("specworker_rebuild_padding_launch")
    w = decode_gather_workload(cp, rows, hidden)
    bsz, tmp, d_cu = w["bsz"], w["hidden_states"], w["cu_seqlens_q"]
    out = cp.empty((rows, hidden), cp.uint16)

    def gather():
        rb(ptr(tmp), ptr(d_cu), ptr(w["seq_lens_this_time"]), ptr(w["seq_lens_decoder"]), ptr(w["seq_lens_encoder"]),
           ptr(w["batch_id_per_token"]), ptr(d_cu), None, 0, ptr(out), rows, bsz, rows, hidden, 2, stream_ptr(cp))

    gather()
    assert (out == tmp).all(), "rebuild_padding check failed"
    dst = cp.empty_like(tmp)

    def copy():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, tmp.data.ptr, tmp.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToDevice, cp.cuda.get_current_stream().ptr)

    t_gather, t_copy, g_gather, g_copy = [], [], [], []
    for _ in range(3):  # interleave to share the machine's noise
        t_gather.append(time_events(cp, gather, iters))
        t_copy.append(time_events(cp, copy, iters))
        g_gather.append(time_graph(cp, gather, iters))
        g_copy.append(time_graph(cp, copy, iters))
    tg, tc = float(np.median(g_gather)), float(np.median(g_copy))
    moved = 2 * tmp.nbytes
    # The ratio uses graph replays (device time): back to back from Python, a 16-argument ctypes
    # launch costs about as much host time as the ~7 us kernel runs, so the eager loop partly times
    # the host (the eager numbers are kept for comparison).
    return {"rows": rows, "hidden": hidden, "dtype": "bfloat16", "gather_us": tg, "copy_us": tc,
            "gather_GBps": moved / tg / 1e3, "copy_GBps": moved / tc / 1e3, "fraction_of_copy": tc / tg,
            "gather_eager_us": float(np.median(t_gather)), "copy_eager_us": float(np.median(t_copy)),
            "fraction_of_copy_eager": float(np.median(t_copy) / np.median(t_gather))}


def main():
    parser = kernel_bench_parser(__doc__, "gpu_pre_process", iters=2000)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    rows = [bench_pre_process(cp, bsz, k, args.iters) for bsz in (1, 64, 256, 1024) for k in (1, 3)]
    rebuild = bench_rebuild_padding(cp)
    result = {**device_row(cp), "pre_process": rows, "rebuild_padding": rebuild}
    write_report(args.out, result)
    print(f"{'bsz':>5} {'k':>2} {'T':>6} {'T_out':>6} {'refactor us':>12} {'unfused us':>10} {'graph':>6} "
          f"{'fused us':>9} {'graph':>6} {'ratio fused graph':>17}")
    for r in rows:
        print(f"{r['bsz']:>5} {r['k']:>2} {r['token_num']:>6} {r['output_token_num']:>6} {r['refactor_us']:>12.2f} "
              f"{r['ours_us']:>10.2f} {r['ours_graph_us']:>6.2f} {r['fused_us']:>9.2f} {r['fused_graph_us']:>6.2f} "
              f"{r['ratio_refactor_over_fused_graph']:>17.2f}")
    print(f"rebuild_padding H={rebuild['hidden']} bf16 {rebuild['rows']} rows (graph replay): "
          f"{rebuild['gather_us']:.2f} us, {rebuild['gather_GBps']:.0f} GB/s; copy {rebuild['copy_us']:.2f} us, "
          f"{rebuild['copy_GBps']:.0f} GB/s; fraction of copy {rebuild['fraction_of_copy']:.2f} "
          f"(eager: {rebuild['fraction_of_copy_eager']:.2f})")


if __name__ == "__main__":
    main()
