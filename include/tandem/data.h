/* tandem — training data: IDX files (the MNIST family's format), the
 * Fashion-MNIST dataset, a seeded per-epoch example order that is the same on
 * any mesh, and batch assembly that pads a short last batch. */
#ifndef TANDEM_DATA_H
#define TANDEM_DATA_H

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
 * failure *out is NULL and nothing is left allocated. */
TD_API td_status td_idx_read(td_context *ctx, const char *path, td_tensor **out);

/* Loads one split of an MNIST-layout dataset (Fashion-MNIST: pass
 * TD_FASHION_MNIST_DIR). `split` is "train" or "t10k"; the files read are
 * <dir>/<split>-images-idx3-ubyte.gz and <dir>/<split>-labels-idx1-ubyte.gz,
 * or the same names without ".gz" when the compressed ones are absent.
 * *images becomes a TD_U8 tensor [N, H, W, 1] (NHWC with one channel, H and W
 * as in the file) and *labels a TD_I32 tensor [N]. Images that are not a
 * rank-3 byte array, labels that are not a rank-1 byte array, counts that
 * differ or a label outside 0..9 give TD_ERR_CORRUPT_DATA naming the file
 * (and the index and value of a bad label). On failure both outputs are NULL. */
TD_API td_status td_dataset_load_mnist(td_context *ctx, const char *dir, const char *split, td_tensor **images,
                                       td_tensor **labels);

/* Writes a permutation of 0..n-1 into order[0..n-1]: a Fisher-Yates shuffle
 * driven by tandem's counter-based generator keyed by `seed`, with the epoch
 * in the counter (td_random stream: key = seed, counter words = FNV-1a of
 * "td_data_order", epoch low 32 bits, epoch high 32 bits). The result depends
 * only on (seed, epoch, n), so every device of every mesh agrees on the global
 * batch order. n must fit in a
 * uint32_t; order may be NULL only when n is 0. */
TD_API td_status td_data_order(td_context *ctx, uint64_t seed, uint64_t epoch, size_t n, uint32_t *order);

/* Copies the rows src[indices[i]] (along axis 0) into rows 0..count-1 of dst
 * and zero-fills dst's remaining rows, so a short last batch arrives padded.
 * Any dtype and trailing shape; dst must have src's dtype, rank and trailing
 * dims, at least `count` rows, and must not be src. Every index must be below
 * src's row count. Nothing is written unless all checks pass. Does not
 * allocate: it is meant to run every step. */
TD_API td_status td_batch_gather(td_context *ctx, const td_tensor *src, const uint32_t *indices, size_t count,
                                 td_tensor *dst);

/* *mean and *std of the u8 values of `images` scaled by 1 / 255 (the
 * population standard deviation), for td_model_options' input_mean and
 * input_std. A u8 tensor with at least one value; otherwise
 * TD_ERR_INVALID_ARGUMENT naming what is wrong. Fashion-MNIST's training
 * images give 0.2860 and 0.3530. */
TD_API td_status td_dataset_pixel_stats(td_context *ctx, const td_tensor *images, float *mean, float *std);

/* Sets the first `valid` entries of a TD_F32 or TD_U8 tensor [B] to 1 and the
 * others to 0: the per-example weights that let a padded last batch train on
 * its real examples only. valid must be at most B. Does not allocate. */
TD_API td_status td_batch_mask(td_context *ctx, td_tensor *mask, size_t valid);

#ifdef __cplusplus
}
#endif
#endif
