/* GPT-2 weights from safetensors files (td_gpt_weights_read): Hugging
 * Face's files (with and without "transformer.", the causal-mask
 * buffers, the tied head, F16 and BF16), a tandem checkpoint with its
 * optimizer state, heads from config.json or the metadata, every refusal,
 * the way on to llm.c's file. Files are written here by hand
 * (gpt_weights_test_util.h). Built with checkpoints (Jansson) only. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "engine_test_util.h"
#include "gpt_weights_test_util.h"

Test(gpt_weights, hugging_face_file_is_read_as_it_is)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    write_text(config, CONFIG_JSON_TINY);
    st_list l = {0};
    st_gpt(&l, &tiny_model, "", "F32", value_of);
    st_write(path, &l, "{\"format\":\"pt\"}");
    td_gpt_weights *w = read_ok(ctx, path);
    check_config(ctx, w, &tiny_model, 0);
    check_weights(ctx, w, &tiny_model, value_of);
    td_gpt_weights_destroy(w);
    /* The directory reads the same. */
    w = read_ok(ctx, dir);
    check_weights(ctx, w, &tiny_model, value_of);
    td_gpt_weights_destroy(w);
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* GPT2LMHeadModel's keys as some files keep them: "transformer." before
 * each, the causal-mask buffers, and the tied head. */
static void st_gpt_with_extras(st_list *l, const tiny *t)
{
    st_gpt(l, t, "transformer.", "F32", value_of);
    for (int64_t layer = 0; layer < t->layers; layer++) {
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%lld.attn.bias", (long long)layer);
        /* Older files keep the mask as floats, some as bytes. */
        const bool bytes = layer % 2 == 1;
        st_tensor *mask = st_add(l, name, bytes ? "U8" : "F32", 4, (int64_t[]){1, 1, t->context, t->context});
        for (int64_t i = 0; i < t->context; i++)
            for (int64_t j = 0; j <= i; j++) {
                if (bytes)
                    mask->data[i * t->context + j] = 1;
                else
                    st_set(mask, (size_t)(i * t->context + j), 1.0f);
            }
        snprintf(name, sizeof name, "transformer.h.%lld.attn.masked_bias", (long long)layer);
        st_set(st_add(l, name, "F32", 0, NULL), 0, -1e4f);
    }
    st_tensor *head = st_add(l, "lm_head.weight", "F32", 2, (int64_t[]){t->vocab, t->width});
    memcpy(head->data, st_find(l, "transformer.wte.weight")->data, head->bytes);
}

