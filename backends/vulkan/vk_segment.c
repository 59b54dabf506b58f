/* Segments: a td_kernel_call list recorded ONCE into a command buffer, with
 * descriptor sets allocated and written at creation, so segment_run only
 * appends the command buffer to the next submission.
 *
 * Tensor arguments are (buffer, element offset): each binding is the whole
 * buffer, or, for a buffer larger than maxStorageBufferRange, a window
 * around the elements the call touches; the element offset within the
 * binding goes in push constants, so no descriptor offset alignment rule
 * ever constrains where a tensor lives.
 *
 * Barriers: a dispatch that reads or writes a byte range an earlier
 * dispatch (since the last barrier) wrote, or writes a range an earlier one
 * read, gets a memory barrier before it; independent dispatches get none. */
#include <string.h>

#include "td_kernel_checks.h"
#include "vk_internal.h"

enum { SLOT_OUT = 0, SLOT_OUT2, SLOT_A, SLOT_B, SLOT_C };

typedef struct pc_fill { uint32_t n, out_off; float alpha; } pc_fill;
typedef struct pc_copy { uint32_t n, out_off, a_off; } pc_copy;
typedef struct pc_ew {
    int32_t dims[4], a_strides[4], b_strides[4];
    int32_t op;
    float alpha;
    uint32_t n, out_off;
    int32_t a_off, b_off;
} pc_ew;
typedef struct pc_reduce {
    int32_t out_dims[4], out_strides[4], red_dims[4], red_strides[4];
    float alpha;
    uint32_t out_off;
    int32_t a_off;
    uint32_t out_count, red_count, mode;
} pc_reduce;
typedef struct pc_gemm {
    int32_t ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    uint32_t a_off, b_off, c_off;
    int32_t precision; /* td_gemm_precision: bf16 rounds A and B as they are loaded */
} pc_gemm;
_Static_assert(sizeof(pc_gemm) <= TD_VK_PUSH_BYTES, "push constants exceed the declared range");
typedef struct pc_xent_fwd { uint32_t rows, cols, loss_off, prob_off, logits_off, labels_off; } pc_xent_fwd;
typedef struct pc_xent_bwd { uint32_t n, cols, grad_off, prob_off, labels_off, up_off; } pc_xent_bwd;
typedef struct pc_rows { uint32_t rows, cols, out_off, a_off, mode; } pc_rows; /* softmax, argmax */
typedef struct pc_cast { uint32_t n, out_off, a_off, from; } pc_cast;
typedef struct pc_norm { uint32_t rows, cols, out_off, stats_off, a_off; float epsilon; } pc_norm;
typedef struct pc_norm_bwd { uint32_t rows, cols, out_off, g_off, x_off, stats_off; } pc_norm_bwd;
typedef struct pc_dropout {
    uint32_t rows, cols, out_off, b_off, seed_lo, seed_hi, threshold;
    float scale;
} pc_dropout;
typedef struct pc_gather { uint32_t n, vocab, dim, out_off, a_off, b_off; } pc_gather;

_Static_assert(sizeof(pc_reduce) <= TD_VK_PUSH_BYTES, "push constants exceed the declared range");
_Static_assert(sizeof(pc_ew) <= TD_VK_PUSH_BYTES, "push constants exceed the declared range");
_Static_assert(sizeof(pc_dropout) <= TD_VK_PUSH_BYTES, "push constants exceed the declared range");
typedef struct pc_conv {
    int32_t n, h, w, c, kh, kw, oh, ow;
    int32_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
    uint32_t count, out_off, a_off, b_off, c_off;
    int32_t mode, include_pad;
} pc_conv;

_Static_assert(sizeof(pc_conv) <= TD_VK_PUSH_BYTES, "push constants exceed the declared range");

typedef struct plan {
    bool skip; /* nothing to compute (an empty tensor) */
    bool used[TD_VK_BINDINGS], write[TD_VK_BINDINGS];
    td_buffer *buf[TD_VK_BINDINGS];
    int64_t lo[TD_VK_BINDINGS], hi[TD_VK_BINDINGS]; /* touched elements, absolute */
    int64_t rel[TD_VK_BINDINGS];                    /* arg offset within the binding */
    VkDescriptorBufferInfo info[TD_VK_BINDINGS];
    uint32_t groups[3];
    uint32_t push[TD_VK_PUSH_BYTES / 4];
} plan;

typedef struct access {
    td_buffer *buf;
    int64_t lo, hi;
    bool write;
} access;

struct td_segment {
    VkCommandBuffer cmd;
    VkDescriptorPool pool;
    uint32_t barriers, dispatches;
};

static const char *kernel_name(int32_t k)
{
    return td_kernel_name(k);
}

static bool fits_i32(int64_t v)
{
    return v >= -2147483647LL && v <= 2147483647LL;
}

