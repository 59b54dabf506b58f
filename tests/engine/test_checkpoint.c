/* Checkpoints: safetensors files of a trainer's whole state.
 *
 * Model: dense 5->8 (no bias: batch norm follows, and a bias there has a
 * zero gradient that Adam would turn into full steps of rounding noise),
 * batch norm, relu, dropout 0.25, dense 8->3, per-example
 * softmax cross-entropy under a masked mean; Adam on an exponentially
 * decaying rate (so a wrong update count would change the rate and Adam's
 * bias correction); 40 examples in batches of 12 drawn by td_data_order, so
 * a run crosses a short padded batch and an epoch.
 *
 * Tolerances: resuming on the same mesh must be bitwise (files compared
 * byte for byte). Resuming on another mesh changes only the order of the
 * float sums over devices (gradients, synchronized batch-norm statistics,
 * the loss's mean); after 3 + 3 Adam steps at a rate <= 0.02, parameters,
 * states and optimizer moments agree within 1e-5 absolute + 1e-4 relative
 * with the run that never stopped (measured: 1.2e-7 at most), and losses
 * within 1e-5 relative. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "engine_test_util.h"
#include "td_safetensors.h"
#include "td_trainer_internal.h"

enum { N_EXAMPLES = 40, BATCH = 12, FEATURES = 5, HIDDEN = 8, CLASSES = 3, MAX_PARAMS = 8 };
#define DATA_SEED 4242u

/* ---- helpers: the model, its data, training ---- */

typedef struct model {
    td_graph *g;
    td_node x, y, mask, loss;
    td_node params[MAX_PARAMS];
    uint32_t n_params;
} model;

static void build_model(td_context *ctx, model *m, bool sync_bn)
{
    memset(m, 0, sizeof *m);
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    int64_t xd[2] = {BATCH, FEATURES}, bd[1] = {BATCH};
    TEST_OK(ctx, td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x));
    TEST_OK(ctx, td_graph_input(m->g, "y", TD_I32, 1, bd, TD_SHARDED, &m->y));
    TEST_OK(ctx, td_graph_input(m->g, "mask", TD_F32, 1, bd, TD_SHARDED, &m->mask));
    td_node h, n, r, d, logits, per;
    TEST_OK(ctx, td_layer_dense(m->g, "dense1", m->x, HIDDEN, false, 11, &h));
    td_batch_norm_options o;
    TEST_OK(ctx, td_batch_norm_options_init(&o));
    o.momentum = 0.9f;
    o.sync = sync_bn;
    TEST_OK(ctx, td_layer_batch_norm(m->g, "bn", h, &o, &n));
    TEST_OK(ctx, td_graph_relu(m->g, n, &r));
    TEST_OK(ctx, td_graph_dropout(m->g, r, 0.25f, 5, &d));
    TEST_OK(ctx, td_layer_dense(m->g, "dense2", d, CLASSES, true, 12, &logits));
    TEST_OK(ctx, td_graph_softmax_cross_entropy_per_example(m->g, logits, m->y, &per));
    TEST_OK(ctx, td_graph_masked_mean(m->g, per, m->mask, &m->loss));
    TEST_OK(ctx, td_graph_params(m->g, MAX_PARAMS, m->params, &m->n_params));
}

/* Adam with a decaying rate, so counters and moments both matter. */
static void trainer_options(td_trainer_options *o)
{
    td_trainer_options_init(o);
    o->optimizer = TD_OPTIMIZER_ADAM;
    o->schedule.kind = TD_SCHEDULE_EXPONENTIAL_DECAY;
    o->schedule.init_value = 0.02f;
    o->schedule.decay_rate = 0.5f;
    o->schedule.transition_steps = 4;
}

static td_trainer *make_trainer(td_context *ctx, const model *m, td_mesh *mesh)
{
    td_trainer_options o;
    trainer_options(&o);
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m->g, mesh, m->loss, m->n_params, m->params, &o, &t));
    return t;
}

typedef struct dataset {
    td_tensor *x, *y;
} dataset;

