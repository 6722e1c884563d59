"""A few decode shapes' launches for ncu (LIBDIR/new.so): each shape's launcher called 3 times.
Usage: python3 prof.py LIBDIR"""
import ctypes
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_paged_attention_bf16 as B  # noqa: E402
from kernel_harness import SIGNATURES  # noqa: E402
import torch  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
lib = ctypes.CDLL(str(Path(sys.argv[1]) / "new.so"))
f = getattr(lib, NAME)
f.argtypes, f.restype = list(SIGNATURES[NAME]), ctypes.c_int
ws = lib.specworker_paged_attention_bf16_workspace_bytes
ws.argtypes, ws.restype = [ctypes.c_int] * 5, ctypes.c_int64
B.bf16_workspace_bytes = lambda *a: int(ws(*a))
B.raw_launcher = lambda name: f
for model, batch, ctx in [("smollm2-135m", 32, 512), ("llama3-8b", 1, 2048), ("llama3-8b", 8, 512),
                          ("smollm2-135m", 8, 2048)]:
    heads, kvh, hd = B.MODELS[model]
    step = B.PagedStep(torch, heads, kvh, hd, batch, ctx, 1, seed=1)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            step.ours()
    torch.cuda.synchronize()
    print(model, batch, ctx, "ok", flush=True)
