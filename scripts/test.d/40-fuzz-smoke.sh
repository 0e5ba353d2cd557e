#!/usr/bin/env bash
# Fuzz smoke run: builds the libFuzzer targets in fuzz/ (a separate package) with
# --sanitize fuzzer --sanitize address (optimised: -c release) and runs each from the committed seed corpus
# for ACSECURE_FUZZ_RUNS executions (default 10^5). The engine targets run on the engine's in-memory file
# system (MemoryFileSystem): no system call per input.
#
# Fails on any finding (crash, ASan report, hang, or a harness finding: wrong bytes, wrong errors) and
# copies the input to fuzz/FailCases/<target>/ so it can be committed; the unit tests replay that folder.
# Also fails when a target stops at its time bound (ACSECURE_FUZZ_SECONDS) before its executions: the
# bound is a safety net several times the documented time (docs/TESTING.md gives executions/s per
# target), so hitting it means the target became much slower, which is a regression to look at.
# A sanitizer build failure fails the suite: it never skips silently.
#
# The slowest target (FuzzOperationSequence, ~1,300-2,800 executions/s) runs in the background while
# the others run one after another; on a machine with two cores or more it runs as two processes
# (half the executions each, their own seeds, one corpus), so the suite takes about half the time
# that one target would alone plus a little (~1 min warm).
#
#   ACSECURE_FUZZ_TARGETS   the targets to run (default: all six)
#   ACSECURE_FUZZ_RUNS      executions per target (default 100000)
#   ACSECURE_FUZZ_SECONDS   time bound per target (default 300; 0: none)
#   --build-only            build (and check) the targets, run nothing: scripts/test.sh does this in
#                           the background while the Swift tests run, so that this suite finds them built
#   ACSECURE_PREBUILD_PID   that background build, if it still runs: wait for it before building here
#                           (not with --build-only, which that build runs with this variable set too)
set -euo pipefail
build_only=0
[ "${1:-}" != --build-only ] || build_only=1
cd "$(dirname "$0")/../../fuzz"
export SWIFT_BACKTRACE=enable=no
seconds="${ACSECURE_FUZZ_SECONDS:-300}"
runs="${ACSECURE_FUZZ_RUNS:-100000}"
read -r -a targets <<<"${ACSECURE_FUZZ_TARGETS:-FuzzOperationSequence FuzzSecureFileParse FuzzSeedStoreParse FuzzCryptoBlockParse FuzzWrappedFileParse FuzzCAPIArguments}"
background=FuzzOperationSequence
# SwiftPM's --sanitize fuzzer links libFuzzer but (Swift 6.3) does not instrument for coverage: ask for it.
# ACSECURE_SYSCALL_MOCKING: the in-memory file system behind the system-call layer, which release builds
# of the library leave out (Package.swift).
# -sanitize=address,fuzzer in one flag: SwiftPM passes its --sanitize options to swiftc as separate
# -sanitize= flags in an order that changes from one build plan to the next, and swiftc keeps only
# the last one, so about every other plan compiled the Swift code without ASan (the check below).
flags=(-c release --sanitize fuzzer --sanitize address -Xswiftc -sanitize=address,fuzzer
       -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp -Xswiftc -DACSECURE_SYSCALL_MOCKING)

# SwiftPM does not notice a source file added to or removed from a path dependency (the parent
# package) in an existing build directory: the next build leaves the file out, or fails on a missing
# input. When the parent's list of source files changed since the last build here, touching this
# package's manifest makes SwiftPM load the package graph again.
sources="$(cd .. && find Sources CShim -type f | LC_ALL=C sort | sha256sum)"
stamp=.build/acsecure-parent-sources
if [ "$(cat "$stamp" 2>/dev/null)" != "$sources" ]; then touch Package.swift; fi

# The background build of scripts/test.sh leaves a mark: its id and what the targets were built from
# (file contents). The suite of the same run does not build again when the mark matches: another
# `swift build` of this package plans the build anew (SwiftPM does not reuse the plan made by that
# process), and a new plan can order the -sanitize flags differently, which compiles everything again.
built_from() { (cd .. && find Package.swift Sources CShim fuzz/Package.swift fuzz/Harness fuzz/Sources -type f | LC_ALL=C sort | xargs sha256sum | sha256sum); }
from="$(built_from)"
prebuilt=.build/acsecure-prebuilt
[ "$build_only" = 0 ] || rm -f "$prebuilt"

start=$(date +%s)
if [ "$build_only" = 0 ] && [ -n "${ACSECURE_PREBUILD_PID:-}" ] && kill -0 "$ACSECURE_PREBUILD_PID" 2>/dev/null; then
  echo "40-fuzz-smoke: waiting for the background build (scripts/test.sh; its log: prebuild.log)"
  while kill -0 "$ACSECURE_PREBUILD_PID" 2>/dev/null; do sleep 1; done
fi
if [ "$build_only" = 0 ] && [ -n "${ACSECURE_PREBUILD_PID:-}" ] && [ "$(cat "$prebuilt" 2>/dev/null)" = "$ACSECURE_PREBUILD_PID $from" ]; then
  echo "40-fuzz-smoke: the targets were built from these sources by this run's background build (prebuild.log)"
else
  for t in "${targets[@]}"; do
    if ! swift build --product "$t" "${flags[@]}" 2>&1 | { grep -v "warning: Cannot export local symbol" || true; }; then
      echo "40-fuzz-smoke: FAILED to build $t with --sanitize fuzzer --sanitize address (libFuzzer/ASan toolchain support is required)" >&2
      exit 1
    fi
  done
