/* Segments: a list of td_kernel_calls compiled once into cl_kernels whose
 * arguments are all set at segment_create, so that segment_run only
 * enqueues (CLBlast sets its own arguments per call; that is the one
 * exception). Every argument's range is checked against its buffer here,
 * because a kernel reading past a buffer is silent on most drivers. */
#include "cl_internal.h"

#include <stdio.h>
#include <string.h>

#include "td_kernel_checks.h"

#define TD_CL_LOCAL 64 /* fixed: PoCL compiles a new work-group function per local size */

typedef struct td_cl_launch {
    cl_kernel kernel;
    size_t global, local;
} td_cl_launch;

typedef struct td_cl_step {
    int nlaunch; /* 0 with is_gemm false: nothing to do */
    bool is_gemm;
    td_cl_launch launch[2];
    td_cl_gemm gemm;
    cl_mem scratch; /* REDUCE partial sums */
} td_cl_step;

struct td_segment {
    size_t count;
    td_cl_step *steps;
};

/* Checks that elements [offset + lo, offset + hi) lie inside arg's buffer. */
static td_status check_arg(td_device *dev, size_t index, const char *kname, const char *aname,
                           const td_arg *arg, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return TD_OK;
    if (!arg->buffer)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (%s): %s has no buffer",
                            index, kname, aname);
    uint64_t elems = arg->buffer->bytes / 4;
    if (lo < 0 && (uint64_t)(-lo) > arg->offset)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "opencl segment call %zu (%s): %s reaches before its buffer's start", index,
                            kname, aname);
    if (arg->offset > elems || (uint64_t)hi > elems - arg->offset)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "opencl segment call %zu (%s): %s needs elements up to %llu + %lld but its "
                            "buffer holds %llu",
                            index, kname, aname, (unsigned long long)arg->offset, (long long)hi,
                            (unsigned long long)elems);
    return TD_OK;
}

/* The element range [lo, hi) a strided rank-4 view touches. */
static void strided_extent(const int64_t *dims, const int64_t *strides, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = 1;
    for (int k = 0; k < TD_KERNEL_RANK; k++) {
        if (dims[k] == 0) {
            *lo = 0;
            *hi = 0;
            return;
        }
        int64_t span = (dims[k] - 1) * strides[k];
        if (span < 0)
            *lo += span;
        else
            *hi += span;
    }
}

static bool is_dense(const int64_t *dims, const int64_t *strides)
{
    int64_t expect = 1;
    for (int k = TD_KERNEL_RANK - 1; k >= 0; k--) {
        if (dims[k] != 1 && strides[k] != expect)
            return false;
        expect *= dims[k];
    }
    return true;
}

static bool dims_valid(const int64_t *dims)
{
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        if (dims[k] < 0)
            return false;
    return true;
}

static cl_long4 long4_of(const int64_t *v)
{
    cl_long4 r;
    for (int k = 0; k < 4; k++)
        r.s[k] = v[k];
    return r;
}

static td_status add_launch(td_device *dev, td_cl_step *step, const char *name, const td_cl_arg *args,
                            size_t nargs, uint64_t items)
{
    td_cl_launch *l = &step->launch[step->nlaunch];
    td_status st = td_opencl_kernel_create(dev, name, args, (cl_uint)nargs, &l->kernel);
    if (st != TD_OK)
        return st;
    l->local = TD_CL_LOCAL;
    l->global = td_cl_round_up((size_t)items, TD_CL_LOCAL);
    step->nlaunch++;
    return TD_OK;
}

#define NARGS(a) (sizeof(a) / sizeof((a)[0]))

