/* The per-epoch example order. It is drawn from the counter-based generator
 * keyed by the seed alone, never from a stream shared with anything else, so
 * it is a function of (seed, epoch, n): a mesh of one device and a mesh of
 * eight cut the same global batches from it. */
#include "tandem/data.h"
#include "td_context_internal.h"
#include "td_random.h"

td_status td_data_order(td_context *ctx, uint64_t seed, uint64_t epoch, size_t n, uint32_t *order)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (n > UINT32_MAX)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_data_order: n is %zu, expected at most %u (uint32 indices)",
                            n, UINT32_MAX);
    if (!order && n > 0)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_data_order: order is NULL, expected room for %zu indices",
                            n);
    td_random_stream stream;
    td_random_stream_init(&stream, seed, td_random_name_hash("td_data_order"), (uint32_t)epoch,
                          (uint32_t)(epoch >> 32));
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    /* Fisher-Yates from the back: position i takes one of the i+1 elements
     * not yet placed, each equally likely. */
    for (size_t i = n; i-- > 1;) {
        uint32_t j = td_random_below(&stream, (uint32_t)(i + 1));
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    return TD_OK;
}
