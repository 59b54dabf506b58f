/* tandem's own GEMM with fused multiply-adds: what the CPU backend runs
 * outside deterministic mode on a CPU with FMA (cpu_gemm.c's engine rule).
 *
 * The rule: every element of C is
 *     acc = 0; for p = 0, 1, ..., k-1: acc = fma(opA[i,p], opB[p,j], acc)
 *     C[i,j] = alpha * acc            (beta == 0: C is not read)
 *     C[i,j] = alpha * acc + beta * C[i,j]   (multiplies and add rounded apart)
 * An fma is exactly rounded (IEEE 754), so, as in the deterministic own GEMM
 * (cpu_gemm_own.c), no step depends on where the element sits in a block:
 * the bits do not depend on m, n, the blocking, the cancel tiles or the
 * host pool's parts, nor on which of the paths below runs (all tested
 * bitwise against the portable one). They do differ from the
 * deterministic GEMM's (one rounding per product and sum instead of two),
 * which is why deterministic mode never runs this file.
 *
 * Why a second engine: the multiply and the add rounded apart cost two
 * instructions per product; with one fused instruction the same loop does
 * twice the work per cycle where the FMA units are the bottleneck
 * (bench/RESULTS.md, "GEMM engines"). The fused operations are written
 * as intrinsics (or fused_multiply_add below), so the project-wide -ffp-contract=off
 * stays in force here too: nothing is fused that the source does not say,
 * and the alpha / beta scaling stays two roundings as in the rule.
 *
 * Shape (as cpu_gemm_own.c, Goto / BLIS style): blocks of op(B), KC x NC,
 * packed into panels of NR columns (zero-padded at the edge); A read where
 * it lies (a last panel of fewer than MR rows packed, zero-padded); an
 * MR x NR micro-tile of sums in vector registers while the kernel walks
 * k; between k-blocks the sums wait in a per-thread buffer (stored and
 * reloaded floats: no change). The micro-tile is 12 x 32 on AVX-512 (24 of
 * the 32 registers hold sums: enough independent chains to cover the FMA
 * latency on two units; 12 x 16 when C has at most 16 columns) and 6 x 16
 * on AVX2 (12 of 16). MR divides 192, the rows of a cancel tile or
 * host-pool part, so parts do not cut micro-tiles (that would cost time
 * only, never bits). k is cut into equal blocks of
 * at most KC_MAX, so a 3x3 convolution's k = 288 or an MLP's 784 is one or
 * two blocks rather than a block and a sliver.
 *
 * Memory: one per-thread block (panels of B, the edge panel of A, partial
 * sums; about 0.75 MB), allocated on the thread's first call and freed at
 * its exit, as cpu_gemm_own.c does; if it cannot be allocated the portable
 * path runs (same bits, slower). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_own_fma.h"
#include "cpu_gemm_rule.h"
#include "cpu_thread_scratch.h"
#include "td_platform.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define FMA_X86 1
#include <immintrin.h>
#else
#define FMA_X86 0
#endif

enum {
    KC_MAX = 512,
    NC = 256,
    MC = 192,     /* a multiple of both MRs */
    MR_MAX = 12,
    NR_MAX = 32,
};

typedef struct fma_scratch {
    float b[KC_MAX * NC];
    float a[MR_MAX * KC_MAX];
    float acc[MC * NC];
} fma_scratch;

/* This thread's scratch (cpu_thread_scratch.h: allocated on its first call,
 * aligned to a cache line); NULL if that failed. */
static fma_scratch *thread_scratch(void)
{
    return td_cpu_thread_scratch(TD_SCRATCH_OWN_FMA, sizeof(fma_scratch));
}

/* a*b + c rounded once, for the portable path, without the C library's
 * fmaf: mingw-w64's is not a fused multiply-add (under wine it disagreed
 * with the FMA instruction on a quarter of random operands, where glibc's
 * never does), and one definition on every system trusts no library. The
 * product of two floats is exact in a double (48 bits); its sum with c is
 * rounded to odd in double (the round-to-nearest sum, its exact error by
 * TwoSum, and the last bit set when that error is nonzero), and a double
 * rounded to odd, with 53 >= 24 + 2 bits, rounds to the correctly rounded
 * float. */
