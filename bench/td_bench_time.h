/* Timing for the benches: a monotonic clock and the median of trials. */
#ifndef TD_BENCH_TIME_H
#define TD_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

static inline double td_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int td_bench_cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Sorts v in place. */
static inline double td_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, td_bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