static td_status prepare_elementwise(td_device *dev, size_t i, const td_kernel_call *c, td_cl_step *step)
{
    const td_ew_params *p = &c->p.ew;
    if (p->op < 0 || p->op >= TD_EW_OP_COUNT || !dims_valid(p->dims))
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "opencl segment call %zu (elementwise): bad op %d or negative dims", i, (int)p->op);
    bool binary = td_ew_arity(p->op) == 2;
    int64_t n = td_ew_count(p), lo, hi;
    td_status st = check_arg(dev, i, "elementwise", "out", &c->out, 0, n);
    strided_extent(p->dims, p->a_strides, &lo, &hi);
    if (st == TD_OK)
        st = check_arg(dev, i, "elementwise", "a", &c->a, lo, hi);
    strided_extent(p->dims, p->b_strides, &lo, &hi);
    if (st == TD_OK && binary)
        st = check_arg(dev, i, "elementwise", "b", &c->b, lo, hi);
    if (st != TD_OK || n == 0)
        return st;
    /* Unary ops still read "b" (one kernel shape for all ops): point it at a. */
    const td_arg *b = binary ? &c->b : &c->a;
    const int64_t *sb = binary ? p->b_strides : p->a_strides;
    bool dense = is_dense(p->dims, p->a_strides) && is_dense(p->dims, sb);
    char name[48];
    snprintf(name, sizeof name, "td_ew_%s_%s", td_ew_name(p->op), dense ? "dense" : "strided");
    cl_ulong out_off = c->out.offset, a_off = c->a.offset, b_off = b->offset, count = (cl_ulong)n;
    cl_float alpha = p->alpha;
    cl_long4 dims = long4_of(p->dims), sa = long4_of(p->a_strides), sbv = long4_of(sb);
    const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(c->a.buffer->mem),
                              TD_CL_ARG(a_off), TD_CL_ARG(b->buffer->mem), TD_CL_ARG(b_off),
                              TD_CL_ARG(alpha), TD_CL_ARG(count), TD_CL_ARG(dims),
                              TD_CL_ARG(sa), TD_CL_ARG(sbv)};
    return add_launch(dev, step, name, args, dense ? 8 : NARGS(args), (uint64_t)n);
}

static td_status prepare_reduce(td_device *dev, size_t i, const td_kernel_call *c, td_cl_step *step)
{
    const td_reduce_params *p = &c->p.reduce;
    if (!dims_valid(p->out_dims) || !dims_valid(p->red_dims))
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (reduce): negative dims",
                            i);
    int64_t out_n = td_reduce_out_count(p), red_n = 1;
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        red_n *= p->red_dims[k];
    int64_t olo, ohi, rlo, rhi;
    strided_extent(p->out_dims, p->out_strides, &olo, &ohi);
    strided_extent(p->red_dims, p->red_strides, &rlo, &rhi);
    td_status st = check_arg(dev, i, "reduce", "out", &c->out, 0, out_n);
    if (st == TD_OK && out_n > 0 && red_n > 0)
        st = check_arg(dev, i, "reduce", "a", &c->a, olo + rlo, ohi + rhi - 1);
    if (st != TD_OK || out_n == 0)
        return st;
    /* An empty reduction reads nothing; any valid buffer will do for a. */
    const td_arg *a = c->a.buffer ? &c->a : &c->out;
    cl_ulong out_off = c->out.offset, a_off = a->offset, on = (cl_ulong)out_n, rn = (cl_ulong)red_n;
    cl_float alpha = p->alpha;
    cl_long4 od = long4_of(p->out_dims), os = long4_of(p->out_strides), rd = long4_of(p->red_dims),
             rs = long4_of(p->red_strides);
    /* Few outputs with long sums would leave the device idle: split each sum
     * into chunks (fixed per shape, so results repeat run to run). */
    if (out_n < 256 && red_n >= 8192) {
        int64_t chunks = (1024 + out_n - 1) / out_n;
        if (chunks > red_n / 1024)
            chunks = red_n / 1024;
        cl_uint nch = (cl_uint)chunks;
        cl_ulong len = (cl_ulong)((red_n + chunks - 1) / chunks);
        cl_int err;
        step->scratch = td_cl.CreateBuffer(dev->context, CL_MEM_READ_WRITE, (size_t)(out_n * chunks) * 4, NULL, &err);
        if (err != CL_SUCCESS)
            return td_opencl_device_fail(dev, err, "clCreateBuffer(reduce scratch)");
        const td_cl_arg a1[] = {TD_CL_ARG(step->scratch), TD_CL_ARG(a->buffer->mem), TD_CL_ARG(a_off),
                                TD_CL_ARG(on), TD_CL_ARG(nch), TD_CL_ARG(len), TD_CL_ARG(rn),
                                TD_CL_ARG(od), TD_CL_ARG(os), TD_CL_ARG(rd), TD_CL_ARG(rs)};
        st = add_launch(dev, step, "td_reduce_partial", a1, NARGS(a1), (uint64_t)(out_n * chunks));
        if (st != TD_OK)
            return st;
        const td_cl_arg a2[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(step->scratch),
                                TD_CL_ARG(nch), TD_CL_ARG(alpha), TD_CL_ARG(on)};
        return add_launch(dev, step, "td_reduce_final", a2, NARGS(a2), (uint64_t)out_n);
    }
    const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                              TD_CL_ARG(a_off), TD_CL_ARG(alpha), TD_CL_ARG(on), TD_CL_ARG(od),
                              TD_CL_ARG(os), TD_CL_ARG(rd), TD_CL_ARG(rs)};
    return add_launch(dev, step, "td_reduce", args, NARGS(args), (uint64_t)out_n);
}

