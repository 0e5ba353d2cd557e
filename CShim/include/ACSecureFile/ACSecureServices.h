/*
 * ACSecureServices.h — secure services from C: the key store behind ACSecureFile.h.
 *
 * Secure services hold one random seed per store (a directory), optionally sealed under a
 * passcode with Argon2id. Every file key is derived from it; while services are unavailable
 * (locked, retired, or waiting for a passcode) no key is in memory and every secure file call
 * fails with EACCES / ACE_NO_KEYS_ERROR.
 *
 * Starting
 *   A program calls ACSecureServicesStart (or ACSecureServicesStartWithOptions) once at startup
 *   with its app ID: that explicit call creates the store if it is missing. If it does not, the
 *   first ACSecureFile* or ACSecureServices* call starts services from the environment, but only
 *   when the environment names the app; nothing creates a store or invents an app ID as a side
 *   effect of a file call:
 *     ACSECURE_APP_ID    the app ID; files are keyed by it. Required: without it (and without
 *                        ACSecureServicesStart) file calls fail with EACCES / ACE_NO_KEYS_ERROR;
 *     ACSECURE_HOME      the store directory (default $XDG_DATA_HOME/acsecure, else
 *                        ~/.local/share/acsecure);
 *     ACSECURE_CREATE_STORE=1
 *                        create the store when it is missing (otherwise a missing store fails with
 *                        EACCES / ACE_NO_KEYS_ERROR: create it with `acsecure init` or
 *                        ACSecureServicesStart);
 *     ACSECURE_REQUIRE_PROTECTED_STORE=1
 *                        refuse a store whose seed is not sealed under a passcode (EACCES /
 *                        ACE_NO_KEYS_ERROR), as ACSECURESERVICESSTART_REQUIRE_PROTECTED_STORE;
 *     ACSECURE_PASSCODE  if set and not empty, unlocks a passcode-protected store (or protects a
 *                        new one), and implies ACSECURE_REQUIRE_PROTECTED_STORE=1: a planted
 *                        unprotected seed is refused.
 *                        This variable is meant for tests and CI only, NOT for production:
 *                        the environment of a process is readable by other processes of the
 *                        same user and ends up in crash reports. Real programs ask the user and
 *                        call ACSecureServicesUnlock.
 *   The store directory and its seed must belong to the user and be inaccessible to group and
 *   others (0700 and 0600, as created); otherwise starting fails with EACCES.
 *
 * Return values
 *   The int functions return 0 on success and -1 on failure with errno:
 *     EINVAL  an argument is invalid (empty app ID or group ID);
 *     EACCES  wrong or missing passcode; or no keys (store retired or services locked);
 *     EIO     the store's seed file is corrupt;
 *     ENOMEM  no memory left for a key (guarded memory) or for Argon2id;
 *     other   the errno of the failed store I/O (ENOENT, ENOSPC, EROFS, ...).
 *
 * Thread safety
 *   All functions may be called from any thread. Locking while other threads use secure
 *   descriptors is allowed: dirty data is flushed first, and those calls then fail with
 *   EACCES / ACE_NO_KEYS_ERROR until the services are unlocked again.
 */
#ifndef ACSECURESERVICES_H
#define ACSECURESERVICES_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Whether secure file I/O can be used now. */
typedef enum ACSecureServicesAvailability {
    ACSECURESERVICESAVAILABILITY_UNAVAILABLE = 0,
    ACSECURESERVICESAVAILABILITY_AVAILABLE = 1,
} ACSecureServicesAvailability;

/**
 * Starts secure services for appID on the store in storeDirectory and makes them the services
 * every later call uses. NULL for appID means $ACSECURE_APP_ID (no app ID is invented: EINVAL when
 * it is not set either); NULL for storeDirectory means $ACSECURE_HOME (else the default above).
 * A missing store is created, unlocked (protected by $ACSECURE_PASSCODE when set); an existing
 * store without a passcode is unlocked; a store with a passcode stays unavailable until
 * ACSecureServicesUnlock (or is unlocked with $ACSECURE_PASSCODE when set). When
 * $ACSECURE_PASSCODE is set, or $ACSECURE_REQUIRE_PROTECTED_STORE=1, a store without a passcode
 * is refused (EACCES).
 *
 * Same as ACSecureServicesStartWithOptions(appID, storeDirectory, 0).
 *
 * Calling it again replaces the services; descriptors opened before keep the services they
 * were opened with.
 *
 * Returns 0, or -1 with errno EINVAL (empty or missing app ID), EACCES (wrong $ACSECURE_PASSCODE,
 * a store without a passcode when one is required, or a store directory or seed that group or
 * others can access), EIO (corrupt store) or the errno of the store I/O.
 */
int ACSecureServicesStart(const char *appID, const char *storeDirectory);

