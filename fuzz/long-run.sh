#!/usr/bin/env bash
# Long fuzzing run: every target for 10^6 executions (the smoke run in scripts/test.d/40-fuzz-smoke.sh
# does 10^5 each). Same build, corpus, checks and FailCases handling as the smoke run (it is the smoke
# run with other defaults); prints executions, executions/s and coverage per target. Findings are
# copied to fuzz/FailCases/<target>/. docs/TESTING.md records the figures of the last run.
#
#   ACSECURE_FUZZ_RUNS      executions per target (default 1000000)
#   ACSECURE_FUZZ_SECONDS   time bound per target (default 0: none). FuzzOperationSequence, the slowest
#                           (~2,800 executions/s alone, 2,320/s in the last long run next to the
#                           others: 7 min), runs in the background while the others (~6 min together)
#                           run one after another.
#   ACSECURE_FUZZ_TARGETS   the targets to run (default: all)
#
#     fuzz/long-run.sh                                   # everything, 10^6 each
#     ACSECURE_FUZZ_TARGETS=FuzzSeedStoreParse fuzz/long-run.sh
set -euo pipefail
export ACSECURE_FUZZ_RUNS="${ACSECURE_FUZZ_RUNS:-1000000}"
export ACSECURE_FUZZ_SECONDS="${ACSECURE_FUZZ_SECONDS:-0}"
exec "$(dirname "$0")/../scripts/test.d/40-fuzz-smoke.sh"
