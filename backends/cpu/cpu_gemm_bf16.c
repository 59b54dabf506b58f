/* The bf16 GEMM of a simulated device (td_gemm_params.precision ==
 * TD_GEMM_BF16): every input rounded to bfloat16 (td_bf16_round), products
 * summed in float.
 *
 * Why bf16 pays on a CPU: AVX512_BF16's VDPBF16PS multiplies 32 pairs of
 * bfloat16 and adds each lane's two products into 16 float sums, twice the
 * multiply-adds of one 16-lane float FMA, from half the bytes of A and B.
 * The product of two bfloat16 values is exact in float (8-bit significands
 * make at most 16 bits), so the only rounding is the sums'.
 *
 * The native kernel has the own GEMM's shape (cpu_gemm_own.c: packed panels
 * of B, a micro-kernel keeping a block of C in registers), with pairs of k
 * where the float kernel has single values: B is packed in panels of NR
 * columns whose 32-bit lanes hold (b[2q][j], b[2q+1][j]), A as pairs
 * (a[i][2q], a[i][2q+1]) that the kernel broadcasts, one per row and pair,
 * and each VDPBF16PS adds one pair of products into each of NR / 16 vectors
 * of sums. A zero pads an odd k's last pair and the rows and columns past
 * the edge, which only ever meet other padding or outputs that are not
 * written.
 *
 * Why the bits do not depend on the split: an output's sum is the chain of
 * VDPBF16PS steps over its pairs q = 0, 1, ... in order, k-blocks (KC, even)
 * only storing the sums and loading them back, and no step depends on where
 * the output sits in a block: any tile or host-pool part of the rows of C
 * (cpu_gemm.c, cpu_split.c) gives the bits of one call, on one machine.
 * The instruction's own order of a lane's two products, and its flushing of
 * subnormal inputs and results to zero, are the CPU's: the contract
 * (td_kernel.h) leaves them free, like an fp32 GEMM's order, and
 * deterministic mode takes the portable kernel instead.
 *
 * The portable kernel (CPUs without AVX512_BF16, deterministic mode,
 * TD_CPU_BF16=portable): rounded float copies of op(A) and op(B), blocks at
 * a time, through the own GEMM, whose rule (each sum over k in order, each
 * operation rounded apart) then holds on the rounded values on every
 * machine. Rounding while packing costs about as much as the own GEMM's
 * packing, so where there is no bf16 hardware a bf16 run is as fast as
 * the own fp32 GEMM, not faster: it exists to give the same answers.
 *
 * Memory: each thread's panels are allocated on its first bf16 GEMM and
 * freed when it exits (td_thread_slot), as the own GEMM's are; a step in
 * steady state allocates nothing. Where that allocation fails, the native
 * kernel runs on small panels on the stack (the same sums, more packing),
 * the portable one unpacked (the same sums, slower). */
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "cpu_gemm_bf16.h"
#include "cpu_gemm_own.h"
#include "cpu_gemm_rule.h"
#include "cpu_thread_scratch.h"
#include "td_platform.h"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define TD_BF16_NATIVE 1
#include <immintrin.h>
#define TD_BF16_TARGET __attribute__((target("avx512bf16,avx512bw,avx512vl,avx512f")))
#else
#define TD_BF16_NATIVE 0
#endif

void td_cpu_gemm_bf16_unpacked(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < g->k; p++)
                acc = acc + td_bf16_round(td_gemm_op_a(g, a, i, p)) * td_bf16_round(td_gemm_op_b(g, b, p, j));
            float *cij = &c[i * g->ldc + j];
            *cij = td_gemm_finish(g, acc, cij);
        }
}

/* ---- the portable kernel ---- */

/* Rounded copies: op(B) for up to PORT_B / k columns, op(A) for up to
 * PORT_A / k rows (at least one of each): 10 MB at most a thread. Smaller
 * blocks were measured 20x slower on a convolution's kernel gradient
 * (9 x 32 outputs summed over k = 100352): the own GEMM then runs on
 * slivers of 2 rows and 10 columns. */
enum { PORT_B = 1 << 21, PORT_A = 1 << 19 };

/* This thread's copy space of at least `floats` (cpu_thread_scratch.h);
 * NULL when it cannot grow. */
