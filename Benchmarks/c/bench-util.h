/* What the C benchmarks share: a monotonic clock, a fatal error, and the comparison qsort needs to
 * take medians. */
#ifndef ACSECURE_BENCH_UTIL_H
#define ACSECURE_BENCH_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void fail(const char *what) { perror(what); exit(1); }
static int byValue(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
#endif
