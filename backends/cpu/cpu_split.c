/* Splitting a kernel call into parts over its outer units (cpu_split.h).
 *
 * Why these granules: GEMM parts are whole tiles of 192 rows of C, the
 * rule under which a tile is bitwise the single CBLAS call (cpu_gemm.c);
 * a causal softmax keeps its blocks of `cols` rows whole, since a row's
 * query position is its index mod cols; element ranges start at multiples
 * of 64 so that a part's vector body and tail line up with the whole
 * call's. Everything else is split at any unit: each output element's
 * arithmetic never involves another unit.
 *
 * Why these minimums: handing a part to a helper costs a few microseconds;
 * a part is worth it from about 20 us of work (16 Ki elements of a memory-
 * bound kernel, 1 Mi multiply-adds of a GEMM on one current core). */
#include "cpu_split.h"

#include <stddef.h>

#include "cpu_gemm.h"

#define MIN_PART_ELEMS 16384.0
#define MIN_PART_MACS 1048576.0
#define ELEMENT_GRANULE 64
/* A sum over rows into contiguous outputs (a bias gradient) adds each row
 * into one chain of vector sums per 16 outputs; a chain waits on its own
 * last add, so one thread runs up to about 8 chains side by side at the
 * speed of one. Parts of 16 or 32 outputs then take as long as the whole
 * call (measured: a conv1 bias gradient, 100352 rows x 32, 218 us whole,
 * 274 us in two parts): parts have 64 outputs or more. */
#define REDUCE_ROW_GRANULE 64

static int64_t prod(const int64_t *d, int from, int to)
{
    int64_t p = 1;
    for (int k = from; k < to; k++)
        p *= d[k];
    return p;
}

/* The outermost axis with more than one entry (the axes before it are 1),
 * or -1 when every axis is 1. */
static int outer_axis(const int64_t *dims)
{
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        if (dims[k] > 1)
            return k;
    return -1;
}

td_cpu_split td_cpu_split_of(const td_kernel_call *c)
{
    td_cpu_split s = {0, 1, 0.0};
    switch (c->kernel) {
    case TD_KERNEL_FILL:
    case TD_KERNEL_COPY:
        s = (td_cpu_split){c->n, ELEMENT_GRANULE, (double)c->n};
        break;
    case TD_KERNEL_CAST:
        s = (td_cpu_split){c->p.cast.n, ELEMENT_GRANULE, (double)c->p.cast.n};
        break;
    case TD_KERNEL_ELEMENTWISE: {
        const td_ew_params *e = &c->p.ew;
        int k = outer_axis(e->dims);
        if (k >= 0)
            s = (td_cpu_split){e->dims[k], k == TD_KERNEL_RANK - 1 ? ELEMENT_GRANULE : 1,
                               (double)prod(e->dims, 0, TD_KERNEL_RANK)};
        break;
    }
    case TD_KERNEL_REDUCE: {
        const td_reduce_params *r = &c->p.reduce;
        int k = outer_axis(r->out_dims);
        if (k >= 0)
            s = (td_cpu_split){r->out_dims[k], k == TD_KERNEL_RANK - 1 ? REDUCE_ROW_GRANULE : 1,
                               (double)prod(r->out_dims, 0, TD_KERNEL_RANK) *
                                   (double)prod(r->red_dims, 0, TD_KERNEL_RANK)};
        break;
    }
    case TD_KERNEL_GEMM: {
        const td_gemm_params *g = &c->p.gemm;
        if (g->k > 0)
            s = (td_cpu_split){g->m, TD_CPU_GEMM_TILE_ROWS, (double)g->m * (double)g->n * (double)g->k};
        break;
    }
    case TD_KERNEL_XENT_FORWARD:
    case TD_KERNEL_XENT_BACKWARD:
        s = (td_cpu_split){c->p.xent.rows, 1, (double)c->p.xent.rows * (double)c->p.xent.cols};
        break;
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX:
    case TD_KERNEL_LAYER_NORM:
    case TD_KERNEL_LAYER_NORM_BACKWARD: {
        const td_rows_params *r = &c->p.rows;
        bool causal = c->kernel == TD_KERNEL_SOFTMAX && (r->mode & TD_ROWS_CAUSAL);
        if (r->cols > 0)
            s = (td_cpu_split){r->rows, causal ? r->cols : 1, (double)r->rows * (double)r->cols};
        break;
    }
    case TD_KERNEL_GATHER_ROWS:
        s = (td_cpu_split){c->p.gather.n, 1, (double)c->p.gather.n * (double)c->p.gather.dim};
        break;
    case TD_KERNEL_IM2COL:
    case TD_KERNEL_COL2IM: {
        const td_conv_params *g = &c->p.conv;
        s = (td_cpu_split){g->n, 1, (double)g->n * (double)(g->oh * g->ow) * (double)(g->kh * g->kw * g->c)};
        break;
    }
    case TD_KERNEL_POOL:
    case TD_KERNEL_POOL_BACKWARD: {
        const td_conv_params *g = &c->p.pool.geo;
        s = (td_cpu_split){g->n, 1, (double)g->n * (double)(g->oh * g->ow) * (double)(g->kh * g->kw * g->c)};
        break;
    }
    default: /* DROPOUT_MASK, SCATTER_ADD_ROWS: whole */
        break;
    }
    if (s.units <= 0)
        s.units = 0;
    return s;
}

