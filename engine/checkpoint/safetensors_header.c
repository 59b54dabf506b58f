/* Writes a safetensors header. The JSON is built and serialised by Jansson,
 * so names and metadata are escaped as JSON requires whatever bytes they
 * hold; the length prefix is written byte by byte, little-endian, whatever
 * the host. */
#include <jansson.h>
#include <string.h>

#include "td_safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors stores little-endian values and the checkpoint writer copies host floats as they are"
#endif

static json_t *entry_json(const td_st_tensor *t, uint64_t begin, uint64_t end)
{
    json_t *shape = json_array();
    for (uint32_t d = 0; shape && d < t->rank; d++)
        if (json_array_append_new(shape, json_integer((json_int_t)t->dims[d])) != 0) {
            json_decref(shape);
            shape = NULL;
        }
    json_t *offsets = json_pack("[II]", (json_int_t)begin, (json_int_t)end);
    if (!shape || !offsets) {
        json_decref(shape);
        json_decref(offsets);
        return NULL;
    }
    return json_pack("{s:s, s:o, s:o}", "dtype", "F32", "shape", shape, "data_offsets", offsets);
}

/* json_dumps allocates with Jansson's allocator: give it back there. */
static void free_json_text(char *text)
{
    json_malloc_t alloc_fn;
    json_free_t free_fn;
    json_get_alloc_funcs(&alloc_fn, &free_fn);
    free_fn(text);
}

/* The JSON text, or NULL when Jansson ran out of memory or refused a
 * string (not UTF-8). */
static char *header_json(uint32_t n, const td_st_tensor *tensors, uint32_t n_meta, const char *const *keys,
                         const char *const *values)
{
    json_t *root = json_object();
    json_t *meta = json_object();
    bool ok = root && meta;
    for (uint32_t i = 0; ok && i < n_meta; i++)
        ok = json_object_set_new(meta, keys[i], json_string(values[i])) == 0;
    /* First, as the reference writer puts it. */
    if (ok && n_meta)
        ok = json_object_set(root, "__metadata__", meta) == 0;
    uint64_t at = 0;
    for (uint32_t i = 0; ok && i < n; i++) {
        uint64_t count = 1;
        for (uint32_t d = 0; d < tensors[i].rank; d++)
            count *= (uint64_t)tensors[i].dims[d];
        json_t *e = entry_json(&tensors[i], at, at + 4 * count);
        ok = e && json_object_set_new(root, tensors[i].name, e) == 0;
        at += 4 * count;
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(meta);
    json_decref(root);
    return text;
}

td_status td_st_header_build(td_context *ctx, const char *who, uint32_t n, const td_st_tensor *tensors, uint32_t n_meta,
                             const char *const *keys, const char *const *values, char **header, size_t *bytes)
{
    *header = NULL;
    *bytes = 0;
    char *text = header_json(n, tensors, n_meta, keys, values);
    if (!text)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: the safetensors header could not be built: a tensor name or metadata string is not "
                            "valid UTF-8 (or memory ran out)",
                            who);
    const size_t len = strlen(text);
    const size_t padded = (len + 7) / 8 * 8; /* the data area starts 8-byte aligned */
    if (padded > TD_ST_HEADER_LIMIT) {
        free_json_text(text);
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: the safetensors header would be %zu bytes, over the %llu-byte limit readers enforce",
                            who, padded, (unsigned long long)TD_ST_HEADER_LIMIT);
    }
    char *out = td_alloc(ctx, 8 + padded);
    if (!out) {
        free_json_text(text);
        return TD_OOM(ctx, "a safetensors header", 8 + padded);
    }
    for (int b = 0; b < 8; b++)
        out[b] = (char)(((uint64_t)padded >> (8 * b)) & 0xff);
    memcpy(out + 8, text, len);
    memset(out + 8 + len, ' ', padded - len);
    free_json_text(text);
    *header = out;
    *bytes = 8 + padded;
    return TD_OK;
}
