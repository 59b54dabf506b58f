/* What td_trainer_create accepts: the options' defaults and checks, the
 * optimizer an option names, and the checks of the listed parameters and
 * metrics. Everything a caller can get wrong is refused here, by name,
 * before anything is allocated. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tandem/train.h"
#include "td_trainer_state.h"

/* The programs take td_precision as it is, as a td_gemm_precision. */
_Static_assert((int)TD_PRECISION_FP32 == (int)TD_GEMM_FP32 && (int)TD_PRECISION_BF16 == (int)TD_GEMM_BF16,
               "td_precision and td_gemm_precision must agree");
/* And td_wire as a td_ring_wire. */
_Static_assert((int)TD_WIRE_FP32 == (int)TD_RING_WIRE_FP32 && (int)TD_WIRE_BF16 == (int)TD_RING_WIRE_BF16,
               "td_wire and td_ring_wire must agree");

td_status td_trainer_options_init(td_trainer_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->optimizer = TD_OPTIMIZER_SGD;
    o->learning_rate = 0.0f; /* the optimizer's own (td_optimizer_default_learning_rate), chosen at create */
    o->schedule.kind = TD_SCHEDULE_CONSTANT;
    o->b1 = 0.9f;
    o->b2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = 1e-4f;
    o->decay = 0.9f;
    o->accumulate_steps = 1;
    return TD_OK;
}

static td_status check_unit_interval(td_context *ctx, const char *field, float v)
{
    if (!(v >= 0.0f && v < 1.0f))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: %s %g is outside [0, 1)", field,
                            (double)v);
    return TD_OK;
}

/* Every float of the options must be finite, whichever optimizer reads
 * it: a NaN left in a field the optimizer ignores today is read the day the
 * caller switches optimizers. */
static td_status check_finite_fields(td_context *ctx, const td_trainer_options *o)
{
    const struct {
        const char *name;
        float value;
    } fields[] = {
        {"learning_rate", o->learning_rate}, {"momentum", o->momentum},         {"b1", o->b1},
        {"b2", o->b2},                       {"eps", o->eps},                   {"weight_decay", o->weight_decay},
        {"decay", o->decay},                 {"max_norm", o->max_norm},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!isfinite(fields[i].value))
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: %s is %g, expected a finite value",
                                fields[i].name, (double)fields[i].value);
    return TD_OK;
}

float td_optimizer_default_learning_rate(td_optimizer_kind kind)
{
    /* The rates optax's examples start from: plain SGD takes larger steps
     * than the adaptive optimizers, whose steps are already normalised by
     * the gradients' scale. */
    switch (kind) {
    case TD_OPTIMIZER_SGD:
        return 0.01f;
    case TD_OPTIMIZER_ADAM:
    case TD_OPTIMIZER_ADAMW:
    case TD_OPTIMIZER_RMSPROP:
        return 1e-3f;
    default:
        return 0.0f;
    }
}

