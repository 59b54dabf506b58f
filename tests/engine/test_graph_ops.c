/* The op table's machinery as a user meets it: the new elementwise ops'
 * values on a mesh against host formulas, arena reuse by liveness, and the
 * size, transpose and label checks. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#define TEST_PI 3.14159265358979323846 /* M_PI is POSIX, not C11 (mingw-w64 hides it) */

#include "engine_test_util.h"
#include "td_program_internal.h"

static td_context *ctx;
static td_graph *g;

static void setup(void)
{
    ctx = test_context(0);
    TEST_OK(ctx, td_graph_create(ctx, &g));
}

static void teardown(void)
{
    td_context_destroy(ctx);
}

TestSuite(graph_ops, .init = setup, .fini = teardown);

/* Runs p (on a cpu:2 mesh) with its input x, a [64, 64] tensor, set to
 * element i = (i mod period) / divisor - shift, and checks output 0 on both
 * devices against want(x) element by element. */
static void run_and_expect_each_element(td_program *p, td_node x, int period, float divisor, float shift,
                                        float (*want)(float))
{
    const int64_t dims[2] = {64, 64};
    td_tensor *xv = test_tensor(ctx, TD_F32, 2, dims);
    for (int i = 0; i < 4096; i++)
        test_f32(xv)[i] = (float)(i % period) / divisor - shift;
    td_binding b = {x, xv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 2; d++) {
        td_tensor *out = test_read_output(ctx, p, 0, d);
        for (int i = 0; i < 4096; i++) {
            const float w = want(test_f32(xv)[i]);
            cr_assert(test_close(test_f32(out)[i], w, 1e-5, 1e-6), "device %u element %d: %g, expected %g", d, i,
                      (double)test_f32(out)[i], (double)w);
        }
        td_tensor_destroy(out);
    }
}

static float tanh_24_times(float x)
{
    for (int k = 0; k < 24; k++)
        x = tanhf(x);
    return x;
}

Test(graph_ops, a_deep_chain_reuses_arena_memory)
{
    /* 24 chained tanh nodes of 4096 floats: without reuse the arena would
     * hold all 25 tensors; by liveness it needs the input, the output and
     * one intermediate at a time. The output must still be right. */
    const int64_t dims[2] = {64, 64};
    td_node x, cur;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_REPLICATED, &x));
    cur = x;
    for (int i = 0; i < 24; i++)
        TEST_OK(ctx, td_graph_tanh(g, cur, &cur));
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_program *p = test_compile(ctx, g, mesh, 1, &cur);
    uint64_t arena = td_program_plan(p)->size[TD_BUF_ARENA];
    cr_assert_leq(arena, 4 * 4096, "arena holds %llu floats for a chain of 4096-float tensors",
                  (unsigned long long)arena);
    run_and_expect_each_element(p, x, 97, 24.0f, 2.0f, tanh_24_times);
}

/* tanh(relu(relu(t) + t)), t = tanh(x): the next test's chain. */
static float chain_with_a_reread(float x)
{
    const float t = tanhf(x), u = t > 0.0f ? t : 0.0f, v = u + t;
    return tanhf(v > 0.0f ? v : 0.0f);
}

