/* The safetensors file format (Hugging Face's safetensors library, which
 * PyTorch, JAX and numpy read): an 8-byte little-endian unsigned header
 * length N, N bytes of UTF-8 JSON, then the data area. The JSON object maps
 * each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]},
 * byte offsets into the data area, row-major little-endian values; the
 * optional "__metadata__" entry is an object of string values. The
 * reference writer pads the header with spaces to a multiple of 8 bytes so
 * the data is aligned; readers accept trailing whitespace.
 *
 * tandem writes F32 tensors of rank <= TD_MAX_RANK; it reads those, and
 * for files others wrote (GPT-2 weights) any dtype of whole bytes. The JSON
 * goes through Jansson (Debian's libjansson): a maintained parser that
 * checks UTF-8, keeps 64-bit integers exact (offsets past 2^53 would round
 * in a parser that stores doubles) and can refuse duplicate keys, which
 * would otherwise let two entries claim one name. */
#ifndef TD_SAFETENSORS_H
#define TD_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "td_context_internal.h"
#include "tandem/tensor.h"

/* A header longer than this is refused before it is read: no real header
 * comes near it, and a corrupt length must not make the reader allocate
 * gigabytes. */
#define TD_ST_HEADER_LIMIT ((uint64_t)100 * 1000 * 1000)

/* ---- writing ---- */

/* One F32 tensor to write; tensors are packed back to back in the order
 * given. */
typedef struct td_st_tensor {
    const char *name;
    uint32_t rank;
    const int64_t *dims;
} td_st_tensor;

/* The file's first bytes for these tensors and metadata pairs: the length,
 * the JSON header, the padding. *bytes receives its size and *header a
 * td_alloc'd buffer (td_free it); the data area follows, exactly
 * sum(count * 4) bytes. `who` names the caller in messages. */
td_status td_st_header_build(td_context *ctx, const char *who, uint32_t n, const td_st_tensor *tensors, uint32_t n_meta,
                             const char *const *keys, const char *const *values, char **header, size_t *bytes);

/* ---- reading ---- */

typedef struct td_st_entry {
    const char *name;  /* valid while the file is open */
    const char *dtype; /* safetensors' name ("F32", "BF16"), valid while the file is open */
    uint32_t element_bytes;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    uint64_t begin, end; /* in the data area; end - begin = count * element_bytes */
} td_st_entry;

typedef struct td_st_file td_st_file;

/* What a reader accepts, and what its messages call the file. */
typedef struct td_st_open_mode {
    const char *kind; /* what every message starts with: "checkpoint", "td_gpt_weights_read:" */
    /* Every safetensors dtype of whole bytes (BOOL, U8 .. U64, I8 .. I64,
     * F8_E4M3, F8_E5M2, F8_E8M0, F16, BF16, F32, F64) rather than F32
     * only: for files written by others, whose tensors the caller sorts
     * out by dtype itself. */
    bool any_dtype;
} td_st_open_mode;

/* Opens `path` and validates its layout: the header length (at least 2,
 * at most TD_ST_HEADER_LIMIT and the file's size - 8), the JSON (an object,
 * no duplicate keys), every entry (dtype F32, or any known one in
 * mode->any_dtype; a shape of at most TD_MAX_RANK non-negative dims,
 * data_offsets of exactly its size), and the data area (the entries,
 * sorted by offset, cover it exactly: none overlaps another, none leaves a
 * gap, none passes its end). "__metadata__" must be an object of strings.
 * TD_ERR_IO when the file cannot be read, TD_ERR_CORRUPT_DATA naming the
 * file, the tensor and the problem. */
td_status td_st_open_as(td_context *ctx, const char *path, const td_st_open_mode *mode, td_st_file **out);
/* td_st_open_as for a tandem checkpoint: F32 only, "checkpoint <path>: ..." */
td_status td_st_open(td_context *ctx, const char *path, td_st_file **out);
void td_st_close(td_st_file *f);

const char *td_st_path(const td_st_file *f);
uint32_t td_st_count(const td_st_file *f);
/* Entries sorted by name. */
const td_st_entry *td_st_entry_at(const td_st_file *f, uint32_t i);
/* The entry called `name`, or NULL. */
const td_st_entry *td_st_find(const td_st_file *f, const char *name);
/* The metadata value of `key`, or NULL. */
const char *td_st_metadata(const td_st_file *f, const char *key);
/* Reads `count` floats of F32 entry e, starting at element `first`, into
 * out. TD_ERR_IO when the read fails or comes back short (the file
 * shrank); TD_ERR_INVALID_ARGUMENT for an entry of another dtype. */
td_status td_st_read(const td_st_file *f, const td_st_entry *e, uint64_t first, uint64_t count, float *out);
/* Reads `bytes` bytes of entry e's data, from its byte `first`, as they
 * are in the file (little-endian values of its dtype). */
td_status td_st_read_bytes(const td_st_file *f, const td_st_entry *e, uint64_t first, size_t bytes, void *out);

#endif
