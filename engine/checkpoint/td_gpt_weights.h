/* GPT-2 weights (tandem/models.h) inside engine/checkpoint: the one list of
 * parameters that every reader and the llm.c writer walk, so none of them
 * can disagree on a name, a shape or a position in llm.c's file; and the
 * container the readers fill. */
#ifndef TD_GPT_WEIGHTS_H
#define TD_GPT_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/models.h"
#include "td_context_internal.h"

/* The kinds of parameter, in the order of llm.c's ParameterTensors (the
 * order of its file). Within a layer, tandem's order is the same: kinds
 * TD_GPT_LN1_W .. TD_GPT_FC_PROJ_B, one layer after the other. */
typedef enum td_gpt_kind {
    TD_GPT_WTE,
    TD_GPT_WPE,
    TD_GPT_LN1_W,
    TD_GPT_LN1_B,
    TD_GPT_QKV_W,
    TD_GPT_QKV_B,
    TD_GPT_ATTN_PROJ_W,
    TD_GPT_ATTN_PROJ_B,
    TD_GPT_LN2_W,
    TD_GPT_LN2_B,
    TD_GPT_FC_W,
    TD_GPT_FC_B,
    TD_GPT_FC_PROJ_W,
    TD_GPT_FC_PROJ_B,
    TD_GPT_LNF_W,
    TD_GPT_LNF_B,
    TD_GPT_KINDS
} td_gpt_kind;

/* Kinds per layer (LN1_W .. FC_PROJ_B). */
#define TD_GPT_LAYER_KINDS 12

/* "h." + a 10-digit layer + ".attn.c_attn.weight", with room. */
#define TD_GPT_NAME_CAP 48

typedef struct td_gpt_param {
    td_gpt_kind kind;
    int64_t layer; /* -1 for the four outside the layers */
    char name[TD_GPT_NAME_CAP];
    uint32_t rank;
    int64_t dims[2]; /* tandem's shape: matrices [in, out] */
    /* llm.c stores this matrix [out, in] (nn.Linear's layout). */
    bool llmc_transposed;
} td_gpt_param;

/* 4 + 12 * layers (td_gpt_config_problem bounds layers so it fits). */
uint32_t td_gpt_param_count(const td_gpt_config *config);
/* Parameter `index` (< td_gpt_param_count) of a GPT-2 of `config`. */
void td_gpt_param_at(const td_gpt_config *config, uint32_t index, td_gpt_param *out);
/* The index of the parameter called `name` for `config`; false when no
 * parameter of it has that name (another name, a layer past the last, a
 * layer number written with a leading zero). */
bool td_gpt_param_index(const td_gpt_config *config, const char *name, uint32_t *index);
/* True when `name` is "h.<layer>.<rest>" (layer in decimal, no leading
 * zero, below 2^31); *rest points into name. */
bool td_gpt_layer_name(const char *name, int64_t *layer, const char **rest);
/* True when `rest` is the part after "h.<l>." of a layer's parameter. */
bool td_gpt_is_layer_param(const char *rest);

/* What is wrong with `config`, written to buf, or false when nothing:
 * every size from 1 to 2^31-1 (llm.c's header holds int32s), heads
 * dividing width, padded_vocab 0 or from vocab to 2^31-1, layers few
 * enough that the tensors can be counted in 32 bits, no tensor of more
 * than 2^58 elements. */
bool td_gpt_config_problem(const td_gpt_config *config, char *buf, size_t size);

/* "[11, 8]" */
void td_gpt_format_shape(uint32_t rank, const int64_t *dims, char *buf, size_t size);

/* llm.c's file: a header of 256 little-endian int32, then the f32 values. */
#define TD_LLMC_MAGIC 20240326
#define TD_LLMC_VERSION_F32 3  /* float32, padded vocabulary */
#define TD_LLMC_VERSION_BF16 5 /* bfloat16, padded vocabulary */
#define TD_LLMC_HEADER_BYTES 1024
/* The header's int32 slots that tandem reads; the rest are zero. */
enum {
    TD_LLMC_SLOT_MAGIC = 0,
    TD_LLMC_SLOT_VERSION = 1,
    TD_LLMC_SLOT_CONTEXT = 2,
    TD_LLMC_SLOT_VOCAB = 3,
    TD_LLMC_SLOT_LAYERS = 4,
    TD_LLMC_SLOT_HEADS = 5,
    TD_LLMC_SLOT_WIDTH = 6,
    TD_LLMC_SLOT_PADDED_VOCAB = 7,
};
/* The byte offset in llm.c's file of `param`'s values (padded_vocab must
 * be set), and of the whole file's end (*end). False when a sum passes
 * 2^63 (a header's sizes no file can hold). */
bool td_llmc_offset(const td_gpt_config *config, const td_gpt_param *param, uint64_t *offset);
bool td_llmc_file_bytes(const td_gpt_config *config, uint64_t *bytes);

/* ---- the container ---- */

struct td_gpt_weights {
    td_owned owned;
    td_context *ctx;
    td_gpt_config config;
    uint32_t count;
    td_gpt_param *params; /* count, in tandem's order */
    td_tensor **tensors;  /* count, each f32 of its parameter's shape */
};

/* A container for a GPT-2 of `config` (already checked), every tensor
 * created zero-filled, owned by ctx. The readers fill the tensors; on a
 * failure they td_gpt_weights_destroy it, so nothing stays allocated. */
td_status td_gpt_weights_create(td_context *ctx, const td_gpt_config *config, td_gpt_weights **out);
/* The values of tensor `index`. */
float *td_gpt_weights_values(td_gpt_weights *weights, uint32_t index);

/* The readers td_gpt_weights_read dispatches to, once it has told the
 * format. `fd` is the file, open for reading, of `size` bytes; it stays
 * the caller's. */
td_status td_gpt_weights_read_llmc(td_context *ctx, const char *path, int fd, uint64_t size, td_gpt_weights **out);
/* Answers TD_ERR_UNSUPPORTED in a build without Jansson. */
td_status td_gpt_weights_read_safetensors(td_context *ctx, const char *path, td_gpt_weights **out);

#endif
