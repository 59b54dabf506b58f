/* `tandem train --model gpt`: trains a GPT on text, data-parallel.
 *
 * A run is counted in optimizer steps: batch `step` is td_text_batch(seed,
 * step), the same on every mesh and in every process, so a checkpoint
 * needs only the step to go on from, and a resumed run does bitwise what
 * the run that never stopped did (on the same mesh). Every --eval-every
 * steps, and at the end, the run writes its checkpoint and then measures
 * the loss on the validation windows (llm.c's: T + 1 tokens at stride T),
 * so an evaluation that fails never costs the training before it. SIGINT
 * and SIGTERM are handled as `tandem train` handles them for the other
 * models: the step finishes, a checkpoint is written, the exit code is 128
 * + the signal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "td_cli_checkpoint.h"
#include "td_cli_flags.h"
#include "td_cli_job.h"
#include "td_cli_metrics.h"
#include "td_cli_progress.h"
#include "td_cli_session.h"
#include "td_cli_signals.h"
#include "td_cli_text.h"

#define FLAG(name, kind, target, lo, hi, bit, value, help) {name, kind, target, lo, hi, 0, NULL, bit, value, help}

static const char *const gpt_only[] = {"gpt", NULL};

static const char usage_text[] =
    "usage: tandem train --model gpt [--data FILE|DIR] [--layers N --heads N --width N --context T] [--batch N]\n"
    "                    [--steps N] [--devices SPEC] [--checkpoint DIR [--resume]] [--metrics FILE] [options]\n"
    "Trains a GPT-2-style transformer on text: a file read as bytes (vocabulary 256), llm.c's GPT-2 token\n"
    "shards (*.bin, vocabulary 50257), or a directory of either (default " TD_TEXT_DEFAULT_CORPUS
    ", Debian's\n"
    "fortunes). The defaults are nanoGPT's character model on a CPU. Batch k is drawn from (seed, k) alone:\n"
    "--resume goes on bitwise. Validation: every window of T + 1 tokens at stride T of the held-out tail\n"
    "(or the *val* shards), with bits per byte for byte text. Exit codes: 0 done, 1 failed, 2 bad command\n"
    "line, 130 / 143 stopped by SIGINT / SIGTERM after its step (checkpoint written with --checkpoint).";

typedef struct text_run {
    td_cli_text_session s;
    td_cli_metrics metrics;
    td_cli_progress progress;
    td_step_timing *timing; /* the last step's, per device, from the step callback */
    uint32_t *split;        /* the last step's sequences per device, likewise */
    uint32_t n_timing;      /* devices in them: fewer once a device was dropped */
    float lr;               /* the last step's learning rate, likewise */
    char path[4096];        /* the last checkpoint written or restored */
    char trace_path[4096];  /* this process's trace, across processes */
    /* This run's training (a resumed run's own), for its rate. */
    uint64_t trained;
    double train_seconds;
    /* Since the last validation: the steps' losses and time. */
    double interval_loss, interval_seconds;
    uint64_t interval_steps;
    /* The last validation's and interval's results, for the final line. */
    double train_loss, val_loss;
    size_t val_windows;
    bool has_train_loss, has_val;
} text_run;

static uint32_t devices_now(text_run *r, uint32_t trainer_devices)
{
    return td_cli_job_devices(r->s.mesh, r->s.processes, trainer_devices);
}

/* td_trainer_on_step: keeps what the metrics lines need of each step. */
static void on_step(void *user, const td_step_report *report)
{
    text_run *r = user;
    r->lr = report->learning_rate;
    r->n_timing = report->n_devices;
    memcpy(r->timing, report->timing, sizeof *r->timing * report->n_devices);
    memcpy(r->split, report->split, sizeof *r->split * report->n_devices);
    if (r->s.process != 0)
        return; /* across processes process 0 tells */
    if (report->rebalanced) {
        td_cli_progress_clear(&r->progress);
        fprintf(stderr, "tandem train: step %llu: measured the devices' speeds; the batch is split anew from the next "
                        "step (see --metrics, or the final line)\n",
                (unsigned long long)report->micro_step);
    }
    if (report->devices_lost) {
        td_cli_progress_clear(&r->progress);
        fprintf(stderr, "tandem train: step %llu: %u device(s) lost, continuing on %u\n",
                (unsigned long long)report->micro_step, report->devices_lost, devices_now(r, report->n_devices));
    }
}

