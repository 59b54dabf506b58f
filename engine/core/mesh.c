/* Meshes: parsing a device spec ("opencl:0,vulkan:0x2,cpu:4") into an ordered
 * list of opened devices, each with its worker thread. */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_mesh_internal.h"

#define TD_MESH_MAX_DEVICES 256

typedef struct spec_entry {
    const td_backend_ops *ops;
    uint32_t index;
    td_device_faults faults;
    char item[128];
} spec_entry;

typedef struct spec_list {
    spec_entry entries[TD_MESH_MAX_DEVICES];
    uint32_t count;
} spec_list;

static td_status push(td_context *ctx, spec_list *list, const td_backend_ops *ops, uint32_t index, const char *spec)
{
    if (list->count >= TD_MESH_MAX_DEVICES)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "device spec '%s' selects more than %d devices", spec,
                            TD_MESH_MAX_DEVICES);
    spec_entry *e = &list->entries[list->count++];
    memset(e, 0, sizeof *e);
    e->ops = ops;
    e->index = index;
    e->faults.slow = 1.0f; /* item and faults: set by parse_spec for the whole item */
    return TD_OK;
}

/* Digits into *out, held at UINT64_MAX when they run past it: a number
 * too large is then refused by the caller's range check, in the same words
 * as one just past the range, rather than as a syntax error. */
static int parse_uint(const char **p, uint64_t *out)
{
    const char *s = *p;
    if (!isdigit((unsigned char)*s))
        return 0;
    uint64_t v = 0;
    while (isdigit((unsigned char)*s)) {
        const uint64_t digit = (uint64_t)(*s - '0');
        v = v > (UINT64_MAX - digit) / 10 ? UINT64_MAX : v * 10 + digit;
        s++;
    }
    *out = v;
    *p = s;
    return 1;
}

/* A device count of a spec item (cpu:N, INDEXxN): 1 to the mesh's limit,
 * TD_ERR_NO_DEVICE for 0 and TD_ERR_INVALID_ARGUMENT past the limit, the
 * same status as a spec whose items add up past it. */
static td_status check_count(td_context *ctx, const char *item, uint64_t count)
{
    if (count == 0)
        return td_error_set(ctx, TD_ERR_NO_DEVICE, "device spec item '%s' selects zero devices", item);
    if (count > TD_MESH_MAX_DEVICES)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "device spec item '%s' selects more than %d devices, expected 1 to %d", item,
                            TD_MESH_MAX_DEVICES, TD_MESH_MAX_DEVICES);
    return TD_OK;
}

/* Probes a backend and reports it as the spec's problem when unusable. */
static td_status probe_for_spec(td_context *ctx, const td_backend_ops *ops, const char *item, td_backend_info *info)
{
    memset(info, 0, sizeof *info);
    td_status s = ops->probe(ctx, info);
    if (s != TD_OK)
        return s;
    if (!info->available)
        return td_error_set(ctx, TD_ERR_BACKEND_UNAVAILABLE, "device spec item '%s': backend %s has no usable device (%s)",
                            item, ops->name, info->reason);
    return TD_OK;
}

/* The first simulated backend in listing order: what "all" falls back to. */
static const td_backend_ops *first_simulated_backend(void)
{
    for (uint32_t b = 0; b < td_runtime_backend_count(); b++)
        if (td_runtime_backend(b)->caps & TD_BACKEND_SIMULATED)
            return td_runtime_backend(b);
    return NULL;
}

