/* tandem's own GEMM: the CPU backend's GEMM when no CBLAS was configured
 * (-Dblas=none), and always compiled so tests and bench/gemm can run it
 * beside the CBLAS one (TD_CPU_GEMM=own, cpu_gemm.c).
 *
 * The one rule: every element of C is
 *     acc = 0; for p = 0, 1, ..., k-1: acc = acc + opA[i,p] * opB[p,j]
 *     C[i,j] = alpha * acc            (beta == 0: C is not read)
 *     C[i,j] = alpha * acc + beta * C[i,j]
 * in float, each operation rounded on its own (-ffp-contract=off for the
 * whole project: no fused multiply-add). No step depends on where the
 * element sits in a block, so the bits do not depend on m, n, the blocking,
 * the tiles of cpu_gemm.c or the host pool's parts (tested), and are
 * meant not to depend on the machine either (any IEEE-754 float unit,
 * x86-64 or ARM, any vector width; checked so far only as AVX-512 against
 * the scalar unpacked sums, tests/engine/test_cpu_gemm_own.c).
 * Splitting k is allowed only as "store acc, load it back": a float stored
 * and reloaded is the same float, so the k-blocks below change nothing.
 *
 * The speed comes from the usual shape of a blocked GEMM (ideas as in
 * Goto's paper and BLIS's five loops): blocks of B (KC x NC) are packed
 * into contiguous panels of NR columns, zero-padded at the edge, and a
 * micro-kernel keeps an MR x NR block of accumulators in registers while
 * it walks k. A is read where it lies (the kernel broadcasts one value of
 * A per row and k, so its layout matters little: measured, reading it in
 * place beat packing it, most at narrow n); only a last panel of fewer
 * than MR rows is packed, zero-padded. The micro-kernel is plain C:
 * GCC vectorises its inner loop over the NR columns, each vector lane being
 * one element's own sum, so vectorising does not reorder any sum.
 *
 * Memory: the panels and the accumulator block are allocated once per
 * thread, on its first GEMM, and freed when the thread exits; a step in
 * steady state allocates nothing. If that one allocation fails, the same
 * sums run unpacked (slower, same bits). */
#include <stdbool.h>
#include <stdlib.h>

#include "cpu_gemm_own.h"
#include "cpu_gemm_rule.h"
#include "td_platform.h"

/* MR x NR accumulators: 6 x 16 floats are 12 AVX registers, leaving room
 * for two of B and one of A (6 of AVX-512's 32; SSE spills some of its
 * 24); KC x NR of B (16 KiB) stays in L1 while the kernel runs; MC x KC of
 * A (96 KiB at most) stays in L2 across the NC / NR panels of B; KC x NC of B
 * (512 KiB) in L2/L3. Other sizes (MC 192, KC 384 or 512, NC 256) were
 * tried only with an earlier, slower kernel (35 GFLOP/s), in a noisy
 * moment: no difference above the noise; not retuned since. */
enum {
    OWN_MR = 6,
    OWN_NR = 16,
    OWN_KC = 256,
    OWN_MC = 16 * OWN_MR,
    OWN_NC = 32 * OWN_NR,
};

typedef struct own_scratch {
    float a[OWN_MR * OWN_KC]; /* the last, partial micro-panel of A */
    float b[OWN_KC * OWN_NC];
    float acc[OWN_MC * OWN_NC]; /* partial sums between k-blocks, tile by tile */
} own_scratch;

static td_thread_slot scratch_slot;
static td_once scratch_once = TD_ONCE_INITIALIZER;
static bool scratch_slot_ok;

static void make_scratch_slot(void)
{
    scratch_slot_ok = td_thread_slot_create(&scratch_slot) == 0;
}

/* This thread's scratch, allocated on its first call; NULL if that failed. */
static own_scratch *thread_scratch(void)
{
    td_once_run(&scratch_once, make_scratch_slot);
    if (!scratch_slot_ok)
        return NULL;
    own_scratch *s = td_thread_slot_get(&scratch_slot);
    if (!s) {
        s = malloc(sizeof *s);
        if (s && td_thread_slot_set(&scratch_slot, s) != 0) {
            free(s);
            s = NULL;
        }
    }
    return s;
}

/* The rule above, one element at a time: the fallback, and the reference
 * the blocked path must match bitwise. */
static void gemm_unpacked(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < g->k; p++)
                acc = acc + td_gemm_op_a(g, a, i, p) * td_gemm_op_b(g, b, p, j);
            float *cij = &c[i * g->ldc + j];
            *cij = td_gemm_finish(g, acc, cij);
        }
}

/* A matrix-vector product: C of one row or one column, at most
 * VECTOR_MACS multiply-adds (linear regression's 128 x 1 x 5 forward and 5
 * x 1 x 128 kernel gradient). The blocks' padding -- B to a 16-column
 * panel, A to a 6-row edge -- was the whole cost there (the gradient took
 * 1.9-2.1 us). Eight elements of C at a time, each its own chain in the
 * rule's order, side by side in an array whose lanes the compiler may keep
 * in a vector: no sum is reordered. (cpu_gemm_own_fma.c has the fused
 * rule's counterpart, in AVX2 intrinsics.) */
