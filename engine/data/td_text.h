/* What the text files share: the text object, the list of files a source
 * is made of, and reading a file whole with messages that name it.
 *
 * Opening runs in two passes over that list: the first sizes every file
 * (and checks every shard header) so the tokens get one allocation of the
 * exact size; the second reads each file into its place. A file that
 * changed size between the passes is an error, not a short text. */
#ifndef TD_TEXT_H
#define TD_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/data.h"
#include "td_context_internal.h"

struct td_text {
    td_owned owned;
    td_context *ctx;
    /* The training tokens, then the validation tokens: one allocation. */
    uint16_t *tokens;
    size_t n_train;
    size_t n_val;
    uint32_t vocab_size;
    bool bytes;
    bool val_held_out;
};

/* One file of a source. */
typedef struct td_text_file {
    char *path;    /* owned */
    bool shard;    /* llm.c token shard, else bytes */
    bool val;      /* a validation shard */
    size_t bytes;  /* size on disk at the first pass */
    size_t tokens; /* tokens it holds */
} td_text_file;

typedef struct td_text_file_list {
    td_text_file *files;
    size_t count;
    size_t capacity;
} td_text_file_list;

/* Appends a copy of `path` (the name is the caller's). */
td_status td_text_list_add(td_context *ctx, td_text_file_list *list, const char *path, bool shard, bool val);
void td_text_list_free(td_context *ctx, td_text_file_list *list);

/* The files a directory contributes, in the order they are concatenated:
 * its shards (training by name, then validation by name) when it has any,
 * else its plain files (see td_text_open). */
td_status td_text_list_directory(td_context *ctx, const char *dir, td_text_file_list *list);

/* Opens `path` for reading, checks that it is a regular file, and gives its
 * descriptor and size. TD_ERR_IO naming `path` on failure (nothing open). */
td_status td_text_file_open(td_context *ctx, const char *fn, const char *path, int *fd, size_t *size);

/* Reads exactly `bytes` from `fd` at `offset`. A read error, or a file that
 * ends early (it changed since it was sized), is TD_ERR_IO naming `path`. */
td_status td_text_file_read(td_context *ctx, const char *fn, const char *path, int fd, size_t offset, void *dst,
                            size_t bytes);
/* Opens f again, checks it still holds the f->bytes its sizing pass found,
 * reads `bytes` bytes from `offset` into dst and closes it. */
td_status td_text_file_reread(td_context *ctx, const char *fn, const td_text_file *f, size_t offset, void *dst,
                              size_t bytes);

/* A file of bytes read into tokens[0 .. f->bytes - 1], one per byte. */
td_status td_text_read_bytes(td_context *ctx, const td_text_file *f, uint16_t *tokens);

/* First pass over a shard: checks its header against its size and sets
 * f->tokens. */
td_status td_text_shard_size(td_context *ctx, td_text_file *f);

/* Second pass: reads the shard's ids into tokens[0 .. f->tokens - 1] and
 * checks each against the GPT-2 vocabulary. */
td_status td_text_shard_read(td_context *ctx, const td_text_file *f, uint16_t *tokens);

/* Little-endian words, whatever the host's order. */
static inline uint32_t td_le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

#endif
