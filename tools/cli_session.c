/* A run's model and data (see td_cli_session.h).
 *
 * The loop is the library's (tandem/fit.h), the one the demos run, with
 * the recipes of td_fit_recipe: images travel as bytes and are cast and
 * scaled on the device, the loss and the accuracy are masked means over
 * the global batch, so the padded last batch of an epoch trains and
 * evaluates on its real rows only. Linear regression is the seed exercise
 * (x ~ N(0, 1), y = x w + b + noise) with its squared error made a masked
 * mean too, so it shares the loop, the evaluator and the checkpoints.
 * What stays here is the front end's: the data (Fashion-MNIST or
 * generated), the context, the processes and the mesh. */
#include "td_cli_session.h"

#include <stdlib.h>
#include <string.h>

#include "td_demo_rng.h"

#define LINREG_FEATURES 5
#define LINREG_NOISE 0.1f
#define GENERATED_TRAIN 4096 /* examples, when --limit does not say */
#define GENERATED_TEST 1024
#define IMAGE_SIDE 28
#define CLASSES 10

const char *const td_cli_models[] = {"linreg", "mlp", "cnn", NULL};
const char *const td_cli_optimizers[] = {"sgd", "momentum", "adam", "adamw", "rmsprop", NULL};
const char *const td_cli_schedules[] = {"constant", "cosine", "warmup-cosine", NULL};
const char *const td_cli_device_loss[] = {"fail", "continue", NULL};
const char *const td_cli_inputs[] = {"raw", "standardized", NULL};
const char *const td_cli_precisions[] = {"fp32", "bf16", NULL};
const char *const td_cli_wires[] = {"fp32", "bf16", NULL};

td_precision td_cli_precision(const char *name)
{
    return name && strcmp(name, "bf16") == 0 ? TD_PRECISION_BF16 : TD_PRECISION_FP32;
}

/* The optimizer a name of td_cli_optimizers stands for ("momentum" is SGD
 * with a momentum trace). */
static td_optimizer_kind optimizer_kind(const char *name)
{
    return strcmp(name, "adam") == 0      ? TD_OPTIMIZER_ADAM
           : strcmp(name, "adamw") == 0   ? TD_OPTIMIZER_ADAMW
           : strcmp(name, "rmsprop") == 0 ? TD_OPTIMIZER_RMSPROP
                                          : TD_OPTIMIZER_SGD;
}

void td_cli_config_defaults(td_cli_config *c, unsigned set)
{
    /* The library's recipe for the model (td_fit_recipe, shared with the
     * demos), where the user chose none. */
    td_fit_options r;
    td_fit_options_init(&r);
    r.batch_norm = c->batch_norm;
    td_fit_recipe(c->model, &r);
    if (!(set & TD_CLI_SET_OPTIMIZER))
        c->optimizer = r.optimizer == TD_OPTIMIZER_SGD ? "sgd" : "adam";
    if (!(set & TD_CLI_SET_LR)) {
        /* The recipe's rate is for its optimizer's family: another
         * optimizer (SGD for a recipe of Adam, or the reverse) takes its
         * own rate (the library's default). */
        const td_optimizer_kind kind = optimizer_kind(c->optimizer);
        const bool same_family = (kind == TD_OPTIMIZER_SGD) == (r.optimizer == TD_OPTIMIZER_SGD);
        c->lr = same_family ? r.learning_rate : td_optimizer_default_learning_rate(kind);
    }
    if (!(set & TD_CLI_SET_SCHEDULE))
        c->schedule = r.schedule;
    if (!(set & TD_CLI_SET_INPUTS))
        c->inputs = r.standardize_inputs ? "standardized" : "raw";
    if (!(set & TD_CLI_SET_DATA) && strcmp(c->model, "linreg") == 0)
        c->data = "generated";
}

static int fail(td_cli_session *s, td_status st, const char *what)
{
    return td_cli_fail(s->command, s->ctx, st, what);
}

/* Seed exercise data: one (w, b) for the seed, train and test drawn from
 * their own streams so neither depends on the other's size. */