fi
mkdir -p .build && printf '%s\n' "$sources" >"$stamp"
bin="$(swift build --show-bin-path "${flags[@]}")"
for t in "${targets[@]}"; do
  if ! grep -q __sancov_cntrs "$bin/$t"; then
    echo "40-fuzz-smoke: FAILED: $bin/$t has no coverage instrumentation (fuzzing would be blind)" >&2
    exit 1
  fi
  # The ASan runtime is linked even when the Swift code was compiled without ASan: count the
  # instrumented accesses (~12 000 calls to __asan_report_*; 8 without).
  command -v objdump >/dev/null || { echo "40-fuzz-smoke: FAILED: objdump (binutils) is needed to check the ASan instrumentation" >&2; exit 1; }
  checks=$(objdump -d --no-show-raw-insn "$bin/$t" | grep -c "call.*<__asan_report_" || true)
  if [ "$checks" -lt 1000 ]; then
    echo "40-fuzz-smoke: FAILED: $bin/$t is not ASan-instrumented ($checks checks)" >&2
    exit 1
  fi
done
echo "40-fuzz-smoke: built in $(( $(date +%s) - start )) s"
if [ "$build_only" = 1 ]; then
  [ -z "${ACSECURE_PREBUILD_PID:-}" ] || printf '%s %s\n' "$ACSECURE_PREBUILD_PID" "$from" >"$prebuilt"
  exit 0
fi

work="$(mktemp -d /tmp/acsecure-fuzz-smoke-XXXXXX)"
trap 'rm -rf "$work"' EXIT

# Runs one target; its exit status goes to $work/<target>/rc.
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp Corpus/"$t"/* "$work/$t/corpus/"
done
# fuzz TARGET [PART EXECUTIONS]: one libFuzzer process; PART names its log and status (a target run
# as two processes shares its corpus and artifacts folder).
fuzz() {
  local t=$1 part=${2:-} n=${3:-$runs}
  local seed=()
  [ -z "$part" ] || seed=(-seed=$(( (RANDOM << 15 | RANDOM) * 2 + part )))
  set +e
  "$bin/$t" "$work/$t/corpus" -runs="$n" "${seed[@]}" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -max_len=4096 \
      -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" >"$work/$t/log$part" 2>&1
  echo $? >"$work/$t/rc$part"
  set -e
}
split=0
if [ "${#targets[@]}" -gt 1 ] && [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then split=1; fi

if [ "$seconds" = 0 ]; then echo "== ${#targets[@]} targets, $runs runs each"; else echo "== ${#targets[@]} targets, $runs runs each (bound ${seconds} s)"; fi
pids=()
for t in "${targets[@]}"; do
  [ "$t" = "$background" ] && [ "${#targets[@]}" -gt 1 ] || continue
  if [ "$split" = 1 ]; then
    fuzz "$t" 1 $(( (runs + 1) / 2 )) & pids+=($!)
    fuzz "$t" 2 $(( runs / 2 )) & pids+=($!)
  else
    fuzz "$t" & pids+=($!)
  fi
done
for t in "${targets[@]}"; do
  if [ "$t" != "$background" ] || [ "${#targets[@]}" -eq 1 ]; then fuzz "$t"; fi
done
for p in "${pids[@]}"; do wait "$p"; done

failed=0
for t in "${targets[@]}"; do
  # One process (log) or two (log1, log2): executions and rates add up, the coverage is the larger.
  logs=("$work/$t"/log*)
  log="${logs[0]}"
  rc=0 execs=0 rate=0 covs=0
  for l in "${logs[@]}"; do
    r=$(cat "$work/$t/rc${l##*/log}")
    [ "$r" -eq 0 ] || rc=$r
    e=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$l" | grep -o '[0-9]*$' || echo 0)
    a=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$l" | grep -o '[0-9]*$' || echo 0)
    c=$(grep -o 'cov: [0-9]*' "$l" | tail -1 | grep -o '[0-9]*$' || echo 0)
    execs=$((execs + ${e:-0})) rate=$((rate + ${a:-0}))
    [ "${c:-0}" -le "$covs" ] || covs=$c
    [ "$r" -eq 0 ] || log="$l"
  done
  cov="cov: $covs"
  echo "$t: exit $rc, $execs executions ($rate/s$([ "${#logs[@]}" -gt 1 ] && echo " in ${#logs[@]} processes")), $cov, corpus $(ls "$work/$t/corpus" | wc -l) inputs"
  if [ "$rc" -ne 0 ] || ls "$work/$t/artifacts/"* >/dev/null 2>&1; then
    failed=1
    echo "40-fuzz-smoke: $t found a problem:" >&2
    grep -E 'FINDING|ERROR: AddressSanitizer|ERROR: libFuzzer|Fatal error|SUMMARY' "$log" | head -20 >&2 || tail -40 "$log" >&2
    mkdir -p "FailCases/$t"
    for a in "$work/$t/artifacts/"*; do
      [ -e "$a" ] || continue
      cp "$a" "FailCases/$t/"
      echo "40-fuzz-smoke: saved fuzz/FailCases/$t/$(basename "$a") (commit it: the unit tests replay it)" >&2
    done
  elif [ "${execs:-0}" -lt "$runs" ]; then
    failed=1
    echo "40-fuzz-smoke: $t ran only $execs of $runs executions in its ${seconds} s bound: it became much slower (docs/TESTING.md)" >&2
  fi
done
echo "40-fuzz-smoke: total $(( $(date +%s) - start )) s"
exit "$failed"
