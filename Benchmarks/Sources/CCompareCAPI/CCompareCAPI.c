#include "CCompareCAPI.h"
#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>

int CCompareCAPI_open(const char *path, int oflag, mode_t mode) {
    return ACSecureFileOpen(path, oflag, mode);
}

int CCompareCAPI_openWriteBack(const char *path, int oflag, mode_t mode) {
    return ACSecureFileOpenWithOptions(path, oflag, mode, ACSECURE_OPEN_WRITE_BACK);
}

int CCompareCAPI_openShared(const char *path, int oflag, mode_t mode) {
    return ACSecureFileOpenWithOptions(path, oflag, mode, ACSECURE_OPEN_SHARED);
}

int CCompareCAPI_startServices(const char *storeDirectory) {
    return ACSecureServicesStart("acbench", storeDirectory);
}
