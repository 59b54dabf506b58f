/* The machine's arithmetic peak, measured: T threads at once, each running
 * long chains of independent vector multiply-adds that never touch memory,
 * for every instruction set this CPU has (fp32 FMA at 512 and 256 bits, a
 * separate multiply and add for CPUs without FMA, and bf16 dot products
 * where AVX512_BF16 exists). The fraction of peak that bench/peer reports
 * divides by the best fp32 figure at all cores, taken here in the same run
 * rather than from a datasheet: a vCPU's clock, its vector width at full
 * rate (some cores split 512-bit operations in two) and what the
 * hypervisor leaves of it are not written anywhere a program can read.
 *
 * Counting: an FMA lane is 2 FLOPs; a bf16 dot-product lane (VDPBF16PS)
 * adds two products to an fp32 accumulator, 4 FLOPs.
 *
 * usage: peak [--threads T] [--seconds S] [--json]
 *   (defaults: every count from 1 to the online cores, 0.3 s per trial) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PEAK_X86 1
#endif

#define TRIALS 3
#define MAX_THREADS 256
#define CHAINS 12      /* independent accumulators: enough to cover FMA latency x ports */
#define INNER 1000     /* iterations between clock reads */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Each kernel runs `iterations` rounds of CHAINS vector operations and
 * returns a value that depends on all of them, so nothing is optimised
 * away. The FLOPs per round are the kernel's `flops_per_round`. */
typedef float (*peak_kernel)(long iterations);

static float generic_mul_add(long iterations)
{
    /* Plain C on 8-lane GCC vectors: a multiply and an add, whatever the
     * compiler makes of them on this target (-ffp-contract=off keeps them
     * apart). The baseline every CPU has. */
    typedef float v8 __attribute__((vector_size(32)));
    v8 acc[CHAINS];
    const v8 x = {1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f, 1.0000001f};
    const v8 y = {0.9999999f, 0.9999999f, 0.9999999f, 0.9999999f, 0.9999999f, 0.9999999f, 0.9999999f, 0.9999999f};
    for (int c = 0; c < CHAINS; c++)
        acc[c] = x * (float)c;
    for (long i = 0; i < iterations; i++)
        for (int c = 0; c < CHAINS; c++)
            acc[c] = acc[c] * x + y;
    float s = 0.0f;
    for (int c = 0; c < CHAINS; c++)
        for (int l = 0; l < 8; l++)
            s += acc[c][l];
    return s;
}

#ifdef PEAK_X86
__attribute__((target("avx2,fma"))) static float avx2_fma(long iterations)
{
    __m256 acc[CHAINS];
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iterations; i++)
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], x, y);
    __m256 s = acc[0];
    for (int c = 1; c < CHAINS; c++)
        s = _mm256_add_ps(s, acc[c]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

__attribute__((target("avx512f"))) static float avx512_fma(long iterations)
{
    __m512 acc[CHAINS];
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iterations; i++)
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; c++)
        s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16,avx512vl"))) static float avx512_bf16_dot(long iterations)
{
    __m512 acc[CHAINS];
    /* bf16 pairs of about 1 and 2^-20: the sums grow slowly and stay finite. */
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);
    const __m512bh y = (__m512bh)_mm512_set1_epi32(0x35803580);
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iterations; i++)
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; c++)
        s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}
#endif

typedef struct peak_isa {
    const char *name;
    const char *precision; /* "fp32" or "bf16" */
    peak_kernel kernel;
    double flops_per_round;
    int (*available)(void);
} peak_isa;

static int always(void)
{
    return 1;
}

