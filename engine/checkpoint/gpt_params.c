/* GPT-2's parameters as one table: each kind's name, tandem's shape in
 * terms of the config, and whether llm.c stores it transposed. Names,
 * shapes, tandem's order and llm.c's file offsets all come from here. */
#include <stdio.h>
#include <string.h>

#include "td_gpt_weights.h"

/* The sizes a shape is made of. */
typedef enum extent { VOCAB, CONTEXT, WIDTH, WIDTH_3, WIDTH_4 } extent;

typedef struct kind_info {
    const char *name; /* the whole name, or the part after "h.<l>." */
    bool per_layer;
    uint32_t rank;
    extent dims[2];
    bool llmc_transposed;
} kind_info;

static const kind_info kinds[TD_GPT_KINDS] = {
    [TD_GPT_WTE] = {"wte.weight", false, 2, {VOCAB, WIDTH}, false},
    [TD_GPT_WPE] = {"wpe.weight", false, 2, {CONTEXT, WIDTH}, false},
    [TD_GPT_LN1_W] = {"ln_1.weight", true, 1, {WIDTH}, false},
    [TD_GPT_LN1_B] = {"ln_1.bias", true, 1, {WIDTH}, false},
    [TD_GPT_QKV_W] = {"attn.c_attn.weight", true, 2, {WIDTH, WIDTH_3}, true},
    [TD_GPT_QKV_B] = {"attn.c_attn.bias", true, 1, {WIDTH_3}, false},
    [TD_GPT_ATTN_PROJ_W] = {"attn.c_proj.weight", true, 2, {WIDTH, WIDTH}, true},
    [TD_GPT_ATTN_PROJ_B] = {"attn.c_proj.bias", true, 1, {WIDTH}, false},
    [TD_GPT_LN2_W] = {"ln_2.weight", true, 1, {WIDTH}, false},
    [TD_GPT_LN2_B] = {"ln_2.bias", true, 1, {WIDTH}, false},
    [TD_GPT_FC_W] = {"mlp.c_fc.weight", true, 2, {WIDTH, WIDTH_4}, true},
    [TD_GPT_FC_B] = {"mlp.c_fc.bias", true, 1, {WIDTH_4}, false},
    [TD_GPT_FC_PROJ_W] = {"mlp.c_proj.weight", true, 2, {WIDTH_4, WIDTH}, true},
    [TD_GPT_FC_PROJ_B] = {"mlp.c_proj.bias", true, 1, {WIDTH}, false},
    [TD_GPT_LNF_W] = {"ln_f.weight", false, 1, {WIDTH}, false},
    [TD_GPT_LNF_B] = {"ln_f.bias", false, 1, {WIDTH}, false},
};

static int64_t extent_of(const td_gpt_config *c, extent e)
{
    switch (e) {
    case VOCAB:
        return c->vocab;
    case CONTEXT:
        return c->context;
    case WIDTH:
        return c->width;
    case WIDTH_3:
        return 3 * c->width;
    case WIDTH_4:
        return 4 * c->width;
    }
    return 0;
}

uint32_t td_gpt_param_count(const td_gpt_config *c)
{
    return 4 + TD_GPT_LAYER_KINDS * (uint32_t)c->layers;
}

static void fill_param(const td_gpt_config *c, td_gpt_kind kind, int64_t layer, td_gpt_param *p)
{
    const kind_info *k = &kinds[kind];
    p->kind = kind;
    p->layer = layer;
    if (k->per_layer)
        snprintf(p->name, sizeof p->name, "h.%lld.%s", (long long)layer, k->name);
    else
        snprintf(p->name, sizeof p->name, "%s", k->name);
    p->rank = k->rank;
    p->dims[0] = extent_of(c, k->dims[0]);
    p->dims[1] = k->rank > 1 ? extent_of(c, k->dims[1]) : 0;
    p->llmc_transposed = k->llmc_transposed;
}

void td_gpt_param_at(const td_gpt_config *c, uint32_t index, td_gpt_param *out)
{
    const uint32_t in_layers = TD_GPT_LAYER_KINDS * (uint32_t)c->layers;
    if (index < 2)
        fill_param(c, index == 0 ? TD_GPT_WTE : TD_GPT_WPE, -1, out);
    else if (index - 2 < in_layers)
        fill_param(c, (td_gpt_kind)(TD_GPT_LN1_W + (index - 2) % TD_GPT_LAYER_KINDS),
                   (int64_t)((index - 2) / TD_GPT_LAYER_KINDS), out);
    else
        fill_param(c, index - 2 - in_layers == 0 ? TD_GPT_LNF_W : TD_GPT_LNF_B, -1, out);
}

bool td_gpt_layer_name(const char *name, int64_t *layer, const char **rest)
{
    if (strncmp(name, "h.", 2) != 0)
        return false;
    const char *p = name + 2;
    int64_t value = 0;
    const char *digits = p;
    while (*p >= '0' && *p <= '9') {
        value = value * 10 + (*p - '0');
        if (value > INT32_MAX)
            return false;
        p++;
    }
    /* "h..x", "h.01.x": not a name any writer makes. */
    if (p == digits || (p - digits > 1 && *digits == '0') || *p != '.')
        return false;
    *layer = value;
    *rest = p + 1;
    return true;
}

/* The kind whose per-layer name is `rest`, or TD_GPT_KINDS. */
static td_gpt_kind layer_kind(const char *rest)
{
    for (int k = TD_GPT_LN1_W; k <= TD_GPT_FC_PROJ_B; k++)
        if (strcmp(rest, kinds[k].name) == 0)
            return (td_gpt_kind)k;
    return TD_GPT_KINDS;
}

