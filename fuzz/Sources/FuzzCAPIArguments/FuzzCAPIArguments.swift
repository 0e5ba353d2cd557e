#if !ACSECURE_SYSCALL_MOCKING
#error("the fuzz targets run on the in-memory file system: build them in debug, or in release with -Xswiftc -DACSECURE_SYSCALL_MOCKING (scripts/test.d/40-fuzz-smoke.sh)")
#endif
import FuzzHarness

/// libFuzzer entry point: hostile arguments to the C API (see CAPIArgumentsFuzzer).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCAPIArguments(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    runFuzzInput("FuzzCAPIArguments", data, size, CAPIArgumentsFuzzer.run)
}