/* work (td_cpu_split_of's) in units of a part's minimum for c's kernel. */
static double part_shares(const td_kernel_call *c, double work)
{
    return work / (c->kernel == TD_KERNEL_GEMM ? MIN_PART_MACS : MIN_PART_ELEMS);
}

int64_t td_cpu_split_parts(const td_kernel_call *c, uint32_t team, bool any_size)
{
    if (team <= 1)
        return 1;
    td_cpu_split s = td_cpu_split_of(c);
    if (s.units == 0)
        return 1;
    int64_t parts = (s.units + s.granule - 1) / s.granule;
    if (parts > (int64_t)team)
        parts = team;
    const double shares = part_shares(c, s.work);
    if (!any_size && (double)parts > shares)
        parts = (int64_t)shares;
    return parts < 1 ? 1 : parts;
}

double td_cpu_split_part_shares(const td_kernel_call *c)
{
    return part_shares(c, td_cpu_split_of(c).work);
}

static void move(td_arg *a, int64_t elements)
{
    a->offset += (uint64_t)elements;
}

void td_cpu_split_part(const td_kernel_call *c, int64_t parts, int64_t part, td_kernel_call *sub)
{
    td_cpu_split s = td_cpu_split_of(c);
    int64_t whole = (s.units + s.granule - 1) / s.granule;
    int64_t begin = s.granule * (part * whole / parts);
    int64_t end = part + 1 == parts ? s.units : s.granule * ((part + 1) * whole / parts);
    td_cpu_split_units(c, begin, end - begin, sub);
}

