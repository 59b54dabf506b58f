/* The Fashion-MNIST demos' driver (see td_demo_mnist.h).
 *
 * Each epoch visits the training set in a seeded order that depends only on
 * (seed, epoch), so every mesh sees the same global batches. Full global
 * batches train; the last, short one is left out until the trainer's
 * masked batches are wired in here. Test accuracy counts every test example
 * exactly once: the last batch is padded, and padded rows are not counted.
 * Images go to the devices as f32 in [0, 1], converted on the host. */
#include "td_demo_mnist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLASSES 10
#define TRAIN_ACCURACY_EXAMPLES 10000 /* train accuracy over the first 10k examples (file order) */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct demo {
    const char *name;
    demo_options o;
    td_context *ctx;
    td_mesh *mesh;
    uint32_t n_dev;
    td_graph *g;
    td_node x, y, logits, loss;
    td_trainer *trainer;
    td_program *eval;
    uint32_t n_params;
    td_node *params;
    td_tensor **param_values;
    td_tensor *train_images, *train_labels, *test_images, *test_labels;
    td_tensor *xb, *yb, *xb_u8; /* one global batch */
    td_tensor **logits_out;     /* per device */
    uint32_t *order, *index;
} demo;

static int usage(const char *demo_name)
{
    fprintf(stderr,
            "usage: %s [--devices SPEC] [--epochs N] [--batch N] [--seed N] [--lr X] [--limit N] [--data DIR]\n"
            "  --devices SPEC  e.g. cpu:4, opencl:0,cpu:2, vulkan:0x2 (default cpu:4)\n"
            "  --epochs N      passes over the training set (default 5)\n"
            "  --batch N       global batch size; must split evenly over the devices (default 128)\n"
            "  --seed N        initial parameters and data order (default 0)\n"
            "  --lr X          Adam learning rate (default 1e-3)\n"
            "  --limit N       train on N examples per epoch (default: all 60000)\n"
            "  --data DIR      Fashion-MNIST IDX files (default %s)\n",
            demo_name, TD_FASHION_MNIST_DIR);
    return 2;
}

static bool parse_i64(const char *demo_name, const char *flag, const char *text, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || end == text || v < lo) {
        fprintf(stderr, "%s: %s expects an integer >= %lld, got '%s'\n", demo_name, flag, (long long)lo, text);
        return false;
    }
    *out = v;
    return true;
}

static int parse(demo *d, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0)
            return usage(d->name) - 1; /* 1: print and leave with 0 */
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", d->name, f);
            return usage(d->name);
        }
        const char *v = argv[++i];
        int64_t n;
        if (strcmp(f, "--devices") == 0) {
            d->o.devices = v;
        } else if (strcmp(f, "--data") == 0) {
            d->o.data = v;
        } else if (strcmp(f, "--epochs") == 0) {
            if (!parse_i64(d->name, f, v, 1, &n) || n > 100000)
                return 2;
            d->o.epochs = (int)n;
        } else if (strcmp(f, "--batch") == 0) {
            if (!parse_i64(d->name, f, v, 1, &n) || n > 60000)
                return 2;
            d->o.batch = n;
        } else if (strcmp(f, "--seed") == 0) {
            if (!parse_i64(d->name, f, v, 0, &n))
                return 2;
            d->o.seed = (uint64_t)n;
        } else if (strcmp(f, "--limit") == 0) {
            if (!parse_i64(d->name, f, v, 1, &n))
                return 2;
            d->o.limit = n;
        } else if (strcmp(f, "--lr") == 0) {
            char *end;
            float lr = strtof(v, &end);
            if (*end || end == v || !(lr > 0.0f) || lr > 1e3f) {
                fprintf(stderr, "%s: --lr expects a positive number, got '%s'\n", d->name, v);
                return 2;
            }
            d->o.learning_rate = lr;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", d->name, f);
            return usage(d->name);
        }
    }
    return 0;
}

