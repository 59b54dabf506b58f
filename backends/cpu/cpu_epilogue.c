/* GEMM epilogues run block by block (cpu_epilogue.h).
 *
 * Why it pays: a bias add and a ReLU after a convolution's GEMM each
 * stream the whole output through memory (conv1 of the seed CNN: 12.8 MB,
 * about 0.4 ms a pass on one core); run on a block of rows of C just
 * computed, they read and write L2. The GEMM itself is cut into more calls
 * (blocks of about 128 KiB of C), each of which packs B again, so only
 * GEMMs whose B is no larger than a block take an epilogue (convolutions:
 * conv1's B is 9 x 32, conv2's 288 x 64; not the MLP's 784 x 512). What it
 * saves grows with C past the last-level cache: on this machine's 32 MiB
 * L3, conv1's bias + ReLU at batch 128 (12.8 MB, L3-resident) go from 0.29
 * to 0.23 ms, at batch 512 (51 MB) from 2.9 to 0.8 ms.
 *
 * Why the chain's rules: running calls block by block interleaves them, so
 * a call may see another's output for some rows before it runs for the
 * rest. That is harmless exactly when every access to what the chain
 * writes is to the same rows of C (row r of every chain output is then
 * read and written in the calls' order, as in the serial run) and nothing
 * else the chain or its GEMM reads is written by the chain. Operands are
 * therefore either dense over the call (element o at offset + o) and then
 * a chain output itself or disjoint from all of them, or a row broadcast
 * (offset + o mod n: a bias) or a scalar, disjoint from all of them.
 *
 * A pooling may end a chain when its input is a chain output, C's rows
 * being its pixels (c = n), and its windows tile the image exactly (stride
 * = window, no padding, h and w multiples of the window): a block of whole
 * bands of kh pixel rows is then a taller image of its own, whose windows
 * are the call's windows for those rows (a band never straddles two
 * images), and each pooled value is computed once, from finished pixels.
 * Blocks and parts then start at multiples of both 192 rows and a band.
 * A COL2IM may end a chain likewise (join_col2im), in blocks of whole
 * images. */
#include "cpu_epilogue.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"

/* Calls looked at after one GEMM: a bias, an activation, a pooling and a
 * spare. */
#define MAX_CHAIN 4
/* Floats of C per block: 128 KiB, an eighth of a Zen 4 or Skylake-SP L2. */
#define BLOCK_FLOATS 32768

typedef enum operand_kind { OPERAND_DENSE, OPERAND_ROW, OPERAND_SCALAR, OPERAND_OTHER } operand_kind;

/* How an operand's strides map the call's element index o (row-major over
 * dims): offset + o (dense), offset + o mod n (a row), offset (a scalar). */
static operand_kind kind_of(const int64_t dims[TD_KERNEL_RANK], const int64_t strides[TD_KERNEL_RANK], int64_t n)
{
    bool dense = true, row = true, scalar = true;
    int64_t inner = 1; /* elements inside axis k */
    for (int k = TD_KERNEL_RANK - 1; k >= 0; k--) {
        if (dims[k] == 1)
            continue;
        const int64_t s = strides[k];
        dense = dense && s == inner;
        scalar = scalar && s == 0;
        if (inner < n) /* inside a row: dense, and the row ends on an axis boundary */
            row = row && s == inner && inner * dims[k] <= n;
        else /* across rows: repeated */
            row = row && s == 0;
        inner *= dims[k];
    }
    return dense ? OPERAND_DENSE : row ? OPERAND_ROW : scalar ? OPERAND_SCALAR : OPERAND_OTHER;
}

typedef struct region {
    const td_buffer *buffer;
    uint64_t begin, end; /* elements */
} region;

static region region_of(const td_arg *a, uint64_t elements)
{
    return (region){a->buffer, a->offset, a->offset + elements};
}

static region matrix_region(const td_arg *a, int64_t rows, int64_t cols, int64_t ld)
{
    return region_of(a, rows > 0 && cols > 0 ? (uint64_t)((rows - 1) * ld + cols) : 0);
}

static bool same(region x, region y)
{
    return x.buffer == y.buffer && x.begin == y.begin && x.end == y.end;
}