enum { VECTOR_LANES = 8, VECTOR_MACS = 8192 };

static void gemm_vector(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    const bool along_row = td_gemm_vector_along_row(g);
    const int64_t length = along_row ? g->n : g->m;
    for (int64_t at = 0; at < length; at += VECTOR_LANES) {
        const int64_t lanes = length - at < VECTOR_LANES ? length - at : VECTOR_LANES;
        float acc[VECTOR_LANES] = {0};
        for (int64_t p = 0; p < g->k; p++) {
            /* The product is the same either way round. */
            const float one = along_row ? td_gemm_op_a(g, a, 0, p) : td_gemm_op_b(g, b, p, 0);
            for (int64_t r = 0; r < lanes; r++)
                acc[r] = acc[r] + one * (along_row ? td_gemm_op_b(g, b, p, at + r) : td_gemm_op_a(g, a, at + r, p));
        }
        td_gemm_finish_vector(g, c, at, lanes, acc);
    }
}

/* Rows [i0, i0+mc) and k-range [p0, p0+kc) of op(A) as panels of MR rows,
 * each stored k-major (MR values per p), rows past mc zero. */
static void pack_a(const td_gemm_params *g, const float *a, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float *restrict dst)
{
    for (int64_t ir = 0; ir < mc; ir += OWN_MR) {
        const int64_t rows = mc - ir < OWN_MR ? mc - ir : OWN_MR;
        for (int64_t p = 0; p < kc; p++) {
            for (int64_t r = 0; r < rows; r++)
                dst[r] = td_gemm_op_a(g, a, i0 + ir + r, p0 + p);
            for (int64_t r = rows; r < OWN_MR; r++)
                dst[r] = 0.0f;
            dst += OWN_MR;
        }
    }
}

/* Columns [j0, j0+nc) and k-range [p0, p0+kc) of op(B) as panels of NR
 * columns, each stored k-major (NR values per p), columns past nc zero. */
static void pack_b(const td_gemm_params *g, const float *b, int64_t j0, int64_t nc, int64_t p0, int64_t kc,
                   float *restrict dst)
{
    for (int64_t jr = 0; jr < nc; jr += OWN_NR) {
        const int64_t cols = nc - jr < OWN_NR ? nc - jr : OWN_NR;
        for (int64_t p = 0; p < kc; p++) {
            if (!g->trans_b && cols == OWN_NR) {
                const float *src = b + (p0 + p) * g->ldb + j0 + jr;
                for (int64_t q = 0; q < OWN_NR; q++)
                    dst[q] = src[q];
            } else {
                for (int64_t q = 0; q < cols; q++)
                    dst[q] = td_gemm_op_b(g, b, p0 + p, j0 + jr + q);
                for (int64_t q = cols; q < OWN_NR; q++)
                    dst[q] = 0.0f;
            }
            dst += OWN_NR;
        }
    }
}

/* MR x NR sums over one k-block of packed panels: starting from `from`
 * (MR x NR, row-major; NULL: from 0), each element adds its products in k
 * order, and the sums go to `to`. Nothing else happens here, so that GCC
 * keeps the MR x NR sums in registers: the k loop's body, unrolled whole,
 * is straight-line code its SLP vectoriser turns into MR rows of NR-wide
 * vectors, each lane one element's own sum. On x86-64 GCC also builds
 * AVX2 and AVX-512 copies, chosen at load time (the same operations on
 * wider vectors: the same bits; tests/engine/test_gemm_isa.c builds this
 * file once per vector set, TD_CPU_GEMM_OWN_ONE_ISA, and compares). The
 * loop vectoriser is off: left on, it
 * vectorises the k loop itself and the sums live in memory (measured: 9
 * GFLOP/s against 35 on bench/gemm's shapes with the write-back inlined,
 * and more with it moved out, bench/RESULTS.md). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(TD_CPU_GEMM_OWN_ONE_ISA) && !defined(__SANITIZE_THREAD__) /* ifunc; TSan's resolver crashes at load */
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("no-tree-loop-vectorize")))
#elif defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-vectorize")))
#endif
static void micro_kernel(int64_t kc, const float *restrict ap, int64_t a_row_step, int64_t a_k_step,
                         const float *restrict bp, const float *restrict from, float *restrict to)
{
    float acc[OWN_MR][OWN_NR];
    for (int r = 0; r < OWN_MR; r++)
        for (int q = 0; q < OWN_NR; q++)
            acc[r][q] = from ? from[r * OWN_NR + q] : 0.0f;
    for (int64_t p = 0; p < kc; p++) {
#pragma GCC unroll 8
        for (int r = 0; r < OWN_MR; r++) {
            const float x = ap[r * a_row_step];
#pragma GCC unroll 16
            for (int q = 0; q < OWN_NR; q++)
                acc[r][q] = acc[r][q] + x * bp[q];
        }
        ap += a_k_step;
        bp += OWN_NR;
    }
    for (int r = 0; r < OWN_MR; r++)
        for (int q = 0; q < OWN_NR; q++)
            to[r * OWN_NR + q] = acc[r][q];
}

