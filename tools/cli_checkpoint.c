/* Checkpoint metadata for the CLI (see td_cli_checkpoint.h). Values are
 * strings, as safetensors' metadata must be; floats are written with 9
 * significant digits, which read back to the same float. */
#include "td_cli_checkpoint.h"
#include "td_platform.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint32_t td_cli_checkpoint_metadata(const td_cli_config *c, td_cli_metadata *m, td_checkpoint_entry *entries)
{
    snprintf(m->epochs, sizeof m->epochs, "%lld", (long long)c->epochs);
    snprintf(m->steps, sizeof m->steps, "%lld", (long long)c->steps);
    snprintf(m->batch, sizeof m->batch, "%lld", (long long)c->batch);
    snprintf(m->limit, sizeof m->limit, "%lld", (long long)c->limit);
    snprintf(m->accumulate, sizeof m->accumulate, "%lld", (long long)c->accumulate);
    snprintf(m->seed, sizeof m->seed, "%llu", (unsigned long long)c->seed);
    snprintf(m->lr, sizeof m->lr, "%.9g", (double)c->lr);
    snprintf(m->dropout, sizeof m->dropout, "%.9g", (double)c->dropout);
    const td_checkpoint_entry pairs[TD_CLI_METADATA_KEYS] = {
        {"model", c->model},         {"data", c->data},
        {"optimizer", c->optimizer}, {"schedule", c->schedule},
        {"epochs", m->epochs},       {"batch", m->batch},
        {"limit", m->limit},         {"accumulate", m->accumulate},
        {"seed", m->seed},           {"lr", m->lr},
        {"dropout", m->dropout},     {"batch_norm", c->batch_norm ? "1" : "0"},
        {"inputs", c->inputs},       {"steps", m->steps},
    };
    memcpy(entries, pairs, sizeof pairs);
    return TD_CLI_METADATA_KEYS;
}

bool td_cli_metadata_value(const char *command, const td_checkpoint *ck, const char *key, const char **value)
{
    const char *path = "";
    td_checkpoint_path(ck, &path);
    if (td_checkpoint_metadata(ck, key, value) != TD_OK || !*value) {
        fprintf(stderr, "tandem %s: checkpoint '%s' has no '%s' in its metadata (not written by tandem train?)\n",
                command, path, key);
        return false;
    }
    return true;
}

bool td_cli_metadata_copy(const char *command, const td_checkpoint *ck, const char *key, char *out, size_t capacity,
                        const char *const *choices)
{
    const char *v;
    if (!td_cli_metadata_value(command, ck, key, &v))
        return false;
    if (strlen(v) >= capacity) {
        fprintf(stderr, "tandem %s: checkpoint metadata '%s' is too long (%zu bytes)\n", command, key, strlen(v));
        return false;
    }
    if (choices) {
        bool known = false;
        for (size_t i = 0; choices[i] && !known; i++)
            known = strcmp(choices[i], v) == 0;
        if (!known) {
            fprintf(stderr, "tandem %s: checkpoint metadata '%s' is '%s', which this tandem does not know\n", command,
                    key, v);
            return false;
        }
    }
    memcpy(out, v, strlen(v) + 1);
    return true;
}

bool td_cli_metadata_i64(const char *command, const td_checkpoint *ck, const char *key, int64_t *out)
{
    const char *v;
    if (!td_cli_metadata_value(command, ck, key, &v))
        return false;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < 0) {
        fprintf(stderr, "tandem %s: checkpoint metadata '%s' is '%s', expected a non-negative integer\n", command, key,
                v);
        return false;
    }
    *out = n;
    return true;
}

bool td_cli_metadata_range(const char *command, const td_checkpoint *ck, const char *key, int64_t lo, int64_t hi,
                           int64_t *out)
{
    if (!td_cli_metadata_i64(command, ck, key, out))
        return false;
    if (*out < lo || *out > hi) {
        const char *path = "";
        td_checkpoint_path(ck, &path);
        fprintf(stderr, "tandem %s: checkpoint '%s': metadata '%s' is %lld, expected %lld to %lld\n", command, path,
                key, (long long)*out, (long long)lo, (long long)hi);
        return false;
    }
    return true;
}

bool td_cli_metadata_u64(const char *command, const td_checkpoint *ck, const char *key, uint64_t *out)
{
    td_status s = td_checkpoint_metadata_u64(ck, key, out);
    if (s != TD_OK) {
        const char *path = "";
        td_checkpoint_path(ck, &path);
        fprintf(stderr, "tandem %s: checkpoint '%s': metadata '%s': %s, expected a decimal number\n", command, path,
                key, td_status_name(s));
        return false;
    }
    return true;
}

