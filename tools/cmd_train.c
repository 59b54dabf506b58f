/* `tandem train`: trains a built-in model data-parallel on a mesh, a
 * front end over the library's loop (tandem/fit.h): flags become
 * td_fit_options, and the progress callback prints the lines, writes the
 * metrics and answers the signals.
 *
 * Each epoch visits the training set in td_data_order(seed, epoch), which
 * is the same on every mesh, so a checkpoint's (epoch, position) says
 * exactly which global batches are done: --resume restores the trainer and
 * skips them, and the run goes on as if it had never stopped (bitwise on
 * the same mesh). SIGINT and SIGTERM only raise a flag; the loop checks it
 * between steps, finishes the accumulation round if one is open (a
 * checkpoint never holds half a round), writes a checkpoint and exits with
 * 128 + the signal's number. An epoch's checkpoint is written before its
 * evaluation on the test set, so an evaluation that fails never costs the
 * epoch's training. Evaluations (--eval-every epochs and after the last,
 * on --eval-limit test examples) count in the epoch's seconds and in the
 * ETA; the samples/s are the training's alone. */
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

#define FLAG(name, kind, target, lo, hi, bit, value, help) {name, kind, target, lo, hi, 0, NULL, bit, value, help}

static const char usage_text[] =
    "usage: tandem train [--model linreg|mlp|cnn] [--devices SPEC] [--epochs N] [--checkpoint DIR [--resume]]\n"
    "                    [--metrics FILE] [--trace FILE] [options]\n"
    "       tandem train --model gpt ...   (a transformer on text: tandem train --model gpt --help)\n"
    "Trains a built-in model data-parallel. mlp and cnn train on Fashion-MNIST (or --data generated);\n"
    "linreg on generated data (x ~ N(0,1), y = x w + b + noise). Exit codes: 0 done, 1 failed, 2 bad\n"
    "command line, 130 / 143 stopped by SIGINT / SIGTERM after its step (checkpoint written with\n"
    "--checkpoint).";

typedef struct epoch_result {
    double train_loss, train_accuracy, test_loss, test_accuracy;
    double seconds;      /* the epoch's, its evaluation included */
    double eval_seconds; /* 0 for an epoch not evaluated */
    double samples_per_second; /* the training's */
} epoch_result;

typedef struct train_run {
    td_cli_session s;
    td_cli_metrics metrics;
    td_cli_progress progress;
    td_step_timing *timing; /* the last step's, per device, from the step callback */
    uint32_t *split;        /* the last step's examples per device, likewise */
    uint32_t n_timing;      /* devices in them: fewer once a device was dropped */
    float lr;               /* the last step's learning rate, likewise */
    char trace_path[4096];  /* this process's trace, across processes */
    /* What the progress callback keeps between reports. */
    epoch_result last;
    double t_epoch;         /* when the epoch began */
    double t_batch;         /* when the last step or evaluation batch ended */
    double examples;        /* the epoch's so far */
    uint64_t epoch;         /* the epoch (from 1) of the last step: an evaluation's */
    uint32_t devices_at_step; /* the job's devices after the last step */
    bool epoch_span;        /* an "epoch" trace span is open */
    bool stop_asked;        /* a signal asked the run to stop */
    int diverged;           /* the exit code of a non-finite loss, else 0 */
} train_run;

static uint32_t devices_now(train_run *r, uint32_t trainer_devices);

/* td_trainer_on_step: keeps what the metrics lines need of each step. */
static void on_step(void *user, const td_step_report *report)
{
    train_run *r = user;
    r->lr = report->learning_rate;
    r->n_timing = report->n_devices;
    memcpy(r->timing, report->timing, sizeof *r->timing * report->n_devices);
    memcpy(r->split, report->split, sizeof *r->split * report->n_devices);
    if (r->s.process != 0)
        return; /* across processes process 0 tells */
    if (report->rebalanced) {
        td_cli_progress_clear(&r->progress);
        fprintf(stderr, "tandem train: step %llu: measured the devices' speeds; the batch is split anew from the next "
                "step (see --metrics, or the final line)\n", (unsigned long long)report->micro_step);
    }
    if (report->devices_lost) {
        td_cli_progress_clear(&r->progress); /* the live line, on a terminal */
        fprintf(stderr, "tandem train: step %llu: %u device(s) lost, continuing on %u\n",
                (unsigned long long)report->micro_step, report->devices_lost, devices_now(r, report->n_devices));
    }
}

