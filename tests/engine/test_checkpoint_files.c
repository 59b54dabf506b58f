/* Checkpoint files: refusing corrupt and mismatched files (written by hand,
 * so the reader is tested against more than its own writer), refusing to
 * save half an accumulation round, a process killed at five points of a
 * write, refusing to replace what is not a regular file, and absent
 * metadata keys. The model is the smallest trainable one: linear
 * regression, one parameter w. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "engine_test_util.h"
#include "td_atomic_file.h"

/* A safetensors file by hand: the length of `json`, `json`, then `data`
 * (data_bytes of it; zeros when data is NULL). */
static void write_raw(const char *path, const char *json, const void *data, size_t data_bytes)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "create %s", path);
    uint64_t n = strlen(json);
    unsigned char len[8];
    for (int b = 0; b < 8; b++)
        len[b] = (unsigned char)(n >> (8 * b));
    fwrite(len, 1, 8, f);
    fwrite(json, 1, n, f);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(data ? ((const unsigned char *)data)[i] : 0, f);
    fclose(f);
}

Test(checkpoint_files, saving_mid_accumulation_round_is_refused)
{
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.accumulate_steps = 2;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, test_mesh(ctx, "cpu:2"), loss, 1, &w, &o, &t));
    int64_t xd[2] = {4, 3}, yd[2] = {4, 1};
    td_tensor *xt = test_tensor(ctx, TD_F32, 2, xd), *yt = test_tensor(ctx, TD_F32, 2, yd);
    td_binding b[2] = {{x, xt}, {y, yt}};
    TEST_OK(ctx, td_trainer_step(t, 2, b, NULL));
    TEST_FAILS(ctx, TD_ERR_STATE, "accumulation round", td_checkpoint_save_dir(t, dir, NULL, NULL, 0));
    cr_assert_eq(ckpt_test_count_prefixed(dir, "ckpt-"), 0);
    TEST_OK(ctx, td_trainer_step(t, 2, b, NULL));
    TEST_OK(ctx, td_checkpoint_save_dir(t, dir, NULL, NULL, 0));
    cr_assert_eq(ckpt_test_count_prefixed(dir, "ckpt-00000001"), 1);
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* ---- refusing corrupt and mismatched files ---- */

/* The linreg trainer (w [4, 1], plain SGD: the file is w alone) and files
 * written by hand, so the reader is tested against more than its writer. */
#define META                                                                                               \
    "\"__metadata__\":{\"tandem.format\":\"1\",\"tandem.optimizer\":\"sgd\",\"tandem.updates\":\"5\","   \
    "\"tandem.micro_steps\":\"5\",\"tandem.allreduces\":\"5\"}"
#define ENTRY_W "\"w\":{\"dtype\":\"F32\",\"shape\":[4,1],\"data_offsets\":[0,16]}"

typedef struct corrupt_case {
    const char *json;
    size_t data_bytes;
    td_status open_status, restore_status;
    const char *needle;
} corrupt_case;