bool td_cli_metadata_float(const char *command, const td_checkpoint *ck, const char *key, float *out)
{
    const char *v;
    if (!td_cli_metadata_value(command, ck, key, &v))
        return false;
    char *end;
    float f = strtof(v, &end);
    if (end == v || *end) {
        fprintf(stderr, "tandem %s: checkpoint metadata '%s' is '%s', expected a number\n", command, key, v);
        return false;
    }
    *out = f;
    return true;
}

/* How the run scaled its inputs: one of td_cli_inputs, as a static string.
 * The one key a tandem file may lack: it came with standardized inputs,
 * and every run before it fed raw pixels (/ 255), so an absent key reads
 * as "raw" -- what that run trained on. A value this tandem does not know
 * is refused by name rather than guessed. */
static bool read_inputs(const char *command, const td_checkpoint *ck, const char **out)
{
    const char *v = NULL;
    td_status s = td_checkpoint_metadata(ck, "inputs", &v);
    if (s != TD_OK) {
        fprintf(stderr, "tandem %s: reading checkpoint metadata 'inputs': %s\n", command, td_status_describe(s));
        return false;
    }
    if (!v) {
        *out = "raw";
        return true;
    }
    for (size_t i = 0; td_cli_inputs[i]; i++)
        if (strcmp(td_cli_inputs[i], v) == 0) {
            *out = td_cli_inputs[i];
            return true;
        }
    fprintf(stderr, "tandem %s: checkpoint metadata 'inputs' is '%s', which this tandem does not know (expected raw or "
                    "standardized)\n",
            command, v);
    return false;
}

/* The file's config into *c, field by field. */
static bool read_config(const char *command, const td_checkpoint *ck, td_cli_config *c, td_cli_saved_config *st,
                        td_cli_position *at)
{
    int64_t epoch, position, batch_norm;
    if (!td_cli_metadata_copy(command, ck, "model", st->model, sizeof st->model, td_cli_models) ||
        !td_cli_metadata_copy(command, ck, "optimizer", st->optimizer, sizeof st->optimizer, td_cli_optimizers) ||
        !td_cli_metadata_copy(command, ck, "schedule", st->schedule, sizeof st->schedule, td_cli_schedules) ||
        !td_cli_metadata_copy(command, ck, "data", st->data, sizeof st->data, NULL) ||
        !td_cli_metadata_range(command, ck, "epochs", 1, TD_CLI_MAX_EPOCHS, &c->epochs) ||
        !td_cli_metadata_range(command, ck, "batch", 1, TD_CLI_MAX_BATCH, &c->batch) ||
        !td_cli_metadata_range(command, ck, "limit", 0, TD_CLI_MAX_EXAMPLES, &c->limit) ||
        !td_cli_metadata_range(command, ck, "accumulate", 1, TD_CLI_MAX_ACCUMULATE, &c->accumulate) ||
        !td_cli_metadata_u64(command, ck, "seed", &c->seed) || !td_cli_metadata_float(command, ck, "lr", &c->lr) ||
        !td_cli_metadata_float(command, ck, "dropout", &c->dropout) ||
        !td_cli_metadata_range(command, ck, "batch_norm", 0, 1, &batch_norm) ||
        !td_cli_metadata_range(command, ck, "epoch", 0, TD_CLI_MAX_EPOCHS, &epoch) ||
        !td_cli_metadata_range(command, ck, "position", 0, TD_CLI_MAX_EXAMPLES, &position))
        return false;
    if (!(c->lr > 0.0f && c->lr <= 1e3f) || !(c->dropout >= 0.0f && c->dropout < 1.0f)) {
        fprintf(stderr, "tandem %s: checkpoint metadata has lr %g and dropout %g, expected 0 < lr <= 1000 and 0 <= dropout < 1\n",
                command, (double)c->lr, (double)c->dropout);
        return false;
    }
    c->model = st->model;
    c->optimizer = st->optimizer;
    c->schedule = st->schedule;
    c->data = st->data;
    c->batch_norm = batch_norm != 0;
    if (!read_inputs(command, ck, &c->inputs))
        return false;
    /* A run by --steps records them; files from before the flag ran whole
     * epochs. */
    const char *steps = NULL;
    c->steps = 0;
    if (td_checkpoint_metadata(ck, "steps", &steps) == TD_OK && steps &&
        !td_cli_metadata_range(command, ck, "steps", 0, TD_CLI_MAX_EXAMPLES, &c->steps))
        return false;
    at->epoch = (uint64_t)epoch;
    at->position = (uint64_t)position;
    return true;
}

bool td_cli_resume_differs(const char *command, unsigned must_match, unsigned bit, const char *flag, const char *given,
                           const char *saved)
{
    if (!(must_match & bit) || strcmp(given, saved) == 0)
        return false;
    fprintf(stderr,
            "tandem %s: %s %s differs from the checkpoint's %s; a resumed run keeps the model and its data "
            "(leave the flag out)\n",
            command, flag, given, saved);
    return true;
}