static int fail(demo *d, td_status s, const char *what)
{
    fprintf(stderr, "%s: %s: %s: %s\n", d->name, what, td_status_name(s), d->ctx ? td_last_error(d->ctx) : "");
    return 1;
}

/* Rows `index[0..count)` of the u8 images into d->xb as f32 / 255, and
 * their labels into d->yb; rows past count are zero. */
static td_status fill_batch(demo *d, const td_tensor *images, const td_tensor *labels, size_t count)
{
    td_status s = td_batch_gather(d->ctx, images, d->index, count, d->xb_u8);
    if (s == TD_OK)
        s = td_batch_gather(d->ctx, labels, d->index, count, d->yb);
    if (s != TD_OK)
        return s;
    void *src, *dst;
    size_t n;
    td_tensor_data(d->xb_u8, &src);
    td_tensor_data(d->xb, &dst);
    td_tensor_count(d->xb, &n);
    for (size_t i = 0; i < n; i++)
        ((float *)dst)[i] = (float)((const uint8_t *)src)[i] * (1.0f / 255.0f);
    return TD_OK;
}

/* Accuracy of the current parameters on the first `count` examples. */
static td_status accuracy(demo *d, const td_tensor *images, const td_tensor *labels, size_t count, double *acc)
{
    td_status s = TD_OK;
    for (uint32_t i = 0; i < d->n_params && s == TD_OK; i++) {
        s = td_trainer_read_param(d->trainer, d->params[i], 0, d->param_values[i]);
        if (s == TD_OK)
            s = td_program_set_param(d->eval, d->params[i], d->param_values[i]);
    }
    size_t correct = 0, B = (size_t)d->o.batch, per_dev = B / d->n_dev;
    void *yv;
    td_tensor_data(d->yb, &yv);
    for (size_t start = 0; start < count && s == TD_OK; start += B) {
        size_t valid = count - start < B ? count - start : B;
        for (size_t i = 0; i < valid; i++)
            d->index[i] = (uint32_t)(start + i);
        if ((s = fill_batch(d, images, labels, valid)) != TD_OK)
            break;
        td_binding b[1] = {{d->x, d->xb}};
        if ((s = td_program_run(d->eval, 1, b)) != TD_OK)
            break;
        for (uint32_t dev = 0; dev < d->n_dev && s == TD_OK; dev++) {
            s = td_program_read_output(d->eval, 0, dev, d->logits_out[dev]);
            void *lv;
            td_tensor_data(d->logits_out[dev], &lv);
            for (size_t r = 0; r < per_dev; r++) {
                size_t row = dev * per_dev + r;
                if (row >= valid)
                    break;
                const float *l = (const float *)lv + r * CLASSES;
                int best = 0;
                for (int c = 1; c < CLASSES; c++)
                    if (l[c] > l[best])
                        best = c;
                correct += best == ((const int32_t *)yv)[row];
            }
        }
    }
    *acc = count ? (double)correct / (double)count : 0.0;
    return s;
}

static void release(demo *d)
{
    for (uint32_t i = 0; d->param_values && i < d->n_params; i++)
        td_tensor_destroy(d->param_values[i]);
    for (uint32_t i = 0; d->logits_out && i < d->n_dev; i++)
        td_tensor_destroy(d->logits_out[i]);
    free(d->param_values);
    free(d->logits_out);
    free(d->params);
    free(d->order);
    free(d->index);
    td_tensor_destroy(d->train_images);
    td_tensor_destroy(d->train_labels);
    td_tensor_destroy(d->test_images);
    td_tensor_destroy(d->test_labels);
    td_tensor_destroy(d->xb);
    td_tensor_destroy(d->yb);
    td_tensor_destroy(d->xb_u8);
    td_context_destroy(d->ctx); /* meshes, graphs, programs, trainers */
}