static void make_dataset(td_context *ctx, dataset *d)
{
    int64_t xd[2] = {N_EXAMPLES, FEATURES}, yd[1] = {N_EXAMPLES};
    d->x = test_tensor(ctx, TD_F32, 2, xd);
    d->y = test_tensor(ctx, TD_I32, 1, yd);
    test_rng rng = {7};
    float *x = test_f32(d->x);
    test_fill_uniform(&rng, x, N_EXAMPLES * FEATURES, -1.0f, 1.0f);
    for (int i = 0; i < N_EXAMPLES; i++)
        test_i32(d->y)[i] = (x[i * FEATURES] + x[i * FEATURES + 1] > 0.0f) + (x[i * FEATURES + 2] > 0.3f);
}

static void dataset_free(dataset *d)
{
    td_tensor_destroy(d->x);
    td_tensor_destroy(d->y);
}

/* The data order as a resumable position: (epoch, examples consumed). */
typedef struct feeder {
    td_context *ctx;
    const dataset *data;
    uint64_t epoch, position;
    uint32_t order[N_EXAMPLES];
    td_tensor *x, *y, *mask;
} feeder;

static void feeder_init(td_context *ctx, feeder *f, const dataset *data, uint64_t epoch, uint64_t position)
{
    f->ctx = ctx;
    f->data = data;
    f->epoch = epoch;
    f->position = position;
    TEST_OK(ctx, td_data_order(ctx, DATA_SEED, epoch, N_EXAMPLES, f->order));
    int64_t xd[2] = {BATCH, FEATURES}, bd[1] = {BATCH};
    f->x = test_tensor(ctx, TD_F32, 2, xd);
    f->y = test_tensor(ctx, TD_I32, 1, bd);
    f->mask = test_tensor(ctx, TD_F32, 1, bd);
}

static void feeder_free(feeder *f)
{
    td_tensor_destroy(f->x);
    td_tensor_destroy(f->y);
    td_tensor_destroy(f->mask);
}

static void train(td_context *ctx, td_trainer *t, const model *m, feeder *f, int steps, float *losses)
{
    for (int s = 0; s < steps; s++) {
        if (f->position >= N_EXAMPLES) {
            f->epoch++;
            f->position = 0;
            TEST_OK(ctx, td_data_order(ctx, DATA_SEED, f->epoch, N_EXAMPLES, f->order));
        }
        size_t count = N_EXAMPLES - f->position < BATCH ? N_EXAMPLES - f->position : BATCH;
        TEST_OK(ctx, td_data_gather_batch(ctx, f->data->x, f->order + f->position, count, f->x));
        TEST_OK(ctx, td_data_gather_batch(ctx, f->data->y, f->order + f->position, count, f->y));
        TEST_OK(ctx, td_data_batch_mask(ctx, f->mask, count));
        f->position += count;
        td_binding b[3] = {{m->x, f->x}, {m->y, f->y}, {m->mask, f->mask}};
        TEST_OK(ctx, td_trainer_step(t, 3, b, &losses[s]));
    }
}

/* Saves with the feeder's position as the caller's metadata. */
static void save_with_position(td_context *ctx, td_trainer *t, const feeder *f, const char *dir, char *path,
                               size_t capacity)
{
    char epoch[24], position[24];
    snprintf(epoch, sizeof epoch, "%llu", (unsigned long long)f->epoch);
    snprintf(position, sizeof position, "%llu", (unsigned long long)f->position);
    td_checkpoint_entry meta[3] = {{"epoch", epoch}, {"position", position}, {"model", "dense-bn-dropout-dense"}};
    td_checkpoint_options o;
    TEST_OK(ctx, td_checkpoint_options_init(&o));
    o.n_metadata = 3;
    o.metadata = meta;
    TEST_OK(ctx, td_checkpoint_save_dir(t, dir, &o, path, capacity));
}

