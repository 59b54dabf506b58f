/* GEMM, convolution and pooling libraries side by side at the seed models'
 * shapes, for choosing what the CPU backend runs (issue 19 item 2).
 *
 *   blas_compare [--threads N] [--reps N] [--blis PATH] [--only gemm|conv] [--json]
 *
 * Built and run by bench/blas_compare.sh (not by meson: BLIS and oneDNN
 * come as Debian packages unpacked under .deps/, never installed, since
 * installing BLIS switches the system's libblas / cblas.h alternatives).
 *
 * GEMM rows, each shape timed on every engine in turn in one process:
 *   openblas     cblas_sgemm of the linked OpenBLAS (its kernel is the one
 *                OPENBLAS_CORETYPE names, else its own choice for the CPU;
 *                the script runs both), openblas_set_num_threads(N)
 *   blis         BLIS's cblas_sgemm, dlopen'ed with RTLD_DEEPBIND so that
 *                its symbols do not meet OpenBLAS's; bli_thread_set_num_threads(N)
 *   dnnl_sgemm   oneDNN's dnnl_sgemm (row-major), OMP_NUM_THREADS=N
 *   dnnl_matmul  oneDNN's matmul primitive (created outside the timing)
 *   own, own-fma tandem's own GEMMs (backends/cpu), one thread only: on two
 *                cores they run through the host pool, bench/gemm
 *                --cpu-threads 2 measures that; "own-fma avx2" is the FMA
 *                GEMM's AVX2 path on a CPU whose best is AVX-512 (what a
 *                CPU without AVX-512 would run)
 * Every result is checked against OpenBLAS's (normalised MSE < 1e-8).
 *
 * Convolution and pooling rows, batch 128, NHWC as tandem stores images:
 * the CNN's conv1 (28x28x1 -> 32) and conv2 (14x14x32 -> 64), 3x3, pad 1,
 * forward, weight gradient and (conv2) input gradient, as tandem runs them
 * (td_reference_im2col / col2im around a GEMM: own-fma, openblas) and as
 * oneDNN's convolution primitives (fp32, and bf16 where this CPU has an
 * implementation), weights in oneDNN's preferred layout (reordered once,
 * not timed); 2x2 max pooling forward and backward after each conv
 * (td_reference_pool, oneDNN's pooling with its workspace). */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_gemm_own.h"
#include "cpu_gemm_own_fma.h"
#include "td_reference.h"

extern void openblas_set_num_threads(int);

typedef struct shape {
    int64_t m, n, k;
    int trans_a, trans_b;
    const char *label;
} shape;

static const shape shapes[] = {
    {128, 512, 784, 0, 0, "mlp b128 l1"},         {128, 512, 512, 0, 0, "mlp b128 l2"},
    {128, 10, 512, 0, 0, "mlp b128 head"},        {256, 512, 784, 0, 0, "mlp b256 l1"},
    {256, 512, 512, 0, 0, "mlp b256 l2"},         {256, 10, 512, 0, 0, "mlp b256 head"},
    {1024, 512, 784, 0, 0, "mlp b1024 l1"},       {1024, 512, 512, 0, 0, "mlp b1024 l2"},
    {1024, 10, 512, 0, 0, "mlp b1024 head"},      {784, 512, 1024, 1, 0, "mlp b1024 l1 dW"},
    {1024, 784, 512, 0, 1, "mlp b1024 l1 dX"},    {100352, 32, 9, 0, 0, "cnn conv1"},
    {9, 32, 100352, 1, 0, "cnn conv1 dW"},        {25088, 64, 288, 0, 0, "cnn conv2"},
    {288, 64, 25088, 1, 0, "cnn conv2 dW"},       {25088, 288, 64, 0, 1, "cnn conv2 dX"},
    {768, 128, 384, 0, 0, "gpt 768x128x384"},     {768, 512, 128, 0, 0, "gpt 768x512x128"},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static int reps_wanted = 5;
static int threads = 1;
static int json;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds of fn(arg): one untimed warm-up, then at least
 * reps_wanted runs and at least 0.15 s, at most 64 runs. */
static double time_median(void (*fn)(void *), void *arg)
{
    double t[64];
    int n = 0;
    fn(arg);
    double begin = now();
    do {
        double t0 = now();
        fn(arg);
        t[n++] = now() - t0;
    } while (n < 64 && (n < reps_wanted || now() - begin < 0.15));
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++, seed = seed * 1664525u + 1013904223u)
        x[i] = (float)(seed >> 9) / 8388608.0f - 1.0f;
}