Test(checkpoint_files, corrupt_and_mismatched_files_are_refused_naming_the_problem)
{
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 4, &x, &y, &w, &loss);
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, test_mesh(ctx, "cpu:2"), loss, 1, &w, NULL, &t));
    int64_t wd[2] = {4, 1};
    const float w0[4] = {0.5f, -1.5f, 2.0f, 0.25f};
    td_tensor *initial = test_tensor_f32(ctx, 2, wd, w0);
    TEST_OK(ctx, td_trainer_set_param(t, w, initial));
    td_tensor_destroy(initial);
    char path[512];
    snprintf(path, sizeof path, "%s/case.safetensors", dir);

    /* A good hand-written file loads. */
    const float w1[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    write_raw(path, "{" META "," ENTRY_W "}", w1, sizeof w1);
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));
    TEST_OK(ctx, td_checkpoint_restore(c, t));
    td_checkpoint_close(c);
    td_tensor *got = test_tensor(ctx, TD_F32, 2, wd);
    TEST_OK(ctx, td_trainer_read_param(t, w, 1, got));
    cr_assert(memcmp(test_f32(got), w1, sizeof w1) == 0, "w was not restored from the hand-written file");
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(t, &p));
    cr_assert_eq(p.updates, 5u);

    const corrupt_case cases[] = {
        {"{not json", 0, TD_ERR_CORRUPT_DATA, TD_OK, "not valid JSON"},
        {"[1, 2]", 0, TD_ERR_CORRUPT_DATA, TD_OK, "does not start with '{'"},
        {"{" META "," ENTRY_W "," ENTRY_W "}", 16, TD_ERR_CORRUPT_DATA, TD_OK, "duplicate"},
        {"{" META ",\"w\":{\"dtype\":\"F16\",\"shape\":[4,1],\"data_offsets\":[0,8]}}", 8, TD_ERR_CORRUPT_DATA, TD_OK,
         "tensor 'w': dtype 'F16', expected F32"},
        {"{" META ",\"w\":{\"dtype\":\"F32\",\"shape\":[4,1],\"data_offsets\":[0,12]}}", 12, TD_ERR_CORRUPT_DATA, TD_OK,
         "tensor 'w': data_offsets [0, 12] span 12 bytes"},
        {"{" META ",\"w\":{\"dtype\":\"F32\",\"shape\":[4,1],\"data_offsets\":[0,16]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, TD_ERR_CORRUPT_DATA, TD_OK, "overlaps"},
        {"{" META ",\"w\":{\"dtype\":\"F32\",\"shape\":[4,1],\"data_offsets\":[0,16]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]}}",
         28, TD_ERR_CORRUPT_DATA, TD_OK, "bytes [16, 20) of the data area belong to no tensor"},
        {"{" META "," ENTRY_W "}", 20, TD_ERR_CORRUPT_DATA, TD_OK, "bytes past the last tensor"},
        {"{" META "," ENTRY_W "}", 10, TD_ERR_CORRUPT_DATA, TD_OK, "tensor 'w': data_offsets [0, 16] run past"},
        {"{" META ",\"w\":{\"dtype\":\"F32\",\"shape\":[4,-1],\"data_offsets\":[0,16]}}", 16, TD_ERR_CORRUPT_DATA,
         TD_OK, "tensor 'w': shape axis 1"},
        {"{\"__metadata__\":{\"epoch\":3}," ENTRY_W "}", 16, TD_ERR_CORRUPT_DATA, TD_OK, "metadata entry 'epoch'"},
        /* Valid files that are not this trainer's. */
        {"{" META ",\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, TD_OK,
         TD_ERR_SHAPE_MISMATCH, "tensor 'w' has shape [2, 2], the trainer's graph has [4, 1]"},
        {"{" META "}", 0, TD_OK, TD_ERR_INVALID_ARGUMENT, "has no tensor 'w'"},
        {"{" META ",\"v\":{\"dtype\":\"F32\",\"shape\":[4,1],\"data_offsets\":[0,16]}}", 16, TD_OK,
         TD_ERR_INVALID_ARGUMENT, "has no tensor 'w'"},
        {"{" META "," ENTRY_W ",\"opt/trace/w\":{\"dtype\":\"F32\",\"shape\":[4,1],\"data_offsets\":[16,32]}}", 32, TD_OK,
         TD_ERR_INVALID_ARGUMENT, "tensor 'opt/trace/w', which this trainer has no place for"},
        {"{" ENTRY_W "}", 16, TD_OK, TD_ERR_CORRUPT_DATA, "'tandem.format' is absent"},
        {"{\"__metadata__\":{\"tandem.format\":\"1\",\"tandem.optimizer\":\"adam\"}," ENTRY_W "}", 16, TD_OK,
         TD_ERR_INVALID_ARGUMENT, "optimizer 'adam', this trainer's is 'sgd'"},
        {"{\"__metadata__\":{\"tandem.format\":\"1\",\"tandem.optimizer\":\"sgd\",\"tandem.updates\":\"12x\"}," ENTRY_W "}",
         16, TD_OK, TD_ERR_CORRUPT_DATA, "'tandem.updates' is '12x'"},
        /* A counter the run would wrap going on from it (the next file's number). */
        {"{\"__metadata__\":{\"tandem.format\":\"1\",\"tandem.optimizer\":\"sgd\",\"tandem.updates\":"
         "\"18446744073709551615\",\"tandem.micro_steps\":\"5\",\"tandem.allreduces\":\"5\"}," ENTRY_W "}",
         16, TD_OK, TD_ERR_CORRUPT_DATA, "'tandem.updates' is 18446744073709551615, expected at most 9223372036854775807"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const corrupt_case *k = &cases[i];
        write_raw(path, k->json, NULL, k->data_bytes);
        c = NULL;
        td_status s = td_checkpoint_open(ctx, path, &c);
        cr_assert_eq(s, k->open_status, "case %zu: open gave %s, expected %s (%s)", i, td_status_name(s),
                     td_status_name(k->open_status), td_last_error(ctx));
        if (s == TD_OK) {
            s = td_checkpoint_restore(c, t);
            cr_assert_eq(s, k->restore_status, "case %zu: restore gave %s, expected %s (%s)", i, td_status_name(s),
                         td_status_name(k->restore_status), td_last_error(ctx));
            td_checkpoint_close(c);
        } else {
            cr_assert_null(c);
        }
        cr_assert(test_message_mentions(ctx, k->needle), "case %zu: message '%s' does not mention '%s'", i,
                  td_last_error(ctx), k->needle);
        cr_assert(test_message_mentions(ctx, "case.safetensors"), "case %zu: message '%s' does not name the file", i,
                  td_last_error(ctx));
    }

    /* The header length itself: too short a file, past the file, past the cap. */
    FILE *f = fopen(path, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "too few for the 8-byte header length", td_checkpoint_open(ctx, path, &c));
    const uint64_t lengths[2] = {64, (uint64_t)1 << 40};
    const char *needles[2] = {"header length 64 runs past the end of the file", "over the 100000000-byte limit"};
    for (int i = 0; i < 2; i++) {
        unsigned char bytes[8 + 16];
        for (int b = 0; b < 8; b++)
            bytes[b] = (unsigned char)(lengths[i] >> (8 * b));
        memcpy(bytes + 8, "{\"__metadata__\":", 16);
        f = fopen(path, "wb");
        fwrite(bytes, 1, sizeof bytes, f);
        fclose(f);
        TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, needles[i], td_checkpoint_open(ctx, path, &c));
    }
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    TEST_FAILS(ctx, TD_ERR_IO, "cannot open '", td_checkpoint_open(ctx, path, &c));
    cr_assert(test_message_mentions(ctx, "absent.safetensors"), "%s", td_last_error(ctx));

    /* Nothing refused changed the trainer. */
    TEST_OK(ctx, td_trainer_read_param(t, w, 0, got));
    cr_assert(memcmp(test_f32(got), w1, sizeof w1) == 0, "a refused file changed w");
    TEST_OK(ctx, td_trainer_progress(t, &p));
    cr_assert_eq(p.updates, 5u);
    td_tensor_destroy(got);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* A real checkpoint cut short anywhere in its data is refused. */
/* ---- a process killed while writing ---- */

/* In a forked child: trains the linreg model one step, saves (step 1),
 * trains another, and saves again with the crash hook at `stage`. */
static void crash_child(const char *dir, td_write_stage stage)
{
    td_context *ctx = NULL;
    if (td_context_create(NULL, &ctx) != TD_OK)
        _exit(10);
    td_graph *g;
    td_mesh *mesh;
    td_trainer *t;
    td_node x, y, w, xw, loss;
    int64_t xd[2] = {4, 3}, yd[2] = {4, 1}, wd[2] = {3, 1};
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.momentum = 0.9f;
    if (td_graph_create(ctx, &g) || td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x) ||
        td_graph_input(g, "y", TD_F32, 2, yd, TD_SHARDED, &y) || td_graph_param(g, "w", 2, wd, &w) ||
        td_graph_matmul(g, x, w, &xw) || td_graph_mse(g, xw, y, &loss) || td_mesh_create(ctx, "cpu:2", &mesh) ||
        td_trainer_create(g, mesh, loss, 1, &w, &o, &t))
        _exit(11);
    td_tensor *xt, *yt;
    if (td_tensor_create(ctx, TD_F32, 2, xd, &xt) || td_tensor_create(ctx, TD_F32, 2, yd, &yt))
        _exit(12);
    float *xv, *yv;
    td_tensor_data(xt, (void **)&xv);
    td_tensor_data(yt, (void **)&yv);
    for (int i = 0; i < 12; i++)
        xv[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 4; i++)
        yv[i] = (float)i;
    td_binding b[2] = {{x, xt}, {y, yt}};
    if (td_trainer_step(t, 2, b, NULL) || td_checkpoint_save_dir(t, dir, NULL, NULL, 0) ||
        td_trainer_step(t, 2, b, NULL))
        _exit(13);
    td_atomic_file_test_crash_at(stage);
    td_checkpoint_save_dir(t, dir, NULL, NULL, 0);
    _exit(14); /* the hook did not fire */
}