/* Restores the newest checkpoint of dir into t and the feeder's position. */
static void resume(td_context *ctx, td_trainer *t, const char *dir, const dataset *data, feeder *f)
{
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open_latest(ctx, dir, &c));
    uint64_t epoch, position;
    TEST_OK(ctx, td_checkpoint_metadata_u64(c, "epoch", &epoch));
    TEST_OK(ctx, td_checkpoint_metadata_u64(c, "position", &position));
    TEST_OK(ctx, td_checkpoint_restore(c, t));
    td_checkpoint_close(c);
    feeder_init(ctx, f, data, epoch, position);
}

static void save_plain(td_context *ctx, td_trainer *t, const char *path)
{
    TEST_OK(ctx, td_checkpoint_save(t, path, NULL));
}

/* ---- round trip, bitwise resume ---- */

Test(checkpoint, save_then_restore_gives_back_every_value_and_counter)
{
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    dataset data;
    make_dataset(ctx, &data);
    model a, b;
    build_model(ctx, &a, false);
    build_model(ctx, &b, false);
    td_trainer *ta = make_trainer(ctx, &a, test_mesh(ctx, "cpu:2"));
    td_trainer *tb = make_trainer(ctx, &b, test_mesh(ctx, "cpu:2"));
    feeder f;
    feeder_init(ctx, &f, &data, 0, 0);
    float losses[2];
    train(ctx, ta, &a, &f, 2, losses);
    char path[512];
    save_with_position(ctx, ta, &f, dir, path, sizeof path);
    cr_assert(strstr(path, "/ckpt-00000002.safetensors"), "saved as %s", path);

    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));
    const char *v = NULL;
    TEST_OK(ctx, td_checkpoint_metadata(c, "model", &v));
    cr_assert(v && strcmp(v, "dense-bn-dropout-dense") == 0, "model metadata '%s'", v ? v : "(null)");
    TEST_OK(ctx, td_checkpoint_metadata(c, "no-such-key", &v));
    cr_assert_null(v);
    TEST_OK(ctx, td_checkpoint_metadata(c, "tandem.optimizer", &v));
    cr_assert(v && strcmp(v, "adam") == 0);
    uint64_t updates = 0, position = 0;
    TEST_OK(ctx, td_checkpoint_metadata_u64(c, "tandem.updates", &updates));
    TEST_OK(ctx, td_checkpoint_metadata_u64(c, "position", &position));
    cr_assert(updates == 2 && position == 24, "updates %llu position %llu", (unsigned long long)updates,
              (unsigned long long)position);
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "'model'", td_checkpoint_metadata_u64(c, "model", &updates));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "no metadata key 'absent'", td_checkpoint_metadata_u64(c, "absent", &updates));
    TEST_OK(ctx, td_checkpoint_restore(c, tb));
    td_checkpoint_close(c);

    const size_t n = td_program_plan(td_trainer_program(ta))->size[TD_BUF_PARAMS];
    cr_assert_eq(n, td_program_plan(td_trainer_program(tb))->size[TD_BUF_PARAMS]);
    cr_assert(memcmp(td_trainer_master(ta), td_trainer_master(tb), n * sizeof(float)) == 0,
              "the restored master copy differs from the saved one");
    /* Every device got the values, states (batch norm's statistics) included. */
    td_node nodes[2 + MAX_PARAMS];
    uint32_t n_nodes = a.n_params;
    memcpy(nodes, a.params, sizeof *nodes * a.n_params);
    TEST_OK(ctx, td_graph_find(a.g, "bn/mean", &nodes[n_nodes++]));
    TEST_OK(ctx, td_graph_find(a.g, "bn/var", &nodes[n_nodes++]));
    for (uint32_t i = 0; i < n_nodes; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        TEST_OK(ctx, td_graph_shape(a.g, nodes[i], &rank, dims));
        td_tensor *va = test_tensor(ctx, TD_F32, rank, dims), *vb = test_tensor(ctx, TD_F32, rank, dims);
        for (uint32_t d = 0; d < 2; d++) {
            TEST_OK(ctx, td_trainer_read_param(ta, nodes[i], d, va));
            TEST_OK(ctx, td_trainer_read_param(tb, nodes[i], d, vb));
            cr_assert(memcmp(test_f32(va), test_f32(vb), test_count(va) * sizeof(float)) == 0,
                      "node %u on device %u differs after restore", nodes[i], d);
        }
        td_tensor_destroy(va);
        td_tensor_destroy(vb);
    }
    td_train_progress pa = {.struct_size = sizeof(td_train_progress)}, pb = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(ta, &pa));
    TEST_OK(ctx, td_trainer_progress(tb, &pb));
    cr_assert(pa.updates == pb.updates && pa.micro_steps == pb.micro_steps && pa.allreduces == pb.allreduces,
              "progress %llu/%llu/%llu restored as %llu/%llu/%llu", (unsigned long long)pa.updates,
              (unsigned long long)pa.micro_steps, (unsigned long long)pa.allreduces, (unsigned long long)pb.updates,
              (unsigned long long)pb.micro_steps, (unsigned long long)pb.allreduces);
    ckpt_test_remove_dir(dir);
    feeder_free(&f);
    dataset_free(&data);
    td_context_destroy(ctx);
}

