/* The Fashion-MNIST demos' driver (see td_demo_mnist.h): flags into
 * td_fit_options, the lines printed from the progress callback. The loop
 * is the library's (tandem/fit.h), the one `tandem train` runs:
 *
 * each epoch visits the training set in a seeded order that depends only on
 * (seed, epoch), so every mesh sees the same global batches. The last,
 * short batch of an epoch trains too: it is padded with zero rows and a
 * per-example mask, and the loss is the masked mean over the global batch,
 * so it trains exactly on its real examples. Images go to the devices as
 * raw bytes (u8) and are cast there. Accuracy is a graph node (argmax ==
 * label, masked mean), returned with every step and computed by an
 * evaluator over the test set, each test example counted exactly once.
 *
 * Under mpirun the processes train as one job (td_demo_processes.h):
 * --devices names each process's own devices, every process reads the
 * whole dataset and binds only its rows of each global batch, and process 0
 * prints for the job. */
#include "td_demo_mnist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_demo_processes.h"

#define CLASSES 10
#define TRAIN_ACCURACY_EXAMPLES 10000 /* train accuracy over the first 10k examples (file order) */

typedef struct demo {
    const char *name;
    demo_options o;
    td_context *ctx;
    td_mesh *mesh;
    uint32_t n_dev;              /* the job's devices: every process's */
    uint32_t process, processes; /* this process and the job's count (0 and 1 without mpirun) */
    td_tensor *train_images, *train_labels, *test_images, *test_labels;
    td_fit *fit;                 /* the library's loop (tandem/fit.h) */
    td_balance balance;          /* --balance, parsed */
    float balance_weights[64];
    uint32_t n_balance_weights;
    /* What the progress callback keeps for the epoch lines and the end. */
    double loss_sum, acc_sum, last_loss, train_acc, train_seconds;
    uint32_t lost;
    td_status status; /* a failure inside the callback */
} demo;

/* " (process q of P)" across processes, so a message says whose it is. */
static const char *who(const demo *d, char text[48])
{
    text[0] = 0;
    if (d->processes > 1)
        snprintf(text, 48, " (process %u of %u)", d->process, d->processes);
    return text;
}

static void log_to_stderr(void *user, td_log_level level, const char *message)
{
    const demo *d = user;
    if (level < TD_LOG_WARN && d->process != 0)
        return; /* news (a new split) is the same on every process: process 0 tells it */
    char w[48];
    fprintf(stderr, "%s%s: %s: %s\n", d->name, who(d, w),
            level >= TD_LOG_ERROR ? "error" : level >= TD_LOG_WARN ? "warning" : "info", message);
}

/* The library's recipe for `model` (td_fit_recipe), with or without
 * batch norm. */
static td_fit_options recipe(const char *model, bool batch_norm)
{
    td_fit_options f;
    td_fit_options_init(&f);
    f.batch_norm = batch_norm;
    td_fit_recipe(model, &f);
    return f;
}