Test(gpt_weights, hugging_face_prefix_buffers_and_tied_head_are_understood)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    write_text(config, CONFIG_JSON_TINY);
    st_list l = {0};
    st_gpt_with_extras(&l, &tiny_model);
    st_write(path, &l, NULL);
    td_gpt_weights *w = read_ok(ctx, path);
    check_config(ctx, w, &tiny_model, 0);
    check_weights(ctx, w, &tiny_model, value_of);
    td_gpt_weights_destroy(w);

    /* An untied head is refused: tandem's GPT-2 would compute another model. */
    st_set(st_find(&l, "lm_head.weight"), 2 * 8 + 3, 0.5f);
    st_write(path, &l, NULL);
    TEST_FAILS(ctx, TD_ERR_UNSUPPORTED, "'lm_head.weight' differs from wte.weight at [2, 3] (0.5, not 131)",
               td_gpt_weights_read(ctx, path, &w));
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, tandem_checkpoint_is_read_without_its_optimizer_state)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "ckpt-00000100.safetensors");
    char *config = join(dir, "config.json");
    write_text(config, CONFIG_JSON_TINY);
    st_list l = {0};
    st_gpt(&l, &tiny_model, "", "F32", value_of);
    const int n = l.n;
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "opt/mu/%s", l.t[i].name);
        st_tensor *mu = st_add(&l, name, "F32", l.t[i].rank, l.t[i].dims);
        for (size_t e = 0; e < mu->bytes / 4; e++)
            st_set(mu, e, 99.0f);
    }
    st_write(path, &l, "{\"tandem.format\":\"1\",\"tandem.optimizer\":\"adamw\",\"tandem.updates\":\"100\"}");
    td_gpt_weights *w = read_ok(ctx, path);
    check_config(ctx, w, &tiny_model, 0);
    check_weights(ctx, w, &tiny_model, value_of);
    td_gpt_weights_destroy(w);
    /* Without config.json, the heads its caller kept in the metadata. */
    unlink(config);
    st_write(path, &l, "{\"tandem.format\":\"1\",\"n_head\":\"4\"}");
    w = read_ok(ctx, path);
    tiny four = tiny_model;
    four.heads = 4;
    check_config(ctx, w, &four, 0);
    td_gpt_weights_destroy(w);
    static const char *const bad[] = {"{\"n_head\":\"3\"}", "{\"n_head\":\"four\"}", "{\"n_head\":\"0\"}",
                                      "{\"n_head\":\"\"}", "{\"n_head\":\"99999999999\"}"};
    static const char *const needles[] = {"heads 3 do not divide width 8", "metadata \"n_head\" is 'four'",
                                          "metadata \"n_head\" is '0'", "metadata \"n_head\" is ''",
                                          "metadata \"n_head\" is '99999999999'"};
    for (int i = 0; i < 5; i++) {
        st_write(path, &l, bad[i]);
        TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, needles[i], td_gpt_weights_read(ctx, path, &w));
    }
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, half_precision_is_widened_exactly)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    write_text(config, CONFIG_JSON_TINY);
    const char *const dtypes[] = {"F16", "BF16"};
    for (int d = 0; d < 2; d++) {
        st_list l = {0};
        st_gpt(&l, &tiny_model, "", dtypes[d], small_value_of);
        st_write(path, &l, NULL);
        td_gpt_weights *w = read_ok(ctx, path);
        check_weights(ctx, w, &tiny_model, small_value_of);
        td_gpt_weights_destroy(w);
        st_free(&l);
    }
    /* f16's edges: subnormals, signed zero, infinities, the largest. */
    st_list l = {0};
    st_gpt(&l, &tiny_model, "", "F16", small_value_of);
    static const uint16_t halves[8] = {0x0001, 0x03ff, 0x8000, 0x7c00, 0xfc00, 0x7bff, 0x0400, 0xc000};
    const float expected[8] = {ldexpf(1.0f, -24), ldexpf(1023.0f, -24), -0.0f, INFINITY, -INFINITY, 65504.0f,
                               ldexpf(1.0f, -14), -2.0f};
    st_tensor *bias = st_find(&l, "ln_f.bias");
    for (int i = 0; i < 8; i++) {
        bias->data[2 * i] = (unsigned char)halves[i];
        bias->data[2 * i + 1] = (unsigned char)(halves[i] >> 8);
    }
    st_write(path, &l, NULL);
    td_gpt_weights *w = read_ok(ctx, path);
    const td_tensor *v;
    TEST_OK(ctx, td_gpt_weights_find(w, "ln_f.bias", &v));
    for (int i = 0; i < 8; i++)
        cr_assert(memcmp(&test_f32(v)[i], &expected[i], 4) == 0, "half %#06x read as %g, expected %g", halves[i],
                  (double)test_f32(v)[i], (double)expected[i]);
    td_gpt_weights_destroy(w);
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, heads_come_from_config_json_or_the_width)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    st_list l = {0};
    st_gpt(&l, &tiny_model, "", "F32", value_of);
    st_write(path, &l, NULL);
    td_gpt_weights *w;
    /* No config.json and a width of 8: the heads cannot be told. */
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "cannot tell the number of heads", td_gpt_weights_read(ctx, path, &w));
    write_text(config, "{\"n_head\": 4}");
    w = read_ok(ctx, path);
    tiny four = tiny_model;
    four.heads = 4;
    check_config(ctx, w, &four, 0);
    td_gpt_weights_destroy(w);
    static const struct {
        const char *json;
        const char *needle;
    } bad[] = {
        {"{\"n_head\": 3}", "\"n_head\" is 3, which does not divide the width 8"},
        {"{\"n_head\": 0}", "\"n_head\" is not an integer >= 1"},
        {"{\"n_head\": \"2\"}", "\"n_head\" is not an integer >= 1"},
        {"{\"n_head\": 2, \"n_embd\": 16}", "\"n_embd\" is 16, but the weights' shapes give width 8"},
        {"{\"n_head\": 2, \"n_layer\": 3}", "\"n_layer\" is 3, but the weights' shapes give layers 2"},
        {"{\"n_head\": 2, \"n_positions\": 1024}", "\"n_positions\" is 1024"},
        {"{\"n_head\": 2, \"vocab_size\": 50257}", "\"vocab_size\" is 50257"},
        {"{\"n_head\": 2,", "not valid JSON"},
        {"[2]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(config, bad[i].json);
        TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, bad[i].needle, td_gpt_weights_read(ctx, path, &w));
        TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "config.json", td_gpt_weights_read(ctx, path, &w));
    }
    st_free(&l);
    /* Width 64 and no config.json: one head of GPT-2's 64. */
    unlink(config);
    const tiny wide = {3, 0, 2, 1, 1, 64};
    st_gpt(&l, &wide, "", "F32", value_of);
    st_write(path, &l, NULL);
    w = read_ok(ctx, path);
    check_config(ctx, w, &wide, 0);
    check_weights(ctx, w, &wide, value_of);
    td_gpt_weights_destroy(w);
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

