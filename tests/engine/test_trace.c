/* Traces (tandem/trace.h): a short run -- training steps of the built-in
 * CNN with synchronized batch norm, an evaluation, a checkpoint and a
 * caller's span -- traced, then the file parsed with Jansson: every device
 * of the mesh has its track with its runs, kernels, uploads and
 * collective phases (bytes included), the host has its spans, and on every
 * track the spans nest. Suite trace_devices runs on the backend specs;
 * trace holds the API's contract. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "engine_test_util.h"

#define BATCH 12
#define STEPS 2

typedef struct span {
    const char *name, *cat;
    long long begin, end; /* ns */
    long long bytes;
    const char *kernel;
} span;

typedef struct track {
    char label[256];
    span *spans;
    size_t count;
} track;

static long long nanos(json_t *v)
{
    return llround(json_number_value(v) * 1000.0);
}

/* Tracks by tid, from the file at `path`. */
static track *load_trace(const char *path, size_t *n_tracks)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    cr_assert(root, "%s does not parse as JSON: %s (line %d)", path, err.text, err.line);
    json_t *events = json_object_get(root, "traceEvents");
    cr_assert(json_is_array(events), "%s has no traceEvents array", path);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(root, "otherData"), "dropped_events")), 0);
    size_t cap = 16;
    track *tracks = calloc(cap, sizeof *tracks);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        size_t tid = (size_t)json_integer_value(json_object_get(e, "tid"));
        cr_assert(tid < cap, "tid %zu", tid);
        track *t = &tracks[tid];
        if (tid + 1 > *n_tracks)
            *n_tracks = tid + 1;
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        cr_assert(ph && name, "event %zu lacks ph or name", i);
        if (strcmp(ph, "M") == 0) {
            if (strcmp(name, "thread_name") == 0)
                snprintf(t->label, sizeof t->label, "%s",
                         json_string_value(json_object_get(json_object_get(e, "args"), "name")));
            continue;
        }
        cr_assert_str_eq(ph, "X", "event %zu (%s) is neither metadata nor a complete span", i, name);
        t->spans = realloc(t->spans, (t->count + 1) * sizeof *t->spans);
        span *s = &t->spans[t->count++];
        json_t *args = json_object_get(e, "args");
        s->name = strdup(name);
        s->cat = strdup(json_string_value(json_object_get(e, "cat")));
        s->begin = nanos(json_object_get(e, "ts"));
        s->end = s->begin + nanos(json_object_get(e, "dur"));
        s->bytes = args ? (long long)json_integer_value(json_object_get(args, "bytes")) : 0;
        const char *kernel = args ? json_string_value(json_object_get(args, "kernel")) : NULL;
        s->kernel = kernel ? strdup(kernel) : NULL;
        cr_assert(s->end >= s->begin, "%s: negative duration", name);
    }
    json_decref(root);
    return tracks;
}

static void free_tracks(track *tracks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < tracks[i].count; k++) {
            free((void *)tracks[i].spans[k].name);
            free((void *)tracks[i].spans[k].cat);
            free((void *)tracks[i].spans[k].kernel);
        }
        free(tracks[i].spans);
    }
    free(tracks);
}

static int by_begin_then_longest(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end;
}

/* Every span either contains the next or ends before it starts; every
 * span named in `inside` has an ancestor called `parent`. */
static void check_nesting(track *t, const char *parent, const char *const *inside, size_t n_inside)
{
    qsort(t->spans, t->count, sizeof *t->spans, by_begin_then_longest);
    const span *stack[64];
    size_t depth = 0;
    for (size_t i = 0; i < t->count; i++) {
        const span *s = &t->spans[i];
        while (depth && stack[depth - 1]->end <= s->begin)
            depth--;
        if (depth)
            cr_assert(s->end <= stack[depth - 1]->end, "%s: %s [%lld, %lld) overlaps %s [%lld, %lld) without nesting",
                      t->label, s->name, s->begin, s->end, stack[depth - 1]->name, stack[depth - 1]->begin,
                      stack[depth - 1]->end);
        for (size_t k = 0; k < n_inside; k++) {
            if (strcmp(s->name, inside[k]) != 0 && strcmp(s->cat, inside[k]) != 0)
                continue;
            bool found = false;
            for (size_t d = 0; d < depth && !found; d++)
                found = strcmp(stack[d]->name, parent) == 0 || strcmp(stack[d]->name, "evaluate") == 0;
            cr_assert(found, "%s: %s at %lld is not inside a %s", t->label, s->name, s->begin, parent);
        }
        cr_assert(depth < 64);
        stack[depth++] = s;
    }
}

