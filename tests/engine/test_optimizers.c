/* Optimizers, schedules and clipping against optax's formulas evaluated
 * here in double precision, on one device and on three (whose chunks split
 * the parameters unevenly: 24 trainable floats in a 48-float buffer).
 *
 * Model: pred = x w + b, loss = mse(pred, y), so the mean gradient over the
 * global batch is exactly g_w = (2/B) sum_i x_i r_i, g_b = (2/B) sum_i r_i
 * with r_i = x_i . w + b - y_i. The reference replays the same batches.
 *
 * Tolerance: the trainer computes in float, the reference in double; after
 * five steps every parameter satisfies |p - ref| <= 2e-6 * max(1, |ref|)
 * (a few float roundings per step, which these updates do not amplify).
 * cpu:3 and cpu:1 differ only by the order of the gradient sums. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"

enum { BATCH = 6, FEATURES = 23, NP = FEATURES + 1, STEPS = 5 };
#define PARAM_TOL 2e-6

typedef struct linreg {
    td_context *ctx;
    td_mesh *mesh;
    td_graph *g;
    td_node x, y, w, b, loss;
    td_trainer *trainer;
} linreg;

static void make_batch(int step, float *x, float *y)
{
    test_rng rng = {0x0917 + (uint64_t)step};
    for (int i = 0; i < BATCH * FEATURES; i++)
        x[i] = test_rng_uniform(&rng, -1.0f, 1.0f);
    for (int i = 0; i < BATCH; i++)
        y[i] = test_rng_uniform(&rng, -2.0f, 2.0f);
}

static float initial_param(int i)
{
    return i < FEATURES ? 0.3f * sinf((float)i + 1.0f) : 0.2f;
}

static void build(linreg *m, const char *spec)
{
    memset(m, 0, sizeof *m);
    m->ctx = test_context(30000);
    m->mesh = test_mesh(m->ctx, spec);
    TEST_OK(m->ctx, td_graph_create(m->ctx, &m->g));
    int64_t xd[2] = {BATCH, FEATURES}, yd[2] = {BATCH, 1}, wd[2] = {FEATURES, 1}, bd[1] = {1};
    td_node xw, pred;
    TEST_OK(m->ctx, td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x));
    TEST_OK(m->ctx, td_graph_input(m->g, "y", TD_F32, 2, yd, TD_SHARDED, &m->y));
    TEST_OK(m->ctx, td_graph_param(m->g, "w", 2, wd, &m->w));
    TEST_OK(m->ctx, td_graph_param(m->g, "b", 1, bd, &m->b));
    TEST_OK(m->ctx, td_graph_matmul(m->g, m->x, m->w, &xw));
    TEST_OK(m->ctx, td_graph_add(m->g, xw, m->b, &pred));
    TEST_OK(m->ctx, td_graph_mse(m->g, pred, m->y, &m->loss));
}

static void set_initial(linreg *m)
{
    int64_t wd[2] = {FEATURES, 1}, bd[1] = {1};
    float w[FEATURES], b = initial_param(FEATURES);
    for (int i = 0; i < FEATURES; i++)
        w[i] = initial_param(i);
    td_tensor *tw = test_tensor_f32(m->ctx, 2, wd, w), *tb = test_tensor_f32(m->ctx, 1, bd, &b);
    TEST_OK(m->ctx, td_trainer_set_param(m->trainer, m->w, tw));
    TEST_OK(m->ctx, td_trainer_set_param(m->trainer, m->b, tb));
    td_tensor_destroy(tw);
    td_tensor_destroy(tb);
}

/* Reads w and b as device `device` holds them into out[NP]. */
static void read_params(linreg *m, uint32_t device, float *out)
{
    int64_t wd[2] = {FEATURES, 1}, bd[1] = {1};
    td_tensor *tw = test_tensor(m->ctx, TD_F32, 2, wd), *tb = test_tensor(m->ctx, TD_F32, 1, bd);
    TEST_OK(m->ctx, td_trainer_read_param(m->trainer, m->w, device, tw));
    TEST_OK(m->ctx, td_trainer_read_param(m->trainer, m->b, device, tb));
    memcpy(out, test_f32(tw), FEATURES * sizeof(float));
    out[FEATURES] = test_f32(tb)[0];
    td_tensor_destroy(tw);
    td_tensor_destroy(tb);
}

static void step(linreg *m, int s, float *loss)
{
    int64_t xd[2] = {BATCH, FEATURES}, yd[2] = {BATCH, 1};
    td_tensor *x = test_tensor(m->ctx, TD_F32, 2, xd), *y = test_tensor(m->ctx, TD_F32, 2, yd);
    make_batch(s, test_f32(x), test_f32(y));
    td_binding bind[2] = {{m->x, x}, {m->y, y}};
    TEST_OK(m->ctx, td_trainer_step(m->trainer, 2, bind, loss));
    td_tensor_destroy(x);
    td_tensor_destroy(y);
}

/* Trains w and b (or w only) for `steps` steps on `spec`; out[NP] gets the
 * parameters of the last device; replicas are checked after every step. */