bool td_cli_resume_differs_int(const char *command, unsigned must_match, unsigned bit, const char *flag,
                               long long given, long long saved)
{
    char a[32], b[32];
    snprintf(a, sizeof a, "%lld", given);
    snprintf(b, sizeof b, "%lld", saved);
    return td_cli_resume_differs(command, must_match, bit, flag, a, b);
}

int td_cli_checkpoint_read_config(const char *command, const char *dir, td_cli_config *c, unsigned keep,
                                  unsigned must_match, td_cli_saved_config *storage, td_cli_position *at)
{
    /* A silent context: the session's, which opens the same file next to
     * restore it, warns about the corrupt files it skips (once, not twice). */
    td_context *ctx;
    td_status s = td_context_create(NULL, &ctx);
    if (s != TD_OK)
        return td_cli_fail(command, NULL, s, "creating a context");
    td_checkpoint *ck = NULL;
    if ((s = td_cli_checkpoint_open_path(ctx, dir, &ck)) != TD_OK) {
        int rc = td_cli_fail(command, ctx, s, "--checkpoint");
        td_context_destroy(ctx);
        return rc;
    }
    td_cli_config saved = *c;
    bool ok = read_config(command, ck, &saved, storage, at);
    td_checkpoint_close(ck);
    td_context_destroy(ctx);
    if (!ok)
        return TD_CLI_EXIT_FAILURE;

    char a[32], b[32];
    bool bad = td_cli_resume_differs(command, must_match, TD_CLI_SET_MODEL, "--model", c->model, saved.model) ||
               td_cli_resume_differs(command, must_match, TD_CLI_SET_OPTIMIZER, "--optimizer", c->optimizer,
                                     saved.optimizer) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_SET_BATCH, "--batch", c->batch, saved.batch) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_SET_LIMIT, "--limit", c->limit, saved.limit) ||
               td_cli_resume_differs_int(command, must_match, TD_CLI_SET_ACCUMULATE, "--accumulate", c->accumulate,
                                         saved.accumulate);
    snprintf(a, sizeof a, "%llu", (unsigned long long)c->seed);
    snprintf(b, sizeof b, "%llu", (unsigned long long)saved.seed);
    bad = bad || td_cli_resume_differs(command, must_match, TD_CLI_SET_SEED, "--seed", a, b);
    snprintf(a, sizeof a, "%.9g", (double)c->dropout);
    snprintf(b, sizeof b, "%.9g", (double)saved.dropout);
    bad = bad || td_cli_resume_differs(command, must_match, TD_CLI_SET_DROPOUT, "--dropout", a, b);
    bad = bad || td_cli_resume_differs(command, must_match, TD_CLI_SET_BATCH_NORM, "--batch-norm",
                                       c->batch_norm ? "on" : "off", saved.batch_norm ? "on" : "off");
    bad = bad || td_cli_resume_differs(command, must_match, TD_CLI_SET_INPUTS, "--inputs", c->inputs, saved.inputs);
    if (bad)
        return TD_CLI_EXIT_USAGE;

    /* The file's values, except where the caller keeps its own. */
    const td_cli_config given = *c;
    *c = saved;
    c->devices = given.devices;
    c->checkpoint = given.checkpoint;
    c->resume = given.resume;
    c->metrics = given.metrics;
    c->trace = given.trace;
    c->on_device_loss = given.on_device_loss;
    c->balance = given.balance;
    c->eval_limit = given.eval_limit; /* how the run is watched, not what it trains */
    c->eval_every = given.eval_every;
    c->timeout = given.timeout;
    c->cpu_threads = given.cpu_threads;
    c->deterministic = given.deterministic;
    c->precision = given.precision; /* how it computes, like --deterministic: the caller's */
    c->wire = given.wire;           /* likewise how the gradients travel */
    if (keep & TD_CLI_SET_DATA)
        c->data = given.data;
    if (keep & (TD_CLI_SET_EPOCHS | TD_CLI_SET_STEPS)) { /* the run's length is the caller's: one or the other */
        c->epochs = given.epochs;
        c->steps = given.steps;
    }
    if (keep & TD_CLI_SET_BATCH)
        c->batch = given.batch;
    if (keep & TD_CLI_SET_LR)
        c->lr = given.lr;
    if (keep & TD_CLI_SET_SCHEDULE)
        c->schedule = given.schedule;
    return TD_CLI_EXIT_OK;
}

