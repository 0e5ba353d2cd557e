#!/usr/bin/env bash
# ThreadSanitizer run of the concurrency tests, in its own scratch path so the sanitized build never
# mixes with the normal one. Any TSan report fails the suite (halt_on_error); nothing is suppressed.
#
# - SecureFileConcurrencyTests: threads on one handle, a handle per thread, lock() during I/O;
# - EngineBehaviourTests/testManyThreadsOnOneHandle;
# - ACSecureServicesTests.ConcurrencyTests: derive racing lock(), concurrent lock/unlock storms;
# - the C API's descriptor table across threads (last error per descriptor, open/close races);
# - SecureBytesTests/testKeyMaterialIsSendable: key material read by several threads at once;
# - ReadCacheTests/testThreadsOnOneCachedFile: threads on handles of one file with a read cache;
# - ContentionStressTests: threads reading (preads with the file's lock shared), writing, appending
#   and truncating one file at once, with and without a read cache (as many operations per thread
#   as in the unit tests, 1,000);
# - ParallelSealTests: large writes sealed by the sealing pool's threads next to the writer, from
#   threads writing one file and many files at once.
#
# Every lock in the project is a pthread mutex or rwlock (Sources/ACCrypto/Lock.swift), which TSan intercepts;
# it would not see Synchronization.Mutex on Linux, which is why that type is not used (docs/TESTING.md).
#
# --build-only: build, run nothing (scripts/test.sh does this in the background while the Swift tests
# run). ACSECURE_PREBUILD_PID: that background build, if it still runs; waited for before building here.
set -euo pipefail
cd "$(dirname "$0")/../.."
export SWIFT_BACKTRACE=enable=no
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
scratch=.build-tsan
tests='SecureFileConcurrencyTests|EngineBehaviourTests/testManyThreadsOnOneHandle|ACSecureServicesTests.ConcurrencyTests'
tests+='|ACSecureFileCAPITests/test(LastErrorIsPerDescriptorAcrossThreads|ConcurrentOpenCloseNeverSeesStaleState|AThreadsCachedLookupFollowsClosesAndReuseOnOtherThreads|CachedEntriesAreReleasedAtCloseAndAtThreadExit)'
tests+='|RWLockTests'
tests+='|SecureBytesTests/testKeyMaterialIsSendable|ReadCacheTests/testThreadsOnOneCachedFile|ContentionStressTests'
tests+='|ParallelSealTests/test(LargeWritersOnOneFileAndOnManyFilesAtOnce|AWriteFailingBetweenPiecesIsReportedAndTheFileStillOpens)'
start=$(date +%s)
if [ "${1:-}" != --build-only ] && [ -n "${ACSECURE_PREBUILD_PID:-}" ] && kill -0 "$ACSECURE_PREBUILD_PID" 2>/dev/null; then
  echo "45-tsan: waiting for the background build (scripts/test.sh; its log: prebuild.log)"
  while kill -0 "$ACSECURE_PREBUILD_PID" 2>/dev/null; do sleep 1; done
fi
# (gold warns that it cannot export the TSan runtime's local symbols from the test children linked
# with the Swift runtime inside, -static-stdlib: noise, left out as the fuzz smoke run does.)
swift build --build-tests --sanitize thread --scratch-path "$scratch" 2>&1 | { grep -v "warning: Cannot export local symbol" || true; }
[ "${1:-}" != --build-only ] || exit 0
# As many tests at a time as the machine has cores (each in a process of its own): about half the time.
swift test --skip-build --sanitize thread --scratch-path "$scratch" --filter "$tests" --parallel --num-workers "$(nproc 2>/dev/null || echo 2)"
echo "45-tsan: passed in $(( $(date +%s) - start )) s"
