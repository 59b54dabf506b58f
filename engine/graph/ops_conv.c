/* 2-D convolution (NHWC x HWIO, flax's layout) and pooling.
 *
 * CONV2D lowers to IM2COL into its extra arena memory and one GEMM of the
 * patches with the kernel seen as [KH*KW*C, O]. The patches stay alive as
 * long as the conv node, so the kernel gradient (CONV2D_GRAD_KERNEL, which
 * takes the conv node as input) is one GEMM patches^T x gy with no second
 * im2col. The input gradient is gy x kernel^T into extra memory, then
 * COL2IM. Why im2col + GEMM and not a direct kernel: the GEMM is the
 * tuned part on every backend (OpenBLAS, CLBlast, our shaders); bench/conv
 * measures the split. */
#include <string.h>

#include "td_op.h"

/* The geometry of a conv/pool node for input x (per device). */
static td_conv_params geometry(const td_node_def *n, const td_shape *x, int64_t kh, int64_t kw)
{
    td_conv_params p;
    memset(&p, 0, sizeof p);
    p.n = x->dims[0];
    p.h = x->dims[1];
    p.w = x->dims[2];
    p.c = x->dims[3];
    p.kh = kh;
    p.kw = kw;
    p.stride_h = n->attr.conv.stride[0];
    p.stride_w = n->attr.conv.stride[1];
    p.dil_h = n->attr.conv.dilation[0];
    p.dil_w = n->attr.conv.dilation[1];
    p.pad_top = n->attr.conv.pad[0];
    p.pad_left = n->attr.conv.pad[2];
    p.oh = (p.h + n->attr.conv.pad[0] + n->attr.conv.pad[1] - p.dil_h * (kh - 1) - 1) / p.stride_h + 1;
    p.ow = (p.w + n->attr.conv.pad[2] + n->attr.conv.pad[3] - p.dil_w * (kw - 1) - 1) / p.stride_w + 1;
    return p;
}

static td_status check_fits(const td_graph *g, td_node id, const td_shape *x, int64_t kh, int64_t kw)
{
    const td_node_def *n = &g->nodes[id];
    int64_t span_h = n->attr.conv.dilation[0] * (kh - 1) + 1, span_w = n->attr.conv.dilation[1] * (kw - 1) + 1;
    int64_t in_h = x->dims[1] + n->attr.conv.pad[0] + n->attr.conv.pad[1];
    int64_t in_w = x->dims[2] + n->attr.conv.pad[2] + n->attr.conv.pad[3];
    if (span_h > in_h || span_w > in_w)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "node %u (%s): the %lldx%lld window (dilated to %lldx%lld) is larger than the padded "
                            "input %lldx%lld",
                            id, td_op_def_of(n->op)->name, (long long)kh, (long long)kw, (long long)span_h,
                            (long long)span_w, (long long)in_h, (long long)in_w);
    return TD_OK;
}

/* ---- CONV2D ---- */

static td_status infer_conv(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                            uint32_t devices)
{
    (void)devices;
    const td_shape *x = in[0], *k = in[1];
    if (x->rank != 4 || k->rank != 4)
        return td_shape_mismatch(g, id, "conv2d expects x [N, H, W, C] and kernel [KH, KW, C, O]", x, k);
    if (k->dims[2] != x->dims[3])
        return td_shape_mismatch(g, id, "conv2d: the kernel's input channels (dim 2) differ from x's channels (dim 3)",
                                 x, k);
    td_status s = check_fits(g, id, x, k->dims[0], k->dims[1]);
    if (s != TD_OK)
        return s;
    td_conv_params p = geometry(&g->nodes[id], x, k->dims[0], k->dims[1]);
    out->rank = 4;
    out->dims[0] = p.n;
    out->dims[1] = p.oh;
    out->dims[2] = p.ow;
    out->dims[3] = k->dims[3];
    return TD_OK;
}

static uint64_t patches_of(const td_shape *out, const td_shape *k)
{
    return (uint64_t)out->dims[0] * (uint64_t)out->dims[1] * (uint64_t)out->dims[2] *
           (uint64_t)(k->dims[0] * k->dims[1] * k->dims[2]);
}

static uint64_t extra_conv(const td_graph *g, const td_plan *plan, td_node id)
{
    return patches_of(&plan->shapes[id], &plan->shapes[g->nodes[id].in[1]]);
}

static uint32_t calls_two(const td_graph *g, const td_plan *plan, td_node id)
{
    (void)g, (void)plan, (void)id;
    return 2;
}

