#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the whole cycle on a fresh embedded store: encrypt, read back, verify, tamper.",
        discussion: """
            Needs no setup: creates a new store without a passcode in a temporary directory (or uses \
            --store), writes a sample file, encrypts it, reads it back, verifies it, shows that the \
            ciphertext does not contain the plaintext and that tampering, truncation and another app \
            ID are all detected. Removes the temporary directory unless --keep. Exits with 0 only if \
            every check passed (5 otherwise).
            """)

    @OptionGroup var global: GlobalOptions
    @Option(help: ArgumentHelp("Work in this directory (created if needed) instead of a temporary one.", valueName: "dir"))
    var dir: BytePath?
    @Option(help: ArgumentHelp("Size of the sample file in bytes.", valueName: "bytes")) var size: Int = 1 << 20
    @Flag(help: "Keep the work directory (store, sample and encrypted files).") var keep = false

    func validate() throws {
        guard size >= 8192, size <= 1 << 30 else { throw ValidationError("--size must be between 8192 and 1073741824") }
    }

    func run() throws {
        let work: BytePath
        var createdWork = false
        if let dir {
            switch Sys.mkdir(dir, 0o700) {
            case .success: createdWork = true
            case .failure(let e) where e.rawValue == EEXIST: break
            case .failure(let e): throw CLIError.posix(e.rawValue, dir)
            }
            work = dir
        } else {
            var template = Array("\(tmpDirectory())/acsecure-demo.XXXXXX".utf8CString)
            guard let p = mkdtemp(&template) else { throw CLIError.posix(errno, "mkdtemp") }
            work = BytePath(platformString: p)
            createdWork = true
        }
        defer {
            if !keep && createdWork { removeTree(work) }
        }
        var checks = Checks()
        let storeDir = global.storeOption ?? work.appending(component: "store")
        let appID = global.appIDOption ?? "com.example.acsecure-demo"
        print("acsecure demo: secure file I/O on an embedded store, no server")
        print("  work directory: \(work)\(keep || !createdWork ? "" : " (removed at the end; --keep keeps it)")")

        // 1. The store.
        let existed = PlainIO.exists(storeDir.appending(component: "seed"))
        let services: SecureServices
        do {
            services = try SecureServices(appID: appID, storePath: storeDir, passcode: nil)
            if services.availability != .available { try services.unlock(passcode: try global.currentPasscode()) }
        } catch let e as SecureServicesError {
            throw CLIError(e, store: storeDir)
        }
        step(1, "store", "\(existed ? "opened" : "created") \(storeDir) (app ID \(appID)\(existed ? "" : ", no passcode"))")

        // 2. A sample file with a recognisable secret in every line.
        let marker = "ACSECURE-DEMO-SECRET"
        let sample = work.appending(component: "sample.txt")
        try writeSample(sample, size: size, marker: marker)
        step(2, "sample", "wrote sample.txt: \(size) bytes of text; every line contains \"\(marker)\"")

        // 3. Encrypt.
        let secure = work.appending(component: "sample.txt.acsf")
        if PlainIO.exists(secure) { _ = Sys.unlink(secure) }
        try encryptFile(sample, to: secure, key: .app, force: false, services: services)
        let info = try secureInfo(secure)
        let layout = info.layout
        let chunks = layout.chunkCount(forSize: info.plaintextSize)
        step(3, "encrypt", "sample.txt -> sample.txt.acsf: \(info.physicalSize) bytes on disk for \(info.plaintextSize) of plaintext (\(counted(chunks, "chunk")) of \(info.chunkSize) bytes, AES-256-GCM)")
        checks.expect(info.plaintextSize == Int64(size), "the header's plaintext size matches")
        step(4, "stat", "key class \(info.keyClassName), file ID \(hex(info.fileID)) (from the header; no key needed)")

        // 5. Read back and compare.
        let roundTrip = work.appending(component: "roundtrip.txt")
        if PlainIO.exists(roundTrip) { _ = Sys.unlink(roundTrip) }
        try decryptFile(secure, info: info, to: roundTrip, key: .app, force: false, services: services)
        let same = try filesEqual(sample, roundTrip)
        _ = Sys.unlink(roundTrip)
        step(5, "read back", "decrypted \(info.plaintextSize) bytes; identical to the original: \(same ? "yes" : "NO")")
        checks.expect(same, "the decrypted file equals the original")

        // 6. Verify.
        let verified = try verifySecureFile(secure, groups: [], services: services)
        switch verified {
        case .ok(_, let n): step(6, "verify", "\(n == 1 ? "the one chunk" : "all \(n) chunks") and the length authenticate: OK")
        case .failed(let reason, _): step(6, "verify", "FAILED: \(reason)")
        }
        if case .ok = verified { checks.expect(true, "verify authenticates every chunk and the length") } else {
            checks.expect(false, "verify authenticates every chunk and the length")
        }

        // 7. The ciphertext does not contain the plaintext.
        let cipherBytes = try readWhole(secure)
        let plainBytes = try readWhole(sample)
        let markerFound = contains(cipherBytes, Array(marker.utf8))
        let prefixFound = contains(cipherBytes, Array(plainBytes.prefix(32)))
        let firstChunk = cipherBytes[Int(layout.dataOffset)..<(Int(layout.dataOffset) + 16)]
        step(7, "ciphertext", "contains \"\(marker)\": \(markerFound ? "YES" : "no"); contains the plaintext's first 32 bytes: \(prefixFound ? "YES" : "no")")
        print("                   plaintext, first 16 bytes:  \(hex(Array(plainBytes.prefix(16))))")
        print("                   chunk 0 on disk (nonce, …): \(hex(Array(firstChunk)))")
        checks.expect(!markerFound && !prefixFound, "the ciphertext does not contain the plaintext")

        // 8. Flip one bit in the middle of a copy: verify names the chunk.
        let tampered = work.appending(component: "tampered.acsf")
        let victim = chunks / 2
        var damaged = cipherBytes
        let at = Int(layout.chunkOffset(victim)) + FileLayout.nonceSize + 7
        damaged[at] ^= 0x01
        try writeWhole(tampered, damaged)
        let tamperResult = try verifySecureFile(tampered, groups: [], services: services)
        if case .failed(let reason, let chunk) = tamperResult, chunk == victim {
            step(8, "tamper", "flipped 1 bit at file offset \(at); verify: \(reason.replacingPrefix(work.description + "/"))")
            checks.expect(true, "tampering detected")
        } else {
            step(8, "tamper", "flipped 1 bit at file offset \(at) but verify did NOT report chunk \(victim)")
            checks.expect(false, "tampering detected")
        }

        // 9. Drop the last chunk, keeping a length a secure file could have: the trailer catches it.
        let truncated = work.appending(component: "truncated.acsf")
        try writeWhole(truncated, Array(cipherBytes.prefix(cipherBytes.count - layout.physicalChunkSize)))
        if case .failed(let reason, _) = try verifySecureFile(truncated, groups: [], services: services) {
            step(9, "truncate", "removed the last chunk; verify: \(reason.replacingPrefix(work.description + "/"))")
            checks.expect(true, "truncation detected")
        } else {
            step(9, "truncate", "removed the last chunk and verify did NOT notice")
            checks.expect(false, "truncation detected")
        }

        // 10. Another app ID on the same store derives another key.
        do {
            let other = try SecureServices(appID: appID + ".other", storePath: storeDir, passcode: nil)
            if other.availability != .available { try other.unlock(passcode: try global.currentPasscode()) }
            do {
                let f = try SecureFile.open(secure, flags: O_RDONLY, services: other)
                try? f.close()
                step(10, "other app", "app ID \(other.appID) COULD open the file")
                checks.expect(false, "another app ID is refused")
            } catch {
                step(10, "other app", "app ID \(other.appID) cannot open it: \(error.code.name)")
                checks.expect(error.code == .badKeyOrCorruptData, "another app ID is refused")
            }
        } catch let e as SecureServicesError {
            throw CLIError(e, store: storeDir)
        }
        _ = Sys.unlink(tampered)
        _ = Sys.unlink(truncated)

        print("")
        if checks.failed.isEmpty {
            print("demo: all \(checks.passed) checks passed (the \"check\" lines above)")
        } else {
            print("demo: \(checks.failed.count) of \(checks.passed + checks.failed.count) checks FAILED: \(checks.failed.joined(separator: "; "))")
            fflush(nil)
            throw CLIError(.verifyFailed, "the demo's checks failed")
        }
        if keep || !createdWork {
            print("try:  acsecure cat --store \(storeDir) --app-id \(appID) \(secure) | head -3")
        }
    }

    private func step(_ n: Int, _ name: String, _ text: String) {
        let label = "\(n).".padding(4) + name.padding(12)
        print("  \(label) \(text)")
    }

    /// The demo's checks: each one is printed where it is made (steps only set up and show), so
    /// the total at the end counts the "check" lines above it.
    private struct Checks {
        var passed = 0
        var failed: [String] = []
        mutating func expect(_ ok: Bool, _ what: String) {
            print(String(repeating: " ", count: 19) + "check \(ok ? "ok" : "FAILED"): \(what)")
            if ok { passed += 1 } else { failed.append(what) }
        }
    }

    private func tmpDirectory() -> String {
        if let t = getenv("TMPDIR"), t[0] != 0 { return String(cString: t) }
        return "/tmp"
    }

    private func writeSample(_ path: BytePath, size: Int, marker: String) throws {
        var text = [UInt8]()
        text.reserveCapacity(size + 128)
        var i = 0
        while text.count < size {
            let line = "record \(String(i).leftPad(7)): account=ACME-\(String((i * 7919) % 100_000).leftPad(5)) balance=\(String((i * 104_729) % 1_000_000).leftPad(7)).00 EUR \(marker)\n"
            text += Array(line.utf8)
            i += 1
        }
        try writeWhole(path, Array(text.prefix(size)))
    }

    private func readWhole(_ path: BytePath) throws -> [UInt8] {
        let fd = try PlainIO.open(path, O_RDONLY)
        defer { PlainIO.closeAfterReading(fd) }
        let n = Int(PlainIO.size(fd) ?? 0)
        var bytes = [UInt8](repeating: 0, count: n)
        let got = try bytes.withUnsafeMutableBytes { b in try PlainIO.readFull(fd, b.baseAddress!, n, path.description) }
        return Array(bytes.prefix(got))
    }

    private func writeWhole(_ path: BytePath, _ bytes: [UInt8]) throws {
        let fd = try PlainIO.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        do {
            try bytes.withUnsafeBytes { b in try PlainIO.writeFull(fd, b.baseAddress!, b.count, path.description) }
        } catch {
            PlainIO.closeAfterReading(fd)  // the write error is the one reported
            throw error
        }
        try PlainIO.close(fd, path.description)
    }

    private func filesEqual(_ a: BytePath, _ b: BytePath) throws -> Bool {
        try readWhole(a) == readWhole(b)
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        let first = needle[0]
        var i = 0
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == first && haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }

    /// Removes the demo's own directory tree (files it made and the store).
    private func removeTree(_ path: BytePath) {
        guard case .success(let names) = Sys.directoryEntryNames(path) else { _ = Sys.unlink(path); return }
        for name in names {
            let child = path.appending(component: name)
            if case .success(let st) = Sys.lstat(child), st.st_mode & S_IFMT == S_IFDIR { removeTree(child) } else { _ = Sys.unlink(child) }
        }
        _ = Sys.rmdir(path)
    }
}

extension String {
    func leftPad(_ width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
    func replacingPrefix(_ prefix: String) -> String { hasPrefix(prefix) ? String(dropFirst(prefix.count)) : self }
}
