#if canImport(Glibc)
import Glibc
#endif

/// Replacing a file so that a crash or a failure leaves either its old or its new content, never a
/// mix: write a temporary file beside it, fsync it, rename it over the file, fsync the directory.
/// Every module that publishes a whole file (the seed store, the Foundation layer's atomic writes and
/// copies, re-keying, wrapped files, the CLI's outputs) does it here, with one policy:
///
/// - the temporary file is `<directory>/.<name>.acsecure-tmp-<16 hex digits>`, in the destination's
///   directory (the rename stays on one file system), and the writer creates it with
///   `O_CREAT | O_EXCL | O_NOFOLLOW` (`exclusiveCreationFlags`): a planted file or link is never
///   written through;
/// - a failure at any step (writing, fsync, rename or link, fsync of the directory) throws an error
///   naming the destination and the step; the temporary file is removed (after a successful rename
///   there is none left);
/// - the destination is either the old content (or absent) or the new, complete and synced content.
///   Only a failure of the final directory fsync leaves the new content in place, not yet durable.
package struct AtomicReplacement: Sendable {
    package let destination: BytePath
    package let temporaryPath: BytePath

    /// The part of a temporary name after `.<name>`: what a cleanup looks for.
    package static let temporaryMarker = ".acsecure-tmp-"
    /// The flags the writer creates `temporaryPath` with (add the access mode).
    package static let exclusiveCreationFlags: Int32 = O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC

    package init(destination: BytePath) {
        self.destination = destination
        let (directory, name) = destination.split
        let random = String(UInt64.random(in: .min ... .max) | 1 << 63, radix: 16)
        temporaryPath = directory.appending(".".utf8).appending(name.bytes).appending((Self.temporaryMarker + random).utf8)
    }

    package init(destination: String) { self.init(destination: BytePath(destination)) }

    /// The directory whose entry changes (what the final fsync makes durable).
    package var directory: BytePath { destination.directory }

    /// A failed step of `publish`: which one, and the errno.
    package struct Failure: Error, Sendable {
        package let destination: BytePath
        package let step: String
        package let errno: Errno
        /// "<destination>: <step>: <strerror>".
        package var message: String { "\(destination): \(step): \(errno.text)" }
    }

    /// The whole protocol: `write(temporaryPath)` creates the temporary file (with
    /// `exclusiveCreationFlags`), writes all of it and closes it; then `publish`. On any failure the
    /// temporary file is removed and the error thrown: `write`'s own, or `failure(Failure)`.
    /// - Parameter replacing: false: fail with `EEXIST` if the destination exists (`link(2)`).
    package func run<E: Error>(replacing: Bool = true, write: (_ temporaryPath: BytePath) throws(E) -> Void,
                               failure: (Failure) -> E) throws(E) {
        do {
            try write(temporaryPath)
        } catch {
            discard()
            throw error
        }
        if case .failure(let f) = publish(replacing: replacing) { throw failure(f) }
    }

    /// The steps after writing: fsync the closed temporary file, rename (or link, then unlink) it to
    /// the destination, fsync the directory. Removes the temporary file on failure unless
    /// `keepOnFailure` (for content that cannot be produced again: the caller names the file).
    package func publish(replacing: Bool = true, keepOnFailure: Bool = false) -> Result<Void, Failure> {
        func fail(_ step: String, _ e: Errno) -> Result<Void, Failure> {
            if !keepOnFailure { discard() }
            return .failure(Failure(destination: destination, step: step, errno: e))
        }
        // fsync through a new descriptor flushes the file's data as well: the writer closed its own.
        switch Sys.open(temporaryPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) {
        case .failure(let e): return fail("fsync (reopening the written file)", e)
        case .success(let fd):
            let synced = Sys.fsync(fd)
            _ = Sys.close(fd)
            if case .failure(let e) = synced { return fail("fsync", e) }
        }
        if replacing {
            if case .failure(let e) = Sys.rename(temporaryPath, destination) { return fail("rename", e) }
        } else {
            if case .failure(let e) = Sys.link(temporaryPath, destination) { return fail("link", e) }
            // The destination holds the new content now; a temporary name left beside it is only
            // clutter, but reported: nothing fails silently.
            if case .failure(let e) = Sys.unlink(temporaryPath) { return .failure(Failure(destination: destination, step: "unlink \(temporaryPath)", errno: e)) }
        }
        if case .failure(let e) = Sys.syncDirectory(directory) {
            return .failure(Failure(destination: destination, step: "fsync of the directory \(directory) (the new content is in place but may not survive a power loss)", errno: e))
        }
        return .success(())
    }

    /// Removes the temporary file (nothing if it is gone).
    package func discard() { _ = Sys.unlink(temporaryPath) }
}