/* Marks slot as touching elements [arg.offset + lo_rel, arg.offset + hi_rel). */
static td_status use_slot(td_device *dev, size_t i, int32_t kernel, plan *pl, int slot, td_arg arg,
                          int64_t lo_rel, int64_t hi_rel, bool write)
{
    static const char *slot_names[TD_VK_BINDINGS] = {"out", "out2", "a", "b", "c"};
    if (hi_rel <= lo_rel)
        return TD_OK; /* empty: the kernel never touches it */
    if (arg.buffer == NULL)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu (%s): argument %s is NULL",
                            i, kernel_name(kernel), slot_names[slot]);
    int64_t lo = (int64_t)arg.offset + lo_rel, hi = (int64_t)arg.offset + hi_rel;
    if (arg.offset > (uint64_t)INT64_MAX / 8 || lo < 0 || (uint64_t)hi * 4 > arg.buffer->bytes)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "vulkan segment call %zu (%s): argument %s touches elements [%lld, %lld) "
                            "outside its buffer of %zu bytes",
                            i, kernel_name(kernel), slot_names[slot], (long long)lo, (long long)hi,
                            arg.buffer->bytes);
    pl->used[slot] = true;
    pl->write[slot] = write;
    pl->buf[slot] = arg.buffer;
    pl->lo[slot] = lo;
    pl->hi[slot] = hi;
    return TD_OK;
}

/* Element range [lo, hi) relative to the offset that a rank-n strided view
 * of the given dims touches; empty when a dim is 0. */
static void view_extent(const int64_t *dims, const int64_t *strides, int rank, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = 0;
    int64_t min = 0, max = 0;
    for (int k = 0; k < rank; k++) {
        if (dims[k] <= 0)
            return;
        int64_t span = (dims[k] - 1) * strides[k];
        if (span < 0)
            min += span;
        else
            max += span;
    }
    *lo = min;
    *hi = max + 1;
}

static uint32_t grid(int64_t items, uint32_t per_group)
{
    int64_t groups = (items + per_group - 1) / per_group;
    /* Grid-stride kernels: a capped grid covers any size, and lavapipe runs
     * fewer, longer workgroups more cheaply. */
    return (uint32_t)(groups < 1 ? 1 : groups > 1024 ? 1024 : groups);
}

/* A workgroup per row (softmax, xent forward), up to the device's limit:
 * past it the rows are grid-strided. Not capped low as grid() is: a
 * workgroup that took many long rows would run into lavapipe's 65535 loop
 * iterations per invocation. */
static uint32_t rows_grid(const td_device *dev, int64_t rows)
{
    int64_t limit = dev->props.limits.maxComputeWorkGroupCount[0];
    return (uint32_t)(rows < 1 ? 1 : rows > limit ? limit : rows);
}

static td_status unsupported(td_device *dev, size_t i, int32_t kernel, const char *what)
{
    return td_error_set(dev->ctx, TD_ERR_UNSUPPORTED,
                        "vulkan segment call %zu (%s): %s does not fit the 32-bit indices of the kernels", i,
                        kernel_name(kernel), what);
}

/* The row kernels: the ranges every backend checks (td_row_kernel_extents),
 * and every size within the shaders' 32-bit indices. */
static td_status plan_rows(td_device *dev, size_t i, const td_kernel_call *c, plan *pl)
{
    static const int slots[TD_ROW_SLOTS] = {SLOT_OUT, SLOT_OUT2, SLOT_A, SLOT_B, SLOT_C};
    const td_arg *args[TD_ROW_SLOTS] = {&c->out, &c->out2, &c->a, &c->b, &c->c};
    int32_t k = c->kernel;
    int64_t need[TD_ROW_SLOTS];
    char why[160];
    if (td_row_kernel_extents(c, need, why, sizeof why) != 0)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu (%s): %s", i,
                            kernel_name(k), why);
    int64_t sizes[3] = {0, 0, 0};
    switch (k) {
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX:
    case TD_KERNEL_LAYER_NORM:
    case TD_KERNEL_LAYER_NORM_BACKWARD: sizes[0] = c->p.rows.rows; sizes[1] = c->p.rows.cols; break;
    case TD_KERNEL_CAST: sizes[0] = c->p.cast.n; break;
    /* Headroom of 3: the shader rounds cols up to whole Philox blocks. */
    case TD_KERNEL_DROPOUT_MASK:
        sizes[0] = c->p.dropout.rows;
        sizes[1] = c->p.dropout.cols > 2147483647LL - 3 ? INT64_MAX : c->p.dropout.cols;
        break;
    default: sizes[0] = c->p.gather.n; sizes[1] = c->p.gather.vocab; sizes[2] = c->p.gather.dim; break;
    }
    for (int d = 0; d < 3; d++)
        if (!fits_i32(sizes[d]))
            return unsupported(dev, i, k, "a size");
    for (int s = 0; s < TD_ROW_SLOTS; s++) {
        if (!fits_i32(need[s]))
            return unsupported(dev, i, k, "an element count");
        /* layer norm writes its statistics to out2 as well */
        bool written = s == TD_ROW_OUT || (s == TD_ROW_OUT2 && k == TD_KERNEL_LAYER_NORM);
        td_status st = use_slot(dev, i, k, pl, slots[s], *args[s], 0, need[s], written);
        if (st != TD_OK)
            return st;
    }
    pl->skip = need[TD_ROW_OUT] == 0;
    return TD_OK;
}

/* IM2COL, COL2IM, POOL, POOL_BACKWARD: the geometry must be valid and every
 * index the shaders form (element counts, tap coordinates) fit an int32. */