static int save(text_run *r, uint64_t step)
{
    td_status st = td_cli_text_checkpoint_write(&r->s, r->s.config.checkpoint, step, r->path, sizeof r->path);
    return st == TD_OK ? TD_CLI_EXIT_OK : td_cli_fail("train", r->s.ctx, st, "writing a checkpoint");
}

/* Passes over the training tokens after `step` steps: the x of the
 * metrics lines (what `tandem plot` calls epochs). */
static double passes(const text_run *r, uint64_t step)
{
    const double tokens = (double)r->s.config.batch * (double)r->s.config.sequence * (double)step;
    return r->s.summary.train_tokens ? tokens / (double)r->s.summary.train_tokens : 0.0;
}

/* The validation after `step` steps: its line, its metrics record, and a
 * new interval of training losses. */
static td_status validate(text_run *r, uint64_t step)
{
    td_cli_text_session *s = &r->s;
    const td_cli_text_config *c = &s->config;
    const uint32_t before = devices_now(r, 0);
    const double t0 = td_cli_now();
    double loss = 0.0;
    size_t windows = 0;
    td_status st = td_cli_text_evaluate(s, c->eval_batches, &loss, &windows);
    const double seconds = td_cli_now() - t0;
    const uint32_t after = devices_now(r, 0);
    td_cli_progress_clear(&r->progress);
    if (after < before && s->process == 0)
        fprintf(stderr, "tandem train: validating at step %llu: %u device(s) lost, continuing on %u\n",
                (unsigned long long)step, before - after, after);
    if (st != TD_OK)
        return st;
    td_cli_eval_record rec = {.step = step, .progress = passes(r, step), .val_loss = loss, .windows = windows,
                              .seconds = seconds};
    rec.has_train_loss = r->interval_steps > 0;
    if (rec.has_train_loss) {
        rec.train_loss = r->interval_loss / (double)r->interval_steps;
        rec.tokens_per_second = (double)r->interval_steps * (double)c->batch * (double)c->sequence /
                                r->interval_seconds;
        r->train_loss = rec.train_loss;
        r->has_train_loss = true;
    }
    rec.has_bits_per_byte = s->summary.bytes;
    rec.val_bits_per_byte = loss / log(2.0);
    r->has_val = windows > 0;
    r->val_loss = loss;
    r->val_windows = windows;
    printf("step %llu/%lld:", (unsigned long long)step, (long long)c->steps);
    if (rec.has_train_loss)
        printf(" train loss %.4f,", rec.train_loss);
    if (windows == 0)
        printf(" no validation: %zu validation tokens hold no window of --context %lld + 1", s->summary.val_tokens,
               (long long)c->sequence);
    else
        printf(" val loss %.4f", loss);
    if (windows > 0 && rec.has_bits_per_byte)
        printf(" (%.3f bits/byte)", rec.val_bits_per_byte);
    if (windows > 0)
        printf(" on %zu windows", windows);
    if (rec.has_train_loss)
        printf(", %.0f tokens/s", rec.tokens_per_second);
    printf(", validation %.1f s\n", seconds);
    fflush(stdout);
    if (windows > 0)
        td_cli_metrics_eval(&r->metrics, &rec);
    r->interval_loss = r->interval_seconds = 0.0;
    r->interval_steps = 0;
    return TD_OK;
}

