/* tandem — symbol export and version macros. The library is built with hidden
 * visibility; only what is marked TD_API is part of the ABI. */
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

#define TD_VERSION_MAJOR 0
#define TD_VERSION_MINOR 1
#define TD_VERSION_PATCH 0
#define TD_VERSION_NUMBER (TD_VERSION_MAJOR * 10000 + TD_VERSION_MINOR * 100 + TD_VERSION_PATCH)
#define TD_VERSION_STRING "0.1.0"

#endif
