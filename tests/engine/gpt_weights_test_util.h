/* Shared by the GPT-2 weights tests: GPT-2's parameters as the tests
 * understand them (written apart from the library's table), values that
 * encode their tensor, row and column -- so a transposition, a swapped
 * tensor or a kept padding row shows -- llm.c and safetensors files
 * written by hand, the checks of what comes back, and an allocator that
 * fails on demand. */
#ifndef GPT_WEIGHTS_TEST_UTIL_H
#define GPT_WEIGHTS_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

/* ---- the model ---- */

typedef struct tiny {
    int64_t vocab, padded_vocab, context, layers, heads, width;
} tiny;

/* V=11 padded to 16, T=8, L=2, H=2, D=8: 28 tensors. */
extern const tiny tiny_model;

/* llm.c's kinds of parameter, in its file's order. */
enum { KIND_WTE, KIND_WPE, FIRST_LAYER_KIND, LAST_LAYER_KIND = 13, KIND_LNF_W, KIND_LNF_B, KINDS };

typedef struct test_param {
    char name[64];
    int kind;
    int64_t layer;
    uint32_t rank;
    int64_t dims[2]; /* tandem's [in, out] */
    bool transposed_in_llmc;
} test_param;

/* 4 + 12 layers, and tensor `index` in tandem's order. */
uint32_t param_count(const tiny *t);
void param_at(const tiny *t, uint32_t index, test_param *p);

/* Element [row, col] of tensor `index` in tandem's layout (a vector's
 * element e is [0, e]). */
typedef float (*value_fn)(uint32_t index, int64_t row, int64_t col);
/* Distinct everywhere, exact in f32, the sign alternating by tensor. */
float value_of(uint32_t index, int64_t row, int64_t col);
/* Exact in f16 and bf16 (quarters from -7.5 to 7.5), for half files. */
float small_value_of(uint32_t index, int64_t row, int64_t col);

/* Every tensor of w: names, order, find, dtype, shapes, values. */
void check_weights(td_context *ctx, const td_gpt_weights *w, const tiny *t, value_fn value);
void check_config(td_context *ctx, const td_gpt_weights *w, const tiny *t, int64_t padded_vocab);
td_gpt_weights *read_ok(td_context *ctx, const char *path);

/* "<dir>/<name>", malloc'd. */
char *join(const char *dir, const char *name);
void write_text(const char *path, const char *text);
void assert_same_bytes(const char *a, const char *b);

/* ---- llm.c's file, written the way train_gpt2.py's write_model does ---- */

typedef struct llmc_file {
    int32_t header[256];
    float pad_value;  /* wte's rows vocab .. padded_vocab-1 */
    long size_change; /* bytes cut off (< 0) or appended (> 0) */
} llmc_file;

/* The header of t, version 3; padding rows of -7 (a reader must drop them). */
void llmc_defaults(const tiny *t, llmc_file *o);
/* Kind by kind, each for every layer; matrices [out, in]; wte padded. */
void write_llmc(const char *path, const tiny *t, const llmc_file *o, value_fn value);

/* The tensors of w as names and values for td_gpt_weights_write_llmc. */
typedef struct named_tensors {
    uint32_t n;
    const char *names[64];
    const td_tensor *values[64];
} named_tensors;

void named_from(td_context *ctx, const td_gpt_weights *w, named_tensors *out);

/* ---- allocations failing ---- */

/* Allocator hooks whose allocation number fail_at (counted from count 0)
 * fails: every allocation of a read or a write in turn. */
typedef struct failing_allocator {
    size_t count, fail_at, live;
} failing_allocator;

/* A context allocating through a (reset, failing nothing yet). */
td_context *failing_context(failing_allocator *a);
/* Reads `path` with allocation 0, 1, 2, ... failing until one read gets
 * through: each failure must be TD_ERR_OUT_OF_MEMORY and leave nothing. */
void read_with_each_allocation_failing(const char *path);

/* ---- safetensors files, written by hand ---- */

typedef struct st_tensor {
    char name[96];
    char dtype[8]; /* F32, F16, BF16, I32, U8 */
    uint32_t rank;
    int64_t dims[4];
    size_t bytes;
    unsigned char *data;
} st_tensor;

typedef struct st_list {
    st_tensor t[80];
    int n;
} st_list;

/* A zeroed tensor added to the list. */
st_tensor *st_add(st_list *l, const char *name, const char *dtype, uint32_t rank, const int64_t *dims);
/* Element i, in the tensor's dtype (F32, or exact in F16 / BF16). */
void st_set(st_tensor *t, size_t i, float v);
/* Every parameter of t, [in, out] as Hugging Face's Conv1D keeps them,
 * named prefix + tandem's name, last first. */
void st_gpt(st_list *l, const tiny *t, const char *prefix, const char *dtype, value_fn value);
st_tensor *st_find(st_list *l, const char *name);
void st_remove(st_list *l, const char *name);
void st_free(st_list *l);
/* The file: the JSON header (the "__metadata__" object's text first when
 * given), padded with spaces to 8 bytes, then the tensors back to back. */
void st_write(const char *path, const st_list *l, const char *metadata);

/* Hugging Face's config.json for tiny_model. */
#define CONFIG_JSON_TINY                                                                                      \
    "{\"model_type\": \"gpt2\", \"n_head\": 2, \"n_embd\": 8, \"n_layer\": 2, \"n_positions\": 8, \"n_ctx\": 8, " \
    "\"vocab_size\": 11}"

#endif
