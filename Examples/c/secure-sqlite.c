/*
 * secure-sqlite — an encrypted SQLite database through the "acsecure" VFS (ACSecureSQLite.h).
 *
 *     cc secure-sqlite.c $(pkg-config --cflags --libs acsecuresqlite) -o secure-sqlite
 *     ./secure-sqlite notes.db "buy milk"     # adds a note, prints them all
 *
 * Keys come from secure services, started by the first open from the environment (ACSECURE_APP_ID,
 * ACSECURE_HOME; ACSECURE_CREATE_STORE=1 creates a missing store; a program may instead call
 * ACSecureServicesStart first). SQLite's error codes say only what failed ("unable to open
 * database file"); the VFS says why through sqlite3_log, which this program prints.
 * notes.db is a secure file: `sqlite3 notes.db` says "file is not a database";
 * the sqlite3 shell reads it after `.load` of the extension by its full path and `.open file:notes.db?vfs=acsecure`:
 *     sqlite3 -cmd ".load $(pkg-config --variable=extension acsecuresqlite)" -cmd ".open file:notes.db?vfs=acsecure"
 */
#include <stdio.h>
#include <string.h>
#include <sqlite3.h>
#include <ACSecureFile/ACSecureSQLite.h>

/* The VFS's reasons (no store, services locked, a damaged database, ...): SQLite's log. */
static void logVFS(void *unused, int code, const char *message) {
    (void)unused;
    (void)code;
    if (strncmp(message, "acsecure:", 9) == 0) fprintf(stderr, "%s\n", message);
}

static int print(void *unused, int n, char **values, char **names) {
    (void)unused; (void)n; (void)names;
    printf("%s: %s\n", values[0], values[1]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DATABASE NOTE\n", argv[0]);
        return 2;
    }
    sqlite3_config(SQLITE_CONFIG_LOG, logVFS, NULL);  /* before SQLite is initialized */
    if (ACSecureSQLiteRegister(0) != SQLITE_OK) {
        fprintf(stderr, "secure-sqlite: cannot register the acsecure VFS\n");
        return 1;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, ACSECURE_SQLITE_VFS_NAME) != SQLITE_OK) {
        /* EIO from the engine (not a secure file, another key) is SQLITE_NOTADB; no keys: "unable to open". */
        fprintf(stderr, "secure-sqlite: %s: %s\n", argv[1], db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return 1;
    }
    sqlite3_busy_timeout(db, 5000);  /* other processes may be writing: wait for their locks */
    sqlite3_stmt *insert = NULL;
    char *error = NULL;
    int ok = sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS note(id INTEGER PRIMARY KEY, body TEXT NOT NULL)", NULL, NULL, &error) == SQLITE_OK
        && sqlite3_prepare_v2(db, "INSERT INTO note(body) VALUES(?)", -1, &insert, NULL) == SQLITE_OK
        && sqlite3_bind_text(insert, 1, argv[2], -1, SQLITE_TRANSIENT) == SQLITE_OK
        && sqlite3_step(insert) == SQLITE_DONE
        && sqlite3_exec(db, "SELECT id, body FROM note ORDER BY id", print, NULL, &error) == SQLITE_OK;
    if (!ok) fprintf(stderr, "secure-sqlite: %s: %s\n", argv[1], error ? error : sqlite3_errmsg(db));
    sqlite3_free(error);
    sqlite3_finalize(insert);
    if (sqlite3_close(db) != SQLITE_OK) ok = 0;
    return ok ? 0 : 1;
}