static bool overlap(region x, region y)
{
    return x.buffer && x.buffer == y.buffer && x.begin < y.end && y.begin < x.end;
}

static bool overlaps_any(region x, const region *list, size_t count)
{
    for (size_t k = 0; k < count; k++)
        if (overlap(x, list[k]))
            return true;
    return false;
}

static bool same_as_any(region x, const region *list, size_t count)
{
    for (size_t k = 0; k < count; k++)
        if (same(x, list[k]))
            return true;
    return false;
}

/* What the chain so far writes (C, then each call's output) and what it or
 * its GEMM reads that it must never write. */
typedef struct chain {
    region written[2 + MAX_CHAIN]; /* C, or a pooling gradient's gx and x; one a call */
    size_t n_written;
    region read[2 + 2 * MAX_CHAIN]; /* a GEMM's A and B, or a pooling gradient's y and gy; two a call */
    size_t n_read;
} chain;

/* Whether elementwise call e over the m x n elements of C may join the
 * chain; if so, it is added. */
static bool join(chain *ch, const td_kernel_call *e, int64_t m, int64_t n)
{
    const td_ew_params *p = &e->p.ew;
    const int arity = td_ew_arity(p->op);
    if (arity != 1 && arity != 2)
        return false;
    int64_t elements = 1;
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        elements *= p->dims[k];
    if (elements != m * n)
        return false;
    const region out = region_of(&e->out, (uint64_t)elements);
    if (overlaps_any(out, ch->read, ch->n_read))
        return false;
    for (size_t k = 0; k < ch->n_written; k++)
        if (overlap(out, ch->written[k]) && !same(out, ch->written[k]))
            return false;
    region reads[2];
    size_t n_reads = 0;
    const td_arg *args[2] = {&e->a, &e->b};
    const int64_t *strides[2] = {p->a_strides, p->b_strides};
    for (int x = 0; x < arity; x++) {
        region r;
        switch (kind_of(p->dims, strides[x], n)) {
        case OPERAND_DENSE:
            r = region_of(args[x], (uint64_t)elements);
            /* A chain output (or the call's own, in place): the same rows. */
            if (same_as_any(r, ch->written, ch->n_written) || same(r, out))
                continue;
            break;
        case OPERAND_ROW: r = region_of(args[x], (uint64_t)n); break;
        case OPERAND_SCALAR: r = region_of(args[x], 1); break;
        default: return false;
        }
        if (overlaps_any(r, ch->written, ch->n_written) || overlap(r, out))
            return false;
        reads[n_reads++] = r;
    }
    if (!same_as_any(out, ch->written, ch->n_written))
        ch->written[ch->n_written++] = out;
    for (size_t k = 0; k < n_reads; k++)
        ch->read[ch->n_read++] = reads[k];
    return true;
}

/* Whether pooling call e may end the chain over the m x n elements of C
 * (see above); if so, its output is added to what the chain writes. */
static bool join_pool(chain *ch, const td_kernel_call *e, int64_t m, int64_t n)
{
    const td_pool_params *pp = &e->p.pool;
    const td_conv_params *g = &pp->geo;
    if (g->c != n || g->n * g->h * g->w != m || g->kh <= 0 || g->kw <= 0 || g->stride_h != g->kh ||
        g->stride_w != g->kw || g->pad_top != 0 || g->pad_left != 0 || g->dil_h != 1 || g->dil_w != 1 ||
        g->h % g->kh != 0 || g->w % g->kw != 0 || g->oh * g->kh != g->h || g->ow * g->kw != g->w)
        return false;
    if (pp->mode != TD_POOL_MAX && pp->mode != TD_POOL_AVG)
        return false;
    const region in = region_of(&e->a, (uint64_t)(m * n));
    const region out = region_of(&e->out, (uint64_t)(g->n * g->oh * g->ow * g->c));
    if (!same_as_any(in, ch->written, ch->n_written) || overlaps_any(out, ch->written, ch->n_written) ||
        overlaps_any(out, ch->read, ch->n_read))
        return false;
    ch->written[ch->n_written++] = out;
    return true;
}

