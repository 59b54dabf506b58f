/* tandem — training data: IDX files (the MNIST family's format), the
 * Fashion-MNIST dataset, a seeded per-epoch example order that is the same on
 * any mesh, batch assembly that pads a short last batch, and text for
 * language models (bytes, or llm.c's GPT-2 token shards) with llm.c's
 * tokenizer file for turning sampled tokens back into bytes. */
#ifndef TANDEM_DATA_H
#define TANDEM_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/context.h"
#include "tandem/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's dataset-fashion-mnist package installs the four files. */
#define TD_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Reads an IDX file, gzip-compressed or plain, into a new host tensor whose
 * rank and dims are the file's (rank 1 to TD_MAX_RANK). Element types 0x08
 * (unsigned byte) become TD_U8, 0x0C (int32) TD_I32 and 0x0D (float32)
 * TD_F32, converted from the file's big-endian order; the other IDX types give
 * TD_ERR_UNSUPPORTED. A file that cannot be opened or read gives TD_ERR_IO; a
 * bad magic number, a rank outside 1..TD_MAX_RANK, a size that does not fit in
 * memory, data shorter or longer than the header promises, or a damaged gzip
 * stream give TD_ERR_CORRUPT_DATA, with the file named in the message. On
 * failure *out is NULL and nothing is left allocated.
 * Since 0.1. */
TD_API td_status td_data_read_idx(td_context *ctx, const char *path, td_tensor **out);

/* Loads one split of an MNIST-layout dataset (Fashion-MNIST: pass
 * TD_FASHION_MNIST_DIR). `split` is "train" or "t10k"; the files read are
 * <dir>/<split>-images-idx3-ubyte.gz and <dir>/<split>-labels-idx1-ubyte.gz,
 * or the same names without ".gz" when the compressed ones are absent.
 * *images becomes a TD_U8 tensor [N, H, W, 1] (NHWC with one channel, H and W
 * as in the file) and *labels a TD_I32 tensor [N]. Images that are not a
 * rank-3 byte array, labels that are not a rank-1 byte array, counts that
 * differ, no image (or images of no pixel) or a label outside 0..9 give
 * TD_ERR_CORRUPT_DATA naming the file
 * (and the index and value of a bad label). On failure both outputs are NULL.
 * Since 0.1. */
TD_API td_status td_data_load_mnist(td_context *ctx, const char *dir, const char *split, td_tensor **images,
                                    td_tensor **labels);

/* Writes a permutation of 0..n-1 into order[0..n-1]: a Fisher-Yates shuffle
 * driven by tandem's counter-based generator keyed by `seed`, with the epoch
 * in the counter (td_random stream: key = seed, counter words = FNV-1a of
 * "td_data_order", epoch low 32 bits, epoch high 32 bits). The result depends
 * only on (seed, epoch, n), so every device of every mesh agrees on the global
 * batch order. n must fit in a
 * uint32_t; order may be NULL only when n is 0.
 * Since 0.1. */
TD_API td_status td_data_order(td_context *ctx, uint64_t seed, uint64_t epoch, size_t n, uint32_t *order);

/* Copies the rows src[indices[i]] (along axis 0) into rows 0..count-1 of dst
 * and zero-fills dst's remaining rows, so a short last batch arrives padded.
 * Any dtype and trailing shape; dst must have src's dtype, rank and trailing
 * dims, at least `count` rows, and must not be src. Every index must be below
 * src's row count. Nothing is written unless all checks pass. Does not
 * allocate: it is meant to run every step.
 * Since 0.1. */
TD_API td_status td_data_gather_batch(td_context *ctx, const td_tensor *src, const uint32_t *indices,
                                      size_t count, td_tensor *dst);

/* *mean and *std of the u8 values of `images` scaled by 1 / 255 (the
 * population standard deviation), for td_model_options' input_mean and
 * input_std. A u8 tensor with at least one value; otherwise
 * TD_ERR_INVALID_ARGUMENT naming what is wrong. Fashion-MNIST's training
 * images give 0.2860 and 0.3530.
 * Since 0.1. */
TD_API td_status td_data_pixel_stats(td_context *ctx, const td_tensor *images, float *mean, float *std);

/* Sets the first `valid` entries of a TD_F32 or TD_U8 tensor [B] to 1 and the
 * others to 0: the per-example weights that let a padded last batch train on
 * its real examples only. valid must be at most B. Does not allocate.
 * Since 0.1. */
