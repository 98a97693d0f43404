#!/bin/sh
# pending.sh -- the device calls for the experiments waiting in dev/cuda/patches (see the README
# there), written down once: each session without a GPU has rebuilt this routine by hand, and
# build-gpu/ does not survive between sessions.
#
# Here (no GPU):  sh dev/cuda/pending.sh pack
#   applies every patch in dev/cuda/patches on HEAD, each in its own worktree /tmp/pending/NAME
#   (NAME = the patch's name without its number: 0013-bwd-dq-sw32.patch -> bwd-dq-sw32), and packs
#   main (this checkout) and each NAME into build-gpu/carry with carry.sh (~1.5 min a build here),
#   and builds dev/cuda/readbw.cu (the decode read lab) and dev/cuda/mufu_lab.cu (the ex2 rate and a
#   softmax's, at one and two warps a scheduler: session 52's question) there.
# There (carry ["build-gpu/carry"]; logs under $OUT; each mode fits one 600 s call):
#   sh dev/cuda/pending.sh check NAME  correctness: test_flashc's backward cases (all CTAs, then 3),
#                                      --fuzz 300, racecheck and memcheck over the bf16 backward
#                                      (CHECK_FILTER=STR: the cases whose lines hold STR instead of
#                                      "bwd cuda", e.g. "D=256"; the sanitizers' then "STR" too)
#   sh dev/cuda/pending.sh main        main's tests side by side (a short form of gpu.sh test)
#   sh dev/cuda/pending.sh sweeps      gpu.sh test's other runs of main side by side: test_flashc at
#                                      3 CTAs, at 7 with split tiles, with FLASHC_CUDA_SM90=0, and
#                                      test_flashc / test_kvcache --fuzz (FUZZ_SEED, default clock)
#   (RUN_TIMEOUT=S: each test run of check / main, default 480 s)
#   sh dev/cuda/pending.sh ab [NAME..] one-process A/B of each NAME against main, backward, D 128
#                                      and 64, S 512-16k (dev/cuda/ab.py --bwd), then ncu's shared
#                                      wavefronts of the D = 128 S = 4096 backward for main and each,
#                                      then readbw KV_EVEN=1 (batch 16's decode loads on 128 per-head
#                                      CTAs vs spread over every SM: NOTES session 37; H200 unmeasured)
#   sh dev/cuda/pending.sh bench       main's gpu.sh bench on its carried build (the benchmark beside
#                                      SDPA and the ceilings; the bars' card is the H200), then readbw
#                                      KV_EVEN=1 and mufu_lab (~4 min)
#   sh dev/cuda/pending.sh ncu-fwd [NAME] ncu of NAME's (default main's) forward at D = 64 causal, S = 512
#                                      (the 2x128 short-row tile, 0.84-0.88x CUDNN) against 16384 (3x128,
#                                      1.09-1.11x): throughput, scheduler, warp states, then the MUFU
#                                      (xu) / ALU / FMA pipes (NOTES session 50; ~2-3 min)
#   sh dev/cuda/pending.sh h200 MODE [ARGS]  MODE only on an H200 (the bars' card), else stop at once
#                                      (exit 3): a call asking for an H200 may get an H100 (s42-s52)
#                                      and spend its budget on numbers from the wrong card. The short
#                                      bench for a low budget (untimed): BENCH_ARGS="--dims 64,256
#                                      --seqlens 512,1024,2048" sh dev/cuda/pending.sh h200 bench
# ab times the backward (ab.py --bwd); AB_ARGS replaces its ab.py arguments (a forward patch: e.g.
# AB_ARGS="--dims 256 --dtypes bf16 --seqlens 512,1024,2048,4096,8192,16384 --rounds 7"), and then
# the backward's ncu step is skipped.
set -eu
cd "$(dirname "$0")/../.."
name_of() { basename "$1" .patch | sed 's/^[0-9]*-//'; } # 0013-bwd-dq-sw32.patch -> bwd-dq-sw32
names() { for p in dev/cuda/patches/0*.patch; do [ -e "$p" ] && name_of "$p"; done; }
out=${OUT:-/tmp/pending-out}
mkdir -p "$out"

unpacked() { [ -d /tmp/x/main ] || sh dev/cuda/carry.sh unpack >/dev/null; } # the carried builds, once a machine
readbw_even() { # batch 16's decode loads on 128 per-head CTAs vs spread over every SM (NOTES session 37)
    if [ -x build-gpu/carry/readbw ]; then KV_EVEN=1 timeout 120 build-gpu/carry/readbw 2>&1 | tee "$out/readbw-kv-even.txt"; fi
}