/* The devices the run is on now (the trainer's count, when given, in one
 * process). */
static uint32_t devices_now(train_run *r, uint32_t trainer_devices)
{
    return td_cli_job_devices(r->s.mesh, r->s.processes, trainer_devices);
}

/* The epoch's checkpoint line: written, or waiting for the accumulation
 * round open at the epoch's end. */
static void print_epoch_checkpoint(const char *path)
{
    if (path)
        printf("checkpoint %s\n", path);
    else
        printf("checkpoint deferred: an accumulation round is open; it is written after the round\n");
}

/* A step: its metrics line, the progress bar, a deferred checkpoint. */
static int on_train_step(train_run *r, const td_fit_progress *p)
{
    td_cli_session *s = &r->s;
    td_train_progress after = {.struct_size = sizeof(td_train_progress)};
    td_trainer_progress(s->trainer, &after);
    r->examples += (double)p->examples;
    r->epoch = p->epoch;
    if (r->metrics.file) {
        const td_cli_step_record rec = {
            .epoch = (int64_t)p->epoch, .step = p->step, .steps = p->steps_per_epoch, .global = after.micro_steps,
            .loss = p->loss, .accuracy = p->accuracy, .lr = r->lr,
            .samples_per_second = (double)p->examples / p->seconds, .seconds = p->seconds,
            .has_accuracy = s->classifier, .n_devices = r->n_timing, .timing = r->timing, .split = r->split};
        td_cli_metrics_step(&r->metrics, &rec);
    }
    if (!isfinite(p->loss)) {
        td_cli_progress_clear(&r->progress);
        r->diverged = td_cli_diverged("train", p->loss, after.micro_steps);
        return 1;
    }
    /* The bar shows the epoch's rate so far: one step's rate jumps about. */
    const double now = td_cli_now();
    td_cli_progress_step(&r->progress, (int64_t)p->epoch, p->step, r->examples / (now - r->t_epoch), p->loss);
    r->t_batch = now;
    r->devices_at_step = devices_now(r, 0);
    r->stop_asked = r->stop_asked || td_cli_stop_requested();
    if (p->checkpoint && !r->stop_asked) {
        td_cli_progress_clear(&r->progress);
        printf("checkpoint %s (the accumulation round open at the epoch's end closed)\n", p->checkpoint);
    }
    return r->stop_asked;
}

/* An epoch's end: its line and metrics, a device lost while evaluating,
 * its checkpoint. */