Test(checkpoint, resume_on_the_same_mesh_is_bitwise_the_uninterrupted_run)
{
    enum { STEPS = 6, HALF = 3 };
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    dataset data;
    make_dataset(ctx, &data);

    model a;
    build_model(ctx, &a, false);
    td_trainer *ta = make_trainer(ctx, &a, test_mesh(ctx, "cpu:2"));
    feeder fa;
    feeder_init(ctx, &fa, &data, 0, 0);
    float straight[STEPS];
    train(ctx, ta, &a, &fa, STEPS, straight);

    /* The interrupted run: a first process trains HALF steps and saves... */
    model b;
    build_model(ctx, &b, false);
    td_mesh *mesh_b = test_mesh(ctx, "cpu:2");
    td_trainer *tb = make_trainer(ctx, &b, mesh_b);
    feeder fb;
    feeder_init(ctx, &fb, &data, 0, 0);
    float first[HALF];
    train(ctx, tb, &b, &fb, HALF, first);
    save_with_position(ctx, tb, &fb, dir, NULL, 0);
    td_trainer_destroy(tb);
    td_mesh_destroy(mesh_b);
    td_graph_destroy(b.g);

    /* ...a second one builds everything anew and resumes. */
    model c;
    build_model(ctx, &c, false);
    td_trainer *tc = make_trainer(ctx, &c, test_mesh(ctx, "cpu:2"));
    feeder fc;
    resume(ctx, tc, dir, &data, &fc);
    float second[STEPS - HALF];
    train(ctx, tc, &c, &fc, STEPS - HALF, second);

    for (int s = 0; s < STEPS; s++) {
        float resumed = s < HALF ? first[s] : second[s - HALF];
        cr_assert(memcmp(&resumed, &straight[s], sizeof(float)) == 0, "step %d: loss %.9g resumed, %.9g straight", s,
                  (double)resumed, (double)straight[s]);
    }
    /* Parameters, batch-norm statistics, Adam's moments and the counters:
     * the two trainers' checkpoints are the same bytes. */
    char pa[512], pc[512];
    snprintf(pa, sizeof pa, "%s/straight.safetensors", dir);
    snprintf(pc, sizeof pc, "%s/resumed.safetensors", dir);
    save_plain(ctx, ta, pa);
    save_plain(ctx, tc, pc);
    size_t na, nc;
    unsigned char *ba = ckpt_test_read_whole(pa, &na), *bc = ckpt_test_read_whole(pc, &nc);
    cr_assert(na == nc && memcmp(ba, bc, na) == 0, "the resumed trainer's state differs from the uninterrupted one's");
    free(ba);
    free(bc);
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(tc, &identical));
    cr_assert(identical);
    ckpt_test_remove_dir(dir);
    feeder_free(&fa);
    feeder_free(&fb);
    feeder_free(&fc);
    dataset_free(&data);
    td_context_destroy(ctx);
}

