/* Host memory bandwidth as the ring sees it: one thread's memcpy, and the
 * aggregate of T threads each copying or adding (y += x) its own buffers at
 * once. On a machine whose cores share one memory pipe the aggregate barely
 * exceeds one thread's figure, which bounds every ring all-reduce there:
 * ranks on different cores still share the bytes/s.
 *
 * usage: membw [--bytes B] [--threads T] [--json]  (defaults 64 MiB, 1..4) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRIALS 5

typedef struct worker {
    float *dst, *src;
    size_t count;
    int add;
    pthread_barrier_t *start;
} worker;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *run(void *p)
{
    worker *w = p;
    pthread_barrier_wait(w->start);
    if (w->add)
        for (size_t i = 0; i < w->count; i++)
            w->dst[i] += w->src[i];
    else
        memcpy(w->dst, w->src, w->count * sizeof(float));
    return NULL;
}

/* Median seconds for `threads` threads each moving `bytes` bytes. */
static double measure(int threads, size_t bytes, int add, float **dst, float **src)
{
    double t[TRIALS];
    for (int k = 0; k < TRIALS; k++) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        pthread_t tid[16];
        worker w[16];
        for (int i = 0; i < threads; i++) {
            w[i] = (worker){dst[i], src[i], bytes / sizeof(float), add, &start};
            pthread_create(&tid[i], NULL, run, &w[i]);
        }
        double a = now();
        pthread_barrier_wait(&start);
        for (int i = 0; i < threads; i++)
            pthread_join(tid[i], NULL);
        t[k] = now() - a;
        pthread_barrier_destroy(&start);
    }
    qsort(t, TRIALS, sizeof t[0], cmp);
    return t[TRIALS / 2];
}

int main(int argc, char **argv)
{
    size_t bytes = (size_t)64 << 20;
    int max_threads = 4, json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            max_threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else {
            fprintf(stderr, "usage: membw [--bytes B] [--threads T] [--json]\n");
            return 2;
        }
    }
    if (max_threads < 1 || max_threads > 16 || bytes < 4096) {
        fprintf(stderr, "membw: --threads must be 1..16 and --bytes >= 4096\n");
        return 2;
    }
    float *dst[16], *src[16];
    for (int i = 0; i < max_threads; i++) {
        dst[i] = aligned_alloc(4096, bytes);
        src[i] = aligned_alloc(4096, bytes);
        if (!dst[i] || !src[i]) {
            fprintf(stderr, "membw: out of memory\n");
            return 1;
        }
        memset(dst[i], 0, bytes);
        for (size_t j = 0; j < bytes / sizeof(float); j++)
            src[i][j] = 1.0f;
    }
    double single = (double)bytes / measure(1, bytes, 0, dst, src) / 1e9;
    if (!json)
        printf("%-7s %7s %12s %16s %10s\n", "op", "threads", "bytes", "aggregate_gbs", "vs_1copy");
    for (int add = 0; add < 2; add++)
        for (int t = 1; t <= max_threads; t++) {
            double gbs = (double)bytes * t / measure(t, bytes, add, dst, src) / 1e9;
            if (json)
                printf("{\"bench\":\"membw\",\"op\":\"%s\",\"threads\":%d,\"bytes\":%zu,\"aggregate_gbs\":%.4g,"
                       "\"memcpy_1thread_gbs\":%.4g}\n",
                       add ? "add" : "memcpy", t, bytes, gbs, single);
            else
                printf("%-7s %7d %12zu %16.2f %10.2f\n", add ? "y+=x" : "memcpy", t, bytes, gbs, gbs / single);
        }
    for (int i = 0; i < max_threads; i++) {
        free(dst[i]);
        free(src[i]);
    }
    return 0;
}
