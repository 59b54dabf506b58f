/* tandem — status codes.
 *
 * Every public function returns a td_status. The codes come from one table
 * (TD_STATUS_TABLE) so that the enum, the names and the descriptions can never
 * drift apart. A status says what kind of thing went wrong; the context's
 * message (td_last_error) says which value and what was expected. */
#ifndef TANDEM_STATUS_H
#define TANDEM_STATUS_H

#include "tandem/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description) */
#define TD_STATUS_TABLE(X)                                                              \
    X(TD_OK, 0, "success")                                                              \
    X(TD_ERR_INVALID_ARGUMENT, 1, "an argument is invalid")                             \
    X(TD_ERR_OUT_OF_MEMORY, 2, "out of host or device memory")                          \
    X(TD_ERR_SHAPE_MISMATCH, 3, "tensor shapes do not fit together")                    \
    X(TD_ERR_NOT_DIVISIBLE, 4, "a size does not split evenly over the devices")         \
    X(TD_ERR_UNKNOWN_DEVICE, 5, "the device spec names no known device")                \
    X(TD_ERR_NO_DEVICE, 6, "the device spec selects no device")                         \
    X(TD_ERR_BACKEND, 7, "the device driver reported an error")                         \
    X(TD_ERR_BACKEND_UNAVAILABLE, 8, "the backend is not built in or has no driver")    \
    X(TD_ERR_TIMEOUT, 9, "a wait ran past its timeout")                                 \
    X(TD_ERR_ABORTED, 10, "the operation was aborted because another worker failed")    \
    X(TD_ERR_IO, 11, "a file could not be read or written")                             \
    X(TD_ERR_CORRUPT_DATA, 12, "input data is corrupt or not in the expected format")   \
    X(TD_ERR_DEVICE_LOST, 13, "the device was lost")                                    \
    X(TD_ERR_KERNEL_BUILD, 14, "a device kernel failed to build")                       \
    X(TD_ERR_UNSUPPORTED, 15, "the operation is not supported for these arguments")     \
    X(TD_ERR_STATE, 16, "the call is not valid in the object's current state")

/* Since 0.1. */
typedef enum td_status {
#define TD_STATUS_ENUM_ENTRY(name, value, text) name = value,
    TD_STATUS_TABLE(TD_STATUS_ENUM_ENTRY)
#undef TD_STATUS_ENUM_ENTRY
} td_status;

/* The enumerator's name as a string ("TD_ERR_TIMEOUT"); "TD_STATUS_UNKNOWN"
 * for a value outside the table. The string is static.
 * Since 0.1. */
TD_API const char *td_status_name(td_status status);

/* One sentence saying what the status means in general; static string. The
 * context's td_last_error() has the specifics of the last failure.
 * Since 0.1. */
TD_API const char *td_status_describe(td_status status);

#ifdef __cplusplus
}
#endif
#endif