static float fused_multiply_add(float a, float b, float c)
{
    const double p = (double)a * (double)b, q = (double)c;
    const double s = p + q;
    const double bb = s - p;
    const double err = (p - (s - bb)) + (q - bb);
    if (err == 0.0 || s != s || s - s != 0.0)
        return (float)s;
    uint64_t bits;
    memcpy(&bits, &s, sizeof bits);
    if ((bits & 1u) == 0)
        bits += ((err > 0.0) == (s > 0.0)) ? 1 : (uint64_t)-1;
    double odd;
    memcpy(&odd, &bits, sizeof odd);
    return (float)odd;
}

/* The rule, one element at a time: the portable path, and the reference
 * every other path must match bitwise. */
static void gemm_portable(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < g->k; p++)
                acc = fused_multiply_add(td_gemm_op_a(g, a, i, p), td_gemm_op_b(g, b, p, j), acc);
            float *cij = &c[i * g->ldc + j];
            *cij = td_gemm_finish(g, acc, cij);
        }
}

#if FMA_X86
/* A transposed A read in place (op(A) = A^T, a kernel gradient's patches^T:
 * the 12 values of one step of k lie side by side, the next step a row of
 * A further on) gives the hardware prefetcher one new line per step at a
 * stride of lda, and a long k (conv2's kernel gradient, 25088 steps over 29
 * MB of patches) then waited on memory: the same GEMM with k = 512 from
 * cache ran at 250 GFLOP/s, with k = 25088 at 140. Asking for the line 64
 * steps ahead (the 12 floats may straddle two lines: both ends) took it to
 * 200 (bench/RESULTS.md, "conv"); 32 steps gave 185, 128 and 256 no more.
 * A prefetch changes no value and never faults, even past A's end. */
enum { PREFETCH_STEPS = 64 };

__attribute__((target("avx512f"))) static inline void prefetch_a_transposed(const float *a, int64_t ks)
{
    _mm_prefetch((const char *)(a + PREFETCH_STEPS * ks), _MM_HINT_T0);
    _mm_prefetch((const char *)(a + PREFETCH_STEPS * ks + MR_MAX - 1), _MM_HINT_T0);
}

/* A micro-kernel: MR x NR sums over kc values of k. A's row r at step p is
 * a[r * rs + p * ks]; B's NR values at step p start at b[p * bs] (a
 * packed panel: bs = NR; B in place: its row stride). The sums
 * start from `from` (MR x NR, row-major; NULL: zero). With `g` NULL the
 * raw sums go to `to` (row stride NR); otherwise they are finished into C
 * (`to`, row stride g->ldc) by the rule's alpha / beta step. */
typedef void fma_kernel(int64_t kc, const float *a, int64_t rs, int64_t ks, const float *b, int64_t bs,
                        const float *from, float *to, const td_gemm_params *g);

__attribute__((target("avx512f"))) static void kernel_avx512(int64_t kc, const float *a, int64_t rs, int64_t ks,
                                                              const float *b, int64_t bs, const float *from, float *to,
                                                              const td_gemm_params *g)
{
    __m512 lo[12], hi[12];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        lo[r] = from ? _mm512_loadu_ps(from + r * 32) : _mm512_setzero_ps();
        hi[r] = from ? _mm512_loadu_ps(from + r * 32 + 16) : _mm512_setzero_ps();
    }
    const bool strided_a = rs == 1 && ks > MR_MAX;
    for (int64_t p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        if (strided_a)
            prefetch_a_transposed(a, ks);
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) {
            const __m512 x = _mm512_set1_ps(a[r * rs]);
            lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
            hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
        }
        a += ks;
        b += bs;
    }
    if (!g) {
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) {
            _mm512_storeu_ps(to + r * 32, lo[r]);
            _mm512_storeu_ps(to + r * 32 + 16, hi[r]);
        }
        return;
    }
    const __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
    const int64_t ld = g->ldc;
    if (g->beta == 0.0f) {
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) {
            _mm512_storeu_ps(to + r * ld, _mm512_mul_ps(alpha, lo[r]));
            _mm512_storeu_ps(to + r * ld + 16, _mm512_mul_ps(alpha, hi[r]));
        }
        return;
    }
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        float *cr = to + r * ld;
        _mm512_storeu_ps(cr, _mm512_add_ps(_mm512_mul_ps(alpha, lo[r]), _mm512_mul_ps(beta, _mm512_loadu_ps(cr))));
        _mm512_storeu_ps(cr + 16,
                         _mm512_add_ps(_mm512_mul_ps(alpha, hi[r]), _mm512_mul_ps(beta, _mm512_loadu_ps(cr + 16))));
    }
}

