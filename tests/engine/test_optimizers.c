#include <criterion/criterion.h>
#include <stdlib.h>
#include <stdio.h>
#include "engine_test_util.h"
Test(optimizers, zero_params)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, getenv("SPEC"));
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 6, 5, &x, &y, &w, &loss);
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, 0, NULL, NULL, &t));
    int64_t xd[2] = {6, 5}, wd[2] = {5, 1}, yd[2] = {6, 1};
    td_tensor *tw = test_tensor_f32(ctx, 2, wd, (const float[]){2, 2, 2, 2, 2});
    fprintf(stderr, "set: %d\n", td_trainer_set_param(t, w, tw));
    td_tensor *tx = test_tensor_f32(ctx, 2, xd, (const float[30]){1}), *ty = test_tensor(ctx, TD_F32, 2, yd);
    td_binding b[2] = {{x, tx}, {y, ty}};
    float l;
    TEST_OK(ctx, td_trainer_step(t, 2, b, &l));
    fprintf(stderr, "loss %g\n", l);
    bool same; TEST_OK(ctx, td_trainer_replicas_identical(t, &same));
    td_tensor_destroy(tx); td_tensor_destroy(ty); td_tensor_destroy(tw);
    td_context_destroy(ctx);
}
