"""The new test test_paged_attention_bf16_cuda_head_dims_across_chunks against LIBDIR/VARIANT.so for each VARIANT
(default: broken new; broken.so from variants.py must fail at head_dim 256, the others pass).
Usage (repo root, harness library built): python3 seen_failing.py LIBDIR [VARIANT ...]"""
import ctypes
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
import kernel_harness.launchers as launchers  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
orig = launchers.raw_launcher
from tests.gpu import test_paged_attention_bf16_cuda as T  # noqa: E402

for variant in sys.argv[2:] or ("broken", "new"):
    f = getattr(ctypes.CDLL(str(Path(sys.argv[1]) / f"{variant}.so")), NAME)
    f.argtypes, f.restype = list(launchers.SIGNATURES[NAME]), ctypes.c_int
    launchers.raw_launcher = lambda name, f=f: f if name == NAME else orig(name)
    for head_dim in (1, 33, 80, 256):
        for histories in T.ACROSS_CHUNKS:
            try:
                T.test_paged_attention_bf16_cuda_head_dims_across_chunks(head_dim, histories)
                print(f"{variant}.so head_dim {head_dim} {histories}: passed")
            except AssertionError as e:
                print(f"{variant}.so head_dim {head_dim} {histories}: FAILED: {(str(e).splitlines() or [''])[0][:120]}")
