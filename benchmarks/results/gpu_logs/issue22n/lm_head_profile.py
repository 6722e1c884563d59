"""Profile target for ncu: the bf16 linear at SmolLM2's lm_head shape (K = 576 -> N = 49152), M = 512 and 4096,
bf16 out, three launches each (the launcher's own tile choice). Run from the repo root on a GPU machine:
    ncu --set full -k regex:LinearBf16 --launch-skip 2 --launch-count 1 python3 <this file> 4096
"""

import ctypes
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
from benchmarks.gpu_bf16_linear import OUT_BFLOAT16, random_bf16  # noqa: E402
from benchmarks.timing import stream_ptr  # noqa: E402
from kernel_harness import kernels_lib, ptr, require_gpu_or_exit  # noqa: E402

cp = require_gpu_or_exit()
launch = kernels_lib().specworker_batch_invariant_linear_bf16_launch
launch.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
launch.restype = ctypes.c_int
M, K, N = int(sys.argv[1]), 576, 49152
x, w = random_bf16(cp, (M, K), 1, 1.0), random_bf16(cp, (K, N), 2, K ** -0.5)
out = cp.empty((M, N), dtype=cp.uint16)
for _ in range(3):
    rc = launch(ptr(x), ptr(w), None, ptr(out), M, K, N, OUT_BFLOAT16, stream_ptr(cp))
    assert rc == 0, rc
cp.cuda.get_current_stream().synchronize()
print("ok", M, K, N)
