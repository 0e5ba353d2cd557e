#if !ACSECURE_SYSCALL_MOCKING
#error("the fuzz targets run on the in-memory file system: build them in debug, or in release with -Xswiftc -DACSECURE_SYSCALL_MOCKING (scripts/test.d/40-fuzz-smoke.sh)")
#endif
import FuzzHarness

/// libFuzzer entry point: a decoded operation sequence on a plain and a secure file (see OperationSequenceFuzzer).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOperationSequence(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    runFuzzInput("FuzzOperationSequence", data, size, OperationSequenceFuzzer.run)
}