static td_status plan_conv(td_device *dev, size_t i, const td_kernel_call *c, plan *pl)
{
    int32_t k = c->kernel;
    bool pool = k == TD_KERNEL_POOL || k == TD_KERNEL_POOL_BACKWARD;
    const td_conv_params *g = pool ? &c->p.pool.geo : &c->p.conv;
    const char *why = pool ? td_pool_check(&c->p.pool) : td_conv_check(g, 0);
    if (why)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu (%s): %s", i,
                            kernel_name(k), why);
    int64_t image = td_conv_image_count(g), patches = td_conv_patch_count(g), pooled = td_conv_pooled_count(g);
    int64_t pad_h = g->pad_top < 0 ? -g->pad_top : g->pad_top, pad_w = g->pad_left < 0 ? -g->pad_left : g->pad_left;
    if (!fits_i32(image) || !fits_i32(pooled) || !fits_i32(g->kh * g->kw) || (!pool && !fits_i32(patches)))
        return unsupported(dev, i, k, "an element count");
    /* Each term is below 2^62 (td_conv_check), so the sums cannot overflow
     * once the terms are known to fit an int32. */
    int64_t terms[] = {g->oh * g->stride_h, g->kh * g->dil_h, g->ow * g->stride_w, g->kw * g->dil_w};
    for (int t = 0; t < 4; t++)
        if (!fits_i32(terms[t]))
            return unsupported(dev, i, k, "a tap coordinate");
    int64_t reach_h = (g->h > terms[0] ? g->h : terms[0]) + pad_h + terms[1];
    int64_t reach_w = (g->w > terms[2] ? g->w : terms[2]) + pad_w + terms[3];
    if (!fits_i32(reach_h) || !fits_i32(reach_w))
        return unsupported(dev, i, k, "a tap coordinate");
    td_status s = TD_OK;
    switch (k) {
    case TD_KERNEL_IM2COL:
        pl->skip = patches == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, patches, true);
        if (s == TD_OK && patches > 0)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, image, false);
        break;
    case TD_KERNEL_COL2IM:
        pl->skip = image == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, image, true);
        if (s == TD_OK && image > 0)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, patches, false);
        break;
    case TD_KERNEL_POOL:
        pl->skip = pooled == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, pooled, true);
        if (s == TD_OK && pooled > 0)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, image, false);
        break;
    default: { /* POOL_BACKWARD */
        bool max = c->p.pool.mode == TD_POOL_MAX;
        pl->skip = image == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, image, true);
        if (s == TD_OK && image > 0 && max)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, image, false);
        if (s == TD_OK && image > 0 && max)
            s = use_slot(dev, i, k, pl, SLOT_B, c->b, 0, pooled, false);
        if (s == TD_OK && image > 0)
            s = use_slot(dev, i, k, pl, SLOT_C, c->c, 0, pooled, false);
        break;
    }
    }
    return s;
}

