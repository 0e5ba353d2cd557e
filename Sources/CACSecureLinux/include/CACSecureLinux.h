/*
 * CACSecureLinux — Linux calls Swift cannot make directly (C varargs), for ACSecureServices.
 * Thin wrappers: each returns what the system call returns (-1 with errno on failure).
 */
#ifndef CACSECURELINUX_H
#define CACSECURELINUX_H

/** prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0). */
int CACSecureLinux_setDumpable(int dumpable);

/** prctl(PR_GET_DUMPABLE, 0, 0, 0, 0): 0 or 1 (2: suid_dumpable), or -1 with errno. */
int CACSecureLinux_getDumpable(void);

#endif /* CACSECURELINUX_H */