static td_status parse_item(td_context *ctx, const char *item, spec_list *list)
{
    if (strcmp(item, "all") == 0) {
        uint32_t before = list->count;
        for (uint32_t b = 0; b < td_runtime_backend_count(); b++) {
            const td_backend_ops *ops = td_runtime_backend(b);
            if (ops->caps & TD_BACKEND_SIMULATED)
                continue;
            td_backend_info info;
            memset(&info, 0, sizeof info);
            td_status s = ops->probe(ctx, &info);
            if (s != TD_OK || !info.available)
                continue;
            for (uint32_t d = 0; d < info.device_count; d++)
                if ((s = push(ctx, list, ops, d, item)) != TD_OK)
                    return s;
        }
        td_error_clear(ctx); /* a backend without a driver is not an error for "all" */
        if (list->count > before)
            return TD_OK;
        const td_backend_ops *simulated = first_simulated_backend();
        if (!simulated)
            return td_error_set(ctx, TD_ERR_NO_DEVICE, "device spec item 'all' found no device");
        return push(ctx, list, simulated, 0, item);
    }

    char name[32];
    size_t n = strcspn(item, ":");
    if (n == 0 || n >= sizeof name)
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "device spec item '%s' names no backend (expected %s or all)",
                            item, td_runtime_backend_names());
    memcpy(name, item, n);
    name[n] = '\0';
    const char *sel = item[n] == ':' ? item + n + 1 : NULL;

    const td_backend_ops *ops = td_runtime_backend_named(name);
    if (!ops) {
        if (td_runtime_backend_known(name))
            return td_error_set(ctx, TD_ERR_BACKEND_UNAVAILABLE,
                                "device spec item '%s': the %s backend is not built into this library", item, name);
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "unknown backend '%s' in device spec item '%s' (expected %s or all)",
                            name, item, td_runtime_backend_names());
    }

    if (ops->caps & TD_BACKEND_SIMULATED) {
        /* cpu:N is N simulated devices, all on the host. */
        uint64_t count = 1;
        if (sel) {
            const char *p = sel;
            if (!parse_uint(&p, &count) || *p != '\0')
                return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE,
                                    "device spec item '%s': expected %s:N with N a device count", item, name);
        }
        td_status counted = check_count(ctx, item, count);
        if (counted != TD_OK)
            return counted;
        for (uint64_t i = 0; i < count; i++) {
            td_status s = push(ctx, list, ops, 0, item);
            if (s != TD_OK)
                return s;
        }
        return TD_OK;
    }

    td_backend_info info;
    td_status s = probe_for_spec(ctx, ops, item, &info);
    if (s != TD_OK)
        return s;
    if (!sel || strcmp(sel, "*") == 0) {
        for (uint32_t d = 0; d < info.device_count; d++)
            if ((s = push(ctx, list, ops, d, item)) != TD_OK)
                return s;
        return TD_OK;
    }
    const char *p = sel;
    uint64_t index = 0, copies = 1;
    if (!parse_uint(&p, &index))
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE,
                            "device spec item '%s': expected %s:INDEX, %s:INDEXxCOUNT or %s:*", item, name, name, name);
    if (*p == 'x') {
        p++;
        if (!parse_uint(&p, &copies))
            return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "device spec item '%s': expected a count after 'x'", item);
    }
    if (*p != '\0')
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "device spec item '%s': unexpected '%s'", item, p);
    if (index >= info.device_count)
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE,
                            "device spec item '%s': %s device %.*s does not exist (%u found)", item, name,
                            (int)strspn(sel, "0123456789"), sel, info.device_count);
    if ((s = check_count(ctx, item, copies)) != TD_OK)
        return s;
    for (uint64_t i = 0; i < copies; i++)
        if ((s = push(ctx, list, ops, (uint32_t)index, item)) != TD_OK)
            return s;
    return TD_OK;
}

/* The options after '@' in `item`: "slow=F;fail=N;hang=N", any subset. */
static td_status parse_faults(td_context *ctx, const char *item, const char *options, td_device_faults *f)
{
    f->slow = 1.0f;
    const char *p = options;
    /* Each option once: a second value would silently win over the first. */
    char seen[3][64] = {"", "", ""}; /* slow, fail, hang: as given */
    for (;;) {
        size_t n = strcspn(p, ";");
        char option[64];
        if (n == 0 || n >= sizeof option)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "device spec item '%s': %s option after '@', expected slow=F, fail=N or hang=N "
                                "separated by ';'",
                                item, n == 0 ? "an empty" : "a too long");
        memcpy(option, p, n);
        option[n] = '\0';
        char *eq = strchr(option, '=');
        char *end = NULL;
        const int which = !eq || eq - option != 4 ? -1
                          : strncmp(option, "slow", 4) == 0 ? 0
                          : strncmp(option, "fail", 4) == 0 ? 1
                          : strncmp(option, "hang", 4) == 0 ? 2
                                                            : -1;
        if (which >= 0 && seen[which][0])
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "device spec item '%s': option '%.4s' is given twice ('%s' and '%s'), expected each of "
                                "slow, fail and hang at most once",
                                item, option, seen[which], option);
        if (which >= 0)
            memcpy(seen[which], option, n + 1);
        if (which == 0) {
            double v = strtod(eq + 1, &end);
            if (end == eq + 1 || *end || !(v >= 1.0 && v <= 1000.0))
                return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                    "device spec item '%s': '%s', expected slow=F with F a factor from 1 to 1000", item,
                                    option);
            f->slow = (float)v;
        } else if (which > 0) {
            const char *q = eq + 1;
            uint64_t v = 0;
            if (!parse_uint(&q, &v) || *q || v == 0 || v > UINT32_MAX)
                return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                    "device spec item '%s': '%s', expected %.4s=N with N from 1 to %u (the device's "
                                    "Nth run)",
                                    item, option, option, (unsigned)UINT32_MAX);
            if (which == 1)
                f->fail_at = (uint32_t)v;
            else
                f->hang_at = (uint32_t)v;
        } else {
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "device spec item '%s': unknown option '%s', expected slow=F, fail=N or hang=N", item,
                                option);
        }
        if (p[n] != ';')
            return TD_OK;
        p += n + 1;
    }
}