int td_cli_restore_trainer(const char *command, td_context *ctx, td_trainer *trainer, const char *path, char *file,
                           size_t capacity)
{
    td_file_kind kind;
    td_status st;
    if (td_platform_path_kind_followed(path, &kind, NULL) == 0 && kind == TD_FILE_KIND_DIRECTORY) {
        /* A directory's newest file may be one this trainer cannot take
         * (another shape, a torn write the listing could not see): the
         * library falls back to the newest that restores, warning about
         * each file it skips. */
        st = td_checkpoint_restore_latest(trainer, path, file, capacity);
        return st == TD_OK ? TD_CLI_EXIT_OK : td_cli_fail(command, ctx, st, "restoring the checkpoint");
    }
    td_checkpoint *ck = NULL;
    st = td_checkpoint_open(ctx, path, &ck);
    if (st == TD_OK) {
        const char *p = "";
        td_checkpoint_path(ck, &p);
        snprintf(file, capacity, "%s", p);
        st = td_checkpoint_restore(ck, trainer);
        td_checkpoint_close(ck);
    }
    return st == TD_OK ? TD_CLI_EXIT_OK : td_cli_fail(command, ctx, st, "restoring the checkpoint");
}

bool td_cli_checkpoint_read_u64(const char *command, td_context *ctx, const char *file, const char *key, uint64_t max,
                                uint64_t *value)
{
    td_checkpoint *ck = NULL;
    td_status st = td_checkpoint_open(ctx, file, &ck);
    if (st != TD_OK) {
        td_cli_fail(command, ctx, st, "reading the restored checkpoint again");
        return false;
    }
    bool ok = td_cli_metadata_u64(command, ck, key, value);
    if (ok && *value > max) {
        fprintf(stderr, "tandem %s: checkpoint '%s': metadata '%s' is %llu, expected at most %llu\n", command, file, key,
                (unsigned long long)*value, (unsigned long long)max);
        ok = false;
    }
    td_checkpoint_close(ck);
    return ok;
}

bool td_cli_checkpoint_dir_used(const char *dir)
{
    td_platform_dir *d;
    if (td_platform_dir_open(dir, &d) != 0)
        return false;
    bool used = false;
    const char *name;
    while (!used && (name = td_platform_dir_next(d)) != NULL)
        used = strncmp(name, "ckpt-", 5) == 0;
    td_platform_dir_close(d);
    return used;
}

td_status td_cli_checkpoint_open_path(td_context *ctx, const char *path, td_checkpoint **out)
{
    td_file_kind kind;
    if (td_platform_path_kind_followed(path, &kind, NULL) == 0 && kind == TD_FILE_KIND_DIRECTORY)
        return td_checkpoint_open_latest(ctx, path, out);
    return td_checkpoint_open(ctx, path, out);
}

bool td_cli_checkpoint_model(const char *path, char *model, size_t capacity)
{
    td_context *ctx;
    if (td_context_create(NULL, &ctx) != TD_OK)
        return false;
    td_checkpoint *ck = NULL;
    const char *v = NULL;
    bool found = td_cli_checkpoint_open_path(ctx, path, &ck) == TD_OK &&
                 td_checkpoint_metadata(ck, "model", &v) == TD_OK && v && strlen(v) < capacity;
    if (found)
        memcpy(model, v, strlen(v) + 1);
    td_checkpoint_close(ck);
    td_context_destroy(ctx);
    return found;
}

int td_cli_checkpoint_require(const char *command, const char *dir)
{
    td_context *ctx;
    if (td_context_create(NULL, &ctx) != TD_OK)
        return TD_CLI_EXIT_OK; /* the run's own context creation will say why */
    /* checkpoint.h: without checkpoints every function answers
     * TD_ERR_UNSUPPORTED; with them a NULL path is only a bad argument,
     * found before any file is touched. */
    td_checkpoint *ck = NULL;
    const bool built = td_checkpoint_open(ctx, NULL, &ck) != TD_ERR_UNSUPPORTED;
    td_context_destroy(ctx);
    if (built)
        return TD_CLI_EXIT_OK;
    fprintf(stderr,
            "tandem %s: --checkpoint '%s': this tandem was built without checkpoints (-Dcheckpoint=disabled, or "
            "libjansson-dev missing at build time); leave out --checkpoint and --resume, or rebuild with them\n",
            command, dir);
    return TD_CLI_EXIT_USAGE;
}

bool td_cli_resume_nothing_yet(const char *command, const char *dir)
{
    if (td_cli_checkpoint_dir_used(dir))
        return false;
    fprintf(stderr, "tandem %s: --resume: no checkpoint in '%s' yet; starting a new run\n", command, dir);
    return true;
}

int td_cli_checkpoint_prepare_dir(const char *command, const char *dir, bool resume)
{
    /* The directory (its parents too) is made by the first save
     * (td_checkpoint_save_dir). */
    if (!resume && td_cli_checkpoint_dir_used(dir)) {
        fprintf(stderr,
                "tandem %s: --checkpoint '%s' already holds checkpoints of another run; add --resume to continue "
                "it, or choose an empty directory\n",
                command, dir);
        return TD_CLI_EXIT_USAGE;
    }
    return TD_CLI_EXIT_OK;
}