static int usage(const char *demo_name, const char *model)
{
    const td_fit_options plain = recipe(model, false), bn = recipe(model, true);
    fprintf(stderr,
            "usage: %s [--devices SPEC] [--epochs N] [--batch N] [--seed N] [--lr X] [--limit N] [--data DIR]\n"
            "          [--batch-norm] [--dropout P] [--accumulate K] [--schedule constant|cosine|warmup-cosine]\n"
            "          [--on-device-loss fail|continue] [--balance even|auto|W,W,...] [--inputs raw|standardized]\n"
            "          [--deterministic] [--precision fp32|bf16]\n"
            "  --devices SPEC   e.g. cpu:4, opencl:0,cpu:2, vulkan:0x2 (default cpu:4); under mpirun,\n"
            "                   each process's own: the job trains on all of them\n"
            "  --epochs N       passes over the training set (default 5)\n"
            "  --batch N        global batch size, split over the devices by --balance (default 128)\n"
            "  --seed N         initial parameters, dropout masks and data order (default 0)\n"
            "  --lr X           Adam learning rate, the peak of a schedule (default %g; %g with --batch-norm)\n"
            "  --limit N        train on N examples per epoch (default: all 60000)\n"
            "  --data DIR       Fashion-MNIST IDX files (default %s)\n"
            "  --batch-norm     batch normalization in the model: the mlp's hidden layers, the cnn's\n"
            "                   convolutions (statistics per device)\n"
            "  --dropout P      dropout at rate P before the classifier (default 0: none)\n"
            "  --accumulate K   average the gradients of K batches per update (default 1)\n"
            "  --schedule S     constant, cosine (decay to 0 over the run) or warmup-cosine (a tenth of\n"
            "                   the run warms up first) (default %s; %s with --batch-norm)\n"
            "  --inputs I       raw: pixels / 255 (the seeds' way); standardized: then by the training\n"
            "                   set's mean and standard deviation (default %s)\n"
            "  --on-device-loss fail (default) or continue: go on without a device that fails or hangs\n"
            "                   (inject faults with e.g. --devices cpu:3,cpu:1@fail=50, see tandem/device.h)\n"
            "  --deterministic  the same bits on any CPU: cpu devices use tandem's own fixed-order GEMM\n"
            "                   instead of OpenBLAS (td_context_options.deterministic; may be slower)\n"
            "  --precision P    fp32 (default) or bf16: matrix products and convolutions with bfloat16\n"
            "                   inputs and float sums (AVX512_BF16 where the CPU has it); weights,\n"
            "                   optimizer state, loss and gradients stay fp32 (td_fit_options.precision)\n"
            "  --balance B      even (default): equal shares; auto: in proportion to each device's\n"
            "                   measured speed; W,W,...: in proportion to these weights, one per device\n"
            "                   (try --devices cpu:3,cpu:1@slow=3 --balance auto)\n",
            demo_name, (double)plain.learning_rate, (double)bn.learning_rate, TD_FASHION_MNIST_DIR, plain.schedule,
            bn.schedule, plain.standardize_inputs ? "standardized" : "raw");
    return 2;
}

static bool parse_i64(const char *demo_name, const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || end == text || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], got '%s'\n", demo_name, flag, (long long)lo,
                (long long)hi, text);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_float(const char *demo_name, const char *flag, const char *text, float lo, float hi, bool hi_open,
                        float *out)
{
    char *end;
    float v = strtof(text, &end);
    if (*end || end == text || !(v >= lo) || (hi_open ? !(v < hi) : !(v <= hi))) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g%s, got '%s'\n", demo_name, flag, (double)lo, (double)hi,
                hi_open ? ")" : "]", text);
        return false;
    }
    *out = v;
    return true;
}