static td_status parse_spec(td_context *ctx, const char *spec, spec_list *list)
{
    char item[128];
    const char *p = spec;
    list->count = 0;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m > 0 && isspace((unsigned char)p[m - 1]))
            m--;
        if (m == 0)
            return td_error_set(ctx, TD_ERR_NO_DEVICE, "device spec '%s' has an empty item", spec);
        if (m >= sizeof item)
            return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "device spec item '%.*s...' is too long", 32, p);
        memcpy(item, p, m);
        item[m] = '\0';
        for (char *c = item; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        /* "cpu:1@slow=3;fail=50": the devices, then their injected faults. */
        char *at = strchr(item, '@');
        td_device_faults faults = {1.0f, 0, 0};
        char whole[128];
        snprintf(whole, sizeof whole, "%s", item);
        if (at) {
            td_status s = parse_faults(ctx, whole, at + 1, &faults);
            if (s != TD_OK)
                return s;
            *at = '\0';
        }
        const uint32_t first = list->count;
        td_status s = parse_item(ctx, item, list);
        if (s != TD_OK)
            return s;
        for (uint32_t i = first; i < list->count; i++) {
            list->entries[i].faults = faults;
            snprintf(list->entries[i].item, sizeof list->entries[i].item, "%s", whole);
        }
        if (p[n] != ',')
            break;
        p += n + 1;
    }
    return TD_OK;
}

static void mesh_release(td_owned *self);

/* With no worker in a job (the caller drives the device): a device whose
 * queue still runs work past the timeout is left open, its driver
 * objects with it, rather than torn down under that work. */
static void close_device(td_mesh *mesh, uint32_t i)
{
    td_mesh_device *md = &mesh->devices[i];
    if (!md->dev || (md->wedged && td_mesh_device_drain(mesh, i) == TD_ERR_TIMEOUT))
        return;
    md->ops->close(md->dev);
}
_Static_assert(offsetof(td_mesh, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

td_status td_mesh_create(td_context *ctx, const char *spec, td_mesh **out)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!out)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_mesh_create: out is NULL");
    *out = NULL;
    if (!spec)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_mesh_create: spec is NULL");
    if (strlen(spec) >= sizeof(((td_mesh *)0)->spec))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "device spec is longer than %zu characters",
                            sizeof(((td_mesh *)0)->spec) - 1);

    spec_list *list = td_alloc(ctx, sizeof *list);
    if (!list)
        return TD_OOM(ctx, "the device spec", sizeof *list);
    td_status s = parse_spec(ctx, spec, list);
    if (s != TD_OK) {
        td_free(ctx, list);
        return s;
    }

    td_mesh *mesh = td_alloc_zeroed(ctx, sizeof *mesh);
    td_mesh_device *devices = td_alloc_zeroed(ctx, sizeof *devices * list->count);
    if (!mesh || !devices) {
        size_t bytes = sizeof *devices * list->count;
        td_free(ctx, mesh);
        td_free(ctx, devices);
        td_free(ctx, list);
        return TD_OOM(ctx, "the mesh", bytes);
    }
    mesh->ctx = ctx;
    mesh->devices = devices;
    snprintf(mesh->spec, sizeof mesh->spec, "%s", spec);
    td_context_own(ctx, &mesh->owned, "mesh", NULL, mesh_release);

    for (uint32_t i = 0; i < list->count && s == TD_OK; i++) {
        const spec_entry *e = &list->entries[i];
        uint32_t instance = 0;
        for (uint32_t j = 0; j < i; j++)
            instance += list->entries[j].ops == e->ops && list->entries[j].index == e->index;
        td_mesh_device *md = &devices[i];
        md->ops = e->ops;
        md->position = i;
        md->faults = e->faults;
        snprintf(md->item, sizeof md->item, "%s", e->item);
        s = e->ops->describe(ctx, e->index, &md->info);
        if (s == TD_OK)
            s = e->ops->open(ctx, e->index, instance, &md->dev);
        if (s == TD_OK)
            mesh->count = i + 1;
    }
    td_free(ctx, list);
    if (s == TD_OK)
        s = td_worker_pool_create(mesh);
    if (s == TD_OK)
        s = td_context_mesh_created(ctx, mesh); /* across processes: learn the global mesh */
    if (s != TD_OK) {
        td_mesh_destroy(mesh);
        return s;
    }
    *out = mesh;
    return TD_OK;
}