/* Checks a call and fills its argument ranges. */
static td_status plan_args(td_device *dev, size_t i, const td_kernel_call *c, plan *pl)
{
    td_status s = TD_OK;
    int32_t k = c->kernel;
    switch (k) {
    case TD_KERNEL_FILL:
    case TD_KERNEL_COPY:
        if (c->n < 0 || !fits_i32(c->n))
            return unsupported(dev, i, k, "n");
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, c->n, true);
        if (s == TD_OK && k == TD_KERNEL_COPY) {
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, c->n, false);
            if (s == TD_OK && c->n > 0 && c->a.buffer == c->out.buffer && c->a.offset != c->out.offset &&
                c->a.offset < c->out.offset + (uint64_t)c->n && c->out.offset < c->a.offset + (uint64_t)c->n)
                return td_error_set(dev->ctx, TD_ERR_UNSUPPORTED,
                                    "vulkan segment call %zu (copy): source and destination overlap", i);
        }
        pl->skip = c->n == 0;
        return s;
    case TD_KERNEL_ELEMENTWISE: {
        const td_ew_params *p = &c->p.ew;
        if (p->op < 0 || p->op >= TD_EW_OP_COUNT)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu: unknown elementwise op %d",
                                i, p->op);
        int64_t n = 1, lo, hi;
        for (int d = 0; d < 4; d++) {
            if (p->dims[d] < 0 || !fits_i32(p->dims[d]) || !fits_i32(p->a_strides[d]) || !fits_i32(p->b_strides[d]))
                return unsupported(dev, i, k, "a dim or stride");
            n *= p->dims[d];
            if (!fits_i32(n))
                return unsupported(dev, i, k, "the element count");
        }
        pl->skip = n == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, n, true);
        view_extent(p->dims, p->a_strides, 4, &lo, &hi);
        if (s == TD_OK)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, lo, hi, false);
        bool binary = td_ew_arity(p->op) == 2;
        view_extent(p->dims, p->b_strides, 4, &lo, &hi);
        if (s == TD_OK && binary)
            s = use_slot(dev, i, k, pl, SLOT_B, c->b, lo, hi, false);
        return s;
    }
    case TD_KERNEL_REDUCE: {
        const td_reduce_params *p = &c->p.reduce;
        int64_t dims[8], strides[8], out_n = 1, red_n = 1, lo, hi;
        for (int d = 0; d < 4; d++) {
            if (p->out_dims[d] < 0 || p->red_dims[d] < 0 || !fits_i32(p->out_dims[d]) ||
                !fits_i32(p->red_dims[d]) || !fits_i32(p->out_strides[d]) || !fits_i32(p->red_strides[d]))
                return unsupported(dev, i, k, "a dim or stride");
            out_n *= p->out_dims[d];
            red_n *= p->red_dims[d];
            if (!fits_i32(out_n) || !fits_i32(red_n))
                return unsupported(dev, i, k, "an element count");
            dims[d] = p->out_dims[d];
            strides[d] = p->out_strides[d];
            dims[4 + d] = p->red_dims[d];
            strides[4 + d] = p->red_strides[d];
        }
        pl->skip = out_n == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, out_n, true);
        view_extent(dims, strides, 8, &lo, &hi);
        if (s == TD_OK)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, lo, hi, false);
        return s;
    }
    case TD_KERNEL_GEMM: {
        const td_gemm_params *p = &c->p.gemm;
        if (p->m < 0 || p->n < 0 || p->k < 0 || p->lda < 0 || p->ldb < 0 || p->ldc < 0)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu (gemm): negative size", i);
        char why[160];
        if (td_gemm_check(p, why, sizeof why) != 0)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu (gemm): %s", i, why);
        int64_t a_rows = p->trans_a ? p->k : p->m, a_cols = p->trans_a ? p->m : p->k;
        int64_t b_rows = p->trans_b ? p->n : p->k, b_cols = p->trans_b ? p->k : p->n;
        int64_t a_hi = a_rows > 0 && a_cols > 0 ? (a_rows - 1) * p->lda + a_cols : 0;
        int64_t b_hi = b_rows > 0 && b_cols > 0 ? (b_rows - 1) * p->ldb + b_cols : 0;
        int64_t c_hi = p->m > 0 && p->n > 0 ? (p->m - 1) * p->ldc + p->n : 0;
        if (!fits_i32(a_hi) || !fits_i32(b_hi) || !fits_i32(c_hi) || !fits_i32(p->m) || !fits_i32(p->n) ||
            !fits_i32(p->k))
            return unsupported(dev, i, k, "a matrix");
        if ((p->m + TD_VK_GEMM_TILE - 1) / TD_VK_GEMM_TILE > dev->props.limits.maxComputeWorkGroupCount[1] ||
            (p->n + TD_VK_GEMM_TILE - 1) / TD_VK_GEMM_TILE > dev->props.limits.maxComputeWorkGroupCount[0])
            return unsupported(dev, i, k, "the tile grid");
        pl->skip = c_hi == 0;
        s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, c_hi, true);
        if (s == TD_OK && p->m > 0 && p->n > 0)
            s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, a_hi, false);
        if (s == TD_OK && p->m > 0 && p->n > 0)
            s = use_slot(dev, i, k, pl, SLOT_B, c->b, 0, b_hi, false);
        return s;
    }
    case TD_KERNEL_XENT_FORWARD:
    case TD_KERNEL_XENT_BACKWARD: {
        const td_xent_params *p = &c->p.xent;
        if (p->rows < 0 || p->cols < 0)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu (%s): negative size", i,
                                kernel_name(k));
        int64_t n = p->rows * p->cols;
        if (!fits_i32(p->rows) || !fits_i32(p->cols) || !fits_i32(n))
            return unsupported(dev, i, k, "the logits");
        if (k == TD_KERNEL_XENT_FORWARD) {
            pl->skip = p->rows == 0;
            s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, p->rows, true);
            if (s == TD_OK)
                s = use_slot(dev, i, k, pl, SLOT_OUT2, c->out2, 0, n, true);
            if (s == TD_OK)
                s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, n, false);
            if (s == TD_OK)
                s = use_slot(dev, i, k, pl, SLOT_B, c->b, 0, p->rows, false);
        } else {
            pl->skip = n == 0;
            s = use_slot(dev, i, k, pl, SLOT_OUT, c->out, 0, n, true);
            if (s == TD_OK)
                s = use_slot(dev, i, k, pl, SLOT_A, c->a, 0, n, false);
            if (s == TD_OK && n > 0)
                s = use_slot(dev, i, k, pl, SLOT_B, c->b, 0, p->rows, false);
            if (s == TD_OK && n > 0)
                s = use_slot(dev, i, k, pl, SLOT_C, c->c, 0, p->rows, false);
        }
        return s;
    }
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX:
    case TD_KERNEL_CAST:
    case TD_KERNEL_DROPOUT_MASK:
    case TD_KERNEL_GATHER_ROWS:
    case TD_KERNEL_SCATTER_ADD_ROWS:
    case TD_KERNEL_LAYER_NORM:
    case TD_KERNEL_LAYER_NORM_BACKWARD: return plan_rows(dev, i, c, pl);
    case TD_KERNEL_IM2COL:
    case TD_KERNEL_COL2IM:
    case TD_KERNEL_POOL:
    case TD_KERNEL_POOL_BACKWARD: return plan_conv(dev, i, c, pl);
    default:
        if (k >= 0 && k < TD_KERNEL_COUNT)
            return td_error_set(dev->ctx, TD_ERR_UNSUPPORTED, "vulkan segment call %zu: kernel %s has no shader yet",
                                i, kernel_name(k));
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment call %zu: unknown kernel %d", i, k);
    }
}

