/* GEMM on a simulated device: CBLAS or tandem's own (cpu_gemm_own.c, or
 * cpu_gemm_own_fma.c with fused multiply-adds), one tile of rows of C at a
 * time. The own GEMMs' bits do not depend on any split of C at all; what
 * follows is about CBLAS.
 *
 * Why tiles: a GEMM's time grows as m n k while its memory grows as
 * m k + k n + m n, so one call can run for seconds on modest buffers, and
 * a thread inside OpenBLAS cannot be stopped. A device fenced off after a
 * timeout, or whose mesh is going away, must leave OpenBLAS promptly: the
 * engine joins its worker before td_context_destroy returns, and OpenBLAS's
 * own exit handler unmaps the buffers a thread still inside it would use.
 * Between tiles the worker reads its device's cancel flag.
 *
 * Why the results do not change: a tile is a block of whole rows of C
 * computed with the full k, so every element is still one dot product over
 * k, blocked into k-panels that depend on k alone. Only where a row falls
 * in OpenBLAS's register blocking could change its bits -- a kernel's
 * unrolled body and its tail may add in different orders -- so tiles start
 * at multiples of 192 rows, 3 x 64, a multiple of the usual unrolls
 * (powers of two, 12, 24, 48; Haswell's sgemm kernel works on groups of 12
 * of these rows, and 64-row tiles change bits there), and the last tile
 * takes the remainder, so the call's own tail stays its tail. Pointers
 * then move by multiples of 768 bytes, keeping every alignment OpenBLAS
 * checks. Columns are never split: the last columns of any call take
 * another path in OpenBLAS's kernels (bits change at every column split
 * tried, 192-wide tiles included). tests/engine/test_cpu_cancel.c
 * compares tiled and single calls bitwise.
 *
 * Why this size: every tile packs B again; measured, 192-row tiles stay
 * within the noise (a few percent at most) of one call for B from 512 x 784
 * to 4096 x 4096. A tile of 2^27 multiply-adds takes about 2 ms on one
 * current core (115 GFLOP/s single-threaded); small and medium GEMMs (an
 * MLP layer on a batch of hundreds) stay one call. A cancel waits for the tile running: up to twice the budget (the
 * last tile takes the remainder), or 192 n k multiply-adds when 192 rows
 * cost more than the budget (48 per byte of B: 50 ms for a 4096 x 4096 B
 * here). */
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "cpu_gemm_own.h"
#include "cpu_gemm_own_fma.h"
#include "cpu_split.h"
#include "td_platform.h"

#ifdef TD_HAVE_CBLAS
#include <cblas.h>

/* OpenBLAS only; weak, so BLIS or the reference CBLAS link without it. */
extern int openblas_get_parallel(void) __attribute__((weak));

/* A serial OpenBLAS built without USE_LOCKING (Debian's serial flavour) is
 * not safe to call from several threads at once. scripts/install-deps pins
 * the pthread flavour; if another is loaded anyway, GEMM calls are
 * serialised rather than left to race. This lock guards a process-wide
 * library, so it is process-wide itself. */
static td_mutex serial_blas_lock = TD_MUTEX_INITIALIZER;
static int blas_needs_lock(void)
{
    return openblas_get_parallel && openblas_get_parallel() == 0;
}

/* One tile through CBLAS (a td_cpu_gemm_tile_fn; *user: whether to take
 * the lock). Plain int arguments: every CBLAS header's prototypes take int
 * (OpenBLAS's blasint, BLIS's f77_int), and the conversion is implicit for
 * the 64-bit-integer builds. */
static void cblas_tile(const void *user, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    const bool lock = *(const bool *)user;
    if (lock)
        td_mutex_lock(&serial_blas_lock);
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                (int)g->m, (int)g->n, (int)g->k, g->alpha, a, (int)g->lda, b, (int)g->ldb, g->beta, c, (int)g->ldc);
    if (lock)
        td_mutex_unlock(&serial_blas_lock);
}
#endif

