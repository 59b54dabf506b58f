/* tandem's GPT beside llm.c's CPU reference trainer (bench/gpt_reference.sh
 * runs both): the same GPT-2-layout weights, the same batch, the same
 * AdamW steps.
 *
 *   gpt_reference --write DIR [--layers L --heads H --width D --vocab V
 *                 --context C --batch B --seq T --seed S]
 *     writes DIR/model.bin (llm.c's checkpoint, version 3: GPT-2's
 *     initialization drawn by tandem) and DIR/tokens.bin (int32 magic
 *     20241124, B, T, then B*T inputs and B*T targets, uniform ids);
 *   gpt_reference --model FILE --tokens FILE --devices SPEC [--steps N
 *                 --lr X --weight-decay W --recompute 0|1]
 *     trains N AdamW steps (betas 0.9 / 0.999, eps 1e-8, as llm.c) on that
 *     one batch and prints, like the llm.c driver,
 *       step <i> loss <loss before the update> ms <step time>
 *       final loss <loss after the last update>
 *     then a summary row: spec, median ms, tokens/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/tandem.h"
#include "td_bench_time.h"

#define TOKENS_MAGIC 20241124
#define MAX_STEPS 200

typedef struct options {
    td_gpt_options gpt;
    int64_t batch, seq;
    const char *write_dir, *model, *tokens, *devices;
    int steps;
    float lr, weight_decay;
} options;

static int fail(td_context *ctx, td_status s, const char *what)
{
    fprintf(stderr, "gpt_reference: %s: %s: %s\n", what, td_status_name(s), ctx ? td_last_error(ctx) : "");
    return 1;
}

/* The model's parameter names in GPT-2's order (tandem/models.h). */
static uint32_t gpt_names(int64_t layers, char (*names)[64])
{
    static const char *const per_block[12] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    uint32_t n = 0;
    snprintf(names[n++], 64, "wte.weight");
    snprintf(names[n++], 64, "wpe.weight");
    for (int64_t l = 0; l < layers; l++)
        for (int k = 0; k < 12; k++)
            snprintf(names[n++], 64, "h.%lld.%s", (long long)l, per_block[k]);
    snprintf(names[n++], 64, "ln_f.weight");
    snprintf(names[n++], 64, "ln_f.bias");
    return n;
}

/* GPT-2's initialization as td_model_gpt draws it, read back from a
 * program on one CPU device, written in llm.c's layout. */