static void run_trainer(const char *spec, const td_trainer_options *o, bool train_b, int steps, float *out)
{
    linreg m;
    build(&m, spec);
    td_node params[2] = {m.w, m.b};
    TEST_OK(m.ctx, td_trainer_create(m.g, m.mesh, m.loss, train_b ? 2 : 1, params, o, &m.trainer));
    set_initial(&m);
    for (int s = 0; s < steps; s++) {
        step(&m, s, NULL);
        bool same = false;
        TEST_OK(m.ctx, td_trainer_replicas_identical(m.trainer, &same));
        cr_assert(same, "%s: replicas differ after step %d", spec, s);
    }
    read_params(&m, test_mesh_size(m.mesh) - 1, out);
    td_context_destroy(m.ctx);
}

/* ---- the reference: optax's formulas in double ---- */

static double ref_schedule(const td_schedule *s, double learning_rate, uint64_t step)
{
    const double pi = 3.14159265358979323846;
    switch (s->kind) {
    case TD_SCHEDULE_WARMUP_COSINE_DECAY:
        if (step < s->warmup_steps)
            return s->init_value + ((double)s->peak_value - s->init_value) * (double)step / (double)s->warmup_steps;
        else {
            double span = (double)(s->decay_steps - s->warmup_steps);
            double k = fmin((double)(step - s->warmup_steps), span);
            double c = 0.5 * (1.0 + cos(pi * k / span));
            return s->end_value + ((double)s->peak_value - s->end_value) * c;
        }
    case TD_SCHEDULE_CONSTANT:
    default:
        return learning_rate;
    }
}

static void ref_gradient(int s, const double *p, double *g)
{
    float xf[BATCH * FEATURES], yf[BATCH];
    make_batch(s, xf, yf);
    memset(g, 0, NP * sizeof *g);
    for (int i = 0; i < BATCH; i++) {
        double r = p[FEATURES] - yf[i];
        for (int j = 0; j < FEATURES; j++)
            r += (double)xf[i * FEATURES + j] * p[j];
        for (int j = 0; j < FEATURES; j++)
            g[j] += 2.0 * r * xf[i * FEATURES + j] / BATCH;
        g[FEATURES] += 2.0 * r / BATCH;
    }
}

static void run_reference(const td_trainer_options *o, bool train_b, int steps, double *p)
{
    double m[NP] = {0}, v[NP] = {0}, g[NP];
    const double b1 = o->b1, b2 = o->b2, eps = o->eps, mom = o->momentum, decay = o->decay;
    const int n = train_b ? NP : FEATURES;
    for (int i = 0; i < NP; i++)
        p[i] = initial_param(i);
    for (int s = 0; s < steps; s++) {
        ref_gradient(s, p, g);
        if (o->max_norm > 0) {
            double sq = 0;
            for (int i = 0; i < n; i++)
                sq += g[i] * g[i];
            double norm = sqrt(sq);
            for (int i = 0; norm >= o->max_norm && i < n; i++)
                g[i] = g[i] * (o->max_norm / norm);
        }
        const double lr = ref_schedule(&o->schedule, o->learning_rate, (uint64_t)s);
        const double t = s + 1;
        for (int i = 0; i < n; i++) {
            double u = g[i];
            switch (o->optimizer) {
            case TD_OPTIMIZER_SGD:
                if (mom > 0) {
                    m[i] = g[i] + mom * m[i];
                    u = o->nesterov ? g[i] + mom * m[i] : m[i];
                }
                break;
            case TD_OPTIMIZER_ADAM:
            case TD_OPTIMIZER_ADAMW:
                m[i] = (1 - b1) * g[i] + b1 * m[i];
                v[i] = (1 - b2) * g[i] * g[i] + b2 * v[i];
                u = (m[i] / (1 - pow(b1, t))) / (sqrt(v[i] / (1 - pow(b2, t))) + eps);
                if (o->optimizer == TD_OPTIMIZER_ADAMW)
                    u += (double)o->weight_decay * p[i];
                break;
            case TD_OPTIMIZER_RMSPROP:
                v[i] = (1 - decay) * g[i] * g[i] + decay * v[i];
                u = g[i] / sqrt(v[i] + eps);
                if (mom > 0) {
                    m[i] = u + mom * m[i];
                    u = o->nesterov ? u + mom * m[i] : m[i];
                }
                break;
            }
            p[i] -= lr * u;
        }
    }
}

static void expect_params_close(const float *got, const double *want, double tol, const char *what)
{
    for (int i = 0; i < NP; i++)
        cr_assert(fabs(got[i] - want[i]) <= tol * fmax(1.0, fabs(want[i])), "%s: param %d = %.9g, expected %.9g", what,
                  i, (double)got[i], want[i]);
}

/* The trainer on cpu:1 and cpu:3 against the reference and each other. */
static void check_against_reference(const td_trainer_options *o, const char *what)
{
    double ref[NP], initial[NP];
    float one[NP], three[NP];
    run_reference(o, true, STEPS, ref);
    run_reference(o, true, 0, initial);
    run_trainer("cpu:1", o, true, STEPS, one);
    run_trainer("cpu:3", o, true, STEPS, three);
    expect_params_close(one, ref, PARAM_TOL, what);
    expect_params_close(three, ref, PARAM_TOL, what);
    for (int i = 0; i < NP; i++)
        cr_assert(test_close(three[i], one[i], 1e-6, 1e-7), "%s: cpu:3 param %d = %.9g, cpu:1 %.9g", what, i,
                  (double)three[i], (double)one[i]);
    /* The comparison means something only if training moved the parameters. */
    double moved = 0;
    for (int i = 0; i < NP; i++)
        moved = fmax(moved, fabs(ref[i] - initial[i]));
    cr_assert_gt(moved, 1e-3, "%s: the parameters hardly moved (%g)", what, moved);
}