td_cpu_gemm_engine td_cpu_gemm_engine_chosen(void)
{
    const char *s = getenv("TD_CPU_GEMM");
    if (s && strcmp(s, "own") == 0)
        return TD_CPU_GEMM_OWN;
    if (s && strcmp(s, "own-fma") == 0)
        return TD_CPU_GEMM_OWN_FMA;
#ifdef TD_HAVE_CBLAS
    if (s && strcmp(s, "cblas") == 0)
        return TD_CPU_GEMM_CBLAS;
#endif
    /* The FMA paths only where the CPU has the instructions: the portable
     * path's single-rounding a*b+c is a slow software sequence. */
    if (td_cpu_gemm_own_fma_best_isa() != TD_GEMM_FMA_PORTABLE)
        return TD_CPU_GEMM_OWN_FMA;
#ifdef TD_HAVE_CBLAS
    return TD_CPU_GEMM_CBLAS;
#else
    return TD_CPU_GEMM_OWN;
#endif
}

const char *td_cpu_gemm_engine_name(td_cpu_gemm_engine engine)
{
    switch (engine) {
    case TD_CPU_GEMM_CBLAS:
        return "cblas";
    case TD_CPU_GEMM_OWN:
        return "own";
    default:
        return "own-fma";
    }
}

/* The own GEMMs' part granule (MR is 12 or 6) and the least work worth a
 * part (cpu_split.c's for GEMMs: about 20 us on one current core). */
#define OWN_PART_ROWS 12
#define OWN_PART_MIN_MACS 1048576.0
int64_t td_cpu_gemm_part_rows(td_cpu_gemm_engine engine)
{
    return engine == TD_CPU_GEMM_CBLAS ? TD_CPU_GEMM_TILE_ROWS : OWN_PART_ROWS;
}

/* Column parts: whole 32-column panels, the AVX-512 micro-tile's width.
 * Narrower parts cost nearly as much as the whole call: the 12 x 16
 * kernel broadcasts as many values of A per step of k for half the
 * multiply-adds (measured, conv1's kernel gradient 9 x 32 x 100352: 600 us
 * whole, 500 us for one 16-column half alone, 1000 us for both halves on
 * two cores at once; 9 x 64 x 8192: 119 us whole, 67 us as two 32-column
 * halves on two cores). */
#define OWN_PART_COLUMNS 32

/* Whether a call's bits depend on no split of C's columns: the own GEMMs'
 * and the bf16 kernels' rule computes each element as its own sum over k
 * in order, whatever its place in a block (cpu_gemm_own.c,
 * cpu_gemm_own_fma.c, cpu_gemm_bf16.c); CBLAS's last columns take another
 * path (see the top of this file). */
static bool columns_split(const td_gemm_params *g, td_cpu_gemm_engine engine)
{
    return g->precision == TD_GEMM_BF16 || engine != TD_CPU_GEMM_CBLAS;
}

/* Whether `parts` parts of c cut its columns: only where its rows give
 * fewer parts than that (a convolution's kernel gradient: 9 or 288 rows of
 * C against k = the batch's pixels), so the rule is a function of the call
 * and the part count alone, as td_cpu_gemm_split_part needs. */
static bool parts_cut_columns(const td_gemm_params *g, td_cpu_gemm_engine engine, int64_t parts)
{
    return columns_split(g, engine) && (g->m + OWN_PART_ROWS - 1) / OWN_PART_ROWS < parts;
}

int64_t td_cpu_gemm_split_parts(const td_kernel_call *c, td_cpu_gemm_engine engine, uint32_t team, bool any_size)
{
    const td_gemm_params *g = &c->p.gemm;
    if (!columns_split(g, engine))
        return td_cpu_split_parts(c, team, any_size);
    if (team <= 1 || g->k <= 0 || g->m <= 0 || g->n <= 0)
        return 1;
    int64_t parts = (g->m + OWN_PART_ROWS - 1) / OWN_PART_ROWS;
    const int64_t by_columns = (g->n + OWN_PART_COLUMNS - 1) / OWN_PART_COLUMNS;
    if (parts < (int64_t)team && by_columns > parts)
        parts = by_columns;
    if (parts > (int64_t)team)
        parts = team;
    const double work = (double)g->m * (double)g->n * (double)g->k;
    if (!any_size && (double)parts * OWN_PART_MIN_MACS > work)
        parts = (int64_t)(work / OWN_PART_MIN_MACS);
    return parts < 1 ? 1 : parts;
}

