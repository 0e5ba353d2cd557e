#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// Coordinated mode (`Sharing.processes`): other processes may write the file at the same time.
/// Each operation holds an open-file-description record lock on the whole file (shared for reads,
/// exclusive for changes), rereads the length and drops the cached chunk before it starts, and has
/// written everything through before it unlocks.
extension SharedFile {
    /// Starts an operation in coordinated mode: an open-file-description lock on the whole file
    /// (shared for reads, exclusive for changes), then the length is reread and the chunk cache
    /// dropped, since another process may have changed both.
    ///
    /// Another process may also have emptied the file and written it anew (a new file ID and data
    /// key). A change, a changed length or `recheckFileID` reads the file ID to find out; a read of
    /// an unchanged length does not (one system call less): a chunk of a new file cannot
    /// authenticate under the old key and file ID, so such a read fails with
    /// `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR`, and the caller runs it once more with `recheckFileID`.
    ///
    /// A read that ends inside the length known from the last operation (`readEnd`) does not even
    /// reread the length: its chunks are read from disk under the lock, and a chunk that authenticates
    /// at its index is the current one (file ID and index are in its AAD). Any change that could
    /// make it wrong (emptied, cut or regrown over it, a last chunk made longer) makes the read fail
    /// authentication or come up short, and the retry with `recheckFileID` rereads everything.
    func beginCoordinated(exclusive: Bool, readEnd: Int64? = nil, recheckFileID: Bool = false) throws(SecureFileError) {
        try checkIO(Sys.lockFile(ioFD, exclusive ? Int16(F_WRLCK) : Int16(F_RDLCK)), "lock")
        holdsExclusiveRecordLock = exclusive
        do { try refreshFromDisk(exclusive: exclusive, readEnd: readEnd, recheckFileID: recheckFileID) } catch {
            endCoordinated()
            throw error
        }
    }

    /// What another process may have changed since this one last looked (the part of
    /// `beginCoordinated` after the lock; also a forked child's first call, `adoptAfterForkIfNeeded`):
    /// drops the cached chunks, and rereads the length, the file ID when `exclusive`,
    /// `recheckFileID` or the length changed, the header of a file emptied or created meanwhile,
    /// and the end. A read ending inside the length known from the last operation (`readEnd`)
    /// rereads nothing.
    func refreshFromDisk(exclusive: Bool, readEnd: Int64? = nil, recheckFileID: Bool = false) throws(SecureFileError) {
        // Nothing cached (the usual case: every operation ends by dropping a dirty chunk, and reads of
        // whole chunks bypass the cache) means nothing stale to drop.
        if cacheIndex >= 0 { dropCache() }
        if readCache != nil { dropReadCache() }  // coordinated files have none; a handle may have just asked
        tailCopiesCheckedUnderLock = false
        if !exclusive, !recheckFileID, !endCheckedWithoutLock, let readEnd, readEnd <= diskSize, hasHeader, cipher != nil,
           tailVerified, tailFailure == nil, pendingTailRepair == nil {
            return
        }
        var needsRefresh = false
        let physical: Int64
        switch Sys.fileSize(ioFD) {
        case .success(let size): physical = size
        case .failure(let e): throw .posix(e.rawValue, "\(path): statx")
        }
        // The length this process last left the file at. Only a header read below changes layout and
        // length, and then the file is refreshed anyway.
        // (Version 5: with records at the end, another process may have sealed them whole and
        // appended as many bytes as that saved, so the same length may be another end.)
        let unchanged = diskShape.records == 0 && physical == diskEnd + (pendingTailRepair == nil ? 0 : bytesAfterAuthenticatedEnd)
        // The end is checked again when the length changed, when it was last checked without the
        // lock, and when the header records a pending end: another process died in a change
        // (a cut's trailer may be down with the length unchanged).
        var checkEnd = !unchanged || endCheckedWithoutLock
        if hasHeader, physical > 0, exclusive || recheckFileID || checkEnd {
            // Another process may have emptied the file, which gives it a new file ID and data key.
            withUnsafeTemporaryAllocation(byteCount: FileLayout.headerSize, alignment: 8) { onDisk in
                guard case .success(FileLayout.headerSize) = Sys.preadFull(ioFD, onDisk.baseAddress!, FileLayout.headerSize, 0) else { return }
                let sameFile = constantTimeEqual(UnsafeRawBufferPointer(rebasing: onDisk[16..<32]), UnsafeRawBufferPointer(start: fileID, count: 16))
                if !sameFile {
                    header = nil
                } else {
                    loadPendingEndRecord(fromHeaderBytes: UnsafeRawBufferPointer(onDisk))
                    if pendingEndRecorded != nil { checkEnd = true }
                }
            }
        }
        if !hasHeader, physical > 0 {
            // Another process gave the empty file its header (or a new one): read it.
            guard case .success(let h) = FileHeader.read(from: ioFD) else {
                throw .ace(.badKeyOrCorruptData, "\(path): not a secure file")
            }
            try setLayout(h.layout)
            adoptHeader(h)
            keyGeneration = 0
            cipher = nil
            dataKey = nil
            try ensureKeys()
            needsRefresh = true
        }
        if hasHeader, needsRefresh || checkEnd {
            endCheckedWithoutLock = false
            try adoptSizeOnDisk(physical: physical, otherwise: max(0, diskSize))
            size = diskSize
            tailVerified = false
            tailFailure = nil
            pendingTailRepair = nil
            restoredTail = nil
            bytesAfterAuthenticatedEnd = 0
            do { try verifyTrailerIfNeeded() } catch { if error.code != .badKeyOrCorruptData { throw error } }
        }
    }

    /// Ends a coordinated operation: the change is written through, and a cut it made is on the
    /// device with its record cleared (other processes must not find either once the lock is
    /// released), then the lock released.
    func finishCoordinated() throws(SecureFileError) {
        defer { endCoordinated() }
        try flushRun()
        try settleCut()
    }

    /// Releases the lock. Writes of a failed operation still in the write-back run are dropped
    /// (that operation reported the error): another process may change the file from now on.
    func endCoordinated() {
        if runFirst >= 0 { dropRun(); size = diskSize }
        holdsExclusiveRecordLock = false
        _ = Sys.lockFile(ioFD, Int16(F_UNLCK))
    }

}
