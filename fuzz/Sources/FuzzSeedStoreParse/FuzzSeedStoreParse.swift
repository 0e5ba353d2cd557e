#if !ACSECURE_SYSCALL_MOCKING
#error("the fuzz targets run on the in-memory file system: build them in debug, or in release with -Xswiftc -DACSECURE_SYSCALL_MOCKING (scripts/test.d/40-fuzz-smoke.sh)")
#endif
import FuzzHarness

/// libFuzzer entry point: untrusted bytes as a store's seed file (see SeedStoreParseFuzzer).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSeedStoreParse(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    runFuzzInput("FuzzSeedStoreParse", data, size, SeedStoreParseFuzzer.run)
}