static void emit_conv(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    const td_shape *x = &e->plan->shapes[n->in[0]], *k = &e->plan->shapes[n->in[1]], *y = &e->plan->shapes[id];
    td_arg patches = td_emit_arg(e, id);
    patches.offset = e->plan->slots[id].extra;
    c[0].kernel = TD_KERNEL_IM2COL;
    c[0].a = td_emit_arg(e, n->in[0]);
    c[0].out = patches;
    c[0].p.conv = geometry(n, x, k->dims[0], k->dims[1]);
    td_gemm_params *p = &c[1].p.gemm;
    c[1].kernel = TD_KERNEL_GEMM;
    c[1].a = patches;
    c[1].b = td_emit_arg(e, n->in[1]);
    c[1].out = td_emit_arg(e, id);
    p->m = y->dims[0] * y->dims[1] * y->dims[2];
    p->k = k->dims[0] * k->dims[1] * k->dims[2];
    p->n = k->dims[3];
    p->lda = p->k ? p->k : 1;
    p->ldb = p->n ? p->n : 1;
    p->ldc = p->ldb;
    p->alpha = 1.0f;
}

static td_status grad_conv(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    /* Copies, not pointers into g->nodes: every append below may move the
     * node array (a pointer kept across it read freed memory). */
    const td_shape x_shape = g->nodes[n.in[0]].shape, k_shape = g->nodes[n.in[1]].shape;
    const td_shape *x = &x_shape, *k = &k_shape;
    td_node t;
    td_status s = TD_OK;
    if (td_grad_needs(c, n.in[1])) {
        td_node_def d = td_node_make(TD_OP_CONV2D_GRAD_KERNEL, 2, id, gy, 0);
        d.attr.conv = n.attr.conv;
        d.attr.conv.window[0] = k->dims[0];
        d.attr.conv.window[1] = k->dims[1];
        d.attr.conv.out_channels = k->dims[3];
        memcpy(d.attr.conv.in_hwc, x->dims + 1, sizeof d.attr.conv.in_hwc);
        if ((s = td_graph_append(g, &d, &t)) == TD_OK)
            s = td_grad_add(c, n.in[1], t);
    }
    if (s == TD_OK && td_grad_needs(c, n.in[0])) {
        td_node_def d = td_node_make(TD_OP_CONV2D_GRAD_INPUT, 2, gy, n.in[1], 0);
        d.attr.conv = n.attr.conv;
        memcpy(d.attr.conv.in_hwc, x->dims + 1, sizeof d.attr.conv.in_hwc);
        if ((s = td_graph_append(g, &d, &t)) == TD_OK)
            s = td_grad_add(c, n.in[0], t);
    }
    return s;
}

/* ---- CONV2D_GRAD_KERNEL: (conv node, gy) -> [KH, KW, C, O] ---- */

static td_status infer_grad_kernel(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                   uint32_t devices)
{
    (void)in, (void)devices;
    const td_node_def *n = &g->nodes[id];
    out->rank = 4;
    out->dims[0] = n->attr.conv.window[0];
    out->dims[1] = n->attr.conv.window[1];
    out->dims[2] = n->attr.conv.in_hwc[2];
    out->dims[3] = n->attr.conv.out_channels;
    return TD_OK;
}

static void emit_grad_kernel(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    td_node conv = n->in[0];
    const td_shape *y = &e->plan->shapes[conv], *gk = &e->plan->shapes[id];
    td_gemm_params *p = &c->p.gemm;
    c->kernel = TD_KERNEL_GEMM;
    c->a = td_emit_arg(e, conv);
    c->a.offset = e->plan->slots[conv].extra; /* the forward's patches */
    c->b = td_emit_arg(e, n->in[1]);
    c->out = td_emit_arg(e, id);
    p->trans_a = 1;
    p->m = gk->dims[0] * gk->dims[1] * gk->dims[2];
    p->n = gk->dims[3];
    p->k = y->dims[0] * y->dims[1] * y->dims[2];
    p->lda = p->m ? p->m : 1;
    p->ldb = p->n ? p->n : 1;
    p->ldc = p->ldb;
    p->alpha = 1.0f;
}

/* ---- CONV2D_GRAD_INPUT: (gy, kernel) -> [N, H, W, C] ---- */

static td_status infer_grad_input(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                  uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    out->rank = 4;
    out->dims[0] = in[0]->dims[0];
    memcpy(out->dims + 1, n->attr.conv.in_hwc, sizeof n->attr.conv.in_hwc);
    return TD_OK;
}

static uint64_t extra_grad_input(const td_graph *g, const td_plan *plan, td_node id)
{
    return patches_of(&plan->shapes[g->nodes[id].in[0]], &plan->shapes[g->nodes[id].in[1]]);
}

