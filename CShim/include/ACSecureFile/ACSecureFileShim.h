/*
 * ACSecureFileShim.h — internal: the non-variadic entry points the C shim forwards to.
 * Implemented in Swift (Sources/ACSecureFileCAPI). Not installed, not part of the API.
 */
#ifndef ACSECUREFILESHIM_H
#define ACSECUREFILESHIM_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ACSecureFileOpen with its optional mode already read (0 when oflag did not call for one). */
int ACSecureFile_openWithMode(const char *path, int oflag, mode_t mode);

#ifdef __cplusplus
}
#endif

#endif /* ACSECUREFILESHIM_H */
