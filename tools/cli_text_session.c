/* The GPT's session (see td_cli_text.h).
 *
 * Every training batch is td_text_batch(seed, step): a pure function of
 * the text, the seed and the step, the same on any mesh and in every
 * process, so the run needs no data order to record and a checkpoint's
 * step alone says where to go on. Validation is llm.c's: windows of T + 1
 * tokens at stride T, the last batch padded and masked, through an
 * evaluator whose loss is the same masked mean the trainer minimizes. */
#include "td_cli_text.h"

#include <stdlib.h>
#include <string.h>

void td_cli_text_config_defaults(td_cli_text_config *c)
{
    td_trainer_options t;
    td_trainer_options_init(&t);
    memset(c, 0, sizeof *c);
    c->devices = "cpu:4";
    c->data = TD_TEXT_DEFAULT_CORPUS;
    c->optimizer = "adamw";
    c->schedule = "constant";
    c->layers = 4;
    c->heads = 4;
    c->width = 128;
    c->context = 64;
    c->sequence = 64;
    c->batch = 12;
    c->steps = 2000;
    c->eval_every = 250;
    c->lr = 1e-3f;
    c->weight_decay = t.weight_decay; /* the trainer's own default, optax's */
}

static int fail(td_cli_text_session *s, td_status st, const char *what)
{
    return td_cli_fail(s->command, s->ctx, st, what);
}

void td_cli_text_optimizer(const char *name, td_trainer_options *o)
{
    o->momentum = strcmp(name, "momentum") == 0 ? 0.9f : 0.0f;
    o->optimizer = strcmp(name, "adam") == 0      ? TD_OPTIMIZER_ADAM
                   : strcmp(name, "adamw") == 0   ? TD_OPTIMIZER_ADAMW
                   : strcmp(name, "rmsprop") == 0 ? TD_OPTIMIZER_RMSPROP
                                                  : TD_OPTIMIZER_SGD;
}

static td_status trainer_options(td_cli_text_session *s)
{
    const td_cli_text_config *c = &s->config;
    td_trainer_options *o = &s->trainer_options;
    td_trainer_options_init(o);
    td_cli_text_optimizer(c->optimizer, o);
    o->learning_rate = c->lr;
    o->weight_decay = c->weight_decay;
    if (c->on_device_loss && strcmp(c->on_device_loss, "continue") == 0)
        o->on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    o->precision = c->precision && strcmp(c->precision, "bf16") == 0 ? TD_PRECISION_BF16 : TD_PRECISION_FP32;
    o->wire = c->wire && strcmp(c->wire, "bf16") == 0 ? TD_WIRE_BF16 : TD_WIRE_FP32;
    td_status st = td_schedule_for_run(s->ctx, c->schedule, c->lr, (uint64_t)c->steps, &o->schedule);
    /* Only a metrics file reads the per-device split of a step's time. */
    o->timing_waits = c->metrics != NULL;
    if (st == TD_OK)
        st = td_balance_parse(s->ctx, c->balance ? c->balance : "even", &o->balance,
                              sizeof s->balance_weights / sizeof *s->balance_weights, s->balance_weights,
                              &o->n_balance_weights);
    o->balance_weights = s->balance_weights;
    return st;
}

