/* The host thread pool (engine/core/td_host_pool.h) and the CPU devices
 * that lend their spare cores through it: every task runs exactly once
 * whoever calls, teams follow the devices open, and a GPT trains to the
 * same bits with one thread or several, allocating nothing per step, while
 * a small step leaves the helpers asleep. (The
 * kernel conformance suite runs every kernel case split into parts.) */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_host_pool.h"
#include "tandem/models.h"

static td_context *context_with_threads(uint32_t threads, test_alloc_counter *counter)
{
    td_context_options o;
    td_context_options_init(&o);
    o.cpu_threads = threads;
    o.timeout_ms = 30000;
    if (counter) {
        memset(counter, 0, sizeof *counter);
        td_mutex_init(&counter->lock);
        o.allocator.alloc = test_counting_alloc;
        o.allocator.free = test_counting_free;
        o.allocator.user = counter;
    }
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(&o, &ctx), TD_OK);
    return ctx;
}

enum { TASKS = 1000 };

typedef struct tally {
    atomic_int runs[TASKS];
} tally;

static void count_task(void *arg, int64_t task)
{
    tally *t = arg;
    atomic_fetch_add(&t->runs[task], 1);
}

typedef struct caller {
    td_host_pool *pool;
    tally *tally;
    int64_t count;
} caller;

static void call_many(void *arg)
{
    caller *c = arg;
    for (int r = 0; r < 200; r++)
        td_host_pool_run(c->pool, c->count, count_task, c->tally);
}

/* Four callers (four devices' workers) at once on a pool of three threads,
 * runs of 0, 1, 7 and 1000 tasks: each task of each run, exactly once. */
