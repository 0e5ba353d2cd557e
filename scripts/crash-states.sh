#!/usr/bin/env bash
# Long run, outside scripts/test.sh (about 3 minutes after the build on 2 cores): the crash-state
# enumerator's full run (Tests/ACSecureFileCoreTests/CrashStateEnumeratorTests.swift and
# Tests/ACSecureSQLiteTests/SQLiteCrashStateTests.swift; docs/TESTING.md
# "Power loss: every crash state between syncs"). Every workload does more rounds than in the test
# command's sample, and every state the full limits allow is built and checked: one line per
# workload (states, failing states per property, how the failing ones were built, a few described).
#
#   scripts/crash-states.sh                    every workload
#   scripts/crash-states.sh append-100-fsync   one workload (ACSECURE_CRASH_WORKLOAD; sqlite-wal,
#                                              sqlite-truncate, sqlite-persist, sqlite-delete for SQLiteCrashStateTests)
# Fails when a workload expected clean has a failing state, or a known gap has more than recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --build-tests
export ACSECURE_CRASH_STATES=full
if [ $# -gt 0 ]; then export ACSECURE_CRASH_WORKLOAD="$1"; fi
swift test --skip-build --filter 'CrashStateEnumeratorTests.testEveryCrashStateBetweenSyncs|SQLiteCrashStateTests' 2>&1 \
  | grep -E "^crash states|^  |error:|Executed [0-9]+ tests?" | uniq
exit "${PIPESTATUS[0]}"