static size_t count_named(const track *t, const char *name, long long *bytes)
{
    size_t n = 0;
    if (bytes)
        *bytes = 0;
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->spans[i].name, name) == 0 || strcmp(t->spans[i].cat, name) == 0) {
            n++;
            if (bytes)
                *bytes += t->spans[i].bytes;
        }
    return n;
}

typedef struct run {
    td_context *ctx;
    td_mesh *mesh;
    td_graph *g;
    td_node images, labels, mask, loss, accuracy;
    td_trainer *trainer;
    td_evaluator *evaluator;
    td_tensor *x, *y, *m;
} run;

static bool open_run(run *r, const char *spec, bool skip_when_unavailable)
{
    memset(r, 0, sizeof *r);
    r->ctx = test_context(0);
    r->mesh = skip_when_unavailable ? test_mesh_or_skip(r->ctx, spec) : test_mesh(r->ctx, spec);
    if (!r->mesh)
        return false;
    TEST_OK(r->ctx, td_graph_create(r->ctx, &r->g));
    const int64_t xd[4] = {BATCH, 8, 8, 1}, yd[1] = {BATCH};
    TEST_OK(r->ctx, td_graph_input(r->g, "images", TD_U8, 4, xd, TD_SHARDED, &r->images));
    TEST_OK(r->ctx, td_graph_input(r->g, "labels", TD_I32, 1, yd, TD_SHARDED, &r->labels));
    TEST_OK(r->ctx, td_graph_input(r->g, "mask", TD_F32, 1, yd, TD_SHARDED, &r->mask));
    td_model_options mo;
    td_model_options_init(&mo);
    mo.batch_norm = true; /* synchronized: pmean collectives inside the step */
    mo.dropout = 0.25f;
    TEST_OK(r->ctx, td_model_classification(r->g, "cnn", r->images, r->labels, r->mask, &mo, &r->loss, &r->accuracy));
    td_node params[16];
    uint32_t n_params = 0;
    TEST_OK(r->ctx, td_graph_params(r->g, 16, params, &n_params));
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.optimizer = TD_OPTIMIZER_ADAM;
    opts.learning_rate = 1e-3f;
    TEST_OK(r->ctx, td_trainer_create(r->g, r->mesh, r->loss, n_params, params, &opts, &r->trainer));
    const td_node metrics[2] = {r->loss, r->accuracy};
    TEST_OK(r->ctx, td_evaluator_create(r->g, r->mesh, r->mask, 2, metrics, &r->evaluator));
    r->x = test_tensor(r->ctx, TD_U8, 4, xd);
    r->y = test_tensor(r->ctx, TD_I32, 1, yd);
    r->m = test_tensor(r->ctx, TD_F32, 1, yd);
    unsigned char *px;
    td_tensor_data(r->x, (void **)&px);
    test_rng rng = {0x7ACE};
    for (size_t i = 0; i < (size_t)BATCH * 64; i++)
        px[i] = (unsigned char)(test_rng_next(&rng) & 0xff);
    for (int i = 0; i < BATCH; i++) {
        test_i32(r->y)[i] = (int32_t)(test_rng_next(&rng) % 10);
        test_f32(r->m)[i] = i < BATCH - 1 ? 1.0f : 0.0f;
    }
    return true;
}

static void work(run *r, const char *checkpoint_path)
{
    const td_binding b[3] = {{r->images, r->x}, {r->labels, r->y}, {r->mask, r->m}};
    TEST_OK(r->ctx, td_trace_span_begin(r->ctx, "epoch"));
    for (int step = 0; step < STEPS; step++)
        TEST_OK(r->ctx, td_trainer_step(r->trainer, 3, b, NULL));
    TEST_OK(r->ctx, td_trace_span_end(r->ctx));
    TEST_OK(r->ctx, td_evaluator_load(r->evaluator, r->trainer));
    TEST_OK(r->ctx, td_evaluator_run(r->evaluator, 3, b));
    if (checkpoint_path)
        TEST_OK(r->ctx, td_checkpoint_save(r->trainer, checkpoint_path, NULL));
}

static void close_run(run *r)
{
    td_tensor_destroy(r->x);
    td_tensor_destroy(r->y);
    td_tensor_destroy(r->m);
    td_context_destroy(r->ctx);
}

