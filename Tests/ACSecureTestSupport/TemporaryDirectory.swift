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

/// `rm -rf path` without Foundation (a missing path is not an error: there is nothing to remove).
package func removeTree(_ path: String) {
    var st = stat()
    guard lstat(path, &st) == 0 else { return }
    guard st.st_mode & S_IFMT == S_IFDIR else { unlink(path); return }
    if let dir = opendir(path) {
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(dir)
        for name in names { removeTree(path + "/" + name) }
    }
    rmdir(path)
}

/// A failed set-up step of a test (not a failure of the code under test).
package struct TestSupportError: Error, CustomStringConvertible {
    package let description: String

    package init(_ what: String, errno code: Int32? = nil) {
        description = code.map { "\(what): \(String(cString: strerror($0))) (errno \($0))" } ?? what
    }
}