static void emit_grad_input(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    const td_shape *gy = &e->plan->shapes[n->in[0]], *k = &e->plan->shapes[n->in[1]], *x = &e->plan->shapes[id];
    td_arg patches = td_emit_arg(e, id);
    patches.offset = e->plan->slots[id].extra;
    td_gemm_params *p = &c[0].p.gemm;
    c[0].kernel = TD_KERNEL_GEMM;
    c[0].a = td_emit_arg(e, n->in[0]);
    c[0].b = td_emit_arg(e, n->in[1]);
    c[0].out = patches;
    p->trans_b = 1;
    p->m = gy->dims[0] * gy->dims[1] * gy->dims[2];
    p->n = k->dims[0] * k->dims[1] * k->dims[2];
    p->k = k->dims[3];
    p->lda = p->k ? p->k : 1;
    p->ldb = p->k ? p->k : 1;
    p->ldc = p->n ? p->n : 1;
    p->alpha = 1.0f;
    c[1].kernel = TD_KERNEL_COL2IM;
    c[1].a = patches;
    c[1].out = td_emit_arg(e, id);
    c[1].p.conv = geometry(n, x, k->dims[0], k->dims[1]);
}

/* ---- POOL and POOL_GRAD ---- */

static td_status infer_pool(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                            uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    const td_shape *x = in[0];
    if (x->rank != 4)
        return td_shape_mismatch(g, id, "pooling expects x [N, H, W, C]", x, x);
    td_status s = check_fits(g, id, x, n->attr.conv.window[0], n->attr.conv.window[1]);
    if (s != TD_OK)
        return s;
    td_conv_params p = geometry(n, x, n->attr.conv.window[0], n->attr.conv.window[1]);
    *out = *x;
    out->dims[1] = p.oh;
    out->dims[2] = p.ow;
    return TD_OK;
}

static td_pool_params pool_params(const td_node_def *n, const td_shape *x)
{
    td_pool_params p;
    memset(&p, 0, sizeof p);
    p.geo = geometry(n, x, n->attr.conv.window[0], n->attr.conv.window[1]);
    p.mode = n->attr.conv.mode;
    p.count_include_pad = n->attr.conv.count_include_pad;
    return p;
}

static void emit_pool(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_POOL;
    c->a = td_emit_arg(e, n->in[0]);
    c->out = td_emit_arg(e, id);
    c->p.pool = pool_params(n, &e->plan->shapes[n->in[0]]);
}

static td_status grad_pool(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    td_node_def d = td_node_make(TD_OP_POOL_GRAD, 3, n.in[0], id, gy);
    d.attr.conv = n.attr.conv;
    td_node t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, n.in[0], t) : s;
}

static td_status infer_pool_grad(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[0];
    return TD_OK;
}

static void emit_pool_grad(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_POOL_BACKWARD;
    c->a = td_emit_arg(e, n->in[0]);
    c->b = td_emit_arg(e, n->in[1]);
    c->c = td_emit_arg(e, n->in[2]);
    c->out = td_emit_arg(e, id);
    c->p.pool = pool_params(n, &e->plan->shapes[n->in[0]]);
}

const td_op_def td_op_conv2d = {"conv2d", 0, infer_conv, grad_conv, calls_two, extra_conv, emit_conv};
const td_op_def td_op_conv2d_grad_kernel = {"conv2d_grad_kernel", TD_OPF_READS_FIRST_EXTRA, infer_grad_kernel, NULL,
                                            NULL, NULL, emit_grad_kernel};
const td_op_def td_op_conv2d_grad_input = {"conv2d_grad_input", 0, infer_grad_input, NULL, calls_two,
                                           extra_grad_input, emit_grad_input};
const td_op_def td_op_pool = {"pool2d", 0, infer_pool, grad_pool, NULL, NULL, emit_pool};
const td_op_def td_op_pool_grad = {"pool2d_grad", 0, infer_pool_grad, NULL, NULL, NULL, emit_pool_grad};

/* ---- builders ---- */

/* Pads of one spatial axis for SAME / VALID / EXPLICIT. */
static void axis_pads(td_padding_kind kind, int64_t in, int64_t span, int64_t stride, const int64_t *explicit_pad,
                      int64_t *before, int64_t *after)
{
    if (kind == TD_PADDING_EXPLICIT) {
        *before = explicit_pad[0];
        *after = explicit_pad[1];
    } else if (kind == TD_PADDING_SAME) {
        int64_t out = (in + stride - 1) / stride;
        int64_t total = (out - 1) * stride + span - in;
        total = total > 0 ? total : 0;
        *before = total / 2;
        *after = total - *before;
    } else {
        *before = *after = 0;
    }
}

