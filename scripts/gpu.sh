#!/bin/sh
# gpu.sh -- everything the CUDA backend needs checked on a GPU machine, in one call, from the repo root:
#   1. build: make -j (nvcc found => the CUDA backend is in), plus build/test_flashc
#   2. the whole C test sweep on the CUDA backend against the fp64 reference
#      (build/test_flashc --backend cuda: O, LSE, dQ, dK, dV, masks, GQA, varlen, strides, determinism)
#      and the KV-cache / merge tests (build/test_kvcache --backend cuda: paged, splits, rotary) and
#      the e4m3 forward (build/test_fp8 --backend cuda), then random cases of both (--fuzz, a new
#      seed each run: FUZZ_SEED=N reruns one)
#   3. the Python tests on the GPU (FLASHC_REQUIRE_CUDA=1 pytest python/tests, or PYTEST_ARGS), then
#      the forward at training shapes on every SM into a NaN-poisoned O (dev/cuda/poison_fwd.py: the
#      test programs' cases are small, mostly one tile a CTA; session 42's pn variant passed them)
#   4. the benchmark beside SDPA FLASH / CUDNN and the GEMM ceiling (bench/bench_gpu.py), which
#      writes bench/results/<gpu>-<date>-cuda.jsonl, then its decode shapes (--decode) unless
#      BENCH_DECODE=0
#   5. compute-sanitizer memcheck and racecheck on the --quick subset (small shapes), on the "rows
#      holding NaN / Inf" cases (varlen / seqused_k, both backward modes), on test_kvcache and on
#      test_fp8 --quick, and on random cases (--fuzz, the test step's seed)
# Logs go to $BUILD/gpu-logs; with the device tool's $OUT set, summary.txt is kept up to date there
# as each step ends, and the logs and results files follow at the end (gpu-logs.tar.gz, *.jsonl); a
# short summary is printed last.
# Without a GPU (no nvidia-smi, or no device), steps 2-4 are skipped with a message and it exits 0.
# Exit status: 0 all passed, 1 a test or sanitizer failed, 2 the build failed.
#
# Usage: sh scripts/gpu.sh [all|test|python|bench|sanitize|memcheck|racecheck]...   (default: all)
#   Under the device tool's 600 s a call, one step a call. On the H200 (2026-12-03, session 24):
#   python 175 s, bench 69, memcheck 134; test (session 36, with the fuzz runs) past 560 s serial:
#   four test_flashc sweeps 74-77 s each, its fuzz 56, test_fp8 120 + 16 + its fuzz, so test_fp8's
#   runs now go beside the rest;
#   racecheck of test_flashc --quick alone ran past 595 s (its "rows holding" run took 72), so split
#   racecheck over calls with SANITIZE_RUNS and SANITIZE_FILTER (e.g. SANITIZE_RUNS=quick
#   SANITIZE_FILTER="cuda bf16", then "cuda f16": every case line names backend and dtype so; then
#   SANITIZE_RUNS="ctas3" the same way, then SANITIZE_RUNS="rows kvcache fp8". On an H100 (session
#   41) the halves took quick 50 / 40 s (bf16 / f16), ctas3 49 / 157 s, rows 59, kvcache 24, fp8 21:
#   every racecheck run in two calls).
#   BUILD=dir (default build); GPU_JOBS=N make parallelism (default: nproc); SKIP_BUILD=1 uses an
#   existing $BUILD/libflashc.so and $BUILD/test_flashc; TEST_TIMEOUT / SANITIZE_TIMEOUT in seconds;
#   BENCH_ARGS="--quick" is passed to bench_gpu.py; SANITIZE_FILTER narrows the two --quick runs'
#   cases; SANITIZE_RUNS picks the sanitizer runs (default: quick ctas3 rows kvcache fp8 fuzz);
#   FUZZ_SEED sets the --fuzz runs' seed (default: from the clock, named in their lines).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LOG=$BUILD/gpu-logs # (not under $OUT while running: the device tool returns at most 8 files)
rm -rf "$LOG"
mkdir -p "$LOG"
STEPS=${*:-all}
want() { case " $STEPS " in *" all "*|*" $1 "*) return 0 ;; esac; return 1; }
SUMMARY="$LOG/summary.txt"
: >"$SUMMARY"
touch "$LOG/.start" # results files newer than this are this run's
# each note also lands in $OUT/summary.txt at once, so a run cut off by the device tool's time limit
# still returns what it got that far
note() { echo "$*" | tee -a "$SUMMARY"; [ -n "${OUT:-}" ] && cp "$SUMMARY" "$OUT/summary.txt"; return 0; }

if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -e "$BUILD/libflashc.so" ]; then
    start=$(date +%s)
    make -j"${GPU_JOBS:-$(nproc)}" BUILD="$BUILD" lib "$BUILD/test_flashc" "$BUILD/test_kvcache" "$BUILD/test_fp8" \
        "$BUILD/test_bad_input" >"$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; note "build: FAILED (log build.log)"; exit 2; }
    note "build: ok in $(( $(date +%s) - start )) s ($(grep -c 'nvcc' "$LOG/build.log") nvcc calls; log build.log)"
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    note "gpu: no NVIDIA GPU here: tests, sanitizers and benchmark skipped"
    exit 0