/* Element-wise closeness of two files' tensors; returns the largest gap. */
static double compare_files(td_context *ctx, const char *pa, const char *pb, double abs_tol, double rel_tol,
                            bool skip_nothing)
{
    td_st_file *fa = NULL, *fb = NULL;
    TEST_OK(ctx, td_st_open(ctx, pa, &fa));
    TEST_OK(ctx, td_st_open(ctx, pb, &fb));
    cr_assert_eq(td_st_count(fa), td_st_count(fb));
    double worst = 0;
    for (uint32_t i = 0; i < td_st_count(fa); i++) {
        const td_st_entry *ea = td_st_entry_at(fa, i), *eb = td_st_find(fb, ea->name);
        cr_assert(eb && eb->end - eb->begin == ea->end - ea->begin, "tensor '%s' missing or resized", ea->name);
        size_t n = (size_t)(ea->end - ea->begin) / 4;
        float *va = malloc(n * sizeof(float) + 4), *vb = malloc(n * sizeof(float) + 4);
        TEST_OK(ctx, td_st_read(fa, ea, 0, n, va));
        TEST_OK(ctx, td_st_read(fb, eb, 0, n, vb));
        for (size_t j = 0; j < n; j++) {
            double gap = fabs((double)va[j] - vb[j]);
            worst = gap > worst ? gap : worst;
            if (skip_nothing)
                cr_assert(test_close(va[j], vb[j], rel_tol, abs_tol), "tensor '%s'[%zu]: %.9g vs %.9g", ea->name, j,
                          (double)va[j], (double)vb[j]);
        }
        free(va);
        free(vb);
    }
    td_st_close(fa);
    td_st_close(fb);
    return worst;
}

/* cpu:4 -> cpu:3: the optimizer state is re-split over other chunks, the
 * batch order continues from the metadata, and training goes on as the run
 * that never stopped, to float rounding (synchronized batch norm, so the
 * model itself does not depend on the mesh). */
Test(checkpoint, resume_on_another_mesh_continues_the_same_run)
{
    enum { STEPS = 6, HALF = 3 };
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    dataset data;
    make_dataset(ctx, &data);

    model a;
    build_model(ctx, &a, true);
    td_trainer *ta = make_trainer(ctx, &a, test_mesh(ctx, "cpu:4"));
    feeder fa;
    feeder_init(ctx, &fa, &data, 0, 0);
    float straight[STEPS];
    train(ctx, ta, &a, &fa, STEPS, straight);

    model b;
    build_model(ctx, &b, true);
    td_mesh *mesh_b = test_mesh(ctx, "cpu:4");
    td_trainer *tb = make_trainer(ctx, &b, mesh_b);
    feeder fb;
    feeder_init(ctx, &fb, &data, 0, 0);
    float first[HALF];
    train(ctx, tb, &b, &fb, HALF, first);
    char saved[512];
    save_with_position(ctx, tb, &fb, dir, saved, sizeof saved);
    td_trainer_destroy(tb);
    td_mesh_destroy(mesh_b);

    model c;
    build_model(ctx, &c, true);
    td_trainer *tc = make_trainer(ctx, &c, test_mesh(ctx, "cpu:3"));
    feeder fc;
    resume(ctx, tc, dir, &data, &fc);
    /* Before any step, the state went through the other mesh's chunks
     * unchanged: saving again gives bitwise the same tensors. */
    char again[512];
    snprintf(again, sizeof again, "%s/again.safetensors", dir);
    save_plain(ctx, tc, again);
    cr_assert_eq(compare_files(ctx, saved, again, 0, 0, true), 0.0);

    float second[STEPS - HALF];
    train(ctx, tc, &c, &fc, STEPS - HALF, second);
    for (int s = HALF; s < STEPS; s++)
        cr_assert(test_close(second[s - HALF], straight[s], 1e-5, 0), "step %d: loss %.9g on cpu:3 resumed, %.9g straight",
                  s, (double)second[s - HALF], (double)straight[s]);
    char pa[512], pc[512];
    snprintf(pa, sizeof pa, "%s/straight.safetensors", dir);
    snprintf(pc, sizeof pc, "%s/resumed.safetensors", dir);
    save_plain(ctx, ta, pa);
    save_plain(ctx, tc, pc);
    double worst = compare_files(ctx, pa, pc, 1e-5, 1e-4, true);
    cr_log_info("cpu:4 -> cpu:3 resume: largest difference from the uninterrupted run %.3g", worst);
    ckpt_test_remove_dir(dir);
    feeder_free(&fa);
    feeder_free(&fb);
    feeder_free(&fc);
    dataset_free(&data);
    td_context_destroy(ctx);
}