Test(host_pool, every_task_runs_exactly_once_with_callers_at_once)
{
    td_context *ctx = context_with_threads(3, NULL);
    td_host_pool *pool = td_context_host_pool_acquire(ctx);
    cr_assert_not_null(pool, "%s", td_last_error(ctx));
    cr_assert_eq(td_host_pool_threads(pool), 3);
    cr_assert_eq(td_host_pool_team(pool), 3, "one user: the whole pool");
    cr_assert_eq(td_context_host_pool_acquire(ctx), pool, "one pool per context");
    cr_assert_eq(td_host_pool_team(pool), 1, "two users of three threads: one each");
    td_context_host_pool_release(ctx);
    cr_assert_eq(td_host_pool_team(pool), 3);
    static const int64_t counts[4] = {0, 1, 7, TASKS};
    static tally tallies[4];
    caller callers[4];
    td_thread threads[4];
    memset(tallies, 0, sizeof tallies);
    for (int i = 0; i < 4; i++) {
        callers[i] = (caller){pool, &tallies[i], counts[i]};
        cr_assert_eq(td_thread_start(&threads[i], call_many, &callers[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        td_thread_join(&threads[i]);
    for (int i = 0; i < 4; i++)
        for (int64_t t = 0; t < TASKS; t++)
            cr_assert_eq(atomic_load(&tallies[i].runs[t]), t < counts[i] ? 200 : 0,
                         "caller %d, task %lld ran %d times", i, (long long)t, atomic_load(&tallies[i].runs[t]));
    td_context_host_pool_release(ctx);
    td_context_destroy(ctx);
}

/* Processes mpirun placed on one machine share its cores; a number the
 * caller gives is taken as it is. */
Test(host_pool, default_size_shares_the_cores_among_local_processes)
{
    long cores = (long)td_platform_cpu_count();
    cr_assert_eq(td_host_pool_default_threads(5), 5);
    test_set_env("OMPI_COMM_WORLD_LOCAL_SIZE", NULL);
    cr_assert_eq(td_host_pool_default_threads(0), (uint32_t)cores);
    test_set_env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    cr_assert_eq(td_host_pool_default_threads(0), cores / 2 > 0 ? (uint32_t)(cores / 2) : 1u);
    test_set_env("OMPI_COMM_WORLD_LOCAL_SIZE", "100000");
    cr_assert_eq(td_host_pool_default_threads(0), 1);
    test_set_env("OMPI_COMM_WORLD_LOCAL_SIZE", NULL);
}

/* A text file the GPT below trains on, at path. */
static void write_text(const char *path)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "creating %s", path);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "%d little pools of %d threads split %d calls.\n", i, i % 7 + 1, 3 * i);
    fclose(f);
}

enum { GPT_STEPS = 4 };

typedef struct gpt_run {
    float losses[GPT_STEPS];
    float *params;
    size_t n_values;
    size_t steady_allocs;
} gpt_run;

/* GPT_STEPS AdamW steps with dropout on `spec` with a pool of `threads`,
 * batch B: shapes large enough that GEMMs (512 rows a device at 8
 * sequences each), the elementwise ops and the
 * row kernels are split, and the attention's batched products run as
 * independent GEMMs side by side. */
static void train_gpt(const char *path, const char *spec, int64_t B, uint32_t threads, gpt_run *out)
{
    test_alloc_counter counter;
    td_context *ctx = context_with_threads(threads, &counter);
    td_mesh *mesh = test_mesh(ctx, spec);
    td_text *text = NULL;
    TEST_OK(ctx, td_text_open(ctx, path, NULL, &text));
    const int64_t seq = 64, td[2] = {B, seq};
    td_gpt_options o;
    TEST_OK(ctx, td_gpt_options_init(&o));
    o.layers = 2, o.heads = 2, o.width = 64, o.context = 64, o.dropout = 0.1f;
    td_graph *g;
    td_node tokens, targets, mask, loss, params[64];
    uint32_t n_params;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    TEST_OK(ctx, td_graph_input(g, "tokens", TD_I32, 2, td, TD_SHARDED, &tokens));
    TEST_OK(ctx, td_graph_input(g, "targets", TD_I32, 2, td, TD_SHARDED, &targets));
    TEST_OK(ctx, td_graph_input(g, "mask", TD_F32, 1, &B, TD_SHARDED, &mask));
    TEST_OK(ctx, td_model_gpt_loss(g, tokens, targets, mask, &o, &loss));
    TEST_OK(ctx, td_graph_params(g, 64, params, &n_params));
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.optimizer = TD_OPTIMIZER_ADAMW;
    to.learning_rate = 3e-3f;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, n_params, params, &to, &t));
    td_tensor *tok = test_tensor(ctx, TD_I32, 2, td), *tgt = test_tensor(ctx, TD_I32, 2, td);
    td_tensor *mk = test_tensor(ctx, TD_F32, 1, &B);
    TEST_OK(ctx, td_data_batch_mask(ctx, mk, (size_t)B));
    td_binding b[3] = {{tokens, tok}, {targets, tgt}, {mask, mk}};
    size_t before = 0;
    for (uint64_t step = 0; step < GPT_STEPS; step++) {
        TEST_OK(ctx, td_text_batch(text, 5, step, (size_t)B, (size_t)seq, tok, tgt));
        TEST_OK(ctx, td_trainer_step(t, 3, b, &out->losses[step]));
        if (step == 0)
            before = counter.allocs;
    }
    out->steady_allocs = counter.allocs - before;
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(t, &identical));
    cr_assert(identical, "%s with %u threads: replicas differ", spec, threads);
    out->params = test_read_trained(ctx, g, t, n_params, params, 0, &out->n_values);
    td_tensor_destroy(tok);
    td_tensor_destroy(tgt);
    td_tensor_destroy(mk);
    td_context_destroy(ctx);
}