fi
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | head -1)"

rc=0
seed=${FUZZ_SEED:-$(( $(date +%s) % 100000 ))} # the --fuzz runs' seed
# one test program (the command after the label and the log's name): its last line noted, FAIL lines
# shown and rc set on failure
run_test() {
    label=$1 tlog=$LOG/$2
    shift 2
    start=$(date +%s)
    timeout "${TEST_TIMEOUT:-900}" "$@" >"$tlog" 2>&1
    t=$?
    [ $t -ne 0 ] && rc=1 && grep -E "^FAIL" "$tlog" | head -20 | tee -a "$SUMMARY"
    # (the skip count too: a case newly refused as unsupported shows as a change there, not a failure)
    skips=$(grep -E "^[a-z_0-9]+: [0-9]+ skipped" "$tlog" | tail -1 | sed 's/^[a-z_0-9]*: //; s/ (.*//')
    note "$label: $(tail -1 "$tlog")${skips:+, $skips} [exit $t, $(( $(date +%s) - start )) s; log $(basename "$tlog")]"
}

if want test; then
    # test_fp8 spends its time in the fp64 reference and the naive on one CPU core: its three runs go
    # beside the others (the machine has 16 cores) and are noted when they end, which keeps the step
    # under the device tool's 600 s (561 s serial, session 36)
    (
        rc=0
        run_test "test_fp8 (cuda)" fp8.log "$BUILD/test_fp8" --backend cuda
        run_test "test_fp8 (cuda, 5 CTAs, split tiles)" fp8_split.log env FLASHC_CUDA_CTAS=5 FLASHC_CUDA_SPLIT_KEYS=0 \
            "$BUILD/test_fp8" --backend cuda --quick
        run_test "test_fp8 (cuda, --fuzz 60 --seed $seed)" fp8fuzz.log "$BUILD/test_fp8" --backend cuda --fuzz 60 --seed "$seed"
        exit $rc
    ) &
    fp8_pid=$!
    run_test "test (cuda, full sweep)" test.log "$BUILD/test_flashc" --backend cuda
    # the same sweep on a persistent forward grid of 3 CTAs: many tiles per CTA, paired tiles
    run_test "test (cuda, FLASHC_CUDA_CTAS=3)" test_ctas3.log env FLASHC_CUDA_CTAS=3 "$BUILD/test_flashc" --backend cuda
    # 7 CTAs with the stream-K tail wherever it applies (FLASHC_CUDA_SPLIT_KEYS=0): split tiles
    run_test "test (cuda, 7 CTAs, split tiles)" test_split.log env FLASHC_CUDA_CTAS=7 FLASHC_CUDA_SPLIT_KEYS=0 \
        "$BUILD/test_flashc" --backend cuda
    # the mma.sync (FA2-class) kernels, which other GPUs run: forced here on sm_90
    run_test "test (cuda, FLASHC_CUDA_SM90=0)" test_mma.log env FLASHC_CUDA_SM90=0 "$BUILD/test_flashc" --backend cuda
    run_test "test_kvcache (cuda)" kvcache.log "$BUILD/test_kvcache" --backend cuda
    # bad input on the device: the description-level cases through flashc_supports (device_desc_cases)
    if [ -x "$BUILD/test_bad_input" ]; then run_test "test_bad_input" bad_input.log "$BUILD/test_bad_input"; fi
    # random cases beside the tables, a new seed each run (FUZZ_SEED reruns one; the label names it)
    run_test "test (cuda, --fuzz 500 --seed $seed)" fuzz.log "$BUILD/test_flashc" --backend cuda --fuzz 500 --seed "$seed"
    run_test "test_kvcache (cuda, --fuzz 200 --seed $seed)" kvfuzz.log "$BUILD/test_kvcache" --backend cuda --fuzz 200 --seed "$seed"
    wait $fp8_pid || rc=1
fi

if want python; then
    start=$(date +%s)
    FLASHC_LIBRARY="$PWD/$BUILD/libflashc.so" FLASHC_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1 timeout "${PYTEST_TIMEOUT:-900}" \
        python3 -m pytest -q ${PYTEST_ARGS:-python/tests} >"$LOG/python.log" 2>&1
    t=$?
    [ $t -ne 0 ] && rc=1 && grep -E "FAILED|Error" "$LOG/python.log" | head -10 | tee -a "$SUMMARY"
    note "python (cuda): $(tail -1 "$LOG/python.log") [exit $t, $(( $(date +%s) - start )) s; log python.log]"
    start=$(date +%s)
    PYTHONUNBUFFERED=1 timeout 300 python3 dev/cuda/poison_fwd.py "$PWD/$BUILD/libflashc.so" --runs 3 >"$LOG/poison.log" 2>&1
    t=$?
    clean=" 0/3 runs with NaN in O, 0 in" # a shape's line when no run left a NaN
    [ $t -ne 0 ] && rc=1 && grep -v "$clean" "$LOG/poison.log" | head -10 | tee -a "$SUMMARY"
    note "poison_fwd (cuda, training shapes, bf16 and e4m3, 3 runs each): $(grep -c "$clean" "$LOG/poison.log") of $(grep -c " runs with NaN in O" "$LOG/poison.log") free of NaN [exit $t, $(( $(date +%s) - start )) s; log poison.log]"