/* Chooses each binding's buffer range and the argument offset within it. */
static td_status plan_windows(td_device *dev, size_t i, int32_t kernel, plan *pl)
{
    VkDeviceSize max_range = dev->props.limits.maxStorageBufferRange;
    VkDeviceSize align = dev->props.limits.minStorageBufferOffsetAlignment;
    if (align < 4)
        align = 4;
    for (int s = 0; s < TD_VK_BINDINGS; s++) {
        if (!pl->used[s]) {
            pl->info[s] = (VkDescriptorBufferInfo){dev->dummy, 0, VK_WHOLE_SIZE};
            pl->rel[s] = 0;
            continue;
        }
        td_buffer *buf = pl->buf[s];
        if (buf->size <= max_range) {
            pl->info[s] = (VkDescriptorBufferInfo){buf->buffer, 0, VK_WHOLE_SIZE};
            pl->rel[s] = 0;
            continue;
        }
        VkDeviceSize start = ((VkDeviceSize)pl->lo[s] * 4) / align * align;
        VkDeviceSize end = (VkDeviceSize)pl->hi[s] * 4;
        if (end - start > max_range)
            return td_error_set(dev->ctx, TD_ERR_UNSUPPORTED,
                                "vulkan segment call %zu (%s): one tensor spans %llu bytes, more than the "
                                "device's maxStorageBufferRange (%llu bytes)",
                                i, kernel_name(kernel), (unsigned long long)(end - start),
                                (unsigned long long)max_range);
        pl->info[s] = (VkDescriptorBufferInfo){buf->buffer, start, end - start};
        pl->rel[s] = -(int64_t)(start / 4);
    }
    return TD_OK;
}

/* Offset of argument `slot` within its binding, as the shaders index. */
static int64_t arg_offset(const plan *pl, const td_kernel_call *c, int slot)
{
    const td_arg *args[TD_VK_BINDINGS] = {&c->out, &c->out2, &c->a, &c->b, &c->c};
    return pl->used[slot] ? (int64_t)args[slot]->offset + pl->rel[slot] : 0;
}