td_status td_trainer_check_options(td_context *ctx, const td_trainer_options *o)
{
    td_status s = check_finite_fields(ctx, o);
    if (s != TD_OK)
        return s;
    /* The kind first: an unknown one has no default rate to speak of. */
    if (td_optimizer_default_learning_rate(o->optimizer) == 0.0f)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: optimizer %d is not a td_optimizer_kind",
                            (int)o->optimizer);
    /* 0 stands for the optimizer's default, filled in by td_trainer_create. */
    if (o->schedule.kind == TD_SCHEDULE_CONSTANT && (!isfinite(o->learning_rate) || !(o->learning_rate >= 0.0f)))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: learning_rate %g must be finite and > 0 (or 0: the optimizer's default)",
                            (double)o->learning_rate);
    if (o->schedule.kind != TD_SCHEDULE_CONSTANT && (s = td_schedule_check(ctx, &o->schedule, "td_trainer_create")) != TD_OK)
        return s;
    if (!isfinite(o->max_norm) || o->max_norm < 0.0f)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: max_norm %g must be finite and >= 0 (0 = off)",
                            (double)o->max_norm);
    if (o->optimizer == TD_OPTIMIZER_ADAMW && (!isfinite(o->weight_decay) || o->weight_decay < 0.0f))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: weight_decay %g must be finite and >= 0",
                            (double)o->weight_decay);
    if (o->on_device_loss != TD_ON_DEVICE_LOSS_FAIL && o->on_device_loss != TD_ON_DEVICE_LOSS_CONTINUE)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: on_device_loss %d, expected TD_ON_DEVICE_LOSS_FAIL (0) or _CONTINUE (1)",
                            (int)o->on_device_loss);
    if (o->precision != TD_PRECISION_FP32 && o->precision != TD_PRECISION_BF16)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: precision %d, expected TD_PRECISION_FP32 (0) or TD_PRECISION_BF16 (1)",
                            (int)o->precision);
    if (o->wire != TD_WIRE_FP32 && o->wire != TD_WIRE_BF16)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: wire %d, expected TD_WIRE_FP32 (0) or TD_WIRE_BF16 (1)", (int)o->wire);
    if (o->accumulate_steps < 1)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: accumulate_steps %u must be >= 1",
                            o->accumulate_steps);
    if (o->n_metrics && !o->metrics)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: metrics is NULL for n_metrics %u",
                            o->n_metrics);
    switch (o->optimizer) {
    case TD_OPTIMIZER_SGD:
        return check_unit_interval(ctx, "momentum", o->momentum);
    case TD_OPTIMIZER_ADAMW:
    case TD_OPTIMIZER_ADAM:
        if ((s = check_unit_interval(ctx, "b1", o->b1)) != TD_OK || (s = check_unit_interval(ctx, "b2", o->b2)) != TD_OK)
            return s;
        break;
    case TD_OPTIMIZER_RMSPROP:
        if ((s = check_unit_interval(ctx, "decay", o->decay)) != TD_OK ||
            (s = check_unit_interval(ctx, "momentum", o->momentum)) != TD_OK)
            return s;
        break;
    default:
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: optimizer %d is not a td_optimizer_kind",
                            (int)o->optimizer);
    }
    /* A zero eps divides 0 by 0 wherever a gradient is exactly zero. */
    if (!isfinite(o->eps) || !(o->eps > 0.0f))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: eps %g must be finite and > 0",
                            (double)o->eps);
    return TD_OK;
}

const td_optimizer *td_trainer_optimizer_for(td_optimizer_kind kind)
{
    switch (kind) {
    case TD_OPTIMIZER_ADAM:
        return &td_optimizer_adam;
    case TD_OPTIMIZER_ADAMW:
        return &td_optimizer_adamw;
    case TD_OPTIMIZER_RMSPROP:
        return &td_optimizer_rmsprop;
    case TD_OPTIMIZER_SGD:
    default:
        return &td_optimizer_sgd;
    }
}

td_status td_trainer_check_params(td_graph *g, uint32_t n_params, const td_node *params)
{
    td_context *ctx = g->ctx;
    uint8_t *seen = td_alloc_zeroed(ctx, g->count + 1);
    if (!seen)
        return TD_OOM(ctx, "parameter bookkeeping", g->count + 1);
    td_status s = TD_OK;
    for (uint32_t i = 0; i < n_params && s == TD_OK; i++) {
        td_node p = params[i];
        if (p >= g->count)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is node %u, which does not exist (the graph has %u nodes)",
                             i, p, g->count);
        else if (g->nodes[p].op != TD_OP_PARAM)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is node %u, which is not a parameter (td_graph_param)", i,
                             p);
        else if (g->nodes[p].is_state)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is state '%s' (node %u), which its td_graph_state_update "
                             "changes; only trained parameters may be listed",
                             i, g->nodes[p].name, p);
        else if (seen[p])
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is node %u, which is listed twice", i, p);
        else
            seen[p] = 1;
    }
    td_free(ctx, seen);
    return s;
}

td_status td_trainer_check_metrics(td_graph *g, uint32_t n, const td_node *metrics)
{
    for (uint32_t i = 0; i < n; i++) {
        td_node m = metrics[i];
        if (m >= g->count)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_trainer_create: metrics[%u] is node %u, which does not exist (the graph has %u nodes)",
                                i, m, g->count);
        if (g->nodes[m].dtype != TD_F32) {
            char what[48];
            snprintf(what, sizeof what, "metrics[%u] (node %u)", i, m);
            return td_dtype_error(g->ctx, "td_trainer_create", what, g->nodes[m].dtype, "an f32 scalar");
        }
        if (td_shape_count(&g->nodes[m].shape) != 1)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_trainer_create: metrics[%u] is node %u with %lld elements, expected an f32 scalar", i,
                                m, (long long)td_shape_count(&g->nodes[m].shape));
    }
    return TD_OK;
}
