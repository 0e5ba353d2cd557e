#!/usr/bin/env bash
# ThreadSanitizer run of the engine's concurrency tests (SecureFileConcurrencyTests: threads on one
# handle, a handle per thread, lock() during I/O), in its own scratch path so the sanitized build never
# mixes with the normal one. Any TSan report fails the suite (halt_on_error).
#
# TSan cannot see Synchronization.Mutex as a lock on Linux (the stdlib's futex-based Mutex is not
# instrumented), so it reports races between critical sections of one Mutex. The engine guards its
# state (the open-files table and each file's state) with pthread mutexes, which TSan understands, so
# all of it is checked; only SecureServices' Mutex-guarded state is suppressed.
# For the same reason the filter is the engine's suite, not every "Concurrency" test
# (ACSecureServicesTests.ConcurrencyTests is nearly all Mutex) — see docs/TESTING.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export SWIFT_BACKTRACE=enable=no
suppressions="$(mktemp /tmp/acsecure-tsan-XXXXXX)"
trap 'rm -f "$suppressions"' EXIT
printf 'race:16ACSecureServices06SecureB0C\n' >"$suppressions"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$suppressions"
scratch=.build-tsan
start=$(date +%s)
swift build --build-tests --sanitize thread --scratch-path "$scratch"
swift test --skip-build --sanitize thread --scratch-path "$scratch" --filter SecureFileConcurrencyTests
echo "45-tsan: passed in $(( $(date +%s) - start )) s"