/* The text, checked against what the model needs of it. */
static int open_text(td_cli_text_session *s)
{
    const td_cli_text_config *c = &s->config;
    td_status st = td_text_open(s->ctx, c->data, NULL, &s->text);
    if (st != TD_OK)
        return fail(s, st, "--data");
    td_text_summary_init(&s->summary);
    td_text_info(s->text, &s->summary);
    if (c->vocab && (int64_t)s->summary.vocab_size != c->vocab) {
        fprintf(stderr, "tandem %s: --data '%s' holds %s (vocabulary %u), but the model of %s has a vocabulary of %lld\n",
                s->command, c->data, s->summary.bytes ? "bytes" : "GPT-2 tokens", s->summary.vocab_size,
                c->init ? c->init : "the checkpoint", (long long)c->vocab);
        return TD_CLI_EXIT_USAGE;
    }
    s->config.vocab = s->summary.vocab_size;
    if (s->summary.train_tokens < (size_t)c->sequence + 1) {
        fprintf(stderr,
                "tandem %s: --data '%s' has %zu training tokens; a window of --context %lld needs at least %lld\n",
                s->command, c->data, s->summary.train_tokens, (long long)c->sequence, (long long)c->sequence + 1);
        return TD_CLI_EXIT_USAGE;
    }
    td_text_val_windows(s->text, (size_t)c->sequence, &s->val_windows);
    return TD_CLI_EXIT_OK;
}

void td_cli_text_gpt_options(const td_cli_text_config *c, td_gpt_options *o)
{
    td_gpt_options_init(o);
    o->seed = c->seed;
    o->vocab = c->vocab;
    o->context = c->context;
    o->layers = c->layers;
    o->heads = c->heads;
    o->width = c->width;
    o->dropout = c->dropout;
    o->recompute = c->recompute;
}

/* A size from the file against the flag that could have said otherwise. */
static bool agrees(const char *command, const td_cli_text_config *c, unsigned bit, const char *flag, int64_t given,
                   int64_t from_file)
{
    if (!(c->given & bit) || given == from_file)
        return true;
    fprintf(stderr, "tandem %s: %s %lld differs from --init '%s', whose model has %lld (leave the flag out)\n", command,
            flag, (long long)given, c->init, (long long)from_file);
    return false;
}

int td_cli_text_config_from_weights(const char *command, const td_gpt_weights *w, td_cli_text_config *c)
{
    td_gpt_config g = {.struct_size = sizeof(td_gpt_config)};
    td_gpt_weights_config(w, &g);
    if (!agrees(command, c, TD_CLI_TEXT_SET_LAYERS, "--layers", c->layers, g.layers) ||
        !agrees(command, c, TD_CLI_TEXT_SET_HEADS, "--heads", c->heads, g.heads) ||
        !agrees(command, c, TD_CLI_TEXT_SET_WIDTH, "--width", c->width, g.width))
        return TD_CLI_EXIT_USAGE;
    c->vocab = g.vocab;
    c->context = g.context;
    c->layers = g.layers;
    c->heads = g.heads;
    c->width = g.width;
    /* The training windows may be shorter than the model's positions: a
     * GPT-2's 1024 are a lot to train on a CPU. */
    if (!(c->given & TD_CLI_TEXT_SET_CONTEXT))
        c->sequence = g.context;
    else if (c->sequence > g.context) {
        fprintf(stderr, "tandem %s: --context %lld is longer than the %lld positions of --init '%s'\n", command,
                (long long)c->sequence, (long long)g.context, c->init);
        return TD_CLI_EXIT_USAGE;
    }
    return TD_CLI_EXIT_OK;
}

static td_status build_graph(td_cli_text_session *s)
{
    const td_cli_text_config *c = &s->config;
    td_cli_text_gpt_options(c, &s->gpt);
    const int64_t bt[2] = {c->batch, c->sequence}, b[1] = {c->batch};
    td_status st = td_graph_create(s->ctx, &s->g);
    if (st == TD_OK)
        st = td_graph_input(s->g, "tokens", TD_I32, 2, bt, TD_SHARDED, &s->tokens);
    if (st == TD_OK)
        st = td_graph_input(s->g, "targets", TD_I32, 2, bt, TD_SHARDED, &s->targets);
    if (st == TD_OK)
        st = td_graph_input(s->g, "mask", TD_F32, 1, b, TD_SHARDED, &s->mask);
    if (st == TD_OK)
        st = td_model_gpt_loss(s->g, s->tokens, s->targets, s->mask, &s->gpt, &s->loss);
    return st;
}

