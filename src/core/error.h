// core/error: the one exception type of the library (Error) and the string builder for its
// messages (str_cat, fail) are the public API's, sluice/error.h; the library includes them
// through here.
#pragma once
#include "sluice/error.h"