static td_status generate_linreg(td_cli_session *s, size_t n_train)
{
    td_demo_rng rng = {s->config.seed * 0x5851F42D4C957F2Dull + 12345};
    float w[LINREG_FEATURES], b;
    for (int j = 0; j < LINREG_FEATURES; j++)
        w[j] = td_demo_rng_normal(&rng);
    b = td_demo_rng_normal(&rng);
    td_cli_split *splits[2] = {&s->train, &s->test};
    const size_t counts[2] = {n_train, GENERATED_TEST};
    for (int k = 0; k < 2; k++) {
        td_cli_split *sp = splits[k];
        const int64_t xd[2] = {(int64_t)counts[k], LINREG_FEATURES}, yd[2] = {(int64_t)counts[k], 1};
        td_status st = td_tensor_create(s->ctx, TD_F32, 2, xd, &sp->x);
        if (st == TD_OK)
            st = td_tensor_create(s->ctx, TD_F32, 2, yd, &sp->y);
        if (st != TD_OK)
            return st;
        sp->count = counts[k];
        float *xs, *ys;
        td_tensor_data(sp->x, (void **)&xs);
        td_tensor_data(sp->y, (void **)&ys);
        td_demo_rng stream = {rng.state ^ (0x9E3779B97F4A7C15ull * (uint64_t)(k + 1))};
        for (size_t i = 0; i < counts[k]; i++) {
            float t = b;
            for (int j = 0; j < LINREG_FEATURES; j++) {
                xs[i * LINREG_FEATURES + j] = td_demo_rng_normal(&stream);
                t += xs[i * LINREG_FEATURES + j] * w[j];
            }
            ys[i] = t + LINREG_NOISE * td_demo_rng_normal(&stream);
        }
    }
    return TD_OK;
}

/* Images for smoke tests: noise, plus a bright band of rows whose place
 * is the label, so a model can learn them quickly and the curves move. */
static td_status generate_images(td_cli_session *s, size_t n_train)
{
    td_cli_split *splits[2] = {&s->train, &s->test};
    const size_t counts[2] = {n_train, GENERATED_TEST};
    for (int k = 0; k < 2; k++) {
        td_cli_split *sp = splits[k];
        const int64_t xd[4] = {(int64_t)counts[k], IMAGE_SIDE, IMAGE_SIDE, 1}, yd[1] = {(int64_t)counts[k]};
        td_status st = td_tensor_create(s->ctx, TD_U8, 4, xd, &sp->x);
        if (st == TD_OK)
            st = td_tensor_create(s->ctx, TD_I32, 1, yd, &sp->y);
        if (st != TD_OK)
            return st;
        sp->count = counts[k];
        uint8_t *px;
        int32_t *labels;
        td_tensor_data(sp->x, (void **)&px);
        td_tensor_data(sp->y, (void **)&labels);
        td_demo_rng rng = {s->config.seed * 0x2545F4914F6CDD1Dull + 777 + (uint64_t)k};
        for (size_t i = 0; i < counts[k]; i++) {
            int32_t label = (int32_t)(td_demo_rng_next(&rng) % CLASSES);
            labels[i] = label;
            for (int r = 0; r < IMAGE_SIDE; r++)
                for (int c = 0; c < IMAGE_SIDE; c++) {
                    unsigned v = (unsigned)(td_demo_rng_next(&rng) & 127u);
                    if (r >= 4 + 2 * label && r < 6 + 2 * label)
                        v += 128u;
                    px[((size_t)i * IMAGE_SIDE + (size_t)r) * IMAGE_SIDE + (size_t)c] = (uint8_t)v;
                }
        }
    }
    return TD_OK;
}

