/* Whether a device's buffers after a case match the reference's: what each
 * call writes within that call's td_case_compare mode, every other element
 * bit for bit. */
#ifndef TD_CASE_COMPARE_H
#define TD_CASE_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "td_conformance.h"

/* got and want hold c->buffer_count buffers of c->buffer_elems floats. On
 * a difference, returns false with a sentence naming the first element
 * outside the contract (and how many more there are) in why. */
bool td_case_results_match(const td_conformance_case *c, float *const *got, float *const *want, char *why,
                           size_t why_size);

#endif