Test(checkpoint_files, a_process_killed_while_writing_leaves_the_previous_checkpoint)
{
    enum { STAGES = 5 };
    const td_write_stage stages[STAGES] = {TD_WRITE_STAGE_CREATED, TD_WRITE_STAGE_MID_DATA,
                                           TD_WRITE_STAGE_BEFORE_FSYNC, TD_WRITE_STAGE_BEFORE_RENAME,
                                           TD_WRITE_STAGE_BEFORE_DIR_SYNC};
    char *dirs[STAGES];
    /* Every child first, while this process has no threads of its own. */
    for (int i = 0; i < STAGES; i++) {
        dirs[i] = ckpt_test_temp_dir();
        pid_t pid = fork();
        cr_assert(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0)
            crash_child(dirs[i], stages[i]);
        int status = 0;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == TD_WRITE_CRASH_EXIT,
                  "stage %d: the child ended with status %d, expected exit %d from the crash hook", stages[i], status,
                  TD_WRITE_CRASH_EXIT);
    }
    td_context *ctx = test_context(30000);
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.momentum = 0.9f;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, test_mesh(ctx, "cpu:4"), loss, 1, &w, &o, &t));
    for (int i = 0; i < STAGES; i++) {
        /* Until the rename, the new file exists only under its temporary
         * name; after it, it is complete. Either way the newest checkpoint
         * loads. */
        const bool renamed = stages[i] == TD_WRITE_STAGE_BEFORE_DIR_SYNC;
        char path[512];
        snprintf(path, sizeof path, "%s/ckpt-00000002.safetensors", dirs[i]);
        cr_assert_eq(ckpt_test_file_exists(path), renamed, "stage %d: %s %s", stages[i], path,
                     renamed ? "is missing" : "exists, partially written");
        cr_assert_eq(ckpt_test_count_prefixed(dirs[i], ".tmp-"), renamed ? 0 : 1, "stage %d: temporary files", stages[i]);
        td_checkpoint *c = NULL;
        TEST_OK(ctx, td_checkpoint_open_latest(ctx, dirs[i], &c));
        uint64_t updates = 0;
        TEST_OK(ctx, td_checkpoint_metadata_u64(c, "tandem.updates", &updates));
        cr_assert_eq(updates, renamed ? 2u : 1u, "stage %d: the newest loadable checkpoint is of update %llu",
                     stages[i], (unsigned long long)updates);
        TEST_OK(ctx, td_checkpoint_restore(c, t));
        td_checkpoint_close(c);
        /* The next writer removes the dead writer's temporary file. */
        TEST_OK(ctx, td_checkpoint_save_dir(t, dirs[i], NULL, NULL, 0));
        cr_assert_eq(ckpt_test_count_prefixed(dirs[i], ".tmp-"), 0, "stage %d: the dead writer's temporary file is still there",
                     stages[i]);
        ckpt_test_remove_dir(dirs[i]);
    }
    td_context_destroy(ctx);
}