static int setup(demo *d, demo_model_fn build)
{
    td_status s = td_context_create(NULL, &d->ctx);
    if (s != TD_OK)
        return fail(d, s, "td_context_create");
    if ((s = td_mesh_create(d->ctx, d->o.devices, &d->mesh)) != TD_OK)
        return fail(d, s, "td_mesh_create");
    td_mesh_size(d->mesh, &d->n_dev);
    if (d->o.batch % d->n_dev != 0) {
        fprintf(stderr, "%s: the global batch %lld does not split evenly over %u devices; choose a multiple of %u\n",
                d->name, (long long)d->o.batch, d->n_dev, d->n_dev);
        return 2;
    }
    if ((s = td_dataset_load_mnist(d->ctx, d->o.data, "train", &d->train_images, &d->train_labels)) != TD_OK ||
        (s = td_dataset_load_mnist(d->ctx, d->o.data, "t10k", &d->test_images, &d->test_labels)) != TD_OK)
        return fail(d, s, "loading Fashion-MNIST");

    const int64_t B = d->o.batch, xdims[4] = {B, 28, 28, 1}, ydims[1] = {B};
    const int64_t ldims[2] = {B / d->n_dev, CLASSES};
    if ((s = td_tensor_create(d->ctx, TD_F32, 4, xdims, &d->xb)) != TD_OK ||
        (s = td_tensor_create(d->ctx, TD_U8, 4, xdims, &d->xb_u8)) != TD_OK ||
        (s = td_tensor_create(d->ctx, TD_I32, 1, ydims, &d->yb)) != TD_OK)
        return fail(d, s, "batch tensors");
    if ((s = td_graph_create(d->ctx, &d->g)) != TD_OK ||
        (s = td_graph_input(d->g, "image", TD_F32, 4, xdims, TD_SHARDED, &d->x)) != TD_OK ||
        (s = td_graph_input(d->g, "label", TD_I32, 1, ydims, TD_SHARDED, &d->y)) != TD_OK ||
        (s = build(d->g, d->x, &d->o, &d->logits)) != TD_OK ||
        (s = td_graph_softmax_cross_entropy(d->g, d->logits, d->y, &d->loss)) != TD_OK)
        return fail(d, s, "building the model");
    if ((s = td_graph_params(d->g, 0, NULL, &d->n_params)) != TD_OK)
        return fail(d, s, "td_graph_params");
    d->params = calloc(d->n_params + 1, sizeof *d->params);
    d->param_values = calloc(d->n_params + 1, sizeof *d->param_values);
    d->logits_out = calloc(d->n_dev, sizeof *d->logits_out);
    d->order = calloc(60000, sizeof *d->order);
    d->index = calloc((size_t)B, sizeof *d->index);
    if (!d->params || !d->param_values || !d->logits_out || !d->order || !d->index) {
        fprintf(stderr, "%s: out of memory\n", d->name);
        return 1;
    }
    if ((s = td_graph_params(d->g, d->n_params, d->params, &d->n_params)) != TD_OK)
        return fail(d, s, "td_graph_params");

    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.optimizer = TD_OPTIMIZER_ADAM;
    opts.learning_rate = d->o.learning_rate;
    if ((s = td_trainer_create(d->g, d->mesh, d->loss, d->n_params, d->params, &opts, &d->trainer)) != TD_OK)
        return fail(d, s, "td_trainer_create");
    if ((s = td_pmap_compile(d->g, d->mesh, 1, &d->logits, &d->eval)) != TD_OK)
        return fail(d, s, "compiling the evaluation program");
    for (uint32_t i = 0; i < d->n_params; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        if ((s = td_graph_shape(d->g, d->params[i], &rank, dims)) != TD_OK ||
            (s = td_tensor_create(d->ctx, TD_F32, rank, dims, &d->param_values[i])) != TD_OK)
            return fail(d, s, "parameter tensors");
    }
    for (uint32_t i = 0; i < d->n_dev; i++)
        if ((s = td_tensor_create(d->ctx, TD_F32, 2, ldims, &d->logits_out[i])) != TD_OK)
            return fail(d, s, "logits tensors");
    return 0;
}