static td_trainer_options options_for(td_optimizer_kind kind, float lr)
{
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.optimizer = kind;
    o.learning_rate = lr;
    return o;
}

Test(optimizers, sgd_plain)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_SGD, 0.05f);
    check_against_reference(&o, "sgd");
}

Test(optimizers, sgd_momentum)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_SGD, 0.05f);
    o.momentum = 0.9f;
    check_against_reference(&o, "sgd momentum");
}

Test(optimizers, sgd_nesterov)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_SGD, 0.05f);
    o.momentum = 0.9f;
    o.nesterov = true;
    check_against_reference(&o, "sgd nesterov");
}

Test(optimizers, adam)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_ADAM, 0.01f);
    check_against_reference(&o, "adam");
}

Test(optimizers, adamw)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_ADAMW, 0.01f);
    o.weight_decay = 0.5f; /* large enough to matter in 5 steps */
    check_against_reference(&o, "adamw");
}

Test(optimizers, adam_with_warmup_cosine_schedule)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_ADAM, 1.0f);
    o.schedule = (td_schedule){.kind = TD_SCHEDULE_WARMUP_COSINE_DECAY,
                               .init_value = 0.001f,
                               .peak_value = 0.02f,
                               .warmup_steps = 2,
                               .decay_steps = 6,
                               .end_value = 0.002f};
    check_against_reference(&o, "adam + warmup cosine");
}

Test(optimizers, rmsprop)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_RMSPROP, 0.01f);
    check_against_reference(&o, "rmsprop");
}

Test(optimizers, rmsprop_momentum)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_RMSPROP, 0.01f);
    o.momentum = 0.5f;
    check_against_reference(&o, "rmsprop momentum");
}

Test(optimizers, rmsprop_nesterov)
{
    td_trainer_options o = options_for(TD_OPTIMIZER_RMSPROP, 0.01f);
    o.momentum = 0.5f;
    o.nesterov = true;
    check_against_reference(&o, "rmsprop nesterov");
}

Test(optimizers, clipping_above_and_below_the_threshold)
{
    /* The first gradient's norm, from the reference, sets thresholds on
     * either side of it. */
    double p[NP], g[NP], sq = 0;
    for (int i = 0; i < NP; i++)
        p[i] = initial_param(i);
    ref_gradient(0, p, g);
    for (int i = 0; i < NP; i++)
        sq += g[i] * g[i];
    const float norm = (float)sqrt(sq);
    cr_assert_gt(norm, 0.5f);

    /* Below the threshold: exactly plain SGD. */
    td_trainer_options o = options_for(TD_OPTIMIZER_SGD, 0.05f), plain = o;
    o.max_norm = 4.0f * norm;
    float clipped_off[NP], sgd[NP], clipped_on[NP];
    run_trainer("cpu:3", &o, true, 1, clipped_off);
    run_trainer("cpu:3", &plain, true, 1, sgd);
    for (int i = 0; i < NP; i++)
        cr_assert_eq(clipped_off[i], sgd[i], "param %d: %.9g with a loose max_norm, %.9g without", i,
                     (double)clipped_off[i], (double)sgd[i]);
    check_against_reference(&o, "sgd, loose clip");

    /* Above: the step is the clipped one, p - lr * g * max_norm / |g|. */
    o.max_norm = 0.25f * norm;
    run_trainer("cpu:3", &o, true, 1, clipped_on);
    for (int i = 0; i < NP; i++) {
        double want = p[i] - 0.05 * g[i] * (double)o.max_norm / sqrt(sq);
        cr_assert(fabs(clipped_on[i] - want) <= 1e-6 * fmax(1.0, fabs(want)), "param %d: %.9g, expected %.9g", i,
                  (double)clipped_on[i], want);
    }
    check_against_reference(&o, "sgd, tight clip");
    o.optimizer = TD_OPTIMIZER_ADAM;
    o.learning_rate = 0.01f;
    check_against_reference(&o, "adam, tight clip");
}

Test(optimizers, only_listed_parameters_change)
{
    /* Train w only, with AdamW's decay: b must keep its value bit for bit,
     * and w must follow the reference with b held fixed. */
    td_trainer_options o = options_for(TD_OPTIMIZER_ADAMW, 0.01f);
    o.weight_decay = 0.5f;
    o.max_norm = 0.5f;
    double ref[NP];
    run_reference(&o, false, STEPS, ref);
    float got[NP];
    run_trainer("cpu:3", &o, false, STEPS, got);
    cr_assert_eq(got[FEATURES], initial_param(FEATURES), "b changed to %.9g", (double)got[FEATURES]);
    expect_params_close(got, ref, PARAM_TOL, "w only");
}

/* ---- schedules, at hand-computed points ---- */

static float schedule_at(const td_schedule *s, uint64_t step)
{
    float lr = -1.0f;
    cr_assert_eq(td_schedule_value(NULL, s, step, &lr), TD_OK);
    return lr;
}