static void check_traced_run(const char *spec, bool skip_when_unavailable)
{
    run r;
    if (!open_run(&r, spec, skip_when_unavailable))
        return;
    const uint32_t n = test_mesh_size(r.mesh);
    /* The all-reduce is direct when every device is a CPU device. */
    bool direct = true;
    for (const char *p = spec; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        direct = direct && strncmp(p, "cpu", 3) == 0;
    char *dir = ckpt_test_temp_dir();
    char trace_path[512], ckpt_path[512];
    snprintf(trace_path, sizeof trace_path, "%s/t.json", dir);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/c.safetensors", dir);
    TEST_OK(r.ctx, td_trace_begin(r.ctx, trace_path));
    cr_assert(td_trace_active(r.ctx));
    work(&r, ckpt_path);
    TEST_OK(r.ctx, td_trace_end(r.ctx));
    cr_assert(!td_trace_active(r.ctx));
    close_run(&r);

    size_t n_tracks = 0;
    track *tracks = load_trace(trace_path, &n_tracks);
    cr_assert_eq(n_tracks, 1 + n, "%s: %zu tracks, expected the host and %u devices", spec, n_tracks, n);
    cr_assert_str_eq(tracks[0].label, "host");
    cr_assert_eq(count_named(&tracks[0], "step", NULL), STEPS, "%s: host steps", spec);
    cr_assert_eq(count_named(&tracks[0], "evaluate", NULL), 1);
    cr_assert_eq(count_named(&tracks[0], "checkpoint", NULL), 1);
    cr_assert_eq(count_named(&tracks[0], "epoch", NULL), 1);
    const char *const host_inside[] = {"step"};
    check_nesting(&tracks[0], "epoch", host_inside, 1);

    /* Per device: its shard of the u8 images, i32 labels and f32 mask go up each run. */
    const long long shard_bytes = (long long)(BATCH / n) * (64 + 4 + 4);
    bool seen[16] = {false};
    for (size_t i = 1; i < n_tracks; i++) {
        track *t = &tracks[i];
        unsigned position = 99;
        cr_assert(sscanf(t->label, "device %u:", &position) == 1 && position < n, "%s: track label '%s'", spec,
                  t->label);
        cr_assert(!seen[position], "%s: two tracks for device %u", spec, position);
        seen[position] = true;
        long long bytes;
        cr_assert_eq(count_named(t, "step", NULL), STEPS, "%s: %s has %zu step runs", spec, t->label,
                     count_named(t, "step", NULL));
        cr_assert_eq(count_named(t, "evaluate", NULL), 1, "%s: %s", spec, t->label);
        cr_assert_eq(count_named(t, "upload host->device", &bytes), STEPS + 1);
        cr_assert_geq(bytes, (STEPS + 1) * shard_bytes, "%s: %s uploaded %lld bytes, expected >= %lld", spec, t->label,
                      bytes, (STEPS + 1) * shard_bytes);
        cr_assert_eq(count_named(t, "download device->host", &bytes), STEPS + 1);
        cr_assert_gt(bytes, 0);
        /* Kernels by op name, the kernel in args: the convolutions lower to im2col + GEMM. */
        size_t conv = 0, kernels = 0;
        for (size_t k = 0; k < t->count; k++) {
            if (strcmp(t->spans[k].cat, "kernel") != 0)
                continue;
            kernels++;
            cr_assert(t->spans[k].kernel, "%s: kernel span %s has no kernel name", spec, t->spans[k].name);
            conv += strcmp(t->spans[k].name, "conv2d") == 0;
        }
        cr_assert_gt(kernels, 20 * STEPS, "%s: %s has %zu kernel spans", spec, t->label, kernels);
        cr_assert_gt(conv, 0, "%s: no conv2d kernels on %s", spec, t->label);
        /* The gradients' all-reduce with its phases (they move bytes only
         * between devices: none on one device), and the owner's update. */
        cr_assert_geq(count_named(t, "all-reduce", &bytes), STEPS);
        cr_assert_gt(bytes, 0);
        if (direct) {
            /* CPU devices of one process: the direct all-reduce, whose
             * streams may all run on other devices' threads. */
            cr_assert_geq(count_named(t, "direct reduce", &bytes), STEPS, "%s: %s", spec, t->label);
            cr_assert_eq(count_named(t, "reduce-scatter", NULL), 0, "%s: %s", spec, t->label);
        } else {
            cr_assert_geq(count_named(t, "reduce-scatter", &bytes), STEPS);
            if (n > 1)
                cr_assert_gt(bytes, 0, "%s: reduce-scatter moved no bytes on %s", spec, t->label);
            cr_assert_geq(count_named(t, "all-gather", &bytes), STEPS);
            if (n > 1)
                cr_assert_gt(bytes, 0);
        }
        cr_assert_eq(count_named(t, "optimizer", NULL), STEPS, "%s: %s", spec, t->label);
        const char *const inside[] = {"kernel", "upload host->device", "download device->host", "all-reduce",
                                      "reduce-scatter", "all-gather", "direct reduce", "optimizer"};
        check_nesting(t, "step", inside, sizeof inside / sizeof inside[0]);
    }
    free_tracks(tracks, n_tracks);
    remove(trace_path);
    remove(ckpt_path);
    rmdir(dir);
    free(dir);
}

Test(trace_devices, every_device_has_nested_spans_with_bytes, .timeout = 300)
{
    check_traced_run(test_devices_spec("cpu:3"), true);
}

Test(trace, one_device_has_its_track_too)
{
    check_traced_run("cpu:1", false);
}

Test(trace, api_contract)
{
    td_context *ctx = test_context(0);
    /* Off: spans cost nothing and say nothing. */
    cr_assert(!td_trace_active(ctx));
    TEST_OK(ctx, td_trace_span_begin(ctx, "idle"));
    TEST_OK(ctx, td_trace_span_end(ctx));
    cr_assert_eq(td_trace_end(ctx), TD_ERR_STATE);
    cr_assert(test_message_mentions(ctx, "no trace is on"));
    cr_assert_eq(td_trace_begin(ctx, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_trace_begin(ctx, ""), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_trace_begin(ctx, "/nonexistent-dir/t.json"), TD_ERR_IO);
    cr_assert(test_message_mentions(ctx, "/nonexistent-dir/t.json"));
    cr_assert(!td_trace_active(ctx));
    cr_assert_eq(td_trace_begin(NULL, "x"), TD_ERR_INVALID_ARGUMENT);

    char *dir = ckpt_test_temp_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/t.json", dir);
    TEST_OK(ctx, td_trace_begin(ctx, path));
    cr_assert_eq(td_trace_begin(ctx, path), TD_ERR_STATE);
    cr_assert(test_message_mentions(ctx, "already on"));
    cr_assert_eq(access(path, F_OK), -1, "the file appears only when the trace ends");
    cr_assert_eq(td_trace_span_end(ctx), TD_ERR_STATE);
    cr_assert_eq(td_trace_span_begin(ctx, NULL), TD_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 32; i++)
        TEST_OK(ctx, td_trace_span_begin(ctx, "deep \"quoted\"\\name"));
    cr_assert_eq(td_trace_span_begin(ctx, "one too many"), TD_ERR_STATE);
    /* Left open: td_trace_end closes them, and the destroy writes the file. */
    td_context_destroy(ctx);
    size_t n_tracks = 0;
    track *tracks = load_trace(path, &n_tracks);
    cr_assert_eq(n_tracks, 1);
    cr_assert_eq(tracks[0].count, 32);
    cr_assert_str_eq(tracks[0].spans[0].name, "deep \"quoted\"\\name");
    check_nesting(&tracks[0], "", NULL, 0);
    free_tracks(tracks, n_tracks);
    remove(path);
    rmdir(dir);
    free(dir);
}

/* How many entries of dir start with "<name>.tmp" (the trace's temporary files). */
static int count_temporaries(const char *dir, const char *name)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s.tmp", name);
    return ckpt_test_count_prefixed(dir, prefix);
}

/* A device node, a FIFO, a directory or a symbolic link at the trace's
 * path is refused by name when the trace begins -- before its temporary
 * file is created -- and again when it ends, should one appear meanwhile;
 * either way the node is left as it was. */
Test(trace, a_path_that_is_not_a_regular_file_is_refused_and_left_alone)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir();
    char path[512], name[32];
    for (int k = 0; k < CKPT_TEST_NODE_KINDS; k++) {
        const ckpt_test_node kind = (ckpt_test_node)k;
        snprintf(name, sizeof name, "node-%d", k);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (!ckpt_test_make_node(path, kind))
            continue;
        TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, ckpt_test_node_words(kind), td_trace_begin(ctx, path));
        cr_assert(test_message_mentions(ctx, path), "the message does not name %s: %s", path, td_last_error(ctx));
        cr_assert(test_message_mentions(ctx, "td_trace_begin: "), "%s", td_last_error(ctx));
        cr_assert(test_message_mentions(ctx, "expected a regular file or no file"), "%s", td_last_error(ctx));
        cr_assert(!td_trace_active(ctx));
        cr_assert_eq(ckpt_test_type_at(path), ckpt_test_node_type(kind), "kind %d: %s was replaced", k, path);
        cr_assert_eq(count_temporaries(dir, name), 0, "kind %d: a temporary file was created", k);
        ckpt_test_remove_node(path, kind);
    }

    snprintf(path, sizeof path, "%s/late.json", dir);
    TEST_OK(ctx, td_trace_begin(ctx, path));
    TEST_OK(ctx, td_trace_span_begin(ctx, "work"));
    TEST_OK(ctx, td_trace_span_end(ctx));
    cr_assert(ckpt_test_make_node(path, CKPT_TEST_FIFO));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "td_trace_end: ", td_trace_end(ctx));
    cr_assert(test_message_mentions(ctx, "is a FIFO"), "%s", td_last_error(ctx));
    cr_assert(!td_trace_active(ctx), "a refused end leaves the trace off");
    cr_assert_eq(ckpt_test_type_at(path), (unsigned)S_IFIFO, "the FIFO was replaced");
    cr_assert_eq(count_temporaries(dir, "late.json"), 0, "the temporary file was left behind");
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(trace, off_leaves_no_file_and_the_same_results)
{
    /* The same run with and without a trace ends with bitwise the same
     * parameters: tracing times kernels one by one but changes no value. */
    float values[2][64];
    for (int traced = 0; traced < 2; traced++) {
        run r;
        open_run(&r, "cpu:2", false);
        char *dir = ckpt_test_temp_dir();
        char path[512];
        snprintf(path, sizeof path, "%s/t.json", dir);
        if (traced)
            TEST_OK(r.ctx, td_trace_begin(r.ctx, path));
        work(&r, NULL);
        if (traced)
            TEST_OK(r.ctx, td_trace_end(r.ctx));
        cr_assert_eq(access(path, F_OK), traced ? 0 : -1);
        td_node kernel;
        TEST_OK(r.ctx, td_graph_find(r.g, "dense/kernel", &kernel));
        const int64_t kd[2] = {256, 10};
        td_tensor *k = test_tensor(r.ctx, TD_F32, 2, kd);
        TEST_OK(r.ctx, td_trainer_read_param(r.trainer, kernel, 0, k));
        memcpy(values[traced], test_f32(k), sizeof values[traced]);
        td_tensor_destroy(k);
        close_run(&r);
        remove(path);
        rmdir(dir);
        free(dir);
    }
    cr_assert_eq(memcmp(values[0], values[1], sizeof values[0]), 0, "tracing changed the trained values");
}