static td_status count_parameters(td_cli_text_session *s)
{
    td_status st = td_graph_params(s->g, 0, NULL, &s->n_params);
    if (st != TD_OK)
        return st;
    if (!(s->params = calloc(s->n_params + 1u, sizeof *s->params)))
        return TD_ERR_OUT_OF_MEMORY;
    if ((st = td_graph_params(s->g, s->n_params, s->params, &s->n_params)) != TD_OK)
        return st;
    s->parameter_count = 0;
    for (uint32_t i = 0; i < s->n_params; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        if ((st = td_graph_shape(s->g, s->params[i], &rank, dims)) != TD_OK)
            return st;
        uint64_t n = 1;
        for (uint32_t k = 0; k < rank; k++)
            n *= (uint64_t)dims[k];
        s->parameter_count += n;
    }
    return TD_OK;
}

static td_status host_tensors(td_cli_text_session *s)
{
    const int64_t bt[2] = {s->config.batch, s->config.sequence}, b[1] = {s->config.batch};
    td_status st = td_tensor_create(s->ctx, TD_I32, 2, bt, &s->inputs);
    if (st == TD_OK)
        st = td_tensor_create(s->ctx, TD_I32, 2, bt, &s->outputs);
    if (st == TD_OK)
        st = td_tensor_create(s->ctx, TD_F32, 1, b, &s->ones);
    if (st == TD_OK)
        st = td_tensor_create(s->ctx, TD_F32, 1, b, &s->val_mask);
    if (st == TD_OK)
        st = td_data_batch_mask(s->ctx, s->ones, (size_t)s->config.batch);
    return st;
}

/* --init: every parameter of the model by name from the weights (the
 * same 4 + 12 L names: td_gpt_weights_read checked them and their shapes
 * against the sizes the model was built with). */
static int start_from(td_cli_text_session *s, const td_gpt_weights *w)
{
    uint32_t n = 0;
    td_gpt_weights_count(w, &n);
    if (n != s->n_params) {
        fprintf(stderr, "tandem %s: --init '%s' holds %u tensors, the model has %u parameters\n", s->command,
                s->config.init, n, s->n_params);
        return TD_CLI_EXIT_FAILURE;
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *name = NULL;
        const td_tensor *value = NULL;
        td_node node;
        td_status st = td_gpt_weights_get(w, i, &name, &value);
        if (st == TD_OK)
            st = td_graph_find(s->g, name, &node);
        if (st == TD_OK)
            st = td_trainer_set_param(s->trainer, node, value);
        if (st != TD_OK)
            return fail(s, st, "--init: setting the parameters");
    }
    return TD_CLI_EXIT_OK;
}