static int load_data(td_cli_session *s)
{
    const td_cli_config *c = &s->config;
    const bool generated = strcmp(c->data, "generated") == 0;
    td_status st;
    if (!s->classifier && !generated) {
        fprintf(stderr, "tandem %s: --model linreg trains on generated data only; got --data '%s'\n", s->command,
                c->data);
        return TD_CLI_EXIT_USAGE;
    }
    if (generated) {
        size_t n = c->limit ? (size_t)c->limit : GENERATED_TRAIN;
        st = s->classifier ? generate_images(s, n) : generate_linreg(s, n);
        if (st != TD_OK)
            return fail(s, st, "generating data");
        return TD_CLI_EXIT_OK;
    }
    if ((st = td_data_load_mnist(s->ctx, c->data, "train", &s->train.x, &s->train.y)) != TD_OK ||
        (st = td_data_load_mnist(s->ctx, c->data, "t10k", &s->test.x, &s->test.y)) != TD_OK)
        return fail(s, st, "loading Fashion-MNIST (--data DIR, or --data generated)");
    td_tensor_count(s->train.y, &s->train.count);
    td_tensor_count(s->test.y, &s->test.count);
    /* The graph takes the training images' shape: test images of another
     * would fail only when the first evaluation gathers them, an epoch
     * later. */
    uint32_t train_rank, test_rank;
    int64_t train_dims[TD_MAX_RANK], test_dims[TD_MAX_RANK];
    td_tensor_shape(s->train.x, &train_rank, train_dims);
    td_tensor_shape(s->test.x, &test_rank, test_dims);
    if (train_rank != test_rank || memcmp(train_dims + 1, test_dims + 1, (train_rank - 1) * sizeof *train_dims) != 0) {
        fprintf(stderr,
                "tandem %s: --data '%s': the test images (t10k) are %lld x %lld, expected the training images' %lld x "
                "%lld\n",
                s->command, c->data, (long long)test_dims[1], (long long)test_dims[2], (long long)train_dims[1],
                (long long)train_dims[2]);
        return TD_CLI_EXIT_FAILURE;
    }
    return TD_CLI_EXIT_OK;
}

/* The run's td_fit_options: the config's values (its defaults already
 * filled from td_fit_recipe by td_cli_config_defaults, or read from a
 * checkpoint), checkpoints every epoch keeping 3, with the config in each
 * checkpoint's metadata. */
static td_status fit_options(td_cli_session *s, td_fit_options *o)
{
    const td_cli_config *c = &s->config;
    td_fit_options_init(o);
    o->model = c->model;
    o->seed = c->seed;
    o->epochs = (uint32_t)c->epochs;
    o->max_steps = (uint64_t)c->steps;
    o->batch = (uint32_t)c->batch;
    o->limit = (uint64_t)c->limit;
    o->optimizer = optimizer_kind(c->optimizer);
    if (strcmp(c->optimizer, "momentum") == 0)
        o->momentum = 0.9f;
    o->learning_rate = c->lr;
    o->schedule = c->schedule; /* checked against td_cli_schedules when parsed */
    o->accumulate = (uint32_t)c->accumulate;
    o->batch_norm = c->batch_norm;
    o->dropout = c->dropout;
    o->standardize_inputs = c->inputs && strcmp(c->inputs, "standardized") == 0;
    if (c->on_device_loss && strcmp(c->on_device_loss, "continue") == 0)
        o->on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    o->precision = td_cli_precision(c->precision);
    o->overlap_bucket_bytes = (uint64_t)((double)c->bucket_mib * 1048576.0);
    o->wire = c->wire && strcmp(c->wire, "bf16") == 0 ? TD_WIRE_BF16 : TD_WIRE_FP32;
    /* Only a metrics file reads the split; on CPU devices the waits are free. */
    o->timing_waits = c->metrics != NULL;
    o->eval_every = (uint32_t)c->eval_every;
    o->eval_limit = (uint64_t)c->eval_limit;
    o->checkpoint_dir = c->checkpoint;
    o->checkpoint_every_epochs = 1;
    o->checkpoint_keep = 3;
    o->resume = c->resume;
    o->n_metadata = td_cli_checkpoint_metadata(c, &s->metadata, s->metadata_entries);
    o->metadata = s->metadata_entries;
    td_status st = td_balance_parse(s->ctx, c->balance ? c->balance : "even", &o->balance,
                                    sizeof s->balance_weights / sizeof *s->balance_weights, s->balance_weights,
                                    &o->n_balance_weights);
    o->balance_weights = s->balance_weights;
    return st;
}