static td_status prepare_gemm(td_device *dev, size_t i, const td_kernel_call *c, td_cl_step *step)
{
    const td_gemm_params *p = &c->p.gemm;
    if (p->m < 0 || p->n < 0 || p->k < 0)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (gemm): negative size", i);
    char why[160];
    if (td_gemm_check(p, why, sizeof why) != 0)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (gemm): %s", i, why);
    int64_t arows = p->trans_a ? p->k : p->m, acols = p->trans_a ? p->m : p->k;
    int64_t brows = p->trans_b ? p->n : p->k, bcols = p->trans_b ? p->k : p->n;
    if (p->lda < (acols > 1 ? acols : 1) || p->ldb < (bcols > 1 ? bcols : 1) || p->ldc < (p->n > 1 ? p->n : 1))
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "opencl segment call %zu (gemm): leading dimension smaller than a row "
                            "(lda %lld, ldb %lld, ldc %lld)",
                            i, (long long)p->lda, (long long)p->ldb, (long long)p->ldc);
    td_status st = TD_OK;
    if (p->m > 0 && p->n > 0) {
        st = check_arg(dev, i, "gemm", "C (out)", &c->out, 0, (p->m - 1) * p->ldc + p->n);
        if (st == TD_OK && p->k > 0)
            st = check_arg(dev, i, "gemm", "A", &c->a, 0, (arows - 1) * p->lda + acols);
        if (st == TD_OK && p->k > 0)
            st = check_arg(dev, i, "gemm", "B", &c->b, 0, (brows - 1) * p->ldb + bcols);
    }
    if (st != TD_OK)
        return st;
    td_kernel_call fixed = *c;
    /* With k == 0, A and B are never read; any valid buffer will do. */
    if (!fixed.a.buffer)
        fixed.a = c->out;
    if (!fixed.b.buffer)
        fixed.b = c->out;
    if (p->m == 0 || p->n == 0) {
        step->is_gemm = false;
        return TD_OK;
    }
    step->is_gemm = true;
    return td_opencl_gemm_prepare(dev, &fixed, &step->gemm);
}

/* The row kernels (rows.cl): ranges from td_row_kernel_extents, the same
 * checks every backend makes. */