#define EXPECT_LR(s, step, want) \
    cr_assert(test_close(schedule_at((s), (step)), (want), 1e-6, 1e-9), "step %d: lr %.9g, expected %.9g", (int)(step), \
              (double)schedule_at((s), (step)), (double)(want))

Test(schedules, constant)
{
    td_schedule s = {.kind = TD_SCHEDULE_CONSTANT, .init_value = 0.125f};
    EXPECT_LR(&s, 0, 0.125);
    EXPECT_LR(&s, 1000000, 0.125);
}

Test(schedules, exponential_decay)
{
    td_schedule s = {.kind = TD_SCHEDULE_EXPONENTIAL_DECAY,
                     .init_value = 0.1f,
                     .decay_rate = 0.5f,
                     .transition_steps = 10,
                     .transition_begin = 5};
    EXPECT_LR(&s, 0, 0.1);
    EXPECT_LR(&s, 5, 0.1); /* nothing before transition_begin */
    EXPECT_LR(&s, 10, 0.1 / sqrt(2.0));
    EXPECT_LR(&s, 15, 0.05);
    EXPECT_LR(&s, 24, 0.1 * pow(0.5, 1.9));
    s.staircase = true;
    EXPECT_LR(&s, 10, 0.1);
    EXPECT_LR(&s, 14, 0.1);
    EXPECT_LR(&s, 15, 0.05);
    EXPECT_LR(&s, 24, 0.05);
    EXPECT_LR(&s, 25, 0.025);
    s.has_end_value = true;
    s.end_value = 0.02f;
    EXPECT_LR(&s, 25, 0.025);
    EXPECT_LR(&s, 35, 0.02); /* 0.0125 clipped */
    EXPECT_LR(&s, 1000, 0.02);
    /* A growing rate is clipped from above. */
    td_schedule up = {.kind = TD_SCHEDULE_EXPONENTIAL_DECAY,
                      .init_value = 1.0f,
                      .decay_rate = 2.0f,
                      .transition_steps = 1,
                      .has_end_value = true,
                      .end_value = 5.0f};
    EXPECT_LR(&up, 2, 4.0);
    EXPECT_LR(&up, 3, 5.0);
}

Test(schedules, cosine_decay)
{
    td_schedule s = {.kind = TD_SCHEDULE_COSINE_DECAY, .init_value = 0.1f, .decay_steps = 100, .alpha = 0.1f};
    EXPECT_LR(&s, 0, 0.1);
    EXPECT_LR(&s, 25, 0.1 * (0.9 * 0.5 * (1 + sqrt(0.5)) + 0.1));
    EXPECT_LR(&s, 50, 0.055);
    EXPECT_LR(&s, 100, 0.01);
    EXPECT_LR(&s, 1000, 0.01);
}

Test(schedules, warmup_cosine_decay)
{
    td_schedule s = {.kind = TD_SCHEDULE_WARMUP_COSINE_DECAY,
                     .init_value = 0.0f,
                     .peak_value = 1.0f,
                     .warmup_steps = 10,
                     .decay_steps = 110,
                     .end_value = 0.1f};
    EXPECT_LR(&s, 0, 0.0);
    EXPECT_LR(&s, 3, 0.3);
    EXPECT_LR(&s, 10, 1.0); /* the boundary: the peak */
    EXPECT_LR(&s, 60, 0.55);
    EXPECT_LR(&s, 110, 0.1);
    EXPECT_LR(&s, 5000, 0.1);
}

Test(schedules, bad_schedules_are_refused)
{
    td_context *ctx = test_context(0);
    float lr;
    struct {
        td_schedule s;
        const char *field;
    } bad[] = {
        {{.kind = (td_schedule_kind)9}, "schedule.kind"},
        {{.kind = TD_SCHEDULE_CONSTANT, .init_value = -1.0f}, "init_value"},
        {{.kind = TD_SCHEDULE_CONSTANT, .init_value = INFINITY}, "init_value"},
        {{.kind = TD_SCHEDULE_EXPONENTIAL_DECAY, .init_value = 1, .decay_rate = 0, .transition_steps = 1}, "decay_rate"},
        {{.kind = TD_SCHEDULE_EXPONENTIAL_DECAY, .init_value = 1, .decay_rate = NAN, .transition_steps = 1}, "decay_rate"},
        {{.kind = TD_SCHEDULE_EXPONENTIAL_DECAY, .init_value = 1, .decay_rate = 0.5f}, "transition_steps"},
        {{.kind = TD_SCHEDULE_EXPONENTIAL_DECAY,
          .init_value = 1,
          .decay_rate = 0.5f,
          .transition_steps = 1,
          .has_end_value = true,
          .end_value = NAN},
         "end_value"},
        {{.kind = TD_SCHEDULE_COSINE_DECAY, .init_value = NAN, .decay_steps = 1}, "init_value"},
        {{.kind = TD_SCHEDULE_COSINE_DECAY, .init_value = 1, .decay_steps = 1, .alpha = 2}, "alpha"},
        {{.kind = TD_SCHEDULE_COSINE_DECAY, .init_value = 1}, "decay_steps"},
        {{.kind = TD_SCHEDULE_WARMUP_COSINE_DECAY, .peak_value = 1, .warmup_steps = 5, .decay_steps = 5}, "decay_steps"},
        {{.kind = TD_SCHEDULE_WARMUP_COSINE_DECAY, .peak_value = INFINITY, .decay_steps = 5}, "peak_value"},
        {{.kind = TD_SCHEDULE_WARMUP_COSINE_DECAY, .peak_value = 1, .end_value = -0.5f, .decay_steps = 5}, "end_value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, bad[i].field, td_schedule_value(ctx, &bad[i].s, 0, &lr));
    td_schedule ok = {.kind = TD_SCHEDULE_CONSTANT, .init_value = 1};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_schedule_value(ctx, NULL, 0, &lr));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_schedule_value(ctx, &ok, 0, NULL));
    td_context_destroy(ctx);
}