/** Options of ACSecureServicesStartWithOptions; combine with |. */
enum {
    /**
     * Refuse a store whose seed is not sealed under a passcode: starting (and every later
     * ACSecureServicesUnlock) fails with EACCES, and file calls with ACE_NO_KEYS_ERROR. Use it
     * when the app always sets a passcode: whoever can write the store could otherwise replace the
     * protected seed by an unprotected one of their own. Implied when $ACSECURE_PASSCODE is set.
     * A missing store is then created only with $ACSECURE_PASSCODE (EINVAL without it).
     */
    ACSECURESERVICESSTART_REQUIRE_PROTECTED_STORE = 1 << 0,
    /** Do not create a missing store: fail with EACCES instead. */
    ACSECURESERVICESSTART_DO_NOT_CREATE_STORE = 1 << 1,
};

/**
 * ACSecureServicesStart with options (ACSECURESERVICESSTART_*, or 0 for ACSecureServicesStart's
 * behaviour).
 *
 * Returns 0, or -1 with the errno of ACSecureServicesStart; EINVAL for an unknown option bit;
 * EACCES when the store is missing and ACSECURESERVICESSTART_DO_NOT_CREATE_STORE is given, or its
 * seed is not protected and ACSECURESERVICESSTART_REQUIRE_PROTECTED_STORE is given.
 */
int ACSecureServicesStartWithOptions(const char *appID, const char *storeDirectory, unsigned int options);

/**
 * Hardens the whole process for handling keys: no core dumps (RLIMIT_CORE set to 0, soft and
 * hard) and not dumpable (prctl(PR_SET_DUMPABLE, 0): no ptrace attach by the same user,
 * /proc/<pid>/mem and friends owned by root). Call it once at startup, before unlocking.
 *
 * Why: keys in libsodium guarded memory are kept out of core dumps, but OpenSSL's AES key
 * schedules (equivalent to each open file's data key) are in the ordinary heap while services
 * are unlocked (docs/FORMAT.md, "Keys in memory"). It is not done automatically because it
 * changes process-wide behaviour (crash reports without core files, debuggers need root).
 *
 * Returns 0, or -1 with the errno of the failing setrlimit/prctl.
 */
int ACSecureHardenProcess(void);

/**
 * Makes secure services available again after ACSecureServicesLock, or for the first time for a
 * store with a passcode. passcode is NULL when the store has none. Returns 0 at once when
 * services are already available.
 *
 * Returns 0, or -1 with errno EACCES (wrong or missing passcode, or the store was retired) or
 * EIO (corrupt store).
 */
int ACSecureServicesUnlock(const char *passcode);

/**
 * Changes the store's passcode (NULL or "" for either means "no passcode"). Only the seed is
 * re-sealed: no file is re-encrypted, and availability does not change.
 *
 * Returns 0, or -1 with errno EACCES (oldPasscode is wrong) or the errno of the store I/O.
 */
int ACSecureServicesSetPasscode(const char *oldPasscode, const char *newPasscode);

/**
 * Makes secure services unavailable: the dirty data of open secure descriptors is encrypted and
 * written, every plaintext cache and key is wiped, and secure calls fail with EACCES /
 * ACE_NO_KEYS_ERROR until ACSecureServicesUnlock. Open descriptors stay open.
 *
 * Returns 0 (also when services were already locked), or -1 with errno when services could not
 * be started.
 */
int ACSecureServicesLock(void);

/**
 * Destroys the store's seed: every secure file of this store becomes unreadable for ever.
 * The seed and any temporary seed file left by an interrupted passcode change are overwritten
 * with zeros and removed. Services become unavailable; ACSecureServicesStart creates a new,
 * empty store.
 *
 * Returns 0, or -1 with the errno of the store I/O.
 */
int ACSecureServicesRetire(void);

/** Whether secure services are available now (starting them from the environment if needed, as
 *  described under "Starting"; ACSECURESERVICESAVAILABILITY_UNAVAILABLE when that fails). */
ACSecureServicesAvailability ACSecureServicesGetAvailability(void);

/**
 * Opens a secure file shared through an encryption group: every app (app ID) on this store that
 * names the same encryptionGroupID can open it. Like ACSecureFileOpen with an explicit mode
 * (used only with O_CREAT); a file created through a group is keyed with the group's key, and
 * an existing file must have been created with the same group.
 *
 * Returns a descriptor, or -1 with the errno of ACSecureFileOpen, or EINVAL when
 * encryptionGroupID is NULL or empty.
 */
int ACSecureFileOpenWithGroupID(const char *path, int oflag, mode_t mode, const char *encryptionGroupID);

#ifdef __cplusplus
}
#endif

#endif /* ACSECURESERVICES_H */
