/*
 * secure-copy — copy a plain file into a new secure file, with readv/writev.
 *
 *   secure-copy SOURCE DEST      DEST is created (mode of SOURCE) or truncated
 *
 * Reads the plain source with readv(2) into a ring of odd-sized buffers and writes each batch to
 * the secure file with one ACSecureFileWritev call, then checks the plaintext size with
 * ACSecureFstat. Keys come from secure services started from the environment (ACSECURE_APP_ID,
 * ACSECURE_HOME; ACSECURE_CREATE_STORE=1 to create a missing store). Build:
 *
 *   cc secure-copy.c $(pkg-config --cflags --libs acsecurefile) -o secure-copy
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ACSecureFile/ACSecureFile.h>

#define NBUF 8

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: secure-copy SOURCE DEST\n");
        return 2;
    }
    int in = open(argv[1], O_RDONLY);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) {
        fprintf(stderr, "secure-copy: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    int out = ACSecureFileOpen(argv[2], O_WRONLY | O_CREAT | O_TRUNC, st.st_mode & 07777);
    if (out < 0) {
        fprintf(stderr, "secure-copy: %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    /* Buffer sizes that do not line up with the 4096-byte chunks on purpose. */
    static char storage[NBUF][5000];
    static const size_t sizes[NBUF] = {1, 4095, 4097, 100, 5000, 3333, 4096, 17};
    struct iovec iov[NBUF];
    long long total = 0;
    for (;;) {
        for (int i = 0; i < NBUF; i++) {
            iov[i].iov_base = storage[i];
            iov[i].iov_len = sizes[i];
        }
        ssize_t n = readv(in, iov, NBUF);
        if (n < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "secure-copy: %s: %s\n", argv[1], strerror(errno));
            return 1;
        }
        if (n == 0) break;
        /* Trim the iovecs to what was read, then write them all; finish a short write. */
        int cnt = 0;
        for (size_t left = (size_t)n; left > 0; cnt++) {
            if (iov[cnt].iov_len > left) iov[cnt].iov_len = left;
            left -= iov[cnt].iov_len;
        }
        struct iovec *v = iov;
        while (cnt > 0) {
            ssize_t w = ACSecureFileWritev(out, v, cnt);
            if (w < 0) {
                fprintf(stderr, "secure-copy: %s: %s (ACE %d)\n", argv[2], strerror(errno), ACSecureFileLastError(out));
                return 1;
            }
            total += w;
            while (cnt > 0 && (size_t)w >= v->iov_len) {
                w -= (ssize_t)v->iov_len;
                v++;
                cnt--;
            }
            if (cnt > 0) {
                v->iov_base = (char *)v->iov_base + w;
                v->iov_len -= (size_t)w;
            }
        }
    }
    struct stat sst;
    if (ACSecureFstat(out, &sst) != 0 || sst.st_size != st.st_size) {
        fprintf(stderr, "secure-copy: %s: size %lld after copying %lld bytes\n", argv[2], (long long)sst.st_size,
                (long long)st.st_size);
        return 1;
    }
    close(in);
    if (ACSecureFileClose(out) != 0) {
        fprintf(stderr, "secure-copy: %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    fprintf(stderr, "secure-copy: %lld bytes\n", total);
    return 0;
}
