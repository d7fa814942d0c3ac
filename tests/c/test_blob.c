/* test_blob.c - BLOBFILE validation: every malformed file is rejected without reading out of bounds. */
#include "blobfile.h"
#include "tharness.h"

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* one fp16 tensor of n elements: header, metadata at 64, data at 128 */
static size_t make(uint8_t *buf, size_t n)
{
    memset(buf, 0, 128 + 2 * n);
    put32(buf, 1);
    put32(buf + 4, 2);
    put32(buf + 64, 0xDEADBEEFu);
    put32(buf + 68, 1);
    put64(buf + 72, 2 * n);
    put64(buf + 80, 128);
    for (size_t i = 0; i < n; i++) {
        buf[128 + 2 * i] = 0x00;
        buf[129 + 2 * i] = 0x3c; /* 1.0 */
    }
    return 128 + 2 * n;
}

/* The first NaN/Inf is found at every position: inside and across the word blocks
   the scan tests at once, in the tail after the last whole block, in either sign. */
static void test_nonfinite_positions(void)
{
    enum { N = 1100 }; /* fp16: 4 blocks of 256 and a tail of 76; fp32: 8 blocks of 128 and 76 */
    static uint8_t d[4 * N];
    static const uint32_t bad16[] = {0x7c00u, 0xfc00u, 0x7e00u, 0x7c01u};
    static const uint32_t bad32[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u};
    blob_tensor t = {BLOB_DT_FP16, 2 * N, 0, d, 0};
    for (size_t i = 0; i < 2 * N; i += 2) { d[i] = 0xff; d[i + 1] = 0x7b; } /* 65504: finite */
    CHECK(blob_first_nonfinite(&t) == -1);
    int ok = 1;
    for (size_t k = 0; k < N; k++) {
        uint32_t v = bad16[k % 4];
        d[2 * k] = (uint8_t)v; d[2 * k + 1] = (uint8_t)(v >> 8);
        ok &= blob_first_nonfinite(&t) == (long long)k;
        if (k + 7 < N) { /* a later one does not hide the first */
            d[2 * (k + 7)] = 0x00; d[2 * (k + 7) + 1] = 0x7c;
            ok &= blob_first_nonfinite(&t) == (long long)k;
            d[2 * (k + 7)] = 0xff; d[2 * (k + 7) + 1] = 0x7b;
        }
        d[2 * k] = 0xff; d[2 * k + 1] = 0x7b;
    }
    CHECK(ok);
    t.dtype = BLOB_DT_FP32;
    t.size = 4 * N;
    for (size_t i = 0; i < 4 * N; i += 4) { d[i] = 0xff; d[i + 1] = 0xff; d[i + 2] = 0x7f; d[i + 3] = 0x7f; } /* FLT_MAX */
    CHECK(blob_first_nonfinite(&t) == -1);
    ok = 1;
    for (size_t k = 0; k < N; k++) {
        uint32_t v = bad32[k % 4];
        for (int b = 0; b < 4; b++)
            d[4 * k + b] = (uint8_t)(v >> (8 * b));
        ok &= blob_first_nonfinite(&t) == (long long)k;
        d[4 * k] = 0xff; d[4 * k + 1] = 0xff; d[4 * k + 2] = 0x7f; d[4 * k + 3] = 0x7f;
    }
    CHECK(ok);
}

int main(void)
{
    uint8_t buf[4096];
    char err[512];
    blob_tensor t;
    size_t len = make(buf, 16);
    CHECK(blob_read_tensor(buf, len, 64, BLOB_DT_FP16, 32, &t, err, sizeof err) == 0);
    CHECK(t.size == 32 && t.data == buf + 128 && blob_first_nonfinite(&t) == -1);

    /* truncated anywhere */
    for (size_t k = 0; k < len; k++) {
        int rc = blob_read_tensor(buf, k, 64, BLOB_DT_FP16, 32, &t, err, sizeof err);
        CHECK(rc == -1);
    }
    CHECK(blob_read_tensor(buf, 10, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "shorter than the 64-byte BLOBFILE header");

    /* version */
    put32(buf + 4, 3);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "version is 3");
    put32(buf + 4, 2);

    /* sentinel; and the classic mistake of pointing MIL at the data (offset 128) */
    put32(buf + 64, 0xDEADBEEEu);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "bad metadata sentinel");
    put32(buf + 64, 0xDEADBEEFu);
    CHECK(blob_read_tensor(buf, len, 128, 0, 0, &t, err, sizeof err) == -1);

    /* offsets out of bounds */
    CHECK(blob_read_tensor(buf, len, 0, 0, 0, &t, err, sizeof err) == -1);
    CHECK(blob_read_tensor(buf, len, UINT64_MAX - 8, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "outside the file");
    put64(buf + 80, UINT64_MAX - 4);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "outside the file");
    put64(buf + 80, 128);
    put64(buf + 72, UINT64_MAX);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    put64(buf + 72, 32);
    put64(buf + 80, 64); /* payload overlapping its own metadata */
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    put64(buf + 80, 128);

    /* dtype (16, float8, is in coremltools' source only; 9..13 are the sub-byte codes) */
    put32(buf + 68, 16);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "unsupported blob dtype code 16");
    /* a packed uint4 payload: the padding bits must leave whole elements (at most 7) */
    put32(buf + 68, 11);
    put64(buf + 88, 4);
    CHECK(blob_read_tensor(buf, len, 64, BLOB_DT_UINT4, 0, &t, err, sizeof err) == 0);
    CHECK(t.padding_bits == 4 && blob_payload_bytes(BLOB_DT_UINT4, 63) == 32);
    put64(buf + 88, 9);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "no whole number of 4-bit elements");
    put32(buf + 68, 13); /* uint6: 32 bytes = 256 bits, 4 padding bits leave 252 = 42 elements */
    put64(buf + 88, 4);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == 0);
    put64(buf + 88, 3);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    put64(buf + 88, 0);
    put32(buf + 68, 2);
    CHECK(blob_read_tensor(buf, len, 64, BLOB_DT_FP16, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "blob dtype is fp32 but the const is declared fp16");
    put32(buf + 68, 1);

    /* size must match the declared const */
    CHECK(blob_read_tensor(buf, len, 64, BLOB_DT_FP16, 64, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "needs 64 bytes");

    /* non-finite detection */
    buf[128 + 2 * 5 + 1] = 0x7c;
    buf[128 + 2 * 5] = 0x00;
    CHECK(blob_read_tensor(buf, len, 64, BLOB_DT_FP16, 32, &t, err, sizeof err) == 0);
    CHECK(blob_first_nonfinite(&t) == 5);
    test_nonfinite_positions();
    T_DONE("test_blob");
}