/* 12 x 16 on AVX-512, for C of at most 16 columns (an MLP's 10-class
 * head): a 32-wide panel would be two thirds padding there. 12 sums in
 * flight still cover the FMA latency. */
__attribute__((target("avx512f"))) static void kernel_avx512_narrow(int64_t kc, const float *a, int64_t rs,
                                                                     int64_t ks, const float *b, int64_t bs, const float *from,
                                                                     float *to, const td_gemm_params *g)
{
    __m512 acc[12];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++)
        acc[r] = from ? _mm512_loadu_ps(from + r * 16) : _mm512_setzero_ps();
    const bool strided_a = rs == 1 && ks > MR_MAX;
    for (int64_t p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_loadu_ps(b);
        if (strided_a)
            prefetch_a_transposed(a, ks);
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * rs]), b0, acc[r]);
        a += ks;
        b += bs;
    }
    if (!g) {
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++)
            _mm512_storeu_ps(to + r * 16, acc[r]);
        return;
    }
    const __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
    const int64_t ld = g->ldc;
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        __m512 v = _mm512_mul_ps(alpha, acc[r]);
        if (g->beta != 0.0f)
            v = _mm512_add_ps(v, _mm512_mul_ps(beta, _mm512_loadu_ps(to + r * ld)));
        _mm512_storeu_ps(to + r * ld, v);
    }
}

__attribute__((target("avx2,fma"))) static void kernel_avx2(int64_t kc, const float *a, int64_t rs, int64_t ks,
                                                             const float *b, int64_t bs, const float *from, float *to,
                                                             const td_gemm_params *g)
{
    __m256 lo[6], hi[6];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        lo[r] = from ? _mm256_loadu_ps(from + r * 16) : _mm256_setzero_ps();
        hi[r] = from ? _mm256_loadu_ps(from + r * 16 + 8) : _mm256_setzero_ps();
    }
    for (int64_t p = 0; p < kc; p++) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            const __m256 x = _mm256_broadcast_ss(&a[r * rs]);
            lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
            hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
        }
        a += ks;
        b += bs;
    }
    if (!g) {
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            _mm256_storeu_ps(to + r * 16, lo[r]);
            _mm256_storeu_ps(to + r * 16 + 8, hi[r]);
        }
        return;
    }
    const __m256 alpha = _mm256_set1_ps(g->alpha), beta = _mm256_set1_ps(g->beta);
    const int64_t ld = g->ldc;
    if (g->beta == 0.0f) {
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            _mm256_storeu_ps(to + r * ld, _mm256_mul_ps(alpha, lo[r]));
            _mm256_storeu_ps(to + r * ld + 8, _mm256_mul_ps(alpha, hi[r]));
        }
        return;
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        float *cr = to + r * ld;
        _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_mul_ps(alpha, lo[r]), _mm256_mul_ps(beta, _mm256_loadu_ps(cr))));
        _mm256_storeu_ps(cr + 8,
                         _mm256_add_ps(_mm256_mul_ps(alpha, hi[r]), _mm256_mul_ps(beta, _mm256_loadu_ps(cr + 8))));
    }
}

/* A matrix-vector product: C of one column or one row, at most
 * SMALL_MACS multiply-adds (linear regression's 128 x 1 x 5 forward and 5
 * x 1 x 128 kernel gradient). There the blocked path's fixed cost -- a KC x
 * NR panel of B and an MR-row edge of A packed with zero padding, 16
 * columns and 12 rows for one, sums finished through a buffer -- is the
 * whole time: the 5 x 1 x 128 gradient took 1.6-1.8 us for 640
 * multiply-adds, half of a linreg step's device work (bench/RESULTS.md).
 * Here each element of C is the rule's own chain, eight elements of C's
 * row or column in the lanes of one vector (independent chains), the
 * last vector's missing lanes zero and never stored; their operands are
 * loaded side by side where they lie so, gathered otherwise (for a short
 * C only: gemm_is_vector). Same chains, same bits. (With both sides over
 * one the blocked path wins: 4 x 64 x 16 took 0.5 us there, 0.8 us in
 * eight-lane chains.) */