/* Whether COL2IM call e may end the chain over the m x n elements of C: C
 * is its patches (a dense chain output, m = images x oh x ow windows of n =
 * kh x kw x c). COL2IM's sums run window by window in (oy, ox) order
 * within an image and no image reads another's windows, so a block of
 * whole images is the call's own work for those images, in the same
 * order: blocks and parts then start at multiples of an image's windows.
 * (conv2's input gradient: the GEMM's 29 MB of patch gradients are read
 * back while in L2, not from memory.) */
static bool join_col2im(chain *ch, const td_kernel_call *e, int64_t m, int64_t n)
{
    const td_conv_params *g = &e->p.conv;
    if (g->n <= 0 || g->oh <= 0 || g->ow <= 0 || g->n * g->oh * g->ow != m || g->kh * g->kw * g->c != n)
        return false;
    const region in = region_of(&e->a, (uint64_t)(m * n));
    const region out = region_of(&e->out, (uint64_t)(g->n * g->h * g->w * g->c));
    if (!same_as_any(in, ch->written, ch->n_written) || overlaps_any(out, ch->written, ch->n_written) ||
        overlaps_any(out, ch->read, ch->n_read))
        return false;
    ch->written[ch->n_written++] = out;
    return true;
}

size_t td_cpu_epilogue_length(const td_kernel_call *calls, size_t count, size_t i)
{
    const td_kernel_call *g = &calls[i];
    if (g->kernel != TD_KERNEL_GEMM)
        return 0;
    const td_gemm_params *p = &g->p.gemm;
    /* C dense (ldc = n), so that element o of an elementwise call over it
     * is row o / n. */
    if (p->m <= 0 || p->n <= 0 || p->k <= 0 || p->ldc != p->n)
        return 0;
    /* Each block packs B again: where B outweighs a block of C (an MLP
     * layer's 784 x 512 weights against 192 rows of 512) that costs more
     * than the passes over C save (measured: +0.1 ms on a 6.7 ms GEMM). */
    if (p->k * p->n > BLOCK_FLOATS)
        return 0;
    chain ch = {.n_written = 1, .n_read = 2};
    ch.written[0] = matrix_region(&g->out, p->m, p->n, p->ldc);
    ch.read[0] = matrix_region(&g->a, p->trans_a ? p->k : p->m, p->trans_a ? p->m : p->k, p->lda);
    ch.read[1] = matrix_region(&g->b, p->trans_b ? p->n : p->k, p->trans_b ? p->k : p->n, p->ldb);
    if (overlaps_any(ch.written[0], ch.read, 2))
        return 0;
    size_t length = 0;
    for (size_t j = i + 1; j < count && length < MAX_CHAIN; j++, length++) {
        if (calls[j].kernel == TD_KERNEL_POOL) { /* the chain's end, taken or not */
            length += join_pool(&ch, &calls[j], p->m, p->n);
            break;
        }
        if (calls[j].kernel == TD_KERNEL_COL2IM) { /* likewise */
            length += join_col2im(&ch, &calls[j], p->m, p->n);
            break;
        }
        if (calls[j].kernel != TD_KERNEL_ELEMENTWISE || !join(&ch, &calls[j], p->m, p->n))
            break;
    }
    return length;
}

size_t td_cpu_pool_backward_epilogue_length(const td_kernel_call *calls, size_t count, size_t i)
{
    const td_kernel_call *pb = &calls[i];
    if (pb->kernel != TD_KERNEL_POOL_BACKWARD)
        return 0;
    const td_conv_params *g = &pb->p.pool.geo;
    const int64_t pixels = g->n * g->h * g->w, pooled = g->n * g->oh * g->ow * g->c;
    if (g->n <= 0 || pixels <= 0 || g->c <= 0 || pooled <= 0)
        return 0;
    /* x counts as a chain output: the pooling reads it at the block's
     * images only, so a call may overwrite it pixel for pixel (ReLU's
     * gradient written over the activation, dead by then). y and gy have
     * the pooled shape: nothing of the chain may write them. */
    chain ch = {.n_written = 2, .n_read = 2};
    ch.written[0] = region_of(&pb->out, (uint64_t)(pixels * g->c));
    ch.written[1] = region_of(&pb->a, (uint64_t)(pixels * g->c));
    ch.read[0] = region_of(&pb->b, (uint64_t)pooled);
    ch.read[1] = region_of(&pb->c, (uint64_t)pooled);
    if (overlap(ch.written[0], ch.written[1]) || overlaps_any(ch.written[0], ch.read, 2) ||
        overlaps_any(ch.written[1], ch.read, 2))
        return 0;
    size_t length = 0;
    for (size_t j = i + 1; j < count && length < MAX_CHAIN; j++, length++)
        if (calls[j].kernel != TD_KERNEL_ELEMENTWISE || !join(&ch, &calls[j], pixels, g->c))
            break;
    return length;
}

