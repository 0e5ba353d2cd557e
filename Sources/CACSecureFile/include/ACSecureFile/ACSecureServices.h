/*
 * ACSecureServices.h — secure services from C: the key store behind ACSecureFile.h.
 *
 * Secure services hold one random seed per store (a directory), optionally sealed under a
 * passcode with Argon2id. Every file key is derived from it; while services are unavailable
 * (locked, retired, or waiting for a passcode) no key is in memory and every secure file call
 * fails with EACCES / ACE_NO_KEYS_ERROR.
 *
 * Starting
 *   A program may call ACSecureServicesStart once at startup. If it does not, the first
 *   ACSecureFile* or ACSecureServices* call starts services from the environment:
 *     ACSECURE_APP_ID    the app ID (default "default"); files are keyed by it;
 *     ACSECURE_HOME      the store directory (default $XDG_DATA_HOME/acsecure, else
 *                        ~/.local/share/acsecure);
 *     ACSECURE_PASSCODE  if set, unlocks a passcode-protected store (or protects a new one).
 *                        This variable is meant for tests and CI only, NOT for production:
 *                        the environment of a process is readable by other processes of the
 *                        same user and ends up in crash reports. Real programs ask the user and
 *                        call ACSecureServicesUnlock.
 *
 * Return values
 *   The int functions return 0 on success and -1 on failure with errno:
 *     EINVAL  an argument is invalid (empty app ID or group ID);
 *     EACCES  wrong or missing passcode; or no keys (store retired or services locked);
 *     EIO     the store's seed file is corrupt;
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
 * every later call uses. NULL for appID means $ACSECURE_APP_ID (else "default"); NULL for
 * storeDirectory means $ACSECURE_HOME (else the default above). A new store is created unlocked
 * (protected by $ACSECURE_PASSCODE when set); an existing store without a passcode is unlocked;
 * a store with a passcode stays unavailable until ACSecureServicesUnlock (or is unlocked with
 * $ACSECURE_PASSCODE when set).
 *
 * Calling it again replaces the services; descriptors opened before keep the services they
 * were opened with.
 *
 * Returns 0, or -1 with errno EINVAL (empty app ID), EACCES (wrong $ACSECURE_PASSCODE),
 * EIO (corrupt store) or the errno of the store I/O.
 */
int ACSecureServicesStart(const char *appID, const char *storeDirectory);

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
 * Services become unavailable; ACSecureServicesStart creates a new, empty store.
 *
 * Returns 0, or -1 with the errno of the store I/O.
 */
int ACSecureServicesRetire(void);

/** Whether secure services are available now (starting them from the environment if needed;
 *  ACSECURESERVICESAVAILABILITY_UNAVAILABLE when that fails). */
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