static int parse(demo *d, const char *model, int argc, char **argv)
{
    bool lr_given = false, schedule_given = false, inputs_given = false;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0)
            return usage(d->name, model) - 1; /* 1: print and leave with 0 */
        if (strcmp(f, "--batch-norm") == 0) {
            d->o.batch_norm = true;
            continue;
        }
        if (strcmp(f, "--deterministic") == 0) {
            d->o.deterministic = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", d->name, f);
            return usage(d->name, model);
        }
        const char *v = argv[++i];
        int64_t n;
        if (strcmp(f, "--devices") == 0) {
            d->o.devices = v;
        } else if (strcmp(f, "--data") == 0) {
            d->o.data = v;
        } else if (strcmp(f, "--epochs") == 0) {
            if (!parse_i64(d->name, f, v, 1, 100000, &n))
                return 2;
            d->o.epochs = (int)n;
        } else if (strcmp(f, "--batch") == 0) {
            if (!parse_i64(d->name, f, v, 1, 60000, &n))
                return 2;
            d->o.batch = n;
        } else if (strcmp(f, "--seed") == 0) {
            if (!parse_i64(d->name, f, v, 0, INT64_MAX, &n))
                return 2;
            d->o.seed = (uint64_t)n;
        } else if (strcmp(f, "--limit") == 0) {
            if (!parse_i64(d->name, f, v, 1, INT64_MAX, &n))
                return 2;
            d->o.limit = n;
        } else if (strcmp(f, "--accumulate") == 0) {
            if (!parse_i64(d->name, f, v, 1, 1024, &n))
                return 2;
            d->o.accumulate = (uint32_t)n;
        } else if (strcmp(f, "--lr") == 0) {
            if (!parse_float(d->name, f, v, 1e-9f, 1e3f, false, &d->o.learning_rate))
                return 2;
            lr_given = true;
        } else if (strcmp(f, "--dropout") == 0) {
            if (!parse_float(d->name, f, v, 0.0f, 1.0f, true, &d->o.dropout))
                return 2;
        } else if (strcmp(f, "--schedule") == 0) {
            if (strcmp(v, "constant") != 0 && strcmp(v, "cosine") != 0 && strcmp(v, "warmup-cosine") != 0) {
                fprintf(stderr, "%s: --schedule expects constant, cosine or warmup-cosine, got '%s'\n", d->name, v);
                return 2;
            }
            d->o.schedule = v;
            schedule_given = true;
        } else if (strcmp(f, "--on-device-loss") == 0) {
            if (strcmp(v, "fail") != 0 && strcmp(v, "continue") != 0) {
                fprintf(stderr, "%s: --on-device-loss expects fail or continue, got '%s'\n", d->name, v);
                return 2;
            }
            d->o.continue_on_loss = strcmp(v, "continue") == 0;
        } else if (strcmp(f, "--balance") == 0) {
            d->o.balance = v;
        } else if (strcmp(f, "--precision") == 0) {
            if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0) {
                fprintf(stderr, "%s: --precision expects fp32 or bf16, got '%s'\n", d->name, v);
                return 2;
            }
            d->o.precision = strcmp(v, "bf16") == 0 ? TD_PRECISION_BF16 : TD_PRECISION_FP32;
        } else if (strcmp(f, "--inputs") == 0) {
            if (strcmp(v, "raw") != 0 && strcmp(v, "standardized") != 0) {
                fprintf(stderr, "%s: --inputs expects raw or standardized, got '%s'\n", d->name, v);
                return 2;
            }
            d->o.raw_inputs = strcmp(v, "raw") == 0;
            inputs_given = true;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", d->name, f);
            return usage(d->name, model);
        }
    }
    /* The recipe's values (td_fit_recipe, with batch norm or not) where
     * the user chose none. */
    const td_fit_options r = recipe(model, d->o.batch_norm);
    if (!lr_given)
        d->o.learning_rate = r.learning_rate;
    if (!schedule_given)
        d->o.schedule = r.schedule;
    if (!inputs_given)
        d->o.raw_inputs = !r.standardize_inputs;
    return 0;
}

static int fail(demo *d, td_status s, const char *what)
{
    char w[48];
    fprintf(stderr, "%s%s: %s: %s: %s\n", d->name, who(d, w), what, td_status_name(s),
            d->ctx ? td_last_error(d->ctx) : "");
    return 1;
}

static void release(demo *d)
{
    td_fit_destroy(d->fit);
    td_tensor_destroy(d->train_images);
    td_tensor_destroy(d->train_labels);
    td_tensor_destroy(d->test_images);
    td_tensor_destroy(d->test_labels);
    td_context_destroy(d->ctx); /* meshes, fits */
}

/* The library's loop, this demo's options. */
static void fit_options(const demo *d, const char *model, td_fit_options *f)
{
    td_fit_options_init(f);
    f->batch_norm = d->o.batch_norm;
    td_fit_recipe(model, f);
    f->seed = d->o.seed;
    f->epochs = (uint32_t)d->o.epochs;
    f->batch = (uint32_t)d->o.batch;
    f->limit = d->o.limit > 0 ? (uint64_t)d->o.limit : 0;
    f->learning_rate = d->o.learning_rate;
    f->schedule = d->o.schedule;
    f->accumulate = d->o.accumulate;
    f->dropout = d->o.dropout;
    f->standardize_inputs = !d->o.raw_inputs;
    f->on_device_loss = d->o.continue_on_loss ? TD_ON_DEVICE_LOSS_CONTINUE : TD_ON_DEVICE_LOSS_FAIL;
    f->balance = d->balance;
    f->balance_weights = d->balance_weights;
    f->n_balance_weights = d->n_balance_weights;
    f->precision = d->o.precision;
}

static int on_progress(const td_fit_progress *p, void *user);