/* A device lost mid-run with on_device_loss = continue, then a checkpoint:
 * the run is the one that saved after the step before the loss on cpu:4
 * and resumed on cpu:3 -- bitwise, file for file (parameters, batch norm
 * statistics, Adam's moments, counters): the failed step is re-run on the
 * three survivors from the same master values and optimizer state, and
 * the state re-split over three owners is the one a checkpoint restores. */
Test(checkpoint, a_device_lost_before_a_save_is_the_resumed_run_bitwise)
{
    enum { STEPS = 6, BEFORE = 2 };
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    dataset data;
    make_dataset(ctx, &data);

    model a;
    build_model(ctx, &a, true);
    td_trainer_options o;
    trainer_options(&o); /* make_trainer's, continuing on the survivors */
    o.on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    td_trainer *ta = NULL;
    TEST_OK(ctx, td_trainer_create(a.g, test_mesh(ctx, "cpu:3,cpu:1@fail=3"), a.loss, a.n_params, a.params, &o, &ta));
    feeder fa;
    feeder_init(ctx, &fa, &data, 0, 0);
    float la[STEPS];
    train(ctx, ta, &a, &fa, STEPS, la); /* the fourth device fails in step 3 */
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(ta, &p));
    cr_assert_eq(p.devices, 3);
    cr_assert_eq(p.devices_lost, 1);
    char pa[512];
    snprintf(pa, sizeof pa, "%s/continued.safetensors", dir);
    save_plain(ctx, ta, pa);

    model b;
    build_model(ctx, &b, true);
    td_trainer *tb = make_trainer(ctx, &b, test_mesh(ctx, "cpu:4"));
    feeder fb;
    feeder_init(ctx, &fb, &data, 0, 0);
    float lb[BEFORE];
    train(ctx, tb, &b, &fb, BEFORE, lb);
    char saved[512];
    save_with_position(ctx, tb, &fb, dir, saved, sizeof saved);
    model c;
    build_model(ctx, &c, true);
    td_trainer *tc = make_trainer(ctx, &c, test_mesh(ctx, "cpu:3"));
    feeder fc;
    resume(ctx, tc, dir, &data, &fc);
    float lc[STEPS - BEFORE];
    train(ctx, tc, &c, &fc, STEPS - BEFORE, lc);
    char pc[512];
    snprintf(pc, sizeof pc, "%s/resumed.safetensors", dir);
    save_plain(ctx, tc, pc);
    for (int s = 0; s < BEFORE; s++)
        cr_assert_eq(la[s], lb[s], "step %d before the loss: %.9g, cpu:4 %.9g", s, (double)la[s], (double)lb[s]);
    for (int s = BEFORE; s < STEPS; s++)
        cr_assert_eq(la[s], lc[s - BEFORE], "step %d: %.9g continued, %.9g resumed on cpu:3", s, (double)la[s],
                     (double)lc[s - BEFORE]);
    cr_assert_eq(compare_files(ctx, pa, pc, 0, 0, true), 0.0, "the continued run's checkpoint differs from the resumed one's");
    ckpt_test_remove_dir(dir);
    feeder_free(&fa);
    feeder_free(&fb);
    feeder_free(&fc);
    dataset_free(&data);
    td_context_destroy(ctx);
}

/* ---- the directory: keep K, newest valid, refusals before writing ---- */