/* What runs on the mesh goes first, while the workers can still release
 * its device memory; then the workers stop (joined, so no tandem thread is
 * left inside a kernel or a driver once this returns), and only then does
 * what a worker of a job that timed out could still touch go: the
 * collectives, the devices. */
static void mesh_release(td_owned *self)
{
    td_mesh *mesh = (td_mesh *)self;
    td_context *ctx = mesh->ctx;
    td_context_release_children(ctx, mesh);
    if (!td_worker_pool_destroy(mesh)) {
        td_owned_abandon(self); /* the mesh, its devices and the context stay for the stranded worker */
        return;
    }
    if (mesh->collectives)
        mesh->collectives_destroy(mesh->collectives); /* releases staging: before the devices close */
    for (uint32_t i = 0; i < mesh->count; i++)
        close_device(mesh, i);
    td_free(ctx, mesh->devices);
    for (uint32_t g = 0; g < mesh->job_generation; g++)
        td_free(ctx, mesh->job_kept[g]);
    td_free(ctx, mesh->job_kept);
    td_free(ctx, mesh->job_kept_count);
    mesh->job_kept = NULL;
    mesh->job_kept_count = NULL;
    mesh->job_generation = 0;
    mesh->devices = NULL;
    mesh->count = 0;
}

td_status td_mesh_note_job_keep(td_mesh *mesh, const bool *kept, uint32_t count)
{
    td_context *ctx = mesh->ctx;
    const uint32_t g = mesh->job_generation;
    bool *copy = td_alloc(ctx, sizeof *copy * (count + 1));
    bool **lists = td_alloc(ctx, sizeof *lists * (g + 1));
    uint32_t *counts = td_alloc(ctx, sizeof *counts * (g + 1));
    if (!copy || !lists || !counts) {
        td_free(ctx, copy);
        td_free(ctx, lists);
        td_free(ctx, counts);
        return TD_OOM(ctx, "the job's kept devices", sizeof *copy * count);
    }
    memcpy(copy, kept, sizeof *copy * count);
    if (g) {
        memcpy(lists, mesh->job_kept, sizeof *lists * g);
        memcpy(counts, mesh->job_kept_count, sizeof *counts * g);
    }
    lists[g] = copy;
    counts[g] = count;
    td_free(ctx, mesh->job_kept);
    td_free(ctx, mesh->job_kept_count);
    mesh->job_kept = lists;
    mesh->job_kept_count = counts;
    mesh->job_generation = g + 1;
    return TD_OK;
}

td_status td_mesh_replan(td_mesh *mesh)
{
    td_status s = td_mesh_wait_quiet(mesh);
    if (s != TD_OK)
        return s;
    td_context_shrink_children(mesh->ctx, mesh);
    if (mesh->collectives) {
        mesh->collectives_destroy(mesh->collectives);
        mesh->collectives = NULL;
    }
    return TD_OK;
}

