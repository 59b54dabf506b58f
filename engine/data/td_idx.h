/* The IDX reader in two halves, header then data, so a caller that wants the
 * data in a tensor of its own shape (the MNIST loader adds a channel axis)
 * can check the header before allocating anything. */
#ifndef TD_IDX_H
#define TD_IDX_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "tandem/context.h"
#include "tandem/tensor.h"

typedef struct td_idx_file {
    gzFile gz;
    const char *path;    /* the caller's string, for messages */
    const char *caller;  /* the public function, for messages */
    td_dtype dtype;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    size_t count;        /* elements */
    size_t data_bytes;   /* count * element size */
} td_idx_file;

/* Opens `path` and reads and validates its header. On failure nothing is
 * left open and the context holds the message (prefixed with `caller`). */
td_status td_idx_open(td_context *ctx, const char *caller, const char *path, td_idx_file *f);

/* Reads exactly f->data_bytes into dst (in host order), then checks that the
 * file ends there and the gzip stream, if any, is intact. */
td_status td_idx_read_data(td_context *ctx, td_idx_file *f, void *dst);

/* Closes the file; safe on a file that failed to open. */
void td_idx_close(td_idx_file *f);

#endif