static int write_files(const options *o)
{
    td_context *ctx = NULL;
    td_mesh *mesh = NULL;
    td_graph *g = NULL;
    td_program *p = NULL;
    const int64_t dims[2] = {1, o->seq};
    td_node tokens, logits;
    td_status s = td_context_create(NULL, &ctx);
    if (s == TD_OK) s = td_mesh_create(ctx, "cpu:1", &mesh);
    if (s == TD_OK) s = td_graph_create(ctx, &g);
    if (s == TD_OK) s = td_graph_input(g, "tokens", TD_I32, 2, dims, TD_SHARDED, &tokens);
    if (s == TD_OK) s = td_model_gpt(g, tokens, &o->gpt, &logits);
    if (s == TD_OK) s = td_pmap_compile(g, mesh, 1, &logits, &p);
    if (s != TD_OK)
        return fail(ctx, s, "building the model");
    char (*name_buf)[64] = calloc(4 + 12 * (size_t)o->gpt.layers, 64);
    uint32_t n = gpt_names(o->gpt.layers, name_buf);
    td_tensor **values = calloc(n, sizeof *values);
    const char **names = calloc(n, sizeof *names);
    for (uint32_t i = 0; i < n && s == TD_OK; i++) {
        uint32_t rank;
        int64_t pd[TD_MAX_RANK];
        td_node param;
        names[i] = name_buf[i];
        s = td_graph_find(g, names[i], &param);
        if (s == TD_OK) s = td_graph_shape(g, param, &rank, pd);
        if (s == TD_OK) s = td_tensor_create(ctx, TD_F32, rank, pd, &values[i]);
        if (s == TD_OK) s = td_program_read_param(p, param, 0, values[i]);
    }
    td_gpt_config config = {.struct_size = sizeof config, .vocab = o->gpt.vocab, .context = o->gpt.context,
                            .layers = o->gpt.layers, .heads = o->gpt.heads, .width = o->gpt.width};
    char path[4096];
    snprintf(path, sizeof path, "%s/model.bin", o->write_dir);
    if (s == TD_OK)
        s = td_gpt_weights_write_llmc(ctx, path, &config, n, names, (const td_tensor *const *)values);
    if (s != TD_OK)
        return fail(ctx, s, "writing the model");
    snprintf(path, sizeof path, "%s/tokens.bin", o->write_dir);
    FILE *f = fopen(path, "wb");
    int32_t header[3] = {TOKENS_MAGIC, (int32_t)o->batch, (int32_t)o->seq};
    uint64_t state = 0x9e3779b97f4a7c15ull ^ o->gpt.seed;
    int ok = f && fwrite(header, sizeof header, 1, f) == 1;
    for (int64_t i = 0; ok && i < 2 * o->batch * o->seq; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int32_t id = (int32_t)((state >> 33) % (uint64_t)o->gpt.vocab);
        ok = fwrite(&id, sizeof id, 1, f) == 1;
    }
    if (!f || fclose(f) != 0 || !ok) {
        fprintf(stderr, "gpt_reference: cannot write %s\n", path);
        return 1;
    }
    printf("wrote %s/model.bin (%u tensors) and %s/tokens.bin (B %lld, T %lld)\n", o->write_dir, n, o->write_dir,
           (long long)o->batch, (long long)o->seq);
    for (uint32_t i = 0; i < n; i++)
        td_tensor_destroy(values[i]);
    free(values);
    free(names);
    free(name_buf);
    td_context_destroy(ctx);
    return 0;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int train(const options *o)
{
    FILE *f = fopen(o->tokens, "rb");
    int32_t header[3];
    if (!f || fread(header, sizeof header, 1, f) != 1 || header[0] != TOKENS_MAGIC) {
        fprintf(stderr, "gpt_reference: %s is not a token batch written by --write\n", o->tokens);
        return 1;
    }
    const int64_t B = header[1], T = header[2], dims[2] = {B, T};
    td_context *ctx = NULL;
    td_mesh *mesh = NULL;
    td_graph *g = NULL;
    td_trainer *t = NULL;
    td_gpt_weights *w = NULL;
    td_tensor *inputs = NULL, *targets = NULL, *mask = NULL;
    td_node tok, tgt, msk, loss, params[4096];
    uint32_t n = 0;
    td_status s = td_context_create(NULL, &ctx);
    if (s == TD_OK) s = td_gpt_weights_read(ctx, o->model, &w);
    td_gpt_config c = {.struct_size = sizeof(td_gpt_config)};
    if (s == TD_OK) s = td_gpt_weights_config(w, &c);
    td_gpt_options go;
    td_gpt_options_init(&go);
    go.vocab = c.vocab, go.context = c.context, go.layers = c.layers, go.heads = c.heads, go.width = c.width;
    go.recompute = o->gpt.recompute;
    if (s == TD_OK) s = td_mesh_create(ctx, o->devices, &mesh);
    if (s == TD_OK) s = td_graph_create(ctx, &g);
    if (s == TD_OK) s = td_graph_input(g, "tokens", TD_I32, 2, dims, TD_SHARDED, &tok);
    if (s == TD_OK) s = td_graph_input(g, "targets", TD_I32, 2, dims, TD_SHARDED, &tgt);
    if (s == TD_OK) s = td_graph_input(g, "mask", TD_F32, 1, &B, TD_SHARDED, &msk);
    if (s == TD_OK) s = td_model_gpt_loss(g, tok, tgt, msk, &go, &loss);
    if (s == TD_OK) s = td_graph_params(g, 4096, params, &n);
    td_trainer_options to;
    td_trainer_options_init(&to);
    to.optimizer = TD_OPTIMIZER_ADAMW;
    to.learning_rate = o->lr;
    to.weight_decay = o->weight_decay;
    to.b1 = 0.9f, to.b2 = 0.999f, to.eps = 1e-8f;
    if (s == TD_OK) s = td_trainer_create(g, mesh, loss, n, params, &to, &t);
    uint32_t count = 0;
    if (s == TD_OK) s = td_gpt_weights_count(w, &count);
    for (uint32_t i = 0; i < count && s == TD_OK; i++) {
        const char *name;
        const td_tensor *value;
        td_node param;
        s = td_gpt_weights_get(w, i, &name, &value);
        if (s == TD_OK) s = td_graph_find(g, name, &param);
        if (s == TD_OK) s = td_trainer_set_param(t, param, value);
    }
    if (s == TD_OK) s = td_tensor_create(ctx, TD_I32, 2, dims, &inputs);
    if (s == TD_OK) s = td_tensor_create(ctx, TD_I32, 2, dims, &targets);
    if (s == TD_OK) s = td_tensor_create(ctx, TD_F32, 1, &B, &mask);
    if (s != TD_OK)
        return fail(ctx, s, "setting up");
    void *in_data, *tg_data, *mk_data;
    td_tensor_data(inputs, &in_data);
    td_tensor_data(targets, &tg_data);
    td_tensor_data(mask, &mk_data);
    if (fread(in_data, sizeof(int32_t), (size_t)(B * T), f) != (size_t)(B * T) ||
        fread(tg_data, sizeof(int32_t), (size_t)(B * T), f) != (size_t)(B * T)) {
        fprintf(stderr, "gpt_reference: %s is short\n", o->tokens);
        return 1;
    }
    fclose(f);
    for (int64_t i = 0; i < B; i++)
        ((float *)mk_data)[i] = 1.0f;
    td_gpt_weights_destroy(w);
    td_binding b[3] = {{tok, inputs}, {tgt, targets}, {msk, mask}};
    double ms[MAX_STEPS];
    float l;
    for (int step = 0; step <= o->steps && s == TD_OK; step++) {
        double start = td_bench_now();
        s = td_trainer_step(t, 3, b, &l);
        double took = (td_bench_now() - start) * 1e3;
        if (s != TD_OK)
            break;
        if (step == o->steps) {
            printf("final loss %.9g\n", (double)l);
        } else {
            ms[step] = took;
            printf("step %d loss %.9g ms %.3f\n", step, (double)l, took);
        }
        fflush(stdout);
    }
    if (s != TD_OK)
        return fail(ctx, s, "training");
    /* The median of the steps after the first (the first pays for the
     * first touch of every buffer). */
    int counted = o->steps > 1 ? o->steps - 1 : o->steps;
    qsort(ms + (o->steps > 1), (size_t)counted, sizeof *ms, compare_double);
    double median = ms[(o->steps > 1) + counted / 2];
    printf("summary devices %s median_ms %.1f tokens_per_s %.1f\n", o->devices, median,
           (double)(B * T) / (median / 1e3));
    td_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    memset(&o, 0, sizeof o);
    td_gpt_options_init(&o.gpt);
    o.batch = 4, o.seq = 64, o.steps = 10, o.lr = 1e-4f, o.weight_decay = 0.01f, o.devices = "cpu:1";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--write")) o.write_dir = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--tokens")) o.tokens = v;
        else if (!strcmp(a, "--devices")) o.devices = v;
        else if (!strcmp(a, "--layers")) o.gpt.layers = atoll(v);
        else if (!strcmp(a, "--heads")) o.gpt.heads = atoll(v);
        else if (!strcmp(a, "--width")) o.gpt.width = atoll(v);
        else if (!strcmp(a, "--vocab")) o.gpt.vocab = atoll(v);
        else if (!strcmp(a, "--context")) o.gpt.context = atoll(v);
        else if (!strcmp(a, "--batch")) o.batch = atoll(v);
        else if (!strcmp(a, "--seq")) o.seq = atoll(v);
        else if (!strcmp(a, "--seed")) o.gpt.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--steps")) o.steps = atoi(v);
        else if (!strcmp(a, "--lr")) o.lr = (float)atof(v);
        else if (!strcmp(a, "--weight-decay")) o.weight_decay = (float)atof(v);
        else if (!strcmp(a, "--recompute")) o.gpt.recompute = atoi(v) != 0;
        else {
            fprintf(stderr, "gpt_reference: unknown flag %s (see bench/gpt_reference.c)\n", a);
            return 2;
        }
    }
    if (o.steps < 1 || o.steps >= MAX_STEPS || o.batch < 1 || o.seq < 1 || o.seq > o.gpt.context) {
        fprintf(stderr, "gpt_reference: --steps 1..%d, --batch >= 1, 1 <= --seq <= --context\n", MAX_STEPS - 1);
        return 2;
    }
    if (o.write_dir)
        return write_files(&o);
    if (!o.model || !o.tokens) {
        fprintf(stderr, "gpt_reference: --write DIR, or --model FILE --tokens FILE\n");
        return 2;
    }
    return train(&o);
}