run() { # LABEL LOG CMD...: the command's last line beside its label ($n: the build's name)
    label=$1 log=$out/$2; shift 2
    timeout "${RUN_TIMEOUT:-480}" "$@" >"$log" 2>&1 && rc=0 || rc=$?
    echo "$n $label: $(tail -n 1 "$log") [exit $rc]" | tee -a "$out/summary.txt"
}

# A variant's worktree starts from main's objects (build-obj, just built), touched so that make
# takes them as new; then every object whose source includes a file the patch changed is removed,
# and the library and test programs, so that only those are rebuilt. The Makefile makes every CUDA
# object depend on every header, so a fresh worktree rebuilt all 41 objects; a patch to the
# forward's header now rebuilds 8 (session 43: main and two such variants packed in 5 min here).
seed_objects() { # TREE
    changed=$(git -C "$1" diff --name-only HEAD "$(git rev-parse HEAD)")
    cp -a build-obj "$1/"
    find "$1/build-obj" -type f -exec touch {} +
    rm -f "$1"/build-obj/libflashc.* "$1"/build-obj/test_* "$1"/build-obj/tests/*.o
    for o in $(cd build-obj && find src -name '*.o'); do
        src=${o%.o}.cu
        [ -e "$src" ] || src=${o%.o}.c
        case $src in # its files, one a line, relative to the repo (nvcc writes src/cuda/inst/../x.cuh)
        *.cu) deps=$(nvcc -M -std=c++17 -DFLASHC_BUILD -Isrc -Iinclude "$src") ;;
        *) deps=$(cc -MM -DFLASHC_BUILD -DFLASHC_WITH_CUDA -Isrc -Iinclude "$src") ;;
        esac
        deps=$(echo "$deps" | tr -s ' \\' '\n\n' | grep -v -e ':$' -e '^$' | xargs realpath -m --relative-to=.)
        echo "$deps" | grep -qxF "$changed" && rm -f "$1/build-obj/$o" # (each changed file a pattern)
    done
    echo "$1: $(find "$1/build-obj/src" -name '*.o' | wc -l) of $(find build-obj/src -name '*.o' | wc -l) objects kept from main"
}

case "${1:-}" in
pack)
    rm -rf build-gpu/pack build-gpu/carry
    for tree in /tmp/pending/*; do # every earlier variant's worktree, deleted patches' too
        [ -d "$tree" ] && { git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"; }
    done
    git worktree prune
    sh dev/cuda/carry.sh add main
    for p in dev/cuda/patches/0*.patch; do
        [ -e "$p" ] || continue # no patch pending: main alone
        n=$(name_of "$p")
        tree=/tmp/pending/$n
        git worktree add -q --detach "$tree" HEAD
        git -C "$tree" am -q -3 "$PWD/$p"
        seed_objects "$tree"
        sh dev/cuda/carry.sh add "$n" "$tree"
    done
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude dev/cuda/readbw.cu -o build-gpu/carry/readbw
    nvcc -O3 -gencode=arch=compute_90a,code=sm_90a dev/cuda/mufu_lab.cu -o build-gpu/carry/mufu_lab
    ;;
check)
    [ $# -eq 2 ] || { echo "usage: sh dev/cuda/pending.sh check NAME" >&2; exit 2; }
    n=$2
    unpacked
    t=/tmp/x/$n/test_flashc
    # all five side by side (16 cores there; the tests are bound by the fp64 reference on the CPU),
    # so that one call holds them: serially they could take 5 x 280 s
    f=${CHECK_FILTER:-bwd cuda} fs=${CHECK_FILTER:-bwd cuda bf16}
    run "cases '$f'" check-$n.log "$t" --backend cuda --filter "$f" &
    run "cases '$f', 3 CTAs" check3-$n.log env FLASHC_CUDA_CTAS=3 "$t" --backend cuda --filter "$f" &
    run "fuzz 300" fuzz-$n.log "$t" --backend cuda --fuzz 300 --seed 3707 &
    run "racecheck" race-$n.log compute-sanitizer --tool racecheck --error-exitcode 1 "$t" --backend cuda --quick --filter "$fs" &
    run "memcheck" mem-$n.log compute-sanitizer --tool memcheck --error-exitcode 1 "$t" --backend cuda --quick --filter "$fs" &
    wait
    ;;
main)
    # main's own tests side by side, when the budget has no room for gpu.sh test (~540 s): one
    # whole test_flashc sweep, test_kvcache, test_fp8 --quick, test_bad_input (~150-250 s)
    unpacked
    t=/tmp/x/main n=main
    run "test_flashc" main-flashc.log "$t/test_flashc" --backend cuda &
    run "test_kvcache" main-kvcache.log "$t/test_kvcache" --backend cuda &
    run "test_fp8 --quick" main-fp8.log "$t/test_fp8" --backend cuda --quick &
    run "test_bad_input" main-bad.log "$t/test_bad_input" &
    wait
    ;;
sweeps)
    unpacked
    t=/tmp/x/main n=main seed=${FUZZ_SEED:-$(( $(date +%s) % 100000 ))}
    run "test_flashc, 3 CTAs" sw-ctas3.log env FLASHC_CUDA_CTAS=3 "$t/test_flashc" --backend cuda &
    run "test_flashc, 7 CTAs, split tiles" sw-split.log env FLASHC_CUDA_CTAS=7 FLASHC_CUDA_SPLIT_KEYS=0 \
        "$t/test_flashc" --backend cuda &
    run "test_flashc, SM90=0" sw-mma.log env FLASHC_CUDA_SM90=0 "$t/test_flashc" --backend cuda &
    run "test_flashc --fuzz 500 --seed $seed" sw-fuzz.log "$t/test_flashc" --backend cuda --fuzz 500 --seed "$seed" &
    run "test_kvcache --fuzz 200 --seed $seed" sw-kvfuzz.log "$t/test_kvcache" --backend cuda --fuzz 200 --seed "$seed" &
    wait
    ;;
ab)
    shift
    [ $# -gt 0 ] || set -- $(names)
    unpacked
    for n in "$@"; do
        python3 dev/cuda/ab.py --lib /tmp/x/main/libflashc.so --lib2 "/tmp/x/$n/libflashc.so" \
            ${AB_ARGS:---bwd --rounds 9 --dims 128,64 --seqlens 512,1024,2048,4096,8192,16384} 2>&1 | tee "$out/ab-$n.txt"
    done
    if [ -z "${AB_ARGS:-}" ]; then # the backward's A/B: its ncu too
        for n in main "$@"; do # launch 7: the 4th call's first backward kernel (its split tail is the 2nd)
            timeout 120 ncu --kernel-name regex:flashc_bwd_sm90_kernel --launch-skip 6 --launch-count 1 \
                --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables \
                python3 dev/cuda/profile_train.py --lib "/tmp/x/$n/libflashc.so" --bwd --dim 128 --seqlen 4096 \
                >"$out/ncu-$n.txt" 2>&1 || true
            echo "== ncu $n: $(grep -o 'flashc_bwd_sm90_kernel<[^>]*>' "$out/ncu-$n.txt" | head -n 1)"
            grep -iE "Duration|bank conflict|excessive wavefronts" "$out/ncu-$n.txt" | sed 's/^ */  /' || true
        done
    fi
    readbw_even
    ;;
bench)
    unpacked
    # (bench reads only $BUILD/libflashc.so, so the unpacked build serves as it is)
    OUT=$out BUILD=/tmp/x/main SKIP_BUILD=1 timeout 300 sh scripts/gpu.sh bench >"$out/gpu-bench.log" 2>&1 || true
    tail -n 60 "$out/gpu-bench.log"
    readbw_even
    if [ -x build-gpu/carry/mufu_lab ]; then timeout 60 build-gpu/carry/mufu_lab 2>&1 | tee "$out/mufu_lab.txt"; fi
    ;;