static void plan_push(const td_device *dev, const td_kernel_call *c, plan *pl)
{
    memset(pl->push, 0, sizeof pl->push);
    pl->groups[0] = pl->groups[1] = pl->groups[2] = 1;
    uint32_t out = (uint32_t)arg_offset(pl, c, SLOT_OUT);
    switch (c->kernel) {
    case TD_KERNEL_FILL: {
        pc_fill p = {(uint32_t)c->n, out, c->alpha};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(c->n, 256);
        break;
    }
    case TD_KERNEL_COPY: {
        pc_copy p = {(uint32_t)c->n, out, (uint32_t)arg_offset(pl, c, SLOT_A)};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(c->n, 256);
        break;
    }
    case TD_KERNEL_ELEMENTWISE: {
        const td_ew_params *e = &c->p.ew;
        pc_ew p = {.op = e->op, .alpha = e->alpha, .out_off = out,
                   .a_off = (int32_t)arg_offset(pl, c, SLOT_A), .b_off = (int32_t)arg_offset(pl, c, SLOT_B)};
        int64_t n = 1;
        for (int d = 0; d < 4; d++) {
            p.dims[d] = (int32_t)e->dims[d];
            p.a_strides[d] = (int32_t)e->a_strides[d];
            p.b_strides[d] = pl->used[SLOT_B] ? (int32_t)e->b_strides[d] : 0;
            n *= e->dims[d];
        }
        p.n = (uint32_t)n;
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(n, 256);
        break;
    }
    case TD_KERNEL_REDUCE: {
        const td_reduce_params *r = &c->p.reduce;
        pc_reduce p = {.alpha = r->alpha, .out_off = out, .a_off = (int32_t)arg_offset(pl, c, SLOT_A)};
        int64_t out_n = 1, red_n = 1;
        for (int d = 0; d < 4; d++) {
            p.out_dims[d] = (int32_t)r->out_dims[d];
            p.out_strides[d] = (int32_t)r->out_strides[d];
            p.red_dims[d] = (int32_t)r->red_dims[d];
            p.red_strides[d] = (int32_t)r->red_strides[d];
            out_n *= r->out_dims[d];
            red_n *= r->red_dims[d];
        }
        p.out_count = (uint32_t)out_n;
        p.red_count = (uint32_t)red_n;
        /* Few long sums: a workgroup each; otherwise an invocation each. */
        p.mode = red_n >= 256 && out_n < 2048 ? 1 : 0;
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = p.mode ? (uint32_t)(out_n > 65535 ? 65535 : out_n) : grid(out_n, 256);
        break;
    }
    case TD_KERNEL_GEMM: {
        const td_gemm_params *g = &c->p.gemm;
        pc_gemm p = {g->trans_a != 0, g->trans_b != 0, (int32_t)g->m, (int32_t)g->n, (int32_t)g->k,
                     (int32_t)g->lda, (int32_t)g->ldb, (int32_t)g->ldc, g->alpha, g->beta,
                     (uint32_t)arg_offset(pl, c, SLOT_A), (uint32_t)arg_offset(pl, c, SLOT_B), out,
                     g->precision};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = (uint32_t)((g->n + TD_VK_GEMM_TILE - 1) / TD_VK_GEMM_TILE);
        pl->groups[1] = (uint32_t)((g->m + TD_VK_GEMM_TILE - 1) / TD_VK_GEMM_TILE);
        break;
    }
    case TD_KERNEL_XENT_FORWARD: {
        pc_xent_fwd p = {(uint32_t)c->p.xent.rows, (uint32_t)c->p.xent.cols, out,
                         (uint32_t)arg_offset(pl, c, SLOT_OUT2), (uint32_t)arg_offset(pl, c, SLOT_A),
                         (uint32_t)arg_offset(pl, c, SLOT_B)};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = rows_grid(dev, c->p.xent.rows);
        break;
    }
    case TD_KERNEL_XENT_BACKWARD: {
        int64_t n = c->p.xent.rows * c->p.xent.cols;
        pc_xent_bwd p = {(uint32_t)n, (uint32_t)c->p.xent.cols, out, (uint32_t)arg_offset(pl, c, SLOT_A),
                         (uint32_t)arg_offset(pl, c, SLOT_B), (uint32_t)arg_offset(pl, c, SLOT_C)};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(n, 256);
        break;
    }
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX: {
        const td_rows_params *r = &c->p.rows;
        pc_rows p = {(uint32_t)r->rows, (uint32_t)r->cols, out, (uint32_t)arg_offset(pl, c, SLOT_A),
                     (uint32_t)r->mode};
        memcpy(pl->push, &p, sizeof p);
        /* softmax: a workgroup per row; argmax: an invocation per row */
        pl->groups[0] = c->kernel == TD_KERNEL_SOFTMAX ? rows_grid(dev, r->rows) : grid(r->rows, 64);
        break;
    }
    case TD_KERNEL_LAYER_NORM: {
        const td_rows_params *r = &c->p.rows;
        pc_norm p = {(uint32_t)r->rows, (uint32_t)r->cols, out, (uint32_t)arg_offset(pl, c, SLOT_OUT2),
                     (uint32_t)arg_offset(pl, c, SLOT_A), r->epsilon};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(r->rows, 64);
        break;
    }
    case TD_KERNEL_LAYER_NORM_BACKWARD: {
        const td_rows_params *r = &c->p.rows;
        pc_norm_bwd p = {(uint32_t)r->rows, (uint32_t)r->cols, out, (uint32_t)arg_offset(pl, c, SLOT_A),
                         (uint32_t)arg_offset(pl, c, SLOT_B), (uint32_t)arg_offset(pl, c, SLOT_C)};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(r->rows, 64);
        break;
    }
    case TD_KERNEL_CAST: {
        pc_cast p = {(uint32_t)c->p.cast.n, out, (uint32_t)arg_offset(pl, c, SLOT_A), (uint32_t)c->p.cast.from};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(c->p.cast.n, 256);
        break;
    }
    case TD_KERNEL_DROPOUT_MASK: {
        const td_dropout_params *d = &c->p.dropout;
        pc_dropout p = {(uint32_t)d->rows, (uint32_t)d->cols, out, (uint32_t)arg_offset(pl, c, SLOT_B),
                        d->seed_lo, d->seed_hi, d->keep_threshold, d->scale};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(d->rows * ((d->cols + 3) / 4), 64);
        break;
    }
    case TD_KERNEL_GATHER_ROWS:
    case TD_KERNEL_SCATTER_ADD_ROWS: {
        const td_gather_params *g = &c->p.gather;
        pc_gather p = {(uint32_t)g->n, (uint32_t)g->vocab, (uint32_t)g->dim, out,
                       (uint32_t)arg_offset(pl, c, SLOT_A), (uint32_t)arg_offset(pl, c, SLOT_B)};
        memcpy(pl->push, &p, sizeof p);
        int64_t items = c->kernel == TD_KERNEL_GATHER_ROWS ? g->n * g->dim : g->vocab * g->dim;
        pl->groups[0] = grid(items, 256);
        break;
    }
    case TD_KERNEL_IM2COL:
    case TD_KERNEL_COL2IM:
    case TD_KERNEL_POOL:
    case TD_KERNEL_POOL_BACKWARD: {
        bool pool = c->kernel == TD_KERNEL_POOL || c->kernel == TD_KERNEL_POOL_BACKWARD;
        const td_conv_params *g = pool ? &c->p.pool.geo : &c->p.conv;
        int64_t count = c->kernel == TD_KERNEL_IM2COL ? td_conv_patch_count(g)
                        : c->kernel == TD_KERNEL_POOL ? td_conv_pooled_count(g)
                                                      : td_conv_image_count(g);
        pc_conv p = {(int32_t)g->n, (int32_t)g->h, (int32_t)g->w, (int32_t)g->c, (int32_t)g->kh, (int32_t)g->kw,
                     (int32_t)g->oh, (int32_t)g->ow, (int32_t)g->stride_h, (int32_t)g->stride_w,
                     (int32_t)g->pad_top, (int32_t)g->pad_left, (int32_t)g->dil_h, (int32_t)g->dil_w,
                     (uint32_t)count, out, (uint32_t)arg_offset(pl, c, SLOT_A), (uint32_t)arg_offset(pl, c, SLOT_B),
                     (uint32_t)arg_offset(pl, c, SLOT_C), pool ? c->p.pool.mode : 0,
                     pool ? c->p.pool.count_include_pad != 0 : 0};
        memcpy(pl->push, &p, sizeof p);
        pl->groups[0] = grid(count, 64);
        break;
    }
    default: break;
    }
}

