/* GPT-2 weights in and out (td_gpt_weights_*), llm.c's side: checkpoints
 * written here by hand -- with the tests' own idea of llm.c's layout, not
 * the library's -- read back tensor by tensor (transposed, padding rows
 * dropped); llm.c's file written and compared byte for byte; every
 * refusal; the accessors; nothing left allocated, even when an allocation
 * fails half way. Needs no Jansson: built in every configuration, where
 * safetensors files must then be refused by name (TD_TEST_SAFETENSORS 0);
 * test_gpt_weights_safetensors.c has the rest. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_test_util.h"
#include "engine_test_util.h"
#include "gpt_weights_test_util.h"

#ifndef TD_TEST_SAFETENSORS
#  define TD_TEST_SAFETENSORS 0
#endif

Test(gpt_weights, llmc_file_is_read_transposed_without_its_padding_rows)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "gpt2_tiny.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(path, &tiny_model, &o, value_of);
    td_gpt_weights *w = read_ok(ctx, path);
    check_config(ctx, w, &tiny_model, 16);
    check_weights(ctx, w, &tiny_model, value_of);
    td_gpt_weights_destroy(w);
    free(path);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, llmc_write_is_llmcs_layout_byte_for_byte)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *in = join(dir, "in.bin"), *out = join(dir, "out.bin"),
         *expected = join(dir, "expected.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(in, &tiny_model, &o, value_of);
    o.pad_value = 0.0f; /* what a writer pads with */
    write_llmc(expected, &tiny_model, &o, value_of);
    td_gpt_weights *w = read_ok(ctx, in);
    td_gpt_config c = {.struct_size = sizeof(td_gpt_config)};
    TEST_OK(ctx, td_gpt_weights_config(w, &c));
    named_tensors nt;
    named_from(ctx, w, &nt);
    /* In another order than the reader's: the writer goes by name. */
    for (uint32_t i = 0; i < nt.n / 2; i++) {
        const char *name = nt.names[i];
        const td_tensor *v = nt.values[i];
        nt.names[i] = nt.names[nt.n - 1 - i], nt.values[i] = nt.values[nt.n - 1 - i];
        nt.names[nt.n - 1 - i] = name, nt.values[nt.n - 1 - i] = v;
    }
    TEST_OK(ctx, td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    assert_same_bytes(out, expected);
    /* Replacing a file: the new one, no temporary left. */
    TEST_OK(ctx, td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    assert_same_bytes(out, expected);
    cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0);
    td_gpt_weights *again = read_ok(ctx, out);
    check_config(ctx, again, &tiny_model, 16);
    check_weights(ctx, again, &tiny_model, value_of);
    td_gpt_weights_destroy(again);
    td_gpt_weights_destroy(w);
    free(in);
    free(out);
    free(expected);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, llmc_write_pads_the_vocabulary_to_128_by_default)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *in = join(dir, "in.bin"), *out = join(dir, "out.bin"),
         *expected = join(dir, "expected.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(in, &tiny_model, &o, value_of);
    td_gpt_weights *w = read_ok(ctx, in);
    td_gpt_config c = {.struct_size = sizeof(td_gpt_config)};
    TEST_OK(ctx, td_gpt_weights_config(w, &c));
    c.padded_vocab = 0;
    named_tensors nt;
    named_from(ctx, w, &nt);
    TEST_OK(ctx, td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    tiny padded = tiny_model;
    padded.padded_vocab = 128;
    llmc_defaults(&padded, &o);
    o.pad_value = 0.0f;
    write_llmc(expected, &padded, &o, value_of);
    assert_same_bytes(out, expected);
    td_gpt_weights_destroy(w);
    free(in);
    free(out);
    free(expected);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

typedef struct llmc_refusal {
    int slot;      /* header slot to change, or -1 */
    int32_t value; /* its value */
    int slot2;     /* and another, or 0 */
    int32_t value2;
    long size_change;
    td_status status;
    const char *needle;
} llmc_refusal;

Test(gpt_weights, llmc_refusals_name_the_problem)
{
    static const llmc_refusal cases[] = {
        {1, 5, 0, 0, 0, TD_ERR_UNSUPPORTED, "version 5 (bfloat16"},
        {1, 4, 0, 0, 0, TD_ERR_UNSUPPORTED, "version 4"},
        {0, 20240327, 0, 0, 0, TD_ERR_CORRUPT_DATA, "neither llm.c's checkpoint"},
        {-1, 0, 0, 0, -4, TD_ERR_CORRUPT_DATA, "(truncated?)"},
        {-1, 0, 0, 0, 4, TD_ERR_CORRUPT_DATA, "bytes after the parameters"},
        {-1, 0, 0, 0, -(long)(4 * 1000), TD_ERR_CORRUPT_DATA, "truncated"},
        {5, 3, 0, 0, 0, TD_ERR_CORRUPT_DATA, "heads 3 do not divide width 8"},
        {4, 0, 0, 0, 0, TD_ERR_CORRUPT_DATA, "num_layers"},
        {6, -8, 0, 0, 0, TD_ERR_CORRUPT_DATA, "channels"},
        {7, 10, 0, 0, 0, TD_ERR_CORRUPT_DATA, "padded_vocab is 10"},
        /* A header that claims more layers than the file holds. */
        {4, 3, 0, 0, 0, TD_ERR_CORRUPT_DATA, "3 layers"},
        {2, INT32_MAX, 0, 0, 0, TD_ERR_CORRUPT_DATA, "context 2147483647"},
        /* Sizes whose file would pass 2^63 bytes. */
        {6, 1 << 28, 4, 300000000, 0, TD_ERR_CORRUPT_DATA, "needs more than 2^63 bytes"},
        /* A tensor of more than 2^58 elements. */
        {6, 1 << 30, 0, 0, 0, TD_ERR_CORRUPT_DATA, "more than 2^58 elements"},
    };
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "bad.bin");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llmc_file o;
        llmc_defaults(&tiny_model, &o);
        if (cases[i].slot >= 0)
            o.header[cases[i].slot] = cases[i].value;
        if (cases[i].slot2 > 0)
            o.header[cases[i].slot2] = cases[i].value2;
        o.size_change = cases[i].size_change;
        write_llmc(path, &tiny_model, &o, value_of);
        td_gpt_weights *w = (td_gpt_weights *)&o; /* cleared by a refusal */
        TEST_FAILS(ctx, cases[i].status, cases[i].needle, td_gpt_weights_read(ctx, path, &w));
        cr_assert_null(w, "case %zu", i);
    }
    /* Shorter than the header, and empty. */
    FILE *f = fopen(path, "wb");
    const int32_t magic = 20240326;
    fwrite(&magic, 4, 1, f);
    fclose(f);
    td_gpt_weights *w;
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "fewer than llm.c's 1024-byte header", td_gpt_weights_read(ctx, path, &w));
    write_text(path, "");
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "neither", td_gpt_weights_read(ctx, path, &w));
    char *missing = join(dir, "missing.bin");
    TEST_FAILS(ctx, TD_ERR_IO, "missing.bin", td_gpt_weights_read(ctx, missing, &w));
    /* A directory is read as its model.safetensors. */
    TEST_FAILS(ctx, TD_ERR_IO, "model.safetensors", td_gpt_weights_read(ctx, dir, &w));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_gpt_weights_read(ctx, NULL, &w));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_gpt_weights_read(ctx, path, NULL));
    cr_assert_eq(td_gpt_weights_read(NULL, path, &w), TD_ERR_INVALID_ARGUMENT);
    free(missing);
    free(path);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, writer_refusals_name_the_tensor_and_leave_no_file)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *in = join(dir, "in.bin"), *out = join(dir, "out.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(in, &tiny_model, &o, value_of);
    td_gpt_weights *w = read_ok(ctx, in);
    td_gpt_config c = {.struct_size = sizeof(td_gpt_config)};
    TEST_OK(ctx, td_gpt_weights_config(w, &c));
    named_tensors nt;
    named_from(ctx, w, &nt);
    const char *fn = "td_gpt_weights_write_llmc";
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'h.1.mlp.c_proj.bias' is missing",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n - 3, nt.names, nt.values));

    const char *saved_name = nt.names[5];
    nt.names[5] = "h.0.attn.c_attn.weights";
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'h.0.attn.c_attn.weights' is not a parameter",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.names[5] = "h.2.ln_1.weight"; /* a layer past the last */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "not a parameter of a 2-layer GPT-2",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.names[5] = "transformer.h.0.attn.c_attn.bias";
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "without \"transformer.\"",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.names[5] = nt.names[4];
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "given twice (names[4] and names[5])",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.names[5] = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "names[5] is NULL",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.names[5] = saved_name;

    /* c_attn's weight given as llm.c keeps it, [3D, D]. */
    const td_tensor *saved = nt.values[4];
    td_tensor *transposed = test_tensor(ctx, TD_F32, 2, (int64_t[]){24, 8});
    nt.values[4] = transposed;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'h.0.attn.c_attn.weight' has shape [24, 8], expected [8, 24]",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    td_tensor *ints = test_tensor(ctx, TD_I32, 2, (int64_t[]){8, 24});
    nt.values[4] = ints;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "is i32, expected f32",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.values[4] = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "values[4] is NULL",
               td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values));
    nt.values[4] = saved;

    td_gpt_config bad = c;
    bad.heads = 3;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "heads 3 do not divide width 8",
               td_gpt_weights_write_llmc(ctx, out, &bad, nt.n, nt.names, nt.values));
    bad = c;
    bad.padded_vocab = 10;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "padded_vocab is 10",
               td_gpt_weights_write_llmc(ctx, out, &bad, nt.n, nt.names, nt.values));
    bad = c;
    bad.context = (int64_t)INT32_MAX + 1;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "context is 2147483648",
               td_gpt_weights_write_llmc(ctx, out, &bad, nt.n, nt.names, nt.values));
    bad = c;
    bad.width = 16; /* the tensors are of width 8 */
    bad.heads = 2;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'wte.weight' has shape [11, 8], expected [11, 16]",
               td_gpt_weights_write_llmc(ctx, out, &bad, nt.n, nt.names, nt.values));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, fn, td_gpt_weights_write_llmc(ctx, NULL, &c, nt.n, nt.names, nt.values));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, fn, td_gpt_weights_write_llmc(ctx, out, NULL, nt.n, nt.names, nt.values));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, fn, td_gpt_weights_write_llmc(ctx, out, &c, nt.n, NULL, nt.values));
    cr_assert_eq(td_gpt_weights_write_llmc(NULL, out, &c, nt.n, nt.names, nt.values), TD_ERR_INVALID_ARGUMENT);
    /* A directory at the path is not replaced. */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "a directory",
               td_gpt_weights_write_llmc(ctx, dir, &c, nt.n, nt.names, nt.values));
    cr_assert(!ckpt_test_file_exists(out), "a refused write left %s", out);
    cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0);
    td_tensor_destroy(transposed);
    td_tensor_destroy(ints);
    td_gpt_weights_destroy(w);
    free(in);
    free(out);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, accessors_refuse_what_is_not_there)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "w.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(path, &tiny_model, &o, value_of);
    td_gpt_weights *w = read_ok(ctx, path);
    const td_tensor *v = (const td_tensor *)w;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "no tensor 'h.2.ln_1.weight'",
               td_gpt_weights_find(w, "h.2.ln_1.weight", &v));
    cr_assert_null(v);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "no tensor", td_gpt_weights_find(w, "h.00.ln_1.weight", &v));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "no tensor", td_gpt_weights_find(w, "transformer.wte.weight", &v));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_gpt_weights_find(w, NULL, &v));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "index 28, the weights have 28 tensors",
               td_gpt_weights_get(w, 28, NULL, &v));
    TEST_OK(ctx, td_gpt_weights_get(w, 27, NULL, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_gpt_weights_config(w, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_gpt_weights_count(w, NULL));
    cr_assert_eq(td_gpt_weights_count(NULL, &(uint32_t){0}), TD_ERR_INVALID_ARGUMENT);
    td_gpt_weights_destroy(w);
    td_gpt_weights_destroy(NULL);
    free(path);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

Test(gpt_weights, nothing_stays_allocated)
{
    test_alloc_counter counter;
    td_context *ctx = test_counting_context(&counter, 0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "w.bin"), *bad = join(dir, "bad.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(path, &tiny_model, &o, value_of);
    o.size_change = -4;
    write_llmc(bad, &tiny_model, &o, value_of);
    const size_t live = counter.live;
    td_gpt_weights *w;
    TEST_FAILS(ctx, TD_ERR_CORRUPT_DATA, "truncated", td_gpt_weights_read(ctx, bad, &w));
    cr_assert_eq(counter.live, live, "a refused read left %zu blocks", counter.live - live);
    w = read_ok(ctx, path);
    td_gpt_weights_destroy(w);
    cr_assert_eq(counter.live, live, "destroy left %zu blocks", counter.live - live);
    w = read_ok(ctx, path); /* left to the context */
    td_context_destroy(ctx);
    cr_assert_eq(counter.live, 0, "%zu blocks outlive the context", counter.live);
    free(path);
    free(bad);
    ckpt_test_remove_dir(dir);
}

Test(gpt_weights, weights_outlive_a_keep_handles_context_only_for_their_destroy)
{
    td_context_options co;
    td_context_options_init(&co);
    co.keep_handles = true;
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(&co, &ctx), TD_OK);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "w.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(path, &tiny_model, &o, value_of);
    td_gpt_weights *w = read_ok(ctx, path);
    td_context_destroy(ctx);
    uint32_t count = 0;
    cr_assert_eq(td_gpt_weights_count(w, &count), TD_ERR_STATE);
    td_gpt_weights_destroy(w); /* frees what remains of the context */
    free(path);
    ckpt_test_remove_dir(dir);
}

Test(gpt_weights, each_allocation_failing_undoes_the_whole_read_or_write)
{
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "w.bin"), *out = join(dir, "out.bin");
    llmc_file o;
    llmc_defaults(&tiny_model, &o);
    write_llmc(path, &tiny_model, &o, value_of);
    read_with_each_allocation_failing(path);

    failing_allocator a;
    td_context *ctx = failing_context(&a);
    td_gpt_weights *w = read_ok(ctx, path);
    td_gpt_config c = {.struct_size = sizeof(td_gpt_config)};
    TEST_OK(ctx, td_gpt_weights_config(w, &c));
    named_tensors nt;
    named_from(ctx, w, &nt);
    for (size_t k = 0;; k++) {
        cr_assert_lt(k, 1000u);
        const size_t live = a.live;
        a.count = 0;
        a.fail_at = k;
        const td_status s = td_gpt_weights_write_llmc(ctx, out, &c, nt.n, nt.names, nt.values);
        a.fail_at = SIZE_MAX;
        if (s == TD_OK)
            break;
        cr_assert_eq(s, TD_ERR_OUT_OF_MEMORY, "allocation %zu failing: %s (%s)", k, td_status_name(s),
                     td_last_error(ctx));
        cr_assert_eq(a.live, live, "allocation %zu failing left %zu blocks", k, a.live - live);
        cr_assert(!ckpt_test_file_exists(out));
        cr_assert_eq(ckpt_test_count_prefixed(dir, ".tmp-"), 0);
    }
    td_gpt_weights_destroy(w);
    td_context_destroy(ctx);
    cr_assert_eq(a.live, 0u);
    free(path);
    free(out);
    ckpt_test_remove_dir(dir);
}

#if !TD_TEST_SAFETENSORS

Test(gpt_weights, safetensors_needs_a_build_with_checkpoints)
{
    td_context *ctx = test_context(0);
    char *dir = ckpt_test_temp_dir(), *path = join(dir, "model.safetensors");
    st_list l = {0};
    st_gpt(&l, &tiny_model, "", "F32", value_of);
    st_write(path, &l, NULL);
    td_gpt_weights *w;
    TEST_FAILS(ctx, TD_ERR_UNSUPPORTED, "built without checkpoints", td_gpt_weights_read(ctx, path, &w));
    cr_assert_null(w);
    st_free(&l);
    free(path);
    ckpt_test_remove_dir(dir);
    td_context_destroy(ctx);
}

#endif