static double nmse(const float *x, const float *ref, size_t n)
{
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)ref[i];
        err += d * d;
        norm += (double)ref[i] * (double)ref[i];
    }
    return norm > 0 ? err / norm : err;
}

static void row(const char *kind, const char *label, const char *engine, double flops, double seconds, double err,
                const char *note)
{
    double gflops = flops > 0 ? flops / seconds * 1e-9 : 0;
    if (json)
        printf("{\"kind\": \"%s\", \"shape\": \"%s\", \"engine\": \"%s\", \"threads\": %d, \"seconds\": %.6g, "
               "\"gflops\": %.2f, \"nmse\": %.3g, \"note\": \"%s\"}\n",
               kind, label, engine, threads, seconds, gflops, err, note ? note : "");
    else
        printf("%-5s %-17s %-24s %2d %10.3f ms %8.1f GFLOP/s  nmse %-9.2g %s\n", kind, label, engine, threads,
               seconds * 1e3, gflops, err, note ? note : "");
    fflush(stdout);
}

/* ---- GEMM engines ---- */

typedef void cblas_sgemm_fn(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int, int, float,
                            const float *, int, const float *, int, float, float *, int);
static cblas_sgemm_fn *blis_sgemm;
static char blis_name[64] = "blis";

typedef struct gemm_job {
    const shape *s;
    const float *a, *b;
    float *c;
    int engine;
    dnnl_primitive_t matmul;
    dnnl_stream_t stream;
    dnnl_memory_t ma, mb, mc;
} gemm_job;

enum { E_OPENBLAS, E_BLIS, E_DNNL_SGEMM, E_DNNL_MATMUL, E_OWN, E_OWN_FMA, E_OWN_FMA_AVX2, E_COUNT };
static const char *engine_names[E_COUNT] = {"openblas", "blis",    "dnnl_sgemm",  "dnnl_matmul",
                                            "own",      "own-fma", "own-fma avx2"};

static td_gemm_params params_of(const shape *s)
{
    return (td_gemm_params){.trans_a = s->trans_a, .trans_b = s->trans_b, .m = s->m, .n = s->n, .k = s->k,
                            .lda = s->trans_a ? s->m : s->k, .ldb = s->trans_b ? s->k : s->n, .ldc = s->n,
                            .alpha = 1.0f, .beta = 0.0f};
}

static void run_gemm(void *arg)
{
    gemm_job *j = arg;
    const shape *s = j->s;
    td_gemm_params g = params_of(s);
    switch (j->engine) {
    case E_OPENBLAS:
    case E_BLIS:
        (j->engine == E_BLIS ? blis_sgemm : (cblas_sgemm_fn *)cblas_sgemm)(
            CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans, s->trans_b ? CblasTrans : CblasNoTrans, (int)s->m,
            (int)s->n, (int)s->k, 1.0f, j->a, (int)g.lda, j->b, (int)g.ldb, 0.0f, j->c, (int)g.ldc);
        break;
    case E_DNNL_SGEMM:
        dnnl_sgemm(s->trans_a ? 'T' : 'N', s->trans_b ? 'T' : 'N', s->m, s->n, s->k, 1.0f, j->a, g.lda, j->b, g.ldb,
                   0.0f, j->c, g.ldc);
        break;
    case E_DNNL_MATMUL: {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, j->ma}, {DNNL_ARG_WEIGHTS, j->mb}, {DNNL_ARG_DST, j->mc}};
        dnnl_primitive_execute(j->matmul, j->stream, 3, args);
        dnnl_stream_wait(j->stream);
        break;
    }
    case E_OWN:
        td_cpu_gemm_own(&g, j->c, j->a, j->b);
        break;
    case E_OWN_FMA:
        td_cpu_gemm_own_fma(&g, j->c, j->a, j->b);
        break;
    case E_OWN_FMA_AVX2:
        td_cpu_gemm_own_fma_on(TD_GEMM_FMA_AVX2, &g, j->c, j->a, j->b);
        break;
    }
}

