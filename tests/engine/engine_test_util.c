/* Shared helpers of the engine tests; see engine_test_util.h. */
#include "engine_test_util.h"

#include "td_mesh_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t test_rng_next(test_rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit_interval(test_rng *r)
{
    return ((double)(test_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

float test_rng_uniform(test_rng *r, float lo, float hi)
{
    return (float)((double)lo + ((double)hi - (double)lo) * unit_interval(r));
}

float test_rng_normal(test_rng *r)
{
    double u = unit_interval(r), v = unit_interval(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

float test_rng_signed_away_from_zero(test_rng *r, float lo, float hi)
{
    float magnitude = test_rng_uniform(r, lo, hi);
    return (test_rng_next(r) & 1) ? magnitude : -magnitude;
}

void test_fill_uniform(test_rng *r, float *data, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        data[i] = test_rng_uniform(r, lo, hi);
}

td_context *test_context(uint32_t timeout_ms)
{
    return test_context_threads(timeout_ms, 0);
}

td_context *test_context_threads(uint32_t timeout_ms, uint32_t cpu_threads)
{
    td_context_options options;
    cr_assert_eq(td_context_options_init(&options), TD_OK);
    options.timeout_ms = timeout_ms;
    options.cpu_threads = cpu_threads;
    td_context *ctx = NULL;
    td_status s = td_context_create(&options, &ctx);
    cr_assert_eq(s, TD_OK, "td_context_create: %s", td_status_name(s));
    cr_assert_not_null(ctx);
    return ctx;
}

uint32_t test_slowdown(void)
{
    const char *env = getenv("TD_TEST_SLOWDOWN");
    const long v = env && *env ? strtol(env, NULL, 10) : 1;
    cr_assert(v >= 1 && v <= 1000, "TD_TEST_SLOWDOWN=%s: expected a whole factor from 1 to 1000", env);
    return (uint32_t)v;
}

const char *test_devices_spec(const char *fallback)
{
    const char *env = getenv("TD_TEST_DEVICES");
    return env && *env ? env : fallback;
}

uint32_t test_devices_spec_with(const char *fallback, const char *extra, char *spec, size_t size)
{
    snprintf(spec, size, "%s,%s", test_devices_spec(fallback), extra);
    td_context *probe = test_context(0);
    const uint32_t n = test_mesh_size(test_mesh_or_skip(probe, spec));
    td_context_destroy(probe);
    return n;
}

td_mesh *test_mesh_or_skip(td_context *ctx, const char *spec)
{
    td_mesh *mesh = NULL;
    td_status s = td_mesh_create(ctx, spec, &mesh);
    if (s == TD_ERR_BACKEND_UNAVAILABLE || s == TD_ERR_UNKNOWN_DEVICE) {
        char reason[512];
        snprintf(reason, sizeof reason, "device spec '%s' is not available here: %s: %s", spec, td_status_name(s),
                 td_last_error(ctx));
        td_context_destroy(ctx);
        cr_skip_test("%s", reason);
    }
    cr_assert_eq(s, TD_OK, "td_mesh_create('%s'): %s: %s", spec, td_status_name(s), td_last_error(ctx));
    return mesh;
}

td_mesh *test_mesh(td_context *ctx, const char *spec)
{
    td_mesh *mesh = NULL;
    td_status s = td_mesh_create(ctx, spec, &mesh);
    cr_assert_eq(s, TD_OK, "td_mesh_create('%s'): %s: %s", spec, td_status_name(s), td_last_error(ctx));
    cr_assert_not_null(mesh);
    return mesh;
}

uint32_t test_mesh_size(td_mesh *mesh)
{
    uint32_t n = 0;
    cr_assert_eq(td_mesh_size(mesh, &n), TD_OK);
    return n;
}

void test_meeting_init(test_meeting *m, td_mesh *mesh, uint32_t n)
{
    m->mesh = mesh;
    m->n = n;
    __atomic_store_n(&m->arrived, 0u, __ATOMIC_RELEASE);
}

void test_meeting_wait(test_meeting *m)
{
    const uint32_t ticket = __atomic_fetch_add(&m->arrived, 1u, __ATOMIC_ACQ_REL);
    const uint32_t all_here = (ticket / m->n + 1) * m->n;
    td_mesh_ring_doorbell(m->mesh);
    while (__atomic_load_n(&m->arrived, __ATOMIC_ACQUIRE) < all_here) {
        if (td_worker_on_fiber())
            td_worker_take_turn(0);
        else
            td_platform_yield();
    }
}

void test_device_pause_ns(uint64_t ns)
{
    if (!td_worker_on_fiber()) {
        td_platform_sleep_ns(ns);
        return;
    }
    const uint64_t until = td_platform_now_ns() + ns;
    while (td_platform_now_ns() < until)
        td_worker_take_turn(until);
}

td_tensor *test_tensor(td_context *ctx, td_dtype dtype, uint32_t rank, const int64_t *dims)
{
    td_tensor *t = NULL;
    td_status s = td_tensor_create(ctx, dtype, rank, dims, &t);
    cr_assert_eq(s, TD_OK, "td_tensor_create: %s: %s", td_status_name(s), td_last_error(ctx));
    return t;
}

td_tensor *test_tensor_f32(td_context *ctx, uint32_t rank, const int64_t *dims, const float *values)
{
    td_tensor *t = test_tensor(ctx, TD_F32, rank, dims);
    if (values)
        memcpy(test_f32(t), values, test_count(t) * sizeof(float));
    return t;
}

float *test_f32(const td_tensor *t)
{
    void *data = NULL;
    cr_assert_eq(td_tensor_data(t, &data), TD_OK);
    return data;
}

int32_t *test_i32(const td_tensor *t)
{
    void *data = NULL;
    cr_assert_eq(td_tensor_data(t, &data), TD_OK);
    return data;
}

size_t test_count(const td_tensor *t)
{
    size_t n = 0;
    cr_assert_eq(td_tensor_count(t, &n), TD_OK);
    return n;
}

bool test_close(double a, double b, double rel_tol, double abs_tol)
{
    return fabs(a - b) <= abs_tol + rel_tol * fabs(b);
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double test_median(double *values, size_t count)
{
    qsort(values, count, sizeof *values, by_value);
    return values[count / 2];
}

td_program *test_compile(td_context *ctx, td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs)
{
    td_program *p = NULL;
    TEST_OK(ctx, td_pmap_compile(g, mesh, n_outputs, outputs, &p));
    cr_assert_not_null(p);
    return p;
}

td_tensor *test_read_output(td_context *ctx, td_program *p, uint32_t index, uint32_t device)
{
    uint32_t rank = 0;
    int64_t dims[TD_MAX_RANK] = {0};
    TEST_OK(ctx, td_program_output_shape(p, index, &rank, dims));
    td_tensor *t = test_tensor(ctx, TD_F32, rank, dims);
    TEST_OK(ctx, td_program_read_output(p, index, device, t));
    return t;
}

bool test_message_mentions(const td_context *ctx, const char *needle)
{
    return needle == NULL || strstr(td_last_error(ctx), needle) != NULL;
}

void *test_counting_alloc(void *user, size_t bytes, size_t alignment)
{
    test_alloc_counter *c = user;
    if (alignment < sizeof(void *))
        alignment = sizeof(void *);
    void *p = td_platform_aligned_alloc(alignment, bytes);
    if (!p)
        return NULL;
    td_mutex_lock(&c->lock);
    c->allocs++;
    c->live++;
    if (c->live > c->peak_live)
        c->peak_live = c->live;
    if (((uintptr_t)p & (alignment - 1)) != 0)
        c->bad_alignment++;
    td_mutex_unlock(&c->lock);
    return p;
}

void test_counting_free(void *user, void *ptr)
{
    test_alloc_counter *c = user;
    td_mutex_lock(&c->lock);
    c->frees++;
    c->live--;
    td_mutex_unlock(&c->lock);
    td_platform_aligned_free(ptr);
}

td_context *test_counting_context(test_alloc_counter *counter, uint32_t timeout_ms)
{
    memset(counter, 0, sizeof *counter);
    td_mutex_init(&counter->lock);
    td_context_options o;
    td_context_options_init(&o);
    o.allocator.alloc = test_counting_alloc;
    o.allocator.free = test_counting_free;
    o.allocator.user = counter;
    o.timeout_ms = timeout_ms;
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(&o, &ctx), TD_OK);
    return ctx;
}

void test_linreg_graph(td_context *ctx, td_graph *g, int64_t batch, int64_t features, td_node *x, td_node *y,
                       td_node *w, td_node *loss)
{
    int64_t xd[2] = {batch, features}, yd[2] = {batch, 1}, wd[2] = {features, 1};
    td_node xw;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, x));
    TEST_OK(ctx, td_graph_input(g, "y", TD_F32, 2, yd, TD_SHARDED, y));
    TEST_OK(ctx, td_graph_param(g, "w", 2, wd, w));
    TEST_OK(ctx, td_graph_matmul(g, *x, *w, &xw));
    TEST_OK(ctx, td_graph_mse(g, xw, *y, loss));
}

void test_set_env(const char *name, const char *value)
{
#ifdef _WIN32
    /* An empty value removes the variable: what unsetenv does. */
    int rc = _putenv_s(name, value ? value : "");
#else
    int rc = value ? setenv(name, value, 1) : unsetenv(name);
#endif
    cr_assert_eq(rc, 0, "setting %s=%s failed", name, value ? value : "(unset)");
}

char *test_temp_dir(const char *prefix)
{
    char path[1024];
    int rc = td_platform_make_temp_directory(prefix, path, sizeof path);
    cr_assert_eq(rc, 0, "making a temporary directory %s*: %s", prefix, strerror(rc));
    char *copy = malloc(strlen(path) + 1);
    cr_assert_not_null(copy);
    strcpy(copy, path);
    return copy;
}

void test_remove_tree(const char *path)
{
    td_file_kind kind;
    if (td_platform_path_kind(path, &kind, NULL) != 0)
        return;
    if (kind != TD_FILE_KIND_DIRECTORY) {
        td_platform_remove_file(path);
        return;
    }
    td_platform_dir *d = NULL;
    if (td_platform_dir_open(path, &d) == 0) {
        const char *name;
        while ((name = td_platform_dir_next(d)) != NULL) {
            size_t size = strlen(path) + strlen(name) + 2;
            char *child = malloc(size);
            if (!child)
                break;
            snprintf(child, size, "%s/%s", path, name);
            test_remove_tree(child);
            free(child);
        }
        td_platform_dir_close(d);
    }
    td_platform_remove_directory(path);
}

void test_truncate_file(const char *path, size_t size)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "opening %s", path);
    unsigned char *head = malloc(size ? size : 1);
    cr_assert_not_null(head);
    size_t got = fread(head, 1, size, f);
    fclose(f);
    cr_assert_eq(got, size, "%s holds %zu bytes, fewer than the %zu to keep", path, got, size);
    f = fopen(path, "wb");
    cr_assert_not_null(f, "rewriting %s", path);
    cr_assert_eq(fwrite(head, 1, size, f), size);
    cr_assert_eq(fclose(f), 0);
    free(head);
}

float *test_read_trained(td_context *ctx, td_graph *g, td_trainer *t, uint32_t n, const td_node *params,
                         uint32_t device, size_t *count)
{
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        TEST_OK(ctx, td_graph_shape(g, params[i], &rank, dims));
        int64_t elements = 1;
        for (uint32_t d = 0; d < rank; d++)
            elements *= dims[d];
        total += (size_t)elements;
    }
    float *values = malloc((total ? total : 1) * sizeof *values);
    cr_assert(values);
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        TEST_OK(ctx, td_graph_shape(g, params[i], &rank, dims));
        td_tensor *v = test_tensor(ctx, TD_F32, rank, dims);
        TEST_OK(ctx, td_trainer_read_param(t, params[i], device, v));
        memcpy(values + at, test_f32(v), test_count(v) * sizeof(float));
        at += test_count(v);
        td_tensor_destroy(v);
    }
    *count = total;
    return values;
}