bool td_gpt_is_layer_param(const char *rest)
{
    return layer_kind(rest) != TD_GPT_KINDS;
}

bool td_gpt_param_index(const td_gpt_config *c, const char *name, uint32_t *index)
{
    int64_t layer;
    const char *rest;
    if (td_gpt_layer_name(name, &layer, &rest)) {
        const td_gpt_kind k = layer_kind(rest);
        if (k == TD_GPT_KINDS || layer >= c->layers)
            return false;
        *index = 2 + TD_GPT_LAYER_KINDS * (uint32_t)layer + (uint32_t)(k - TD_GPT_LN1_W);
        return true;
    }
    const uint32_t after_layers = 2 + TD_GPT_LAYER_KINDS * (uint32_t)c->layers;
    const struct {
        td_gpt_kind kind;
        uint32_t index;
    } outside[] = {{TD_GPT_WTE, 0}, {TD_GPT_WPE, 1}, {TD_GPT_LNF_W, after_layers}, {TD_GPT_LNF_B, after_layers + 1}};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++)
        if (strcmp(name, kinds[outside[i].kind].name) == 0) {
            *index = outside[i].index;
            return true;
        }
    return false;
}

/* Elements per tensor at most, as graph shapes: byte sizes then fit in 64
 * bits with room for offsets. */
#define MAX_ELEMENTS ((int64_t)1 << 58)

bool td_gpt_config_problem(const td_gpt_config *c, char *buf, size_t size)
{
    const struct {
        const char *name;
        int64_t value;
    } sizes[] = {{"vocab", c->vocab}, {"context", c->context}, {"layers", c->layers},
                 {"heads", c->heads}, {"width", c->width}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value < 1 || sizes[i].value > INT32_MAX) {
            snprintf(buf, size, "%s is %lld, expected 1 to 2^31-1", sizes[i].name, (long long)sizes[i].value);
            return true;
        }
    if (c->padded_vocab != 0 && (c->padded_vocab < c->vocab || c->padded_vocab > INT32_MAX)) {
        snprintf(buf, size, "padded_vocab is %lld, expected 0 or from vocab (%lld) to 2^31-1",
                 (long long)c->padded_vocab, (long long)c->vocab);
        return true;
    }
    if (c->width % c->heads != 0) {
        snprintf(buf, size, "heads %lld do not divide width %lld", (long long)c->heads, (long long)c->width);
        return true;
    }
    if (c->layers > (int64_t)((UINT32_MAX - 4) / TD_GPT_LAYER_KINDS)) {
        snprintf(buf, size, "layers is %lld, too many tensors to count", (long long)c->layers);
        return true;
    }
    /* The largest tensors: wte (padded in llm.c's file), wpe, c_fc's. */
    const int64_t rows = c->padded_vocab > c->vocab ? c->padded_vocab : c->vocab;
    if (rows > MAX_ELEMENTS / c->width || c->context > MAX_ELEMENTS / c->width ||
        4 * c->width > MAX_ELEMENTS / c->width) {
        snprintf(buf, size, "width %lld with vocab %lld and context %lld makes a tensor of more than 2^58 elements",
                 (long long)c->width, (long long)rows, (long long)c->context);
        return true;
    }
    return false;
}

void td_gpt_format_shape(uint32_t rank, const int64_t *dims, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < rank && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, d ? ", %lld" : "%lld", (long long)dims[d]);
    if (at < size)
        snprintf(buf + at, size - at, "]");
}

/* ---- llm.c's layout ---- */

/* Elements of one tensor of `kind` in llm.c's file: tandem's shape, but
 * wte has padded_vocab rows. */
static uint64_t llmc_elements(const td_gpt_config *c, td_gpt_kind kind)
{
    td_gpt_param p;
    fill_param(c, kind, 0, &p);
    if (kind == TD_GPT_WTE)
        p.dims[0] = c->padded_vocab;
    return p.rank == 1 ? (uint64_t)p.dims[0] : (uint64_t)p.dims[0] * (uint64_t)p.dims[1];
}

/* Bytes from the first parameter's start to where `kind` (layer `layer`)
 * starts: every kind before it, all layers of each, as llm.c lays them. */
static bool llmc_bytes_before(const td_gpt_config *c, td_gpt_kind kind, int64_t layer, uint64_t *bytes)
{
    uint64_t total = 0, part;
    for (int k = 0; k <= (int)kind && k < TD_GPT_KINDS; k++) {
        const uint64_t copies = k < (int)kind ? (kinds[k].per_layer ? (uint64_t)c->layers : 1) : (uint64_t)layer;
        if (__builtin_mul_overflow(llmc_elements(c, (td_gpt_kind)k), copies, &part) ||
            __builtin_mul_overflow(part, (uint64_t)4, &part) || __builtin_add_overflow(total, part, &total))
            return false;
    }
    *bytes = total;
    return total <= (uint64_t)INT64_MAX - TD_LLMC_HEADER_BYTES;
}

bool td_llmc_offset(const td_gpt_config *c, const td_gpt_param *p, uint64_t *offset)
{
    uint64_t before;
    if (!llmc_bytes_before(c, p->kind, p->layer < 0 ? 0 : p->layer, &before))
        return false;
    *offset = TD_LLMC_HEADER_BYTES + before;
    return true;
}

bool td_llmc_file_bytes(const td_gpt_config *c, uint64_t *bytes)
{
    uint64_t before;
    if (!llmc_bytes_before(c, TD_GPT_KINDS, 0, &before))
        return false;
    *bytes = TD_LLMC_HEADER_BYTES + before;
    return true;
}
