/* GEMM: CLBlast or tandem's own kernel (kernels/opencl/gemm.cl), chosen per
 * call at segment_create by a rule measured with bench/gemm.c. CLBlast is
 * optional at run time: where libclblast is not installed every call takes
 * the own kernel.
 *
 * The rule (prefers_clblast): see the measurement notes at
 * the function. TD_OPENCL_GEMM=clblast|own overrides it, for benchmarks and
 * for tests that must exercise both paths. */
#include "cl_internal.h"

#include <stdlib.h>
#include <string.h>

#define TD_GEMM_L 8 /* must match kernels/opencl/gemm.cl */

static bool prefers_clblast(const td_device *dev, const td_gemm_params *p)
{
    /* Measured on PoCL 3.1 (pthread device, 2 cores; bench/gemm.c, medians
     * of 3-4 quiet runs, bench/RESULTS.md): the own kernel beats CLBlast
     * 1.5.3 up to 512^3 (256^3: 21.2 vs 12.1 GFLOP/s; 512^3: 23.6 vs 13.0;
     * 128x256x784: 19.1 vs 10.6) but has no k-tiling, and at 1024^3 CLBlast
     * is ahead (8.2 vs 7.7). So CPU-type devices use CLBlast from 1024^3 of
     * work up. On GPUs CLBlast's tuned kernels are expected to win except at
     * tiny sizes, where its launch and pad/transpose passes dominate; 64^3 is
     * the cut. The GPU half is not measured yet (no GPU was at hand):
     * re-measure there with bench/gemm.c. */
    double work = (double)p->m * (double)p->n * (double)p->k;
    if (dev->type & CL_DEVICE_TYPE_CPU)
        return work >= 1024.0 * 1024.0 * 1024.0;
    return work >= 64.0 * 64.0 * 64.0;
}

static td_cl_gemm_mode mode_from_env(void)
{
    const char *s = getenv("TD_OPENCL_GEMM");
    if (s && strcmp(s, "clblast") == 0)
        return TD_CL_GEMM_CLBLAST;
    if (s && strcmp(s, "own") == 0)
        return TD_CL_GEMM_OWN;
    return TD_CL_GEMM_AUTO;
}

static td_status clblast_fail(td_device *dev, CLBlastStatusCode code, const char *call)
{
    /* CLBlast passes OpenCL's own codes through unchanged. */
    if (code > -1000)
        return td_opencl_device_fail(dev, (cl_int)code, call);
    return td_error_set(dev->ctx, code == CLBlastTempBufferAllocFailure ? TD_ERR_OUT_OF_MEMORY : TD_ERR_BACKEND,
                        "%s: CLBlast status %d", call, (int)code);
}