static td_status prepare_rows(td_device *dev, size_t i, const td_kernel_call *c, td_cl_step *step)
{
    const char *kname = td_kernel_name(c->kernel);
    static const char *const slot_names[TD_ROW_SLOTS] = {"out", "out2", "a", "b", "c"};
    const td_arg *slots[TD_ROW_SLOTS] = {&c->out, &c->out2, &c->a, &c->b, &c->c};
    int64_t need[TD_ROW_SLOTS];
    char why[160];
    if (td_row_kernel_extents(c, need, why, sizeof why) != 0)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (%s): %s", i, kname, why);
    for (int s = 0; s < TD_ROW_SLOTS; s++) {
        td_status st = check_arg(dev, i, kname, slot_names[s], slots[s], 0, need[s]);
        if (st != TD_OK)
            return st;
    }
    if (need[TD_ROW_OUT] == 0)
        return TD_OK; /* nothing to write */
    cl_ulong out_off = c->out.offset;
    /* An argument the call never touches (need 0) is bound to out. */
    const td_arg *a = need[TD_ROW_A] ? &c->a : &c->out, *b = need[TD_ROW_B] ? &c->b : &c->out;
    cl_ulong a_off = a->offset, b_off = b->offset;
    switch (c->kernel) {
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX: {
        cl_long rows = c->p.rows.rows, cols = c->p.rows.cols;
        cl_int mode = c->p.rows.mode;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                                  TD_CL_ARG(a_off), TD_CL_ARG(rows), TD_CL_ARG(cols), TD_CL_ARG(mode)};
        bool soft = c->kernel == TD_KERNEL_SOFTMAX;
        return add_launch(dev, step, soft ? "td_softmax" : "td_argmax", args, soft ? 7 : 6, (uint64_t)rows);
    }
    case TD_KERNEL_CAST: {
        bool u8 = c->p.cast.from == TD_CAST_U8;
        cl_ulong src_off = u8 ? a_off * 4 : a_off;
        cl_long n = c->p.cast.n;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                                  TD_CL_ARG(src_off), TD_CL_ARG(n)};
        return add_launch(dev, step, u8 ? "td_cast_u8" : "td_cast_i32", args, NARGS(args), (uint64_t)n);
    }
    case TD_KERNEL_DROPOUT_MASK: {
        const td_dropout_params *p = &c->p.dropout;
        cl_long rows = p->rows, cols = p->cols;
        cl_uint lo = p->seed_lo, hi = p->seed_hi, thr = p->keep_threshold;
        cl_float scale = p->scale;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(b->buffer->mem),
                                  TD_CL_ARG(b_off), TD_CL_ARG(rows), TD_CL_ARG(cols), TD_CL_ARG(lo),
                                  TD_CL_ARG(hi), TD_CL_ARG(thr), TD_CL_ARG(scale)};
        return add_launch(dev, step, "td_dropout_mask", args, NARGS(args), (uint64_t)(rows * ((cols + 3) / 4)));
    }
    case TD_KERNEL_LAYER_NORM: {
        cl_long rows = c->p.rows.rows, cols = c->p.rows.cols;
        cl_float eps = c->p.rows.epsilon;
        cl_ulong o2 = c->out2.offset;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(c->out2.buffer->mem),
                                  TD_CL_ARG(o2), TD_CL_ARG(a->buffer->mem), TD_CL_ARG(a_off), TD_CL_ARG(rows),
                                  TD_CL_ARG(cols), TD_CL_ARG(eps)};
        return add_launch(dev, step, "td_layer_norm", args, NARGS(args), (uint64_t)rows);
    }
    case TD_KERNEL_LAYER_NORM_BACKWARD: {
        cl_long rows = c->p.rows.rows, cols = c->p.rows.cols;
        cl_ulong c_off = c->c.offset;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                                  TD_CL_ARG(a_off), TD_CL_ARG(b->buffer->mem), TD_CL_ARG(b_off),
                                  TD_CL_ARG(c->c.buffer->mem), TD_CL_ARG(c_off), TD_CL_ARG(rows), TD_CL_ARG(cols)};
        return add_launch(dev, step, "td_layer_norm_backward", args, NARGS(args), (uint64_t)rows);
    }
    case TD_KERNEL_GATHER_ROWS:
    case TD_KERNEL_SCATTER_ADD_ROWS: {
        const td_gather_params *p = &c->p.gather;
        cl_long n = p->n, vocab = p->vocab, dim = p->dim;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                                  TD_CL_ARG(a_off), TD_CL_ARG(b->buffer->mem), TD_CL_ARG(b_off),
                                  TD_CL_ARG(n), TD_CL_ARG(vocab), TD_CL_ARG(dim)};
        bool gather = c->kernel == TD_KERNEL_GATHER_ROWS;
        return add_launch(dev, step, gather ? "td_gather_rows" : "td_scatter_add_rows", args, NARGS(args),
                          (uint64_t)need[TD_ROW_OUT]);
    }
    default:
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu: kernel %d is not a row kernel",
                            i, (int)c->kernel);
    }
}

/* IM2COL, COL2IM, POOL, POOL_BACKWARD: the geometry is checked once here so
 * that the kernels' index arithmetic cannot leave any buffer. */