static int setup(demo *d, const char *model)
{
    /* Warnings (a device dropped, a trace's dropped events) go to stderr. */
    td_context_options co;
    td_context_options_init(&co);
    co.log = log_to_stderr;
    co.log_user = d;
    co.log_level = TD_LOG_INFO; /* a new batch split (--balance auto) is news */
    co.deterministic = d->o.deterministic;
    td_status s = td_context_create(&co, &d->ctx);
    if (s != TD_OK)
        return fail(d, s, "td_context_create");
    int rc = td_demo_join(d->name, d->ctx, &d->process, &d->processes);
    if (rc != 0)
        return rc;
    if ((s = td_mesh_create(d->ctx, d->o.devices, &d->mesh)) != TD_OK)
        return fail(d, s, "td_mesh_create");
    uint32_t first_device;
    td_processes_mesh(d->mesh, &d->n_dev, &first_device); /* the job's devices, every process's */
    if ((s = td_balance_parse(d->ctx, d->o.balance, &d->balance, 64, d->balance_weights, &d->n_balance_weights)) != TD_OK)
        return fail(d, s, "--balance");
    if ((s = td_data_load_mnist(d->ctx, d->o.data, "train", &d->train_images, &d->train_labels)) != TD_OK ||
        (s = td_data_load_mnist(d->ctx, d->o.data, "t10k", &d->test_images, &d->test_labels)) != TD_OK)
        return fail(d, s, "loading Fashion-MNIST");
    td_fit_options fo;
    fit_options(d, model, &fo);
    fo.on_progress = on_progress;
    fo.user = d;
    if ((s = td_fit_create(d->mesh, d->train_images, d->train_labels, d->test_images, d->test_labels, &fo, &d->fit)) !=
        TD_OK)
        return fail(d, s, "td_fit_create");
    return 0;
}

/* Each step: a device lost is said; each epoch: the line, with the train
 * accuracy of the first 10k training examples. */
static int on_progress(const td_fit_progress *p, void *user)
{
    demo *d = user;
    if (p->event == TD_FIT_STEP) {
        d->loss_sum += (double)p->loss * (double)p->examples;
        d->acc_sum += (double)p->accuracy * (double)p->examples;
        td_trainer *trainer;
        td_fit_trainer(d->fit, &trainer);
        td_train_progress tp = {.struct_size = sizeof(td_train_progress)};
        td_trainer_progress(trainer, &tp);
        if (tp.devices_lost > d->lost) {
            printf("epoch %llu, step %llu: %u device(s) lost; continuing on %u (the cause is on stderr)\n",
                   (unsigned long long)p->epoch, (unsigned long long)p->step, tp.devices_lost - d->lost, tp.devices);
            fflush(stdout);
            d->lost = tp.devices_lost;
        }
        return 0;
    }
    if (p->event != TD_FIT_EPOCH)
        return 0;
    size_t n_train;
    td_tensor_count(d->train_labels, &n_train);
    const size_t train_eval = n_train < TRAIN_ACCURACY_EXAMPLES ? n_train : TRAIN_ACCURACY_EXAMPLES;
    float train_loss = 0, train_acc = 0;
    d->status = td_fit_evaluate(d->fit, TD_FIT_TRAIN, train_eval, &train_loss, &train_acc);
    if (d->status != TD_OK)
        return 1;
    const double per_epoch = (double)p->examples;
    d->train_seconds += p->seconds;
    d->last_loss = d->loss_sum / per_epoch;
    d->train_acc = train_acc;
    printf("epoch %llu: train loss %.4f (running accuracy %.4f), train accuracy %.4f, test loss %.4f, "
           "test accuracy %.4f, %.1f s, %.0f samples/s\n",
           (unsigned long long)p->epoch, d->last_loss, d->acc_sum / per_epoch, (double)train_acc, (double)p->test_loss,
           (double)p->test_accuracy, p->seconds, per_epoch / p->seconds);
    fflush(stdout);
    d->loss_sum = d->acc_sum = 0.0;
    return 0;
}