Test(graph_ops, elementwise_nodes_write_over_what_they_read_last)
{
    /* t = tanh(x); u = relu(t); v = u + t; w = relu(v); out = tanh(w).
     * t is read again after the ReLU, so u must get memory of its own;
     * v, w and out each read their input last and take it over. The
     * arena then holds two tensors of 4096 floats at once, no more: t
     * beside x, then u in x's memory (free once t is computed; an input is
     * never written over, so t gets memory of its own). Without writing
     * over inputs it would hold three (v beside u and t). */
    const int64_t dims[2] = {64, 64};
    td_node x, t, u, v, w, out;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_REPLICATED, &x));
    TEST_OK(ctx, td_graph_tanh(g, x, &t));
    TEST_OK(ctx, td_graph_relu(g, t, &u));
    TEST_OK(ctx, td_graph_add(g, u, t, &v));
    TEST_OK(ctx, td_graph_relu(g, v, &w));
    TEST_OK(ctx, td_graph_tanh(g, w, &out));
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_program *p = test_compile(ctx, g, mesh, 1, &out);
    const td_plan *plan = td_program_plan(p);
    uint64_t arena = plan->size[TD_BUF_ARENA];
    cr_assert_eq(arena, 2 * 4096, "arena holds %llu floats, expected 8192: two tensors of 4096",
                 (unsigned long long)arena);
    cr_assert_neq(plan->slots[t].offset, plan->slots[x].offset, "t = tanh(x) is over the input x");
    cr_assert_neq(plan->slots[u].offset, plan->slots[t].offset, "u is over t, which v reads after it");
    cr_assert_eq(plan->slots[v].offset, plan->slots[u].offset, "v = u + t is not over u");
    cr_assert_eq(plan->slots[w].offset, plan->slots[v].offset, "w = relu(v) is not over v");
    cr_assert_eq(plan->slots[out].offset, plan->slots[w].offset, "out = tanh(w) is not over w");
    run_and_expect_each_element(p, x, 89, 20.0f, 2.2f, chain_with_a_reread);
}

Test(graph_ops, a_bias_add_writes_over_a_convolution_whose_patches_live_on)
{
    /* c = conv(x, k), z = c + b, y = relu(z), loss = sum(y), with the
     * kernel's gradient: z takes over c's output, whose last reader it is,
     * while c's patches (its extra memory) stay for the kernel gradient
     * (TD_OPF_READS_FIRST_EXTRA); y takes over z. */
    const int64_t xd[4] = {2, 6, 6, 2}, kd[4] = {3, 3, 2, 4}, bd[1] = {4};
    td_node x, k, b, c, z, y, loss, grads[2];
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 4, xd, TD_REPLICATED, &x));
    TEST_OK(ctx, td_graph_param(g, "k", 4, kd, &k));
    TEST_OK(ctx, td_graph_param(g, "b", 1, bd, &b));
    TEST_OK(ctx, td_graph_conv2d(g, x, k, NULL, &c));
    TEST_OK(ctx, td_graph_add(g, c, b, &z));
    TEST_OK(ctx, td_graph_relu(g, z, &y));
    TEST_OK(ctx, td_graph_sum(g, y, 0, NULL, false, &loss));
    const td_node params[2] = {k, b};
    TEST_OK(ctx, td_graph_value_and_grad(g, loss, 2, params, grads));
    const td_node outputs[3] = {loss, grads[0], grads[1]};
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    td_program *p = test_compile(ctx, g, mesh, 3, outputs);
    const td_plan *plan = td_program_plan(p);
    const uint64_t out_elems = 2 * 6 * 6 * 4;
    cr_assert_eq(plan->slots[z].offset, plan->slots[c].offset, "z = c + b at %llu, not over c at %llu",
                 (unsigned long long)plan->slots[z].offset, (unsigned long long)plan->slots[c].offset);
    cr_assert_eq(plan->slots[y].offset, plan->slots[z].offset, "y = relu(z) is not over z");
    cr_assert_eq(plan->slots[c].extra, plan->slots[c].offset + out_elems, "c's patches moved");
    td_tensor *kv = test_tensor(ctx, TD_F32, 4, kd), *bv = test_tensor(ctx, TD_F32, 1, bd);
    td_tensor *xv = test_tensor(ctx, TD_F32, 4, xd);
    for (int i = 0; i < 72; i++)
        test_f32(kv)[i] = (float)((i * 7) % 11) / 11.0f - 0.4f;
    for (int i = 0; i < 4; i++)
        test_f32(bv)[i] = 0.1f * (float)i - 0.15f;
    for (int i = 0; i < 144; i++)
        test_f32(xv)[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    TEST_OK(ctx, td_program_set_param(p, k, kv));
    TEST_OK(ctx, td_program_set_param(p, b, bv));
    td_binding bind = {x, xv};
    TEST_OK(ctx, td_program_run(p, 1, &bind));
    /* The kernel's gradient on the host (SAME padding, 1 each side; the
     * ReLU's mask from the pre-activation): read from the patches after z
     * and y were written over c. */
    double want[72] = {0};
    for (int window = 0; window < 2 * 6 * 6; window++) {
        const int n = window / 36, oy = window / 6 % 6, ox = window % 6;
        double tap[18]; /* the window's patch, (i, j, ch) order; 0 in the padding */
        for (int t = 0; t < 18; t++) {
            const int yy = oy + t / 6 - 1, xx = ox + t / 2 % 3 - 1;
            tap[t] = yy < 0 || yy >= 6 || xx < 0 || xx >= 6 ? 0.0 : test_f32(xv)[((n * 6 + yy) * 6 + xx) * 2 + t % 2];
        }
        for (int o = 0; o < 4; o++) {
            double pre = test_f32(bv)[o];
            for (int t = 0; t < 18; t++)
                pre += tap[t] * test_f32(kv)[t * 4 + o];
            for (int t = 0; pre > 0.0 && t < 18; t++)
                want[t * 4 + o] += tap[t];
        }
    }
    td_tensor *gk = test_read_output(ctx, p, 1, 0);
    for (int i = 0; i < 72; i++)
        cr_assert(test_close(test_f32(gk)[i], want[i], 1e-4, 1e-5), "kernel gradient [%d] = %g, expected %g", i,
                  (double)test_f32(gk)[i], want[i]);
    td_tensor_destroy(gk);
}