/* ---- validation of the trainer's options and parameter list ---- */

Test(optimizers, bad_hyper_parameters_are_refused)
{
    linreg m;
    build(&m, "cpu:1");
    td_node params[2] = {m.w, m.b};
    struct {
        td_optimizer_kind kind;
        size_t field_offset;
        float value;
        const char *name;
    } bad[] = {
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, learning_rate), NAN, "learning_rate"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, learning_rate), INFINITY, "learning_rate"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, learning_rate), -0.1f, "learning_rate"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, momentum), -0.5f, "momentum"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, momentum), 1.0f, "momentum"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, momentum), NAN, "momentum"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, max_norm), -1.0f, "max_norm"},
        {TD_OPTIMIZER_SGD, offsetof(td_trainer_options, max_norm), INFINITY, "max_norm"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, max_norm), NAN, "max_norm"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, b1), 1.0f, "b1"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, b1), -0.1f, "b1"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, b1), NAN, "b1"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, b2), 1.5f, "b2"},
        {TD_OPTIMIZER_ADAMW, offsetof(td_trainer_options, b2), INFINITY, "b2"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, eps), 0.0f, "eps"},
        {TD_OPTIMIZER_ADAM, offsetof(td_trainer_options, eps), NAN, "eps"},
        {TD_OPTIMIZER_RMSPROP, offsetof(td_trainer_options, eps), INFINITY, "eps"},
        {TD_OPTIMIZER_ADAMW, offsetof(td_trainer_options, weight_decay), -1.0f, "weight_decay"},
        {TD_OPTIMIZER_ADAMW, offsetof(td_trainer_options, weight_decay), INFINITY, "weight_decay"},
        {TD_OPTIMIZER_RMSPROP, offsetof(td_trainer_options, decay), 1.0f, "decay"},
        {TD_OPTIMIZER_RMSPROP, offsetof(td_trainer_options, decay), NAN, "decay"},
        {TD_OPTIMIZER_RMSPROP, offsetof(td_trainer_options, momentum), 2.0f, "momentum"},
    };
    /* learning_rate 0 is not among them: it asks for the optimizer's default. */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td_trainer_options o = options_for(bad[i].kind, 0.01f);
        memcpy((char *)&o + bad[i].field_offset, &bad[i].value, sizeof(float));
        td_trainer *t = (td_trainer *)&o; /* must be reset to NULL on failure */
        TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, bad[i].name, td_trainer_create(m.g, m.mesh, m.loss, 2, params, &o, &t));
        cr_assert_null(t, "case %zu: *out not cleared", i);
    }
    td_trainer_options o = options_for((td_optimizer_kind)7, 0.01f);
    td_trainer *t = NULL;
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "optimizer 7", td_trainer_create(m.g, m.mesh, m.loss, 2, params, &o, &t));
    o = options_for(TD_OPTIMIZER_SGD, 0.01f);
    o.schedule.kind = TD_SCHEDULE_COSINE_DECAY; /* decay_steps left 0 */
    o.schedule.init_value = 0.1f;
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "decay_steps", td_trainer_create(m.g, m.mesh, m.loss, 2, params, &o, &t));
    td_context_destroy(m.ctx);
}

Test(optimizers, bad_parameter_lists_are_refused)
{
    linreg m;
    build(&m, "cpu:2");
    td_trainer *t = NULL;
    td_node dup[3] = {m.w, m.b, m.w}, not_param[2] = {m.w, m.x}, missing[1] = {9999};
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "listed twice", td_trainer_create(m.g, m.mesh, m.loss, 3, dup, NULL, &t));
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "not a parameter",
               td_trainer_create(m.g, m.mesh, m.loss, 2, not_param, NULL, &t));
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "9999", td_trainer_create(m.g, m.mesh, m.loss, 1, missing, NULL, &t));
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_trainer_create(m.g, m.mesh, m.loss, 1, NULL, NULL, &t));
    cr_assert_null(t);
    td_context_destroy(m.ctx);
}

Test(optimizers, old_struct_size_gets_the_new_defaults)
{
    /* A caller built before the optimizer fields existed: whatever lies past
     * its struct must be ignored, giving plain SGD. */
    td_trainer_options o;
    memset(&o, 0xFF, sizeof o);
    o.struct_size = offsetof(td_trainer_options, schedule);
    o.optimizer = TD_OPTIMIZER_SGD;
    o.learning_rate = 0.05f;
    float got[NP];
    run_trainer("cpu:3", &o, true, 2, got);
    td_trainer_options plain = options_for(TD_OPTIMIZER_SGD, 0.05f);
    double ref[NP];
    run_reference(&plain, true, 2, ref);
    expect_params_close(got, ref, PARAM_TOL, "old struct_size");
}

