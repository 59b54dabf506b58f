/* The GPT of seed 002 (tandem/models.h): GPT-2's architecture built from
 * graph ops, its parameters named as Hugging Face's GPT-2 keys so weights
 * from either layout load by name.
 *
 * Attention keeps one layout from the fused projection to the output: the
 * QKV product [B, T, 3D] is viewed as [B*T, 3, H, hd] and transposed once to
 * [3, H, B*T, hd], so q, k and v are contiguous blocks of axis 0 (a slice
 * each, a copy) and each is [H, B, T, hd] with heads and examples as the
 * batch dims of the per-head products. Only the merge back to [B, T, D]
 * transposes again. Every reshape leaves the example axis inferred (-1),
 * so the graph is the same at any per-device batch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tandem/models.h"
#include "td_graph_internal.h"

#define GPT_LN_EPSILON 1e-5f /* GPT-2's layer_norm_epsilon */
#define GPT_INIT_STD 0.02f

td_status td_gpt_options_init(td_gpt_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->vocab = 256;
    o->context = 64;
    o->layers = 4;
    o->heads = 4;
    o->width = 128;
    return TD_OK;
}

typedef struct gpt_build {
    td_graph *g;
    const td_gpt_options *o;
    int64_t T; /* this graph's sequence length, <= context */
} gpt_build;

static td_status weight(gpt_build *b, const char *name, uint32_t rank, const int64_t *dims, float std, td_node *out)
{
    td_initializer init;
    td_status s = td_initializer_normal(std, b->o->seed, &init);
    return s == TD_OK ? td_graph_param_init(b->g, name, rank, dims, &init, out) : s;
}

static td_status constant_param(gpt_build *b, const char *name, int64_t n, float value, td_node *out)
{
    td_initializer init;
    td_status s = td_initializer_constant(value, &init);
    return s == TD_OK ? td_graph_param_init(b->g, name, 1, &n, &init, out) : s;
}

/* "h.<layer>.<rest>" into buf. */
static const char *block_name(char *buf, size_t size, int64_t layer, const char *rest)
{
    snprintf(buf, size, "h.%lld.%s", (long long)layer, rest);
    return buf;
}

/* x @ <prefix>.weight [in, out] + <prefix>.bias [out]. */
static td_status linear(gpt_build *b, const char *prefix, td_node x, int64_t in, int64_t out_features, float std,
                        td_node *out)
{
    char name[64];
    td_node w, bias, y;
    const int64_t wd[2] = {in, out_features};
    snprintf(name, sizeof name, "%s.weight", prefix);
    td_status s = weight(b, name, 2, wd, std, &w);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (s == TD_OK)
        s = constant_param(b, name, out_features, 0.0f, &bias);
    if (s == TD_OK)
        s = td_graph_matmul(b->g, x, w, &y);
    return s == TD_OK ? td_graph_add(b->g, y, bias, out) : s;
}

static td_status layer_norm(gpt_build *b, const char *prefix, td_node x, td_node *out)
{
    char name[64];
    td_node scale, bias;
    snprintf(name, sizeof name, "%s.weight", prefix);
    td_status s = constant_param(b, name, b->o->width, 1.0f, &scale);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (s == TD_OK)
        s = constant_param(b, name, b->o->width, 0.0f, &bias);
    return s == TD_OK ? td_graph_layer_norm(b->g, x, scale, bias, GPT_LN_EPSILON, out) : s;
}

/* Dropout over an [H, B, T, T] tensor: td_graph_dropout draws each mask row
 * from the example's global index on axis 0, so the examples go first for
 * the draw and back after it (two copies, only when dropout is on). */
static td_status attention_dropout(gpt_build *b, td_node att, td_node *out)
{
    if (b->o->dropout == 0.0f) {
        *out = att;
        return TD_OK;
    }
    static const int32_t swap01[4] = {1, 0, 2, 3};
    td_node t, d;
    td_status s = td_graph_transpose(b->g, att, 4, swap01, &t);
    if (s == TD_OK)
        s = td_graph_dropout(b->g, t, b->o->dropout, b->o->seed, &d);
    return s == TD_OK ? td_graph_transpose(b->g, d, 4, swap01, out) : s;
}

/* Causal multi-head self-attention of x [B, T, D] -> [B, T, D] (before the
 * output projection's residual add). */
