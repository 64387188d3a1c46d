#!/usr/bin/env bash
# Runs every libFuzzer target (or those named after SECONDS) for SECONDS each, one after another,
# on one core, at low priority. The committed seeds (fuzz/corpus/<target>) are read, never
# written; what the fuzzer learns goes to build-fuzz/corpus/<target>, crashes to
# build-fuzz/artifacts/<target>/. Exits non-zero if any target found a crash, leak or timeout.
#
#   bash fuzz/run.sh 600                      # ten minutes each
#   bash fuzz/run.sh 20 regex schema          # two targets
#   BUILD=build-fuzz NICE=10 bash fuzz/run.sh 30
#
# Builds build-fuzz first when it is missing (clang-14, tools/setup.sh installs it).
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
build=${BUILD:-build-fuzz}
nice_level=${NICE:-10}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors config tokenizer chat_template output_parser regex schema server audio image)

if [ ! -f "$build/build.ninja" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DGEMMA_FUZZ=ON -DGEMMA_BUILD_TESTS=OFF \
    -DGEMMA_VULKAN=OFF >/dev/null || exit 1
fi
nice -n "$nice_level" ninja -C "$build" -j"${JOBS:-2}" "${targets[@]/#/fuzz_}" >/dev/null || exit 1

status=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  art="$build/artifacts/$t/"
  mkdir -p "$work" "$art"
  log="$build/fuzz_$t.log"
  # -timeout: one input may take at most 10 s (30 s for the automaton compilers: a 1,000-character
  # pattern legitimately takes ~2 s natively, ~40x that with coverage and ASan); -rss_limit_mb:
  # memory per process; leaks are detected (the default) and count as findings.
  timeout=10
  case $t in regex | schema) timeout=30 ;; esac
  LSAN_OPTIONS=suppressions=fuzz/lsan.supp nice -n "$nice_level" "$build/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" -max_total_time="$secs" \
    -timeout=$timeout -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art" >"$log" 2>&1
  rc=$?
  execs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.*corp: \([0-9]*\).*/\1/p' <<<"$last")
  printf '%-14s rc=%d execs=%s cov=%s ft=%s corpus=%s %s\n' "$t" "$rc" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$( [ $rc -ne 0 ] && echo "FINDING: see $log and $art")"
  [ $rc -ne 0 ] && status=1
done
exit $status
