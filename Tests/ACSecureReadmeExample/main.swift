// The README's two Swift code blocks, verbatim after this line (scripts/test.d/35-readme.sh checks that, and runs this).
// Package.swift: .package(name: "ACSecureFile", path: "…/ACSecureFile"), then .product(name: "ACSecureFileKit", package: "ACSecureFile")
import Glibc
import ACSecureFileCore
import ACSecureServices

let services = try SecureServices(appID: "com.example.app")          // default store, created by this call if missing
let file = try SecureFile.open("notes.acsf", flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: services)
_ = try Array("hello, world\n".utf8).withUnsafeBytes { try file.write($0) }
var word = [UInt8](repeating: 0, count: 5)
_ = try word.withUnsafeMutableBytes { try file.pread(into: $0, at: 7) }   // "world"
try file.close()
let info = try SecureFileSystem.info("notes.acsf")                     // header only: no key needed
print(info.plaintextSize, info.chunkSize, info.keyClassName)
import Foundation
import ACSecureFoundation
import ACSecureServices

SecureServices.current = try SecureServices(appID: "com.example.app")
try Data("hello, world\n".utf8).write(toSecureFile: "notes.acsf", options: .atomic)
let contents = try Data(contentsOfSecureFile: "notes.acsf")

let handle = try ACFileHandle.fileHandleForReading(atPath: "notes.acsf")
let first = try handle.read(upToCount: 5)                              // "hello"
try handle.close()