int td_cli_text_open(td_cli_text_session *s, const char *command, const td_cli_text_config *config)
{
    memset(s, 0, sizeof *s);
    s->command = command;
    s->config = *config;
    s->processes = 1;
    td_status st = td_cli_context_create(command, config->timeout, (uint32_t)config->cpu_threads,
                                         config->deterministic, &s->ctx);
    if (st != TD_OK) {
        fprintf(stderr, "tandem %s: cannot create a context: %s\n", command, td_status_describe(st));
        return TD_CLI_EXIT_FAILURE;
    }
    /* Under an MPI launcher the processes join as one job before any mesh
     * exists; only process 0 prints (td_demo_processes.h). */
    char name[32];
    snprintf(name, sizeof name, "tandem %s", command);
    int rc = td_demo_join(name, s->ctx, &s->process, &s->processes);
    if (rc != 0)
        return rc == 2 ? TD_CLI_EXIT_USAGE : TD_CLI_EXIT_FAILURE;
    td_cli_set_process(s->process, s->processes);
    td_gpt_weights *init = NULL;
    if (config->init) {
        if ((st = td_gpt_weights_read(s->ctx, config->init, &init)) != TD_OK)
            return fail(s, st, "--init");
        if ((rc = td_cli_text_config_from_weights(command, init, &s->config)) != TD_CLI_EXIT_OK)
            return rc;
    }
    if (s->config.sequence > s->config.context) {
        fprintf(stderr, "tandem %s: --context %lld is longer than the model's %lld positions\n", command,
                (long long)s->config.sequence, (long long)s->config.context);
        return TD_CLI_EXIT_USAGE;
    }
    config = &s->config; /* with the sizes of --init */
    if ((rc = open_text(s)) != TD_CLI_EXIT_OK)
        return rc;
    if ((st = td_mesh_create(s->ctx, config->devices, &s->mesh)) != TD_OK)
        return td_cli_fail_devices(command, s->ctx, st);
    uint32_t first_device = 0;
    td_processes_mesh(s->mesh, &s->n_devices, &first_device);
    if (config->batch < s->n_devices) {
        fprintf(stderr, "tandem %s: --batch %lld is smaller than the %u devices of '%s'; each needs a sequence\n",
                command, (long long)config->batch, s->n_devices, config->devices);
        return TD_CLI_EXIT_USAGE;
    }
    if ((st = build_graph(s)) != TD_OK)
        return fail(s, st, "building the model");
    if ((st = count_parameters(s)) != TD_OK)
        return fail(s, st, "listing the model's parameters");
    if ((st = host_tensors(s)) != TD_OK)
        return fail(s, st, "batch tensors");
    if ((st = trainer_options(s)) != TD_OK)
        return fail(s, st, "the trainer's options");
    if ((st = td_trainer_create(s->g, s->mesh, s->loss, s->n_params, s->params, &s->trainer_options, &s->trainer)) !=
        TD_OK)
        return fail(s, st, "creating the trainer");
    if (init && (rc = start_from(s, init)) != TD_CLI_EXIT_OK)
        return rc;
    td_gpt_weights_destroy(init); /* on a failure above, the context's destroy frees it */
    if ((st = td_evaluator_create(s->g, s->mesh, s->mask, 1, &s->loss, &s->evaluator)) != TD_OK)
        return fail(s, st, "creating the evaluator");
    if ((st = td_evaluator_set_precision(s->evaluator, s->trainer_options.precision)) != TD_OK)
        return fail(s, st, "td_evaluator_set_precision");
    if ((st = td_evaluator_set_on_device_loss(s->evaluator, s->trainer_options.on_device_loss)) != TD_OK)
        return fail(s, st, "--on-device-loss");
    return TD_CLI_EXIT_OK;
}

void td_cli_text_close(td_cli_text_session *s)
{
    free(s->params);
    td_demo_batch_release(&s->rows);
    td_tensor *tensors[] = {s->inputs, s->outputs, s->ones, s->val_mask};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
        td_tensor_destroy(tensors[i]);
    td_context_destroy(s->ctx); /* the text, mesh, graph, trainer and evaluator with it */
    memset(s, 0, sizeof *s);
}

/* The bindings of this process's rows [first, first + count) of the
 * global batch in s->inputs, s->outputs and `mask`: the global tensors
 * themselves when they are all of it (one process), else a copy of the
 * rows into s->rows, whose tensors are made again only when the count
 * changes (a new split). count 0: the whole batch. */
