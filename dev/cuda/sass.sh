#!/bin/sh
# sass.sh -- the SASS of an object built here (no GPU needed), e.g.
#     sh dev/cuda/sass.sh build-obj/src/cuda/inst/flashc_bwd_hd64_bf16_sm90.o [FUNCTION_NAME]
# The CUDA toolkit on the CPU machine has nvcc and ptxas but no cuobjdump; NVIDIA publishes it on
# PyPI (nvidia-cuda-cuobjdump, and nvidia-cuda-nvdisasm, which it calls), so the first call
# downloads those wheels into $SASS_TOOLS (default ~/.cache/flashc-sass) and unpacks them there. Nothing of it goes into the repo. With a function
# name (mangled, as `cuobjdump -symbols` or the full listing shows), only that kernel.
# What it was for (NOTES.md, eighth session): counting a loop's instructions per step, finding
# serialised wgmma (gsb0 on every HGMMA) and where ptxas put spills (STL / LDL).
set -eu
[ $# -ge 1 ] || { echo "usage: sh dev/cuda/sass.sh OBJECT.o [FUNCTION]" >&2; exit 2; }
T=${SASS_TOOLS:-$HOME/.cache/flashc-sass}
CUOBJDUMP=$(command -v cuobjdump || true)
if [ -z "$CUOBJDUMP" ]; then
    CUOBJDUMP=$(find "$T" -name cuobjdump -type f 2>/dev/null | head -1)
    if [ -z "$CUOBJDUMP" ]; then
        mkdir -p "$T"
        python3 -m pip download --no-deps -q -d "$T" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2
        for w in "$T"/nvidia_cuda_*.whl; do python3 -m zipfile -e "$w" "$T/x"; done
        CUOBJDUMP=$(find "$T/x" -name cuobjdump -type f | head -1)
        chmod +x "$CUOBJDUMP" "$(find "$T/x" -name nvdisasm -type f | head -1)"
    fi
    PATH="$(dirname "$CUOBJDUMP"):$PATH"
fi
if [ $# -ge 2 ]; then "$CUOBJDUMP" -sass -fun "$2" "$1"; else "$CUOBJDUMP" -sass "$1"; fi
