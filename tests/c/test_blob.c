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

    /* dtype */
    put32(buf + 68, 9);
    CHECK(blob_read_tensor(buf, len, 64, 0, 0, &t, err, sizeof err) == -1);
    CHECK_HAS(err, "unsupported blob dtype code 9");
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
    T_DONE("test_blob");
}
