#!/usr/bin/env bash
# Long fuzzing run: every target for 10^6 executions (the smoke run in scripts/test.d/40-fuzz-smoke.sh
# does 10^5 or 75 s). Same build, corpus, checks and FailCases handling as the smoke run; prints
# executions, executions/s and coverage per target. Findings are copied to fuzz/FailCases/<target>/.
#
#   ACSECURE_FUZZ_RUNS      executions per target (default 1000000)
#   ACSECURE_FUZZ_SECONDS   time bound per target (default 0: none). The engine-level targets
#                           (FuzzSecureFileParse, FuzzOperationSequence) run a few hundred inputs/s:
#                           10^6 executions take over an hour each on a 2-core machine.
#   ACSECURE_FUZZ_TARGETS   the targets to run (default: all)
#
#     fuzz/long-run.sh                                   # everything, 10^6 each
#     ACSECURE_FUZZ_TARGETS=FuzzSeedStoreParse fuzz/long-run.sh
set -euo pipefail
export ACSECURE_FUZZ_RUNS="${ACSECURE_FUZZ_RUNS:-1000000}"
export ACSECURE_FUZZ_SECONDS="${ACSECURE_FUZZ_SECONDS:-0}"
exec "$(dirname "$0")/../scripts/test.d/40-fuzz-smoke.sh"
