#if canImport(Glibc)
import Glibc
#endif

/// Searches this process's own writable memory (through /proc/self/mem, which reports unreadable
/// pages as errors instead of faulting): how the tests check that no copy of a key is left in the
/// heap, as the review's scan did (docs/FORMAT.md "Keys in memory").
package enum ProcessMemory {
    /// How many times `needle` occurs in the writable mappings of this process, leaving out the
    /// mapping that holds `excluded` (the guarded buffer the test keeps the key in: each guarded
    /// buffer is its own mapping between guard pages). Nil when /proc/self is not readable.
    package static func occurrences(of needle: UnsafeRawBufferPointer, excluding excluded: UnsafeRawPointer?) -> Int? {
        guard let maps = fopen("/proc/self/maps", "r") else { return nil }
        defer { fclose(maps) }
        let mem = open("/proc/self/mem", O_RDONLY)
        guard mem >= 0 else { return nil }
        defer { close(mem) }

        // Read every mapping first: the scan itself must not change the list it walks.
        var ranges: [(UInt, UInt)] = []
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, maps) > 0, let l = line {
            var start: UInt = 0, end: UInt = 0
            var perms = (CChar(0), CChar(0), CChar(0), CChar(0), CChar(0))
            let fields = withUnsafeMutablePointer(to: &perms) { p in
                p.withMemoryRebound(to: CChar.self, capacity: 5) { vsscanf_3(l, "%lx-%lx %4s", &start, &end, $0) }
            }
            guard fields == 3, perms.0 == CChar(UInt8(ascii: "r")), perms.1 == CChar(UInt8(ascii: "w")) else { continue }
            if let excluded, UInt(bitPattern: excluded) >= start, UInt(bitPattern: excluded) < end { continue }
            ranges.append((start, end))
        }

        let chunk = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk + needle.count, alignment: 16)
        defer {
            memset(buffer, 0, chunk + needle.count)
            buffer.deallocate()
        }
        var found = 0
        for (start, end) in ranges {
            var at = start
            while at < end {
                // Overlap by needle.count - 1 bytes, so a match across two reads is seen once.
                let want = Int(min(UInt(chunk + needle.count - 1), end - at))
                let got = pread(mem, buffer, want, off_t(at))
                if got >= needle.count { found += count(needle, in: UnsafeRawBufferPointer(start: buffer, count: got)) }
                at += UInt(chunk)
            }
        }
        return found
    }
}

/// Occurrences of `needle` (not empty) in `haystack`: `memchr` finds candidates for its first byte.
private func count(_ needle: UnsafeRawBufferPointer, in haystack: UnsafeRawBufferPointer) -> Int {
    let first = Int32(needle[0])
    var found = 0
    var i = 0
    let last = haystack.count - needle.count
    while i <= last, let hit = memchr(haystack.baseAddress! + i, first, last - i + 1) {
        let at = UnsafeRawPointer(hit) - haystack.baseAddress!
        if memcmp(haystack.baseAddress! + at, needle.baseAddress!, needle.count) == 0 { found += 1 }
        i = at + 1
    }
    return found
}

/// `sscanf` with three output pointers (Swift cannot call C variadic functions directly).
private func vsscanf_3(_ s: UnsafePointer<CChar>, _ format: String, _ a: UnsafeMutablePointer<UInt>,
                       _ b: UnsafeMutablePointer<UInt>, _ c: UnsafeMutablePointer<CChar>) -> Int32 {
    withVaList([a, b, c]) { vsscanf(s, format, $0) }
}
