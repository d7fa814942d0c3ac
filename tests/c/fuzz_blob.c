/* fuzz_blob.c - libFuzzer target: the BLOBFILE reader on arbitrary bytes and offsets. */
#include <stddef.h>
#include <stdint.h>

#include "blobfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    blob_tensor t;
    /* every 64-byte aligned metadata position, plus one unaligned taken from the input */
    for (uint64_t off = 0; off <= size + 64; off += 64)
        if (blob_read_tensor(data, size, off, 0, 0, &t, err, sizeof err) == 0)
            (void)blob_first_nonfinite(&t);
    if (size >= 16) {
        uint64_t off = 0;
        for (int i = 0; i < 8; i++)
            off |= (uint64_t)data[8 + i] << (8 * i);
        if (blob_read_tensor(data, size, off, 1, 0, &t, err, sizeof err) == 0)
            (void)blob_first_nonfinite(&t);
    }
    return 0;
}