static int train(demo *d)
{
    td_fit_summary sum = {.struct_size = sizeof sum};
    td_fit_summarize(d->fit, &sum);
    const size_t B = (size_t)d->o.batch, steps = sum.steps_per_epoch, per_epoch = sum.examples_per_epoch;
    char processes[64] = ""; /* --devices is each process's own: process 0's is shown */
    if (d->processes > 1)
        snprintf(processes, sizeof processes, " over %u processes", d->processes);
    printf("%s: %u device(s)%s [%s], global batch %zu, %zu batches per epoch (%zu examples, the last batch %zu), "
           "batch norm %s, dropout %g, accumulate %u, schedule %s, lr %g, inputs %s (mean %.4f, std %.4f)\n",
           d->name, d->n_dev, processes, d->o.devices, B, steps, per_epoch, per_epoch - (steps - 1) * B,
           d->o.batch_norm ? "on" : "off", (double)d->o.dropout, d->o.accumulate, d->o.schedule,
           (double)d->o.learning_rate, d->o.raw_inputs ? "raw" : "standardized",
           (double)(d->o.raw_inputs ? 0.0f : sum.input_mean), (double)(d->o.raw_inputs ? 1.0f : sum.input_std));
    td_fit_result result = {.struct_size = sizeof result};
    td_status s = td_fit_run(d->fit, &result);
    if (s == TD_OK && d->status != TD_OK)
        s = d->status;
    if (s != TD_OK)
        return fail(d, s, "training");
    td_trainer *trainer;
    td_fit_trainer(d->fit, &trainer);
    bool identical = false;
    if ((s = td_trainer_replicas_identical(trainer, &identical)) != TD_OK)
        return fail(d, s, "td_trainer_replicas_identical");
    double samples = (double)per_epoch * d->o.epochs;
    td_train_progress end = {.struct_size = sizeof(td_train_progress)};
    td_trainer_progress(trainer, &end);
    /* The split in force: examples per device of a global batch, every
     * device of every process (process 0's first). */
    uint32_t rows[64], n_rows = 0;
    double local_rows[64], job_rows[64];
    if ((s = td_trainer_split(trainer, 64, rows, &n_rows)) != TD_OK)
        return fail(d, s, "td_trainer_split");
    for (uint32_t i = 0; i < n_rows; i++)
        local_rows[i] = rows[i];
    if ((s = td_demo_job_values(d->ctx, d->mesh, local_rows, n_rows, 64, job_rows, &n_rows)) != TD_OK)
        return fail(d, s, "the job's split");
    char split[768];
    size_t used = (size_t)snprintf(split, sizeof split, "[");
    for (uint32_t i = 0; i < n_rows && used < sizeof split - 16; i++)
        used += (size_t)snprintf(split + used, sizeof split - used, "%s%.0f", i ? ", " : "", job_rows[i]);
    snprintf(split + used, sizeof split - used, "]");
    printf("{\"demo\": \"%s\", \"devices\": \"%s\", \"processes\": %u, \"device_count\": %u, \"epochs\": %d, "
           "\"batch\": %zu, "
           "\"seed\": %llu, \"batch_norm\": %s, \"dropout\": %g, \"accumulate\": %u, \"schedule\": \"%s\", "
           "\"learning_rate\": %g, \"inputs\": \"%s\", "
           "\"train_loss\": %.6f, \"train_accuracy\": %.4f, \"test_loss\": %.6f, \"test_accuracy\": %.4f, "
           "\"train_seconds\": %.3f, \"samples_per_second\": %.1f, \"devices_at_end\": %u, \"devices_lost\": %u, "
           "\"balance\": \"%s\", \"split\": %s, \"replicas_bitwise_identical\": %s}\n",
           d->name, d->o.devices, d->processes, d->n_dev, d->o.epochs, B, (unsigned long long)d->o.seed,
           d->o.batch_norm ? "true" : "false", (double)d->o.dropout, d->o.accumulate, d->o.schedule,
           (double)d->o.learning_rate, d->o.raw_inputs ? "raw" : "standardized", d->last_loss, d->train_acc,
           (double)result.test_loss, (double)result.test_accuracy, d->train_seconds,
           d->train_seconds > 0 ? samples / d->train_seconds : 0.0, d->processes > 1 ? d->n_dev : end.devices,
           end.devices_lost, d->o.balance, split, identical ? "true" : "false");
    return identical ? 0 : 1;
}

int demo_mnist_main(const char *name, int argc, char **argv, const char *model, const demo_options *defaults)
{
    demo d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.o = *defaults;
    if (!d.o.balance)
        d.o.balance = "even";
    if (d.o.accumulate == 0)
        d.o.accumulate = 1;
    int rc = parse(&d, model, argc, argv);
    if (rc == 1)
        return 0; /* --help */
    if (rc == 0)
        rc = setup(&d, model);
    if (rc == 0)
        rc = train(&d);
    td_demo_end_job_if_failed(d.ctx, d.processes, rc);
    release(&d);
    return rc;
}