typedef struct unary_case {
    td_status (*build)(td_graph *, td_node, td_node *);
    double (*ref)(double);
    const char *name;
} unary_case;

static double ref_neg(double x) { return -x; }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_exp(double x) { return exp(x); }
static double ref_tanh(double x) { return tanh(x); }
static double ref_sqrt_abs(double x) { return sqrt(x); }

Test(graph_ops, unary_ops_match_their_formulas_on_a_sharded_batch)
{
    const unary_case cases[] = {
        {td_graph_neg, ref_neg, "neg"},       {td_graph_sigmoid, ref_sigmoid, "sigmoid"},
        {td_graph_silu, ref_silu, "silu"},    {td_graph_exp, ref_exp, "exp"},
        {td_graph_tanh, ref_tanh, "tanh"},    {td_graph_sqrt, ref_sqrt_abs, "sqrt"},
    };
    const int64_t dims[2] = {6, 5};
    td_node x, outs[6];
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_SHARDED, &x));
    for (int c = 0; c < 6; c++)
        TEST_OK(ctx, cases[c].build(g, x, &outs[c]));
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    td_program *p = test_compile(ctx, g, mesh, 6, outs);
    td_tensor *xv = test_tensor(ctx, TD_F32, 2, dims);
    for (int i = 0; i < 30; i++)
        test_f32(xv)[i] = 0.05f + (float)i * 0.11f;
    td_binding b = {x, xv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (int c = 0; c < 6; c++)
        for (uint32_t d = 0; d < 3; d++) {
            td_tensor *out = test_read_output(ctx, p, (uint32_t)c, d);
            for (int i = 0; i < 10; i++) {
                double want = cases[c].ref(test_f32(xv)[d * 10 + i]);
                cr_assert(test_close(test_f32(out)[i], want, 2e-6, 1e-7), "%s on device %u element %d: %g, expected %g",
                          cases[c].name, d, i, (double)test_f32(out)[i], want);
            }
            td_tensor_destroy(out);
        }
}