static dnnl_engine_t eng;
static dnnl_stream_t stream;

/* The matmul primitive for s with A, B, C at the given pointers; NULL if
 * oneDNN refuses. */
static dnnl_primitive_t make_matmul(const shape *s, gemm_job *j)
{
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t ad = {s->m, s->k}, bd = {s->k, s->n}, cd = {s->m, s->n};
    dnnl_dims_t as = {s->trans_a ? 1 : s->k, s->trans_a ? s->m : 1};
    dnnl_dims_t bs = {s->trans_b ? 1 : s->n, s->trans_b ? s->k : 1};
    dnnl_dims_t cs = {s->n, 1};
    dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dnnl_f32, as);
    dnnl_memory_desc_init_by_strides(&b_md, 2, bd, dnnl_f32, bs);
    dnnl_memory_desc_init_by_strides(&c_md, 2, cd, dnnl_f32, cs);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    if (dnnl_matmul_desc_init(&md, &a_md, &b_md, NULL, &c_md) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success)
        return NULL;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success)
        prim = NULL;
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_create(&j->ma, &a_md, eng, (void *)j->a);
    dnnl_memory_create(&j->mb, &b_md, eng, (void *)j->b);
    dnnl_memory_create(&j->mc, &c_md, eng, j->c);
    return prim;
}

static void gemm_table(void)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        const size_t an = (size_t)(s->m * s->k), bn = (size_t)(s->k * s->n), cn = (size_t)(s->m * s->n);
        float *a = malloc(an * 4), *b = malloc(bn * 4), *ref = malloc(cn * 4), *c = malloc(cn * 4);
        fill(a, an, 7u + (uint32_t)i);
        fill(b, bn, 1000u + (uint32_t)i);
        const double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
        for (int e = 0; e < E_COUNT; e++) {
            if ((e == E_OWN || e == E_OWN_FMA || e == E_OWN_FMA_AVX2) && threads != 1)
                continue;
            /* The AVX2 path where the best one is another: what a CPU with
             * AVX2 and FMA but no AVX-512 would run. */
            if (e == E_OWN_FMA_AVX2 && (td_cpu_gemm_own_fma_best_isa() == TD_GEMM_FMA_AVX2 ||
                                        !td_cpu_gemm_own_fma_isa_runs(TD_GEMM_FMA_AVX2)))
                continue;
            if (e == E_BLIS && !blis_sgemm)
                continue;
            gemm_job j = {.s = s, .a = a, .b = b, .c = e == E_OPENBLAS ? ref : c, .engine = e, .stream = stream};
            if (e == E_DNNL_MATMUL && !(j.matmul = make_matmul(s, &j))) {
                row("gemm", s->label, engine_names[e], flops, 0, 0, "oneDNN refused the shape");
                continue;
            }
            memset(j.c, 0, cn * 4);
            const double t = time_median(run_gemm, &j);
            row("gemm", s->label, e == E_BLIS ? blis_name : engine_names[e], flops, t,
                e == E_OPENBLAS ? 0 : nmse(c, ref, cn), NULL);
            if (j.matmul) {
                dnnl_primitive_destroy(j.matmul);
                dnnl_memory_destroy(j.ma);
                dnnl_memory_destroy(j.mb);
                dnnl_memory_destroy(j.mc);
            }
        }
        free(a);
        free(b);
        free(ref);
        free(c);
    }
}

/* ---- convolution and pooling ---- */

