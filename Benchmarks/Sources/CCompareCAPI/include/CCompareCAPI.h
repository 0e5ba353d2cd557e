/* The C API's open, called from C: Swift cannot call the variadic ACSecureFileOpen. */
#ifndef CCOMPARECAPI_H
#define CCOMPARECAPI_H
#include <sys/types.h>

int CCompareCAPI_open(const char *path, int oflag, mode_t mode);
/* The same file opened with write-back buffering, or in the coordinated (multi-process) mode. */
int CCompareCAPI_openWriteBack(const char *path, int oflag, mode_t mode);
int CCompareCAPI_openShared(const char *path, int oflag, mode_t mode);
/* ACSecureServicesStart with the app ID "acbench" on the store in storeDirectory. */
int CCompareCAPI_startServices(const char *storeDirectory);

#endif