/* Two contexts tracing to one path write two temporary files of their
 * own: each end leaves a whole trace of its own context at the path (the
 * later end's replaces the earlier one's, as any later write would), and
 * neither leaves a temporary file behind. */
Test(trace, two_contexts_tracing_to_one_path_each_write_a_whole_file)
{
    td_context *a = test_context(0), *b = test_context(0);
    char *dir = ckpt_test_temp_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/t.json", dir);
    TEST_OK(a, td_trace_begin(a, path));
    TEST_OK(b, td_trace_begin(b, path));
    cr_assert_eq(count_temporaries(dir, "t.json"), 2, "the two traces share a temporary file");
    TEST_OK(a, td_trace_span_begin(a, "a's span"));
    TEST_OK(a, td_trace_span_end(a));
    for (int i = 0; i < 3; i++) {
        TEST_OK(b, td_trace_span_begin(b, "b's span"));
        TEST_OK(b, td_trace_span_end(b));
    }
    TEST_OK(a, td_trace_end(a));
    size_t n_tracks = 0;
    track *tracks = load_trace(path, &n_tracks);
    cr_assert(n_tracks == 1 && tracks[0].count == 1 && strcmp(tracks[0].spans[0].name, "a's span") == 0,
              "a's trace is not a's alone");
    free_tracks(tracks, n_tracks);
    TEST_OK(b, td_trace_end(b));
    tracks = load_trace(path, &n_tracks);
    cr_assert(n_tracks == 1 && tracks[0].count == 3 && strcmp(tracks[0].spans[0].name, "b's span") == 0,
              "b's trace is not b's alone");
    free_tracks(tracks, n_tracks);
    cr_assert_eq(count_temporaries(dir, "t.json"), 0);
    td_context_destroy(a);
    td_context_destroy(b);
    remove(path);
    rmdir(dir);
    free(dir);
}