Test(graph_ops, gelu_both_forms_match_jax_formulas)
{
    const int64_t dims[1] = {9};
    td_node x, exact, approx, outs[2];
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, dims, TD_REPLICATED, &x));
    TEST_OK(ctx, td_graph_gelu(g, x, false, &exact));
    TEST_OK(ctx, td_graph_gelu(g, x, true, &approx));
    outs[0] = exact, outs[1] = approx;
    td_program *p = test_compile(ctx, g, test_mesh(ctx, "cpu:1"), 2, outs);
    td_tensor *xv = test_tensor(ctx, TD_F32, 1, dims);
    for (int i = 0; i < 9; i++)
        test_f32(xv)[i] = -4.0f + (float)i;
    td_binding b = {x, xv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    td_tensor *e = test_read_output(ctx, p, 0, 0), *a = test_read_output(ctx, p, 1, 0);
    for (int i = 0; i < 9; i++) {
        double v = test_f32(xv)[i];
        double we = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
        double wa = 0.5 * v * (1.0 + tanh(sqrt(2.0 / TEST_PI) * (v + 0.044715 * v * v * v)));
        cr_assert(test_close(test_f32(e)[i], we, 1e-6, 1e-7), "gelu(%g) = %g, expected %g", v, (double)test_f32(e)[i], we);
        cr_assert(test_close(test_f32(a)[i], wa, 1e-6, 1e-7), "gelu~(%g) = %g, expected %g", v, (double)test_f32(a)[i],
                  wa);
    }
    td_tensor_destroy(e);
    td_tensor_destroy(a);
}

Test(graph_ops, transpose_moves_every_element)
{
    const int64_t dims[3] = {2, 3, 4};
    const int32_t perm[3] = {1, 2, 0};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 3, dims, TD_REPLICATED, &x));
    TEST_OK(ctx, td_graph_transpose(g, x, 3, perm, &y));
    uint32_t rank;
    int64_t out_dims[4];
    TEST_OK(ctx, td_graph_shape(g, y, &rank, out_dims));
    cr_assert(rank == 3 && out_dims[0] == 3 && out_dims[1] == 4 && out_dims[2] == 2);
    td_program *p = test_compile(ctx, g, test_mesh(ctx, "cpu:1"), 1, &y);
    td_tensor *xv = test_tensor(ctx, TD_F32, 3, dims);
    for (int i = 0; i < 24; i++)
        test_f32(xv)[i] = (float)i;
    td_binding b = {x, xv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    td_tensor *out = test_read_output(ctx, p, 0, 0);
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 2; i++)
                cr_assert_eq(test_f32(out)[(j * 4 + k) * 2 + i], (float)((i * 3 + j) * 4 + k));
    td_tensor_destroy(out);
}

Test(graph_ops, bad_permutations_are_refused)
{
    const int64_t dims[2] = {2, 3};
    const int32_t repeated[2] = {0, 0}, out_of_range[2] = {0, 2}, ok[2] = {1, 0};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_REPLICATED, &x));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "perm[1] = 0", td_graph_transpose(g, x, 2, repeated, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "perm[1] = 2", td_graph_transpose(g, x, 2, out_of_range, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "rank 2", td_graph_transpose(g, x, 3, ok, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "NULL", td_graph_transpose(g, x, 2, NULL, &y));
}

Test(graph_ops, sizes_whose_bytes_overflow_are_refused_where_they_are_built)
{
    td_node p, x, y;
    const int64_t huge[2] = {(int64_t)1 << 31, (int64_t)1 << 31};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "more elements than a tensor may hold",
               td_graph_param(g, "w", 2, huge, &p));
    const int64_t near_max[1] = {INT64_MAX - 1};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "more elements", td_graph_param(g, "v", 1, near_max, &p));
    const int64_t product[4] = {(int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 20};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "more elements", td_graph_input(g, "x", TD_F32, 4, product,
                                                                             TD_REPLICATED, &x));
    /* Broadcasting two legal shapes into an illegal one. */
    const int64_t col[2] = {(int64_t)1 << 30, 1}, row[2] = {1, (int64_t)1 << 30};
    TEST_OK(ctx, td_graph_input(g, "col", TD_F32, 2, col, TD_REPLICATED, &x));
    TEST_OK(ctx, td_graph_input(g, "row", TD_F32, 2, row, TD_REPLICATED, &y));
    td_node z;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "more elements", td_graph_add(g, x, y, &z));
    const int64_t reshape[2] = {INT64_MAX / 2, 4};
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "overflows", td_graph_reshape(g, x, 2, reshape, &z));
}

