/// Where an error was made (`#fileID:#line`): every error type of the project carries one
/// (`SecureFileError`, `SecureServicesError`), so a report points at the code that gave up.
public struct ErrorSourceLocation: Sendable, Hashable, CustomStringConvertible {
    public var fileID: String
    public var line: Int

    public init(fileID: String, line: Int) {
        self.fileID = fileID
        self.line = line
    }

    public var description: String { "\(fileID):\(line)" }
}