/* Under an MPI launcher the processes join as one job: every mesh spans
 * them, each process reads its own rows of every batch, and only process 0
 * prints (td_demo_processes.h, shared with the demos). */
static int join_processes(td_cli_session *s)
{
    char name[32];
    snprintf(name, sizeof name, "tandem %s", s->command);
    const int rc = td_demo_join(name, s->ctx, &s->process, &s->processes);
    if (rc != 0)
        return rc == 2 ? TD_CLI_EXIT_USAGE : TD_CLI_EXIT_FAILURE;
    td_cli_set_process(s->process, s->processes);
    return TD_CLI_EXIT_OK;
}

int td_cli_session_open(td_cli_session *s, const char *command, const td_cli_config *config, td_fit_progress_fn on_progress,
                        void *on_progress_user)
{
    memset(s, 0, sizeof *s);
    s->command = command;
    s->config = *config;
    s->classifier = strcmp(config->model, "linreg") != 0;
    td_status st = td_cli_context_create(command, config->timeout, (uint32_t)config->cpu_threads,
                                         config->deterministic, &s->ctx);
    if (st != TD_OK) {
        fprintf(stderr, "tandem %s: cannot create a context: %s\n", command, td_status_describe(st));
        return TD_CLI_EXIT_FAILURE;
    }
    s->processes = 1;
    int rc = join_processes(s);
    if (rc != TD_CLI_EXIT_OK)
        return rc;
    if ((st = td_mesh_create(s->ctx, config->devices, &s->mesh)) != TD_OK)
        return td_cli_fail_devices(command, s->ctx, st);
    uint32_t first_device = 0;
    td_processes_mesh(s->mesh, &s->n_devices, &first_device); /* the job's devices, every process's */
    if (config->batch < s->n_devices) { /* a batch they do not divide is split as evenly as it goes */
        fprintf(stderr, "tandem %s: --batch %lld is smaller than the %u devices of '%s'; each needs an example\n",
                command, (long long)config->batch, s->n_devices, config->devices);
        return TD_CLI_EXIT_USAGE;
    }
    rc = load_data(s);
    if (rc != TD_CLI_EXIT_OK)
        return rc;
    td_fit_options fo;
    if ((st = fit_options(s, &fo)) != TD_OK)
        return fail(s, st, "--balance");
    fo.on_progress = on_progress;
    fo.user = on_progress_user;
    if ((st = td_fit_create(s->mesh, s->train.x, s->train.y, s->test.x, s->test.y, &fo, &s->fit)) != TD_OK)
        return fail(s, st, "building the run");
    td_fit_trainer(s->fit, &s->trainer);
    s->summary.struct_size = sizeof s->summary;
    td_fit_summarize(s->fit, &s->summary);
    s->per_epoch = (size_t)s->summary.examples_per_epoch;
    s->steps_per_epoch = (size_t)s->summary.steps_per_epoch;
    s->config.epochs = (int64_t)s->summary.epochs; /* --steps: the epochs they reach into */
    return TD_CLI_EXIT_OK;
}

void td_cli_session_close(td_cli_session *s)
{
    td_fit_destroy(s->fit);
    td_tensor *tensors[] = {s->train.x, s->train.y, s->test.x, s->test.y};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
        td_tensor_destroy(tensors[i]);
    td_context_destroy(s->ctx); /* the mesh with it */
    memset(s, 0, sizeof *s);
}

size_t td_cli_session_eval_count(const td_cli_session *s)
{
    return (size_t)s->summary.test_examples;
}

td_status td_cli_session_evaluate(td_cli_session *s, size_t count, double *loss, double *accuracy)
{
    float l = 0.0f, a = 0.0f;
    const td_status st = td_fit_evaluate(s->fit, TD_FIT_TEST, count, &l, &a);
    *loss = l;
    *accuracy = a;
    return st;
}