#ifdef PEAK_X86
static int has_avx2_fma(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int has_avx512f(void)
{
    return __builtin_cpu_supports("avx512f");
}
static int has_avx512_bf16(void)
{
    /* GCC 12's __builtin_cpu_supports knows "avx512bf16". */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}
#endif

static const peak_isa isas[] = {
    {"generic-mul-add", "fp32", generic_mul_add, CHAINS * 8 * 2.0, always},
#ifdef PEAK_X86
    {"avx2-fma", "fp32", avx2_fma, CHAINS * 8 * 2.0, has_avx2_fma},
    {"avx512-fma", "fp32", avx512_fma, CHAINS * 16 * 2.0, has_avx512f},
    {"avx512-bf16-dot", "bf16", avx512_bf16_dot, CHAINS * 16 * 4.0, has_avx512_bf16},
#endif
};

typedef struct worker {
    const peak_isa *isa;
    double seconds;
    pthread_barrier_t *start;
    double rounds; /* out */
    float sink;    /* out */
} worker;

static void *run(void *p)
{
    worker *w = p;
    pthread_barrier_wait(w->start);
    const double t0 = now();
    double rounds = 0.0;
    float sink = 0.0f;
    while (now() - t0 < w->seconds) {
        sink += w->isa->kernel(INNER);
        rounds += INNER;
    }
    w->rounds = rounds / (now() - t0); /* rounds per second */
    w->sink = sink;
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over TRIALS of the threads' summed GFLOP/s, all running at once. */
static int measure(const peak_isa *isa, int threads, double seconds, double *gflops)
{
    double trial[TRIALS];
    for (int k = 0; k < TRIALS; k++) {
        pthread_barrier_t start;
        if (pthread_barrier_init(&start, NULL, (unsigned)threads) != 0)
            return -1;
        pthread_t tid[MAX_THREADS];
        worker w[MAX_THREADS];
        int started = 0;
        for (int i = 0; i < threads; i++) {
            w[i] = (worker){isa, seconds, &start, 0.0, 0.0f};
            if (i > 0 && pthread_create(&tid[i], NULL, run, &w[i]) != 0)
                break;
            started++;
        }
        if (started != threads) {
            fprintf(stderr, "peak: could not start %d threads\n", threads);
            exit(1);
        }
        run(&w[0]);
        double sum = w[0].rounds;
        volatile float sink = w[0].sink;
        for (int i = 1; i < threads; i++) {
            pthread_join(tid[i], NULL);
            sum += w[i].rounds;
            sink += w[i].sink;
        }
        (void)sink;
        pthread_barrier_destroy(&start);
        trial[k] = sum * isa->flops_per_round / 1e9;
    }
    qsort(trial, TRIALS, sizeof trial[0], cmp);
    *gflops = trial[TRIALS / 2];
    return 0;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--threads T] [--seconds S] [--json]\n", prog);
}

int main(int argc, char **argv)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    if (cores > MAX_THREADS)
        cores = MAX_THREADS;
    int only_threads = 0, json = 0;
    double seconds = 0.3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end || t < 1 || t > MAX_THREADS) {
                fprintf(stderr, "peak: --threads '%s': expected 1 to %d\n", argv[i], MAX_THREADS);
                return 2;
            }
            only_threads = (int)t;
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            char *end;
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds > 0.0 && seconds <= 60.0)) {
                fprintf(stderr, "peak: --seconds '%s': expected a number in (0, 60]\n", argv[i]);
                return 2;
            }
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    double best[2] = {0.0, 0.0}; /* fp32, bf16: at the largest thread count */
    const char *best_isa[2] = {"none", "none"};
    const int lo = only_threads ? only_threads : 1, hi = only_threads ? only_threads : (int)cores;
    if (!json)
        printf("%-18s %-5s %8s %12s %12s\n", "isa", "prec", "threads", "GFLOP/s", "per thread");
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        const peak_isa *isa = &isas[k];
        if (!isa->available())
            continue;
        for (int t = lo; t <= hi; t++) {
            double g;
            if (measure(isa, t, seconds, &g) != 0) {
                fprintf(stderr, "peak: could not make a barrier for %d threads\n", t);
                return 1;
            }
            if (json)
                printf("{\"bench\":\"peak\",\"isa\":\"%s\",\"precision\":\"%s\",\"threads\":%d,\"gflops\":%.1f,"
                       "\"per_thread\":%.1f}\n",
                       isa->name, isa->precision, t, g, g / t);
            else
                printf("%-18s %-5s %8d %12.1f %12.1f\n", isa->name, isa->precision, t, g, g / t);
            const int p = strcmp(isa->precision, "bf16") == 0;
            if (t == hi && g > best[p]) {
                best[p] = g;
                best_isa[p] = isa->name;
            }
        }
    }
    /* The line bench/peer reads: the best fp32 (and bf16) figure at the
     * largest thread count measured. */
    if (json)
        printf("{\"bench\":\"peak\",\"isa\":\"best\",\"threads\":%d,\"fp32_gflops\":%.1f,\"fp32_isa\":\"%s\","
               "\"bf16_gflops\":%.1f,\"bf16_isa\":\"%s\"}\n",
               hi, best[0], best_isa[0], best[1], best_isa[1]);
    else
        printf("best at %d threads: fp32 %.1f GFLOP/s (%s), bf16 %.1f GFLOP/s (%s)\n", hi, best[0], best_isa[0],
               best[1], best_isa[1]);
    return 0;
}