fi


if want bench; then
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONUNBUFFERED=1 python3 bench/bench_gpu.py --lib "$BUILD/libflashc.so" ${BENCH_ARGS:-} 2>&1 | tee "$LOG/bench.log" | tail -48 >/tmp/flashc_bench_tail.txt
    if [ "${BENCH_DECODE:-1}" != 0 ]; then
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONUNBUFFERED=1 python3 bench/bench_gpu.py --lib "$BUILD/libflashc.so" --decode 2>&1 | tee "$LOG/bench_decode.log" | tail -16 >>/tmp/flashc_bench_tail.txt
    fi
    find bench/results -name '*-cuda*.jsonl' -newer "$LOG/.start" -exec cp {} "$LOG/" \; 2>/dev/null
fi

# compute-sanitizer --tool $1 over the command after the label ($2) and the log's name ($3); its
# summary and the tests' count noted
sanitize() {
    tool=$1 label=$2 slog=$LOG/$3
    shift 3
    start=$(date +%s)
    timeout "${SANITIZE_TIMEOUT:-600}" compute-sanitizer --tool "$tool" --error-exitcode 99 "$@" >"$slog" 2>&1
    t=$?
    [ $t -ne 0 ] && rc=1 && grep -E "ERROR|Invalid|Race|hazard" "$slog" | head -10 | tee -a "$SUMMARY"
    note "compute-sanitizer $label: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$slog" | tail -1) |" \
         "$(grep -E 'passed.*failed' "$slog" | tail -1) [exit $t, $(( $(date +%s) - start )) s]"
}

if want sanitize || want memcheck || want racecheck; then
    if command -v compute-sanitizer >/dev/null 2>&1; then
        RUNS=" ${SANITIZE_RUNS:-quick ctas3 rows kvcache fp8 fuzz} "
        part() { case $RUNS in *" $1 "*) return 0 ;; esac; return 1; }
        for tool in memcheck racecheck; do
            want sanitize || want $tool || continue
            part quick && sanitize $tool $tool $tool.log "$BUILD/test_flashc" --backend cuda --quick \
                ${SANITIZE_FILTER:+--filter "$SANITIZE_FILTER"}
            # a persistent forward grid of 3 CTAs: the rings and tile records wrap many times, and
            # the last rounds' tiles split between CTAs (the stream-K tail, on every size here)
            part ctas3 && FLASHC_CUDA_CTAS=3 FLASHC_CUDA_SPLIT_KEYS=0 sanitize $tool "$tool (3 CTAs)" $tool-ctas3.log "$BUILD/test_flashc" \
                --backend cuda --quick ${SANITIZE_FILTER:+--filter "$SANITIZE_FILTER"}
            # the ragged and deterministic backward paths: rows past a sequence's end hold NaN / Inf
            part rows && sanitize $tool "$tool (rows holding)" $tool-rows.log "$BUILD/test_flashc" --backend cuda \
                --filter "rows holding"
            # the decode kernels and the merge: every KV-cache case (small caches)
            part kvcache && sanitize $tool "$tool (test_kvcache)" kv-$tool.log "$BUILD/test_kvcache" --backend cuda
            # the e4m3 forward (its V^T pre-pass and both key-block tiles)
            part fp8 && sanitize $tool "$tool (test_fp8)" fp8-$tool.log "$BUILD/test_fp8" --backend cuda --quick
            # random shapes (the seed of this run's --fuzz lines): odd head dims, lengths, pages
            part fuzz && sanitize $tool "$tool (--fuzz 40 --seed $seed)" fuzz-$tool.log "$BUILD/test_flashc" --backend cuda \
                --fuzz 40 --seed "$seed"
            part fuzz && sanitize $tool "$tool (test_kvcache --fuzz 30 --seed $seed)" kvfuzz-$tool.log "$BUILD/test_kvcache" \
                --backend cuda --fuzz 30 --seed "$seed"
        done
    else
        note "compute-sanitizer: not installed: skipped"
    fi
fi

echo
echo "================ gpu.sh summary ================"
want bench && cat /tmp/flashc_bench_tail.txt
cat "$SUMMARY"
# the device tool returns at most 8 files from $OUT: the summary and results files as they are,
# every log in one archive
if [ -n "${OUT:-}" ]; then
    cp "$SUMMARY" "$LOG"/*.jsonl "$OUT/" 2>/dev/null
    tar -C "$LOG/.." -czf "$OUT/gpu-logs.tar.gz" gpu-logs
fi
exit $rc
