/*
 * securecat — print secure files (decrypted) to standard output, or write standard input into
 * a secure file. A small example of the POSIX-style secure file API.
 *
 *   securecat FILE...          decrypt each FILE to stdout
 *   securecat -w FILE          encrypt stdin into FILE (created 0600 or truncated)
 *
 * Build:  cc securecat.c $(pkg-config --cflags --libs acsecurefile) -o securecat
 * Keys come from secure services started from the environment: ACSECURE_APP_ID (required),
 * ACSECURE_HOME (and ACSECURE_PASSCODE for tests and CI). The store must exist (`acsecure init`),
 * or ACSECURE_CREATE_STORE=1 creates it; a file call never creates one by itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ACSecureFile/ACSecureFile.h>

static int write_all(int fd, const char *buf, size_t n, int secure) {
    while (n > 0) {
        ssize_t w = secure ? ACSecureFileWrite(fd, buf, n) : write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cat(const char *path) {
    int fd = ACSecureFileOpen(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "securecat: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char buf[65536];
    for (;;) {
        ssize_t n = ACSecureFileRead(fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            int e = errno;
            fprintf(stderr, "securecat: %s: %s (ACE %d)\n", path, strerror(e), ACSecureFileLastError(fd));
            ACSecureFileClose(fd);
            return 1;
        }
        if (write_all(STDOUT_FILENO, buf, (size_t)n, 0) != 0) {
            fprintf(stderr, "securecat: stdout: %s\n", strerror(errno));
            ACSecureFileClose(fd);
            return 1;
        }
    }
    return ACSecureFileClose(fd) == 0 ? 0 : 1;
}

static int store(const char *path) {
    int fd = ACSecureFileOpen(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        fprintf(stderr, "securecat: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char buf[65536];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "securecat: stdin: %s\n", strerror(errno));
            ACSecureFileClose(fd);
            return 1;
        }
        if (write_all(fd, buf, (size_t)n, 1) != 0) {
            fprintf(stderr, "securecat: %s: %s (ACE %d)\n", path, strerror(errno), ACSecureFileLastError(fd));
            ACSecureFileClose(fd);
            return 1;
        }
    }
    if (ACSecureFileClose(fd) != 0) {
        fprintf(stderr, "securecat: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "-w") == 0) return store(argv[2]);
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: securecat FILE...\n       securecat -w FILE < input\n");
        return 2;
    }
    int status = 0;
    for (int i = 1; i < argc; i++) status |= cat(argv[i]);
    return status;
}
