#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// An end taken on the word of another authenticated record, for a file whose own end does not
/// authenticate. A power loss can tear a write that both rewrites chunks and moves the end, so that
/// no end is left (issue 24: an append from a chunk-aligned end writes its first chunk over the old
/// trailer). The file then refuses every change, as it must on its own word: the same bytes are what
/// a cut leaves. An application that keeps an authenticated record of the length — SQLite's hot
/// rollback journal holds the database's size before the interrupted transaction, and every page
/// that transaction changed — can vouch for it, and then restore the chunks itself.
extension SharedFile {
    func adoptVouchedEnd(_ vouched: Int64) throws(SecureFileError) {
        guard hasHeader, cipher != nil else { throw .ace(.noKeys, "\(path): no key") }
        if tailFailure == nil {
            do { try verifyTrailerIfNeeded() } catch where error.code == .badKeyOrCorruptData {}
        }
        guard tailFailure != nil else {
            throw SecureFileError(code: .noError, errno: EINVAL, message: "\(path): the file's end authenticates; an end is only taken on another's word when it does not")
        }
        let end = layout.physicalSize(forPlaintextSize: vouched)
        let physical = try checkIO(Sys.fileSize(ioFD), "statx")
        guard vouched >= 0, vouched & Int64(chunkSize - 1) == 0, end <= physical else {
            throw SecureFileError(code: .noError, errno: EINVAL,
                                  message: "\(path): \(vouched) bytes is not a chunk boundary within the file's \(physical) bytes")
        }
        try settleCut()
        dropCache()
        dropReadCache()
        try writeTrailerAndCut(to: vouched)
        tailFailure = nil
        pendingTailRepair = nil
        restoredTail = nil
        bytesAfterAuthenticatedEnd = 0
        size = vouched
        if end < physical { cutSettlement = .barrierFirst }
    }
}