typedef struct conv_shape {
    const char *label;
    int64_t n, h, w, c, o;
    int input_grad; /* the first conv's input has no gradient */
} conv_shape;

static const conv_shape convs[] = {
    {"cnn conv1", 128, 28, 28, 1, 32, 0},
    {"cnn conv2", 128, 14, 14, 32, 64, 1},
};

typedef struct conv_job {
    const conv_shape *cs;
    td_conv_params geo;
    td_gemm_params gemm; /* the forward GEMM, patches x kernel */
    int own;             /* 1: own-fma GEMM, 0: OpenBLAS */
    const float *x, *w, *gy;
    float *patches, *y, *gw, *gpatches, *gx;
    /* oneDNN */
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[4];
    int nargs;
} conv_job;

static void gemm_any(int own, const td_gemm_params *g, float *c, const float *a, const float *b)
{
    if (own)
        td_cpu_gemm_own_fma(g, c, a, b);
    else
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                    (int)g->m, (int)g->n, (int)g->k, g->alpha, a, (int)g->lda, b, (int)g->ldb, g->beta, c,
                    (int)g->ldc);
}

static void im2col_forward(void *arg)
{
    conv_job *j = arg;
    td_reference_im2col(j->patches, j->x, &j->geo);
    gemm_any(j->own, &j->gemm, j->y, j->patches, j->w);
}

static void im2col_weight_grad(void *arg)
{
    conv_job *j = arg;
    td_gemm_params g = {.trans_a = 1, .m = j->gemm.k, .n = j->gemm.n, .k = j->gemm.m, .lda = j->gemm.k,
                        .ldb = j->gemm.n, .ldc = j->gemm.n, .alpha = 1.0f};
    gemm_any(j->own, &g, j->gw, j->patches, j->gy);
}

static void im2col_input_grad(void *arg)
{
    conv_job *j = arg;
    td_gemm_params g = {.trans_b = 1, .m = j->gemm.m, .n = j->gemm.k, .k = j->gemm.n, .lda = j->gemm.n,
                        .ldb = j->gemm.n, .ldc = j->gemm.k, .alpha = 1.0f};
    gemm_any(j->own, &g, j->gpatches, j->gy, j->w);
    td_reference_col2im(j->gx, j->gpatches, &j->geo);
}

static void run_prim(void *arg)
{
    conv_job *j = arg;
    dnnl_primitive_execute(j->prim, stream, j->nargs, j->args);
    dnnl_stream_wait(stream);
}

static const char *impl_of(const_dnnl_primitive_desc_t pd)
{
    const char *s = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
    return s;
}

static dnnl_memory_t mem_of(const dnnl_memory_desc_t *md, void *ptr)
{
    dnnl_memory_t m;
    return dnnl_memory_create(&m, md, eng, ptr ? ptr : DNNL_MEMORY_ALLOCATE) == dnnl_success ? m : NULL;
}

/* Copies `from` (user layout) into `to` (the primitive's) with a reorder. */
static void reorder(dnnl_memory_t from, dnnl_memory_t to)
{
    const dnnl_memory_desc_t *fmd, *tmd;
    dnnl_memory_get_memory_desc(from, &fmd);
    dnnl_memory_get_memory_desc(to, &tmd);
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t r;
    if (dnnl_reorder_primitive_desc_create(&pd, fmd, eng, tmd, eng, NULL) != dnnl_success)
        return;
    dnnl_primitive_create(&r, pd);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    dnnl_primitive_execute(r, stream, 2, args);
    dnnl_stream_wait(stream);
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(pd);
}

/* oneDNN's convolutions for cs in `type` (f32 or bf16): forward, weight
 * gradient, input gradient. Sources and results NHWC in `type`; weights
 * in the layout the primitive asks for. Forward fp32 output is checked
 * against tandem's. */
