#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

/// The pending-end record (header bytes 108..<128, version 3; docs/FORMAT.md "Pending end").
///
/// Some changes must overwrite bytes the current end needs before the new end is complete: an
/// extension of more than one chunk from a chunk-aligned end writes its first chunk over the old
/// trailer, and a cut writes the new trailer over the head of a chunk the old end still claims.
/// Whichever order they use, one system call leaves a file whose end authenticates while a chunk
/// inside it does not — unless the reader knows where to look. So before such a change the writer
/// records, in the header, the size *X* the file was (an extension) or will be (a cut), and clears
/// the record once the change is complete. A reader that finds a record takes *X* as the end
/// whenever a trailer for *X* authenticates at *X*'s place with bytes after it: that trailer
/// exists only in the interrupted states (every complete change overwrites or cuts it).
///
/// The record is a hint, not trusted: it is outside the wrap's AAD and only ever leads to a GCM
/// check of a trailer at a place the file's own writer put it. Zeroing it hides nothing for good:
/// the chunk it would have explained fails authentication when read.
extension SharedFile {
    /// Records `size` as the pending end before a change that writes over what the current end
    /// needs. A version 2 file first becomes version 3 (its header rewritten with one `pwrite`).
    /// Version 1 files have no record: they keep the crash behaviour of their time (FORMAT.md).
    func recordPendingEnd(_ size: Int64) throws(SecureFileError) {
        if !layout.hasPendingEndRecord {
            guard layout.version == 2 else { return }
            try upgradeHeaderToVersion3()
        }
        try writePendingEndRecord(size)
    }

    /// Clears the record once a change is complete (or a stale one another process left). A failure
    /// fails the call, as `write(2)` reports an error updating the inode after the data: the
    /// change is on disk, and the record left behind costs a reader one trailer check and nothing
    /// else (its trailer was overwritten or is the end). The next change tries again.
    func clearPendingEnd() throws(SecureFileError) {
        guard pendingEndRecorded != nil else { return }
        try writePendingEndRecord(nil)
    }

    private func writePendingEndRecord(_ size: Int64?) throws(SecureFileError) {
        var record: (UInt64, UInt64, UInt32) = (0, 0, 0)
        let count = FileHeader.pendingEndRecordSize
        let written = withUnsafeMutableBytes(of: &record) { r in
            FileHeader.writePendingEndRecord(size, into: r.baseAddress!)
            return Sys.pwriteFull(ioFD, r.baseAddress!, count, Int64(FileHeader.pendingEndOffset))
        }
        try checkIO(written, "write the header's pending end")
        pendingEndRecorded = size
    }

    /// Version 2 → 3: chunks and trailers are the same; only the version (inside the wrap's AAD,
    /// so the data key is wrapped again under the same key) and the record's bytes change.
    private func upgradeHeaderToVersion3() throws(SecureFileError) {
        guard var upgraded = header, let dataKey else { throw .ace(.noKeys, "\(path): no key") }
        let kek: KeyEncryptionKey
        do { kek = try services.keyEncryptionKey(for: keySelection) } catch { throw .services(error, path) }
        upgraded.layout = FileLayout(chunkShift: layout.chunkShift, version: 3)
        upgraded.pendingEnd = nil
        try upgraded.wrap(dataKey: dataKey, under: kek)
        let bytes = upgraded.encoded()
        let written = bytes.withUnsafeBytes { Sys.pwriteFull(ioFD, $0.baseAddress!, $0.count, 0) }
        try checkIO(written, "write header")
        header = upgraded
        layout = upgraded.layout
    }

    /// Where the record's end is the file's end: a trailer for it authenticates at its place (with
    /// its last chunk), and the file goes on after it. Returns that end (physical and plaintext), or nil.
    func pendingEndTakesPrecedence(physical: Int64) throws(SecureFileError) -> (end: Int64, size: Int64)? {
        guard let candidate = pendingEndRecorded, hasHeader, cipher != nil else { return nil }
        let end = layout.physicalSize(forPlaintextSize: candidate)
        guard end < physical, try endAuthenticates(at: end, size: candidate) == .intact else { return nil }
        return (end, candidate)
    }

    /// Takes `h`, just read from disk, as the file's header: its pending-end record is the disk's
    /// state, kept in `pendingEndRecorded`, not part of the header the state keeps (and rewrites).
    func adoptHeader(_ h: FileHeader) {
        var h = h
        pendingEndRecorded = h.pendingEnd
        h.pendingEnd = nil
        header = h
    }

    /// Reads the pending-end record from the header on disk (another process may have left one).
    /// `header` holds the first 128 bytes of the file.
    func loadPendingEndRecord(fromHeaderBytes header: UnsafeRawBufferPointer) {
        let version = UInt16(header[4]) << 8 | UInt16(header[5])
        guard version >= 3 else { pendingEndRecorded = nil; return }
        let record = UnsafeRawBufferPointer(rebasing: header[FileHeader.pendingEndOffset..<FileHeader.pendingEndOffset + FileHeader.pendingEndRecordSize])
        // A malformed record is no hint at all (it is not followed); the header's own parse, at the
        // next open, reports it.
        if case .success(let end) = FileHeader.parsePendingEndRecord(record) { pendingEndRecorded = end } else { pendingEndRecorded = nil }
    }
}