/* ---- what a save may replace ---- */

/* A linreg trainer (w [4, 1], plain SGD) on cpu:2, for the tests below
 * that only need something to save. */
static td_trainer *linreg_trainer(td_context *ctx)
{
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, test_mesh(ctx, "cpu:2"), loss, 1, &w, NULL, &t));
    return t;
}

/* A device node, a FIFO, a directory or a symbolic link at the path is
 * refused by name before anything is written, and is still there, as it
 * was, afterwards: a save run as root to /dev/null must not turn the node
 * into a file. */
Test(checkpoint_files, a_path_that_is_not_a_regular_file_is_refused_and_left_alone)
{
    td_context *ctx = test_context(30000);
    td_trainer *t = linreg_trainer(ctx);
    char *dir = ckpt_test_temp_dir();
    char path[512];
    for (int k = 0; k < CKPT_TEST_NODE_KINDS; k++) {
        const ckpt_test_node kind = (ckpt_test_node)k;
        snprintf(path, sizeof path, "%s/node-%d", dir, k);
        if (!ckpt_test_make_node(path, kind))
            continue;
        TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, ckpt_test_node_words(kind), td_checkpoint_save(t, path, NULL));
        cr_assert(test_message_mentions(ctx, path), "the message does not name %s: %s", path, td_last_error(ctx));
        cr_assert(test_message_mentions(ctx, "td_checkpoint_save: "), "%s", td_last_error(ctx));
        cr_assert(test_message_mentions(ctx, "expected a regular file or no file"), "%s", td_last_error(ctx));
        cr_assert_eq(ckpt_test_type_at(path), ckpt_test_node_type(kind), "kind %d: %s was replaced", k, path);
        cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0, "kind %d: a temporary file was written", k);
        if (kind == CKPT_TEST_SYMLINK) {
            char target[600];
            snprintf(target, sizeof target, "%s.target", path);
            size_t size = 0;
            unsigned char *bytes = ckpt_test_read_whole(target, &size);
            cr_assert(size == strlen("the link's target") && memcmp(bytes, "the link's target", size) == 0,
                      "the link's target was written");
            free(bytes);
        }
        ckpt_test_remove_node(path, kind);
    }
    /* The same rule under td_checkpoint_save_dir's own name for the file. */
    snprintf(path, sizeof path, "%s/ckpt-00000000.safetensors", dir);
    cr_assert(ckpt_test_make_node(path, CKPT_TEST_FIFO));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "td_checkpoint_save_dir: ", td_checkpoint_save_dir(t, dir, NULL, NULL, 0));
    cr_assert(test_message_mentions(ctx, "is a FIFO"), "%s", td_last_error(ctx));
    cr_assert_eq(ckpt_test_type_at(path), (unsigned)S_IFIFO);
    unlink(path);
    /* A regular file is what a save replaces. */
    snprintf(path, sizeof path, "%s/plain.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs("an older checkpoint", f);
    fclose(f);
    TEST_OK(ctx, td_checkpoint_save(t, path, NULL));
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));
    td_checkpoint_close(c);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* The path is looked at again right before the rename: what appeared
 * there while the file was being written is refused and left alone, and
 * the temporary file goes. */
