/*
 * ACSecureSQLite.h — encrypted SQLite databases: a SQLite VFS named "acsecure" on ACSecureFile.h.
 *
 *     ACSecureSQLiteRegister(0);
 *     sqlite3_open_v2("app.db", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "acsecure");
 *
 *     cc prog.c $(pkg-config --cflags --libs acsecuresqlite)
 *
 * The database, its rollback journal, its super-journal and SQLite's temporary files are secure
 * files (chunked AES-256-GCM, keyed by secure services: ACSecureServices.h; start them before the
 * first open, or let ACSECURE_APP_ID / ACSECURE_HOME start them from the environment).
 *
 * Setting up, from nothing:
 *   - Keys: call ACSecureServicesStart("com.example.app", NULL) once (it creates the store, by
 *     default ~/.local/share/acsecure, when it is missing), or set ACSECURE_APP_ID (and
 *     ACSECURE_HOME for another store) and let the first open start services; a missing store is
 *     then created only with ACSECURE_CREATE_STORE=1 (or `acsecure init`).
 *   - Errors: SQLite's codes say what failed ("unable to open database file"); the VFS says why
 *     through sqlite3_log (no store, services locked, a damaged database, a bad setting): install
 *     sqlite3_config(SQLITE_CONFIG_LOG, ...) before SQLite is initialized to see it (Examples/c/
 *     secure-sqlite.c prints the lines that start with "acsecure:").
 *   - Environment (read at each open; unset or empty means the default):
 *       ACSECURE_APP_ID, ACSECURE_HOME, ACSECURE_CREATE_STORE, ACSECURE_PASSCODE: ACSecureServices.h;
 *       ACSECURE_READ_CACHE_MIB, ACSECURE_WRITE_CACHE_MIB: the caches below (whole MiB, 0 to 1024);
 *       any other value refuses every open with SQLITE_CANTOPEN, and the log says which variable.
 *
 * Damage and tampering: a database whose end does not authenticate (the file was cut — by whole
 * chunks, to half, into its trailer — or extended or damaged at its end; a crash never leaves
 * that) is refused at open with SQLITE_CORRUPT ("database disk image is malformed": SQLite's code
 * for a database image that is not what was written, which applications already handle as a
 * damaged database), never opened as a shorter database. Bytes after an authenticated end (a
 * crash in the middle of an extension leaves them; the hot journal restores what the write
 * changed) are ignored and logged. A chunk that fails authentication when read is
 * SQLITE_IOERR_DATA, as SQLite's checksum VFS reports a page that fails its check (a disk's read
 * error stays SQLITE_IOERR_READ), except in a journal and in a database whose journal exists, where
 * it reads as zeros (below); a write the engine refuses because the file's end or the rewritten
 * chunk does not authenticate is SQLITE_IOERR_DATA too. A journal whose end does not authenticate
 * is read as SQLite reads a short or torn journal: what does not authenticate reads as zeros,
 * which its record checksums reject.
 *
 * Locking: SQLite's usual protocol (SHARED, RESERVED, PENDING, EXCLUSIVE at SQLite's byte offsets)
 * with open-file-description locks on "<database>-aclock", a small plain file next to the database
 * that is created on first open and never removed. Several processes,
 * and several connections of one process, may use one database; use a busy timeout as with any
 * SQLite database. The locks are not on the database file itself because the engine's coordinated
 * mode (ACSECURE_OPEN_SHARED) takes a whole-file lock on it for every call, which conflicts with any
 * byte-range lock on the same file, even one held by the same process (a writer holding EXCLUSIVE
 * would block on its own write).
 * The VFS does not use that mode: SQLite's locks already order readers and writers, so a process
 * only has to reread the file after another process changed it. A writer stores a new random
 * "change mark" in the first 8 bytes of "<database>-aclock" before it changes the database; a
 * connection that takes a SHARED lock and finds a mark this process has not seen reopens the
 * process's descriptor of the database (the engine then drops its cached length and chunk). The
 * lock file holds nothing but locks, that mark, the deadline below and, for WAL mode, a second
 * mark (below).
 * Writers take turns: SQLite's writers poll (a connection that finds RESERVED taken sleeps 1 to
 * 100 ms in its busy handler and tries again), so beside a writer that commits in a loop a second
 * one almost never landed in the gap between two commits (its 20 transactions took 8-15 s, and
 * timed out with a 5 s busy timeout). A writer that finds RESERVED taken now announces that it
 * waits (a read lock on the byte after SQLite's range in "<database>-aclock", and a deadline 250 ms
 * ahead, renewed at each attempt); another connection then gets SQLITE_BUSY at RESERVED without
 * trying while the announcement is live, and the waiting writer's busy-handler sleep ends as soon as
 * RESERVED is free. Readers are never delayed; an upgrade from a read to a write inside an explicit
 * transaction gets SQLITE_BUSY as it does whenever RESERVED is taken.
 *
 * Durability: xSync is ACSecureFileFsync (ACSecureFileFdatasync for SQLITE_SYNC_DATAONLY); new
 * journals also sync their directory. Writes reach the file through the engine's write-through
 * mode, but the VFS holds two kinds back in memory:
 *   - a rollback journal's appends, collected into writes of up to 64 KiB (each 4104-byte record
 *     would otherwise re-encrypt a chunk twice), written before the journal is read, synced,
 *     truncated or closed and before any write to the database;
 *   - the database's pages (the write cache, below), written at SQLite's commit
 *     (SQLITE_FCNTL_SYNC, sent with any synchronous setting), xSync, before the journal is closed,
 *     deleted, truncated or its header rewritten, before the connection's EXCLUSIVE lock is
 *     released, and when the cache is full.
 * So the database is never ahead of its journal and a journal stops being hot only once the
 * database holds the whole transaction, even with synchronous=OFF: a process killed at any moment
 * leaves every transaction whose COMMIT returned, and a hot journal for the one under way (tested
 * with SIGKILL in DELETE, TRUNCATE and PERSIST modes). xSectorSize is 4096 (one chunk) and xDeviceCharacteristics is 0 (no ATOMIC*,
 * SAFE_APPEND or POWERSAFE_OVERWRITE): the engine rewrites a chunk in place, so a write torn by a
 * crash can cost the whole chunk, and SQLite then journals whole chunks and never rewrites a
 * synced journal chunk. Such a torn chunk fails authentication; the VFS reads it as zeros in a
 * journal or a -wal (SQLite's record and frame checksums reject it, as they reject a torn sector of
 * a plain journal) and in a database while the database's journal exists (the rollback restores the
 * page); anywhere else it is an error (SQLITE_IOERR_DATA), never wrong data. A later write into such
 * a chunk of a journal or a -wal (PERSIST mode rewrites its journal from offset 0, a -wal is
 * rewritten after a restart) is widened by the VFS to the whole chunk, the torn bytes as zeros, as
 * it reads them: the engine takes that as a repair, so the write succeeds as on a plain file.
 * A database file of 0 bytes is refused (SQLITE_NOTADB), where plain SQLite opens an empty
 * database: an encrypted database cut to 0 bytes looks the same and must not open empty. The VFS
 * never leaves one (the engine creates a file with its header before it has a name), but a power
 * loss before the first sync of a new database can; the log says so, and deleting the file starts
 * a new database.
 * A journal or -wal of 0 bytes (a power loss after its name persisted, before its first write
 * did: the engine never leaves one otherwise) is no journal to SQLite, as with the unix VFS; the VFS
 * starts it anew (O_TRUNC) when SQLite opens it to write, and logs it.
 *
 * File controls, answered as the unix VFS answers them: LOCKSTATE, LAST_ERRNO, VFSNAME, SYNC,
 * COMMIT_PHASETWO, HAS_MOVED (the path no longer names the open file), CHUNK_SIZE (the file then
 * grows and is cut in whole such chunks), SIZE_HINT (with a chunk size, the file is extended to the
 * hint rounded up to whole chunks, sparsely: no encryption of the hole; without one, nothing),
 * TEMPFILENAME (a new name in SQLite's temporary directory), MMAP_SIZE (always 0: the file is never
 * memory-mapped, a mapping would show ciphertext, not pages), EXTERNAL_READER (whether another connection holds a
 * read mark of the WAL index; other connections of this process count too), PERSIST_WAL (asked and set: with it the -wal file stays after the
 * last connection closes, as with the unix VFS), POWERSAFE_OVERWRITE (asked: always 0, see above;
 * setting 1 is accepted but not honoured, and sqlite3_log says so). Others answer SQLITE_NOTFOUND,
 * which SQLite treats as "no such control".
 *
 * Write cache: SQLite rewrites a page each time its page cache spills it, many times in a large
 * transaction (speedtest1 --size 200: 871,675 page writes, 60,320 distinct pages between syncs).
 * Through the engine each write costs a chunk encryption and a pwrite, so the VFS keeps whole
 * chunks written to the database in memory until the moments above, and writes them in chunk order
 * (contiguous chunks in one call): a rewrite costs a 4 KiB copy, as it does in the kernel's page
 * cache for a plain database. ACSECURE_WRITE_CACHE_MIB sets its size per connection (whole MiB, 1
 * to 1024; 16 when unset; 0 turns it off; any other value makes the open fail with
 * SQLITE_CANTOPEN), ?acsecure_write_cache=0 turns it off for one database. It is allocated at the
 * connection's first write, in a private mapping excluded from core dumps (like SQLite's own page
 * cache it is not locked in memory); a chunk is wiped once written, the mapping freed at close.
 * Writes that are not whole chunks (page sizes below 4096) go to the file at once, after the
 * cached chunks. Temporary databases (sorts, DISTINCT, VACUUM's copy, temp_store=FILE tables) get
 * a write cache of a quarter of that size (4 MiB by default) that is flushed only when full and
 * wiped, not written, when the file is closed (it is deleted then); their journals are not cached.
 *
 * Read cache: the database (not its journals or temporary files) is opened with
 * ACSECURE_OPEN_READ_CACHE, so pages SQLite's own page cache has evicted come back as a copy of
 * decrypted memory, as a plain database's come from the kernel's page cache: ACSECURE_READ_CACHE_MIB
 * sets its size per process and database (whole MiB, 1 to 1024; 16 when unset; 0 turns it off; any
 * other value makes the open fail with SQLITE_CANTOPEN), and the URI parameter
 * ?acsecure_read_cache=0 turns it off for one database. It is guarded memory, dropped when another
 * process's change makes the VFS reopen the database and while another process uses it in WAL mode
 * (below), and wiped when secure services lock.
 *
 * WAL (PRAGMA journal_mode=WAL): the -wal file, which holds page images, is a secure file; the
 * wal-index (-shm) is shared memory exactly as the unix VFS provides it (a plain file mapped in
 * 32 KiB regions, its locks at the unix VFS's offsets, reset by the first connection that maps it,
 * removed by the last). The -shm holds no content but shows, to anyone who can read it while the
 * database is open, what SQLCipher's -shm shows too: the database's page numbers in the WAL (which
 * pages the last transactions changed), frame counts, salts and checksums, read marks and locks.
 * Checkpoints (PASSIVE, FULL, RESTART, TRUNCATE), wal_autocheckpoint, WAL reset, journal_size_limit
 * and PERSIST_WAL work as with the unix VFS; synchronous=FULL and NORMAL keep their documented WAL
 * durability, and a killed process loses no commit with any setting (tested: writers and their
 * checkpoints SIGKILLed). Frames are stored in chunks of their own (the -wal file is about twice a
 * plain one's size with 4 KiB pages), so a write torn by a crash damages only the frame being
 * written. The database's pages are written through in WAL mode (no write cache: readers run beside
 * checkpoints), but a transaction's frames are collected before they are sealed: SQLite rewrites a
 * frame of the transaction under way each time its page cache spills the page again, so the
 * connection keeps the chunks of the frames it writes in a write cache of the same size as the
 * database's (ACSECURE_WRITE_CACHE_MIB, ?acsecure_write_cache=0) and writes them, in order, as
 * soon as the page of the commit frame is in (before SQLite publishes the commit in the wal-index,
 * so an error fails the commit), at xSync and when the cache is full; frames of a transaction that
 * did not commit are wiped when the WAL write lock is released. No other connection reads a frame
 * before its commit is published, so none misses them; a killed process loses no commit.
 * Memory mapping stays off (a mapping would expose ciphertext, not pages).
 * Several processes may use one database in WAL mode at once, as with the unix VFS: readers of
 * one process see what writers and checkpointers of others commit. The engine keeps one state per
 * file and process, and in WAL mode no SQLite lock tells a process to reread a file another
 * process changed, so while several processes use the database the engine's coordinated mode
 * (ACSECURE_OPEN_SHARED: each call takes a lock on the file and takes up what another process
 * changed; no read cache) covers the -wal file and the database. A process that uses the database
 * alone runs in solo mode instead: the engine's default mode, with the read cache, no lock or
 * length check per call. It switches (ACSecureFileSetShared) at the start of a transaction (a
 * connection's first WAL-index lock), by three things in "<database>-aclock":
 *   - each process using the database in WAL mode holds a read lock on its presence byte (the
 *     byte after the writers' intent byte) from before its first access in WAL mode until its
 *     last connection unmaps the wal-index (a process that dies releases it);
 *   - each transaction begun in solo mode holds a read lock on the next byte, the solo byte;
 *   - a process stores a new random WAL mark (bytes 16..23) when it starts using the database in
 *     WAL mode.
 * A process starting in WAL mode takes its presence lock, waits until no other process holds the
 * solo byte, stores its mark, and runs coordinated if another process is present, solo (after
 * rereading both files) if not. The wait lasts as long as the transaction the other process has
 * under way in solo mode (never its later ones, which see the newcomer): 0.5 s per attempt, then
 * SQLITE_BUSY from xShmMap, which SQLite's WAL code retries with its own backoff; a transaction
 * held open for about a minute makes the newcomer's statement fail with SQLITE_PROTOCOL (with the
 * unix VFS a newcomer never waits for a reader). A transaction takes the solo byte before it
 * looks for others' presence locks and at the mark. So
 * either a newcomer sees a solo transaction under way and waits for its end, or the transaction
 * sees the newcomer and turns its process coordinated before it touches a file: a process in solo
 * mode never reads or writes beside another process, and its cached chunks, length and end are
 * never used after another process changed the files: one that came, wrote, checkpointed and left
 * while this process was idle changed the mark, and the next transaction rereads both files. A
 * coordinated process turns solo again at the start of a transaction when no other process is
 * present and none of its own connections is in a transaction (rereading both files then).
 * Outside transactions only two things touch the files: SQLite's read of the WAL header when it
 * opens the -wal file (a torn read leaves only its page size unknown until the next read) and the
 * checkpoint of a connection that closes the database, which holds the database's EXCLUSIVE lock
 * (no other process can then be in WAL mode: each of its connections keeps SHARED). The cost of
 * coordination is then paid only while another process uses the database (docs/BENCHMARKS.md).
 *
 * The sqlite3 shell can load the same VFS as an extension (libacsecuresqlite_ext.so, installed by
 * scripts/install-c-library.sh into PREFIX/lib): `.load PREFIX/lib/libacsecuresqlite_ext` (the full
 * path, which `pkg-config --variable=extension acsecuresqlite` prints; a bare name is found only in
 * the dynamic loader's search path), then `.open file:app.db?vfs=acsecure`. Load it before the
 * database is opened:
 *     sqlite3 -cmd ".load $(pkg-config --variable=extension acsecuresqlite)" -cmd ".open file:app.db?vfs=acsecure"
 */
#ifndef ACSECURESQLITE_H
#define ACSECURESQLITE_H

#ifdef __cplusplus
extern "C" {
#endif

/** The VFS name to pass to sqlite3_open_v2 (or as ?vfs= in a URI). */
#define ACSECURE_SQLITE_VFS_NAME "acsecure"

/**
 * Registers the "acsecure" VFS with SQLite (sqlite3_vfs_register); with makeDefault != 0 it also
 * becomes the default VFS, so plain sqlite3_open() uses it. Safe to call again (the VFS is
 * registered once; a later call with makeDefault != 0 makes it the default).
 *
 * Returns SQLITE_OK (0), or SQLite's error code: SQLITE_ERROR when SQLite has no default VFS to
 * take time, randomness and dynamic loading from, or the code of sqlite3_initialize.
 *
 * It initializes SQLite (sqlite3_initialize): call sqlite3_config (SQLITE_CONFIG_LOG to see the
 * VFS's reasons, for one; GRDB's Database.logError) before it, as SQLite refuses most
 * configuration once initialized (SQLITE_MISUSE).
 */
int ACSecureSQLiteRegister(int makeDefault);

#ifdef __cplusplus
}
#endif

#endif /* ACSECURESQLITE_H */