static float *portable_space(size_t floats)
{
    return td_cpu_thread_scratch(TD_SCRATCH_BF16_PORTABLE, floats * sizeof(float));
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void gemm_portable(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    const int64_t nc_max = clamp(PORT_B / g->k, 1, g->n), mc_max = clamp(PORT_A / g->k, 1, g->m);
    float *bcopy = portable_space((size_t)(g->k * nc_max + mc_max * g->k));
    if (!bcopy) {
        td_cpu_gemm_bf16_unpacked(g, c, a, b);
        return;
    }
    float *acopy = bcopy + g->k * nc_max;
    for (int64_t j0 = 0; j0 < g->n; j0 += nc_max) {
        const int64_t nc = g->n - j0 < nc_max ? g->n - j0 : nc_max;
        for (int64_t p = 0; p < g->k; p++)
            for (int64_t j = 0; j < nc; j++)
                bcopy[p * nc + j] = td_bf16_round(td_gemm_op_b(g, b, p, j0 + j));
        for (int64_t i0 = 0; i0 < g->m; i0 += mc_max) {
            const int64_t mc = g->m - i0 < mc_max ? g->m - i0 : mc_max;
            for (int64_t i = 0; i < mc; i++)
                for (int64_t p = 0; p < g->k; p++)
                    acopy[i * g->k + p] = td_bf16_round(td_gemm_op_a(g, a, i0 + i, p));
            /* The own GEMM's sums do not depend on the split of m or n. */
            const td_gemm_params h = {.m = mc, .n = nc, .k = g->k, .lda = g->k, .ldb = nc, .ldc = g->ldc,
                                      .alpha = g->alpha, .beta = g->beta};
            td_cpu_gemm_own(&h, c + i0 * g->ldc + j0, acopy, bcopy);
        }
    }
}

/* ---- the native kernel (AVX512_BF16) ---- */

#if TD_BF16_NATIVE

/* MR x NR sums are 24 of AVX-512's 32 registers (12 rows x 2 vectors),
 * leaving two for the B pair-vectors; MC (192) is the tiles' and parts'
 * row granule, so a part packs its rows of A once; KC pairs' panel of B
 * (KC/2 x NR x 4 bytes, 24 KiB) stays in L1 while the kernel walks it. */
enum {
    BF_MR = 12,
    BF_NR = 32,
    BF_KC = 384, /* values of k per block; even, so pairs never straddle blocks */
    BF_MC = 192,
    BF_NC = 256,
};

/* The upper half of x's bits after rounding: its bfloat16 encoding. */
static inline uint16_t bf16_bits(float x)
{
    float r = td_bf16_round(x);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}

typedef struct bf16_blocks {
    int64_t mc_max, nc_max;
    uint16_t *a;     /* mc_max x BF_KC */
    uint16_t *b;     /* b_cap values: one k-block of nc_max columns, or all of them */
    int64_t b_cap;
    float *acc;      /* mc_max x nc_max partial sums between k-blocks */
} bf16_blocks;

/* B's panels for every k-block of NC columns when they fit (k up to 4096),
 * packed once for all the blocks of rows: packing a k-block again for each
 * MC rows cost more than its products at n = k = 512 (measured 206 against
 * 400 GFLOP/s). */
enum { BF_B_CAP = BF_NC * 4096 };

typedef struct native_scratch {
    uint16_t a[BF_MC * BF_KC];
    uint16_t b[BF_B_CAP];
    float acc[BF_MC * BF_NC];
} native_scratch;

/* td_bf16_round's bits of 16 floats, as 16 bfloat16 (the rule of
 * td_kernel.h on 32-bit lanes: NaN quietened, others rounded to nearest
 * even by adding 0x7fff plus the lowest kept bit). */
TD_BF16_TARGET
static inline __m512i round16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i up = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    return _mm512_mask_blend_epi32(nan, up, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
}

/* d[e] = bfloat16 of src[e], e < n. */
TD_BF16_TARGET
static void round_row(uint16_t *d, const float *src, int64_t n)
{
    int64_t e = 0;
    for (; e + 16 <= n; e += 16)
        _mm256_storeu_si256((__m256i *)(d + e), _mm512_cvtepi32_epi16(_mm512_srli_epi32(round16(_mm512_loadu_ps(src + e)), 16)));
    if (e < n) {
        const __mmask16 m = (__mmask16)((1u << (n - e)) - 1u);
        const __m512i r = round16(_mm512_maskz_loadu_ps(m, src + e));
        _mm256_mask_storeu_epi16(d + e, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
}

/* d[2i], d[2i+1] = bfloat16 of lo[i], hi[i] (hi NULL: 0), i < n: two rows
 * of k interleaved into pairs. */
TD_BF16_TARGET
static void pair_rows(uint16_t *d, const float *lo, const float *hi, int64_t n)
{
    const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    int64_t i = 0;
    /* Whole vectors unmasked: masked stores are slow on some cores (Zen 4:
     * measured 1.4x slower on a kernel gradient's packing of A). */
    for (; i + 16 <= n; i += 16) {
        const __m512i l = _mm512_srli_epi32(round16(_mm512_loadu_ps(lo + i)), 16);
        const __m512i h = hi ? _mm512_and_si512(round16(_mm512_loadu_ps(hi + i)), top) : _mm512_setzero_si512();
        _mm512_storeu_si512(d + 2 * i, _mm512_or_si512(l, h));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512i l = _mm512_srli_epi32(round16(_mm512_maskz_loadu_ps(m, lo + i)), 16);
        const __m512i h = hi ? _mm512_and_si512(round16(_mm512_maskz_loadu_ps(m, hi + i)), top) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(d + 2 * i, m, _mm512_or_si512(l, h));
    }
}

/* Rows [i0, i0+mc) and k-range [p0, p0+kc) of op(A) as bfloat16 pairs,
 * rows past mc (up to a multiple of MR) zero. Untransposed A keeps its
 * rows (a row's pairs are its consecutive values); transposed A is stored
 * pair by pair, the rows of a pair side by side, so both read A along its
 * memory. Sets the steps, in uint16 units, from one row and one pair to
 * the next. */
TD_BF16_TARGET
static void pack_a(const td_gemm_params *g, const float *a, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   uint16_t *restrict dst, int64_t *row_step, int64_t *pair_step)
{
    const int64_t kcp = (kc + 1) / 2, mcpad = (mc + BF_MR - 1) / BF_MR * BF_MR;
    if (!g->trans_a) {
        *row_step = 2 * kcp;
        *pair_step = 2;
        for (int64_t r = 0; r < mcpad; r++) {
            uint16_t *restrict d = dst + r * 2 * kcp;
            if (r >= mc) {
                memset(d, 0, (size_t)(2 * kcp) * sizeof *d);
                continue;
            }
            round_row(d, a + (i0 + r) * g->lda + p0, kc);
            if (kc & 1)
                d[kc] = 0;
        }
        return;
    }
    *row_step = 2;
    *pair_step = 2 * mcpad;
    for (int64_t q = 0; q < kcp; q++) {
        uint16_t *restrict d = dst + q * 2 * mcpad;
        /* Plain C, which GCC vectorises: measured 15% faster here than
         * pair_rows on a convolution's kernel gradient (288 rows). */
        const float *restrict lo = a + (p0 + 2 * q) * g->lda + i0;
        if (2 * q + 1 < kc) {
            const float *restrict hi = lo + g->lda;
            for (int64_t i = 0; i < mc; i++) {
                d[2 * i] = bf16_bits(lo[i]);
                d[2 * i + 1] = bf16_bits(hi[i]);
            }
        } else {
            for (int64_t i = 0; i < mc; i++) {
                d[2 * i] = bf16_bits(lo[i]);
                d[2 * i + 1] = 0;
            }
        }
        memset(d + 2 * mc, 0, (size_t)(2 * (mcpad - mc)) * sizeof *d);
    }
}

/* Columns [j0, j0+nc) and k-range [p0, p0+kc) of op(B) as panels of NR
 * columns, each pair q a row of NR lanes (b[2q][j], b[2q+1][j]); columns
 * past nc and an odd k's last value zero. */
TD_BF16_TARGET
static void pack_b(const td_gemm_params *g, const float *b, int64_t j0, int64_t nc, int64_t p0, int64_t kc,
                   uint16_t *restrict dst)
{
    const int64_t kcp = (kc + 1) / 2;
    for (int64_t jr = 0; jr < nc; jr += BF_NR) {
        const int64_t cols = nc - jr < BF_NR ? nc - jr : BF_NR;
        uint16_t *restrict panel = dst + jr * 2 * kcp;
        if (cols < BF_NR || g->trans_b)
            memset(panel, 0, (size_t)(kcp * 2 * BF_NR) * sizeof *panel);
        if (!g->trans_b) {
            /* Columns past `cols` stay the memset's zeros. */
            for (int64_t q = 0; q < kcp; q++) {
                const float *lo = b + (p0 + 2 * q) * g->ldb + j0 + jr;
                pair_rows(panel + q * 2 * BF_NR, lo, 2 * q + 1 < kc ? lo + g->ldb : NULL, cols);
            }
        } else {
            /* op(B)[p][j] = B[j][p]: column j's values are one row of B. */
            for (int64_t j = 0; j < cols; j++) {
                const float *restrict src = b + (j0 + jr + j) * g->ldb + p0;
                for (int64_t p = 0; p < kc; p++)
                    panel[(p >> 1) * 2 * BF_NR + 2 * j + (p & 1)] = bf16_bits(src[p]);
            }
        }
    }
}

/* MR x NR sums over kcp pairs: starting from `from` (MR x NR row-major;
 * NULL: from 0), each VDPBF16PS adds one pair of products per lane, pairs
 * in order; the sums go to `to`, or, when `c` is given (a whole tile after
 * the last k-block), straight into C scaled as the fp32 GEMM does (alpha
 * times the sum, plus beta times C, rounded apart). ap points at the
 * micro-panel's first row (row_step, pair_step in uint16 units), bp at its
 * panel of B. */
TD_BF16_TARGET
static void kernel_native(int64_t kcp, const uint16_t *ap, int64_t row_step, int64_t pair_step, const uint16_t *bp,
                          const float *from, float *to, const td_gemm_params *g, float *c)
{
    __m512 lo[BF_MR], hi[BF_MR];
#pragma GCC unroll 12
    for (int r = 0; r < BF_MR; r++) {
        lo[r] = from ? _mm512_loadu_ps(from + r * BF_NR) : _mm512_setzero_ps();
        hi[r] = from ? _mm512_loadu_ps(from + r * BF_NR + 16) : _mm512_setzero_ps();
    }
    for (int64_t q = 0; q < kcp; q++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 32);
#pragma GCC unroll 12
        for (int r = 0; r < BF_MR; r++) {
            uint32_t pair;
            memcpy(&pair, ap + r * row_step, sizeof pair);
            const __m512bh x = (__m512bh)_mm512_set1_epi32((int)pair);
            lo[r] = _mm512_dpbf16_ps(lo[r], x, b0);
            hi[r] = _mm512_dpbf16_ps(hi[r], x, b1);
        }
        ap += pair_step;
        bp += 2 * BF_NR;
    }
    if (c) {
        const __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
        const bool read_c = g->beta != 0.0f;
#pragma GCC unroll 12
        for (int r = 0; r < BF_MR; r++) {
            float *cr = c + r * g->ldc;
            __m512 x = _mm512_mul_ps(alpha, lo[r]), y = _mm512_mul_ps(alpha, hi[r]);
            if (read_c) {
                x = _mm512_add_ps(x, _mm512_mul_ps(beta, _mm512_loadu_ps(cr)));
                y = _mm512_add_ps(y, _mm512_mul_ps(beta, _mm512_loadu_ps(cr + 16)));
            }
            _mm512_storeu_ps(cr, x);
            _mm512_storeu_ps(cr + 16, y);
        }
        return;
    }
#pragma GCC unroll 12
    for (int r = 0; r < BF_MR; r++) {
        _mm512_storeu_ps(to + r * BF_NR, lo[r]);
        _mm512_storeu_ps(to + r * BF_NR + 16, hi[r]);
    }
}

/* The blocked loops: NC columns, MC rows, KC of k, then NR x MR tiles.
 * When every k-block of B's NC columns fits in the scratch, each is packed
 * once, with the first block of rows, and serves the others. */
TD_BF16_TARGET
static void gemm_native(const td_gemm_params *g, float *c, const float *a, const float *b, const bf16_blocks *s)
{
    const int64_t k_blocks = (g->k + BF_KC - 1) / BF_KC;
    for (int64_t j0 = 0; j0 < g->n; j0 += s->nc_max) {
        const int64_t nc = g->n - j0 < s->nc_max ? g->n - j0 : s->nc_max;
        const int64_t ncpad = (nc + BF_NR - 1) / BF_NR * BF_NR;
        const bool b_whole = k_blocks * BF_KC * ncpad <= s->b_cap;
        for (int64_t i0 = 0; i0 < g->m; i0 += s->mc_max) {
            const int64_t mc = g->m - i0 < s->mc_max ? g->m - i0 : s->mc_max;
            for (int64_t p0 = 0; p0 < g->k; p0 += BF_KC) {
                const int64_t kc = g->k - p0 < BF_KC ? g->k - p0 : BF_KC, kcp = (kc + 1) / 2;
                const bool first = p0 == 0, last = p0 + kc == g->k;
                uint16_t *bblock = b_whole ? s->b + p0 / BF_KC * BF_KC * ncpad : s->b;
                if (!b_whole || i0 == 0)
                    pack_b(g, b, j0, nc, p0, kc, bblock);
                int64_t row_step, pair_step;
                pack_a(g, a, i0, mc, p0, kc, s->a, &row_step, &pair_step);
                float *partial = s->acc;
                for (int64_t jr = 0; jr < nc; jr += BF_NR)
                    for (int64_t ir = 0; ir < mc; ir += BF_MR, partial += BF_MR * BF_NR) {
                        float sums[BF_MR * BF_NR];
                        const int64_t rows = mc - ir < BF_MR ? mc - ir : BF_MR;
                        const int64_t cols = nc - jr < BF_NR ? nc - jr : BF_NR;
                        float *ct = &c[(i0 + ir) * g->ldc + j0 + jr];
                        const bool direct = last && rows == BF_MR && cols == BF_NR;
                        kernel_native(kcp, s->a + ir * row_step, row_step, pair_step, bblock + jr * 2 * kcp,
                                      first ? NULL : partial, last ? sums : partial, g, direct ? ct : NULL);
                        if (!last || direct)
                            continue;
                        for (int64_t r = 0; r < rows; r++)
                            for (int64_t q = 0; q < cols; q++)
                                ct[r * g->ldc + q] = td_gemm_finish(g, sums[r * BF_NR + q], &ct[r * g->ldc + q]);
                    }
            }
        }
    }
}

static native_scratch *native_space(void)
{
    return td_cpu_thread_scratch(TD_SCRATCH_BF16_NATIVE, sizeof(native_scratch));
}

/* One tile of rows on the thread's panels, or on one micro-tile's worth on
 * the stack (about 36 KiB) when they cannot be allocated: the blocks of m
 * and n change no sum, so the bits are the same. */
static void run_native(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    native_scratch *s = native_space();
    if (s) {
        const bf16_blocks blocks = {BF_MC, BF_NC, s->a, s->b, BF_B_CAP, s->acc};
        gemm_native(g, c, a, b, &blocks);
        return;
    }
    uint16_t sa[BF_MR * BF_KC], sb[BF_NR * BF_KC];
    float sacc[BF_MR * BF_NR];
    const bf16_blocks small = {BF_MR, BF_NR, sa, sb, BF_NR * BF_KC, sacc};
    gemm_native(g, c, a, b, &small);
}

static bool native_wanted;
static td_once native_once = TD_ONCE_INITIALIZER;

static void decide_native(void)
{
    /* TD_CPU_BF16=portable: the portable kernel everywhere (benchmarks,
     * tests of the fallback on a machine with the instructions). */
    const char *env = getenv("TD_CPU_BF16");
    __builtin_cpu_init();
    native_wanted = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                    !(env && strcmp(env, "portable") == 0);
}

bool td_cpu_gemm_bf16_native(void)
{
    td_once_run(&native_once, decide_native);
    return native_wanted;
}

#else

bool td_cpu_gemm_bf16_native(void)
{
    return false;
}

#endif

static void portable_tile(const void *user, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    (void)user;
    gemm_portable(g, c, a, b);
}

#if TD_BF16_NATIVE
static void native_tile(const void *user, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    (void)user;
    run_native(g, c, a, b);
}
#endif

bool td_cpu_gemm_bf16(const td_gemm_params *g, float *c, const float *a, const float *b, td_cpu_bf16_kernel kernel,
                      const bool *cancel)
{
    /* Tiles of rows as the fp32 GEMM's (the same frame), so a cancel stops
     * within one. */
#if TD_BF16_NATIVE
    if (kernel == TD_CPU_BF16_FASTEST && td_cpu_gemm_bf16_native())
        return td_cpu_gemm_in_tiles(g, c, a, b, native_tile, NULL, cancel);
#else
    (void)kernel;
#endif
    return td_cpu_gemm_in_tiles(g, c, a, b, portable_tile, NULL, cancel);
}
