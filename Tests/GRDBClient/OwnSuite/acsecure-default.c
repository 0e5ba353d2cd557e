/*
 * acsecure-default.so — makes the acsecure VFS SQLite's default VFS in a program built without it,
 * through LD_PRELOAD: scripts/grdb-own-suite.sh runs GRDB.swift's own test suite this way, so every
 * database the suite opens (GRDB calls sqlite3_open_v2(path, &db, flags, NULL)) is encrypted.
 *
 *     cc -shared -fPIC acsecure-default.c $(pkg-config --cflags --libs acsecuresqlite) -ldl -o acsecure-default.so
 *     LD_PRELOAD=$PWD/acsecure-default.so ACSECURE_APP_ID=... ACSECURE_HOME=... program
 *
 * It defines sqlite3_open_v2, which the program's calls reach first: the first call registers the
 * VFS as the default (ACSecureSQLiteRegister(1)), then every call goes on to SQLite's own
 * sqlite3_open_v2 (dlsym RTLD_NEXT). Registering at the first open, not in a constructor before
 * main, matters: ACSecureSQLiteRegister initializes SQLite, and sqlite3_config (GRDB's
 * Database.logError sets SQLITE_CONFIG_LOG with it, in its tests' setUp) fails with SQLITE_MISUSE
 * once SQLite is initialized, so registering earlier than the program's first open would change
 * what the program sees (its error log would stay empty).
 * A registration that fails ends the process (exit status 70) with a message on stderr: a run that
 * silently fell back to plain SQLite would measure nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <sqlite3.h>
#include <ACSecureFile/ACSecureSQLite.h>

typedef int (*open_v2_function)(const char *, sqlite3 **, int, const char *);
static open_v2_function sqlite_open_v2;
static pthread_once_t registration = PTHREAD_ONCE_INIT;

static void make_acsecure_the_default(void) {
    int rc = ACSecureSQLiteRegister(1);
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    if (rc != SQLITE_OK || vfs == NULL || sqlite3_stricmp(vfs->zName, ACSECURE_SQLITE_VFS_NAME) != 0) {
        fprintf(stderr, "acsecure-default: ACSecureSQLiteRegister(1) returned %d and the default VFS is %s\n",
                rc, vfs ? vfs->zName : "none");
        _exit(70);
    }
    sqlite_open_v2 = (open_v2_function)dlsym(RTLD_NEXT, "sqlite3_open_v2");
    if (sqlite_open_v2 == NULL) {
        fprintf(stderr, "acsecure-default: SQLite's sqlite3_open_v2 not found: %s\n", dlerror());
        _exit(70);
    }
}

int sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs) {
    pthread_once(&registration, make_acsecure_the_default);
    return sqlite_open_v2(filename, db, flags, vfs);
}