TD_API td_status td_data_batch_mask(td_context *ctx, td_tensor *mask, size_t valid);

/* ---- Text ----
 *
 * A text is a sequence of token ids held in host memory, split into training
 * tokens and validation tokens that training never sees. Two sources:
 *
 *   - bytes: any file read as it is, one token per byte (vocabulary 256);
 *   - llm.c's GPT-2 token shards (vocabulary 50257), files named *.bin: a
 *     header of 256 little-endian int32 -- [0] the magic 20240520, [1] the
 *     version 1, [2] the token count n -- then n little-endian uint16 ids.
 *     The file must be exactly 1024 + 2 n bytes and every id below 50257.
 *
 * A text is owned by its context (tandem/context.h, "Lifetimes"): it keeps
 * the context for its messages, td_text_close or td_context_destroy frees
 * it. A training batch is a pure function of (tokens, seed, step), so every
 * process and every device of any mesh that asks for step k gets the same
 * global batch. */

/* Debian's `fortunes` package: about 2.5 MB of English text in plain files
 * (beside .dat indexes and .u8 links), read as bytes. */
#define TD_TEXT_DEFAULT_CORPUS "/usr/share/games/fortunes"

/* Vocabulary sizes: one token per byte value; GPT-2's BPE tokens. */
#define TD_TEXT_BYTE_VOCAB 256u
#define TD_TEXT_GPT2_VOCAB 50257u

/* Since 0.1. */
typedef struct td_text td_text;

/* Since 0.1. */
typedef struct td_text_options {
    size_t struct_size; /* sizeof(td_text_options): growth-safe, see tandem/export.h */
    /* When the source has no validation shard: the fraction of its tokens,
     * taken from the end, held out for validation (floor(n * fraction)
     * tokens). 0 <= fraction < 1; default 0.1. Ignored when validation
     * shards exist. */
    double val_fraction;
} td_text_options;

/* val_fraction 0.1.
 * Since 0.1. */
TD_API td_status td_text_options_init(td_text_options *options);

/* What a text holds (td_text_info).
 * Since 0.1. */
typedef struct td_text_summary {
    size_t struct_size; /* sizeof(td_text_summary): growth-safe, see tandem/export.h */
    uint32_t vocab_size; /* TD_TEXT_BYTE_VOCAB or TD_TEXT_GPT2_VOCAB */
    bool bytes;          /* tokens are the source's bytes */
    bool val_held_out;   /* validation is the source's tail, not val shards */
    size_t train_tokens;
    size_t val_tokens;
} td_text_summary;

/* Zeroes *summary and sets its struct_size, ready for td_text_info.
 * Since 0.1. */
TD_API td_status td_text_summary_init(td_text_summary *summary);

/* Reads `path` whole into a new text (`options` may be NULL for the
 * defaults). `path` is one of:
 *   - a file whose name ends in ".bin": one token shard;
 *   - any other file: its bytes;
 *   - a directory holding token shards (*.bin files, or links to them): the
 *     training tokens are the shards whose names contain "train", sorted by
 *     name (strcmp) and concatenated; validation the shards whose names
 *     contain "val", likewise. Other .bin files are ignored; a name with
 *     both words, or no "train" shard at all, is TD_ERR_INVALID_ARGUMENT.
 *     With no "val" shard, validation is held out as for a single source;
 *   - a directory without shards (TD_TEXT_DEFAULT_CORPUS): the bytes of
 *     every regular file in it that is not a symbolic link and has no '.'
 *     in its name, sorted by name (strcmp) and concatenated.
 * A single source (file or byte directory) holds out the last
 * floor(n * options.val_fraction) of its n tokens for validation.
 * Errors: TD_ERR_IO for what cannot be opened or read (naming the path and
 * the system's reason); TD_ERR_CORRUPT_DATA for a shard with a bad magic,
 * version, token count, size or token id (naming the file, the value and
 * what was expected); TD_ERR_INVALID_ARGUMENT for a bad option, a path
 * that is neither file nor directory, a directory with nothing to read, or
 * a source of no tokens. On failure *out is NULL and nothing is left
 * allocated.
 * Since 0.1. */
TD_API td_status td_text_open(td_context *ctx, const char *path, const td_text_options *options, td_text **out);

/* Frees the text. NULL is ignored.
 * Since 0.1. */
TD_API void td_text_close(td_text *text);

/* Fills *summary: vocabulary, kind and token counts.
 * Since 0.1. */
