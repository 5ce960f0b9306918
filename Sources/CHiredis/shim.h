#ifndef SWIFT_HTTPDNS_CHIREDIS_SHIM_H
#define SWIFT_HTTPDNS_CHIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#endif