int64_t td_cpu_pool_backward_block_images(const td_kernel_call *pool_backward)
{
    const td_conv_params *g = &pool_backward->p.pool.geo;
    const int64_t image = g->h * g->w * g->c, images = BLOCK_FLOATS / (image > 0 ? image : 1);
    return images > 1 ? images : 1;
}

/* What call e writes, for the prologue's check: C, an elementwise call's
 * elements, a pooling's or COL2IM's output. */
static region output_of(const td_kernel_call *e)
{
    switch (e->kernel) {
    case TD_KERNEL_GEMM: return matrix_region(&e->out, e->p.gemm.m, e->p.gemm.n, e->p.gemm.ldc);
    case TD_KERNEL_ELEMENTWISE: {
        int64_t elements = 1;
        for (int k = 0; k < TD_KERNEL_RANK; k++)
            elements *= e->p.ew.dims[k];
        return region_of(&e->out, (uint64_t)elements);
    }
    case TD_KERNEL_POOL: {
        const td_conv_params *g = &e->p.pool.geo;
        return region_of(&e->out, (uint64_t)(g->n * g->oh * g->ow * g->c));
    }
    case TD_KERNEL_COL2IM: {
        const td_conv_params *g = &e->p.conv;
        return region_of(&e->out, (uint64_t)(g->n * g->h * g->w * g->c));
    }
    default: return (region){e->out.buffer, 0, UINT64_MAX}; /* not in a chain: claim everything */
    }
}

bool td_cpu_prologue_im2col(const td_kernel_call *calls, size_t count, size_t i, size_t epilogue)
{
    if (i == 0 || i >= count || calls[i - 1].kernel != TD_KERNEL_IM2COL || calls[i].kernel != TD_KERNEL_GEMM)
        return false;
    const td_kernel_call *im = &calls[i - 1], *gemm = &calls[i];
    const td_conv_params *g = &im->p.conv;
    const td_gemm_params *p = &gemm->p.gemm;
    const int64_t patch = g->kh * g->kw * g->c;
    if (p->trans_a || p->m <= 0 || p->n <= 0 || p->k <= 0 || p->k != patch || p->lda != patch ||
        g->n <= 0 || g->n * g->oh * g->ow != p->m)
        return false;
    const region patches = region_of(&im->out, (uint64_t)(p->m * patch));
    const region image = region_of(&im->a, (uint64_t)(g->n * g->h * g->w * g->c));
    if (!same(patches, region_of(&gemm->a, (uint64_t)(p->m * patch))) || overlap(image, patches))
        return false;
    /* A block's IM2COL must read the image as the whole call did, and the
     * patches must end as the whole call left them: nothing the GEMM or
     * its epilogue writes may lie over either (the chain rules already keep
     * its outputs off A). */
    for (size_t e = i; e <= i + epilogue && e < count; e++) {
        const region out = output_of(&calls[e]);
        if (overlap(out, image) || overlap(out, patches))
            return false;
    }
    return true;
}

int64_t td_cpu_prologue_granule(const td_kernel_call *im2col, int64_t granule)
{
    const td_conv_params *g = &im2col->p.conv;
    const int64_t image = g->oh * g->ow; /* an image's patches: rows of C */
    int64_t a = granule, b = image;
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return granule / a * image;
}

