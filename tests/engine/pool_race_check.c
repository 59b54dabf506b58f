/* The host pool's threaded scenarios as a plain program, for
 * ThreadSanitizer (Criterion's runner does not start under TSan here):
 * four callers at once on a pool of three threads, then a GPT's steps on
 * cpu:1 with three pool threads (calls in parts, batched products as
 * side-by-side GEMMs), on cpu:2 sharing four, and on cpu:5 on two (the
 * direct all-reduce's two streams for five devices).
 * Exit 0 when every task ran once and every step succeeded; a race is
 * TSan's report. Also run in the unit suite, where it checks the counts.
 *
 *   build-tsan/tests/engine/pool_race_check   (meson -Db_sanitize=thread) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "td_host_pool.h"
#include "tandem/data.h"
#include "tandem/models.h"
#include "tandem/tandem.h"

#define CHECK(ctx, call)                                                                      \
    do {                                                                                      \
        td_status s_ = (call);                                                                \
        if (s_ != TD_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, td_last_error(ctx)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

enum { TASKS = 300, ROUNDS = 100 };

typedef struct caller {
    td_host_pool *pool;
    atomic_int runs[TASKS];
    int64_t count;
} caller;

static void count_task(void *arg, int64_t task)
{
    caller *c = arg;
    atomic_fetch_add(&c->runs[task], 1);
}

static void *call_many(void *arg)
{
    caller *c = arg;
    for (int r = 0; r < ROUNDS; r++)
        td_host_pool_run(c->pool, c->count, count_task, c);
    return NULL;
}

static td_context *context_with_threads(uint32_t threads)
{
    td_context_options o;
    td_context_options_init(&o);
    o.cpu_threads = threads;
    td_context *ctx = NULL;
    if (td_context_create(&o, &ctx) != TD_OK)
        exit(1);
    return ctx;
}

static int callers_at_once(void)
{
    td_context *ctx = context_with_threads(3);
    td_host_pool *pool = td_context_host_pool_acquire(ctx);
    if (!pool)
        return 1;
    static caller callers[4];
    static const int64_t counts[4] = {1, 2, 7, TASKS};
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        callers[i].pool = pool;
        callers[i].count = counts[i];
        for (int t = 0; t < TASKS; t++)
            atomic_init(&callers[i].runs[t], 0);
        pthread_create(&threads[i], NULL, call_many, &callers[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        for (int64_t t = 0; t < TASKS; t++)
            bad += atomic_load(&callers[i].runs[t]) != (t < counts[i] ? ROUNDS : 0);
    td_context_host_pool_release(ctx);
    td_context_destroy(ctx);
    if (bad)
        fprintf(stderr, "pool: %d tasks ran a wrong number of times\n", bad);
    return bad != 0;
}

static int gpt_steps(const char *path, const char *spec, int64_t B, uint32_t threads)
{
    td_context *ctx = context_with_threads(threads);
    td_mesh *mesh;
    CHECK(ctx, td_mesh_create(ctx, spec, &mesh));
    td_text *text;
    CHECK(ctx, td_text_open(ctx, path, NULL, &text));
    const int64_t seq = 64, td[2] = {B, seq};
    td_gpt_options o;
    CHECK(ctx, td_gpt_options_init(&o));
    o.layers = 2, o.heads = 2, o.width = 64, o.context = 64, o.dropout = 0.1f;
    td_graph *g;
    td_node tokens, targets, mask, loss, params[64];
    uint32_t n_params;
    CHECK(ctx, td_graph_create(ctx, &g));
    CHECK(ctx, td_graph_input(g, "tokens", TD_I32, 2, td, TD_SHARDED, &tokens));
    CHECK(ctx, td_graph_input(g, "targets", TD_I32, 2, td, TD_SHARDED, &targets));
    CHECK(ctx, td_graph_input(g, "mask", TD_F32, 1, &B, TD_SHARDED, &mask));
    CHECK(ctx, td_model_gpt_loss(g, tokens, targets, mask, &o, &loss));
    CHECK(ctx, td_graph_params(g, 64, params, &n_params));
    td_trainer_options to;
    CHECK(ctx, td_trainer_options_init(&to));
    to.optimizer = TD_OPTIMIZER_ADAMW;
    td_trainer *t;
    CHECK(ctx, td_trainer_create(g, mesh, loss, n_params, params, &to, &t));
    td_tensor *tok, *tgt, *mk;
    CHECK(ctx, td_tensor_create(ctx, TD_I32, 2, td, &tok));
    CHECK(ctx, td_tensor_create(ctx, TD_I32, 2, td, &tgt));
    CHECK(ctx, td_tensor_create(ctx, TD_F32, 1, &B, &mk));
    CHECK(ctx, td_data_batch_mask(ctx, mk, (size_t)B));
    td_binding b[3] = {{tokens, tok}, {targets, tgt}, {mask, mk}};
    float l;
    for (uint64_t step = 0; step < 3; step++) {
        CHECK(ctx, td_text_batch(text, 5, step, (size_t)B, (size_t)seq, tok, tgt));
        CHECK(ctx, td_trainer_step(t, 3, b, &l));
    }
    bool identical = false;
    CHECK(ctx, td_trainer_replicas_identical(t, &identical));
    td_tensor_destroy(tok);
    td_tensor_destroy(tgt);
    td_tensor_destroy(mk);
    td_context_destroy(ctx);
    if (!identical)
        fprintf(stderr, "%s: replicas differ\n", spec);
    return !identical;
}

int main(void)
{
    char path[] = "/tmp/tandem_pool_raceXXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 2000; i++)
        fprintf(f, "%d little pools of %d threads split %d calls.\n", i, i % 7 + 1, 3 * i);
    fclose(f);
    int bad = callers_at_once();
    bad |= gpt_steps(path, "cpu:1", 8, 3);
    bad |= gpt_steps(path, "cpu:2", 16, 4);
    /* More devices than threads: the direct all-reduce runs two streams. */
    bad |= gpt_steps(path, "cpu:5", 20, 2);
    unlink(path);
    printf("%s\n", bad ? "pool race check: FAILED" : "pool race check: ok");
    return bad;
}