static td_status window_attrs(td_graph *g, const char *fn, td_node x, const int64_t window[2], const int64_t stride[2],
                              const int64_t dilation[2], td_padding_kind padding, const int64_t pad[4],
                              td_node_def *d)
{
    for (int i = 0; i < 2; i++) {
        if (stride[i] < 1 || stride[i] > ((int64_t)1 << 30))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: stride[%d] is %lld, expected 1 to 2^30", fn, i,
                                (long long)stride[i]);
        if (dilation[i] < 1 || dilation[i] > ((int64_t)1 << 30))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: dilation[%d] is %lld, expected 1 to 2^30", fn,
                                i, (long long)dilation[i]);
        if (window[i] < 1 || window[i] > ((int64_t)1 << 30))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: window[%d] is %lld, expected 1 to 2^30", fn, i,
                                (long long)window[i]);
    }
    if (padding != TD_PADDING_SAME && padding != TD_PADDING_VALID && padding != TD_PADDING_EXPLICIT)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: padding %d is not a td_padding_kind", fn,
                            (int)padding);
    if (padding == TD_PADDING_EXPLICIT)
        for (int i = 0; i < 4; i++)
            if (pad[i] < 0 || pad[i] > ((int64_t)1 << 30))
                return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: pad[%d] is %lld, expected 0 to 2^30", fn, i,
                                    (long long)pad[i]);
    const td_shape *xs = &g->nodes[x].shape;
    if (xs->rank != 4)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: x has rank %u, expected 4 (NHWC)", fn, xs->rank);
    for (int i = 0; i < 2; i++) {
        d->attr.conv.window[i] = window[i];
        d->attr.conv.stride[i] = stride[i];
        d->attr.conv.dilation[i] = dilation[i];
        axis_pads(padding, xs->dims[1 + i], dilation[i] * (window[i] - 1) + 1, stride[i], pad + 2 * i,
                  &d->attr.conv.pad[2 * i], &d->attr.conv.pad[2 * i + 1]);
    }
    return TD_OK;
}

td_status td_conv2d_options_init(td_conv2d_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->stride[0] = o->stride[1] = 1;
    o->dilation[0] = o->dilation[1] = 1;
    o->padding = TD_PADDING_SAME;
    return TD_OK;
}

td_status td_graph_conv2d(td_graph *g, td_node x, td_node kernel, const td_conv2d_options *options, td_node *out)
{
    const char *fn = "td_graph_conv2d";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, x, fn, TD_F32)) != TD_OK || (s = td_graph_check_node(g, kernel, fn, TD_F32)) != TD_OK)
        return s;
    td_conv2d_options o;
    td_conv2d_options_init(&o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_conv2d_options, options, &o)) != TD_OK)
        return s;
    const td_shape *ks = &g->nodes[kernel].shape;
    if (ks->rank != 4)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: kernel has rank %u, expected 4 (KH, KW, C, O)", fn,
                            ks->rank);
    td_node_def d = td_node_make(TD_OP_CONV2D, 2, x, kernel, 0);
    int64_t window[2] = {ks->dims[0], ks->dims[1]};
    if ((s = window_attrs(g, fn, x, window, o.stride, o.dilation, o.padding, o.pad, &d)) != TD_OK)
        return s;
    return td_graph_append(g, &d, out);
}

td_status td_pool2d_options_init(td_pool2d_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->window[0] = o->window[1] = 2;
    o->stride[0] = o->stride[1] = 2;
    o->padding = TD_PADDING_VALID;
    o->count_include_pad = true;
    return TD_OK;
}

static td_status pool(td_graph *g, td_node x, const td_pool2d_options *options, int32_t mode, td_node *out,
                      const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    td_pool2d_options o;
    td_pool2d_options_init(&o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_pool2d_options, options, &o)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_POOL, 1, x, 0, 0);
    const int64_t one[2] = {1, 1};
    if ((s = window_attrs(g, fn, x, o.window, o.stride, one, o.padding, o.pad, &d)) != TD_OK)
        return s;
    d.attr.conv.mode = mode;
    d.attr.conv.count_include_pad = o.count_include_pad;
    return td_graph_append(g, &d, out);
}

td_status td_graph_max_pool2d(td_graph *g, td_node x, const td_pool2d_options *options, td_node *out)
{
    return pool(g, x, options, TD_POOL_MAX, out, "td_graph_max_pool2d");
}

td_status td_graph_avg_pool2d(td_graph *g, td_node x, const td_pool2d_options *options, td_node *out)
{
    return pool(g, x, options, TD_POOL_AVG, out, "td_graph_avg_pool2d");
}