static void dnnl_convs(const conv_shape *cs, dnnl_data_type_t type, const float *ref_y, conv_job *base)
{
    const char *tname = type == dnnl_f32 ? "fp32" : "bf16";
    const size_t esz = type == dnnl_f32 ? 4 : 2;
    const double flops = 2.0 * (double)base->gemm.m * (double)base->gemm.n * (double)base->gemm.k;
    dnnl_dims_t src_d = {cs->n, cs->c, cs->h, cs->w}, dst_d = {cs->n, cs->o, cs->h, cs->w}, wei_d = {cs->o, cs->c, 3, 3};
    dnnl_dims_t strides = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t src_md, dst_md, wei_any, wei_user_md;
    dnnl_memory_desc_init_by_tag(&src_md, 4, src_d, type, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&dst_md, 4, dst_d, type, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&wei_any, 4, wei_d, type, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei_user_md, 4, wei_d, dnnl_f32, dnnl_hwio);
    dnnl_convolution_desc_t fd;
    dnnl_primitive_desc_t fpd;
    char label[64];
    snprintf(label, sizeof label, "oneDNN %s", tname);
    if (dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src_md, &wei_any,
                                           NULL, &dst_md, strides, pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL) != dnnl_success) {
        row("conv", cs->label, label, flops, 0, 0, "forward: no implementation on this CPU");
        return;
    }
    const size_t src_n = (size_t)(cs->n * cs->h * cs->w * cs->c), dst_n = (size_t)(cs->n * cs->h * cs->w * cs->o);
    void *src = malloc(src_n * esz), *dst = malloc(dst_n * esz), *gdst = malloc(dst_n * esz), *gsrc = malloc(src_n * esz);
    /* Inputs in `type`: fp32 copies, or bf16 by truncation (timing only). */
    for (size_t i = 0; i < src_n; i++) {
        if (esz == 4)
            ((float *)src)[i] = base->x[i];
        else {
            uint32_t u;
            memcpy(&u, &base->x[i], 4);
            ((uint16_t *)src)[i] = (uint16_t)(u >> 16);
        }
    }
    for (size_t i = 0; i < dst_n; i++) {
        if (esz == 4)
            ((float *)gdst)[i] = base->gy[i];
        else {
            uint32_t u;
            memcpy(&u, &base->gy[i], 4);
            ((uint16_t *)gdst)[i] = (uint16_t)(u >> 16);
        }
    }
    const dnnl_memory_desc_t *wei_md = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    dnnl_memory_t m_src = mem_of(&src_md, src), m_dst = mem_of(&dst_md, dst), m_wei = mem_of(wei_md, NULL);
    dnnl_memory_t m_wuser = mem_of(&wei_user_md, (void *)base->w);
    reorder(m_wuser, m_wei);
    conv_job j = *base;
    dnnl_primitive_create(&j.prim, fpd);
    j.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m_src};
    j.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m_wei};
    j.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, m_dst};
    j.nargs = 3;
    double t = time_median(run_prim, &j);
    double err = esz == 4 ? nmse(dst, ref_y, dst_n) : 0;
    char note[160];
    snprintf(note, sizeof note, "forward, %s", impl_of(fpd));
    row("conv", cs->label, label, flops, t, err, note);
    dnnl_primitive_destroy(j.prim);

    /* Weight gradient. */
    dnnl_convolution_desc_t wd;
    dnnl_primitive_desc_t wpd;
    dnnl_memory_t m_gdst = mem_of(&dst_md, gdst);
    if (dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &src_md, &wei_any, NULL, &dst_md,
                                                    strides, pad, pad) == dnnl_success &&
        dnnl_primitive_desc_create(&wpd, &wd, NULL, eng, fpd) == dnnl_success) {
        const dnnl_memory_desc_t *gw_md = dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 0);
        dnnl_memory_t m_gw = mem_of(gw_md, NULL);
        dnnl_primitive_create(&j.prim, wpd);
        j.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m_src};
        j.args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m_gdst};
        j.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, m_gw};
        j.nargs = 3;
        t = time_median(run_prim, &j);
        snprintf(note, sizeof note, "weight gradient, %s", impl_of(wpd));
        row("conv", cs->label, label, flops, t, 0, note);
        dnnl_primitive_destroy(j.prim);
        dnnl_memory_destroy(m_gw);
        dnnl_primitive_desc_destroy(wpd);
    } else
        row("conv", cs->label, label, flops, 0, 0, "weight gradient: no implementation");

    /* Input gradient. */
    dnnl_convolution_desc_t dd;
    dnnl_primitive_desc_t dpd;
    if (cs->input_grad) {
        dnnl_memory_t m_gsrc = mem_of(&src_md, gsrc);
        if (dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &src_md, &wei_any, &dst_md,
                                                     strides, pad, pad) == dnnl_success &&
            dnnl_primitive_desc_create(&dpd, &dd, NULL, eng, fpd) == dnnl_success) {
            const dnnl_memory_desc_t *bw_md = dnnl_primitive_desc_query_md(dpd, dnnl_query_weights_md, 0);
            dnnl_memory_t m_bw = mem_of(bw_md, NULL);
            reorder(m_wuser, m_bw);
            dnnl_primitive_create(&j.prim, dpd);
            j.args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m_gdst};
            j.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m_bw};
            j.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m_gsrc};
            j.nargs = 3;
            t = time_median(run_prim, &j);
            snprintf(note, sizeof note, "input gradient, %s", impl_of(dpd));
            row("conv", cs->label, label, flops, t, 0, note);
            dnnl_primitive_destroy(j.prim);
            dnnl_memory_destroy(m_bw);
            dnnl_primitive_desc_destroy(dpd);
        } else
            row("conv", cs->label, label, flops, 0, 0, "input gradient: no implementation");
        dnnl_memory_destroy(m_gsrc);
    }
    dnnl_memory_destroy(m_gdst);
    dnnl_memory_destroy(m_src);
    dnnl_memory_destroy(m_dst);
    dnnl_memory_destroy(m_wei);
    dnnl_memory_destroy(m_wuser);
    dnnl_primitive_desc_destroy(fpd);
    free(src);
    free(dst);
    free(gdst);
    free(gsrc);
}

