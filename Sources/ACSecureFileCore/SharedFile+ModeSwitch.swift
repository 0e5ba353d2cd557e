#if canImport(Glibc)
import Glibc
#endif
import ACSystemCalls

/// Switching a file's state between coordinated mode and the default mode while descriptors are
/// open (`ACSecureFileSetShared`). A caller that knows when other processes use the file (the
/// SQLite VFS: another process has the WAL index mapped) pays for coordination only then.
extension SecureFile {
    /// `shared`: the state (every handle of the file in this process) turns coordinated, as if a
    /// handle had been opened with `.processes`: the read cache is dropped, and the next operation
    /// takes up under the record lock what other processes changed.
    /// `!shared`: what other processes changed is taken up now, under the record lock (length, file
    /// ID, end; cached chunks dropped), and the state is in the default mode from then on (the read
    /// cache comes back at the next miss). The caller guarantees that no other process changes the
    /// file while it stays in the default mode; called again while in it, it only takes up changes.
    public func setCoordinated(_ shared: Bool) throws(SecureFileError) {
        try withShared { (s: SharedFile) throws(SecureFileError) in try s.setCoordinated(shared) }
    }
}

extension SharedFile {
    func setCoordinated(_ on: Bool) throws(SecureFileError) {
        if on {
            guard !coordinated else { return }
            try flushRun()  // write-back data is written through from now on
            try ownDescription()  // a forked child's inherited description cannot hold its lock
            endCheckedWithoutLock = true  // checked again by the first locked operation
            coordinated = true
            dropReadCache()
            return
        }
        // Reread under the lock, whichever mode the state is in (a coordinated state already holds
        // it: the lock is the same open file description's).
        try beginCoordinated(exclusive: false, recheckFileID: true)
        endCoordinated()
        coordinated = false
    }
}
