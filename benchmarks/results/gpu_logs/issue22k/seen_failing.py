"""The new test test_paged_attention_bf16_cuda_head_dims_across_chunks against LIBDIR/VARIANT.so for each VARIANT
(default: broken new; broken.so from variants.py must fail at head_dim 256, the others pass), through pytest with
seen_failing_plugin.py routing the launcher to the variant (benchmarks and tools import nothing from tests/).
Usage (repo root, harness library built): python3 seen_failing.py LIBDIR [VARIANT ...]
(Call 4 ran an earlier form of this script that imported the test module and called the test per case; its output
is call4/call4.log. This form was written after the device calls, to keep tests/ out of the imports.)"""
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
TEST = "tests/gpu/test_paged_attention_bf16_cuda.py"

for variant in sys.argv[2:] or ("broken", "new"):
    env = dict(os.environ, SEEN_FAILING_LIB=str(Path(sys.argv[1]).resolve() / f"{variant}.so"),
               PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "seen_failing_plugin",
                          TEST, "-k", "head_dims_across_chunks"], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "PASSED")) or " passed" in line
             or " failed" in line]
    print(f"{variant}.so: pytest exit {run.returncode}")
    print("\n".join(lines[-12:]))
