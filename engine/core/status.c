/* Names and descriptions of td_status, generated from the one table. */
#include "tandem/status.h"

const char *td_status_name(td_status status)
{
    switch (status) {
#define TD_STATUS_NAME_CASE(name, value, text) \
    case name: return #name;
        TD_STATUS_TABLE(TD_STATUS_NAME_CASE)
#undef TD_STATUS_NAME_CASE
    }
    return "TD_STATUS_UNKNOWN";
}

const char *td_status_describe(td_status status)
{
    switch (status) {
#define TD_STATUS_TEXT_CASE(name, value, text) \
    case name: return text;
        TD_STATUS_TABLE(TD_STATUS_TEXT_CASE)
#undef TD_STATUS_TEXT_CASE
    }
    return "unknown status code";
}