static int on_train_epoch(train_run *r, const td_fit_progress *p)
{
    td_cli_session *s = &r->s;
    const td_cli_config *c = &s->config;
    epoch_result *last = &r->last;
    last->train_loss = p->loss;
    last->train_accuracy = p->accuracy;
    last->samples_per_second = p->seconds > 0 ? (double)p->examples / p->seconds : 0.0;
    if (p->evaluated) {
        last->test_loss = p->test_loss;
        last->test_accuracy = p->test_accuracy;
        const uint32_t after = devices_now(r, 0);
        td_cli_progress_clear(&r->progress);
        if (after < r->devices_at_step && s->process == 0)
            fprintf(stderr, "tandem train: evaluating epoch %llu: %u device(s) lost, continuing on %u\n",
                    (unsigned long long)p->epoch, r->devices_at_step - after, after);
    }
    last->eval_seconds = p->eval_seconds;
    last->seconds = td_cli_now() - r->t_epoch;
    char part[96] = "", test[96], eval_time[48] = "";
    if (p->step < p->steps_per_epoch)
        snprintf(part, sizeof part, " (%llu of %llu steps: --steps %lld)", (unsigned long long)p->step,
                 (unsigned long long)p->steps_per_epoch, (long long)c->steps);
    if (!p->evaluated)
        snprintf(test, sizeof test, "not evaluated (--eval-every %lld)", (long long)c->eval_every);
    else if (s->classifier)
        snprintf(test, sizeof test, "test loss %.4f accuracy %.4f", last->test_loss, last->test_accuracy);
    else
        snprintf(test, sizeof test, "test loss %.6f", last->test_loss);
    if (p->evaluated)
        snprintf(eval_time, sizeof eval_time, " (evaluation %.*f s)", s->classifier ? 1 : 2, last->eval_seconds);
    if (s->classifier)
        printf("epoch %llu/%lld%s: train loss %.4f accuracy %.4f, %s, %.1f s%s, %.0f samples/s\n",
               (unsigned long long)p->epoch, (long long)c->epochs, part, last->train_loss, last->train_accuracy, test,
               last->seconds, eval_time, last->samples_per_second);
    else
        printf("epoch %llu/%lld%s: train loss %.6f, %s, %.2f s%s, %.0f samples/s\n", (unsigned long long)p->epoch,
               (long long)c->epochs, part, last->train_loss, test, last->seconds, eval_time, last->samples_per_second);
    const td_cli_epoch_record rec = {
        .epoch = (int64_t)p->epoch, .train_loss = last->train_loss, .train_accuracy = last->train_accuracy,
        .test_loss = p->evaluated ? last->test_loss : NAN, .test_accuracy = p->evaluated ? last->test_accuracy : NAN,
        .seconds = last->seconds, .eval_seconds = last->eval_seconds,
        .samples_per_second = last->samples_per_second, .has_accuracy = s->classifier};
    td_cli_metrics_epoch(&r->metrics, &rec);
    if (r->epoch_span)
        td_trace_span_end(s->ctx);
    r->epoch_span = false;
    if (c->checkpoint)
        print_epoch_checkpoint(p->checkpoint);
    fflush(stdout);
    r->stop_asked = r->stop_asked || td_cli_stop_requested();
    r->t_epoch = r->t_batch = td_cli_now();
    r->examples = 0.0;
    if (p->epoch < (uint64_t)c->epochs && !r->stop_asked) {
        td_trace_span_begin(s->ctx, "epoch");
        r->epoch_span = true;
    }
    return r->stop_asked;
}

/* td_fit_progress_fn: what `tandem train` prints and records as the
 * library's loop runs; a signal (td_cli_stop_requested) stops it. */
static int on_progress(const td_fit_progress *p, void *user)
{
    train_run *r = user;
    if (p->event == TD_FIT_STEP)
        return on_train_step(r, p);
    if (p->event == TD_FIT_EPOCH)
        return on_train_epoch(r, p);
    const double now = td_cli_now();
    if (r->s.process == 0)
        td_cli_progress_eval_batch(&r->progress, (int64_t)r->epoch, p->eval_batch, now - r->t_batch);
    r->t_batch = now;
    return 0;
}

static void print_header(const train_run *r)
{
    const td_cli_config *c = &r->s.config;
    const td_fit_summary *f = &r->s.summary;
    printf("tandem train: %s on %u device(s) [%s], data %s (%zu training examples per epoch, %zu test), global batch "
           "%lld, %zu steps per epoch, %s lr %g (%s), accumulate %lld, batch norm %s, dropout %g, seed %llu\n",
           c->model, r->s.n_devices, c->devices, c->data, r->s.per_epoch, td_cli_session_eval_count(&r->s),
           (long long)c->batch,
           r->s.steps_per_epoch, c->optimizer, (double)c->lr, c->schedule, (long long)c->accumulate,
           c->batch_norm ? "on" : "off", (double)c->dropout, (unsigned long long)c->seed);
    if (c->eval_every == 0)
        printf("evaluation: after the last epoch only (--eval-every 0)\n");
    else if (c->eval_every != 1)
        printf("evaluation: every %lld epochs and after the last\n", (long long)c->eval_every);
    if (c->steps)
        printf("--steps %lld: %lld epoch(s), the last one %lld step(s)\n", (long long)c->steps, (long long)c->epochs,
               (long long)(c->steps - (c->epochs - 1) * (int64_t)r->s.steps_per_epoch));
    if (f->resumed)
        printf("resumed from %s: epoch %llu, %llu of %zu steps done\n", f->checkpoint,
               (unsigned long long)f->start_epoch + 1, (unsigned long long)f->start_position, r->s.steps_per_epoch);
    fflush(stdout);
}

/* Runs the library's loop from where the summary says; returns an exit
 * code. */