static CLBlastTranspose trans(int32_t t)
{
    return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

td_status td_opencl_gemm_prepare(td_device *dev, const td_kernel_call *call, td_cl_gemm *g)
{
    const td_gemm_params *p = &call->p.gemm;
    memset(g, 0, sizeof *g);
    g->p = *p;
    g->a = call->a.buffer->mem;
    g->b = call->b.buffer->mem;
    g->c = call->out.buffer->mem;
    g->a_off = (size_t)call->a.offset;
    g->b_off = (size_t)call->b.offset;
    g->c_off = (size_t)call->out.offset;
    if (p->m == 0 || p->n == 0) {
        g->noop = true;
        return TD_OK;
    }
    td_cl_gemm_mode mode = mode_from_env();
    /* CLBlast is opened at run time and may be absent: the own kernel then
     * takes every call, unless a caller insisted on CLBlast. */
    const td_cl_runtime *runtime = td_cl_runtime_load();
    if (mode == TD_CL_GEMM_CLBLAST && !runtime->clblast)
        return td_error_set(dev->ctx, TD_ERR_BACKEND_UNAVAILABLE,
                            "TD_OPENCL_GEMM=clblast but CLBlast is not loaded: %s", runtime->clblast_reason);
    /* CLBlast rejects k == 0; the own kernel handles it (C = beta C). */
    /* bf16 (inputs rounded as they are loaded) is the own kernel's: CLBlast
     * has no such GEMM, and rounded copies of A and B would cost passes
     * and memory the own kernel does not need. */
    g->use_clblast = p->k > 0 && runtime->clblast && p->precision == TD_GEMM_FP32 &&
                     (mode == TD_CL_GEMM_CLBLAST || (mode == TD_CL_GEMM_AUTO && prefers_clblast(dev, p)));
    if (g->use_clblast) {
        size_t need = 0;
        CLBlastStatusCode s = td_clblast.SGemmTempBufferSize(
            CLBlastLayoutRowMajor, trans(p->trans_a), trans(p->trans_b), (size_t)p->m, (size_t)p->n,
            (size_t)p->k, g->a_off, (size_t)p->lda, g->b_off, (size_t)p->ldb, g->c_off, (size_t)p->ldc,
            &dev->queue, &need);
        if (s != CLBlastSuccess)
            return clblast_fail(dev, s, "CLBlastSGemmTempBufferSize");
        if (need > dev->gemm_temp_bytes) {
            cl_int err;
            cl_mem mem = td_cl.CreateBuffer(dev->context, CL_MEM_READ_WRITE, need, NULL, &err);
            if (err != CL_SUCCESS)
                return td_opencl_device_fail(dev, err, "clCreateBuffer(CLBlast temp)");
            /* Released only when the commands still using it are done. */
            if (dev->gemm_temp)
                td_cl.ReleaseMemObject(dev->gemm_temp);
            dev->gemm_temp = mem;
            dev->gemm_temp_bytes = need;
        }
        return TD_OK;
    }
    static const char *const names[8] = {"td_gemm_nn",      "td_gemm_nt",      "td_gemm_tn",      "td_gemm_tt",
                                         "td_gemm_bf16_nn", "td_gemm_bf16_nt", "td_gemm_bf16_tn", "td_gemm_bf16_tt"};
    cl_ulong c_off = g->c_off, a_off = g->a_off, b_off = g->b_off;
    cl_long m = p->m, n = p->n, k = p->k, lda = p->lda, ldb = p->ldb, ldc = p->ldc;
    cl_float alpha = p->alpha, beta = p->beta;
    const td_cl_arg args[] = {TD_CL_ARG(g->c), TD_CL_ARG(c_off), TD_CL_ARG(g->a), TD_CL_ARG(a_off),
                              TD_CL_ARG(g->b), TD_CL_ARG(b_off), TD_CL_ARG(m),     TD_CL_ARG(n),
                              TD_CL_ARG(k),    TD_CL_ARG(lda),   TD_CL_ARG(ldb),   TD_CL_ARG(ldc),
                              TD_CL_ARG(alpha), TD_CL_ARG(beta)};
    td_status st = td_opencl_kernel_create(dev, names[(p->precision == TD_GEMM_BF16 ? 4 : 0) + (p->trans_a ? 2 : 0) + (p->trans_b ? 1 : 0)], args,
                                           (cl_uint)(sizeof args / sizeof args[0]), &g->kernel);
    if (st != TD_OK)
        return st;
    g->local[0] = TD_GEMM_L;
    g->local[1] = TD_GEMM_L;
    g->global[0] = td_cl_round_up(((size_t)p->n + 4 * TD_GEMM_L - 1) / (4 * TD_GEMM_L) * TD_GEMM_L, TD_GEMM_L);
    g->global[1] = td_cl_round_up(((size_t)p->m + 4 * TD_GEMM_L - 1) / (4 * TD_GEMM_L) * TD_GEMM_L, TD_GEMM_L);
    return TD_OK;
}

td_status td_opencl_gemm_enqueue(td_device *dev, td_cl_gemm *g)
{
    if (g->noop)
        return TD_OK;
    if (!g->use_clblast) {
        TD_CL_TRY(dev, td_cl.EnqueueNDRangeKernel(dev->queue, g->kernel, 2, NULL, g->global, g->local, 0, NULL, NULL),
                  "clEnqueueNDRangeKernel(td_gemm)");
        return TD_OK;
    }
    const td_gemm_params *p = &g->p;
    CLBlastStatusCode s = td_clblast.SgemmWithTempBuffer(
        CLBlastLayoutRowMajor, trans(p->trans_a), trans(p->trans_b), (size_t)p->m, (size_t)p->n,
        (size_t)p->k, p->alpha, g->a, g->a_off, (size_t)p->lda, g->b, g->b_off, (size_t)p->ldb, p->beta,
        g->c, g->c_off, (size_t)p->ldc, &dev->queue, NULL, dev->gemm_temp);
    if (s != CLBlastSuccess)
        return clblast_fail(dev, s, "CLBlastSgemmWithTempBuffer");
    return TD_OK;
}

void td_opencl_gemm_release(td_cl_gemm *g)
{
    if (g->kernel)
        td_cl.ReleaseKernel(g->kernel);
    g->kernel = NULL;
}
