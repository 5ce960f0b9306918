#ifndef SWIFT_HTTPDNS_CCARES_SHIM_H
#define SWIFT_HTTPDNS_CCARES_SHIM_H
#include <ares.h>
#endif