Test(optimizers, each_optimizer_has_its_own_default_learning_rate)
{
    /* Naming the optimizer alone must not keep SGD's rate: learning_rate
     * left at its default trains as the optimizer's own rate given. */
    const struct {
        td_optimizer_kind kind;
        float rate;
    } cases[] = {{TD_OPTIMIZER_SGD, 0.01f}, {TD_OPTIMIZER_ADAM, 1e-3f}, {TD_OPTIMIZER_ADAMW, 1e-3f},
                 {TD_OPTIMIZER_RMSPROP, 1e-3f}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cr_assert_eq(td_optimizer_default_learning_rate(cases[k].kind), cases[k].rate, "kind %d",
                     (int)cases[k].kind);
        td_trainer_options o;
        td_trainer_options_init(&o);
        o.optimizer = cases[k].kind;
        float got[NP];
        run_trainer("cpu:1", &o, true, STEPS, got);
        td_trainer_options given = options_for(cases[k].kind, cases[k].rate);
        double ref[NP];
        run_reference(&given, true, STEPS, ref);
        expect_params_close(got, ref, PARAM_TOL, "the optimizer's default rate");
    }
    cr_assert_eq(td_optimizer_default_learning_rate((td_optimizer_kind)9), 0.0f);
}

/* ---- zero parameters, memory ---- */

Test(optimizers, zero_parameters_step_computes_the_loss_only)
{
    /* The graph has 24 parameter floats (more than a gradient bucket of an
     * empty list holds) but none is trained: a step reports the loss and
     * leaves the parameters as set. */
    linreg m;
    build(&m, "cpu:3");
    TEST_OK(m.ctx, td_trainer_create(m.g, m.mesh, m.loss, 0, NULL, NULL, &m.trainer));
    set_initial(&m);
    double p[NP], want = 0;
    for (int i = 0; i < NP; i++)
        p[i] = initial_param(i);
    float xf[BATCH * FEATURES], yf[BATCH];
    make_batch(0, xf, yf);
    for (int i = 0; i < BATCH; i++) {
        double r = p[FEATURES] - yf[i];
        for (int j = 0; j < FEATURES; j++)
            r += (double)xf[i * FEATURES + j] * p[j];
        want += r * r / BATCH;
    }
    for (int s = 0; s < 2; s++) {
        float loss = -1;
        step(&m, 0, &loss);
        cr_assert(test_close(loss, want, 1e-5, 1e-7), "step %d: loss %.9g, expected %.9g", s, (double)loss, want);
    }
    for (uint32_t d = 0; d < 3; d++) {
        float got[NP];
        read_params(&m, d, got);
        for (int i = 0; i < NP; i++)
            cr_assert_eq(got[i], initial_param(i), "device %u param %d changed to %.9g", d, i, (double)got[i]);
    }
    size_t bytes = 1;
    TEST_OK(m.ctx, td_trainer_memory(m.trainer, 0, &bytes));
    cr_assert_eq(bytes, 0);
    td_context_destroy(m.ctx);
}

static size_t state_bytes(const char *spec, const td_trainer_options *o, size_t *per_device, uint32_t *n)
{
    linreg m;
    build(&m, spec);
    td_node params[2] = {m.w, m.b};
    TEST_OK(m.ctx, td_trainer_create(m.g, m.mesh, m.loss, 2, params, o, &m.trainer));
    *n = test_mesh_size(m.mesh);
    size_t total = 0;
    for (uint32_t d = 0; d < *n; d++) {
        TEST_OK(m.ctx, td_trainer_memory(m.trainer, d, &per_device[d]));
        total += per_device[d];
    }
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "device 9", td_trainer_memory(m.trainer, 9, &per_device[0]));
    TEST_FAILS(m.ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_trainer_memory(m.trainer, 0, NULL));
    td_context_destroy(m.ctx);
    return total;
}

Test(optimizers, state_is_split_over_the_owners)
{
    /* The parameter buffer is w (23 floats, padded to 32) then b (padded to
     * 16): 48 floats, 16 per owner on cpu:3. Adam keeps two moments, each
     * twice (current and pending): 16 bytes per float. */
    size_t per[4];
    uint32_t n;
    td_trainer_options adam = options_for(TD_OPTIMIZER_ADAM, 0.01f), sgd = options_for(TD_OPTIMIZER_SGD, 0.01f);
    td_trainer_options rms = options_for(TD_OPTIMIZER_RMSPROP, 0.01f);
    cr_assert_eq(state_bytes("cpu:1", &adam, per, &n), 48 * 16);
    cr_assert_eq(state_bytes("cpu:3", &adam, per, &n), 48 * 16);
    for (uint32_t d = 0; d < n; d++)
        cr_assert_eq(per[d], 16 * 16, "device %u holds %zu bytes", d, per[d]);
    cr_assert_eq(state_bytes("cpu:3", &sgd, per, &n), 0);
    sgd.momentum = 0.9f;
    cr_assert_eq(state_bytes("cpu:3", &sgd, per, &n), 48 * 8);
    cr_assert_eq(state_bytes("cpu:3", &rms, per, &n), 48 * 8);
    rms.momentum = 0.9f;
    cr_assert_eq(state_bytes("cpu:3", &rms, per, &n), 48 * 16);
}

/* The named run schedules: values at the start, the warm-up's end and the
 * end of a 100-update run; an unknown name is refused by name. */