static td_status prepare_conv(td_device *dev, size_t i, const td_kernel_call *c, td_cl_step *step)
{
    const char *kname = td_kernel_name(c->kernel);
    bool pool = c->kernel == TD_KERNEL_POOL || c->kernel == TD_KERNEL_POOL_BACKWARD;
    const td_conv_params *g = pool ? &c->p.pool.geo : &c->p.conv;
    const char *why = pool ? td_pool_check(&c->p.pool) : td_conv_check(g, 0);
    if (why)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (%s): %s", i, kname, why);
    int64_t image = td_conv_image_count(g), patches = td_conv_patch_count(g), pooled = td_conv_pooled_count(g);
    /* What the kernel writes (one work-item each) and reads. */
    int64_t outs, a_n;
    const char *out_name, *a_name;
    switch (c->kernel) {
    case TD_KERNEL_IM2COL: outs = patches, a_n = image, out_name = "patches (out)", a_name = "image (a)"; break;
    case TD_KERNEL_COL2IM: outs = image, a_n = patches, out_name = "image (out)", a_name = "patches (a)"; break;
    case TD_KERNEL_POOL: outs = pooled, a_n = image, out_name = "y (out)", a_name = "x (a)"; break;
    default: outs = image, a_n = image, out_name = "gx (out)", a_name = "x (a)"; break;
    }
    bool max_bwd = c->kernel == TD_KERNEL_POOL_BACKWARD && c->p.pool.mode == TD_POOL_MAX;
    bool reads_a = c->kernel != TD_KERNEL_POOL_BACKWARD || max_bwd;
    td_status st = check_arg(dev, i, kname, out_name, &c->out, 0, outs);
    if (st == TD_OK && outs > 0 && reads_a)
        st = check_arg(dev, i, kname, a_name, &c->a, 0, a_n);
    if (st == TD_OK && outs > 0 && max_bwd)
        st = check_arg(dev, i, kname, "y (b)", &c->b, 0, pooled);
    if (st == TD_OK && outs > 0 && c->kernel == TD_KERNEL_POOL_BACKWARD)
        st = check_arg(dev, i, kname, "gy (c)", &c->c, 0, pooled);
    if (st != TD_OK || outs == 0)
        return st;
    /* Arguments the kernel never reads (an empty image, avg's x and y) are
     * bound to out, which is always valid. */
    const td_arg *a = reads_a && a_n > 0 ? &c->a : &c->out;
    const td_arg *b = max_bwd && pooled > 0 ? &c->b : &c->out;
    const td_arg *gy = pooled > 0 && c->c.buffer ? &c->c : &c->out;
    cl_long8 g0 = {{g->n, g->h, g->w, g->c, g->kh, g->kw, g->oh, g->ow}};
    cl_long8 g1 = {{g->stride_h, g->stride_w, g->pad_top, g->pad_left, g->dil_h, g->dil_w, 0, 0}};
    cl_ulong out_off = c->out.offset, a_off = a->offset, b_off = b->offset, gy_off = gy->offset;
    cl_ulong count = (cl_ulong)outs;
    cl_int mode = pool ? c->p.pool.mode : 0, include_pad = pool ? c->p.pool.count_include_pad != 0 : 0;
    if (c->kernel == TD_KERNEL_POOL_BACKWARD) {
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                                  TD_CL_ARG(a_off), TD_CL_ARG(b->buffer->mem), TD_CL_ARG(b_off),
                                  TD_CL_ARG(gy->buffer->mem), TD_CL_ARG(gy_off), TD_CL_ARG(count),
                                  TD_CL_ARG(g0), TD_CL_ARG(g1), TD_CL_ARG(mode), TD_CL_ARG(include_pad)};
        return add_launch(dev, step, "td_pool_backward", args, NARGS(args), (uint64_t)outs);
    }
    static const char *names[] = {"td_im2col", "td_col2im", "td_pool"};
    const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(a->buffer->mem),
                              TD_CL_ARG(a_off), TD_CL_ARG(count), TD_CL_ARG(g0), TD_CL_ARG(g1),
                              TD_CL_ARG(mode), TD_CL_ARG(include_pad)};
    return add_launch(dev, step, names[c->kernel - TD_KERNEL_IM2COL], args, pool ? NARGS(args) : 7,
                      (uint64_t)outs);
}

