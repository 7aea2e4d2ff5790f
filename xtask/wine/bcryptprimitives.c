/* Test environment only, never shipped: Wine 8 (Debian 12's) lacks
 * bcryptprimitives.dll's ProcessPrng, which Rust's standard library imports
 * on Windows 10 and later for its random numbers. `cargo xtask setup` builds
 * this stand-in with mingw into the Wine prefix of `cargo xtask wine-test`;
 * it forwards to advapi32's RtlGenRandom (SystemFunction036). */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
