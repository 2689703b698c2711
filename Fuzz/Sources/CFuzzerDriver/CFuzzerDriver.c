// Declarations only (see include/CFuzzerDriver.h); the definitions come from libclang_rt.fuzzer.
#include "CFuzzerDriver.h"
