/* The registry of backends compiled in, and device discovery through them. */
#include <stdio.h>
#include <string.h>

#include "td_mesh_internal.h"

#define TD_BACKEND_ENTRY(name) &td_##name##_backend,
static const td_backend_ops *const backends[] = {TD_BACKENDS_BUILT(TD_BACKEND_ENTRY)};
#undef TD_BACKEND_ENTRY

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

bool td_runtime_backend_known(const char *name)
{
#define TD_BACKEND_NAME(name) #name,
    static const char *const known[] = {TD_BACKENDS_KNOWN(TD_BACKEND_NAME)};
#undef TD_BACKEND_NAME
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i], name) == 0)
            return true;
    return false;
}

const char *td_runtime_backend_names(void)
{
    return TD_BACKEND_NAMES;
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
    td_backend_info full;
    td_backend_info_init(&full);
    snprintf(full.name, sizeof full.name, "%s", backends[i]->name);
    td_status s = backends[i]->probe(ctx, &full);
    if (s != TD_OK)
        return s;
    full.struct_size = sizeof full; /* whatever the backend did with it */
    return TD_STRUCT_WRITE(ctx, "td_backend_query", td_backend_info, info, &full);
}

td_status td_backend_info_init(td_backend_info *info)
{
    if (!info)
        return TD_ERR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    return TD_OK;
}

td_status td_device_info_init(td_device_info *info)
{
    if (!info)
        return TD_ERR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    return TD_OK;
}

td_status td_device_query(td_context *ctx, const char *backend, uint32_t device, td_device_info *info)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!backend || !info)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_device_query: backend or info is NULL");
    const td_backend_ops *ops = td_runtime_backend_named(backend);
    if (!ops) {
        char built[128];
        size_t used = 0;
        built[0] = '\0';
        for (uint32_t i = 0; i < td_runtime_backend_count() && used < sizeof built; i++)
            used += (size_t)snprintf(built + used, sizeof built - used, "%s%s", i ? ", " : "", backends[i]->name);
        return td_error_set(ctx, TD_ERR_BACKEND_UNAVAILABLE, "backend '%s' is not built into this library (built in: %s)",
                            backend, built);
    }
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
    td_device_info full;
    td_device_info_init(&full);
    if ((s = ops->describe(ctx, device, &full)) != TD_OK)
        return s;
    full.struct_size = sizeof full; /* whatever the backend did with it */
    return TD_STRUCT_WRITE(ctx, "td_device_query", td_device_info, info, &full);
}
