/* Write-back appends through the C API against plain write(2), interleaved rounds, medians
 * (docs/BENCHMARKS.md "Write-back appends against the build before issue 24"): ROUNDS rounds, each
 * CALLS O_APPEND writes of SIZE bytes to a new plain file, then the same through a descriptor
 * opened with ACSECURE_OPEN_WRITE_BACK (closed, so flushed, inside the timing). To compare two
 * builds of the library, run it alternately with LD_LIBRARY_PATH pointing at each.
 * usage: writeback-append DIR [ROUNDS [CALLS [SIZE]]]
 *   cc -O2 writeback-append.c -IBenchmarks/c -I<prefix>/include -L<prefix>/lib -lACSecureFile
 * environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>
#include "bench-util.h"

enum { MAX_ROUNDS = 64 };

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [ROUNDS [CALLS [SIZE]]]\n", argv[0]); return 2; }
    int rounds = argc > 2 ? atoi(argv[2]) : 7, calls = argc > 3 ? atoi(argv[3]) : 1000000;
    size_t size = argc > 4 ? (size_t)atoi(argv[4]) : 100;
    if (rounds < 1 || rounds > MAX_ROUNDS || calls < 1 || size < 1 || size > 65536) { fprintf(stderr, "bad arguments\n"); return 2; }
    static char buf[65536];
    memset(buf, 0x5A, sizeof buf);
    char plainPath[4096], enginePath[4096];
    snprintf(plainPath, sizeof plainPath, "%s/wb-plain", argv[1]);
    snprintf(enginePath, sizeof enginePath, "%s/wb-engine", argv[1]);
    double plain[MAX_ROUNDS], engine[MAX_ROUNDS], ratio[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        unlink(plainPath);
        int fd = open(plainPath, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0) fail("open");
        double t = now();
        for (int i = 0; i < calls; i++) if (write(fd, buf, size) != (ssize_t)size) fail("write");
        if (close(fd) != 0) fail("close");
        plain[r] = (now() - t) / calls * 1e6;
        unlink(enginePath);
        fd = ACSecureFileOpenWithOptions(enginePath, O_WRONLY | O_CREAT | O_APPEND, 0600, ACSECURE_OPEN_WRITE_BACK);
        if (fd < 0) fail("ACSecureFileOpenWithOptions");
        t = now();
        for (int i = 0; i < calls; i++) if (ACSecureFileWrite(fd, buf, size) != (ssize_t)size) fail("ACSecureFileWrite");
        if (ACSecureFileClose(fd) != 0) fail("ACSecureFileClose");
        engine[r] = (now() - t) / calls * 1e6;
        ratio[r] = plain[r] / engine[r];
    }
    unlink(plainPath);
    unlink(enginePath);
    qsort(plain, rounds, sizeof *plain, byValue);
    qsort(engine, rounds, sizeof *engine, byValue);
    qsort(ratio, rounds, sizeof *ratio, byValue);
    printf("%zu B appends, median of %d rounds x %d calls: plain %.3f us, engine write-back %.3f us, plain / engine %.2fx (%.2f-%.2f)\n",
           size, rounds, calls, plain[rounds / 2], engine[rounds / 2], ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
    return 0;
}