static void print_header(const text_run *r, uint64_t start)
{
    const td_cli_text_session *s = &r->s;
    const td_cli_text_config *c = &s->config;
    printf("tandem train: gpt, %lld layers, %lld heads, width %lld, context %lld, vocabulary %lld (%.2f M "
           "parameters) on %u device(s) [%s]; data %s (%s: %zu training tokens, %zu validation, %zu windows); global "
           "batch %lld x %lld tokens, %lld steps, %s lr %g (%s), weight decay %g, dropout %g, seed %llu\n",
           (long long)c->layers, (long long)c->heads, (long long)c->width, (long long)c->context, (long long)c->vocab,
           (double)s->parameter_count / 1e6, s->n_devices, c->devices, c->data,
           s->summary.bytes ? "bytes" : "GPT-2 tokens", s->summary.train_tokens, s->summary.val_tokens,
           s->val_windows, (long long)c->batch, (long long)c->sequence, (long long)c->steps, c->optimizer, (double)c->lr,
           c->schedule, (double)c->weight_decay, (double)c->dropout, (unsigned long long)c->seed);
    if (c->init)
        printf("starting from --init %s\n", c->init);
    if (c->resume)
        printf("resumed from %s at step %llu\n", r->path, (unsigned long long)start);
    if (start >= (uint64_t)c->steps)
        printf("nothing to train: the checkpoint is at step %llu of %lld (raise --steps)\n",
               (unsigned long long)start, (long long)c->steps);
    fflush(stdout);
}

/* The interruption: a checkpoint at `step` when asked for, and the exit
 * code of the signal. */
static int interrupted(text_run *r, uint64_t step)
{
    const td_cli_text_config *c = &r->s.config;
    td_cli_progress_clear(&r->progress);
    if (!c->checkpoint) {
        printf("interrupted at step %llu/%lld (no --checkpoint: nothing saved)\n", (unsigned long long)step,
               (long long)c->steps);
        return td_cli_signal_exit();
    }
    int rc = save(r, step);
    if (rc != TD_CLI_EXIT_OK)
        return rc;
    printf("interrupted at step %llu/%lld: checkpoint %s\n", (unsigned long long)step, (long long)c->steps, r->path);
    return td_cli_signal_exit();
}

/* Steps from `start` to the run's end; returns an exit code. */
static int run_loop(text_run *r, uint64_t start)
{
    td_cli_text_session *s = &r->s;
    const td_cli_text_config *c = &s->config;
    const uint64_t end = (uint64_t)c->steps > start ? (uint64_t)c->steps : start;
    const double tokens_per_step = (double)c->batch * (double)c->sequence;
    td_cli_progress_init(&r->progress, 0, (size_t)c->steps, end - start);
    td_status st;
    for (uint64_t step = start;;) {
        /* Every process stops at the same step. */
        if (step > start && td_cli_agree(s->ctx, s->processes, td_cli_stop_requested()))
            return interrupted(r, step);
        const bool every = c->eval_every > 0 && step % (uint64_t)c->eval_every == 0 && (step > start || step == 0);
        if (step == end || every) {
            td_cli_progress_clear(&r->progress);
            const bool checkpoint = c->checkpoint && step > start;
            int rc;
            if (checkpoint && (rc = save(r, step)) != TD_CLI_EXIT_OK)
                return rc;
            if ((st = validate(r, step)) != TD_OK) {
                if (checkpoint)
                    printf("checkpoint %s\n", r->path);
                return td_cli_fail("train", s->ctx, st, "validating");
            }
            if (checkpoint)
                printf("checkpoint %s\n", r->path);
            fflush(stdout);
        }
        if (step == end)
            return TD_CLI_EXIT_OK;
        float loss = 0.0f;
        const double t0 = td_cli_now();
        if ((st = td_cli_text_step(s, step, &loss)) != TD_OK) {
            td_cli_progress_clear(&r->progress);
            return td_cli_fail("train", s->ctx, st, "training step");
        }
        const double seconds = td_cli_now() - t0;
        step++;
        r->trained++;
        r->train_seconds += seconds;
        r->interval_loss += loss;
        r->interval_seconds += seconds;
        r->interval_steps++;
        if (r->metrics.file) {
            const td_cli_step_record rec = {
                .step = step, .steps = (uint64_t)c->steps, .global = step, .loss = loss, .lr = r->lr,
                .samples_per_second = (double)c->batch / seconds, .seconds = seconds, .n_devices = r->n_timing,
                .timing = r->timing, .split = r->split, .by_steps = true, .progress = passes(r, step),
                .tokens_per_second = tokens_per_step / seconds};
            td_cli_metrics_step(&r->metrics, &rec);
        }
        if (!isfinite(loss)) {
            td_cli_progress_clear(&r->progress);
            return td_cli_diverged("train", loss, step);
        }
        /* The line shows this run's rate so far: one step's rate jumps about. */
        td_cli_progress_steps(&r->progress, step, tokens_per_step * (double)r->trained / r->train_seconds, loss);
    }
}