td_status td_mesh_drop_lost(td_mesh *mesh, uint32_t *dropped)
{
    td_context *ctx = mesh->ctx;
    *dropped = 0;
    td_status s = td_mesh_wait_quiet(mesh);
    if (s != TD_OK)
        return s;
    uint32_t survivors = 0;
    char names[256];
    size_t used = 0;
    names[0] = '\0';
    for (uint32_t i = 0; i < mesh->count; i++) {
        if (!td_mesh_device_lost(mesh, i))
            survivors++;
        else if (used < sizeof names)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%u (%s)", used ? ", " : "", i,
                                     mesh->devices[i].item);
    }
    if (survivors == mesh->count)
        return TD_OK;
    if (survivors == 0)
        return td_error_set(ctx, TD_ERR_DEVICE_LOST, "every device of the mesh '%s' was lost: %s", mesh->spec, names);
    /* Everything planned for these positions lets go of its device memory
     * while the workers are all still there. */
    td_context_shrink_children(ctx, mesh);
    if (!td_worker_pool_destroy(mesh)) /* a worker did not stop: nothing more can be done safely */
        return td_error_set(ctx, TD_ERR_TIMEOUT, "a worker of mesh '%s' did not stop; its devices cannot be dropped",
                            mesh->spec);
    if (mesh->collectives) {
        mesh->collectives_destroy(mesh->collectives); /* staging lives on the devices: before they close */
        mesh->collectives = NULL;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < mesh->count; i++) {
        td_mesh_device md = mesh->devices[i];
        if (md.lost) {
            close_device(mesh, i);
            continue;
        }
        md.position = kept;
        md.worker = NULL;
        mesh->devices[kept++] = md;
    }
    const uint32_t before = mesh->count;
    mesh->count = kept;
    *dropped = before - kept;
    td_log(ctx, TD_LOG_WARN, "mesh '%s': dropped lost device(s) %s; %u of %u go on", mesh->spec, names, kept, before);
    return td_worker_pool_create(mesh);
}

void td_mesh_destroy(td_mesh *mesh)
{
    if (mesh)
        td_owned_destroy(&mesh->owned);
}

td_status td_mesh_size(const td_mesh *mesh, uint32_t *size)
{
    if (!mesh)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&mesh->owned, "td_mesh_size");
    if (s != TD_OK)
        return s;
    if (!size)
        return td_error_set(mesh->ctx, TD_ERR_INVALID_ARGUMENT, "td_mesh_size: size is NULL");
    *size = mesh->count;
    return TD_OK;
}

td_status td_mesh_device_info(const td_mesh *mesh, uint32_t position, td_device_info *info)
{
    if (!mesh)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&mesh->owned, "td_mesh_device_info");
    if (s != TD_OK)
        return s;
    if (!info)
        return td_error_set(mesh->ctx, TD_ERR_INVALID_ARGUMENT, "td_mesh_device_info: info is NULL");
    if (position >= mesh->count)
        return td_error_set(mesh->ctx, TD_ERR_INVALID_ARGUMENT, "mesh position %u out of range (mesh of %u devices)",
                            position, mesh->count);
    td_device_info full = mesh->devices[position].info;
    full.struct_size = sizeof full;
    return TD_STRUCT_WRITE(mesh->ctx, "td_mesh_device_info", td_device_info, info, &full);
}

td_status td_mesh_device_submit_wait(td_mesh_device *md, uint32_t timeout_ms)
{
    uint64_t ticket;
    td_status s = md->ops->submit(md->dev, &ticket);
    return s == TD_OK ? md->ops->wait(md->dev, ticket, timeout_ms) : s;
}

float *td_mesh_device_host_view(td_mesh_device *md, td_buffer *buffer)
{
    return md->ops->buffer_host_pointer ? md->ops->buffer_host_pointer(md->dev, buffer) : NULL;
}

td_status td_mesh_device_read_wait(td_mesh_device *md, td_buffer *buffer, size_t offset, void *dst, size_t bytes,
                                   uint32_t timeout_ms)
{
    td_status s = md->ops->read(md->dev, buffer, offset, dst, bytes);
    return s == TD_OK ? td_mesh_device_submit_wait(md, timeout_ms) : s;
}

td_status td_mesh_device_write_wait(td_mesh_device *md, td_buffer *buffer, size_t offset, const void *src,
                                    size_t bytes, uint32_t timeout_ms)
{
    td_status s = md->ops->write(md->dev, buffer, offset, src, bytes);
    return s == TD_OK ? td_mesh_device_submit_wait(md, timeout_ms) : s;
}
