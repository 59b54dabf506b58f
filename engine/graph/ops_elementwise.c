/* ELEMENTWISE: one op of kernels/common/td_ew_ops.h applied with NumPy
 * broadcasting. The kernel expression lives in that list; what lives here
 * is the graph side: the shape rule and each op's gradient, built from
 * other elementwise nodes. */
#include "td_op.h"
#include "td_kernel.h"

static td_status infer(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out, uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    if (td_ew_arity(n->attr.ew.op) == 0)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "node %u: unknown elementwise op %d", id,
                            (int)n->attr.ew.op);
    if (n->n_in == 1) {
        *out = *in[0];
        return TD_OK;
    }
    if (!td_shape_broadcast(in[0], in[1], out))
        return td_shape_mismatch(g, id, "elementwise operands do not broadcast", in[0], in[1]);
    return TD_OK;
}

/* Shorthands for building gradient nodes. */
static td_status ew1(td_grad_ctx *c, int32_t op, float alpha, td_node a, td_node *out)
{
    return td_graph_emit_ew(td_grad_graph(c), op, alpha, a, a, out);
}

static td_status ew2(td_grad_ctx *c, int32_t op, td_node a, td_node b, td_node *out)
{
    return td_graph_emit_ew(td_grad_graph(c), op, 1.0f, a, b, out);
}

/* Adds to `target` (when it needs a gradient) helper_op(x, gy): the
 * *_GRAD ops of the list take the forward value x and the gradient. */
static td_status add_helper(td_grad_ctx *c, td_node target, int32_t helper_op, td_node x, td_node gy)
{
    td_node t;
    td_status s = TD_OK;
    if (td_grad_needs(c, target) && (s = ew2(c, helper_op, x, gy, &t)) == TD_OK)
        s = td_grad_add(c, target, t);
    return s;
}

/* Max/min: the gradient goes to a where mask = 1 and to b elsewhere; on a
 * tie it goes to a (the first operand), stated in graph.h. */
static td_status grad_select(td_grad_ctx *c, td_node a, td_node b, td_node mask, td_node gy)
{
    td_node ga, gb;
    td_status s = ew2(c, TD_EW_MUL, gy, mask, &ga);
    if (s == TD_OK && td_grad_needs(c, a))
        s = td_grad_add(c, a, ga);
    if (s == TD_OK && td_grad_needs(c, b) && (s = ew2(c, TD_EW_SUB, gy, ga, &gb)) == TD_OK)
        s = td_grad_add(c, b, gb);
    return s;
}

