#if canImport(Glibc)
import Glibc
#endif
import ACSystemCalls
import Synchronization

/// fork(2) copies every open file's state into the child: from then on parent and child are two
/// processes with the same descriptors, and each must see the file as the other leaves it.
///
/// `pthread_atfork` handlers: before the fork, the parent writes every write-back buffer
/// (`OpenFiles.flushAllBeforeFork`), so neither process holds buffered data the other also holds
/// (a parent that leaves with `_exit`, as `daemon(3)` does, loses nothing); in the child, a count
/// of forks goes up (an atomic add: async-signal-safe, no lock). Each state remembers the count it
/// was last used at; the first call in a child after a fork sees it changed and
/// `adoptAfterForkIfNeeded` runs before anything else touches the state.
enum ForkGeneration {
    private static let count = Atomic<Int>(0)

    /// Installs the handlers (once per process, before the first state is made).
    static let installed: Void = {
        _ = count.load(ordering: .relaxed)  // initialised here, never in the handler
        pthread_atfork({ OpenFiles.flushAllBeforeFork() }, nil, { _ = ForkGeneration.count.wrappingAdd(1, ordering: .relaxed) })
    }()

    @inline(__always) static var current: Int { count.load(ordering: .relaxed) }
}

extension SharedFile {
    /// Where the state is only closed or flushed (a close, the exit's flush, a services lock): a
    /// forked child's copy of the parent's buffered writes is dropped, not written a second time.
    func dropInheritedRun() {
        if runFirst >= 0, forkGeneration != ForkGeneration.current { dropRun(); size = diskSize }
    }

    /// Makes an inherited state the child's own (called with the state's lock held):
    /// - buffered writes (the parent wrote them before the fork; any a thread added during the fork
    ///   are the parent's to write) and cached plaintext are dropped: written by the child, the
    ///   parent's buffer could land over newer data;
    /// - the next seal draws a new key selector (parent and child would otherwise both go on
    ///   sealing under one);
    /// - the child opens the file again (`/proc/self/fd`): the record lock of coordinated mode
    ///   belongs to the open file description, which the child shares with the parent, so without
    ///   a description of its own the two would not exclude each other (in default mode, where no
    ///   lock is taken, a failed reopen keeps the shared one until coordination is asked for);
    /// - in default mode, the length, file ID and end are read again, as an open would (coordinated
    ///   mode does that at every call anyway).
    /// Inlined, so that every file call, in the process that made the state, pays one comparison.
    @inline(__always)
    func adoptAfterForkIfNeeded() throws(SecureFileError) {
        let generation = ForkGeneration.current
        if forkGeneration != generation { try adoptAfterFork(generation) }
    }

    private func adoptAfterFork(_ generation: Int) throws(SecureFileError) {
        if runFirst >= 0 { dropRun(); size = diskSize }
        if cacheIndex >= 0 { dropCache() }
        if readCache != nil { dropReadCache() }
        cipher?.retireWriteSelector()
        if ioFD >= 0 {
            ioFDSharedWithParent = true
            do { try ownDescription() } catch { if coordinated { throw error } }
        }
        forkGeneration = generation
        if !coordinated, hasHeader, ioFD >= 0 { try refreshFromDisk(exclusive: true) }
    }

    /// Gives `ioFD` an open file description of its own, if it still shares the parent's.
    /// - Throws: the reopen's errno, retried at the next call: without its own description this
    ///   process must not take the record lock.
    func ownDescription() throws(SecureFileError) {
        guard ioFDSharedWithParent, ioFD >= 0 else { return }
        let flags = (ioFDWritable ? O_RDWR : O_RDONLY) | O_CLOEXEC
        switch Sys.open("/proc/self/fd/\(ioFD)", flags, 0) {
        case .success(let own):
            // The inherited duplicate: its description stays open through the caller's
            // descriptor, so its close has nothing to flush or lose.
            _ = Sys.close(ioFD)
            ioFD = own
            ioFDSharedWithParent = false
        case .failure(let e):
            throw .posix(e.rawValue, "\(path): a forked process could not open the file again for its own record lock (/proc/self/fd)")
        }
    }
}
