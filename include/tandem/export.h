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

#endif