TD_API td_status td_text_info(const td_text *text, td_text_summary *summary);

/* Writes training batch `step` of `seed` into caller-owned TD_I32 host
 * tensors inputs and targets, both [B, T] (B, T >= 1). Row b is the window
 * of T + 1 consecutive training tokens starting at position p_b: inputs
 * row b = tokens[p_b .. p_b + T - 1], targets row b = tokens[p_b + 1 ..
 * p_b + T]. p_b is uniform over [0, n_train - T - 1], drawn on its own
 * td_random stream (engine/core/td_random.h): key = seed, counter words =
 * FNV-1a of "td_text_batch", step, b; p_b = two words hi, lo taken as
 * hi * 2^32 + lo, drawn again while at or above the largest multiple of
 * n_train - T below 2^64, then reduced modulo n_train - T. So a row depends
 * only on (tokens, seed, step, b), not on B or the mesh. step must be
 * below 2^32 (a counter word). Training text of fewer than T + 1 tokens is
 * TD_ERR_INVALID_ARGUMENT naming both numbers; a wrong dtype or shape
 * names what was expected. Nothing is written unless every check passes;
 * does not allocate (it runs every step).
 * Since 0.1. */
TD_API td_status td_text_batch(const td_text *text, uint64_t seed, uint64_t step, size_t B, size_t T, td_tensor *inputs,
                               td_tensor *targets);

/* Validation as llm.c evaluates it: windows of T + 1 validation tokens at
 * stride T from the first, every window that fits: window w covers
 * validation tokens [w T, w T + T]. *count = floor((n_val - 1) / T), or 0
 * without validation tokens. T >= 1.
 * Since 0.1. */
TD_API td_status td_text_val_windows(const td_text *text, size_t T, size_t *count);

/* Fills rows 0 .. valid - 1 of inputs and targets (TD_I32 [B, T]) with
 * validation windows first_window, first_window + 1, ... (inputs the
 * window's first T tokens, targets its last T), zero-fills the other rows,
 * sets mask (TD_F32 or TD_U8 [B], as td_data_batch_mask) to 1 on the valid rows
 * and 0 on the padding, and sets *valid = min(B, count - first_window).
 * first_window may be at most the window count (at the count the batch is
 * all padding). Nothing is written unless every check passes; does not
 * allocate.
 * Since 0.1. */
TD_API td_status td_text_val_batch(const td_text *text, size_t T, size_t first_window, size_t B, td_tensor *inputs,
                                   td_tensor *targets, td_tensor *mask, size_t *valid);

/* ---- llm.c's tokenizer file ----
 *
 * gpt2_tokenizer.bin as llm.c writes it: a header of 256 little-endian
 * uint32 -- [0] the magic 20240328, [1] the version (1 or 2), [2] the
 * vocabulary size V, and in version 2 [3] the end-of-text token id --
 * then for each of the V tokens a one-byte length (1 to 255) followed by
 * that many bytes, and nothing after. Version 1 is GPT-2's alone (V must be
 * 50257; end of text is 50256). Owned by its context like a text.
 * Since 0.1. */
typedef struct td_tokenizer td_tokenizer;

/* Reads the file whole. A file that cannot be read is TD_ERR_IO; a bad
 * magic, version, vocabulary size or end-of-text id, a zero-length token, a
 * table running past the end of the file or bytes after it are
 * TD_ERR_CORRUPT_DATA naming the file, the value (and token) and what was
 * expected. On failure *out is NULL and nothing is left allocated.
 * Since 0.1. */
TD_API td_status td_tokenizer_open(td_context *ctx, const char *path, td_tokenizer **out);

/* Frees the tokenizer. NULL is ignored.
 * Since 0.1. */
TD_API void td_tokenizer_close(td_tokenizer *tok);

/* *vocab_size = V and *eot_token = the end-of-text id (either may be NULL).
 * Since 0.1. */
TD_API td_status td_tokenizer_vocab(const td_tokenizer *tok, uint32_t *vocab_size, uint32_t *eot_token);

/* *bytes = the bytes token `id` stands for and *len their count (>= 1).
 * They may hold any byte, 0 included; a 0 byte follows them (not counted)
 * for printing. Valid until td_tokenizer_close. An id >= V is
 * TD_ERR_INVALID_ARGUMENT naming the id and V.
 * Since 0.1. */
TD_API td_status td_tokenizer_decode(const td_tokenizer *tok, uint32_t id, const uint8_t **bytes, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
