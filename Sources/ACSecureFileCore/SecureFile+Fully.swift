#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

// Whole-buffer reads and writes, and the plaintext copy: the loops every layer above the engine
// (Foundation, sharing, the CLI) needs, written once. A long read or write may return short (services
// locking stop it between batches), so callers that want all bytes use these.
extension SecureFile {
    /// Reads until `buffer` is full or the file ends, as every whole-buffer reader needs: a long read
    /// may return short (services locking between batches stop it). Returns the bytes read.
    public func preadFully(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(SecureFileError) -> Int {
        var done = 0
        while done < buffer.count {
            let n = try pread(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: offset + Int64(done))
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Writes all of `buffer` at the current offset, finishing short writes (`write(2)` until done).
    public func writeFully(_ buffer: UnsafeRawBufferPointer) throws(SecureFileError) {
        var done = 0
        while done < buffer.count {
            let n = try write(UnsafeRawBufferPointer(rebasing: buffer[done...]))
            guard n > 0 else { throw .ace(.internalError, "\(path): write made no progress") }
            done += n
        }
    }

    /// Writes all of `buffer` at `offset`, finishing short writes (`pwrite(2)` until done).
    public func pwriteFully(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(SecureFileError) {
        var done = 0
        while done < buffer.count {
            let n = try pwrite(UnsafeRawBufferPointer(rebasing: buffer[done...]), at: offset + Int64(done))
            guard n > 0 else { throw .ace(.internalError, "\(path): write made no progress") }
            done += n
        }
    }

    /// Copies the whole plaintext of `self` into `destination` at the same offsets, through a guarded
    /// buffer (decrypted under this file's key, encrypted under the destination's with fresh nonces:
    /// never a byte copy, two files must never share a data key and nonce sequence).
    public func copyPlaintext(to destination: SecureFile) throws(SecureFileError) {
        // At most 1 MiB, and no more than the file needs: a guarded buffer is locked and wiped
        // whole, and one of up to 64 KiB comes from the pool (small files are the common copy).
        let bytes = Int(min(1 << 20, max(4096, (try size + 4095) / 4096 * 4096)))
        let buffer: SecureBuffer
        do throws(CryptoError) { buffer = try SecureBuffer(count: bytes) } catch { throw .crypto(error, "\(path): copy buffer") }
        try buffer.withUnsafeMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SecureFileError) in
            var at: Int64 = 0
            while true {
                let n = try preadFully(into: b, at: at)
                if n == 0 { break }
                try destination.pwriteFully(UnsafeRawBufferPointer(rebasing: b[0..<n]), at: at)
                at += Int64(n)
            }
        }
    }
}
