/* What the graph and the compiler use of initializers: the fan rule, the
 * checks with their messages, and the host fill. */
#ifndef TD_INIT_INTERNAL_H
#define TD_INIT_INTERNAL_H

#include <stdint.h>

#include "tandem/init.h"
#include "td_context_internal.h"

/* jax's _compute_fans for a [..receptive.., in, out] shape; doubles, so no
 * product of dimensions can overflow. */
void td_init_fans(uint32_t rank, const int64_t *dims, double *fan_in, double *fan_out);

/* TD_OK, or TD_ERR_INVALID_ARGUMENT with a message of the form
 * "<fn>: parameter '<name>': <field> <value> ..., expected ...". */
td_status td_init_check(td_context *ctx, const td_initializer *init, const char *fn, const char *name);

/* Writes the parameter's prod(dims) initial values to out. `init` must have
 * passed td_init_check. */
void td_init_fill(const td_initializer *init, const char *name, uint32_t rank, const int64_t *dims, float *out);

#endif