Test(checkpoint, a_directory_keeps_the_newest_k_and_opens_the_newest_valid)
{
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    dataset data;
    make_dataset(ctx, &data);
    model m;
    build_model(ctx, &m, false);
    td_trainer *t = make_trainer(ctx, &m, test_mesh(ctx, "cpu:2"));
    feeder f;
    feeder_init(ctx, &f, &data, 0, 0);
    td_checkpoint_options o;
    TEST_OK(ctx, td_checkpoint_options_init(&o));
    cr_assert_eq(o.keep, 3u);
    char path[512];
    for (int s = 1; s <= 5; s++) {
        float loss;
        train(ctx, t, &m, &f, 1, &loss);
        TEST_OK(ctx, td_checkpoint_save_dir(t, dir, &o, path, sizeof path));
    }
    cr_assert_eq(ckpt_test_count_prefixed(dir, "ckpt-"), 3);
    cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0);
    for (int s = 3; s <= 5; s++) {
        snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", dir, s);
        cr_assert(ckpt_test_file_exists(path), "%s was not kept", path);
    }
    /* A torn newest file: the one before it is opened instead. */
    snprintf(path, sizeof path, "%s/ckpt-00000005.safetensors", dir);
    cr_assert_eq(truncate(path, 100), 0);
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open_latest(ctx, dir, &c));
    const char *opened;
    TEST_OK(ctx, td_checkpoint_path(c, &opened));
    cr_assert(strstr(opened, "ckpt-00000004.safetensors"), "opened %s", opened);
    td_checkpoint_close(c);
    for (int s = 3; s <= 4; s++) {
        snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", dir, s);
        cr_assert_eq(truncate(path, 3), 0);
    }
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "no valid checkpoint", td_checkpoint_open_latest(ctx, dir, &c));
    cr_assert_null(c);

    /* Refused before anything is written. */
    char small[8];
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "capacity 8", td_checkpoint_save_dir(t, dir, &o, small, sizeof small));
    td_checkpoint_entry reserved = {"tandem.updates", "7"}, twice[2] = {{"a", "1"}, {"a", "2"}};
    o.n_metadata = 1;
    o.metadata = &reserved;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "reserved", td_checkpoint_save_dir(t, dir, &o, NULL, 0));
    o.n_metadata = 2;
    o.metadata = twice;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'a' is given twice", td_checkpoint_save_dir(t, dir, &o, NULL, 0));
    o.metadata = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "metadata is NULL", td_checkpoint_save_dir(t, dir, &o, NULL, 0));
    snprintf(path, sizeof path, "%s/no-such-dir/x.safetensors", dir);
    TEST_FAILS(ctx, TD_ERR_IO, "no-such-dir", td_checkpoint_save(t, path, NULL));
    snprintf(path, sizeof path, "%s/empty-dir", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    TEST_FAILS(ctx, TD_ERR_IO, "holds no checkpoint", td_checkpoint_open_latest(ctx, path, &c));
    rmdir(path);
    cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0);
    ckpt_test_remove_dir(dir);
    feeder_free(&f);
    dataset_free(&data);
    td_context_destroy(ctx);
}

Test(checkpoint, a_truncated_checkpoint_is_refused)
{
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    model m;
    build_model(ctx, &m, false);
    td_trainer *t = make_trainer(ctx, &m, test_mesh(ctx, "cpu:2"));
    char path[512];
    TEST_OK(ctx, td_checkpoint_save_dir(t, dir, NULL, path, sizeof path));
    size_t size;
    free(ckpt_test_read_whole(path, &size));
    const size_t cuts[3] = {size - 1, size - 100, 9};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(truncate(path, (off_t)cuts[i]), 0);
        td_checkpoint *c = NULL;
        td_status s = td_checkpoint_open(ctx, path, &c);
        cr_assert_eq(s, TD_ERR_CORRUPT_DATA, "cut at %zu of %zu: %s (%s)", cuts[i], size, td_status_name(s),
                     td_last_error(ctx));
    }
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* ---- an independent reader ---- */

/* A python3 with numpy: $TD_TEST_PYTHON, python3 on the PATH, or Debian's. */
static const char *find_python(void)
{
    static const char *candidates[3];
    candidates[0] = getenv("TD_TEST_PYTHON");
    candidates[1] = "python3";
    candidates[2] = "/usr/bin/python3";
    for (int i = 0; i < 3; i++) {
        if (!candidates[i] || !*candidates[i])
            continue;
        char cmd[512];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0)
            return candidates[i];
    }
    return NULL;
}