void test_classifier_create(td_context *ctx, const char *model, int64_t B, uint64_t model_seed, uint64_t batch_seed,
                            test_classifier *out)
{
    memset(out, 0, sizeof *out);
    const int64_t img_dims[4] = {B, 28, 28, 1};
    TEST_OK(ctx, td_graph_create(ctx, &out->g));
    TEST_OK(ctx, td_graph_input(out->g, "images", TD_U8, 4, img_dims, TD_SHARDED, &out->images));
    TEST_OK(ctx, td_graph_input(out->g, "labels", TD_I32, 1, &B, TD_SHARDED, &out->labels));
    TEST_OK(ctx, td_graph_input(out->g, "mask", TD_F32, 1, &B, TD_SHARDED, &out->mask));
    td_model_options mo;
    TEST_OK(ctx, td_model_options_init(&mo));
    mo.seed = model_seed;
    TEST_OK(ctx, td_model_classification(out->g, model, out->images, out->labels, out->mask, &mo, &out->loss,
                                         &out->accuracy));
    TEST_OK(ctx, td_graph_params(out->g, TEST_CLASSIFIER_MAX_PARAMS, out->params, &out->n_params));
    td_tensor *im = test_tensor(ctx, TD_U8, 4, img_dims), *lb = test_tensor(ctx, TD_I32, 1, &B);
    td_tensor *mk = test_tensor(ctx, TD_F32, 1, &B);
    TEST_OK(ctx, td_data_batch_mask(ctx, mk, (size_t)B));
    test_rng rng = {batch_seed};
    void *pixel_data = NULL;
    TEST_OK(ctx, td_tensor_data(im, &pixel_data));
    uint8_t *pixels = pixel_data;
    for (int64_t i = 0; i < B * 28 * 28; i++)
        pixels[i] = (uint8_t)(test_rng_next(&rng) >> 56);
    for (int64_t i = 0; i < B; i++)
        test_i32(lb)[i] = (int32_t)(test_rng_next(&rng) % 10);
    out->batch[0] = im;
    out->batch[1] = lb;
    out->batch[2] = mk;
    out->bindings[0] = (td_binding){out->images, im};
    out->bindings[1] = (td_binding){out->labels, lb};
    out->bindings[2] = (td_binding){out->mask, mk};
}

void test_classifier_destroy(test_classifier *c)
{
    for (int i = 0; i < 3; i++)
        td_tensor_destroy(c->batch[i]);
    memset(c, 0, sizeof *c);
}

size_t test_floats_differing(const float *a, const float *b, size_t n)
{
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return differ;
}

double test_relative_rms(const float *a, const float *b, size_t n)
{
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        err += d * d;
        norm += (double)b[i] * (double)b[i];
    }
    return sqrt(err / norm);
}
