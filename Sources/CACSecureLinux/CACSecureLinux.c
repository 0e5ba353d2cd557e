#include "CACSecureLinux.h"

#include <sys/prctl.h>

int CACSecureLinux_setDumpable(int dumpable) {
    return prctl(PR_SET_DUMPABLE, (unsigned long)dumpable, 0UL, 0UL, 0UL);
}

int CACSecureLinux_getDumpable(void) {
    return prctl(PR_GET_DUMPABLE, 0UL, 0UL, 0UL, 0UL);
}