static bool conflicts(const access *pending, size_t count, const plan *pl)
{
    for (int s = 0; s < TD_VK_BINDINGS; s++) {
        if (!pl->used[s])
            continue;
        for (size_t j = 0; j < count; j++) {
            const access *a = &pending[j];
            if (a->buf == pl->buf[s] && a->lo < pl->hi[s] && pl->lo[s] < a->hi && (a->write || pl->write[s]))
                return true;
        }
    }
    return false;
}

static td_status record(td_device *dev, td_segment *seg, const td_kernel_call *calls, size_t count,
                        const plan *plans, const VkDescriptorSet *sets)
{
    access *pending = NULL;
    if (count > 0) {
        pending = td_alloc(dev->ctx, count * TD_VK_BINDINGS * sizeof *pending);
        if (pending == NULL)
            return TD_OOM(dev->ctx, "vulkan segment recording", count * TD_VK_BINDINGS * sizeof *pending);
    }
    size_t pending_count = 0;
    VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                      /* run again before the last run finished */
                                      .flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT};
    VkResult r = dev->vk.BeginCommandBuffer(seg->cmd, &begin);
    if (r != VK_SUCCESS) {
        td_free(dev->ctx, pending);
        return td_vk_fail(dev->ctx, dev, "vkBeginCommandBuffer", r);
    }
    td_vk_full_barrier(dev, seg->cmd);
    int32_t bound = -1;
    for (size_t i = 0; i < count; i++) {
        const plan *pl = &plans[i];
        if (pl->skip)
            continue;
        if (conflicts(pending, pending_count, pl)) {
            VkMemoryBarrier barrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                       .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                       .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
            dev->vk.CmdPipelineBarrier(seg->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &barrier, 0, NULL, 0, NULL);
            seg->barriers++;
            pending_count = 0;
        }
        for (int s = 0; s < TD_VK_BINDINGS; s++)
            if (pl->used[s])
                pending[pending_count++] = (access){pl->buf[s], pl->lo[s], pl->hi[s], pl->write[s]};
        if (calls[i].kernel != bound) {
            dev->vk.CmdBindPipeline(seg->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev->pipelines[calls[i].kernel]);
            bound = calls[i].kernel;
        }
        dev->vk.CmdBindDescriptorSets(seg->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev->pipeline_layout, 0, 1, &sets[i], 0,
                                NULL);
        dev->vk.CmdPushConstants(seg->cmd, dev->pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, TD_VK_PUSH_BYTES,
                           pl->push);
        dev->vk.CmdDispatch(seg->cmd, pl->groups[0], pl->groups[1], pl->groups[2]);
        seg->dispatches++;
    }
    td_free(dev->ctx, pending);
    r = dev->vk.EndCommandBuffer(seg->cmd);
    if (r != VK_SUCCESS)
        return td_vk_fail(dev->ctx, dev, "vkEndCommandBuffer", r);
    return TD_OK;
}

static td_status allocate_sets(td_device *dev, td_segment *seg, size_t count, VkDescriptorSet *sets)
{
    uint32_t n = count > 0 ? (uint32_t)count : 1;
    VkDescriptorPoolSize size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, n * TD_VK_BINDINGS};
    VkDescriptorPoolCreateInfo pool_info = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                            .maxSets = n,
                                            .poolSizeCount = 1,
                                            .pPoolSizes = &size};
    VkResult r = dev->vk.CreateDescriptorPool(dev->device, &pool_info, NULL, &seg->pool);
    if (r != VK_SUCCESS) {
        seg->pool = VK_NULL_HANDLE;
        return td_vk_fail(dev->ctx, dev, "vkCreateDescriptorPool", r);
    }
    if (count == 0)
        return TD_OK;
    VkDescriptorSetLayout *layouts = td_alloc(dev->ctx, count * sizeof *layouts);
    if (layouts == NULL)
        return TD_OOM(dev->ctx, "vulkan descriptor layouts", count * sizeof *layouts);
    for (size_t i = 0; i < count; i++)
        layouts[i] = dev->set_layout;
    VkDescriptorSetAllocateInfo info = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                        .descriptorPool = seg->pool,
                                        .descriptorSetCount = (uint32_t)count,
                                        .pSetLayouts = layouts};
    r = dev->vk.AllocateDescriptorSets(dev->device, &info, sets);
    td_free(dev->ctx, layouts);
    if (r != VK_SUCCESS)
        return td_vk_fail(dev->ctx, dev, "vkAllocateDescriptorSets", r);
    return TD_OK;
}