static td_status attention(gpt_build *b, int64_t layer, td_node x, float proj_std, td_node *out)
{
    td_graph *g = b->g;
    const int64_t D = b->o->width, H = b->o->heads, hd = D / H, T = b->T;
    char name[64];
    td_node qkv, split, heads, part[3], scores, att, mixed, merged_t, merged;
    static const int32_t to_heads[4] = {1, 2, 0, 3};   /* [BT, 3, H, hd] -> [3, H, BT, hd] */
    static const int32_t from_heads[4] = {1, 2, 0, 3}; /* [H, B, T, hd] -> [B, T, H, hd] */
    const int64_t split_dims[4] = {-1, 3, H, hd}, head_dims[4] = {H, -1, T, hd}, merged_dims[3] = {-1, T, D};
    td_status s = linear(b, block_name(name, sizeof name, layer, "attn.c_attn"), x, D, 3 * D, GPT_INIT_STD, &qkv);
    if (s == TD_OK)
        s = td_graph_reshape(g, qkv, 4, split_dims, &split);
    if (s == TD_OK)
        s = td_graph_transpose(g, split, 4, to_heads, &heads);
    for (int i = 0; i < 3 && s == TD_OK; i++) {
        td_node one;
        s = td_graph_slice(g, heads, i, 1, &one);
        if (s == TD_OK)
            s = td_graph_reshape(g, one, 4, head_dims, &part[i]);
    }
    if (s == TD_OK)
        s = td_graph_batch_matmul(g, part[0], part[1], false, true, &scores);
    if (s == TD_OK)
        s = td_graph_scale(g, scores, (float)(1.0 / sqrt((double)hd)), &scores);
    if (s == TD_OK)
        s = td_graph_causal_softmax(g, scores, &att);
    if (s == TD_OK)
        s = attention_dropout(b, att, &att);
    if (s == TD_OK)
        s = td_graph_batch_matmul(g, att, part[2], false, false, &mixed);
    if (s == TD_OK)
        s = td_graph_transpose(g, mixed, 4, from_heads, &merged_t);
    if (s == TD_OK)
        s = td_graph_reshape(g, merged_t, 3, merged_dims, &merged);
    if (s == TD_OK)
        s = linear(b, block_name(name, sizeof name, layer, "attn.c_proj"), merged, D, D, proj_std, out);
    return s;
}

static td_status mlp(gpt_build *b, int64_t layer, td_node x, float proj_std, td_node *out)
{
    const int64_t D = b->o->width;
    char name[64];
    td_node h;
    td_status s = linear(b, block_name(name, sizeof name, layer, "mlp.c_fc"), x, D, 4 * D, GPT_INIT_STD, &h);
    if (s == TD_OK)
        s = td_graph_gelu(b->g, h, true, &h);
    return s == TD_OK ? linear(b, block_name(name, sizeof name, layer, "mlp.c_proj"), h, 4 * D, D, proj_std, out)
                      : s;
}

/* x + dropout(branch): the residual stream of a pre-LN block. */
static td_status residual(gpt_build *b, td_node x, td_node branch, td_node *out)
{
    td_status s = td_graph_dropout(b->g, branch, b->o->dropout, b->o->seed, &branch);
    return s == TD_OK ? td_graph_add(b->g, x, branch, out) : s;
}

static td_status block(gpt_build *b, int64_t layer, td_node x, td_node *out)
{
    /* GPT-2 scales the residual projections' initial weights by 1/sqrt(2L):
     * each block adds two branches to the stream. */
    float proj_std = (float)(GPT_INIT_STD / sqrt(2.0 * (double)b->o->layers));
    char name[64];
    td_node n1, a, n2, m;
    td_status s = layer_norm(b, block_name(name, sizeof name, layer, "ln_1"), x, &n1);
    if (s == TD_OK)
        s = attention(b, layer, n1, proj_std, &a);
    if (s == TD_OK)
        s = residual(b, x, a, &x);
    if (s == TD_OK)
        s = layer_norm(b, block_name(name, sizeof name, layer, "ln_2"), x, &n2);
    if (s == TD_OK)
        s = mlp(b, layer, n2, proj_std, &m);
    return s == TD_OK ? residual(b, x, m, out) : s;
}

static td_status check_options(td_graph *g, const td_gpt_options *o, const char *fn)
{
    const struct { const char *name; int64_t value, max; } sizes[] = {
        {"vocab", o->vocab, (int64_t)1 << 24},  {"context", o->context, (int64_t)1 << 20},
        {"layers", o->layers, 1024},            {"heads", o->heads, 1024},
        {"width", o->width, (int64_t)1 << 16},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value < 1 || sizes[i].value > sizes[i].max)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s %lld, expected 1 to %lld", fn, sizes[i].name,
                                (long long)sizes[i].value, (long long)sizes[i].max);
    if (o->width % o->heads != 0)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: width %lld is not a multiple of heads %lld", fn,
                            (long long)o->width, (long long)o->heads);
    if (!(o->dropout >= 0.0f && o->dropout < 1.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: dropout %g, expected in [0, 1)", fn,
                            (double)o->dropout);
    return TD_OK;
}

