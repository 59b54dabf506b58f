/* The registry of backends compiled in, and device discovery through them. */
#include <stdio.h>
#include <string.h>

#include "td_mesh_internal.h"

static const td_backend_ops *const backends[] = {
    &td_cpu_backend,
#ifdef TD_HAVE_OPENCL
    &td_opencl_backend,
#endif
#ifdef TD_HAVE_VULKAN
    &td_vulkan_backend,
#endif
};

uint32_t td_runtime_backend_count(void)
{
    return (uint32_t)(sizeof backends / sizeof backends[0]);
}

const td_backend_ops *td_runtime_backend(uint32_t i)
{
    return i < td_runtime_backend_count() ? backends[i] : NULL;
}

const td_backend_ops *td_runtime_backend_named(const char *name)
{
    for (uint32_t i = 0; i < td_runtime_backend_count(); i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

td_status td_backend_count(td_context *ctx, uint32_t *count)
{
    if (!ctx || !count)
        return ctx ? td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_backend_count: count is NULL")
                   : TD_ERR_INVALID_ARGUMENT;
    *count = td_runtime_backend_count();
    return TD_OK;
}

td_status td_backend_query(td_context *ctx, uint32_t i, td_backend_info *info)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!info)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_backend_query: info is NULL");
    if (i >= td_runtime_backend_count())
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_backend_query: backend index %u out of range (this build has %u)", i,
                            td_runtime_backend_count());
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", backends[i]->name);
    return backends[i]->probe(ctx, info);
}

td_status td_device_query(td_context *ctx, const char *backend, uint32_t device, td_device_info *info)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!backend || !info)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_device_query: backend or info is NULL");
    const td_backend_ops *ops = td_runtime_backend_named(backend);
    if (!ops)
        return td_error_set(ctx, TD_ERR_BACKEND_UNAVAILABLE,
                            "backend '%s' is not built into this library (built in: cpu%s%s)", backend,
                            td_runtime_backend_named("opencl") ? ", opencl" : "",
                            td_runtime_backend_named("vulkan") ? ", vulkan" : "");
    td_backend_info binfo;
    memset(&binfo, 0, sizeof binfo);
    td_status s = ops->probe(ctx, &binfo);
    if (s != TD_OK)
        return s;
    if (!binfo.available)
        return td_error_set(ctx, TD_ERR_BACKEND_UNAVAILABLE, "backend '%s' has no usable device: %s", backend,
                            binfo.reason);
    if (device >= binfo.device_count)
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "%s device %u does not exist (%u found)", backend, device,
                            binfo.device_count);
    memset(info, 0, sizeof *info);
    return ops->describe(ctx, device, info);
}
