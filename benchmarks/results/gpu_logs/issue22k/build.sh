#!/bin/bash
# Builds, here (no GPU needed), for sm_90a into build/issue22k (git-ignored; carried to the device):
#   call 1: old.so (git HEAD's paged_attention_bf16.cu), new.so (the working tree's), the attribution builds of
#           variants.py (oldapp, oldcomb, early) and trace.so (trace_patch.py on the working tree's file);
#   call 2: old.so, v1.so (call 1's new, kept as build/issue22k/src/v1.cu), new.so, variants.py's c128 and broken,
#           trace.so;
#   call 3: old.so, v2.so (call 2's new, kept as build/issue22k/src/v2.cu), new.so, variants.py's broken, trace.so;
#   call 4: old.so, v2.so, v3.so (call 3's new, build/issue22k/src/v3.cu), new.so, variants.py's broken.
set -e
cd "$(dirname "$0")/../../../.."
CALL=${1:-4}
OUTD=build/issue22k; mkdir -p "$OUTD/src"
K=custom_ops/gpu_ops/kernels
D=benchmarks/results/gpu_logs/issue22k
git show HEAD:$K/paged_attention_bf16.cu > "$OUTD/src/old.cu"
cp $K/paged_attention_bf16.cu "$OUTD/src/new.cu"
python3 $D/variants.py $K/paged_attention_bf16.cu "$OUTD/src" "$CALL"
case $CALL in
  1) VARIANTS="old new oldapp oldcomb early trace" ;;
  2) VARIANTS="old v1 new c128 broken trace" ;;
  3) VARIANTS="old v2 new broken trace" ;;
  *) VARIANTS="old v2 v3 new broken" ;;
esac
case " $VARIANTS " in *" trace "*) python3 $D/trace_patch.py $K/paged_attention_bf16.cu "$OUTD/src/trace.cu" ;; esac
rm -f "$OUTD"/*.so
for v in $VARIANTS; do
  nice -n 19 nvcc -O3 -std=c++17 -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a -lineinfo -I$K -shared \
    -o "$OUTD/$v.so" "$OUTD/src/$v.cu"
done
ls -la "$OUTD"/*.so