static int run_loop(train_run *r, td_fit_result *result)
{
    td_cli_session *s = &r->s;
    const td_cli_config *c = &s->config;
    const td_fit_summary *f = &s->summary;
    const size_t B = (size_t)c->batch, steps = s->steps_per_epoch;
    const uint64_t remaining = f->total_steps - (f->start_epoch * steps + f->start_position);
    td_cli_progress_init(&r->progress, c->epochs, steps, remaining);
    uint64_t evaluations = 0;
    for (uint64_t epoch = f->start_epoch; epoch < (uint64_t)c->epochs; epoch++)
        evaluations += epoch + 1 == (uint64_t)c->epochs || (c->eval_every > 0 && (epoch + 1) % (uint64_t)c->eval_every == 0);
    td_cli_progress_evaluations(&r->progress, evaluations, (td_cli_session_eval_count(s) + B - 1) / B);
    r->t_epoch = r->t_batch = td_cli_now();
    td_trace_span_begin(s->ctx, "epoch");
    r->epoch_span = true;
    td_status st = td_fit_run(s->fit, result);
    if (r->epoch_span)
        td_trace_span_end(s->ctx);
    if (r->diverged)
        return r->diverged;
    if (st != TD_OK) {
        td_cli_progress_clear(&r->progress);
        return td_cli_fail("train", s->ctx, st, "training");
    }
    if (!result->stopped)
        return TD_CLI_EXIT_OK;
    td_fit_summary now = {.struct_size = sizeof now};
    td_fit_summarize(s->fit, &now);
    td_cli_progress_clear(&r->progress);
    const uint64_t done = result->steps_done, step = done % steps;
    if (step != 0 && c->checkpoint)
        printf("interrupted at epoch %llu, step %llu/%zu: checkpoint %s\n", (unsigned long long)(done / steps + 1),
               (unsigned long long)step, steps, now.checkpoint ? now.checkpoint : "");
    else if (step != 0)
        printf("interrupted at epoch %llu, step %llu/%zu (no --checkpoint: nothing saved)\n",
               (unsigned long long)(done / steps + 1), (unsigned long long)step, steps);
    else
        printf("interrupted after epoch %llu%s\n", (unsigned long long)(done / steps),
               c->checkpoint ? "" : " (no --checkpoint: nothing saved)");
    return td_cli_signal_exit();
}