void td_cpu_split_units(const td_kernel_call *c, int64_t begin, int64_t n, td_kernel_call *sub)
{
    *sub = *c;
    switch (c->kernel) {
    case TD_KERNEL_FILL:
    case TD_KERNEL_COPY:
        sub->n = n;
        move(&sub->out, begin);
        if (c->kernel == TD_KERNEL_COPY)
            move(&sub->a, begin);
        break;
    case TD_KERNEL_CAST:
        sub->p.cast.n = n;
        move(&sub->out, begin);
        /* u8 values are packed four to an element slot; begin is a
         * multiple of 64. */
        move(&sub->a, c->p.cast.from == TD_CAST_U8 ? begin / 4 : begin);
        break;
    case TD_KERNEL_ELEMENTWISE: {
        td_ew_params *e = &sub->p.ew;
        int k = outer_axis(c->p.ew.dims);
        move(&sub->out, begin * prod(e->dims, k + 1, TD_KERNEL_RANK));
        move(&sub->a, begin * e->a_strides[k]);
        move(&sub->b, begin * e->b_strides[k]);
        e->dims[k] = n;
        break;
    }
    case TD_KERNEL_REDUCE: {
        td_reduce_params *r = &sub->p.reduce;
        int k = outer_axis(c->p.reduce.out_dims);
        move(&sub->out, begin * prod(r->out_dims, k + 1, TD_KERNEL_RANK));
        move(&sub->a, begin * r->out_strides[k]);
        r->out_dims[k] = n;
        break;
    }
    case TD_KERNEL_GEMM: {
        td_gemm_params *g = &sub->p.gemm;
        move(&sub->out, begin * g->ldc);
        move(&sub->a, g->trans_a ? begin : begin * g->lda);
        g->m = n;
        break;
    }
    case TD_KERNEL_XENT_FORWARD: /* out loss [rows], out2 prob, a logits, b labels */
        sub->p.xent.rows = n;
        move(&sub->out, begin);
        move(&sub->out2, begin * c->p.xent.cols);
        move(&sub->a, begin * c->p.xent.cols);
        move(&sub->b, begin);
        break;
    case TD_KERNEL_XENT_BACKWARD: /* out, a prob [rows, cols]; b labels, c gradient [rows] */
        sub->p.xent.rows = n;
        move(&sub->out, begin * c->p.xent.cols);
        move(&sub->a, begin * c->p.xent.cols);
        move(&sub->b, begin);
        move(&sub->c, begin);
        break;
    case TD_KERNEL_SOFTMAX:
        sub->p.rows.rows = n;
        move(&sub->out, begin * c->p.rows.cols);
        move(&sub->a, begin * c->p.rows.cols);
        break;
    case TD_KERNEL_ARGMAX:
        sub->p.rows.rows = n;
        move(&sub->out, begin);
        move(&sub->a, begin * c->p.rows.cols);
        break;
    case TD_KERNEL_LAYER_NORM: /* out xhat, out2 stats [rows, 2], a x */
        sub->p.rows.rows = n;
        move(&sub->out, begin * c->p.rows.cols);
        move(&sub->out2, begin * 2);
        move(&sub->a, begin * c->p.rows.cols);
        break;
    case TD_KERNEL_LAYER_NORM_BACKWARD: /* out dx, a g, b xhat, c stats [rows, 2] */
        sub->p.rows.rows = n;
        move(&sub->out, begin * c->p.rows.cols);
        move(&sub->a, begin * c->p.rows.cols);
        move(&sub->b, begin * c->p.rows.cols);
        move(&sub->c, begin * 2);
        break;
    case TD_KERNEL_GATHER_ROWS: /* out [n, dim], b ids [n] */
        sub->p.gather.n = n;
        move(&sub->out, begin * c->p.gather.dim);
        move(&sub->b, begin);
        break;
    case TD_KERNEL_IM2COL:
    case TD_KERNEL_COL2IM: {
        const td_conv_params *g = &c->p.conv;
        int64_t image = g->h * g->w * g->c, patches = g->oh * g->ow * g->kh * g->kw * g->c;
        sub->p.conv.n = n;
        move(&sub->out, begin * (c->kernel == TD_KERNEL_IM2COL ? patches : image));
        move(&sub->a, begin * (c->kernel == TD_KERNEL_IM2COL ? image : patches));
        break;
    }
    case TD_KERNEL_POOL:
    case TD_KERNEL_POOL_BACKWARD: {
        const td_conv_params *g = &c->p.pool.geo;
        int64_t image = g->h * g->w * g->c, pooled = g->oh * g->ow * g->c;
        sub->p.pool.geo.n = n;
        if (c->kernel == TD_KERNEL_POOL) { /* out y, a x */
            move(&sub->out, begin * pooled);
            move(&sub->a, begin * image);
        } else { /* out gx, a x, b y, c gy */
            move(&sub->out, begin * image);
            move(&sub->a, begin * image);
            move(&sub->b, begin * pooled);
            move(&sub->c, begin * pooled);
        }
        break;
    }
    default:
        break;
    }
}