Test(checkpoint_files, a_path_that_changes_while_writing_is_checked_again_before_the_rename)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/late", dir);
    td_atomic_file f;
    TEST_OK(ctx, td_atomic_file_create(ctx, "the test", path, &f));
    TEST_OK(ctx, td_atomic_file_write(&f, "data", 4));
    cr_assert(ckpt_test_make_node(path, CKPT_TEST_FIFO));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "the test: ", td_atomic_file_commit(&f));
    cr_assert(test_message_mentions(ctx, "is a FIFO"), "%s", td_last_error(ctx));
    cr_assert_eq(ckpt_test_type_at(path), (unsigned)S_IFIFO, "the FIFO was replaced");
    cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0, "the temporary file was left behind");
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* ---- metadata ---- */

/* A key the file lacks (every checkpoint written before the key existed,
 * or by another writer) is TD_OK with a NULL value; a failed lookup leaves
 * NULL too, never the previous answer; a number the file lacks is an error
 * naming the key. */
Test(checkpoint_files, an_absent_metadata_key_is_null_and_a_failed_lookup_leaves_no_value)
{
    td_context *ctx = test_context(30000);
    td_trainer *t = linreg_trainer(ctx);
    char *dir = ckpt_test_temp_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/old.safetensors", dir);
    const td_checkpoint_entry pairs[] = {{"model", "linreg"}, {"epoch", "3"}};
    td_checkpoint_options o;
    td_checkpoint_options_init(&o);
    o.n_metadata = 2;
    o.metadata = pairs;
    TEST_OK(ctx, td_checkpoint_save(t, path, &o));
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));

    const char *value = "an earlier answer";
    TEST_OK(ctx, td_checkpoint_metadata(c, "inputs", &value));
    cr_assert_null(value, "an absent key gave '%s'", value);
    uint64_t number = 42;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "no metadata key 'inputs'",
               td_checkpoint_metadata_u64(c, "inputs", &number));
    cr_assert(test_message_mentions(ctx, path), "%s", td_last_error(ctx));
    cr_assert_eq(number, 42u, "a failed number lookup wrote its out-parameter");

    TEST_OK(ctx, td_checkpoint_metadata(c, "model", &value));
    cr_assert(value && strcmp(value, "linreg") == 0);
    TEST_OK(ctx, td_checkpoint_metadata_u64(c, "epoch", &number));
    cr_assert_eq(number, 3u);

    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "key or value is NULL", td_checkpoint_metadata(c, NULL, &value));
    cr_assert_null(value, "a refused lookup left the previous answer");
    value = "an earlier answer";
    cr_assert_eq(td_checkpoint_metadata(NULL, "model", &value), TD_ERR_INVALID_ARGUMENT);
    cr_assert_null(value, "a lookup on no checkpoint left the previous answer");
    cr_assert_eq(td_checkpoint_metadata(c, "model", NULL), TD_ERR_INVALID_ARGUMENT);

    td_checkpoint_close(c);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* ---- lifetimes ---- */

