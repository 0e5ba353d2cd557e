/*
 * harden — ACSecureHardenProcess() from C: run as its own process, it prints the core limit and
 * the dumpable flag (getrlimit(RLIMIT_CORE), prctl(PR_GET_DUMPABLE)) before and after the call,
 * and exits 0 only if the call returned 0, the process was dumpable before, and afterwards the
 * core limit is 0 (soft and hard) and the process is not dumpable.
 *
 *   harden
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ACSecureFile/ACSecureServices.h>

static int report(const char *when, struct rlimit *limit, int *dumpable) {
    if (getrlimit(RLIMIT_CORE, limit) != 0) {
        fprintf(stderr, "harden: getrlimit: %s\n", strerror(errno));
        return -1;
    }
    *dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    printf("%s: core limit %llu/%llu, dumpable %d\n", when, (unsigned long long)limit->rlim_cur,
           (unsigned long long)limit->rlim_max, *dumpable);
    return 0;
}

int main(void) {
    struct rlimit limit;
    int dumpable;
    if (report("before", &limit, &dumpable) != 0) return 1;
    if (dumpable != 1) {
        fprintf(stderr, "harden: FAIL: the process is not dumpable before the call, so the test proves nothing\n");
        return 1;
    }
    if (ACSecureHardenProcess() != 0) {
        fprintf(stderr, "harden: FAIL: ACSecureHardenProcess: %s\n", strerror(errno));
        return 1;
    }
    if (report("after", &limit, &dumpable) != 0) return 1;
    if (limit.rlim_cur != 0 || limit.rlim_max != 0 || dumpable != 0) {
        fprintf(stderr, "harden: FAIL: core dumps or dumpability still enabled\n");
        return 1;
    }
    /* The hard limit is 0: an unprivileged process cannot turn core dumps back on (root can). */
    struct rlimit again = {RLIM_INFINITY, RLIM_INFINITY};
    if (geteuid() != 0 && setrlimit(RLIMIT_CORE, &again) == 0) {
        fprintf(stderr, "harden: FAIL: the core limit could be raised again\n");
        return 1;
    }
    printf("harden: OK\n");
    return 0;
}
