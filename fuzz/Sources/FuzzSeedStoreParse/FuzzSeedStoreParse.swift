#if !ACSECURE_SYSCALL_MOCKING
#error("the fuzz targets run on the in-memory file system: build them in debug, or in release with -Xswiftc -DACSECURE_SYSCALL_MOCKING (scripts/test.d/40-fuzz-smoke.sh)")
#endif
#if canImport(Glibc)
import Glibc
#endif
import FuzzHarness

/// libFuzzer entry point: untrusted bytes as a store's seed file (see SeedStoreParseFuzzer).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSeedStoreParse(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let finding = SeedStoreParseFuzzer.run(input) {
        let message = Array("FINDING (FuzzSeedStoreParse): \(finding)\n".utf8)
        _ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        abort()
    }
    return 0
}