/* A trainer released by its mesh's destroy and a checkpoint released by
 * its context's (keep_handles) answer TD_ERR_STATE; their destroys still
 * work, in any order. */
Test(checkpoint_files, released_trainers_and_checkpoints_answer_state)
{
    td_context_options co;
    td_context_options_init(&co);
    co.keep_handles = true;
    td_context *ctx = NULL;
    TEST_OK(ctx, td_context_create(&co, &ctx));
    char *dir = ckpt_test_temp_dir();
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, 1, &w, NULL, &t));
    char path[512];
    TEST_OK(ctx, td_checkpoint_save_dir(t, dir, NULL, path, sizeof path));
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));

    td_mesh_destroy(mesh);
    TEST_FAILS(ctx, TD_ERR_STATE, "td_checkpoint_save: the trainer was released", td_checkpoint_save(t, path, NULL));
    TEST_FAILS(ctx, TD_ERR_STATE, "td_checkpoint_restore: the trainer was released", td_checkpoint_restore(c, t));
    const char *value = NULL;
    TEST_OK(ctx, td_checkpoint_metadata(c, "tandem.format", &value));
    cr_assert(value && strcmp(value, "1") == 0);

    td_context_destroy(ctx);
    cr_assert_eq(td_checkpoint_metadata(c, "tandem.format", &value), TD_ERR_STATE);
    cr_assert_null(value, "a released checkpoint left the earlier answer, which points into its freed header");
    cr_assert_eq(td_checkpoint_restore(c, t), TD_ERR_STATE);
    td_checkpoint_close(c);
    td_trainer_destroy(t);
    td_graph_destroy(g); /* the last handle: frees what is left of the context */
    ckpt_test_remove_dir(dir);
}

/* ---- files a directory holds that no restore accepts ---- */

typedef struct log_capture {
    char text[4096];
    size_t used;
} log_capture;

static void capture_log(void *user, td_log_level level, const char *message)
{
    log_capture *c = user;
    if (level < TD_LOG_WARN)
        return;
    int n = snprintf(c->text + c->used, sizeof c->text - c->used, "%s\n", message);
    if (n > 0)
        c->used += (size_t)n < sizeof c->text - c->used ? (size_t)n : sizeof c->text - c->used - 1;
}

/* Three higher-numbered files that no restore takes -- two torn, one
 * well-formed with w of another shape -- must neither push the good
 * checkpoints out of the newest three nor be restored: the resume takes
 * the newest good one, and names each file it skipped. */
