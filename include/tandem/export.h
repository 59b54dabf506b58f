/* tandem — symbol export and the version macros (tandem/version.h, generated
 * from meson.build's project version). The library is built with hidden
 * visibility; only what is marked TD_API is part of the ABI, and that list is
 * checked in as abi/tandem.symbols. Since 0.1. */
#ifndef TANDEM_EXPORT_H
#define TANDEM_EXPORT_H

#if defined(_WIN32)
#  if defined(TD_BUILDING_LIBRARY)
#    define TD_API __declspec(dllexport)
#  else
#    define TD_API
#  endif
#elif defined(__GNUC__)
#  define TD_API __attribute__((visibility("default")))
#else
#  define TD_API
#endif

#include "tandem/version.h"

/* "Since" notes. Each public function, type and struct ends its comment with
 * the version it first appeared in ("Since 0.1."); one comment over a group
 * of declarations covers the group. A field added to a struct after the
 * struct itself carries a note of its own; a field without one is as old as
 * its struct.
 *
 * Growth-safe structs. Every public struct a caller fills or receives
 * begins with `size_t struct_size`, so that a later version can add fields
 * at its end without breaking a program built against an older header. The
 * struct's `_init` (for td_initializer, each constructor) sets struct_size
 * to the sizeof the program was compiled with. The library then
 *   - refuses a struct_size below the struct's first layout (its fields as
 *     of the version its "Since" note names) with TD_ERR_INVALID_ARGUMENT
 *     and the message "<function>: <struct>.struct_size is N, expected 0
 *     or at least M" (td_context_create has no context to hold it);
 *   - reads an input struct up to struct_size only: fields past it take
 *     the defaults of the `_init` (fields added later say "Since" of their
 *     own); a larger struct_size, from a newer caller, is accepted and the
 *     fields this library does not know are not read;
 *   - writes an output struct up to struct_size only, and sets its
 *     struct_size to the bytes written (the smaller of the two sizes).
 * struct_size 0 is taken as the library's current size, so that `= {0}` and
 * designated initializers work in code built with the library it runs
 * with. A program that may meet a newer library than its header must set
 * struct_size (the `_init` does): with 0, a newer library would read or
 * write past the program's struct.
 * Structs that are array elements (td_binding, td_checkpoint_entry,
 * td_step_timing) or embedded in another struct (td_allocator,
 * td_schedule) keep a fixed layout instead: arrays are indexed by the
 * caller's sizeof, so their elements cannot grow; new fields would come as
 * a new struct. */

#endif