static void check_same_bits(const char *spec, int64_t B, uint32_t threads_a, uint32_t threads_b)
{
    char *dir = test_temp_dir("tandem_pool_text");
    char path[1100];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    write_text(path);
    gpt_run a, b;
    train_gpt(path, spec, B, threads_a, &a);
    train_gpt(path, spec, B, threads_b, &b);
    td_platform_remove_file(path);
    td_platform_remove_directory(dir);
    free(dir);
    cr_assert_eq(a.n_values, b.n_values);
    for (int s = 0; s < GPT_STEPS; s++)
        cr_assert(memcmp(&a.losses[s], &b.losses[s], sizeof(float)) == 0,
                  "%s step %d: loss %.9g with %u threads, %.9g with %u", spec, s, (double)a.losses[s], threads_a,
                  (double)b.losses[s], threads_b);
    size_t differ = 0;
    for (size_t i = 0; i < a.n_values; i++)
        differ += memcmp(&a.params[i], &b.params[i], sizeof(float)) != 0;
    cr_assert_eq(differ, 0, "%s: %zu of %zu parameters differ between %u and %u threads", spec, differ, a.n_values,
                 threads_a, threads_b);
    cr_assert_lt(a.losses[GPT_STEPS - 1], a.losses[0], "the loss should fall: %g then %g", (double)a.losses[0],
                 (double)a.losses[GPT_STEPS - 1]);
    cr_expect_eq(a.steady_allocs, 0, "%zu host allocations in steady-state steps (%u threads)", a.steady_allocs,
                 threads_a);
    cr_expect_eq(b.steady_allocs, 0, "%zu host allocations in steady-state steps (%u threads)", b.steady_allocs,
                 threads_b);
    free(a.params);
    free(b.params);
}

Test(host_pool, one_device_trains_to_the_same_bits_on_one_thread_or_three, .timeout = 120)
{
    check_same_bits("cpu:1", 8, 1, 3);
}

Test(host_pool, two_devices_sharing_four_threads_train_to_their_bits_alone, .timeout = 120)
{
    check_same_bits("cpu:2", 16, 2, 4);
}

/* More devices than threads: at one thread the direct all-reduce of
 * three devices runs as one stream, at three as three. The same bits, and
 * no allocation per step either way. */
Test(host_pool, three_devices_on_one_thread_train_to_their_bits_on_three, .timeout = 120)
{
    check_same_bits("cpu:3", 24, 1, 3);
}

/* How many runs the pool's helpers were offered over `steps` SGD steps
 * (after one to settle) of linear regression from `features` inputs at
 * batch B, on cpu:1 with a pool of two threads. */
static uint32_t linreg_offers(int64_t features, int64_t B, int steps)
{
    td_context *ctx = context_with_threads(2, NULL);
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    const int64_t xd[2] = {B, features}, yd[2] = {B, 1};
    td_graph *g;
    td_node x, y, pred, loss, params[2];
    uint32_t n_params;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "y", TD_F32, 2, yd, TD_SHARDED, &y));
    TEST_OK(ctx, td_model_linreg(g, x, &pred));
    TEST_OK(ctx, td_graph_mse(g, pred, y, &loss));
    TEST_OK(ctx, td_graph_params(g, 2, params, &n_params));
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.optimizer = TD_OPTIMIZER_SGD;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, n_params, params, &to, &t));
    td_tensor *xt = test_tensor(ctx, TD_F32, 2, xd), *yt = test_tensor(ctx, TD_F32, 2, yd);
    td_binding b[2] = {{x, xt}, {y, yt}};
    float l;
    TEST_OK(ctx, td_trainer_step(t, 2, b, &l));
    td_host_pool *pool = td_context_host_pool_in_use(ctx);
    cr_assert_not_null(pool, "the CPU device holds no pool");
    const uint32_t before = td_host_pool_offers(pool);
    for (int s = 0; s < steps; s++)
        TEST_OK(ctx, td_trainer_step(t, 2, b, &l));
    const uint32_t offers = td_host_pool_offers(pool) - before;
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    td_context_destroy(ctx);
    return offers;
}

/* A small step (the seed's linear regression: 5 features, batch 128) has
 * no call nor run of calls worth a helper's wake-up, so the helper sleeps
 * through it: it was woken twice a step for the 5 x 1 kernel gradient
 * beside the 1-float bias gradient, costing more than the step's work.
 * The same model 4096 features wide (2 Mi multiply-adds a GEMM) does
 * hand parts over, so the count is live. */
Test(host_pool, small_steps_leave_the_helpers_asleep, .timeout = 60)
{
    const uint32_t small = linreg_offers(5, 128, 10), wide = linreg_offers(4096, 512, 10);
    cr_assert_eq(small, 0, "linreg 5 -> 1 at batch 128 offered %u runs to the helpers in 10 steps", small);
    cr_assert_geq(wide, 10, "linreg 4096 -> 1 at batch 512 offered only %u runs in 10 steps", wide);
}