Test(checkpoint_files, unloadable_files_neither_count_towards_keep_nor_stop_a_resume)
{
    log_capture log = {{0}, 0};
    td_context_options co;
    td_context_options_init(&co);
    co.timeout_ms = 30000;
    co.log = capture_log;
    co.log_user = &log;
    co.log_level = TD_LOG_WARN;
    td_context *ctx;
    cr_assert_eq(td_context_create(&co, &ctx), TD_OK);
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, test_mesh(ctx, "cpu:2"), loss, 1, &w, NULL, &t));
    char *dir = ckpt_test_temp_dir();
    char path[512];
    for (int n = 10; n <= 11; n++) {
        snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", dir, n);
        write_raw(path, "{not json", NULL, 0);
    }
    snprintf(path, sizeof path, "%s/ckpt-00000012.safetensors", dir);
    write_raw(path, "{" META ",\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", NULL, 16);

    int64_t xd[2] = {4, 3}, yd[2] = {4, 1};
    td_tensor *xt = test_tensor(ctx, TD_F32, 2, xd), *yt = test_tensor(ctx, TD_F32, 2, yd);
    for (size_t i = 0; i < 12; i++)
        test_f32(xt)[i] = (float)i / 12.0f;
    for (size_t i = 0; i < 4; i++)
        test_f32(yt)[i] = 1.0f;
    td_binding b[2] = {{x, xt}, {y, yt}};
    for (int step = 1; step <= 4; step++) {
        TEST_OK(ctx, td_trainer_step(t, 2, b, NULL));
        TEST_OK(ctx, td_checkpoint_save_dir(t, dir, NULL, NULL, 0));
    }
    for (int n = 1; n <= 12; n++) {
        snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", dir, n);
        const bool expected = (n >= 2 && n <= 4) || n >= 10;
        cr_assert_eq(ckpt_test_file_exists(path), expected, "%s %s", path, expected ? "was removed" : "was kept");
    }
    cr_assert(strstr(log.text, "ckpt-00000012.safetensors"), "the save did not say why it left a file: %s", log.text);

    td_trainer *fresh = linreg_trainer(ctx);
    log.used = 0;
    log.text[0] = '\0';
    char restored[512];
    TEST_OK(ctx, td_checkpoint_restore_latest(fresh, dir, restored, sizeof restored));
    cr_assert(strstr(restored, "/ckpt-00000004.safetensors"), "restored %s", restored);
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(fresh, &p));
    cr_assert_eq(p.updates, 4u);
    for (int n = 10; n <= 12; n++) {
        char name[64];
        snprintf(name, sizeof name, "skipping %s/ckpt-%08d.safetensors", dir, n);
        cr_assert(strstr(log.text, name), "no warning '%s' in: %s", name, log.text);
    }
    cr_assert(strstr(log.text, "has shape [2, 2]"), "the warning does not say why: %s", log.text);

    /* None restores: the newest one's problem, and the trainer as it was. */
    for (int n = 1; n <= 4; n++) {
        snprintf(path, sizeof path, "%s/ckpt-%08d.safetensors", dir, n);
        unlink(path);
    }
    td_trainer *untouched = linreg_trainer(ctx);
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "no checkpoint in",
               td_checkpoint_restore_latest(untouched, dir, restored, sizeof restored));
    TEST_OK(ctx, td_trainer_progress(untouched, &p));
    cr_assert_eq(p.updates, 0u);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "path capacity 8", td_checkpoint_restore_latest(untouched, dir, restored, 8));
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* ---- a diverged run's state is neither saved nor restored ---- */

