import ACSecureServices
import ACSecureSharingCore
import ACSystemCalls
import ACSecureFileCore

/// The wrapped-file reader as the fuzz target FuzzWrappedFileParse calls it (SPI: the fuzz package is
/// another package): the clear header check, the secure file, the authenticated "ACWF" name record.
@_spi(Fuzzing) public enum WrappedFileParser {
    public enum Outcome {
        /// Opened: the record's name, the contents' length and what reading them gave.
        case opened(name: String, length: Int64, contents: Result<[UInt8], SecureFileError>)
        /// Not a wrapped file (`ACWrappedFile.unknownWrapperFormat`).
        case unknownFormat(String)
        case failed(SecureFileError)
    }

    /// Opens the wrapped file at `path` as `ACUnwrappedFile` does (no group) and reads all of it, in
    /// reads of `readStep` bytes where the reader's offset arithmetic matters: the first 16 reads and
    /// the 16 before and after each chunk boundary of the secure file. In between, one read goes up to
    /// the next such window, so a 1-byte step costs ~100 calls instead of one per byte (the fuzzer's
    /// cost), and every byte is still read exactly once.
    public static func read(path: String, services: SecureServices, readStep: Int) -> Outcome {
        let reader: WrappedFileReader
        do {
            reader = try WrappedFiles.open(atPath: BytePath(path), sharedGroupID: nil, services: services)
        } catch {
            switch error {
            case .unknownWrapperFormat(let message): return .unknownFormat(message)
            case .secureFile(let e): return .failed(e)
            }
        }
        defer { try? reader.close() }
        let length: Int64
        do { length = try reader.length } catch { return .failed(error) }
        let step = max(1, readStep)
        let chunkSize = Int64(FileLayout().chunkSize)  // wrapped files use the default
        let recordLength = Int64(8 + reader.actualFileName.utf8.count)  // "ACWF" ‖ version ‖ 0 ‖ u16 n ‖ name
        let window = Int64(step) * 16
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: max(step, Int(chunkSize)))
        let contents = Result { () throws(SecureFileError) -> [UInt8] in
            while true {
                let at = Int64(out.count)
                let sinceBoundary = (at + recordLength) % chunkSize
                let toBoundary = chunkSize - sinceBoundary
                let count = at >= window && sinceBoundary >= window && toBoundary > window ? Int(toBoundary - window) : step
                let n = try buffer.withUnsafeMutableBytes { b in
                    Result { () throws(SecureFileError) in try reader.read(into: UnsafeMutableRawBufferPointer(rebasing: b[0..<count]), at: at) }
                }.get()
                if n == 0 { return out }
                out += buffer[0..<n]
            }
        }
        return .opened(name: reader.actualFileName, length: length, contents: contents)
    }
}