void td_cpu_gemm_split_part(const td_kernel_call *c, td_cpu_gemm_engine engine, int64_t parts, int64_t part,
                            td_kernel_call *sub)
{
    const td_gemm_params *g = &c->p.gemm;
    if (!columns_split(g, engine)) {
        td_cpu_split_part(c, parts, part, sub);
        return;
    }
    *sub = *c;
    if (parts_cut_columns(g, engine, parts)) {
        /* Columns j of C and of op(B): B's columns, or its rows when
         * stored transposed. */
        const int64_t vectors = (g->n + OWN_PART_COLUMNS - 1) / OWN_PART_COLUMNS;
        const int64_t begin = OWN_PART_COLUMNS * (part * vectors / parts);
        const int64_t end = part + 1 == parts ? g->n : OWN_PART_COLUMNS * ((part + 1) * vectors / parts);
        sub->out.offset += (uint64_t)begin;
        sub->b.offset += (uint64_t)(g->trans_b ? begin * g->ldb : begin);
        sub->p.gemm.n = end - begin;
        return;
    }
    const int64_t panels = (g->m + OWN_PART_ROWS - 1) / OWN_PART_ROWS;
    const int64_t begin = OWN_PART_ROWS * (part * panels / parts);
    const int64_t end = part + 1 == parts ? g->m : OWN_PART_ROWS * ((part + 1) * panels / parts);
    sub->out.offset += (uint64_t)(begin * g->ldc);
    sub->a.offset += (uint64_t)(g->trans_a ? begin : begin * g->lda);
    sub->p.gemm.m = end - begin;
}

int64_t td_cpu_gemm_tile_rows(const td_gemm_params *g)
{
    const double row = (double)g->n * (double)g->k, budget = (double)TD_CPU_GEMM_TILE_MACS;
    if (g->k <= 0 || (double)g->m * row <= budget)
        return g->m;
    const double rows = budget / row;
    return rows < 2.0 * TD_CPU_GEMM_TILE_ROWS ? TD_CPU_GEMM_TILE_ROWS
                                              : (int64_t)(rows / TD_CPU_GEMM_TILE_ROWS) * TD_CPU_GEMM_TILE_ROWS;
}

bool td_cpu_gemm_in_tiles(const td_gemm_params *g, float *c, const float *a, const float *b,
                          td_cpu_gemm_tile_fn tile_fn, const void *user, const bool *cancel)
{
    if (g->m <= 0 || g->n <= 0)
        return true;
    if (g->k <= 0) {
        /* No products: C = beta C, and beta == 0 does not read C. */
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++)
                c[i * g->ldc + j] = g->beta == 0.0f ? 0.0f : g->beta * c[i * g->ldc + j];
        return true;
    }
    const int64_t tile = td_cpu_gemm_tile_rows(g);
    int64_t rows;
    for (int64_t i = 0; i < g->m; i += rows) {
        /* The last tile takes the remainder: no tile is smaller than one,
         * and the call's tail rows stay together. */
        rows = g->m - i < 2 * tile ? g->m - i : tile;
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
            return false;
        /* Row i of op(A): row i of A, or column i of A stored transposed. */
        td_gemm_params tile_g = *g;
        tile_g.m = rows;
        tile_fn(user, &tile_g, c + i * g->ldc, g->trans_a ? a + i : a + i * g->lda, b);
    }
    return true;
}

static void own_tile(const void *user, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    (void)user;
    td_cpu_gemm_own(g, c, a, b);
}

static void own_fma_tile(const void *user, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    (void)user;
    td_cpu_gemm_own_fma(g, c, a, b);
}

bool td_cpu_gemm(const td_gemm_params *g, float *c, const float *a, const float *b, td_cpu_gemm_engine engine,
                 const bool *cancel)
{
#ifdef TD_HAVE_CBLAS
    if (engine == TD_CPU_GEMM_CBLAS) {
        if (g->beta == 0.0f && g->k > 0 && g->n > 0)
            /* CBLAS may compute 0 * C, which turns a NaN left in C into NaN. */
            for (int64_t m = 0; m < g->m; m++)
                memset(c + m * g->ldc, 0, (size_t)g->n * sizeof(float));
        const bool lock = blas_needs_lock();
        return td_cpu_gemm_in_tiles(g, c, a, b, cblas_tile, &lock, cancel);
    }
#endif
    /* Built without CBLAS, a call asked to run it runs the own GEMM. */
    return td_cpu_gemm_in_tiles(g, c, a, b, engine == TD_CPU_GEMM_OWN_FMA ? own_fma_tile : own_tile, NULL, cancel);
}
