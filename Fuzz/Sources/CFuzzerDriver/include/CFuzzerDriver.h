#ifndef PUSHGATE_CFUZZERDRIVER_H
#define PUSHGATE_CFUZZERDRIVER_H
#include <stddef.h>
#include <stdint.h>

// libFuzzer's driver entry point (compiler-rt, FuzzerInterface.h). The fuzz targets call it from
// their own `main`, because SwiftPM aliases an executable's `main` to `<Module>_main`.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));

#endif