void td_cpu_prologue_rows(const td_kernel_call *im2col, int64_t row0, int64_t rows, td_kernel_call *sub)
{
    *sub = *im2col;
    td_conv_params *g = &sub->p.conv;
    const int64_t image = g->oh * g->ow, first = row0 / image;
    g->n = rows / image;
    sub->out.offset += (uint64_t)(row0 * g->kh * g->kw * g->c);
    sub->a.offset += (uint64_t)(first * g->h * g->w * g->c);
}

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t td_cpu_epilogue_granule(const td_kernel_call *chain, size_t length, int64_t gemm_rows)
{
    int64_t granule = gemm_rows;
    if (length && chain[length].kernel == TD_KERNEL_POOL) {
        const td_conv_params *g = &chain[length].p.pool.geo;
        const int64_t band = g->kh * g->w; /* pixel rows of one row of windows */
        granule = granule / gcd(granule, band) * band;
    }
    if (length && chain[length].kernel == TD_KERNEL_COL2IM) {
        const td_conv_params *g = &chain[length].p.conv;
        const int64_t image = g->oh * g->ow; /* an image's windows: C's rows */
        granule = granule / gcd(granule, image) * image;
    }
    return granule;
}

void td_cpu_epilogue_part(const td_kernel_call *gemm, int64_t granule, int64_t parts, int64_t part,
                          td_kernel_call *sub)
{
    const td_gemm_params *g = &gemm->p.gemm;
    const int64_t whole = (g->m + granule - 1) / granule;
    const int64_t begin = granule * (part * whole / parts);
    const int64_t end = part + 1 == parts ? g->m : granule * ((part + 1) * whole / parts);
    *sub = *gemm;
    sub->p.gemm.m = end - begin;
    sub->out.offset += (uint64_t)(begin * g->ldc);
    sub->a.offset += (uint64_t)(g->trans_a ? begin : begin * g->lda);
}

bool td_cpu_epilogues_on(void)
{
    const char *s = getenv("TD_CPU_EPILOGUE");
    return !(s && strcmp(s, "off") == 0);
}

int64_t td_cpu_epilogue_block_rows(int64_t n, int64_t granule)
{
    const int64_t rows = BLOCK_FLOATS / (n > 0 ? n : 1) / granule * granule;
    return rows > granule ? rows : granule;
}

/* Operand x of the sub-call over rows [row0, row0 + rows): dense operands
 * move with the rows, a row or a scalar stays. */
static void operand_rows(td_arg *arg, int64_t strides[TD_KERNEL_RANK], operand_kind kind, int64_t n, int64_t row0)
{
    strides[0] = strides[1] = 0;
    strides[2] = kind == OPERAND_DENSE ? n : 0;
    strides[3] = kind == OPERAND_SCALAR ? 0 : 1;
    if (kind == OPERAND_DENSE)
        arg->offset += (uint64_t)(row0 * n);
}

void td_cpu_epilogue_rows(const td_kernel_call *e, int64_t n, int64_t row0, int64_t rows, td_kernel_call *sub)
{
    *sub = *e;
    if (e->kernel == TD_KERNEL_POOL) {
        /* Bands [row0, row0 + rows) of pixels as one image of rows / w
         * pixel rows; its pooled rows follow those before it. */
        td_conv_params *g = &sub->p.pool.geo;
        const int64_t pixel_row0 = row0 / g->w;
        g->n = 1;
        g->h = rows / g->w;
        g->oh = g->h / g->kh;
        sub->a.offset += (uint64_t)(row0 * n);
        sub->out.offset += (uint64_t)(pixel_row0 / g->kh * g->ow * g->c);
        return;
    }
    if (e->kernel == TD_KERNEL_COL2IM) {
        /* Rows [row0, row0 + rows): whole images' windows (row0 and rows
         * multiples of oh x ow, the last block ending at C's end). */
        td_conv_params *g = &sub->p.conv;
        const int64_t image = g->oh * g->ow, first = row0 / image;
        g->n = rows / image;
        sub->a.offset += (uint64_t)(row0 * n);
        sub->out.offset += (uint64_t)(first * g->h * g->w * g->c);
        return;
    }
    td_ew_params *p = &sub->p.ew;
    const operand_kind a = kind_of(e->p.ew.dims, e->p.ew.a_strides, n);
    const operand_kind b = kind_of(e->p.ew.dims, e->p.ew.b_strides, n);
    p->dims[0] = p->dims[1] = 1;
    p->dims[2] = rows;
    p->dims[3] = n;
    sub->out.offset += (uint64_t)(row0 * n);
    operand_rows(&sub->a, p->a_strides, a, n, row0);
    if (td_ew_arity(p->op) == 2)
        operand_rows(&sub->b, p->b_strides, b, n, row0);
}
