/* The C API's open, called from C: Swift cannot call the variadic ACSecureFileOpen. */
#ifndef CCOMPARECAPI_H
#define CCOMPARECAPI_H
#include <sys/types.h>

int CCompareCAPI_open(const char *path, int oflag, mode_t mode);
/* ACSecureServicesStart with the app ID "acbench" on the store in storeDirectory. */
int CCompareCAPI_startServices(const char *storeDirectory);

#endif
