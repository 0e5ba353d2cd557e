#define _GNU_SOURCE
#include "CACSecureLinux.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>

int CACSecureLinux_setDumpable(int dumpable) {
    return prctl(PR_SET_DUMPABLE, (unsigned long)dumpable, 0UL, 0UL, 0UL);
}

int CACSecureLinux_getDumpable(void) {
    return prctl(PR_GET_DUMPABLE, 0UL, 0UL, 0UL, 0UL);
}

int CACSecureLinux_fileSize(int fd, long long *size) {
    struct statx sx;
    int r = statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &sx);
    if (r == 0) *size = (long long)sx.stx_size;
    return r;
}

int CACSecureLinux_processorsAvailable(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

int CACSecureLinux_lockOnFault(void *addr, unsigned long length) { return mlock2(addr, length, MLOCK_ONFAULT); }