typedef struct pool_job {
    td_pool_params p;
    const float *x;
    float *y, *gy, *gx;
} pool_job;

static void pool_forward(void *arg)
{
    pool_job *j = arg;
    td_reference_pool(j->y, j->x, &j->p);
}

static void pool_backward(void *arg)
{
    pool_job *j = arg;
    td_reference_pool_backward(j->gx, j->x, j->y, j->gy, &j->p);
}

/* 2x2 max pooling, stride 2, of an NHWC [n, h, w, c] image: tandem's
 * reference kernels and oneDNN's pooling (forward training, with the
 * workspace its backward needs). Rates in GB/s of the input read. */
static void pool_rows(const char *label, int64_t n, int64_t h, int64_t w, int64_t c)
{
    const size_t xn = (size_t)(n * h * w * c), yn = xn / 4;
    float *x = malloc(xn * 4), *y = malloc(yn * 4), *gy = malloc(yn * 4), *gx = malloc(xn * 4), *y2 = malloc(yn * 4);
    fill(x, xn, 99u);
    fill(gy, yn, 98u);
    pool_job j = {.p = {.geo = {.n = n, .h = h, .w = w, .c = c, .kh = 2, .kw = 2, .oh = h / 2, .ow = w / 2,
                                .stride_h = 2, .stride_w = 2, .dil_h = 1, .dil_w = 1},
                        .mode = TD_POOL_MAX},
                  .x = x, .y = y, .gy = gy, .gx = gx};
    const double bytes = (double)xn * 4;
    double t = time_median(pool_forward, &j);
    row("pool", label, "tandem reference", bytes, t, 0, "max 2x2 forward; GFLOP/s column = GB/s of x");
    t = time_median(pool_backward, &j);
    row("pool", label, "tandem reference", bytes, t, 0, "max 2x2 backward; GFLOP/s column = GB/s of x");

    dnnl_dims_t xd = {n, c, h, w}, yd = {n, c, h / 2, w / 2}, st = {2, 2}, ker = {2, 2}, pad = {0, 0}, dil = {0, 0};
    dnnl_memory_desc_t x_md, y_md;
    dnnl_memory_desc_init_by_tag(&x_md, 4, xd, dnnl_f32, dnnl_nhwc);
    dnnl_memory_desc_init_by_tag(&y_md, 4, yd, dnnl_f32, dnnl_nhwc);
    dnnl_pooling_v2_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, bpd;
    if (dnnl_pooling_v2_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &x_md, &y_md, st, ker, dil,
                                          pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL) != dnnl_success) {
        row("pool", label, "oneDNN", bytes, 0, 0, "no implementation");
        return;
    }
    const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
    dnnl_memory_t m_x = mem_of(&x_md, x), m_y = mem_of(&y_md, y2), m_ws = ws_md ? mem_of(ws_md, NULL) : NULL;
    conv_job cj = {.nargs = m_ws ? 3 : 2};
    dnnl_primitive_create(&cj.prim, fpd);
    cj.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m_x};
    cj.args[1] = (dnnl_exec_arg_t){DNNL_ARG_DST, m_y};
    cj.args[2] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, m_ws};
    t = time_median(run_prim, &cj);
    char note[160];
    snprintf(note, sizeof note, "max 2x2 forward, %s", impl_of(fpd));
    row("pool", label, "oneDNN", bytes, t, nmse(y2, y, yn), note);
    dnnl_primitive_destroy(cj.prim);
    dnnl_memory_t m_gy = mem_of(&y_md, gy), m_gx = mem_of(&x_md, gx);
    if (dnnl_pooling_v2_backward_desc_init(&bd, dnnl_pooling_max, &x_md, &y_md, st, ker, dil, pad, pad) ==
            dnnl_success &&
        dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd) == dnnl_success) {
        dnnl_primitive_create(&cj.prim, bpd);
        cj.args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m_gy};
        cj.args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m_gx};
        cj.args[2] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, m_ws};
        t = time_median(run_prim, &cj);
        snprintf(note, sizeof note, "max 2x2 backward, %s", impl_of(bpd));
        row("pool", label, "oneDNN", bytes, t, 0, note);
        dnnl_primitive_destroy(cj.prim);
        dnnl_primitive_desc_destroy(bpd);
    }
    dnnl_memory_destroy(m_x);
    dnnl_memory_destroy(m_y);
    dnnl_memory_destroy(m_gy);
    dnnl_memory_destroy(m_gx);
    if (m_ws)
        dnnl_memory_destroy(m_ws);
    dnnl_primitive_desc_destroy(fpd);
    free(x);
    free(y);
    free(gy);
    free(gx);
    free(y2);
}

