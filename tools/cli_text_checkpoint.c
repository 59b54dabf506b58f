/* The GPT's checkpoint metadata (see td_cli_text.h): the model (layers,
 * heads, width, context, vocab; heads also as "n_head", where
 * td_gpt_weights_read looks for them, so the file serves as --init), the
 * training windows' length (sequence), the data, the run's options and
 * the step -- all a later command needs to rebuild the same graph and,
 * since a training batch is a pure function of (seed, step), to go on
 * exactly where the run stopped. Values are strings, as safetensors wants; floats
 * are written with 9 significant digits, which read back to the same
 * float. */
#include <string.h>

#include "td_cli_checkpoint.h"
#include "td_cli_text.h"

#define KEY_COUNT 18

/* What a checkpoint may hold: the flags' own ranges, so a file edited by
 * hand cannot ask for a model the command line would refuse. */
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_WIDTH 65536
#define MAX_CONTEXT (1 << 20)
#define MAX_BATCH (1 << 20)
#define MAX_VOCAB 1000000
#define MAX_STEPS 4294967295LL

td_status td_cli_text_checkpoint_write(td_cli_text_session *s, const char *dir, uint64_t step, char *path,
                                       size_t capacity)
{
    const td_cli_text_config *c = &s->config;
    char seed[24], lr[32], wd[32], dropout[32], batch[24], steps[24], at[24], layers[24], heads[24], width[24],
        context[24], sequence[24], vocab[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    snprintf(lr, sizeof lr, "%.9g", (double)c->lr);
    snprintf(wd, sizeof wd, "%.9g", (double)c->weight_decay);
    snprintf(dropout, sizeof dropout, "%.9g", (double)c->dropout);
    snprintf(batch, sizeof batch, "%lld", (long long)c->batch);
    snprintf(steps, sizeof steps, "%lld", (long long)c->steps);
    snprintf(at, sizeof at, "%llu", (unsigned long long)step);
    snprintf(layers, sizeof layers, "%lld", (long long)c->layers);
    snprintf(heads, sizeof heads, "%lld", (long long)c->heads);
    snprintf(width, sizeof width, "%lld", (long long)c->width);
    snprintf(context, sizeof context, "%lld", (long long)c->context);
    snprintf(sequence, sizeof sequence, "%lld", (long long)c->sequence);
    snprintf(vocab, sizeof vocab, "%lld", (long long)c->vocab);
    const td_checkpoint_entry entries[KEY_COUNT] = {
        {"model", "gpt"},        {"data", c->data},     {"optimizer", c->optimizer}, {"schedule", c->schedule},
        {"seed", seed},          {"lr", lr},            {"weight_decay", wd},        {"dropout", dropout},
        {"batch", batch},        {"steps", steps},      {"step", at},                {"layers", layers},
        {"heads", heads},        {"width", width},      {"context", context},        {"vocab", vocab},
        {"sequence", sequence},  {"n_head", heads},
    };
    td_checkpoint_options o;
    td_checkpoint_options_init(&o);
    o.n_metadata = KEY_COUNT;
    o.metadata = entries;
    return td_checkpoint_save_dir(s->trainer, dir, &o, path, capacity);
}

int td_cli_text_checkpoint_config(const char *command, const td_checkpoint *ck, td_cli_text_config *c,
                                  td_cli_text_saved *st, uint64_t *step)
{
    const char *path = "", *model = NULL;
    td_checkpoint_path(ck, &path);
    if (!td_cli_metadata_value(command, ck, "model", &model))
        return TD_CLI_EXIT_FAILURE;
    if (strcmp(model, "gpt") != 0) {
        fprintf(stderr, "tandem %s: checkpoint '%s' holds a %s model, not a gpt\n", command, path, model);
        return TD_CLI_EXIT_USAGE;
    }
    if (!td_cli_metadata_copy(command, ck, "optimizer", st->optimizer, sizeof st->optimizer, td_cli_optimizers) ||
        !td_cli_metadata_copy(command, ck, "schedule", st->schedule, sizeof st->schedule, td_cli_schedules) ||
        !td_cli_metadata_copy(command, ck, "data", st->data, sizeof st->data, NULL) ||
        !td_cli_metadata_u64(command, ck, "seed", &c->seed) || !td_cli_metadata_u64(command, ck, "step", step) ||
        !td_cli_metadata_float(command, ck, "lr", &c->lr) ||
        !td_cli_metadata_float(command, ck, "weight_decay", &c->weight_decay) ||
        !td_cli_metadata_float(command, ck, "dropout", &c->dropout) ||
        !td_cli_metadata_range(command, ck, "batch", 1, MAX_BATCH, &c->batch) ||
        !td_cli_metadata_range(command, ck, "steps", 1, MAX_STEPS, &c->steps) ||
        !td_cli_metadata_range(command, ck, "layers", 1, MAX_LAYERS, &c->layers) ||
        !td_cli_metadata_range(command, ck, "heads", 1, MAX_HEADS, &c->heads) ||
        !td_cli_metadata_range(command, ck, "width", 1, MAX_WIDTH, &c->width) ||
        !td_cli_metadata_range(command, ck, "context", 1, MAX_CONTEXT, &c->context) ||
        !td_cli_metadata_range(command, ck, "vocab", 1, MAX_VOCAB, &c->vocab))
        return TD_CLI_EXIT_FAILURE;
    /* The windows' length, when shorter than the model's positions (a
     * run from --init); absent: the positions. */
    const char *sequence = NULL;
    c->sequence = c->context;
    if (td_checkpoint_metadata(ck, "sequence", &sequence) == TD_OK && sequence &&
        !td_cli_metadata_range(command, ck, "sequence", 1, c->context, &c->sequence))
        return TD_CLI_EXIT_FAILURE;
    if (c->width % c->heads != 0) {
        fprintf(stderr, "tandem %s: checkpoint '%s': width %lld is not a multiple of heads %lld\n", command, path,
                (long long)c->width, (long long)c->heads);
        return TD_CLI_EXIT_FAILURE;
    }
    c->optimizer = st->optimizer;
    c->schedule = st->schedule;
    c->data = st->data;
    return TD_CLI_EXIT_OK;
}

int td_cli_text_read_config(const char *command, const char *path, td_cli_text_config *c, unsigned keep,
                            unsigned must_match, td_cli_text_saved *storage, uint64_t *step)
{
    td_context *ctx;
    td_status s = td_context_create(NULL, &ctx);
    if (s != TD_OK)
        return td_cli_fail(command, NULL, s, "creating a context");
    td_checkpoint *ck = NULL;
    if ((s = td_cli_checkpoint_open_path(ctx, path, &ck)) != TD_OK) {
        int rc = td_cli_fail(command, ctx, s, "--checkpoint");
        td_context_destroy(ctx);
        return rc;
    }
    td_cli_text_config saved = *c;
    int rc = td_cli_text_checkpoint_config(command, ck, &saved, storage, step);
    td_checkpoint_close(ck);
    td_context_destroy(ctx);
    if (rc != TD_CLI_EXIT_OK)
        return rc;

    char a[32], b[32];
    snprintf(a, sizeof a, "%.9g", (double)c->dropout);
    snprintf(b, sizeof b, "%.9g", (double)saved.dropout);
    bool bad = td_cli_resume_differs(command, must_match, TD_CLI_TEXT_SET_OPTIMIZER, "--optimizer", c->optimizer, saved.optimizer) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_TEXT_SET_LAYERS, "--layers", c->layers, saved.layers) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_TEXT_SET_HEADS, "--heads", c->heads, saved.heads) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_TEXT_SET_WIDTH, "--width", c->width, saved.width) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_TEXT_SET_CONTEXT, "--context", c->sequence, saved.sequence) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_TEXT_SET_BATCH, "--batch", c->batch, saved.batch) ||
               td_cli_resume_differs(command, must_match, TD_CLI_TEXT_SET_DROPOUT, "--dropout", a, b);
    snprintf(a, sizeof a, "%llu", (unsigned long long)c->seed);
    snprintf(b, sizeof b, "%llu", (unsigned long long)saved.seed);
    bad = bad || td_cli_resume_differs(command, must_match, TD_CLI_TEXT_SET_SEED, "--seed", a, b);
    if (bad)
        return TD_CLI_EXIT_USAGE;

    /* The file's values, except the invocation's own and what it keeps. */
    const td_cli_text_config given = *c;
    *c = saved;
    c->devices = given.devices;
    c->eval_every = given.eval_every;
    c->eval_batches = given.eval_batches;
    c->checkpoint = given.checkpoint;
    c->resume = given.resume;
    c->metrics = given.metrics;
    c->trace = given.trace;
    c->on_device_loss = given.on_device_loss;
    c->balance = given.balance;
    c->timeout = given.timeout;
    c->cpu_threads = given.cpu_threads;
    c->deterministic = given.deterministic;
    c->precision = given.precision;
    c->wire = given.wire;
    c->given = given.given;
    c->recompute = given.recompute;
    c->init = NULL; /* the checkpoint holds the parameters */
    if (keep & TD_CLI_TEXT_SET_DATA)
        c->data = given.data;
    if (keep & TD_CLI_TEXT_SET_STEPS)
        c->steps = given.steps;
    if (keep & TD_CLI_TEXT_SET_BATCH)
        c->batch = given.batch;
    if (keep & TD_CLI_TEXT_SET_CONTEXT)
        c->sequence = given.sequence;
    if (keep & TD_CLI_TEXT_SET_LR)
        c->lr = given.lr;
    if (keep & TD_CLI_TEXT_SET_SCHEDULE)
        c->schedule = given.schedule;
    if (keep & TD_CLI_TEXT_SET_WEIGHT_DECAY)
        c->weight_decay = given.weight_decay;
    return TD_CLI_EXIT_OK;
}