Test(checkpoint, numpy_reads_the_parameters_tandem_wrote)
{
    const char *python = find_python();
    if (!python)
        cr_skip_test("no python3 with numpy here (install python3-numpy): the independent reader cannot run");
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    dataset data;
    make_dataset(ctx, &data);
    model m;
    build_model(ctx, &m, false);
    td_trainer *t = make_trainer(ctx, &m, test_mesh(ctx, "cpu:2"));
    feeder f;
    feeder_init(ctx, &f, &data, 0, 0);
    float losses[2];
    train(ctx, t, &m, &f, 2, losses);
    char path[512];
    save_with_position(ctx, t, &f, dir, path, sizeof path);

    char cmd[1536];
    snprintf(cmd, sizeof cmd, "'%s' '%s/read_safetensors.py' '%s'", python, TD_TEST_SUPPORT_DIR, path);
    FILE *out = popen(cmd, "r");
    cr_assert(out, "popen %s", cmd);
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    size_t got;
    while ((got = fread(text + len, 1, cap - 1 - len, out)) > 0)
        len += got;
    text[len] = '\0';
    int rc = pclose(out);
    cr_assert_eq(rc, 0, "%s failed (status %d): %s", cmd, rc, text);

    /* Every parameter and state, bitwise; every optimizer moment by shape;
     * the caller's metadata. */
    int tensors = 0, checked = 0, moments = 0;
    bool saw_position = false;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "meta\t", 5) == 0) {
            saw_position |= strcmp(line, "meta\tposition\t24") == 0;
            continue;
        }
        cr_assert(strncmp(line, "tensor\t", 7) == 0, "unexpected line '%.80s'", line);
        tensors++;
        char *name = line + 7, *dims = strchr(name, '\t');
        cr_assert(dims);
        *dims++ = '\0';
        char *values = strchr(dims, '\t');
        cr_assert(values);
        *values++ = '\0';
        const char *param = strncmp(name, "opt/", 4) == 0 ? strchr(name + 4, '/') + 1 : name;
        td_node node;
        TEST_OK(ctx, td_graph_find(m.g, param, &node));
        uint32_t rank;
        int64_t shape[TD_MAX_RANK];
        TEST_OK(ctx, td_graph_shape(m.g, node, &rank, shape));
        char want[64] = "";
        for (uint32_t d = 0; d < rank; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), d ? ",%lld" : "%lld", (long long)shape[d]);
        cr_assert_str_eq(dims, want, "tensor '%s': numpy shape (%s), graph [%s]", name, dims, want);
        if (param != name) {
            moments++;
            continue;
        }
        td_tensor *v = test_tensor(ctx, TD_F32, rank, shape);
        TEST_OK(ctx, td_trainer_read_param(t, node, 1, v));
        char *at = values;
        for (size_t i = 0; i < test_count(v); i++) {
            char *end;
            float numpy_value = (float)strtod(at, &end);
            cr_assert(end != at, "tensor '%s': numpy printed too few values", name);
            cr_assert(memcmp(&numpy_value, &test_f32(v)[i], sizeof(float)) == 0,
                      "tensor '%s'[%zu]: numpy reads %a, the trainer holds %a", name, i, (double)numpy_value,
                      (double)test_f32(v)[i]);
            at = end;
        }
        td_tensor_destroy(v);
        checked++;
    }
    /* Trained: dense1/kernel, bn/scale, bn/bias, dense2/kernel, dense2/bias;
     * states: bn/mean, bn/var; Adam's mu and nu of the 5 trained. */
    cr_assert_eq(checked, 7, "numpy read %d parameters and states", checked);
    cr_assert_eq(moments, 10, "numpy read %d optimizer tensors", moments);
    cr_assert_eq(tensors, 17);
    cr_assert(saw_position, "numpy did not see the caller's metadata");
    free(text);
    ckpt_test_remove_dir(dir);
    feeder_free(&f);
    dataset_free(&data);
    td_context_destroy(ctx);
}