static void conv_table(void)
{
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        const conv_shape *cs = &convs[i];
        conv_job j = {.cs = cs,
                      .geo = {.n = cs->n, .h = cs->h, .w = cs->w, .c = cs->c, .kh = 3, .kw = 3, .oh = cs->h,
                              .ow = cs->w, .stride_h = 1, .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1,
                              .dil_w = 1}};
        const int64_t m = cs->n * cs->h * cs->w, k = 9 * cs->c, n = cs->o;
        j.gemm = (td_gemm_params){.m = m, .n = n, .k = k, .lda = k, .ldb = n, .ldc = n, .alpha = 1.0f};
        const size_t xn = (size_t)(m * cs->c), wn = (size_t)(k * n), yn = (size_t)(m * n), pn = (size_t)(m * k);
        float *x = malloc(xn * 4), *w = malloc(wn * 4), *gy = malloc(yn * 4);
        j.patches = malloc(pn * 4);
        j.gpatches = malloc(pn * 4);
        j.y = malloc(yn * 4);
        j.gw = malloc(wn * 4);
        j.gx = malloc(xn * 4);
        fill(x, xn, 5u);
        fill(w, wn, 6u);
        fill(gy, yn, 8u);
        j.x = x;
        j.w = w;
        j.gy = gy;
        const double flops = 2.0 * (double)m * (double)n * (double)k;
        for (int own = 1; own >= 0; own--) {
            if (own && threads != 1)
                continue;
            j.own = own;
            const char *name = own ? "im2col+GEMM own-fma" : "im2col+GEMM openblas";
            row("conv", cs->label, name, flops, time_median(im2col_forward, &j), 0, "forward");
            row("conv", cs->label, name, flops, time_median(im2col_weight_grad, &j), 0, "weight gradient");
            if (cs->input_grad)
                row("conv", cs->label, name, flops, time_median(im2col_input_grad, &j), 0,
                    "input gradient");
        }
        im2col_forward(&j); /* OpenBLAS's y: the check for oneDNN's */
        dnnl_convs(cs, dnnl_f32, j.y, &j);
        dnnl_convs(cs, dnnl_bf16, j.y, &j);
        pool_rows(cs->label, cs->n, cs->h, cs->w, cs->o);
        free(x);
        free(w);
        free(gy);
        free(j.patches);
        free(j.gpatches);
        free(j.y);
        free(j.gw);
        free(j.gx);
    }
}