Test(graph_ops, labels_reshaped_on_the_way_to_the_loss_are_still_range_checked)
{
    const int64_t ld[2] = {4, 3}, lab2[2] = {4, 1}, lab1[1] = {-1};
    td_node logits, labels, flat, loss;
    TEST_OK(ctx, td_graph_input(g, "logits", TD_F32, 2, ld, TD_SHARDED, &logits));
    TEST_OK(ctx, td_graph_input(g, "labels", TD_I32, 2, lab2, TD_SHARDED, &labels));
    TEST_OK(ctx, td_graph_reshape(g, labels, 1, lab1, &flat));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(g, logits, flat, &loss));
    td_program *p = test_compile(ctx, g, test_mesh(ctx, "cpu:2"), 1, &loss);
    td_tensor *lv = test_tensor(ctx, TD_F32, 2, ld), *yv = test_tensor(ctx, TD_I32, 2, lab2);
    const int32_t bad[4] = {0, 2, 3, 1};
    memcpy(test_i32(yv), bad, sizeof bad);
    td_binding b[2] = {{logits, lv}, {labels, yv}};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "label 3 at index 2", td_program_run(p, 2, b));
    test_i32(yv)[2] = 2;
    TEST_OK(ctx, td_program_run(p, 2, b));
}

Test(graph_ops, accuracy_from_raw_bytes_argmax_and_equal)
{
    /* u8 "images" cast on the device, logits = pixels, accuracy as a node. */
    const int64_t xd[2] = {6, 4}, yd[1] = {6};
    td_node x, y, xf, am, yf, eq, acc;
    TEST_OK(ctx, td_graph_input(g, "x", TD_U8, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "y", TD_I32, 1, yd, TD_SHARDED, &y));
    TEST_OK(ctx, td_graph_cast(g, x, &xf));
    TEST_OK(ctx, td_graph_argmax(g, xf, &am));
    TEST_OK(ctx, td_graph_cast(g, y, &yf));
    TEST_OK(ctx, td_graph_equal(g, am, yf, &eq));
    TEST_OK(ctx, td_graph_mean(g, eq, 0, NULL, false, &acc));
    td_node outs[3] = {acc, am, xf};
    td_program *p = test_compile(ctx, g, test_mesh(ctx, "cpu:3"), 3, outs);
    td_tensor *xv = test_tensor(ctx, TD_U8, 2, xd), *yv = test_tensor(ctx, TD_I32, 1, yd);
    uint8_t *px;
    td_tensor_data(xv, (void **)&px);
    const uint8_t pixels[24] = {1, 9, 3, 4, 200, 7, 255, 0, 5, 5, 2, 1, 0, 0, 0, 1, 9, 8, 7, 6, 3, 250, 250, 2};
    memcpy(px, pixels, sizeof pixels);
    const int32_t labels[6] = {1, 2, 0, 3, 1, 1}; /* argmax: 1, 2, 0, 3, 0, 1 -> 5 of 6 right */
    memcpy(test_i32(yv), labels, sizeof labels);
    td_binding b[2] = {{x, xv}, {y, yv}};
    TEST_OK(ctx, td_program_run(p, 2, b));
    float mean_acc = 0;
    for (uint32_t d = 0; d < 3; d++) {
        td_tensor *a = test_read_output(ctx, p, 0, d), *m = test_read_output(ctx, p, 1, d),
                  *f = test_read_output(ctx, p, 2, d);
        mean_acc += test_f32(a)[0] / 3.0f;
        for (int r = 0; r < 2; r++) {
            const int32_t want_arg[6] = {1, 2, 0, 3, 0, 1};
            cr_assert_eq(test_f32(m)[r], (float)want_arg[d * 2 + r], "device %u row %d", d, r);
            for (int c = 0; c < 4; c++)
                cr_assert_eq(test_f32(f)[r * 4 + c], (float)pixels[(d * 2 + r) * 4 + c]);
        }
        td_tensor_destroy(a);
        td_tensor_destroy(m);
        td_tensor_destroy(f);
    }
    cr_assert_float_eq(mean_acc, 5.0f / 6.0f, 1e-6);
    td_tensor_destroy(xv);
    td_tensor_destroy(yv);
}