/* A whole MR x NR tile of sums into C: constant bounds and beta tested
 * once, so it vectorises (AVX2 / AVX-512 copies as for the kernel); at
 * small k (a 3x3 convolution's 9) this write-back is most of the time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(TD_CPU_GEMM_OWN_ONE_ISA) && !defined(__SANITIZE_THREAD__) /* ifunc; TSan's resolver crashes at load */
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void write_whole_tile(const td_gemm_params *g, const float *restrict sums, float *restrict c)
{
    const float alpha = g->alpha, beta = g->beta;
    for (int r = 0; r < OWN_MR; r++) {
        float *restrict cr = c + r * g->ldc;
        const float *restrict sr = sums + r * OWN_NR;
        if (beta == 0.0f)
            for (int q = 0; q < OWN_NR; q++)
                cr[q] = alpha * sr[q];
        else
            for (int q = 0; q < OWN_NR; q++)
                cr[q] = alpha * sr[q] + beta * cr[q];
    }
}

/* The blocked loops: NC columns of C, MC rows, KC of k, then NR x MR
 * micro-tiles. Between k-blocks a tile's sums wait in s->acc, one MR x NR
 * tile after another; after the last they are scaled into C. */
static void gemm_blocked(const td_gemm_params *g, float *c, const float *a, const float *b, own_scratch *s)
{
    for (int64_t j0 = 0; j0 < g->n; j0 += OWN_NC) {
        const int64_t nc = g->n - j0 < OWN_NC ? g->n - j0 : OWN_NC;
        for (int64_t i0 = 0; i0 < g->m; i0 += OWN_MC) {
            const int64_t mc = g->m - i0 < OWN_MC ? g->m - i0 : OWN_MC;
            for (int64_t p0 = 0; p0 < g->k; p0 += OWN_KC) {
                const int64_t kc = g->k - p0 < OWN_KC ? g->k - p0 : OWN_KC;
                const bool first = p0 == 0, last = p0 + kc == g->k;
                pack_b(g, b, j0, nc, p0, kc, s->b);
                /* A is read where it lies (the kernel loads one value of
                 * A per row and k, so a stride costs nothing): only a last
                 * micro-panel of fewer than MR rows is packed, zero-padded. */
                const int64_t whole_rows = mc / OWN_MR * OWN_MR;
                if (whole_rows < mc)
                    pack_a(g, a, i0 + whole_rows, mc - whole_rows, p0, kc, s->a);
                const int64_t row_step = g->trans_a ? 1 : g->lda, k_step = g->trans_a ? g->lda : 1;
                float *partial = s->acc;
                for (int64_t jr = 0; jr < nc; jr += OWN_NR)
                    for (int64_t ir = 0; ir < mc; ir += OWN_MR, partial += OWN_MR * OWN_NR) {
                        float sums[OWN_MR * OWN_NR];
                        if (ir < whole_rows)
                            micro_kernel(kc, a + (i0 + ir) * row_step + p0 * k_step, row_step, k_step,
                                         &s->b[jr * kc], first ? NULL : partial, last ? sums : partial);
                        else
                            micro_kernel(kc, s->a, 1, OWN_MR, &s->b[jr * kc], first ? NULL : partial,
                                         last ? sums : partial);
                        if (!last)
                            continue;
                        const int64_t rows = mc - ir < OWN_MR ? mc - ir : OWN_MR;
                        const int64_t cols = nc - jr < OWN_NR ? nc - jr : OWN_NR;
                        float *ct = &c[(i0 + ir) * g->ldc + j0 + jr];
                        if (rows == OWN_MR && cols == OWN_NR) {
                            write_whole_tile(g, sums, ct);
                            continue;
                        }
                        for (int64_t r = 0; r < rows; r++)
                            for (int64_t q = 0; q < cols; q++)
                                ct[r * g->ldc + q] = td_gemm_finish(g, sums[r * OWN_NR + q], &ct[r * g->ldc + q]);
                    }
            }
        }
    }
}

void td_cpu_gemm_own(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    if (g->m <= 0 || g->n <= 0)
        return;
    if (g->k <= 0) {
        /* No products: C = beta C, and beta == 0 does not read C. */
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++)
                c[i * g->ldc + j] = g->beta == 0.0f ? 0.0f : g->beta * c[i * g->ldc + j];
        return;
    }
    if (td_gemm_is_vector(g, VECTOR_MACS)) {
        gemm_vector(g, c, a, b);
        return;
    }
    own_scratch *s = thread_scratch();
    if (s)
        gemm_blocked(g, c, a, b, s);
    else
        gemm_unpacked(g, c, a, b);
}

void td_cpu_gemm_own_unpacked(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    if (g->k <= 0 || g->m <= 0 || g->n <= 0)
        td_cpu_gemm_own(g, c, a, b);
    else
        gemm_unpacked(g, c, a, b);
}