static void write_sets(td_device *dev, size_t count, const plan *plans, const VkDescriptorSet *sets)
{
    for (size_t i = 0; i < count; i++) {
        VkWriteDescriptorSet writes[TD_VK_BINDINGS];
        for (uint32_t s = 0; s < TD_VK_BINDINGS; s++)
            writes[s] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                               .dstSet = sets[i],
                                               .dstBinding = s,
                                               .descriptorCount = 1,
                                               .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .pBufferInfo = &plans[i].info[s]};
        dev->vk.UpdateDescriptorSets(dev->device, TD_VK_BINDINGS, writes, 0, NULL);
    }
}

td_status td_vk_segment_create(td_device *dev, const td_kernel_call *calls, size_t count, td_segment **out)
{
    *out = NULL;
    td_status s = td_vk_check_lost(dev);
    if (s != TD_OK)
        return s;
    if (count > 0 && calls == NULL)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment_create: NULL calls");
    if (count > UINT32_MAX / TD_VK_BINDINGS)
        return td_error_set(dev->ctx, TD_ERR_UNSUPPORTED, "vulkan segment_create: %zu calls", count);
    plan *plans = NULL;
    VkDescriptorSet *sets = NULL;
    if (count > 0) {
        plans = td_alloc_zeroed(dev->ctx, count * sizeof *plans);
        sets = td_alloc_zeroed(dev->ctx, count * sizeof *sets);
        if (plans == NULL || sets == NULL) {
            td_free(dev->ctx, plans);
            td_free(dev->ctx, sets);
            return TD_OOM(dev->ctx, "a vulkan segment plan", count * sizeof *plans);
        }
    }
    for (size_t i = 0; i < count && s == TD_OK; i++) {
        s = plan_args(dev, i, &calls[i], &plans[i]);
        if (s == TD_OK)
            s = plan_windows(dev, i, calls[i].kernel, &plans[i]);
        if (s == TD_OK)
            plan_push(dev, &calls[i], &plans[i]);
    }
    td_segment *seg = NULL;
    if (s == TD_OK) {
        seg = td_alloc_zeroed(dev->ctx, sizeof *seg);
        if (seg == NULL)
            s = TD_OOM(dev->ctx, "a vulkan segment", sizeof *seg);
    }
    if (s == TD_OK)
        s = allocate_sets(dev, seg, count, sets);
    if (s == TD_OK) {
        write_sets(dev, count, plans, sets);
        VkCommandBufferAllocateInfo info = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                            .commandPool = dev->pool,
                                            .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                            .commandBufferCount = 1};
        VkResult r = dev->vk.AllocateCommandBuffers(dev->device, &info, &seg->cmd);
        if (r != VK_SUCCESS) {
            seg->cmd = VK_NULL_HANDLE;
            s = td_vk_fail(dev->ctx, dev, "vkAllocateCommandBuffers", r);
        }
    }
    if (s == TD_OK)
        s = record(dev, seg, calls, count, plans, sets);
    td_free(dev->ctx, plans);
    td_free(dev->ctx, sets);
    if (s != TD_OK) {
        td_vk_segment_destroy(dev, seg);
        return s;
    }
    *out = seg;
    return TD_OK;
}

td_status td_vk_segment_run(td_device *dev, td_segment *segment)
{
    td_status s = td_vk_check_lost(dev);
    if (s != TD_OK)
        return s;
    if (segment == NULL)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "vulkan segment_run: NULL segment");
    /* Copies enqueued before the run must stay before it in the batch. */
    s = td_vk_close_transfer(dev);
    if (s == TD_OK)
        s = td_vk_batch_push(dev, segment->cmd);
    if (s == TD_OK)
        dev->host_dirty = true; /* see td_vk_sync_host */
    return s;
}

void td_vk_segment_destroy(td_device *dev, td_segment *segment)
{
    if (segment == NULL)
        return;
    /* A segment may still be executing (or be in the unsubmitted batch);
     * its command buffer and sets must outlive that. */
    for (size_t i = 0; i < dev->batch_count; i++)
        if (dev->batch[i] == segment->cmd) {
            td_vk_submit(dev, NULL);
            break;
        }
    /* Bounded, unlike vkQueueWaitIdle: a hung queue leaves the segment
     * allocated (logged) instead of hanging the caller. A lost device has
     * nothing in flight any more, so freeing is safe then. */
    if (dev->submitted > 0) {
        td_status w = td_vk_wait(dev, dev->submitted, td_context_timeout_ms(dev->ctx));
        if (w != TD_OK && w != TD_ERR_DEVICE_LOST) {
            td_log(dev->ctx, TD_LOG_ERROR, "vulkan: segment still executing after the timeout; abandoned");
            return;
        }
    }
    if (segment->cmd != VK_NULL_HANDLE)
        dev->vk.FreeCommandBuffers(dev->device, dev->pool, 1, &segment->cmd);
    if (segment->pool != VK_NULL_HANDLE)
        dev->vk.DestroyDescriptorPool(dev->device, segment->pool, NULL);
    td_free(dev->ctx, segment);
}

uint32_t td_vulkan_segment_barrier_count(const td_segment *segment)
{
    return segment != NULL ? segment->barriers : 0;
}

uint32_t td_vulkan_segment_dispatch_count(const td_segment *segment)
{
    return segment != NULL ? segment->dispatches : 0;
}
