import Dispatch
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import ACCrypto

/// `RWLock` (a secure file's lock, one futex word): writers exclude everyone, readers share, a
/// waiting writer keeps new readers out, and threads that sleep on the futex are woken. Under
/// ThreadSanitizer these run on the pthread rwlock it becomes there.
final class RWLockTests: XCTestCase {
    /// Writers and readers from four threads, some holding the lock long enough that the others
    /// sleep: no writer ever shares the lock, the writers' plain counter loses no increment.
    func testWritersExcludeEveryoneAndReadersShare() {
        let lock = RWLock()
        let writersInside = Atomic<Int>(0), readersInside = Atomic<Int>(0), readersTogether = Atomic<Int>(0)
        let violations = Atomic<Int>(0)
        nonisolated(unsafe) var counter = 0
        let rounds = 20_000
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for i in 0..<rounds {
                if (i + thread) % 3 == 0 {
                    lock.lockShared()
                    let readers = readersInside.add(1, ordering: .sequentiallyConsistent).newValue
                    if writersInside.load(ordering: .sequentiallyConsistent) != 0 { violations.add(1, ordering: .relaxed) }
                    if readers > 1 { readersTogether.add(1, ordering: .relaxed) }
                    if i % 1000 == 0 { usleep(200) }  // long enough that a writer waiting sleeps
                    readersInside.subtract(1, ordering: .sequentiallyConsistent)
                    lock.unlockShared()
                } else {
                    lock.withLock {
                        if writersInside.add(1, ordering: .sequentiallyConsistent).newValue != 1
                            || readersInside.load(ordering: .sequentiallyConsistent) != 0 {
                            violations.add(1, ordering: .relaxed)
                        }
                        counter += 1
                        if i % 1000 == 1 { usleep(200) }
                        writersInside.subtract(1, ordering: .sequentiallyConsistent)
                    }
                }
            }
        }
        XCTAssertEqual(violations.load(ordering: .relaxed), 0)
        let writes = (0..<4).reduce(0) { sum, thread in sum + (0..<rounds).filter { ($0 + thread) % 3 != 0 }.count }
        lock.withLock { XCTAssertEqual(counter, writes) }
    }

    /// Two readers hold the lock at once: the second gets in while the first is still inside.
    func testReadersHoldTheLockTogether() {
        let lock = RWLock()
        lock.lockShared()
        let entered = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            lock.lockShared()
            entered.signal()
            lock.unlockShared()
        }
        XCTAssertEqual(entered.wait(timeout: .now() + 10), .success, "a second reader waited for the first")
        lock.unlockShared()
    }

    /// A reader inside, a writer waiting (asleep): a reader that comes after the writer enters only
    /// after it, and a writer released wakes both kinds of sleeper.
    func testAWaitingWriterGoesBeforeLaterReaders() {
        let lock = RWLock()
        let order = Mutex<[String]>([])
        lock.lockShared()
        let done = DispatchGroup()
        done.enter()
        Thread.detachNewThread {
            lock.lock()
            order.withLock { $0.append("writer") }
            usleep(20_000)
            lock.unlock()
            done.leave()
        }
        usleep(50_000)  // the writer is waiting, past its spins
        done.enter()
        Thread.detachNewThread {
            lock.lockShared()
            order.withLock { $0.append("reader") }
            lock.unlockShared()
            done.leave()
        }
        usleep(50_000)
        XCTAssertEqual(order.withLock { $0 }, [], "nobody may enter while the first reader is inside")
        lock.unlockShared()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "a sleeper was not woken")
        XCTAssertEqual(order.withLock { $0 }, ["writer", "reader"])
    }

    /// A writer inside, several writers and readers asleep on the futex: all get in once it leaves.
    func testEverySleeperIsWoken() {
        let lock = RWLock()
        lock.lock()
        let done = DispatchGroup()
        let entered = Atomic<Int>(0)
        for n in 0..<6 {
            done.enter()
            Thread.detachNewThread {
                if n % 2 == 0 { lock.lock(); entered.add(1, ordering: .relaxed); lock.unlock() }
                else { lock.lockShared(); entered.add(1, ordering: .relaxed); lock.unlockShared() }
                done.leave()
            }
        }
        usleep(50_000)
        XCTAssertEqual(entered.load(ordering: .relaxed), 0)
        lock.unlock()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "a sleeper was not woken")
        XCTAssertEqual(entered.load(ordering: .relaxed), 6)
    }
}