Test(schedules, named_schedules_for_a_run)
{
    td_context *ctx = test_context(0);
    td_schedule s;
    float lr;
    TEST_OK(ctx, td_schedule_for_run(ctx, "constant", 0.5f, 100, &s));
    TEST_OK(ctx, td_schedule_value(ctx, &s, 77, &lr));
    cr_assert_eq(lr, 0.5f);
    TEST_OK(ctx, td_schedule_for_run(ctx, "cosine", 0.5f, 100, &s));
    TEST_OK(ctx, td_schedule_value(ctx, &s, 0, &lr));
    cr_assert_eq(lr, 0.5f);
    TEST_OK(ctx, td_schedule_value(ctx, &s, 50, &lr));
    cr_assert(fabsf(lr - 0.25f) < 1e-6f, "cosine at half the run: %g", (double)lr);
    TEST_OK(ctx, td_schedule_value(ctx, &s, 100, &lr));
    cr_assert(fabsf(lr) < 1e-7f, "cosine at the end: %g", (double)lr);
    TEST_OK(ctx, td_schedule_for_run(ctx, "warmup-cosine", 0.5f, 100, &s));
    cr_assert_eq(s.warmup_steps, 10);
    TEST_OK(ctx, td_schedule_value(ctx, &s, 0, &lr));
    cr_assert_eq(lr, 0.0f);
    TEST_OK(ctx, td_schedule_value(ctx, &s, 5, &lr));
    cr_assert(fabsf(lr - 0.25f) < 1e-6f, "half way up the warm-up: %g", (double)lr);
    TEST_OK(ctx, td_schedule_value(ctx, &s, 10, &lr));
    cr_assert(fabsf(lr - 0.5f) < 1e-6f, "the peak after the warm-up: %g", (double)lr);
    TEST_OK(ctx, td_schedule_value(ctx, &s, 100, &lr));
    cr_assert(fabsf(lr) < 1e-7f, "warmup-cosine at the end: %g", (double)lr);
    TEST_OK(ctx, td_schedule_for_run(ctx, "warmup-cosine", 0.5f, 3, &s)); /* a tiny run still validates */
    TEST_OK(ctx, td_schedule_value(ctx, &s, 1, &lr));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'linear'", td_schedule_for_run(ctx, "linear", 0.5f, 100, &s));
    td_context_destroy(ctx);
}

/* The Adam update's loop (engine/train/optim_adam.c: copies for AVX-512
 * and AVX2, the one this CPU has chosen at load time) against the rule
 * one element at a time, written out here: bitwise at lengths that
 * leave every tail, with and without weight decay, on the first step and a
 * late one, through zeros, signed zeros, subnormals, huge values,
 * infinities and NaNs (NaN for NaN: which NaN's payload survives is not
 * the rule's business). */
#include "td_fixed_double.h"
#include "td_optimizer.h"

static float adam_rule_value(float g, float p, float m, float v, float *m_next, float *v_next, float b1, float b2,
                             float bc1, float bc2, float eps, float lr, float wd)
{
    float mi = (1.0f - b1) * g + b1 * m;
    float vi = (1.0f - b2) * (g * g) + b2 * v;
    *m_next = mi;
    *v_next = vi;
    float u = (mi / bc1) / (sqrtf(vi / bc2) + eps);
    if (wd != 0.0f)
        u = u + wd * p;
    return p - lr * u;
}

static bool same_float(float a, float b)
{
    return (a != a && b != b) || memcmp(&a, &b, sizeof a) == 0;
}

static float awkward_value(test_rng *r, size_t i)
{
    static const float specials[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, 1.0f};
    if (i % 13 == 5)
        return specials[(i / 13) % (sizeof specials / sizeof specials[0])];
    return test_rng_uniform(r, -2.0f, 2.0f);
}

/* One update's operands: awkward gradients, parameters and two state
 * slots (`nonnegative` the one that holds squares: v >= 0, or NaN), and
 * copies of the inputs, which an update in place overwrites. */
typedef struct update_case {
    float *grad, *param, *next, *state, *next_state, *param_before, *state_before;
    td_optimizer_args args;
} update_case;

static void update_case_init(update_case *c, const td_trainer_options *o, size_t n, size_t seed, int nonnegative,
                             bool in_place, float lr, uint64_t count_inc)
{
    const size_t size = n ? n : 1;
    test_rng r = {seed};
    c->grad = malloc(size * sizeof(float));
    c->param = malloc(size * sizeof(float));
    c->next = malloc(size * sizeof(float));
    c->state = malloc(2 * size * sizeof(float));
    c->next_state = malloc(2 * size * sizeof(float));
    c->param_before = malloc(size * sizeof(float));
    c->state_before = malloc(2 * size * sizeof(float));
    cr_assert(c->grad && c->param && c->next && c->state && c->next_state && c->param_before && c->state_before);
    for (size_t i = 0; i < n; i++) {
        c->grad[i] = awkward_value(&r, i);
        c->param[i] = awkward_value(&r, i + 3);
        for (int slot = 0; slot < 2; slot++) {
            const float x = awkward_value(&r, i + 6 + 3 * (size_t)slot);
            c->state[(size_t)slot * n + i] = slot == nonnegative ? fabsf(x) : x;
        }
    }
    memcpy(c->param_before, c->param, size * sizeof(float));
    memcpy(c->state_before, c->state, 2 * size * sizeof(float));
    c->args = (td_optimizer_args){.options = o,
                                  .count = n,
                                  .grad = c->grad,
                                  .param = c->param,
                                  .next = in_place ? c->param : c->next,
                                  .state = c->state,
                                  .next_state = in_place ? c->state : c->next_state,
                                  .state_stride = n,
                                  .learning_rate = lr,
                                  .count_inc = count_inc};
}