int main(int argc, char **argv)
{
    const char *blis_path = NULL, *only = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps_wanted = atoi(argv[++i]);
        else if (strcmp(argv[i], "--blis") == 0 && i + 1 < argc)
            blis_path = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--threads N] [--reps N] [--blis LIBBLIS.so] [--only gemm|conv] [--json]\n",
                    argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || reps_wanted < 1 || reps_wanted > 64) {
        fprintf(stderr, "blas_compare: --threads 1..64 and --reps 1..64\n");
        return 2;
    }
    /* OpenMP (oneDNN's libgomp, linked in) reads its thread count and wait
     * policy when the process starts: set them and start again. Passive:
     * OpenMP threads left spinning after a primitive would take the core
     * from whatever runs next (measured: halved OpenBLAS's rate after it). */
    char nthreads[16];
    snprintf(nthreads, sizeof nthreads, "%d", threads);
    const char *omp = getenv("OMP_NUM_THREADS"), *wait = getenv("OMP_WAIT_POLICY");
    if (!omp || strcmp(omp, nthreads) != 0 || !wait || strcmp(wait, "passive") != 0) {
        setenv("OMP_NUM_THREADS", nthreads, 1);
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
        perror("blas_compare: execv /proc/self/exe");
        return 1;
    }
    setenv("BLIS_NUM_THREADS", nthreads, 1);
    openblas_set_num_threads(threads);
    if (blis_path) {
        void *h = dlopen(blis_path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!h) {
            fprintf(stderr, "blas_compare: %s\n", dlerror());
            return 1;
        }
        blis_sgemm = (cblas_sgemm_fn *)dlsym(h, "cblas_sgemm");
        void (*set_threads)(long) = (void (*)(long))dlsym(h, "bli_thread_set_num_threads");
        if (set_threads)
            set_threads(threads);
        if (!blis_sgemm)
            fprintf(stderr, "blas_compare: %s has no cblas_sgemm: no BLIS rows\n", blis_path);
        /* BLIS picks a sub-configuration per CPU (BLIS_ARCH_TYPE overrides). */
        int (*arch_id)(void) = (int (*)(void))dlsym(h, "bli_arch_query_id");
        const char *(*arch_name)(int) = (const char *(*)(int))dlsym(h, "bli_arch_string");
        if (arch_id && arch_name)
            snprintf(blis_name, sizeof blis_name, "blis (%s)", arch_name(arch_id()));
    }
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "blas_compare: oneDNN has no CPU engine\n");
        return 1;
    }
    const char *core = getenv("OPENBLAS_CORETYPE");
    if (!json)
        printf("# threads %d, OPENBLAS_CORETYPE %s, own-fma path %s\n", threads, core ? core : "(unset)",
               td_cpu_gemm_own_fma_isa_name(td_cpu_gemm_own_fma_best_isa()));
    if (strcmp(only, "conv") != 0)
        gemm_table();
    if (strcmp(only, "gemm") != 0)
        conv_table();
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