enum { SMALL_MACS = 8192 };

static bool gemm_is_vector(const td_gemm_params *g)
{
    if (!td_gemm_is_vector(g, SMALL_MACS))
        return false;
    const bool along_row = td_gemm_vector_along_row(g);
    if (along_row ? !g->trans_b : g->trans_a)
        return true; /* the lanes' operands lie side by side */
    /* Gathered, a leading dimension apart (offsets of int32): that pays
     * for a short C only (256 x 1 x 16 with A in place: 1.6 us blocked,
     * 1.75 gathered; 128 x 1 x 5: 0.4-0.6 against 0.35). */
    return (along_row ? g->n : g->m) <= 128 && g->lda <= INT32_MAX / 8 && g->ldb <= INT32_MAX / 8;
}

/* Elements at..at+lanes-1 (lanes <= 8) of C's only row (along_row) or only
 * column: op(A)'s one value broadcast and op(B)'s in the lanes, or the
 * other way round. */
__attribute__((target("avx2,fma"))) static __m256 vector_chains(const td_gemm_params *g, const float *a,
                                                                 const float *b, int64_t at, int lanes, bool along_row)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane);
    /* Where the lanes' operands lie side by side, and their stride if not. */
    const bool side_by_side = along_row ? !g->trans_b : g->trans_a;
    const int32_t stride = (int32_t)(along_row ? g->ldb : g->lda);
    const __m256i offsets = _mm256_mullo_epi32(lane, _mm256_set1_epi32(stride));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t p = 0; p < g->k; p++) {
        const float one = along_row ? td_gemm_op_a(g, a, 0, p) : td_gemm_op_b(g, b, p, 0);
        const float *first = along_row ? (side_by_side ? b + p * g->ldb + at : b + at * g->ldb + p)
                                       : (side_by_side ? a + p * g->lda + at : a + at * g->lda + p);
        const __m256 v = side_by_side ? _mm256_maskload_ps(first, live)
                                      : _mm256_mask_i32gather_ps(_mm256_setzero_ps(), first, offsets,
                                                                 _mm256_castsi256_ps(live), 4);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(one), v, acc); /* a product is the same either way round */
    }
    return acc;
}

__attribute__((target("avx2,fma"))) static void gemm_vector(const td_gemm_params *g, float *c, const float *a,
                                                             const float *b)
{
    const bool along_row = td_gemm_vector_along_row(g);
    const int64_t length = along_row ? g->n : g->m;
    for (int64_t at = 0; at < length; at += 8) {
        const int lanes = length - at < 8 ? (int)(length - at) : 8;
        float sums[8];
        _mm256_storeu_ps(sums, vector_chains(g, a, b, at, lanes, along_row));
        td_gemm_finish_vector(g, c, at, lanes, sums);
    }
}

/* Columns [j0, j0+nc) and k-range [p0, p0+kc) of op(B) as panels of nr
 * columns, each stored k-major (nr values per p), columns past nc zero;
 * with whole_in_place the whole panels are left out (their place kept). */
static void pack_b(const td_gemm_params *g, const float *b, int64_t j0, int64_t nc, int64_t p0, int64_t kc,
                   int nr, bool whole_in_place, float *restrict dst)
{
    for (int64_t jr = 0; jr < nc; jr += nr) {
        const int64_t cols = nc - jr < nr ? nc - jr : nr;
        if (whole_in_place && cols == nr) {
            dst += kc * nr; /* the kernel reads this panel from B itself */
            continue;
        }
        if (!g->trans_b) {
            for (int64_t p = 0; p < kc; p++, dst += nr) {
                const float *src = b + (p0 + p) * g->ldb + j0 + jr;
                for (int64_t q = 0; q < cols; q++)
                    dst[q] = src[q];
                for (int64_t q = cols; q < nr; q++)
                    dst[q] = 0.0f;
            }
            continue;
        }
        /* op(B) = B^T: column j of op(B) is row j of B, contiguous in p;
         * walk it that way and scatter into the panel. */
        for (int64_t q = 0; q < cols; q++) {
            const float *src = b + (j0 + jr + q) * g->ldb + p0;
            for (int64_t p = 0; p < kc; p++)
                dst[p * nr + q] = src[p];
        }
        for (int64_t q = cols; q < nr; q++)
            for (int64_t p = 0; p < kc; p++)
                dst[p * nr + q] = 0.0f;
        dst += kc * nr;
    }
}

