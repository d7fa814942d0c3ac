/*
 * sim_kernels.h - compute kernels of the sim executor (internal).
 *
 * The executor stores fp16 tensors as fp16 bit patterns and computes in fp32.
 * The GEMM (used by conv and matmul) packs cache-sized panels of both operands
 * into fp32 (converting fp16 on the fly), accumulates in fp32 with a 6x16
 * register-blocked micro-kernel (AVX2+FMA when the CPU has it, NEON on arm64,
 * portable C otherwise) and splits large problems over the threads of a
 * process-wide pool (sk_parallel). Every element is one fused multiply-add per
 * k, in k order, within each K block of 256, the blocks added in order: every
 * kernel does exactly that, so results are bit-identical on every host and for
 * any number of threads (tests/c/test_simd.c; a NaN result's payload is the
 * CPU's).
 */
#ifndef ANEC_SIM_KERNELS_H
#define ANEC_SIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* element kinds the kernels read */
enum { SK_F16 = 1, SK_F32 = 2 };

/* A strided matrix view: element (i, j) at p + (i * rs + j * cs) elements. */
typedef struct sk_mat {
    const void *p;
    int dt;             /* SK_F16 or SK_F32 */
    ptrdiff_t rs, cs;
} sk_mat;

/* C[M x N] (row stride ldc, fp32) = A[M x K] * B[K x N]. Uses up to `threads`
   threads for large problems. Returns 0, or -1 if memory ran out. */
int sk_gemm(int M, int N, int K, sk_mat A, sk_mat B, float *C, ptrdiff_t ldc, int threads);

/* A constant A packed once for many products: sk_pack_a writes the fp32 panels that
   sk_gemm would build on every call into dst (sk_packed_a_floats(M, K) floats); 0, or -1 if
   memory ran out. sk_gemm_packed(M, N, K, dst, ...) then equals sk_gemm(M, N, K, A, ...)
   bit for bit, without converting and reordering A again (for a skinny product, N of a
   few columns, that packing is most of the work). */
size_t sk_packed_a_floats(int M, int K);
int sk_pack_a(int M, int K, sk_mat A, float *dst);
int sk_gemm_packed(int M, int N, int K, const float *Ap, sk_mat B, float *C, ptrdiff_t ldc, int threads);

/* C = A * B reading A's rows where they are (A.cs == 1; any other A goes to sk_gemm): no
   packed copy of A, each group of rows converted to fp32 a K block at a time and multiplied
   with every column of B, which is packed once per call. For products of a few columns
   (a decode step's block), where A is read once and the work is the multiply-adds; equals
   sk_gemm bit for bit. 0, or -1 if memory ran out. */
int sk_gemm_rows(int M, int N, int K, sk_mat A, sk_mat B, float *C, ptrdiff_t ldc, int threads);

/* Narrow products (a decode step's few distinct columns) read the weight more often than
   they compute with it, so their A is packed once as fp16 (half the bytes of sk_pack_a's fp32
   panels): slivers of SK_SLIVER_ROWS rows, k-major: element (r, k) of A is half
   k * SK_SLIVER_ROWS + r % SK_SLIVER_ROWS of sliver r / SK_SLIVER_ROWS (sk_packed_narrow_halves(M, K) halves; A must be
   SK_F16). sk_gemm_narrow then equals sk_gemm bit for bit: the same fused multiply-adds in the
   same k order, per K block, for each element. It needs AVX2, FMA and F16C, or NEON
   (sk_have_narrow()); both return -1 without them, or if memory runs out. */
enum { SK_SLIVER_ROWS = 32 }; /* four vectors of 8: eight independent sums per column pair */
int sk_have_narrow(void);
size_t sk_packed_narrow_halves(int M, int K);
int sk_pack_narrow(int M, int K, sk_mat A, uint16_t *dst);
int sk_gemm_narrow(int M, int N, int K, const uint16_t *Ah, sk_mat B, float *C, ptrdiff_t ldc, int threads);
/* C = A * B for an A held only as sk_pack_narrow's slivers, however wide the product: each
   sliver's rows are one strided matrix (row stride 1, column stride SK_SLIVER_ROWS) for sk_gemm, so the
   result equals sk_gemm's on the rows, bit for bit. 0, or -1 if memory ran out. */
int sk_gemm_slivers(int M, int N, int K, const uint16_t *Ah, sk_mat B, float *C, ptrdiff_t ldc, int threads);

/* Run fn(arg, part, parts) for every part in [0, parts) on up to `threads` threads: the
   calling one and threads - 1 of the process's workers (at most SK_POOL_MAX, started on first
   use and kept for later calls, so a small product does not pay for starting threads). Parts
   are handed out as threads come free, and the caller takes any part no worker has started,
   so a worker that wakes late costs little; a call made while another thread's call has the
   workers runs all its parts itself. Returns once every part is done. (sim_pool.c) */
#define SK_POOL_MAX 7
void sk_parallel(int threads, int parts, void (*fn)(void *arg, int part, int parts), void *arg);

/* Reference triple loop (tests and benchmarks compare against it). */
void sk_gemm_naive(int M, int N, int K, sk_mat A, sk_mat B, float *C, ptrdiff_t ldc);

/* 1 when the AVX2+FMA micro-kernel is used on this CPU. */
int sk_have_avx2(void);

/* Copy an n-d strided array: dst[idx . dst_strides] = src[idx . src_strides]
   for every idx < shape; strides in elements, esize in {1, 2, 4, 8}. */
void sk_nd_copy(size_t esize, int rank, const int64_t *shape,
                void *dst, const int64_t *dst_strides,
                const void *src, const int64_t *src_strides);

/* Contiguous row-major strides of a shape. */
void sk_strides(int rank, const int64_t *shape, int64_t *strides);

#endif