static void update_case_free(update_case *c)
{
    free(c->grad);
    free(c->param);
    free(c->next);
    free(c->state);
    free(c->next_state);
    free(c->param_before);
    free(c->state_before);
}

static const size_t awkward_lengths[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099};

Test(optimizers, adam_vector_loop_is_bitwise_the_rule)
{
    for (int decayed = 0; decayed < 2; decayed++)
        for (int late = 0; late < 2; late++)
            for (int in_place = 0; in_place < 2; in_place++)
                for (size_t l = 0; l < sizeof awkward_lengths / sizeof awkward_lengths[0]; l++) {
                    const size_t n = awkward_lengths[l];
                    td_trainer_options o;
                    td_trainer_options_init(&o);
                    o.weight_decay = decayed ? 0.01f : 0.0f;
                    update_case c;
                    update_case_init(&c, &o, n, 1000 + n * 8 + (size_t)decayed * 4 + (size_t)late * 2 + (size_t)in_place,
                                     1, in_place, 0.003f, late ? 1000 : 1);
                    (decayed ? td_optimizer_adamw : td_optimizer_adam).update(&c.args);
                    const float bc1 = (float)(1.0 - td_fixed_pow_whole((double)o.b1, c.args.count_inc));
                    const float bc2 = (float)(1.0 - td_fixed_pow_whole((double)o.b2, c.args.count_inc));
                    for (size_t i = 0; i < n; i++) {
                        float m_next, v_next;
                        const float want = adam_rule_value(c.grad[i], c.param_before[i], c.state_before[i],
                                                           c.state_before[n + i], &m_next, &v_next, o.b1, o.b2, bc1,
                                                           bc2, o.eps, c.args.learning_rate, o.weight_decay);
                        cr_assert(same_float(c.args.next[i], want) && same_float(c.args.next_state[i], m_next) &&
                                      same_float(c.args.next_state[n + i], v_next),
                                  "length %zu, element %zu (%s, step %llu, %s): param %a, m %a, v %a; the rule gives "
                                  "%a, %a, %a",
                                  n, i, decayed ? "adamw" : "adam", (unsigned long long)c.args.count_inc,
                                  in_place ? "in place" : "apart", (double)c.args.next[i],
                                  (double)c.args.next_state[i], (double)c.args.next_state[n + i], (double)want,
                                  (double)m_next, (double)v_next);
                    }
                    update_case_free(&c);
                }
}

/* RMSProp's loop (engine/train/optim_rmsprop.c), likewise, without
 * momentum, with it and with Nesterov's. */
static float rmsprop_rule_value(float g, float p, float v, float trace, float *v_next, float *trace_next,
                                const td_trainer_options *o, float lr)
{
    const float vi = (1.0f - o->decay) * (g * g) + o->decay * v;
    *v_next = vi;
    *trace_next = trace;
    float u = g / sqrtf(vi + o->eps);
    if (o->momentum > 0.0f) {
        const float t = u + o->momentum * trace;
        *trace_next = t;
        u = o->nesterov ? u + o->momentum * t : t;
    }
    return p - lr * u;
}

Test(optimizers, rmsprop_vector_loop_is_bitwise_the_rule)
{
    for (int kind = 0; kind < 3; kind++) /* plain, momentum, nesterov */
        for (int in_place = 0; in_place < 2; in_place++)
            for (size_t l = 0; l < sizeof awkward_lengths / sizeof awkward_lengths[0]; l++) {
                const size_t n = awkward_lengths[l];
                td_trainer_options o;
                td_trainer_options_init(&o);
                o.optimizer = TD_OPTIMIZER_RMSPROP;
                o.momentum = kind ? 0.9f : 0.0f;
                o.nesterov = kind == 2;
                update_case c;
                update_case_init(&c, &o, n, 2000 + n * 8 + (size_t)kind * 2 + (size_t)in_place, 0, in_place, 0.003f,
                                 1);
                td_optimizer_rmsprop.update(&c.args);
                const bool traced = td_optimizer_rmsprop.state_floats(&o) == 2;
                for (size_t i = 0; i < n; i++) {
                    float v_next, trace_next;
                    const float want = rmsprop_rule_value(c.grad[i], c.param_before[i], c.state_before[i],
                                                          c.state_before[n + i], &v_next, &trace_next, &o,
                                                          c.args.learning_rate);
                    cr_assert(same_float(c.args.next[i], want) && same_float(c.args.next_state[i], v_next) &&
                                  (!traced || same_float(c.args.next_state[n + i], trace_next)),
                              "length %zu, element %zu (kind %d, %s): param %a, v %a; the rule gives %a, %a", n, i,
                              kind, in_place ? "in place" : "apart", (double)c.args.next[i],
                              (double)c.args.next_state[i], (double)want, (double)v_next);
                }
                update_case_free(&c);
            }
}
