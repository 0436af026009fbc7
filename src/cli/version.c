#include "strata.h"

const char *strata_version(void) { return "0.1.0"; }