Test(graph_ops, conv_and_pool_refuse_bad_shapes_with_the_values)
{
    const int64_t xd[4] = {2, 5, 5, 3}, k_bad_c[4] = {3, 3, 4, 8}, k_big[4] = {7, 7, 3, 8}, k3[3] = {3, 3, 3};
    const int64_t x3d[3] = {5, 5, 3};
    td_node x, x3, kc, kb, k3n, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 4, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "x3", TD_F32, 3, x3d, TD_REPLICATED, &x3));
    TEST_OK(ctx, td_graph_param(g, "kc", 4, k_bad_c, &kc));
    TEST_OK(ctx, td_graph_param(g, "kb", 4, k_big, &kb));
    TEST_OK(ctx, td_graph_param(g, "k3", 3, k3, &k3n));
    td_conv2d_options o;
    td_conv2d_options_init(&o);
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "channels", td_graph_conv2d(g, x, kc, &o, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "rank 3", td_graph_conv2d(g, x, k3n, &o, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "rank 3", td_graph_conv2d(g, x3, kb, &o, &y));
    o.padding = TD_PADDING_VALID;
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "larger than the padded input", td_graph_conv2d(g, x, kb, &o, &y));
    o.padding = TD_PADDING_SAME;
    TEST_OK(ctx, td_graph_conv2d(g, x, kb, &o, &y)); /* SAME pads a 7x7 window over 5x5 */
    o.stride[1] = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "stride[1] is 0", td_graph_conv2d(g, x, kb, &o, &y));
    td_conv2d_options_init(&o);
    o.dilation[0] = -1;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "dilation[0] is -1", td_graph_conv2d(g, x, kb, &o, &y));
    td_conv2d_options_init(&o);
    o.padding = TD_PADDING_EXPLICIT;
    o.pad[2] = -2;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "pad[2] is -2", td_graph_conv2d(g, x, kb, &o, &y));
    td_pool2d_options po;
    td_pool2d_options_init(&po);
    po.window[0] = 6;
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "larger than the padded input", td_graph_max_pool2d(g, x, &po, &y));
    po.window[0] = 2;
    po.stride[0] = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "stride[0] is 0", td_graph_avg_pool2d(g, x, &po, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "rank 3", td_graph_avg_pool2d(g, x3, NULL, &y));
    td_node lab;
    const int64_t ld[1] = {2};
    TEST_OK(ctx, td_graph_input(g, "u8labels", TD_U8, 1, ld, TD_SHARDED, &lab));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "expected i32", td_graph_softmax_cross_entropy(g, x, lab, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "is u8, expected f32 or i32",
               td_pmap_compile(g, test_mesh(ctx, "cpu:1"), 1, &lab, &(td_program *){NULL}));
}

