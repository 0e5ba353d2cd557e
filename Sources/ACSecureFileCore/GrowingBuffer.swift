/// Memory that grows to the largest size asked of it and is kept for the next call: staging for
/// bytes that are not secret (ciphertext, descriptors), where a temporary allocation of that size
/// would cost a `malloc` per call. The owner deallocates it.
struct GrowingBuffer {
    private var pointer: UnsafeMutableRawPointer?
    private var capacity = 0
    private let alignment: Int

    init(alignment: Int) { self.alignment = alignment }

    /// The buffer, at least `bytes` long (its contents are not kept when it grows).
    mutating func atLeast(_ bytes: Int) -> UnsafeMutableRawPointer {
        if let pointer, capacity >= bytes { return pointer }
        pointer?.deallocate()
        let grown = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: alignment)
        pointer = grown
        capacity = bytes
        return grown
    }

    func deallocate() { pointer?.deallocate() }
}