static td_status grad(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id]; /* a copy: appending nodes may move the array */
    td_node a = n.in[0], b = n.n_in > 1 ? n.in[1] : n.in[0], t, u;
    td_status s = TD_OK;
    switch (n.attr.ew.op) {
    case TD_EW_SCALE:
        if ((s = ew1(c, TD_EW_SCALE, n.attr.ew.alpha, gy, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        return s;
    case TD_EW_ADD:
    case TD_EW_SUB:
    case TD_EW_AXPY:
        if (td_grad_needs(c, a))
            s = td_grad_add(c, a, gy);
        if (s == TD_OK && td_grad_needs(c, b)) {
            if (n.attr.ew.op == TD_EW_ADD)
                t = gy;
            else
                s = ew1(c, TD_EW_SCALE, n.attr.ew.op == TD_EW_SUB ? -1.0f : n.attr.ew.alpha, gy, &t);
            if (s == TD_OK)
                s = td_grad_add(c, b, t);
        }
        return s;
    case TD_EW_MUL:
        if (td_grad_needs(c, a) && (s = ew2(c, TD_EW_MUL, gy, b, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        if (s == TD_OK && td_grad_needs(c, b) && (s = ew2(c, TD_EW_MUL, gy, a, &t)) == TD_OK)
            s = td_grad_add(c, b, t);
        return s;
    case TD_EW_DIV: /* d(a/b) = da / b - (a/b) db / b */
        if ((s = ew2(c, TD_EW_DIV, gy, b, &t)) != TD_OK)
            return s;
        if (td_grad_needs(c, a))
            s = td_grad_add(c, a, t);
        if (s == TD_OK && td_grad_needs(c, b) && (s = ew2(c, TD_EW_MUL, t, id, &u)) == TD_OK &&
            (s = ew1(c, TD_EW_NEG, 0.0f, u, &u)) == TD_OK)
            s = td_grad_add(c, b, u);
        return s;
    case TD_EW_MAXIMUM:
        if ((s = ew2(c, TD_EW_GE_MASK, a, b, &t)) != TD_OK)
            return s;
        return grad_select(c, a, b, t, gy);
    case TD_EW_MINIMUM:
        if ((s = ew2(c, TD_EW_GE_MASK, b, a, &t)) != TD_OK)
            return s;
        return grad_select(c, a, b, t, gy);
    case TD_EW_GE_MASK:
    case TD_EW_EQUAL:
        return TD_OK; /* piecewise constant: no gradient */
    case TD_EW_NEG:
        if ((s = ew1(c, TD_EW_NEG, 0.0f, gy, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        return s;
    case TD_EW_SQUARE:
        if ((s = ew2(c, TD_EW_MUL, gy, a, &t)) == TD_OK && (s = ew1(c, TD_EW_SCALE, 2.0f, t, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        return s;
    case TD_EW_EXP:
        if ((s = ew2(c, TD_EW_MUL, gy, id, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        return s;
    case TD_EW_LOG:
        if ((s = ew2(c, TD_EW_DIV, gy, a, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        return s;
    case TD_EW_RSQRT: /* d x^-1/2 = -1/2 y^3 */
        if ((s = ew1(c, TD_EW_SQUARE, 0.0f, id, &t)) == TD_OK && (s = ew2(c, TD_EW_MUL, t, id, &t)) == TD_OK &&
            (s = ew2(c, TD_EW_MUL, gy, t, &t)) == TD_OK && (s = ew1(c, TD_EW_SCALE, -0.5f, t, &t)) == TD_OK)
            s = td_grad_add(c, a, t);
        return s;
    case TD_EW_RELU:
        /* The mask from the output: y > 0 exactly where x > 0 (NaN, -0.0
         * and -inf included), so the bits are the same, and x dies at the
         * ReLU, which may then write y over it (lower.c). */
        return add_helper(c, a, TD_EW_RELU_GRAD, id, gy);
    case TD_EW_SQRT: return add_helper(c, a, TD_EW_SQRT_GRAD, id, gy);
    case TD_EW_TANH: return add_helper(c, a, TD_EW_TANH_GRAD, id, gy);
    case TD_EW_SIGMOID: return add_helper(c, a, TD_EW_SIGMOID_GRAD, id, gy);
    case TD_EW_SILU: return add_helper(c, a, TD_EW_SILU_GRAD, a, gy);
    case TD_EW_GELU_TANH: return add_helper(c, a, TD_EW_GELU_TANH_GRAD, a, gy);
    case TD_EW_GELU_ERF: return add_helper(c, a, TD_EW_GELU_ERF_GRAD, a, gy);
    case TD_EW_RELU_GRAD: /* linear in the gradient, the mask is flat */
        return add_helper(c, b, TD_EW_RELU_GRAD, a, gy);
    default:
        return td_error_set(g->ctx, TD_ERR_UNSUPPORTED,
                            "value_and_grad: node %u (%s) has no gradient rule (second derivatives of activations "
                            "are not built in)",
                            id, td_ew_name(n.attr.ew.op));
    }
}

static void emit(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    td_emit_elementwise(e, c, n->attr.ew.op, n->attr.ew.alpha, id, n->in[0], n->n_in > 1 ? n->in[1] : n->in[0]);
}

const td_op_def td_op_elementwise = {"elementwise", TD_OPF_IN_PLACE, infer, grad, NULL, NULL, emit};

/* ---- builders ---- */

static td_status elementwise(td_graph *g, int32_t ew_op, float alpha, td_node a, td_node b, td_node *out,
                             const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    if (td_ew_arity(ew_op) == 2 && (s = td_graph_check_node(g, b, fn, TD_F32)) != TD_OK)
        return s;
    return td_graph_emit_ew(g, ew_op, alpha, a, b, out);
}

#define TD_UNARY_BUILDER(fn_name, EW)                                    \
    td_status fn_name(td_graph *g, td_node a, td_node *out)              \
    {                                                                    \
        return elementwise(g, TD_EW_##EW, 0.0f, a, a, out, #fn_name);    \
    }
#define TD_BINARY_BUILDER(fn_name, EW)                                          \
    td_status fn_name(td_graph *g, td_node a, td_node b, td_node *out)          \
    {                                                                           \
        return elementwise(g, TD_EW_##EW, 1.0f, a, b, out, #fn_name);           \
    }

TD_BINARY_BUILDER(td_graph_add, ADD)
TD_BINARY_BUILDER(td_graph_sub, SUB)
TD_BINARY_BUILDER(td_graph_mul, MUL)
TD_BINARY_BUILDER(td_graph_div, DIV)
TD_BINARY_BUILDER(td_graph_maximum, MAXIMUM)
TD_BINARY_BUILDER(td_graph_minimum, MINIMUM)
TD_BINARY_BUILDER(td_graph_equal, EQUAL)
TD_UNARY_BUILDER(td_graph_relu, RELU)
TD_UNARY_BUILDER(td_graph_neg, NEG)
TD_UNARY_BUILDER(td_graph_exp, EXP)
TD_UNARY_BUILDER(td_graph_log, LOG)
TD_UNARY_BUILDER(td_graph_sqrt, SQRT)
TD_UNARY_BUILDER(td_graph_tanh, TANH)
TD_UNARY_BUILDER(td_graph_sigmoid, SIGMOID)
TD_UNARY_BUILDER(td_graph_silu, SILU)

td_status td_graph_gelu(td_graph *g, td_node a, bool approximate, td_node *out)
{
    return elementwise(g, approximate ? TD_EW_GELU_TANH : TD_EW_GELU_ERF, 0.0f, a, a, out, "td_graph_gelu");
}

td_status td_graph_scale(td_graph *g, td_node a, float factor, td_node *out)
{
    if (g && !(factor == factor && factor - factor == 0.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_scale: factor %g is not finite", (double)factor);
    return elementwise(g, TD_EW_SCALE, factor, a, a, out, "td_graph_scale");
}

td_status td_graph_mse(td_graph *g, td_node pred, td_node target, td_node *out)
{
    const char *fn = "td_graph_mse";
    td_node diff, sq;
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, pred, fn, TD_F32)) != TD_OK || (s = td_graph_check_node(g, target, fn, TD_F32)) != TD_OK)
        return s;
    if ((s = td_graph_sub(g, pred, target, &diff)) != TD_OK)
        return s;
    if ((s = td_graph_mul(g, diff, diff, &sq)) != TD_OK)
        return s;
    return td_graph_mean(g, sq, 0, NULL, false, out);
}

td_status td_graph_affine(td_graph *g, td_node y, td_node scale, td_node bias, td_node *out)
{
    td_status s = TD_OK;
    if (scale != TD_NO_NODE && (s = td_graph_mul(g, y, scale, &y)) != TD_OK)
        return s;
    if (bias != TD_NO_NODE && (s = td_graph_add(g, y, bias, &y)) != TD_OK)
        return s;
    *out = y;
    return TD_OK;
}
