#!/bin/bash
# Prebuilds for sm_90a into $1 (default .swk), on a machine without a GPU, what the device call needs:
#   hbuild/: the harness library (kernel_harness.build.kernels_lib's name and flags; the other kernels' objects are
#            taken from $1/objs if there) and the tests' row-layout-only build of paged_attention_bf16.cu
#            (test_paged_attention_bf16_cuda.py's _row_layout_launcher name and flags);
#   ab/:     old.so (git HEAD), lb.so (git HEAD with only this change's __launch_bounds__ minimum), new.so (working
#            tree) for ab.py.
set -e
cd "$(dirname "$0")/../../../.."
OUTD=$(realpath -m "${1:-.swk}"); mkdir -p "$OUTD/objs" "$OUTD/hbuild" "$OUTD/ab"
K=custom_ops/gpu_ops/kernels
GEN=-gencode=arch=compute_90a,code=sm_90a
HFLAGS="-O3 -std=c++17 -Xcompiler -fPIC $GEN -lineinfo"
digest() {  # flags string -> the harness's 16-hex digest of flags + every file of the kernels folder
  python3 - "$1" <<'PY'
import hashlib, sys
from pathlib import Path
d = hashlib.sha256(sys.argv[1].encode())
for p in sorted(Path("custom_ops/gpu_ops/kernels").iterdir()):
    if p.is_file():
        d.update(p.name.encode() + p.read_bytes())
print(d.hexdigest()[:16])
PY
}
HD=$(digest "$HFLAGS")
RFLAGS="$HFLAGS -DSPECWORKER_PAGED_ATTENTION_BF16_ROW_LAYOUT_ONLY -shared"
RD=$(digest "$RFLAGS")
for f in $K/*.cu; do
  o="$OUTD/objs/$(basename "$f" .cu).o"
  if [ "$(basename "$f")" = paged_attention_bf16.cu ] || [ ! -f "$o" ]; then nvcc $HFLAGS -c -o "$o" "$f" & fi
done
nvcc $RFLAGS -o "$OUTD/hbuild/libpaged_attention_bf16_row_layout_sm_90_$RD.so" $K/paged_attention_bf16.cu &
wait
nvcc -shared -o "$OUTD/hbuild/libspecworker_kernels_sm_90_$HD.so" "$OUTD"/objs/*.o
git show HEAD:$K/paged_attention_bf16.cu > "$OUTD/ab/old.cu"
python3 - "$OUTD/ab/old.cu" "$OUTD/ab/lb.cu" <<'PY'
import sys
from pathlib import Path
src = Path(sys.argv[1]).read_text()
old = "template <int DP, bool kVec, bool kFused>\n__global__ void __launch_bounds__(kThreads)\n"
assert old in src
src = src.replace(old, "template <int DP, bool kVec, bool kFused>\n__global__ void __launch_bounds__(kThreads, "
                  "DP == 32 ? 8 : DP == 64 ? 5 : DP == 128 ? 3 : 1)\n")
Path(sys.argv[2]).write_text(src)
PY
cp $K/paged_attention_bf16.cu "$OUTD/ab/new.cu"
for v in old lb new; do
  nvcc -O3 -std=c++17 -Xcompiler -fPIC $GEN -I$K -shared -o "$OUTD/ab/$v.so" "$OUTD/ab/$v.cu" &
done
wait
ls -la "$OUTD"/hbuild "$OUTD"/ab/*.so