td_status td_model_gpt(td_graph *g, td_node tokens, const td_gpt_options *options, td_node *logits)
{
    const char *fn = "td_model_gpt";
    td_status s = td_graph_check_out(g, logits, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, tokens, fn, TD_I32)) != TD_OK)
        return s;
    td_gpt_options o;
    td_gpt_options_init(&o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_gpt_options, options, &o)) != TD_OK)
        return s;
    if ((s = check_options(g, &o, fn)) != TD_OK)
        return s;
    const td_shape *ts = &g->nodes[tokens].shape;
    if (ts->rank != 2 || ts->dims[1] < 1 || ts->dims[1] > o.context) {
        char buf[96];
        td_shape_format(ts, buf, sizeof buf);
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "%s: tokens (node %u) have shape %s, expected [B, T] with 1 <= T <= context %lld", fn,
                            tokens, buf, (long long)o.context);
    }
    gpt_build b = {g, &o, ts->dims[1]};
    const int64_t D = o.width, wte_dims[2] = {o.vocab, D}, wpe_dims[2] = {o.context, D};
    td_node wte, wpe, tok, pos, x;
    if ((s = weight(&b, "wte.weight", 2, wte_dims, GPT_INIT_STD, &wte)) != TD_OK ||
        (s = weight(&b, "wpe.weight", 2, wpe_dims, GPT_INIT_STD, &wpe)) != TD_OK ||
        (s = td_graph_embedding(g, wte, tokens, &tok)) != TD_OK)
        return s;
    pos = wpe;
    if (b.T < o.context && (s = td_graph_slice(g, wpe, 0, b.T, &pos)) != TD_OK)
        return s;
    if ((s = td_graph_add(g, tok, pos, &x)) != TD_OK ||
        (s = td_graph_dropout(g, x, o.dropout, o.seed, &x)) != TD_OK)
        return s;
    for (int64_t l = 0; l < o.layers && s == TD_OK; l++) {
        td_node first = g->count;
        s = block(&b, l, x, &x);
        if (s == TD_OK && o.recompute)
            s = td_graph_recompute(g, first, g->count - 1);
    }
    if (s == TD_OK)
        s = layer_norm(&b, "ln_f", x, &x);
    /* The head is the token table itself (tied): logits = x wte^T. */
    return s == TD_OK ? td_graph_matmul_transposed(g, x, wte, logits) : s;
}

td_status td_model_gpt_loss(td_graph *g, td_node tokens, td_node targets, td_node mask, const td_gpt_options *options,
                            td_node *loss)
{
    const char *fn = "td_model_gpt_loss";
    td_status s = td_graph_check_out(g, loss, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, targets, fn, TD_I32)) != TD_OK ||
        (s = td_graph_check_node(g, mask, fn, TD_F32)) != TD_OK || (s = td_graph_check_node(g, tokens, fn, TD_I32)) != TD_OK)
        return s;
    if (!td_shape_equal(&g->nodes[tokens].shape, &g->nodes[targets].shape))
        return td_shape_mismatch(g, targets, "gpt targets must have the tokens' shape [B, T]", &g->nodes[targets].shape,
                                 &g->nodes[tokens].shape);
    td_node logits, flat_logits, flat_targets, per_token, per_example;
    if ((s = td_model_gpt(g, tokens, options, &logits)) != TD_OK)
        return s;
    const td_shape *ls = &g->nodes[logits].shape;
    const int64_t T = ls->dims[1], V = ls->dims[2];
    const int64_t rows_v[2] = {-1, V}, rows[1] = {-1}, per_example_dims[2] = {-1, T};
    /* Every token's cross-entropy, then the masked mean over the global
     * batch: the mean over a sequence's T tokens first, then over the valid
     * sequences, which is the mean over every valid token (each sequence
     * has T). */
    if ((s = td_graph_reshape(g, logits, 2, rows_v, &flat_logits)) != TD_OK ||
        (s = td_graph_reshape(g, targets, 1, rows, &flat_targets)) != TD_OK ||
        (s = td_graph_softmax_cross_entropy_per_example(g, flat_logits, flat_targets, &per_token)) != TD_OK ||
        (s = td_graph_reshape(g, per_token, 2, per_example_dims, &per_example)) != TD_OK)
        return s;
    return td_graph_masked_mean(g, per_example, mask, loss);
}