int td_cli_train(int argc, char **argv)
{
    /* --model gpt has flags of its own (cmd_train_text.c); so does a
     * --resume without --model of a gpt checkpoint. */
    const char *model = td_cli_flag_value(argc, argv, "--model"), *dir = td_cli_flag_value(argc, argv, "--checkpoint");
    char saved_model[16];
    if (model ? strcmp(model, "gpt") == 0
              : dir && td_cli_flag_present(argc, argv, "--resume") &&
                    td_cli_checkpoint_model(dir, saved_model, sizeof saved_model) &&
                    strcmp(saved_model, "gpt") == 0)
        return td_cli_train_text(argc, argv);
    td_cli_config c = {.model = "mlp", .devices = "cpu:4", .data = TD_FASHION_MNIST_DIR, .schedule = "constant",
                       .epochs = 5, .batch = 128, .accumulate = 1, .eval_every = 1};
    const td_cli_flag flags[] = {
        {"--model", TD_CLI_CHOICE, &c.model, 0, 0, 0, td_cli_models, TD_CLI_SET_MODEL, "NAME", "the model (default mlp)"},
        FLAG("--devices", TD_CLI_STRING, &c.devices, 0, 0, 0, "SPEC", "e.g. cpu:4, opencl:0,cpu:2, vulkan:0x2 (default cpu:4)"),
        FLAG("--data", TD_CLI_STRING, &c.data, 0, 0, TD_CLI_SET_DATA, "DIR",
             "Fashion-MNIST IDX folder, or 'generated' (default " TD_FASHION_MNIST_DIR ")"),
        FLAG("--epochs", TD_CLI_INT, &c.epochs, 1, TD_CLI_MAX_EPOCHS, TD_CLI_SET_EPOCHS, "N", "passes over the training set (default 5)"),
        FLAG("--steps", TD_CLI_INT, &c.steps, 1, TD_CLI_MAX_EXAMPLES, TD_CLI_SET_STEPS, "N",
             "instead of --epochs: N global batches in all, a multiple of --accumulate (the last epoch may end early)"),
        FLAG("--batch", TD_CLI_INT, &c.batch, 1, TD_CLI_MAX_BATCH, TD_CLI_SET_BATCH, "N",
             "global batch, at least one example per device; split evenly, the first devices one more when the "
             "count does not divide it (default 128)"),
        {"--optimizer", TD_CLI_CHOICE, &c.optimizer, 0, 0, 0, td_cli_optimizers, TD_CLI_SET_OPTIMIZER, "NAME",
         "default adam (linreg: sgd); momentum is SGD with momentum 0.9"},
        FLAG("--lr", TD_CLI_FLOAT, &c.lr, 1e-9, 1e3, TD_CLI_SET_LR, "X",
             "learning rate, the peak of a schedule (default: the optimizer's, sgd and momentum 0.01, adam, adamw "
             "and rmsprop 1e-3; linreg with sgd or momentum 0.05; mlp and cnn with adam, adamw or rmsprop 2e-3, "
             "the cnn 5e-3 with --batch-norm: td_fit_recipe)"),
        {"--schedule", TD_CLI_CHOICE, &c.schedule, 0, 0, 0, td_cli_schedules, TD_CLI_SET_SCHEDULE, "NAME",
         "the rate over the run (default: mlp and cnn cosine, cnn warmup-cosine with --batch-norm, linreg "
         "constant); warmup-cosine warms up over the first tenth"},
        FLAG("--accumulate", TD_CLI_INT, &c.accumulate, 1, TD_CLI_MAX_ACCUMULATE, TD_CLI_SET_ACCUMULATE, "K",
             "average K batches' gradients per update (default 1)"),
        FLAG("--seed", TD_CLI_U64, &c.seed, 0, 0, TD_CLI_SET_SEED, "N", "initial parameters, dropout, data order (default 0)"),
        FLAG("--batch-norm", TD_CLI_SWITCH, &c.batch_norm, 0, 0, TD_CLI_SET_BATCH_NORM, "", "batch norm in the model"),
        {"--inputs", TD_CLI_CHOICE, &c.inputs, 0, 0, 0, td_cli_inputs, TD_CLI_SET_INPUTS, "HOW",
         "raw: pixels / 255 (the seeds' way); standardized: then by the training set's mean and std "
         "(default: cnn standardized, mlp raw)"},
        {"--dropout", TD_CLI_FLOAT, &c.dropout, 0, 1, 1, NULL, TD_CLI_SET_DROPOUT, "P", "dropout rate (default 0)"},
        FLAG("--limit", TD_CLI_INT, &c.limit, 1, TD_CLI_MAX_EXAMPLES, TD_CLI_SET_LIMIT, "N",
             "train on N examples per epoch (generated data: N examples in all)"),
        FLAG("--eval-limit", TD_CLI_INT, &c.eval_limit, 1, 1e12, 0, "N",
             "evaluate on the first N test examples (default: all of them)"),
        FLAG("--eval-every", TD_CLI_INT, &c.eval_every, 0, 1e6, 0, "N",
             "evaluate on the test set every N epochs and after the last; 0: after the last only (default 1; "
             "--model gpt counts it in steps)"),
        FLAG("--checkpoint", TD_CLI_STRING, &c.checkpoint, 0, 0, 0, "DIR",
             "save after every epoch and on SIGINT/SIGTERM, keeping the newest 3"),
        FLAG("--resume", TD_CLI_SWITCH, &c.resume, 0, 0, 0, "",
             "continue from the newest valid checkpoint in DIR (none yet: a new run, said on stderr)"),
        FLAG("--metrics", TD_CLI_STRING, &c.metrics, 0, 0, 0, "FILE",
             "JSON lines per step and per epoch (appended to when resuming)"),
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
         "fp32 (default) or bf16: every matrix product and convolution with bfloat16 inputs and float sums "
         "(AVX512_BF16 where the CPU has it); weights, optimizer state, loss and gradients stay fp32"},
        {"--wire", TD_CLI_CHOICE, &c.wire, 0, 0, 0, td_cli_wires, 0, "W",
         "fp32 (default) or bf16: gradients pass between devices (and processes) as bfloat16, every sum in "
         "fp32, the sum rounded to bfloat16 before the update; parameters stay fp32 and identical everywhere"},
        {"--bucket-mib", TD_CLI_FLOAT, &c.bucket_mib, 0, 1024, 0, NULL, 0, "M",
         "reduce and update the gradients in buckets of about M MiB between backward's kernels, each as soon as "
         "backward is done with it (the same bits; not with clipping or accumulation, nor across processes "
         "with GPU devices); "
         "0 (default): one all-reduce after backward"},
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
    if (c.checkpoint && (rc = td_cli_checkpoint_require("train", c.checkpoint)) != TD_CLI_EXIT_OK)
        return rc;
    if (c.resume && td_cli_resume_nothing_yet("train", c.checkpoint))
        c.resume = false;
    if ((set & TD_CLI_SET_STEPS) && (set & TD_CLI_SET_EPOCHS)) {
        fprintf(stderr, "tandem train: give --epochs %lld or --steps %lld, not both\n", (long long)c.epochs,
                (long long)c.steps);
        return TD_CLI_EXIT_USAGE;
    }
    float weights[64];
    uint32_t n_weights;
    td_balance balance;
    if (c.balance && !td_cli_balance_parse("train", c.balance, &balance, 64, weights, &n_weights))
        return TD_CLI_EXIT_USAGE;
    td_cli_saved_config saved;
    td_cli_position start = {0, 0};
    if (c.resume) {
        const unsigned keep =
            set & (TD_CLI_SET_DATA | TD_CLI_SET_EPOCHS | TD_CLI_SET_STEPS | TD_CLI_SET_LR | TD_CLI_SET_SCHEDULE);
        const unsigned must_match = set & ~keep;
        if ((rc = td_cli_checkpoint_read_config("train", c.checkpoint, &c, keep, must_match, &saved, &start)) !=
            TD_CLI_EXIT_OK)
            return rc;
    } else {
        td_cli_config_defaults(&c, set);
    }
    if (c.steps % c.accumulate != 0) {
        /* A run never ends in the middle of an accumulation round. */
        fprintf(stderr, "tandem train: --steps %lld is not a multiple of --accumulate %lld\n", (long long)c.steps,
                (long long)c.accumulate);
        return TD_CLI_EXIT_USAGE;
    }
    if (c.checkpoint && (rc = td_cli_checkpoint_prepare_dir("train", c.checkpoint, c.resume)) != TD_CLI_EXIT_OK)
        return rc;

    train_run *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "tandem train: out of memory\n");
        return TD_CLI_EXIT_FAILURE;
    }
    rc = td_cli_session_open(&r->s, "train", &c, on_progress, r);
    c.epochs = r->s.config.epochs; /* --steps: the epochs they reach into */
    /* Restores the newest checkpoint the trainer takes (--resume), so the
     * header can say where the run starts. */
    td_status st = TD_OK;
    if (rc == TD_CLI_EXIT_OK && (st = td_fit_prepare(r->s.fit)) != TD_OK)
        rc = td_cli_fail("train", r->s.ctx, st, "restoring the checkpoint");
    if (rc == TD_CLI_EXIT_OK)
        td_fit_summarize(r->s.fit, &r->s.summary);
    if (rc == TD_CLI_EXIT_OK && (!(r->timing = calloc(r->s.n_devices, sizeof *r->timing)) ||
                                 !(r->split = calloc(r->s.n_devices, sizeof *r->split)))) {
        fprintf(stderr, "tandem train: out of memory\n");
        rc = TD_CLI_EXIT_FAILURE;
    }
    /* Across processes: process 0 writes the metrics lines, and each
     * process its own trace, one track per device. */
    const char *metrics_path = r->s.process == 0 ? c.metrics : NULL;
    if (rc == TD_CLI_EXIT_OK && !td_cli_metrics_open(&r->metrics, metrics_path, c.resume))
        rc = TD_CLI_EXIT_FAILURE;
    if (rc == TD_CLI_EXIT_OK)
        td_trainer_on_step(r->s.trainer, on_step, r);
    if (rc == TD_CLI_EXIT_OK)
        rc = td_cli_trace_begin("train", r->s.ctx, r->s.process, &c.trace, r->trace_path, sizeof r->trace_path);
    td_fit_result result;
    td_fit_result_init(&result);
    double train_seconds = 0.0;
    if (rc == TD_CLI_EXIT_OK) {
        print_header(r);
        td_cli_catch_signals();
        const double t0 = td_cli_now();
        const td_fit_summary *f = &r->s.summary;
        const uint64_t done = f->start_epoch * r->s.steps_per_epoch + f->start_position;
        if (done < f->total_steps) {
            rc = run_loop(r, &result);
            td_train_progress p = {.struct_size = sizeof(td_train_progress)};
            if (rc == TD_CLI_EXIT_OK && td_trainer_progress(r->s.trainer, &p) == TD_OK && p.accumulated)
                printf("note: the last %u micro-batch(es) did not complete a round of --accumulate %lld: they are not "
                       "applied to the parameters nor in a checkpoint\n",
                       p.accumulated, (long long)c.accumulate);
        } else {
            if (c.steps)
                printf("nothing to train: the checkpoint is at step %llu of --steps %lld (raise --steps)\n",
                       (unsigned long long)done, (long long)c.steps);
            else
                printf("nothing to train: the checkpoint is at the end of epoch %llu of %lld (raise --epochs)\n",
                       (unsigned long long)f->start_epoch, (long long)c.epochs);
            /* The loop has nothing to train and evaluates the test set. */
            if ((st = td_fit_run(r->s.fit, &result)) != TD_OK)
                rc = td_cli_fail("train", r->s.ctx, st, "evaluating on the test set");
        }
        train_seconds = td_cli_now() - t0;
    }
    epoch_result last = r->last;
    last.train_loss = result.train_loss;
    last.train_accuracy = result.train_accuracy;
    last.test_loss = result.test_loss;
    last.test_accuracy = result.test_accuracy;
    rc = td_cli_trace_finish("train", r->s.ctx, r->s.process, r->s.processes, c.trace, rc);
    if (!td_cli_metrics_close(&r->metrics, metrics_path) && rc == TD_CLI_EXIT_OK)
        rc = TD_CLI_EXIT_FAILURE;
    if (rc == TD_CLI_EXIT_OK) {
        bool identical = false;
        st = td_trainer_replicas_identical(r->s.trainer, &identical);
        if (st != TD_OK)
            rc = td_cli_fail("train", r->s.ctx, st, "td_trainer_replicas_identical");
        td_train_progress p = {0};
        td_trainer_progress(r->s.trainer, &p);
        printf("{\"command\":\"train\",\"model\":\"%s\",\"devices\":\"%s\",\"processes\":%u,\"device_count\":%u,"
               "\"epochs\":%lld,\"steps\":%lld,"
               "\"batch\":%lld,\"optimizer\":\"%s\",\"updates\":%llu,\"train_loss\":",
               c.model, c.devices, r->s.processes, r->s.n_devices, (long long)c.epochs, (long long)c.steps,
               (long long)c.batch, c.optimizer, (unsigned long long)p.updates);
        td_cli_json_number(stdout, "%.6g", last.train_loss);
        printf(",\"test_loss\":");
        td_cli_json_number(stdout, "%.6g", last.test_loss);
        printf(",\"test_examples\":%zu,", td_cli_session_eval_count(&r->s));
        if (r->s.classifier) {
            printf("\"train_accuracy\":");
            td_cli_json_number(stdout, "%.4f", last.train_accuracy);
            printf(",\"test_accuracy\":");
            td_cli_json_number(stdout, "%.4f", last.test_accuracy);
            putchar(',');
        }
        printf("\"seconds\":%.3f,\"devices_at_end\":%u,\"devices_lost\":%u,\"balance\":\"%s\",", train_seconds,
               devices_now(r, p.devices), p.devices_lost, c.balance ? c.balance : "even");
        /* Examples per device of a global batch, and (balance auto) the
         * devices' measured speeds: every device of every process. */
        td_cli_job_print_split(r->s.ctx, r->s.mesh, r->s.trainer, r->s.n_devices, stdout);
        printf(",\"replicas_bitwise_identical\":%s}\n", identical ? "true" : "false");
        if (!identical && rc == TD_CLI_EXIT_OK)
            rc = TD_CLI_EXIT_FAILURE;
    }
    /* A process that failed ends the whole job at once: the others would
     * otherwise wait for it until their timeout. */
    if (rc < TD_CLI_EXIT_SIGNAL)
        td_demo_end_job_if_failed(r->s.ctx, r->s.processes, rc);
    free(r->timing);
    free(r->split);
    td_cli_session_close(&r->s);
    free(r);
    return rc;
}