static void print_summary(text_run *r, double seconds, bool identical)
{
    td_cli_text_session *s = &r->s;
    const td_cli_text_config *c = &s->config;
    td_train_progress p = {0};
    td_trainer_progress(s->trainer, &p);
    const double tokens_per_second =
        r->train_seconds > 0.0 ? (double)r->trained * (double)c->batch * (double)c->sequence / r->train_seconds : 0.0;
    printf("{\"command\":\"train\",\"model\":\"gpt\",\"devices\":");
    td_cli_json_string(stdout, c->devices);
    printf(",\"processes\":%u,\"device_count\":%u,\"data\":", s->processes, s->n_devices);
    td_cli_json_string(stdout, c->data);
    printf(",\"layers\":%lld,\"heads\":%lld,\"width\":%lld,\"context\":%lld,\"sequence\":%lld,\"vocab\":%lld,"
           "\"parameters\":%llu,\"batch\":%lld,\"steps\":%lld,\"optimizer\":\"%s\",\"lr\":%g,\"updates\":%llu,",
           (long long)c->layers, (long long)c->heads, (long long)c->width, (long long)c->context,
           (long long)c->sequence, (long long)c->vocab,
           (unsigned long long)s->parameter_count, (long long)c->batch, (long long)c->steps, c->optimizer,
           (double)c->lr, (unsigned long long)p.updates);
    printf("\"train_loss\":");
    td_cli_json_number(stdout, "%.6g", r->has_train_loss ? r->train_loss : NAN);
    putchar(',');
    printf("\"val_loss\":");
    td_cli_json_number(stdout, "%.6g", r->has_val ? r->val_loss : NAN);
    putchar(',');
    if (r->has_val && s->summary.bytes) {
        printf("\"val_bits_per_byte\":");
        td_cli_json_number(stdout, "%.6g", r->val_loss / log(2.0));
        putchar(',');
    }
    printf("\"val_windows\":%zu,\"tokens_per_second\":%.1f,\"train_seconds\":%.3f,\"seconds\":%.3f,"
           "\"devices_at_end\":%u,\"devices_lost\":%u,\"balance\":\"%s\",",
           r->val_windows, tokens_per_second, r->train_seconds, seconds, devices_now(r, p.devices), p.devices_lost,
           c->balance ? c->balance : "even");
    td_cli_job_print_split(s->ctx, s->mesh, s->trainer, s->n_devices, stdout);
    /* Bytes per device of this process (seed 002's accounting). */
    printf(",\"memory\":");
    td_cli_text_print_memory(s, stdout);
    printf(",\"replicas_bitwise_identical\":%s}\n", identical ? "true" : "false");
}

