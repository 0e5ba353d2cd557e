#if canImport(Glibc)
import Glibc
#endif
import CACSecureFile
import CCompareCAPI
import CompareCore

// The comparison with the engine behind the public C API (libACSecureFile.so): the very
// functions a C program calls, open through the variadic ACSecureFileOpen compiled as C.
let capi = IOBackend(
    open: { CCompareCAPI_open($0, $1, $2) },
    close: { ACSecureFileClose($0) },
    read: { ACSecureFileRead($0, $1, $2) },
    write: { ACSecureFileWrite($0, $1, $2) },
    pread: { ACSecureFilePread($0, $1, $2, $3) },
    pwrite: { ACSecureFilePwrite($0, $1, $2, $3) },
    fsync: { ACSecureFileFsync($0) })

var writeBack = capi
writeBack.open = { CCompareCAPI_openWriteBack($0, $1, $2) }
var coordinated = capi
coordinated.open = { CCompareCAPI_openShared($0, $1, $2) }

struct StartError: Error, CustomStringConvertible { var description: String }

Comparison.main(engine: capi, engineLabel: "the C API (libACSecureFile.so)",
                variants: ["engine-wb": writeBack, "engine-mp": coordinated]) { store in
    guard CCompareCAPI_startServices(store) == 0 else {
        throw StartError(description: "ACSecureServicesStart: \(String(cString: strerror(errno)))")
    }
}