static int train(demo *d)
{
    size_t n_train, n_test;
    td_tensor_count(d->train_labels, &n_train);
    td_tensor_count(d->test_labels, &n_test);
    size_t per_epoch = d->o.limit && (size_t)d->o.limit < n_train ? (size_t)d->o.limit : n_train;
    size_t B = (size_t)d->o.batch, steps = per_epoch / B;
    printf("%s: %u device(s) [%s], global batch %zu, %zu steps per epoch (%zu examples; the last %zu wait for "
           "masked batches)\n",
           d->name, d->n_dev, d->o.devices, B, steps, steps * B, per_epoch - steps * B);
    double train_seconds = 0, test_acc = 0, train_acc = 0, last_loss = 0;
    td_status s;
    for (int epoch = 0; epoch < d->o.epochs; epoch++) {
        if ((s = td_data_order(d->ctx, d->o.seed, (uint64_t)epoch, n_train, d->order)) != TD_OK)
            return fail(d, s, "td_data_order");
        double t0 = now(), loss_sum = 0;
        for (size_t step = 0; step < steps; step++) {
            memcpy(d->index, d->order + step * B, B * sizeof *d->index);
            if ((s = fill_batch(d, d->train_images, d->train_labels, B)) != TD_OK)
                return fail(d, s, "assembling a batch");
            td_binding b[2] = {{d->x, d->xb}, {d->y, d->yb}};
            float loss;
            if ((s = td_trainer_step(d->trainer, 2, b, &loss)) != TD_OK)
                return fail(d, s, "td_trainer_step");
            loss_sum += loss;
        }
        double seconds = now() - t0;
        train_seconds += seconds;
        last_loss = steps ? loss_sum / (double)steps : 0;
        size_t train_eval = n_train < TRAIN_ACCURACY_EXAMPLES ? n_train : TRAIN_ACCURACY_EXAMPLES;
        if ((s = accuracy(d, d->train_images, d->train_labels, train_eval, &train_acc)) != TD_OK ||
            (s = accuracy(d, d->test_images, d->test_labels, n_test, &test_acc)) != TD_OK)
            return fail(d, s, "evaluation");
        printf("epoch %d: train loss %.4f, train accuracy %.4f, test accuracy %.4f, %.1f s, %.0f samples/s\n",
               epoch + 1, last_loss, train_acc, test_acc, seconds, (double)(steps * B) / seconds);
        fflush(stdout);
    }
    bool identical = false;
    if ((s = td_trainer_replicas_identical(d->trainer, &identical)) != TD_OK)
        return fail(d, s, "td_trainer_replicas_identical");
    double samples = (double)steps * (double)B * d->o.epochs;
    printf("{\"demo\": \"%s\", \"devices\": \"%s\", \"device_count\": %u, \"epochs\": %d, \"batch\": %zu, "
           "\"seed\": %llu, \"train_loss\": %.6f, \"train_accuracy\": %.4f, \"test_accuracy\": %.4f, "
           "\"train_seconds\": %.3f, \"samples_per_second\": %.1f, \"replicas_bitwise_identical\": %s}\n",
           d->name, d->o.devices, d->n_dev, d->o.epochs, B, (unsigned long long)d->o.seed, last_loss, train_acc,
           test_acc, train_seconds, train_seconds > 0 ? samples / train_seconds : 0.0, identical ? "true" : "false");
    return identical ? 0 : 1;
}

int demo_mnist_main(const char *name, int argc, char **argv, demo_model_fn build, const demo_options *defaults)
{
    demo d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.o = *defaults;
    int rc = parse(&d, argc, argv);
    if (rc == 1)
        return 0; /* --help */
    if (rc == 0)
        rc = setup(&d, build);
    if (rc == 0)
        rc = train(&d);
    release(&d);
    return rc;
}
