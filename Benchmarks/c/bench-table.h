/* What the per-cycle benchmarks (cut-cost.c, sync-cost.c) share: a clock, a fatal error
 * (bench-util.h), and the table of medians they print (plain against the engine, one line per
 * workload). */
#ifndef ACSECURE_BENCH_TABLE_H
#define ACSECURE_BENCH_TABLE_H
#include "bench-util.h"

enum { PLAIN, ENGINE, CONTENDERS, MAX_ROUNDS = 64 };

/* Prints, per workload, the median over `rounds` of plain's and the engine's µs per cycle and their
 * ratio; t[w][c][r] is workload w, contender c, round r (sorted in place). */
static void printMedians(int workloads, const char *const *names, double t[][CONTENDERS][MAX_ROUNDS], int rounds) {
    printf("%-22s %12s %12s %8s   (median of %d rounds, µs per cycle)\n", "workload", "plain", "engine", "ratio", rounds);
    for (int w = 0; w < workloads; w++) {
        double m[CONTENDERS];
        for (int c = 0; c < CONTENDERS; c++) { qsort(t[w][c], (size_t)rounds, sizeof(double), byValue); m[c] = t[w][c][rounds / 2]; }
        printf("%-22s %12.2f %12.2f %8.2f\n", names[w], m[PLAIN], m[ENGINE], m[ENGINE] / m[PLAIN]);
    }
}

/* The main of a per-cycle benchmark: `PROGRAM DIR [ROUNDS [CYCLES]]` (defaults 5 and `cycles`);
 * rounds interleave workloads and contenders; `measure(c, w, count)` gives µs per cycle; `*dir`
 * gets DIR. Returns the exit status. */
static int runCycles(int argc, char **argv, const char **dir, long cycles, int workloads, const char *const *names,
                     double (*measure)(int contender, int workload, long count)) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [ROUNDS [CYCLES]]\n", argv[0]); return 2; }
    *dir = argv[1];
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    long count = argc > 3 ? atol(argv[3]) : cycles;
    if (rounds < 1 || rounds > MAX_ROUNDS || count < 1) { fprintf(stderr, "bad ROUNDS or CYCLES\n"); return 2; }
    static double t[16][CONTENDERS][MAX_ROUNDS];
    if (workloads > 16) { fprintf(stderr, "too many workloads\n"); return 2; }
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < workloads; w++)
            for (int c = 0; c < CONTENDERS; c++) t[w][c][r] = measure(c, w, count);
    printMedians(workloads, names, t, rounds);
    return 0;
}
#endif
