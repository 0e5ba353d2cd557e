#if canImport(Glibc)
import Glibc
#endif

/// A fresh private directory (mkdtemp, mode 0700) under /tmp, removed with everything in it when
/// the last reference goes (or at `remove()`).
package final class TemporaryDirectory: Sendable {
    package let path: String

    /// - Parameter prefix: the start of the directory's name, so a leftover says which test made it.
    package init(prefix: String = "acsecure-test") throws(TestSupportError) {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw TestSupportError("mkdtemp /tmp/\(prefix)-XXXXXX", errno: errno)
        }
        path = String(cString: made)
    }

    /// The path of `name` inside the directory.
    package func path(_ name: String) -> String { path + "/" + name }

    package func remove() { removeTree(path) }

    deinit { remove() }
}

/// What the crash tests add to a file's name so that it is not UTF-8 (Latin-1 "é", then a stray
/// 0xFF): the engine must take every name `open(2)` takes, byte for byte.
package let undecodableNameSuffix: [UInt8] = [0xE9, 0xFF]

/// `rm -rf path` without Foundation (a missing path is not an error: there is nothing to remove).
/// Names are bytes: a file whose name is not UTF-8 is removed too.
package func removeTree(_ path: String) { removeTree(bytes: Array(path.utf8)) }

private func removeTree(bytes path: [UInt8]) {
    let cPath = (path + [0]).map { CChar(bitPattern: $0) }
    var st = stat()
    guard lstat(cPath, &st) == 0 else { return }
    guard st.st_mode & S_IFMT == S_IFDIR else { unlink(cPath); return }
    if let dir = opendir(cPath) {
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { p in
                p.withMemoryRebound(to: UInt8.self, capacity: 256) { Array(UnsafeBufferPointer(start: $0, count: strlen(UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)))) }
            }
            if name != [UInt8(ascii: ".")] && name != [UInt8(ascii: "."), UInt8(ascii: ".")] { names.append(name) }
        }
        closedir(dir)
        for name in names { removeTree(bytes: path + [UInt8(ascii: "/")] + name) }
    }
    rmdir(cPath)
}

/// A failed set-up step of a test (not a failure of the code under test).
package struct TestSupportError: Error, CustomStringConvertible {
    package let description: String

    package init(_ what: String, errno code: Int32? = nil) {
        description = code.map { "\(what): \(String(cString: strerror($0))) (errno \($0))" } ?? what
    }
}