Test(checkpoint_files, nan_or_infinite_values_are_neither_saved_nor_restored)
{
    td_context *ctx = test_context(30000);
    char *dir = ckpt_test_temp_dir();
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 4, &x, &y, &w, &loss);
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, test_mesh(ctx, "cpu:2"), loss, 1, &w, NULL, &t));
    int64_t wd[2] = {4, 1};
    const float good[4] = {0.5f, -1.5f, 2.0f, 0.25f};
    td_tensor *values = test_tensor_f32(ctx, 2, wd, good);
    TEST_OK(ctx, td_trainer_set_param(t, w, values));
    char path[512];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    TEST_OK(ctx, td_checkpoint_save(t, path, NULL));

    /* Saving: refused before the file is touched, naming the element. */
    test_f32(values)[2] = NAN;
    TEST_OK(ctx, td_trainer_set_param(t, w, values));
    TEST_FAILS(ctx, TD_ERR_STATE, "tensor 'w' holds nan at element 2", td_checkpoint_save(t, path, NULL));
    TEST_FAILS(ctx, TD_ERR_STATE, "diverged", td_checkpoint_save_dir(t, dir, NULL, NULL, 0));
    cr_assert_eq(ckpt_test_count_prefixed(dir, "ckpt-"), 0);
    cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0);
    td_checkpoint *c = NULL;
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));
    TEST_OK(ctx, td_checkpoint_restore(c, t)); /* the good file is still the good one */
    td_checkpoint_close(c);

    /* Restoring: a file holding an infinity leaves the trainer as it was. */
    const float bad[4] = {1.0f, 2.0f, 3.0f, INFINITY};
    write_raw(path, "{" META "," ENTRY_W "}", bad, sizeof bad);
    TEST_OK(ctx, td_checkpoint_open(ctx, path, &c));
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "tensor 'w' holds inf at element 3", td_checkpoint_restore(c, t));
    td_checkpoint_close(c);
    TEST_OK(ctx, td_trainer_read_param(t, w, 1, values));
    cr_assert(memcmp(test_f32(values), good, sizeof good) == 0, "a refused restore changed w");
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(t, &p));
    cr_assert_eq(p.updates, 0u);
    td_tensor_destroy(values);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* ---- a FIFO where a checkpoint is read ---- */

/* Opening a FIFO for reading waits for a writer: a checkpoint, the newest
 * of a directory, or GPT weights in one's place are refused at once (the
 * timeout fails the test rather than hanging it where that would happen). */
Test(checkpoint_files, a_fifo_is_refused_without_waiting_for_a_writer, .timeout = 30)
{
    td_context *ctx = test_context(30000);
    td_trainer *t = linreg_trainer(ctx);
    char *dir = ckpt_test_temp_dir();
    char path[512], fifo[512];
    TEST_OK(ctx, td_checkpoint_save_dir(t, dir, NULL, path, sizeof path));
    snprintf(fifo, sizeof fifo, "%s/ckpt-00000009.safetensors", dir);
    cr_assert(ckpt_test_make_node(fifo, CKPT_TEST_FIFO));
    td_checkpoint *c = NULL;
    TEST_FAILS(ctx, TD_ERR_IO, "is a FIFO (named pipe), expected a regular file", td_checkpoint_open(ctx, fifo, &c));
    TEST_OK(ctx, td_checkpoint_open_latest(ctx, dir, &c));
    td_checkpoint_close(c);
    char restored[512];
    TEST_OK(ctx, td_checkpoint_restore_latest(t, dir, restored, sizeof restored));
    cr_assert_str_eq(restored, path);
    td_gpt_weights *w = NULL;
    TEST_FAILS(ctx, TD_ERR_IO, "is a FIFO", td_gpt_weights_read(ctx, fifo, &w));
    cr_assert_null(w);
    ckpt_test_remove_node(fifo, CKPT_TEST_FIFO);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* Options whose struct_size cannot hold their fields are a caller's
 * mistake: refused before anything is written. */
Test(checkpoint_files, options_too_small_to_hold_their_fields_are_refused)
{
    td_context *ctx = test_context(30000);
    td_trainer *t = linreg_trainer(ctx);
    char *dir = ckpt_test_temp_dir();
    td_checkpoint_options too_small;
    TEST_OK(ctx, td_checkpoint_options_init(&too_small));
    too_small.struct_size = 3;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "td_checkpoint_options.struct_size is 3, expected 0 or at least",
               td_checkpoint_save_dir(t, dir, &too_small, NULL, 0));
    cr_assert_eq(ckpt_test_count_prefixed(dir, "ckpt-"), 0);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}