int td_cli_train_text(int argc, char **argv)
{
    td_cli_text_config c;
    td_cli_text_config_defaults(&c);
    const char *model = "gpt";
    const td_cli_flag flags[] = {
        {"--model", TD_CLI_CHOICE, &model, 0, 0, 0, gpt_only, 0, "gpt", "this model (tandem train --help: the others)"},
        FLAG("--data", TD_CLI_STRING, &c.data, 0, 0, TD_CLI_TEXT_SET_DATA, "PATH",
             "a text file (bytes), a GPT-2 token shard (.bin) or a directory of either (default "
             TD_TEXT_DEFAULT_CORPUS ")"),
        FLAG("--layers", TD_CLI_INT, &c.layers, 1, 1024, TD_CLI_TEXT_SET_LAYERS, "N", "transformer blocks (default 4)"),
        FLAG("--heads", TD_CLI_INT, &c.heads, 1, 1024, TD_CLI_TEXT_SET_HEADS, "N",
             "attention heads, dividing --width (default 4)"),
        FLAG("--width", TD_CLI_INT, &c.width, 1, 65536, TD_CLI_TEXT_SET_WIDTH, "N",
             "the residual stream's features (default 128)"),
        FLAG("--context", TD_CLI_INT, &c.sequence, 1, 1 << 20, TD_CLI_TEXT_SET_CONTEXT, "T",
             "tokens per training sequence, and the model's positions (with --init: at most the file's; default "
             "64, with --init the file's)"),
        FLAG("--batch", TD_CLI_INT, &c.batch, 1, 1 << 20, TD_CLI_TEXT_SET_BATCH, "N",
             "global batch in sequences, split over the devices (default 12)"),
        FLAG("--steps", TD_CLI_INT, &c.steps, 1, 4294967295.0, TD_CLI_TEXT_SET_STEPS, "N",
             "optimizer steps of the run, a resumed one's included (default 2000)"),
        FLAG("--lr", TD_CLI_FLOAT, &c.lr, 1e-9, 1e3, TD_CLI_TEXT_SET_LR, "X",
             "learning rate, the peak of a schedule (default: the optimizer's, 1e-3 for adamw, adam and rmsprop, "
             "0.01 for sgd and momentum)"),
        {"--optimizer", TD_CLI_CHOICE, &c.optimizer, 0, 0, 0, td_cli_optimizers, TD_CLI_TEXT_SET_OPTIMIZER, "NAME",
         "default adamw; momentum is SGD with momentum 0.9"},
        FLAG("--weight-decay", TD_CLI_FLOAT, &c.weight_decay, 0, 1e3, TD_CLI_TEXT_SET_WEIGHT_DECAY, "X",
             "AdamW's decoupled decay (default 1e-4, the trainer's)"),
        {"--schedule", TD_CLI_CHOICE, &c.schedule, 0, 0, 0, td_cli_schedules, TD_CLI_TEXT_SET_SCHEDULE, "NAME",
         "the rate over --steps (default constant); warmup-cosine warms up over the first tenth"},
        {"--dropout", TD_CLI_FLOAT, &c.dropout, 0, 1, 1, NULL, TD_CLI_TEXT_SET_DROPOUT, "P",
         "GPT-2's dropouts: embeddings, attention weights, residual branches (default 0)"},
        FLAG("--seed", TD_CLI_U64, &c.seed, 0, 0, TD_CLI_TEXT_SET_SEED, "N",
             "initial parameters, dropout and every batch (default 0)"),
        FLAG("--devices", TD_CLI_STRING, &c.devices, 0, 0, 0, "SPEC",
             "e.g. cpu:4, opencl:0,cpu:2, vulkan:0x2 (default cpu:4)"),
        FLAG("--eval-every", TD_CLI_INT, &c.eval_every, 0, 4294967295.0, 0, "N",
             "validate (and checkpoint) every N steps and at step 0; 0: at the end only (default 250)"),
        FLAG("--eval-batches", TD_CLI_INT, &c.eval_batches, 0, 1e12, 0, "N",
             "validation batches per evaluation; 0: every window (default 0)"),
        FLAG("--checkpoint", TD_CLI_STRING, &c.checkpoint, 0, 0, 0, "DIR",
             "save with each validation, at the end and on SIGINT/SIGTERM, keeping the newest 3"),
        FLAG("--resume", TD_CLI_SWITCH, &c.resume, 0, 0, 0, "",
             "continue from the newest valid checkpoint in DIR (none yet: a new run, said on stderr)"),
        FLAG("--metrics", TD_CLI_STRING, &c.metrics, 0, 0, 0, "FILE",
             "JSON lines per step and per validation (appended to when resuming)"),
        FLAG("--trace", TD_CLI_STRING, &c.trace, 0, 0, 0, "FILE",
             "timeline of every device and the host, Chrome trace JSON (open in ui.perfetto.dev)"),
        {"--on-device-loss", TD_CLI_CHOICE, &c.on_device_loss, 0, 0, 0, td_cli_device_loss, 0, "WHAT",
         "fail (default), or continue on the devices left"},
        FLAG("--balance", TD_CLI_STRING, &c.balance, 0, 0, 0, "B",
             "even (default), auto (by each device's measured speed) or weights W,W,... per device"),
        FLAG("--timeout", TD_CLI_FLOAT, &c.timeout, TD_CLI_MIN_TIMEOUT, TD_CLI_MAX_TIMEOUT, 0, "SECONDS",
             "bound on every wait for a device or process (td_context_options.timeout_ms; default 60): a device that "
             "hangs fails its step within about 4 x this"),
        FLAG("--cpu-threads", TD_CLI_INT, &c.cpu_threads, 1, TD_CLI_MAX_CPU_THREADS, 0, "N",
             "threads the simulated CPU devices share, their own included (default: the machine's cores); with fewer cpu "
             "devices than threads each device's kernels spread over the spare ones, with the same results"),
        FLAG("--deterministic", TD_CLI_SWITCH, &c.deterministic, 0, 0, 0, "",
             "the same bits on any CPU: cpu devices use tandem's own fixed-order GEMM, not OpenBLAS "
             "(td_context_options.deterministic; may be slower)"),
        {"--precision", TD_CLI_CHOICE, &c.precision, 0, 0, 0, td_cli_precisions, 0, "P",
         "fp32 (default) or bf16: every matrix product with bfloat16 inputs and float sums (AVX512_BF16 where the "
         "CPU has it); weights, optimizer state, loss and gradients stay fp32"},
        {"--wire", TD_CLI_CHOICE, &c.wire, 0, 0, 0, td_cli_wires, 0, "W",
         "fp32 (default) or bf16: gradients pass between devices (and processes) as bfloat16, every sum in "
         "fp32, the sum rounded to bfloat16 before the update; parameters stay fp32 and identical everywhere"},
        FLAG("--init", TD_CLI_STRING, &c.init, 0, 0, 0, "FILE",
             "start from GPT-2 weights: llm.c's gpt2_124M.bin, a Hugging Face model.safetensors (or its folder) or a "
             "tandem checkpoint file; the model's sizes are the file's"),
        FLAG("--recompute", TD_CLI_SWITCH, &c.recompute, 0, 0, 0, "",
             "keep only each block's input for the backward pass and compute the block again (less memory, the "
             "same values)"),
    };
    const size_t n_flags = sizeof flags / sizeof flags[0];
    unsigned set = 0;
    int rc = td_cli_parse("train", argc, argv, flags, n_flags, &set, NULL, 0, NULL);
    if (rc == TD_CLI_HELP) {
        td_cli_print_help(stdout, usage_text, flags, n_flags);
        return TD_CLI_EXIT_OK;
    }
    if (rc != TD_CLI_PARSED)
        return TD_CLI_EXIT_USAGE;
    if (c.resume && !c.checkpoint) {
        fprintf(stderr, "tandem train: --resume needs --checkpoint DIR\n");
        return TD_CLI_EXIT_USAGE;
    }
    if (c.resume && c.init) {
        fprintf(stderr, "tandem train: --resume goes on from the checkpoint's parameters; leave out --init '%s'\n",
                c.init);
        return TD_CLI_EXIT_USAGE;
    }
    if (c.checkpoint && (rc = td_cli_checkpoint_require("train", c.checkpoint)) != TD_CLI_EXIT_OK)
        return rc;
    if (c.resume && td_cli_resume_nothing_yet("train", c.checkpoint))
        c.resume = false;
    c.given = set;
    c.context = c.sequence; /* --init or --resume: the file's */
    float weights[64];
    uint32_t n_weights;
    td_balance balance;
    if (c.balance && !td_cli_balance_parse("train", c.balance, &balance, 64, weights, &n_weights))
        return TD_CLI_EXIT_USAGE;
    td_cli_text_saved saved;
    uint64_t start = 0;
    if (c.resume) {
        const unsigned keep = set & (TD_CLI_TEXT_SET_DATA | TD_CLI_TEXT_SET_STEPS | TD_CLI_TEXT_SET_LR |
                                     TD_CLI_TEXT_SET_SCHEDULE | TD_CLI_TEXT_SET_WEIGHT_DECAY);
        if ((rc = td_cli_text_read_config("train", c.checkpoint, &c, keep, set & ~keep, &saved, &start)) !=
            TD_CLI_EXIT_OK)
            return rc;
    } else if (!c.init && c.width % c.heads != 0) {
        fprintf(stderr, "tandem train: --width %lld is not a multiple of --heads %lld\n", (long long)c.width,
                (long long)c.heads);
        return TD_CLI_EXIT_USAGE;
    }
    if (!c.resume && !(set & TD_CLI_TEXT_SET_LR)) {
        /* Another --optimizer than AdamW takes its own rate, not AdamW's. */
        td_trainer_options o;
        td_cli_text_optimizer(c.optimizer, &o);
        c.lr = td_optimizer_default_learning_rate(o.optimizer);
    }
    if (c.checkpoint && (rc = td_cli_checkpoint_prepare_dir("train", c.checkpoint, c.resume)) != TD_CLI_EXIT_OK)
        return rc;

    text_run *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "tandem train: out of memory\n");
        return TD_CLI_EXIT_FAILURE;
    }
    rc = td_cli_text_open(&r->s, "train", &c);
    if (rc == TD_CLI_EXIT_OK && c.resume)
        rc = td_cli_restore_trainer("train", r->s.ctx, r->s.trainer, c.checkpoint, r->path, sizeof r->path);
    if (rc == TD_CLI_EXIT_OK && c.resume &&
        !td_cli_checkpoint_read_u64("train", r->s.ctx, r->path, "step", UINT32_MAX, &start))
        rc = TD_CLI_EXIT_FAILURE;
    if (rc == TD_CLI_EXIT_OK && (!(r->timing = calloc(r->s.n_devices, sizeof *r->timing)) ||
                                 !(r->split = calloc(r->s.n_devices, sizeof *r->split)))) {
        fprintf(stderr, "tandem train: out of memory\n");
        rc = TD_CLI_EXIT_FAILURE;
    }
    /* Across processes: process 0 writes the metrics lines, and each
     * process its own trace. */
    const char *metrics_path = r->s.process == 0 ? c.metrics : NULL;
    if (rc == TD_CLI_EXIT_OK && !td_cli_metrics_open(&r->metrics, metrics_path, c.resume))
        rc = TD_CLI_EXIT_FAILURE;
    if (rc == TD_CLI_EXIT_OK)
        td_trainer_on_step(r->s.trainer, on_step, r);
    if (rc == TD_CLI_EXIT_OK)
        rc = td_cli_trace_begin("train", r->s.ctx, r->s.process, &c.trace, r->trace_path, sizeof r->trace_path);
    td_status st;
    double seconds = 0.0;
    if (rc == TD_CLI_EXIT_OK) {
        print_header(r, start);
        td_cli_catch_signals();
        const double t0 = td_cli_now();
        rc = run_loop(r, start);
        seconds = td_cli_now() - t0;
    }
    rc = td_cli_trace_finish("train", r->s.ctx, r->s.process, r->s.processes, c.trace, rc);
    if (!td_cli_metrics_close(&r->metrics, metrics_path) && rc == TD_CLI_EXIT_OK)
        rc = TD_CLI_EXIT_FAILURE;
    if (rc == TD_CLI_EXIT_OK) {
        bool identical = false;
        if ((st = td_trainer_replicas_identical(r->s.trainer, &identical)) != TD_OK)
            rc = td_cli_fail("train", r->s.ctx, st, "td_trainer_replicas_identical");
        print_summary(r, seconds, identical);
        if (!identical && rc == TD_CLI_EXIT_OK)
            rc = TD_CLI_EXIT_FAILURE;
    }
    /* A process that failed ends the whole job at once. */
    if (rc < TD_CLI_EXIT_SIGNAL)
        td_demo_end_job_if_failed(r->s.ctx, r->s.processes, rc);
    free(r->timing);
    free(r->split);
    td_cli_text_close(&r->s);
    free(r);
    return rc;
}