h200)
    [ $# -ge 2 ] || { echo "usage: sh dev/cuda/pending.sh h200 MODE [ARGS]" >&2; exit 2; }
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    echo "gpu: $gpu"
    case $gpu in *H200*) ;; *) echo "not an H200: stopping"; exit 3 ;; esac
    shift
    exec sh dev/cuda/pending.sh "$@" # (the cd above: the repo root)
    ;;
ncu-fwd)
    n=${2:-main}
    unpacked
    # launches 1-2 of profile_train.py --dim 64 are warm-ups, 3 the bf16 forward
    one="--kernel-name regex:flashc_fwd_sm90_ws_kernel --launch-skip 2 --launch-count 1"
    pipes=sm__inst_executed.avg.per_cycle_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
    pipes=$pipes,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
    for S in 512 16384; do
        prof="python3 dev/cuda/profile_train.py --lib /tmp/x/$n/libflashc.so --dim 64 --seqlen $S --causal"
        log=$out/ncu-fwd-$n-$S.txt
        timeout 90 ncu $one --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
            --section WarpStateStats $prof >"$log" 2>&1 || true
        timeout 60 ncu $one --metrics "$pipes" $prof >>"$log" 2>&1 || true
        echo "== ncu $n D = 64 causal S = $S"
        grep -E "Frequency|Duration|Throughput|Issue Slots|Eligible|Warp Cycles|represents|sm__" "$log" |
            sed 's/^ */  /' || true
    done
    ;;
*)
    echo "usage: sh dev/cuda/pending.sh pack | check NAME | main | sweeps | ab [NAME..] | bench | h200 MODE [ARGS] | ncu-fwd [NAME]" >&2
    exit 2
    ;;
esac