/* A change to a good file, and how it must be refused. */
typedef enum st_change {
    DROP,          /* remove tensor `name` */
    RESHAPE,       /* give `name` the shape dims (same bytes count not needed) */
    ADD_F32,       /* add an F32 tensor `name` of shape dims */
    RETYPE_I32,    /* make `name` I32 (same size) */
    TRUNCATE_DATA, /* cut the file's last 4 bytes */
} st_change;

typedef struct st_refusal {
    st_change change;
    const char *name;
    uint32_t rank;
    int64_t dims[4];
    td_status status;
    const char *needle;
} st_refusal;

Test(gpt_weights, safetensors_refusals_name_the_tensor)
{
    static const st_refusal cases[] = {
        {DROP, "h.1.mlp.c_fc.bias", 0, {0}, TD_ERR_CORRUPT_DATA, "no tensor 'h.1.mlp.c_fc.bias'"},
        {DROP, "wte.weight", 0, {0}, TD_ERR_CORRUPT_DATA, "no tensor 'wte.weight'"},
        {DROP, "ln_f.bias", 0, {0}, TD_ERR_CORRUPT_DATA, "no tensor 'ln_f.bias'"},
        {RESHAPE, "h.0.attn.c_attn.weight", 2, {24, 8}, TD_ERR_CORRUPT_DATA,
         "tensor 'h.0.attn.c_attn.weight' has shape [24, 8], expected [8, 24]"},
        {RESHAPE, "h.1.mlp.c_fc.bias", 2, {1, 32}, TD_ERR_CORRUPT_DATA, "has shape [1, 32], expected [32]"},
        {RESHAPE, "wpe.weight", 2, {4, 16}, TD_ERR_CORRUPT_DATA, "'wpe.weight' has shape [4, 16], expected [4, 8]"},
        {RESHAPE, "wte.weight", 1, {88}, TD_ERR_CORRUPT_DATA, "expected [vocab, width]"},
        {ADD_F32, "h.3.ln_1.weight", 1, {8}, TD_ERR_CORRUPT_DATA, "no tensor 'h.2.ln_1.weight'"},
        {ADD_F32, "score.weight", 2, {8, 2}, TD_ERR_CORRUPT_DATA,
         "'score.weight' is not a parameter of a 2-layer GPT-2"},
        {ADD_F32, "h.5.attn.bias", 1, {8}, TD_ERR_CORRUPT_DATA, "'h.5.attn.bias' is not a parameter"},
        {ADD_F32, "transformer.ln_f.weight", 1, {8}, TD_ERR_CORRUPT_DATA,
         "both 'ln_f.weight' and 'transformer.ln_f.weight'"},
        {ADD_F32, "lm_head.weight", 2, {8, 11}, TD_ERR_CORRUPT_DATA, "'lm_head.weight' has shape [8, 11]"},
        {RETYPE_I32, "h.0.ln_2.bias", 0, {0}, TD_ERR_UNSUPPORTED, "'h.0.ln_2.bias' is I32"},
        {TRUNCATE_DATA, NULL, 0, {0}, TD_ERR_CORRUPT_DATA, "data_offsets"},
    };
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    write_text(config, "{\"n_head\": 2}");
    const tiny short_context = {11, 0, 4, 2, 2, 8};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const st_refusal *c = &cases[i];
        st_list l = {0};
        st_gpt(&l, &short_context, "", "F32", value_of);
        if (c->change == DROP)
            st_remove(&l, c->name);
        else if (c->change == RESHAPE) {
            st_tensor *t = st_find(&l, c->name);
            t->rank = c->rank;
            memcpy(t->dims, c->dims, sizeof t->dims);
            size_t count = 1;
            for (uint32_t d = 0; d < c->rank; d++)
                count *= (size_t)c->dims[d];
            t->bytes = 4 * count;
            t->data = realloc(t->data, t->bytes);
            memset(t->data, 0, t->bytes);
        } else if (c->change == ADD_F32)
            st_add(&l, c->name, "F32", c->rank, c->dims);
        else if (c->change == RETYPE_I32)
            snprintf(st_find(&l, c->name)->dtype, 8, "I32");
        st_write(path, &l, NULL);
        if (c->change == TRUNCATE_DATA) {
            struct stat st;
            cr_assert_eq(stat(path, &st), 0);
            cr_assert_eq(truncate(path, st.st_size - 4), 0);
        }
        td_gpt_weights *w = (td_gpt_weights *)&l;
        TEST_FAILS(ctx, c->status, c->needle, td_gpt_weights_read(ctx, path, &w));
        cr_assert_null(w, "case %zu", i);
        st_free(&l);
    }
    /* A file of another model altogether. */
    st_list l = {0};
    st_add(&l, "model.embed_tokens.weight", "F32", 2, (int64_t[]){4, 8});
    st_write(path, &l, NULL);
    td_gpt_weights *w;
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "no tensor 'wte.weight' (nor 'transformer.wte.weight'): not GPT-2",
               td_gpt_weights_read(ctx, path, &w));
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, hugging_face_to_llmc_and_back)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json"),
         *bin = join(dir, "gpt2.bin"), *expected = join(dir, "expected.bin");
    write_text(config, CONFIG_JSON_TINY);
    st_list l = {0};
    st_gpt_with_extras(&l, &tiny_model);
    st_write(path, &l, NULL);
    td_gpt_weights *w = read_ok(ctx, path);
    td_gpt_config c = {.struct_size = sizeof(td_gpt_config)};
    TEST_OK(ctx, td_gpt_weights_config(w, &c));
    named_tensors nt;
    named_from(ctx, w, &nt);
    TEST_OK(ctx, td_gpt_weights_write_llmc(ctx, bin, &c, nt.n, nt.names, nt.values));
    /* What llm.c's export writes for this model: vocabulary padded to 128. */
    tiny padded = tiny_model;
    padded.padded_vocab = 128;
    llmc_file o;
    llmc_defaults(&padded, &o);
    o.pad_value = 0.0f;
    write_llmc(expected, &padded, &o, value_of);
    assert_same_bytes(bin, expected);
    td_gpt_weights *back = read_ok(ctx, bin);
    check_config(ctx, back, &padded, 128);
    check_weights(ctx, back, &tiny_model, value_of);
    td_gpt_weights_destroy(back);
    td_gpt_weights_destroy(w);
    st_free(&l);
    free(path);
    free(config);
    free(bin);
    free(expected);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, each_allocation_failing_undoes_a_safetensors_read)
{
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    write_text(config, CONFIG_JSON_TINY);
    st_list l = {0};
    st_gpt_with_extras(&l, &tiny_model);
    st_write(path, &l, NULL);
    read_with_each_allocation_failing(path);
    st_free(&l);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
}

Test(gpt_weights, refused_safetensors_leave_nothing_allocated)
{
    test_alloc_counter counter;
    td_context *ctx = test_counting_context(&counter, 0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors"), *config = join(dir, "config.json");
    write_text(config, CONFIG_JSON_TINY);
    st_list l = {0};
    st_gpt_with_extras(&l, &tiny_model);
    st_set(st_find(&l, "lm_head.weight"), 87, 1.5f); /* refused after every tensor was read */
    st_write(path, &l, NULL);
    const size_t live = counter.live;
    td_gpt_weights *w;
    TEST_FAILS(ctx, TD_ERR_UNSUPPORTED, "not tied", td_gpt_weights_read(ctx, path, &w));
    cr_assert_eq(counter.live, live, "a refused read left %zu blocks", counter.live - live);
    st_free(&l);
    td_context_destroy(ctx);
    cr_assert_eq(counter.live, 0);
    free(path);
    free(config);
    ckpt_test_remove_dir(dir);
}