typedef struct span {
    const td_buffer *buffer;
    uint64_t begin, end; /* elements */
} span;

static span matrix_span(const td_arg *a, int64_t rows, int64_t cols, int64_t ld)
{
    span s = {a->buffer, a->offset, a->offset};
    if (rows > 0 && cols > 0)
        s.end = a->offset + (uint64_t)((rows - 1) * ld + cols);
    return s;
}

static bool overlap(span x, span y)
{
    return x.buffer && x.buffer == y.buffer && x.begin < y.end && y.begin < x.end;
}

static bool writes_into(const td_kernel_call *x, const td_kernel_call *y)
{
    const td_gemm_params *g = &x->p.gemm, *h = &y->p.gemm;
    span out = matrix_span(&x->out, g->m, g->n, g->ldc);
    span a = matrix_span(&y->a, h->trans_a ? h->k : h->m, h->trans_a ? h->m : h->k, h->lda);
    span b = matrix_span(&y->b, h->trans_b ? h->n : h->k, h->trans_b ? h->k : h->n, h->ldb);
    return overlap(out, a) || overlap(out, b) || (x != y && overlap(out, matrix_span(&y->out, h->m, h->n, h->ldc)));
}

/* What a REDUCE reads (a) and writes (out, dense): a's span runs from its
 * offset to the farthest element any (o, r) reaches. False where a stride
 * is negative: then no span is claimed and the call conflicts. */
static bool reduce_spans(const td_kernel_call *c, span *read, span *written)
{
    const td_reduce_params *r = &c->p.reduce;
    int64_t outputs = 1, far = 0;
    bool empty = false;
    for (int k = 0; k < TD_KERNEL_RANK; k++) {
        if (r->out_strides[k] < 0 || r->red_strides[k] < 0 || r->out_dims[k] < 0 || r->red_dims[k] < 0)
            return false;
        outputs *= r->out_dims[k];
        empty = empty || r->out_dims[k] == 0 || r->red_dims[k] == 0;
        far += (r->out_dims[k] > 0 ? r->out_dims[k] - 1 : 0) * r->out_strides[k] +
               (r->red_dims[k] > 0 ? r->red_dims[k] - 1 : 0) * r->red_strides[k];
    }
    *read = (span){c->a.buffer, c->a.offset, c->a.offset + (empty ? 0 : (uint64_t)far + 1)};
    *written = (span){c->out.buffer, c->out.offset, c->out.offset + (uint64_t)outputs};
    return true;
}

/* The spans a GEMM or REDUCE call reads (up to two) and writes. */
static bool call_spans(const td_kernel_call *c, span read[2], span *written)
{
    if (c->kernel == TD_KERNEL_REDUCE) {
        read[1] = (span){NULL, 0, 0};
        return reduce_spans(c, &read[0], written);
    }
    if (c->kernel != TD_KERNEL_GEMM)
        return false;
    const td_gemm_params *h = &c->p.gemm;
    read[0] = matrix_span(&c->a, h->trans_a ? h->k : h->m, h->trans_a ? h->m : h->k, h->lda);
    read[1] = matrix_span(&c->b, h->trans_b ? h->n : h->k, h->trans_b ? h->k : h->n, h->ldb);
    /* beta != 0 reads C, but C is also written: the checks below cover it. */
    *written = matrix_span(&c->out, h->m, h->n, h->ldc);
    return true;
}

bool td_cpu_calls_conflict(const td_kernel_call *x, const td_kernel_call *y)
{
    if (x->kernel == TD_KERNEL_GEMM && y->kernel == TD_KERNEL_GEMM)
        return writes_into(x, y) || writes_into(y, x);
    span xr[2], xw, yr[2], yw;
    if (!call_spans(x, xr, &xw) || !call_spans(y, yr, &yw))
        return true;
    for (int i = 0; i < 2; i++)
        if (overlap(xw, yr[i]) || overlap(yw, xr[i]))
            return true;
    return x != y && overlap(xw, yw);
}
