/* Helpers shared by the engine tests: a deterministic generator, contexts,
 * meshes from a spec (or from TD_TEST_DEVICES), host tensors, and one-call
 * wrappers that fail the test with td_last_error's message. */
#ifndef ENGINE_TEST_UTIL_H
#define ENGINE_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"
#include "td_platform.h"

/* splitmix64: tiny, seedable, the same sequence on every machine. */
typedef struct test_rng {
    uint64_t state;
} test_rng;

uint64_t test_rng_next(test_rng *r);
/* Uniform in [lo, hi). */
float test_rng_uniform(test_rng *r, float lo, float hi);
float test_rng_normal(test_rng *r);
/* Uniform magnitude in [lo, hi) with a random sign: values kept away from 0
 * (relu's kink) by lo. */
float test_rng_signed_away_from_zero(test_rng *r, float lo, float hi);
void test_fill_uniform(test_rng *r, float *data, size_t n, float lo, float hi);

/* Allocator hooks that count: every allocation and free, the live count and
 * its peak, and results that miss the requested alignment. Thread-safe. */
typedef struct test_alloc_counter {
    td_mutex lock;
    size_t allocs, frees, live, peak_live, bad_alignment;
} test_alloc_counter;

void *test_counting_alloc(void *user, size_t bytes, size_t alignment);
void test_counting_free(void *user, void *ptr);
/* A context whose allocations all go through `counter` (reset here). */
td_context *test_counting_context(test_alloc_counter *counter, uint32_t timeout_ms);

/* x [batch, features] and y [batch, 1] sharded, w [features, 1],
 * loss = mse(x w, y): the smallest trainable graph, built into g. */
void test_linreg_graph(td_context *ctx, td_graph *g, int64_t batch, int64_t features, td_node *x, td_node *y,
                       td_node *w, td_node *loss);

/* A context with the given timeout (0 = the default); fails the test when
 * creation fails. */
td_context *test_context(uint32_t timeout_ms);
/* The same, with `cpu_threads` threads for its CPU devices (0: the
 * machine's cores; fewer than the devices: they take turns as fibers). */
td_context *test_context_threads(uint32_t timeout_ms, uint32_t cpu_threads);

/* How many times slower than a plain build the CPU kernels run here: 1,
 * or TD_TEST_SLOWDOWN (scripts/test-tsan sets it: ThreadSanitizer makes
 * the own GEMM some 20 times slower). The few tests whose timeouts and
 * bounds are measured against kernel time (a GEMM tile must end within
 * a timeout) scale them by it; no other test reads it. */
uint32_t test_slowdown(void);

/* The device spec the backend-parameterised tests run on: the environment
 * variable TD_TEST_DEVICES when set and not empty, else `fallback`. */
const char *test_devices_spec(const char *fallback);

/* The test devices' spec (as test_devices_spec) followed by `extra` (a
 * simulated device, say), written to spec; skips the test when that mesh
 * is not available here, and returns its device count. */
uint32_t test_devices_spec_with(const char *fallback, const char *extra, char *spec, size_t size);

/* Opens `spec` or skips the test (destroying ctx) when its backend is not
 * available here (TD_ERR_BACKEND_UNAVAILABLE / TD_ERR_UNKNOWN_DEVICE). Any
 * other failure fails the test. */
td_mesh *test_mesh_or_skip(td_context *ctx, const char *spec);

/* Opens `spec`, which must succeed. */
td_mesh *test_mesh(td_context *ctx, const char *spec);
uint32_t test_mesh_size(td_mesh *mesh);

/* Waits inside a job that still let the other devices run when devices
 * take turns on fibers (engine/core/worker.c: more CPU devices than
 * threads), where a plain sleep or a pthread barrier would hold the
 * carrier thread they share. A meeting: every one of `n` devices calls
 * test_meeting_wait once per round and returns when all n have; rounds
 * follow each other. */
typedef struct test_meeting {
    td_mesh *mesh;
    uint32_t n;
    uint32_t arrived; /* atomic: arrivals over every round */
} test_meeting;
void test_meeting_init(test_meeting *m, td_mesh *mesh, uint32_t n);
void test_meeting_wait(test_meeting *m);
/* Pauses the calling device `ns` nanoseconds. */
void test_device_pause_ns(uint64_t ns);