static td_status prepare_call(td_device *dev, size_t i, const td_kernel_call *c, td_cl_step *step)
{
    td_status st;
    switch (c->kernel) {
    case TD_KERNEL_FILL:
    case TD_KERNEL_COPY: {
        bool fill = c->kernel == TD_KERNEL_FILL;
        const char *kname = fill ? "fill" : "copy";
        if (c->n < 0)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (%s): n < 0", i, kname);
        st = check_arg(dev, i, kname, "out", &c->out, 0, c->n);
        if (st == TD_OK && !fill)
            st = check_arg(dev, i, kname, "a", &c->a, 0, c->n);
        if (st != TD_OK || c->n == 0)
            return st;
        cl_ulong out_off = c->out.offset, n = (cl_ulong)c->n;
        if (fill) {
            cl_float v = c->alpha;
            const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(n),
                                      TD_CL_ARG(v)};
            return add_launch(dev, step, "td_fill", args, NARGS(args), n);
        }
        if (c->a.buffer == c->out.buffer) {
            if (c->a.offset == c->out.offset)
                return TD_OK; /* copy onto itself */
            uint64_t lo = c->a.offset < c->out.offset ? c->a.offset : c->out.offset;
            uint64_t hi = c->a.offset < c->out.offset ? c->out.offset : c->a.offset;
            if (hi - lo < (uint64_t)c->n)
                return td_error_set(dev->ctx, TD_ERR_UNSUPPORTED,
                                    "opencl segment call %zu (copy): source and destination overlap", i);
        }
        cl_ulong a_off = c->a.offset;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(out_off), TD_CL_ARG(c->a.buffer->mem),
                                  TD_CL_ARG(a_off), TD_CL_ARG(n)};
        return add_launch(dev, step, "td_copy", args, NARGS(args), n);
    }
    case TD_KERNEL_ELEMENTWISE: return prepare_elementwise(dev, i, c, step);
    case TD_KERNEL_REDUCE: return prepare_reduce(dev, i, c, step);
    case TD_KERNEL_GEMM: return prepare_gemm(dev, i, c, step);
    case TD_KERNEL_XENT_FORWARD:
    case TD_KERNEL_XENT_BACKWARD: {
        bool fwd = c->kernel == TD_KERNEL_XENT_FORWARD;
        const char *kname = fwd ? "xent_forward" : "xent_backward";
        int64_t rows = c->p.xent.rows, cols = c->p.xent.cols;
        if (rows < 0 || cols < 0)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu (%s): negative shape",
                                i, kname);
        st = check_arg(dev, i, kname, fwd ? "loss (out)" : "grad (out)", &c->out, 0, fwd ? rows : rows * cols);
        if (st == TD_OK && fwd)
            st = check_arg(dev, i, kname, "prob (out2)", &c->out2, 0, rows * cols);
        if (st == TD_OK)
            st = check_arg(dev, i, kname, fwd ? "logits (a)" : "prob (a)", &c->a, 0, rows * cols);
        if (st == TD_OK)
            st = check_arg(dev, i, kname, "labels (b)", &c->b, 0, rows);
        if (st == TD_OK && !fwd)
            st = check_arg(dev, i, kname, "upstream (c)", &c->c, 0, rows);
        if (st != TD_OK || rows == 0 || (!fwd && cols == 0))
            return st;
        cl_ulong o1 = c->out.offset, a_off = c->a.offset, b_off = c->b.offset;
        cl_long r = rows, cl = cols;
        if (fwd) {
            /* cols == 0 still writes loss (NaN) but no prob: bind out for out2. */
            const td_arg *out2 = cols > 0 ? &c->out2 : &c->out;
            cl_ulong o2 = out2->offset;
            const td_arg *a = cols > 0 ? &c->a : &c->out;
            a_off = a->offset;
            const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(o1), TD_CL_ARG(out2->buffer->mem),
                                      TD_CL_ARG(o2), TD_CL_ARG(a->buffer->mem), TD_CL_ARG(a_off),
                                      TD_CL_ARG(c->b.buffer->mem), TD_CL_ARG(b_off), TD_CL_ARG(r), TD_CL_ARG(cl)};
            return add_launch(dev, step, "td_xent_forward", args, NARGS(args), (uint64_t)rows);
        }
        cl_ulong c_off = c->c.offset;
        const td_cl_arg args[] = {TD_CL_ARG(c->out.buffer->mem), TD_CL_ARG(o1), TD_CL_ARG(c->a.buffer->mem),
                                  TD_CL_ARG(a_off), TD_CL_ARG(c->b.buffer->mem), TD_CL_ARG(b_off),
                                  TD_CL_ARG(c->c.buffer->mem), TD_CL_ARG(c_off), TD_CL_ARG(r), TD_CL_ARG(cl)};
        return add_launch(dev, step, "td_xent_backward", args, NARGS(args), (uint64_t)(rows * cols));
    }
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX:
    case TD_KERNEL_CAST:
    case TD_KERNEL_DROPOUT_MASK:
    case TD_KERNEL_GATHER_ROWS:
    case TD_KERNEL_SCATTER_ADD_ROWS:
    case TD_KERNEL_LAYER_NORM:
    case TD_KERNEL_LAYER_NORM_BACKWARD: return prepare_rows(dev, i, c, step);
    case TD_KERNEL_IM2COL:
    case TD_KERNEL_COL2IM:
    case TD_KERNEL_POOL:
    case TD_KERNEL_POOL_BACKWARD: return prepare_conv(dev, i, c, step);
    default:
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment call %zu: unknown kernel id %d", i,
                            (int)c->kernel);
    }
}