/* Rows [i0, i0+rows) (rows < mr) and k-range [p0, p0+kc) of op(A) as one
 * panel stored k-major (mr values per p), rows past `rows` zero. */
static void pack_a_edge(const td_gemm_params *g, const float *a, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                        int mr, float *restrict dst)
{
    /* op(A) = A^T: the rows of op(A) at one p lie side by side in A (a
     * kernel gradient's 9 rows of patches^T, packed once per k-block over
     * a k of 100352: the generic loop below was most of that GEMM). */
    if (g->trans_a) {
        const float *src = a + p0 * g->lda + i0;
        for (int64_t p = 0; p < kc; p++, dst += mr, src += g->lda) {
            for (int64_t r = 0; r < rows; r++)
                dst[r] = src[r];
            for (int64_t r = rows; r < mr; r++)
                dst[r] = 0.0f;
        }
        return;
    }
    for (int64_t p = 0; p < kc; p++, dst += mr) {
        for (int64_t r = 0; r < rows; r++)
            dst[r] = td_gemm_op_a(g, a, i0 + r, p0 + p);
        for (int64_t r = rows; r < mr; r++)
            dst[r] = 0.0f;
    }
}

/* The blocked loops: NC columns of C, MC rows, k in equal blocks of at
 * most KC_MAX, then NR-column panels and MR-row micro-tiles. */
static void gemm_blocked(const td_gemm_params *g, float *c, const float *a, const float *b, fma_scratch *s,
                         fma_kernel *kernel, int mr, int nr)
{
    const int64_t kblocks = (g->k + KC_MAX - 1) / KC_MAX, kc_even = (g->k + kblocks - 1) / kblocks;
    const int64_t row_step = g->trans_a ? 1 : g->lda, k_step = g->trans_a ? g->lda : 1;
    /* A B of exactly NR columns, not transposed and without padding, is
     * already one packed panel: read in place. Copying it cost a third of
     * the time where k is long (a conv's kernel gradient, 9 x 32 x 100352,
     * 1.4x faster in place). Only then: read in place with a stride of a
     * power of two (n = 64), B's rows fall in half of L1's sets, and conv2's
     * forward GEMM ran 0.7x. With one micro-tile of rows (m <= MR) each
     * value of B is read once, so that concern is gone and B is read in
     * place at any row stride: the host pool's column parts of a GEMM with
     * few rows (9 x 32 of 64 columns) then copy nothing; copying a part's
     * columns of a long B cost more than its multiply-adds. */
    const bool b_in_place = !g->trans_b && g->n == nr && (g->ldb == nr || g->m <= mr);
    for (int64_t j0 = 0; j0 < g->n; j0 += NC) {
        const int64_t nc = g->n - j0 < NC ? g->n - j0 : NC;
        for (int64_t i0 = 0; i0 < g->m; i0 += MC) {
            const int64_t mc = g->m - i0 < MC ? g->m - i0 : MC;
            const int64_t whole_rows = mc / mr * mr;
            for (int64_t p0 = 0; p0 < g->k; p0 += kc_even) {
                const int64_t kc = g->k - p0 < kc_even ? g->k - p0 : kc_even;
                const bool first = p0 == 0, last = p0 + kc == g->k;
                /* With one k-block the packed panels stay valid for every
                 * block of rows: packed once per NC columns. (Repacking
                 * a transposed B per block of rows cost a quarter of an
                 * MLP's input-gradient GEMM.) */
                if (kblocks > 1 || i0 == 0)
                    pack_b(g, b, j0, nc, p0, kc, nr, b_in_place, s->b);
                if (whole_rows < mc)
                    pack_a_edge(g, a, i0 + whole_rows, mc - whole_rows, p0, kc, mr, s->a);
                float *partial = s->acc;
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const int64_t cols = nc - jr < nr ? nc - jr : nr;
                    const bool in_place = b_in_place && cols == nr;
                    const float *bp = in_place ? b + p0 * g->ldb + j0 + jr : &s->b[jr * kc];
                    const int64_t bs = in_place ? g->ldb : nr;
                    for (int64_t ir = 0; ir < mc; ir += mr, partial += mr * nr) {
                        const float *from = first ? NULL : partial;
                        const bool whole = ir < whole_rows;
                        const float *ap = whole ? a + (i0 + ir) * row_step + p0 * k_step : s->a;
                        const int64_t rs = whole ? row_step : 1, ks = whole ? k_step : mr;
                        float *ct = &c[(i0 + ir) * g->ldc + j0 + jr];
                        if (!last) {
                            kernel(kc, ap, rs, ks, bp, bs, from, partial, NULL);
                        } else if (whole && cols == nr) {
                            kernel(kc, ap, rs, ks, bp, bs, from, ct, g);
                        } else {
                            float sums[MR_MAX * NR_MAX];
                            kernel(kc, ap, rs, ks, bp, bs, from, sums, NULL);
                            const int64_t rows = mc - ir < mr ? mc - ir : mr;
                            for (int64_t r = 0; r < rows; r++)
                                for (int64_t q = 0; q < cols; q++)
                                    ct[r * g->ldc + q] = td_gemm_finish(g, sums[r * nr + q], &ct[r * g->ldc + q]);
                        }
                    }
                }
            }
        }
    }
}
#endif

