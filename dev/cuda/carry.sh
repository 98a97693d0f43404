#!/bin/sh
# carry.sh -- take builds made here (no GPU) to the device machine, where compiling would spend its
# minutes. Every session has done this by hand; this is that routine, written down.
#
# Here:   sh dev/cuda/carry.sh add NAME [TREE]
#   builds TREE (default: this checkout; e.g. a worktree of a variant) for sm_90a into TREE/build-obj
#   (incremental: ~1.5 min when one header changed, more after a clean), strips libflashc.so and the
#   three test programs into build-gpu/pack/NAME/ and packs every NAME there into
#   build-gpu/carry/carry.tar.xz (~3.5 MB a build; the device tool carries 64 MiB, so the unpacked
#   builds, ~38 MB each, stay outside build-gpu/carry).
# There:  sh dev/cuda/carry.sh unpack     (in the device command, carry ["build-gpu/carry"])
#   unpacks to /tmp/x: /tmp/x/NAME/libflashc.so, test_flashc, test_kvcache, test_fp8, test_bad_input. Then e.g.
#   mkdir -p build-ep && cp -r /tmp/x/head build-ep/ && OUT=$OUT BUILD=build-ep/head SKIP_BUILD=1 sh scripts/gpu.sh test
#   python3 dev/cuda/ab.py --lib /tmp/x/head/libflashc.so --lib2 /tmp/x/NAME/libflashc.so --bwd
# build-gpu/ is ignored by git: nothing built goes into the repo.
set -eu
cd "$(dirname "$0")/../.."
CARRY=build-gpu/carry PACK=build-gpu/pack
mkdir -p "$CARRY"
case "${1:-}" in
add)
    [ $# -ge 2 ] || { echo "usage: sh dev/cuda/carry.sh add NAME [TREE]" >&2; exit 2; }
    name=$2 tree=${3:-.}
    make -C "$tree" -j"$(nproc)" BUILD=build-obj GPU_ARCH=-gencode=arch=compute_90a,code=sm_90a \
        lib build-obj/test_flashc build-obj/test_kvcache build-obj/test_fp8 build-obj/test_bad_input \
        >"$PACK.$name.log" 2>&1 ||
        { tail -20 "$PACK.$name.log"; exit 1; }
    grep -h "spilled" "$PACK.$name.log" | sed 's/^/ptxas: /' | sort -u || true
    mkdir -p "$PACK/$name"
    for f in libflashc.so test_flashc test_kvcache test_fp8 test_bad_input; do
        cp "$tree/build-obj/$f" "$PACK/$name/"
    done
    strip "$PACK/$name"/*
    (cd "$PACK" && tar cf - .) | xz -T2 -6 >"$CARRY/carry.tar.xz"
    echo "$CARRY/carry.tar.xz: $(ls "$PACK" | tr '\n' ' ')($(du -h "$CARRY/carry.tar.xz" | cut -f1))"
    ;;
unpack)
    mkdir -p /tmp/x && xz -dc "$CARRY/carry.tar.xz" | tar xf - -C /tmp/x
    ls /tmp/x
    ;;
*)
    echo "usage: sh dev/cuda/carry.sh add NAME [TREE] | unpack" >&2
    exit 2
    ;;
esac