static td_status bind_rows(td_cli_text_session *s, const td_tensor *mask, uint64_t first, uint64_t count,
                           td_binding b[3])
{
    const size_t B = (size_t)s->config.batch, T = (size_t)s->config.sequence;
    b[0].node = s->tokens;
    b[1].node = s->targets;
    b[2].node = s->mask;
    if (count == 0 || (first == 0 && count == B)) {
        b[0].value = s->inputs;
        b[1].value = s->outputs;
        b[2].value = mask;
        return TD_OK;
    }
    if (first + count > B)
        return TD_ERR_INVALID_ARGUMENT;
    td_status st = td_demo_batch_tensors(s->ctx, s->inputs, s->outputs, (size_t)count, &s->rows);
    if (st != TD_OK)
        return st;
    void *from[3], *to[3];
    td_tensor_data(s->inputs, &from[0]);
    td_tensor_data(s->outputs, &from[1]);
    td_tensor_data(mask, &from[2]);
    td_tensor_data(s->rows.x, &to[0]);
    td_tensor_data(s->rows.y, &to[1]);
    td_tensor_data(s->rows.mask, &to[2]);
    memcpy(to[0], (int32_t *)from[0] + first * T, count * T * sizeof(int32_t));
    memcpy(to[1], (int32_t *)from[1] + first * T, count * T * sizeof(int32_t));
    memcpy(to[2], (float *)from[2] + first, count * sizeof(float));
    b[0].value = s->rows.x;
    b[1].value = s->rows.y;
    b[2].value = s->rows.mask;
    return TD_OK;
}

td_status td_cli_text_step(td_cli_text_session *s, uint64_t step, float *loss)
{
    const size_t B = (size_t)s->config.batch, T = (size_t)s->config.sequence;
    uint64_t first = 0, count = 0;
    td_binding b[3];
    td_status st = td_text_batch(s->text, s->config.seed, step, B, T, s->inputs, s->outputs);
    /* Asked before each step: a split the balancer found, or one after a
     * lost device, starts there. */
    if (st == TD_OK)
        st = td_trainer_process_rows(s->trainer, &first, &count);
    if (st == TD_OK)
        st = bind_rows(s, s->ones, first, count, b);
    if (st == TD_OK)
        st = td_trainer_step(s->trainer, 3, b, loss);
    return st;
}

td_status td_cli_text_evaluate(td_cli_text_session *s, int64_t max_batches, double *loss, size_t *windows)
{
    const size_t B = (size_t)s->config.batch, T = (size_t)s->config.sequence;
    size_t batches = (s->val_windows + B - 1) / B;
    if (max_batches > 0 && (size_t)max_batches < batches)
        batches = (size_t)max_batches;
    *loss = 0.0;
    *windows = 0;
    td_status st = td_evaluator_load(s->evaluator, s->trainer);
    for (size_t k = 0; k < batches && st == TD_OK; k++) {
        size_t valid = 0;
        uint64_t first = 0, count = 0;
        td_binding b[3];
        if ((st = td_text_val_batch(s->text, T, k * B, B, s->inputs, s->outputs, s->val_mask, &valid)) != TD_OK ||
            (st = td_evaluator_process_rows(s->evaluator, &first, &count)) != TD_OK ||
            (st = bind_rows(s, s->val_mask, first, count, b)) != TD_OK)
            break;
        st = td_evaluator_run(s->evaluator, 3, b);
        *windows += valid;
    }
    float value = 0.0f;
    if (st == TD_OK)
        st = td_evaluator_result(s->evaluator, 1, &value, NULL);
    *loss = value;
    return st;
}

void td_cli_text_print_memory(td_cli_text_session *s, FILE *f)
{
    uint32_t n = 0;
    td_mesh_size(s->mesh, &n);
    fputc('[', f);
    for (uint32_t d = 0; d < n; d++) {
        td_memory_report r = {.struct_size = sizeof r};
        if (td_trainer_memory_report(s->trainer, d, &r) != TD_OK)
            continue;
        fprintf(f,
                "%s{\"device\":%u,\"parameters\":%llu,\"gradients\":%llu,\"activations\":%llu,\"step_words\":%llu,"
                "\"optimizer_state\":%llu,\"accumulators\":%llu}",
                d ? "," : "", d, (unsigned long long)r.parameters, (unsigned long long)r.gradients,
                (unsigned long long)r.activations, (unsigned long long)r.step_words,
                (unsigned long long)r.optimizer_state, (unsigned long long)r.accumulators);
    }
    fputc(']', f);
}