Test(graph_ops, layer_norm_layer_normalises_each_row)
{
    const int64_t xd[2] = {4, 5};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_layer_layer_norm(g, "ln", x, 1e-6f, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "already used", td_layer_layer_norm(g, "ln", x, 1e-6f, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "epsilon", td_graph_layer_norm(g, x, TD_NO_NODE, TD_NO_NODE, -1.0f, &y));
    td_program *p = test_compile(ctx, g, test_mesh(ctx, "cpu:2"), 1, &y);
    td_tensor *xv = test_tensor(ctx, TD_F32, 2, xd);
    for (int i = 0; i < 20; i++)
        test_f32(xv)[i] = (float)((i * 7) % 11) - 3.0f;
    td_binding b = {x, xv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 2; d++) {
        td_tensor *out = test_read_output(ctx, p, 0, d);
        for (int r = 0; r < 2; r++) {
            const float *row = test_f32(xv) + (d * 2 + r) * 5;
            double mean = 0, var = 0;
            for (int c = 0; c < 5; c++)
                mean += row[c] / 5.0;
            for (int c = 0; c < 5; c++)
                var += (row[c] - mean) * (row[c] - mean) / 5.0;
            for (int c = 0; c < 5; c++) {
                double want = (row[c] - mean) / sqrt(var + 1e-6);
                cr_assert(test_close(test_f32(out)[r * 5 + c], want, 1e-5, 1e-6), "device %u row %d col %d", d, r, c);
            }
        }
        td_tensor_destroy(out);
    }
}

/* ---- the transformer's ops: values against host loops ---- */

Test(graph_ops, batch_matmul_multiplies_each_batch_entry_with_every_transpose)
{
    /* a [2, 3, 2, 4] (or its last two axes swapped), b likewise [.., 4, 3]:
     * every (ta, tb) against a host triple loop, on cpu:2. */
    for (int flags = 0; flags < 4; flags++) {
        bool ta = flags & 1, tb = flags & 2;
        td_graph *gg;
        TEST_OK(ctx, td_graph_create(ctx, &gg));
        const int64_t M = 2, K = 4, N = 3, batches = 6;
        int64_t ad[4] = {2, 3, ta ? K : M, ta ? M : K}, bd[4] = {2, 3, tb ? N : K, tb ? K : N};
        td_node a, b, y;
        TEST_OK(ctx, td_graph_input(gg, "a", TD_F32, 4, ad, TD_REPLICATED, &a));
        TEST_OK(ctx, td_graph_input(gg, "b", TD_F32, 4, bd, TD_REPLICATED, &b));
        TEST_OK(ctx, td_graph_batch_matmul(gg, a, b, ta, tb, &y));
        td_tensor *av = test_tensor(ctx, TD_F32, 4, ad), *bv = test_tensor(ctx, TD_F32, 4, bd);
        for (int i = 0; i < batches * M * K; i++) {
            test_f32(av)[i] = (float)((i * 7) % 11) - 5.0f;
            test_f32(bv)[i < batches * K * N ? i : 0] = (float)((i * 5) % 13) - 6.0f;
        }
        td_mesh *mesh = test_mesh(ctx, "cpu:2");
        td_program *p = test_compile(ctx, gg, mesh, 1, &y);
        td_binding bind[2] = {{a, av}, {b, bv}};
        TEST_OK(ctx, td_program_run(p, 2, bind));
        td_tensor *out = test_read_output(ctx, p, 0, 1);
        for (int64_t e = 0; e < batches; e++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    float want = 0.0f;
                    for (int64_t k = 0; k < K; k++) {
                        float x = test_f32(av)[e * M * K + (ta ? k * M + m : m * K + k)];
                        float z = test_f32(bv)[e * K * N + (tb ? n * K + k : k * N + n)];
                        want += x * z; /* small integers: exact in any order */
                    }
                    float got = test_f32(out)[(e * M + m) * N + n];
                    cr_assert_eq(got, want, "ta %d tb %d batch %lld [%lld, %lld]: %g, expected %g", ta, tb,
                                 (long long)e, (long long)m, (long long)n, (double)got, (double)want);
                }
        td_tensor_destroy(out);
        td_tensor_destroy(av);
        td_tensor_destroy(bv);
        td_program_destroy(p);
        td_graph_destroy(gg);
    }
}

Test(graph_ops, causal_softmax_sees_only_earlier_keys)
{
    /* [2, 3, 3] scores: row i of each block is the softmax of its first
     * i + 1 entries, and exactly 0 after them even where the scores are
     * huge or NaN (they are never read). */
    const int64_t dims[3] = {2, 3, 3};
    td_node s, y;
    TEST_OK(ctx, td_graph_input(g, "scores", TD_F32, 3, dims, TD_SHARDED, &s));
    TEST_OK(ctx, td_graph_causal_softmax(g, s, &y));
    td_tensor *sv = test_tensor(ctx, TD_F32, 3, dims);
    for (int i = 0; i < 18; i++)
        test_f32(sv)[i] = (float)(i % 5) * 0.5f - 1.0f;
    test_f32(sv)[1] = NAN;    /* block 0, row 0, key 1: masked */
    test_f32(sv)[11] = 1e30f; /* block 1, row 0, key 2: masked */
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_program *p = test_compile(ctx, g, mesh, 1, &y);
    td_binding b = {s, sv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 2; d++) {
        td_tensor *out = test_read_output(ctx, p, 0, d);
        const float *row0 = test_f32(sv) + d * 9;
        for (int i = 0; i < 3; i++) {
            double m = -INFINITY, sum = 0.0;
            for (int j = 0; j <= i; j++)
                m = fmax(m, row0[i * 3 + j]);
            for (int j = 0; j <= i; j++)
                sum += exp(row0[i * 3 + j] - m);
            for (int j = 0; j < 3; j++) {
                float got = test_f32(out)[i * 3 + j];
                if (j > i)
                    cr_assert_eq(got, 0.0f, "device %u row %d key %d is masked: %g, expected 0", d, i, j, (double)got);
                else
                    cr_assert(test_close(got, exp(row0[i * 3 + j] - m) / sum, 1e-6, 1e-7),
                              "device %u row %d key %d: %g", d, i, j, (double)got);
            }
        }
        td_tensor_destroy(out);
    }
    td_tensor_destroy(sv);
}

Test(graph_ops, transformer_ops_refuse_bad_shapes_with_the_values)
{
    const int64_t d3[3] = {2, 3, 4}, d2[2] = {4, 5}, d34[3] = {2, 4, 3}, sq[3] = {2, 3, 4};
    td_node a, b, c, y, x;
    TEST_OK(ctx, td_graph_param(g, "a", 3, d3, &a));
    TEST_OK(ctx, td_graph_param(g, "b", 2, d2, &b));
    TEST_OK(ctx, td_graph_param(g, "c", 3, d34, &c));
    /* ranks differ; inner dims differ (b not transposed); scores not square */
    cr_assert_eq(td_graph_batch_matmul(g, a, b, false, false, &y), TD_ERR_SHAPE_MISMATCH);
    cr_assert_eq(td_graph_batch_matmul(g, a, c, false, true, &y), TD_ERR_SHAPE_MISMATCH);
    cr_assert(strstr(td_last_error(ctx), "inner dimensions"), "%s", td_last_error(ctx));
    TEST_OK(ctx, td_graph_batch_matmul(g, a, c, false, false, &y));
    cr_assert_eq(td_graph_matmul_transposed(g, a, b, &y), TD_ERR_SHAPE_MISMATCH);
    TEST_OK(ctx, td_graph_param(g, "scores", 3, sq, &x));
    cr_assert_eq(td_graph_causal_softmax(g, x, &y), TD_ERR_SHAPE_MISMATCH);
    cr_assert(strstr(td_last_error(ctx), "[..., T, T]"), "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_slice(g, a, 1, 2, &y), TD_ERR_SHAPE_MISMATCH);
    cr_assert(strstr(td_last_error(ctx), "[1, 3)"), "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_slice(g, a, -1, 1, &y), TD_ERR_INVALID_ARGUMENT);
}

Test(graph_ops, a_slice_of_the_sharded_batch_is_refused_when_compiled)
{
    const int64_t dims[2] = {4, 3};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_slice(g, x, 0, 1, &y)); /* whole on one device: fine globally */
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_program *p = NULL;
    cr_assert_eq(td_pmap_compile(g, mesh, 1, &y, &p), TD_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(td_last_error(ctx), "sharded"), "%s", td_last_error(ctx));
}
