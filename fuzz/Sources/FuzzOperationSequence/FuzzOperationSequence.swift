#if !ACSECURE_SYSCALL_MOCKING
#error("the fuzz targets run on the in-memory file system: build them in debug, or in release with -Xswiftc -DACSECURE_SYSCALL_MOCKING (scripts/test.d/40-fuzz-smoke.sh)")
#endif
#if canImport(Glibc)
import Glibc
#endif
import FuzzHarness

/// libFuzzer entry point: a decoded operation sequence on a plain and a secure file (see OperationSequenceFuzzer).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOperationSequence(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let finding = OperationSequenceFuzzer.run(input) {
        let message = Array("FINDING (FuzzOperationSequence): \(finding)\n".utf8)
        _ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        abort()
    }
    return 0
}
