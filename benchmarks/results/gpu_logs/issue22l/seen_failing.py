"""tests/gpu/test_batch_invariant_linear_bf16_cuda.py's tile-list tests (every tile the same bits, the persistent
tiles, the two instruction families) against LIBDIR/VARIANT.so for each VARIANT (default: lin_broken lin_new;
lin_broken.so from build.sh, tile 16's chunk edges one k tile late, must fail where K splits; lin_new.so passes),
through pytest with seen_failing_plugin.py routing the launchers to the variant (benchmarks import nothing from
tests/). Usage (repo root): python3 seen_failing.py LIBDIR [VARIANT ...]"""
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
TEST = "tests/gpu/test_batch_invariant_linear_bf16_cuda.py"
K = "every_tile or persistent_tiles or instruction_families"

for variant in sys.argv[2:] or ("lin_broken", "lin_new"):
    env = dict(os.environ, SEEN_FAILING_LIB=str(Path(sys.argv[1]).resolve() / f"{variant}.so"),
               PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "seen_failing_plugin",
                          TEST, "-k", K], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "PASSED")) or " passed" in line
             or " failed" in line]
    print(f"{variant}.so: pytest exit {run.returncode}")
    print("\n".join(lines[-14:]))
