/* GPT-2 weights from safetensors in a build without Jansson
 * (-Dcheckpoint=disabled, or libjansson-dev missing): the header is JSON,
 * which only Jansson reads here, so such files are refused by name.
 * llm.c's files need no JSON and are read in every build. */
#include "td_gpt_weights.h"

td_status td_gpt_weights_read_safetensors(td_context *ctx, const char *path, td_gpt_weights **out)
{
    *out = NULL;
    return td_error_set(ctx, TD_ERR_UNSUPPORTED,
                        "td_gpt_weights_read: %s is safetensors, and tandem was built without checkpoints, which read "
                        "its JSON header (-Dcheckpoint=disabled or libjansson-dev missing at build time); llm.c's "
                        "checkpoints are read in every build",
                        path);
}
