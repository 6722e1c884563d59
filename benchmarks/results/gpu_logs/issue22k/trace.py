"""Per-block timeline of one launcher call (the last of a 20-call CUDA graph, as the benchmark replays it) from
LIBDIR/trace.so (trace_patch.py): for each kernel and mark, the time after the call's first mark (%globaltimer, us:
min / median / max over blocks) and each chunk block's phases in SM cycles (clock64; median / max).
Usage: python3 trace.py LIBDIR [model batch ctx tokens ...]"""
import ctypes
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kernel_harness.launchers import SIGNATURES  # noqa: E402

import kernel_harness  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
lib = ctypes.CDLL(str(Path(sys.argv[1]) / "trace.so"))
f = getattr(lib, NAME)
f.argtypes, f.restype = list(SIGNATURES[NAME]), ctypes.c_int
ws = lib.specworker_paged_attention_bf16_workspace_bytes
ws.argtypes, ws.restype = [ctypes.c_int] * 5, ctypes.c_int64
kernel_harness.raw_launcher = lambda name: f
import kernel_harness.paged_attention as kpa  # noqa: E402

kpa.bf16_workspace_bytes = lambda *a: int(ws(*a))
import gpu_paged_attention_bf16 as B  # noqa: E402
import torch  # noqa: E402

B.bf16_workspace_bytes = lambda *a: int(ws(*a))
B.raw_launcher = lambda name: f
KB = 8192
buf = np.zeros(3 * KB * 16, dtype=np.uint64)
lib.specworker_pa_trace_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

args = sys.argv[2:] or ["smollm2-135m", "32", "512", "1", "smollm2-135m", "128", "512", "1",
                        "llama3-8b", "8", "512", "1", "llama3-8b", "1", "2048", "1"]
shapes = [(args[i], int(args[i + 1]), int(args[i + 2]), int(args[i + 3])) for i in range(0, len(args), 4)]
NAMES = {0: "append", 1: "chunk", 2: "combine"}
for model, batch, ctx, tokens in shapes:
    heads, kvh, hd = B.MODELS[model]
    step = B.PagedStep(torch, heads, kvh, hd, batch, ctx, tokens, seed=batch * 7 + ctx + tokens)
    us = B.graph_us(torch, step.ours)  # warm; builds its own graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        step.ours()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(20):
            step.ours()
    g.replay()
    torch.cuda.synchronize()
    assert lib.specworker_pa_trace_clear() == 0
    g.replay()
    torch.cuda.synchronize()
    assert lib.specworker_pa_trace_read(buf.ctypes.data, buf.nbytes) == 0
    t = buf.reshape(3, KB, 16).astype(np.int64)
    print(f"== {model} B{batch} ctx{ctx} q{tokens}: {us:.2f} us per call (graph)", flush=True)
    gts = np.concatenate([t[k][:, 0:14:2][t[k][:, 0:14:2] > 0] for k in range(3)])
    uniq = np.unique(gts)
    print(f"   globaltimer: min step {np.diff(uniq).min() if len(uniq) > 1 else -1} ns over {len(uniq)} values")
    # the call's start: the append's first entry (three launches) or the chunk kernel's first pass of its wait
    if (t[0][:, 0] > 0).any():
        t0 = t[0][:, 0][t[0][:, 0] > 0].min()
    else:
        m6 = t[1][:, 12]
        t0 = m6[m6 > 0].min()
    for k in range(3):
        rec = t[k][t[k][:, 15] > 0]
        if not len(rec):
            continue
        line = f"   {NAMES[k]:8s} {len(rec):5d} blocks on {len(np.unique(rec[:, 15]))} SMs |"
        for m in range(7):
            col = rec[:, 2 * m]
            col = col[col > 0]
            if len(col):
                r = (col - t0) / 1e3
                line += f" m{m} {r.min():6.2f}/{np.median(r):6.2f}/{r.max():6.2f}"
        print(line)
        if k == 1:
            ph = []
            for a, b, name in [(0, 1, "setup"), (1, 2, "wait"), (2, 3, "tile0"), (3, 4, "loop"), (4, 5, "tail")]:
                ok = (rec[:, 2 * a] > 0) & (rec[:, 2 * b] > 0)
                d = rec[ok, 2 * b + 1] - rec[ok, 2 * a + 1]
                if len(d):
                    ph.append(f"{name} {int(np.median(d))}/{int(d.max())}")
            print("   chunk cycles (median/max): " + ", ".join(ph))
        if k == 2:
            ok = (rec[:, 2] > 0) & (rec[:, 4] > 0)
            d = rec[ok, 5] - rec[ok, 3]
            if len(d):
                print(f"   combine cycles after its wait (median/max): {int(np.median(d))}/{int(d.max())}")
    del step, g
    torch.cuda.empty_cache()