static void release_step(td_cl_step *s)
{
    for (int l = 0; l < s->nlaunch; l++)
        if (s->launch[l].kernel)
            td_cl.ReleaseKernel(s->launch[l].kernel);
    if (s->is_gemm)
        td_opencl_gemm_release(&s->gemm);
    if (s->scratch)
        td_cl.ReleaseMemObject(s->scratch);
}

void td_opencl_segment_destroy(td_device *dev, td_segment *seg)
{
    if (!seg)
        return;
    for (size_t i = 0; i < seg->count; i++)
        release_step(&seg->steps[i]);
    td_free(dev->ctx, seg->steps);
    td_free(dev->ctx, seg);
}

td_status td_opencl_segment_create(td_device *dev, const td_kernel_call *calls, size_t count, td_segment **out)
{
    if (!out || (count > 0 && !calls))
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment_create: NULL argument");
    *out = NULL;
    if (dev->lost)
        return td_error_set(dev->ctx, TD_ERR_DEVICE_LOST, "opencl device %u: segment_create after the device was lost",
                            dev->index);
    td_segment *seg = td_alloc_zeroed(dev->ctx, sizeof *seg);
    if (!seg)
        return TD_OOM(dev->ctx, "OpenCL segment", sizeof *seg);
    if (count > 0) {
        seg->steps = td_alloc_zeroed(dev->ctx, count * sizeof *seg->steps);
        if (!seg->steps) {
            td_free(dev->ctx, seg);
            return TD_OOM(dev->ctx, "OpenCL segment steps", count * sizeof *seg->steps);
        }
    }
    seg->count = count;
    for (size_t i = 0; i < count; i++) {
        td_status st = prepare_call(dev, i, &calls[i], &seg->steps[i]);
        if (st != TD_OK) {
            td_opencl_segment_destroy(dev, seg);
            return st;
        }
    }
    *out = seg;
    return TD_OK;
}

td_status td_opencl_segment_run(td_device *dev, td_segment *seg)
{
    if (!seg)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "opencl segment_run: segment is NULL");
    if (dev->lost)
        return td_error_set(dev->ctx, TD_ERR_DEVICE_LOST, "opencl device %u: segment_run after the device was lost",
                            dev->index);
    for (size_t i = 0; i < seg->count; i++) {
        td_cl_step *s = &seg->steps[i];
        if (s->is_gemm) {
            td_status st = td_opencl_gemm_enqueue(dev, &s->gemm);
            if (st != TD_OK)
                return st;
        }
        for (int l = 0; l < s->nlaunch; l++)
            TD_CL_TRY(dev,
                      td_cl.EnqueueNDRangeKernel(dev->queue, s->launch[l].kernel, 1, NULL, &s->launch[l].global,
                                             &s->launch[l].local, 0, NULL, NULL),
                      "clEnqueueNDRangeKernel");
    }
    return TD_OK;
}