/* Host tensors; creation failure fails the test. */
td_tensor *test_tensor(td_context *ctx, td_dtype dtype, uint32_t rank, const int64_t *dims);
td_tensor *test_tensor_f32(td_context *ctx, uint32_t rank, const int64_t *dims, const float *values);
float *test_f32(const td_tensor *t);
int32_t *test_i32(const td_tensor *t);
size_t test_count(const td_tensor *t);

/* Asserts status == TD_OK, printing the call and the context's message. */
#define TEST_OK(ctx, call)                                                                              \
    do {                                                                                                \
        td_status test_ok_status_ = (call);                                                             \
        cr_assert_eq(test_ok_status_, TD_OK, "%s returned %s: %s", #call, td_status_name(test_ok_status_), \
                     td_last_error(ctx));                                                               \
    } while (0)

/* True when needle is NULL or td_last_error(ctx) contains it. */
bool test_message_mentions(const td_context *ctx, const char *needle);

/* Asserts call returns `expected` and, when `needle` is not NULL, that the
 * context's message contains it. */
#define TEST_FAILS(ctx, expected, needle, call)                                                          \
    do {                                                                                                \
        td_status test_fails_status_ = (call);                                                          \
        cr_assert_eq(test_fails_status_, (expected), "%s returned %s, expected %s (message: %s)", #call, \
                     td_status_name(test_fails_status_), td_status_name(expected), td_last_error(ctx));   \
        cr_assert(test_message_mentions((ctx), (needle)), "%s: message '%s' does not mention '%s'", #call, \
                  td_last_error(ctx), (needle) ? (const char *)(needle) : "");                          \
    } while (0)

/* Elementwise closeness: |a - b| <= abs_tol + rel_tol * |b|. */
bool test_close(double a, double b, double rel_tol, double abs_tol);

/* The median of `count` (> 0) values, sorting them in place (the upper
 * one of the middle two for an even count): timing tests judge medians,
 * so one step descheduled on a shared machine fails nothing. */
double test_median(double *values, size_t count);

/* Sets (value not NULL) or removes (NULL) an environment variable of this
 * process, for tests that steer the library through one: setenv/unsetenv,
 * _putenv_s on Windows, which has neither. Fails the test on failure. */
void test_set_env(const char *name, const char *value);

/* A new, empty directory in the system's temporary folder, its name
 * starting with `prefix` (malloc'd; fails the test when it cannot be made). */
char *test_temp_dir(const char *prefix);
/* Removes path and, when it is a directory, everything in it (links are
 * removed, never followed); best effort: what cannot go stays. */
void test_remove_tree(const char *path);
/* Cuts the file at path to its first `size` bytes (which it must have):
 * truncate() with the C library only, which Windows' lacks. */
void test_truncate_file(const char *path, size_t size);

/* Compiles graph outputs for mesh and returns the program (fails the test). */
td_program *test_compile(td_context *ctx, td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs);

/* Reads output `index` of `device` into a new tensor of its per-device shape. */
td_tensor *test_read_output(td_context *ctx, td_program *p, uint32_t index, uint32_t device);

/* The n parameters as `device` holds them in trainer t, one after another
 * in one malloc'd array (the caller frees it); *count: its floats. For the
 * tests that compare whole trained models bitwise. */
float *test_read_trained(td_context *ctx, td_graph *g, td_trainer *t, uint32_t n, const td_node *params,
                         uint32_t device, size_t *count);

/* A seed image classifier ("mlp" or "cnn", td_model_classification) of
 * B 28x28x1 images, its inputs sharded, and one batch of random pixels
 * and labels for it with every example counted: the model the precision,
 * wire and deterministic tests train and compare bitwise. */
enum { TEST_CLASSIFIER_MAX_PARAMS = 32 };
typedef struct test_classifier {
    td_graph *g;
    td_node images, labels, mask, loss, accuracy;
    td_node params[TEST_CLASSIFIER_MAX_PARAMS];
    uint32_t n_params;
    td_tensor *batch[3]; /* images, labels, mask */
    td_binding bindings[3];
} test_classifier;
/* `model_seed` initialises the parameters, `batch_seed` draws the batch. */
void test_classifier_create(td_context *ctx, const char *model, int64_t B, uint64_t model_seed, uint64_t batch_seed,
                            test_classifier *out);
/* Frees the batch (the graph belongs to the context). */
void test_classifier_destroy(test_classifier *c);

/* How many of n floats differ bitwise between a and b (the bitwise model
 * comparisons), and the root mean square of a - b over that of b. */
size_t test_floats_differing(const float *a, const float *b, size_t n);
double test_relative_rms(const float *a, const float *b, size_t n);

#endif