bool td_cpu_gemm_own_fma_isa_runs(td_gemm_fma_isa isa)
{
    switch (isa) {
    case TD_GEMM_FMA_PORTABLE:
        return true;
#if FMA_X86
    case TD_GEMM_FMA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TD_GEMM_FMA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f");
#endif
    default:
        return false;
    }
}

static td_gemm_fma_isa best_isa;
static td_once best_once = TD_ONCE_INITIALIZER;

static void find_best_isa(void)
{
    best_isa = td_cpu_gemm_own_fma_isa_runs(TD_GEMM_FMA_AVX512) ? TD_GEMM_FMA_AVX512
               : td_cpu_gemm_own_fma_isa_runs(TD_GEMM_FMA_AVX2) ? TD_GEMM_FMA_AVX2
                                                                 : TD_GEMM_FMA_PORTABLE;
}

td_gemm_fma_isa td_cpu_gemm_own_fma_best_isa(void)
{
    td_once_run(&best_once, find_best_isa);
    return best_isa;
}

const char *td_cpu_gemm_own_fma_isa_name(td_gemm_fma_isa isa)
{
    switch (isa) {
    case TD_GEMM_FMA_AVX2:
        return "avx2";
    case TD_GEMM_FMA_AVX512:
        return "avx512";
    default:
        return "portable";
    }
}

bool td_cpu_gemm_own_fma_on(td_gemm_fma_isa isa, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    if (!td_cpu_gemm_own_fma_isa_runs(isa))
        return false;
    if (g->m <= 0 || g->n <= 0)
        return true;
    if (g->k <= 0) {
        /* No products: C = beta C, and beta == 0 does not read C. */
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++)
                c[i * g->ldc + j] = g->beta == 0.0f ? 0.0f : g->beta * c[i * g->ldc + j];
        return true;
    }
#if FMA_X86
    if (isa != TD_GEMM_FMA_PORTABLE && gemm_is_vector(g)) {
        gemm_vector(g, c, a, b); /* both ISAs have AVX2 and FMA */
        return true;
    }
    fma_scratch *s = isa == TD_GEMM_FMA_PORTABLE ? NULL : thread_scratch();
    if (s && isa == TD_GEMM_FMA_AVX512) {
        if (g->n <= 16)
            gemm_blocked(g, c, a, b, s, kernel_avx512_narrow, 12, 16);
        else
            gemm_blocked(g, c, a, b, s, kernel_avx512, 12, 32);
        return true;
    }
    if (s && isa == TD_GEMM_FMA_AVX2) {
        gemm_blocked(g, c, a, b, s, kernel_avx2, 6, 16);
        return true;
    }
#else
    (void)thread_scratch;
#endif
    gemm_portable(g, c, a, b);
    return true;
}

void td_cpu_gemm_own_fma(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    td_cpu_gemm_own_fma_on(td_cpu_gemm_own_fma_best_isa(), g, c, a, b);
}
