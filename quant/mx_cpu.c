/* The CPU fast path of quant.mx: fake-quantize fp32/bf16 tensors in MX blocks, round-to-nearest-even.
 *
 * This file is the algorithm of quant/mx.py's docstring written once more as a loop over memory,
 * because on CPU that algorithm is bound by arithmetic, not by memory: the work is in how few
 * vector instructions each block takes. (torch.compile's kernel recomputes each block's scale in
 * scalar code for every vector of elements and is 2-3x slower.) It must be, and is tested to be,
 * bit-identical to the eager reference in quant/mx.py (tests/quant/test_native.py).
 *
 * Every step is IEEE-754 fp32 arithmetic on the values the reference computes: a divide where it
 * divides, a multiply where it multiplies. Build flags matter: -ffp-contract=off (no fused
 * multiply-add) and never -ffast-math; quant/native.py builds it that way.
 *
 *   block maxima   amax = max |x_i|, read as the largest absolute bit pattern (non-negative floats
 *                  order like their bits; a NaN or Inf makes the pattern >= 0x7f800000 and the
 *                  whole block NaN, the rule quant.mx documents). Blocks of 16 and 32 take their
 *                  maxima 16 blocks at a time (tree_maxima: pairwise merges, no per-block
 *                  horizontal reduction).
 *   scale          E8M0: 2**e from amax's exponent bits (floor, or the ceil rule), clamped;
 *                  UE4M3/UE5M3: amax / max_elem (over the global scale g, if any) rounded
 *                  half-to-even onto the scale grid; fp32: amax / max_elem
 *   elements       y = x * (1/S); |y| clamped to max_elem and rounded onto the element grid with
 *                  the add trick ((|y| + M) - M, M = 2**(k + 23), whose ulp is the grid step
 *                  2**k); times S; kept finite; sign back.
 *
 * One pass over memory, except with the two-level (NVFP4) scale: its per-tensor amax must be known
 * before any block's scale, so mx_block_maxima first stores every block's maximum (4 bytes each,
 * 1/8 of a bf16 input in blocks of 16) and returns their max; mx_quantize then reads those instead of
 * taking the maxima again. The input is read twice either way; the maxima are computed once.
 *
 * Layout: a contiguous (pre, nblocks, block, post) array, blocks along dim 2. post == 1 (blocks
 * along the last dim) is the common case and vectorizes along the block; post > 1 (e.g. the wgrad
 * operands, blocked along tokens) vectorizes along post, a chunk of columns at a time.
 */
#include <stdint.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define F32_MAX 3.40282346638528859812e+38f
#define CHUNK 256

typedef struct {
    int32_t scale_kind;  /* 0: power of two (E8M0), 1: float grid (UE4M3, UE5M3), 2: exact fp32 */
    int32_t ceil_rule;   /* power of two only: 1 = the ceil rule, 0 = floor */
    int32_t exp_lo, exp_hi;              /* power of two only: range of the exponent */
    int32_t elem_emax;                   /* OCP emax_elem */
    float elem_max;                      /* largest element */
    float elem_mant;                     /* elem_max / 2**elem_emax (the ceil rule's threshold) */
    int32_t e_emin, e_mbits;             /* element grid: emin, mantissa bits */
    int32_t s_emin, s_mbits;             /* scale grid (float scales) */
    float s_max;                         /* largest scale (float scales) */
    float g;                             /* per-tensor global scale; 0 = none */
} mx_params;

INLINE uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
INLINE float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* 2**k for integer k in [-149, 127], from bits (subnormals included), as quant.mx._pow2. */
INLINE float pow2f(int k) { return k >= -126 ? u2f((uint32_t)(k + 127) << 23) : u2f(1u << (k + 149)); }

/* Round a >= 0 onto a grid, half to even, saturating at gmax: a is clamped to gmax first (the same
 * as saturating after rounding: rounding is monotone and gmax is on the grid), then rounded with the
 * add trick, M = 2**(k + 23) for the grid step 2**k at a (at least emin's). The clamps compare bit
 * patterns: non-negative floats order like their bits, and an integer min or max is one vector
 * instruction where a float compare-and-select is two. +Inf and NaN give gmax: callers deal with
 * those values (a NaN block's scale, an Inf element) before they get here. */
INLINE float round_grid(float a, int emin, int mbits, float gmax) {
    const uint32_t max_bits = f2u(gmax), lo = (uint32_t)(emin + 127) << 23;
    uint32_t ab = f2u(a);
    ab = ab < max_bits ? ab : max_bits;
    uint32_t eb = ab > lo ? ab : lo; /* the grid step's binade: a's, at least emin's */
    float c = u2f(ab), m = u2f((eb & 0x7f800000u) + ((uint32_t)(23 - mbits) << 23));
    return (c + m) - m;
}

/* S and 1/S of n blocks from their largest |x| bit patterns m. A block holding NaN or Inf
 * (m >= 0x7f800000) gets S = NaN, which marks it for the element loops. One branch-free loop per
 * scale kind, so the compiler vectorizes it across blocks. */
INLINE void block_scales(const uint32_t *m, float *S, float *inv, int64_t n, const mx_params p) {
    if (p.scale_kind == 0) {
        for (int64_t j = 0; j < n; ++j) {
            float amax = u2f(m[j]);
            int sub = m[j] < 0x00800000u; /* fp32-subnormal maxima: lift by 2**64 (exact) */
            uint32_t ab = f2u(sub ? amax * 18446744073709551616.0f : amax);
            int e = (int)((ab >> 23) & 0xffu) - 127 - (sub ? 64 : 0) - p.elem_emax;
            e += p.ceil_rule && u2f((ab & 0x007fffffu) | 0x3f800000u) > p.elem_mant;
            e = e < p.exp_lo ? p.exp_lo : (e > p.exp_hi ? p.exp_hi : e);
            S[j] = m[j] >= 0x7f800000u ? u2f(0x7fc00000u) : pow2f(e);
            inv[j] = pow2f(-e);
        }
        return;
    }
    const float g = p.g != 0.0f ? p.g : 1.0f, inv_g = 1.0f / g; /* g = 1 is exact: no global scale */
    for (int64_t j = 0; j < n; ++j) {
        float s = u2f(m[j]) / p.elem_max / g;
        if (p.scale_kind == 1) s = round_grid(s, p.s_emin, p.s_mbits, p.s_max);
        float iv = inv_g / s;
        inv[j] = s > 0.0f ? (iv > F32_MAX ? F32_MAX : iv) : 0.0f; /* a zero scale zeroes its block */
        S[j] = m[j] >= 0x7f800000u ? u2f(0x7fc00000u) : g * s;
    }
}

/* One element: y = x / S as x * (1/S); |y| rounded onto the element grid (saturating), times S,
 * kept finite (an integer min again: |y| * S >= 0), sign back. */
INLINE float quant_elem(float x, float S, float inv, const mx_params p) {
    uint32_t yb = f2u(x * inv);
    float r = round_grid(u2f(yb & 0x7fffffffu), p.e_emin, p.e_mbits, p.elem_max);
    uint32_t ob = f2u(r * S);
    ob = ob < 0x7f7fffffu ? ob : 0x7f7fffffu; /* F32_MAX */
    return u2f(ob | (yb & 0x80000000u));
}

/* Element-wise formats (no block scale): bf16 (grid = 0) rounds half to even at bit 16 of the fp32
 * pattern, which is also exact on bf16's subnormal grid, and saturates at bf16's max instead of
 * overflowing; other grids (fp16) use round_grid. Inf passes through, NaN stays NaN. Selects, not an
 * early return, so that mx_round's loop vectorizes (bf16 is the same for the whole loop). */
INLINE float round_elementwise(float v, int32_t bf16, const mx_params p) {
    uint32_t u = f2u(v), a = u & 0x7fffffffu, sign = u & 0x80000000u, r;
    if (bf16) {
        r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        r = (r & 0x7fffffffu) >= 0x7f800000u ? (sign | 0x7f7f0000u) : r;
    } else {
        r = f2u(round_grid(u2f(a), p.e_emin, p.e_mbits, p.elem_max)) | sign;
    }
    return u2f(a >= 0x7f800000u ? u : r);
}

/* Element types: |x| as bits, x as fp32, and the stores: of a finite value (fp32 -> bf16 rounds half
 * to even, as PyTorch's conversion) and of the NaN that fills a block holding NaN or Inf. */
INLINE uint32_t absbits_f32(const float *x, int64_t i) { return f2u(x[i]) & 0x7fffffffu; }
INLINE float load_f32(const float *x, int64_t i) { return x[i]; }
INLINE void store_f32(float *o, int64_t i, float v) { o[i] = v; }
INLINE uint32_t absbits_bf16(const uint16_t *x, int64_t i) { return (uint32_t)(x[i] & 0x7fffu) << 16; }
INLINE float load_bf16(const uint16_t *x, int64_t i) { return u2f((uint32_t)x[i] << 16); }
INLINE uint16_t bf16_bits(float v) { /* fp32 -> bf16, half to even; v is never NaN here */
    uint32_t u = f2u(v);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
INLINE void store_bf16(uint16_t *o, int64_t i, float v) { o[i] = bf16_bits(v); }
INLINE void store_nan_f32(float *o, int64_t i) { o[i] = u2f(0x7fc00000u); }
/* The largest |x| of n contiguous values, as an fp32 bit pattern. */
#define BLOCK_ABSMAX(T, SUF)                                                                       \
    INLINE uint32_t block_absmax_##SUF(const T *x, int64_t n) {                                    \
        uint32_t m = 0;                                                                            \
        for (int64_t i = 0; i < n; ++i) {                                                          \
            uint32_t a = absbits_##SUF(x, i);                                                      \
            m = a > m ? a : m;                                                                     \
        }                                                                                          \
        return m;                                                                                  \
    }
BLOCK_ABSMAX(float, f32)
BLOCK_ABSMAX(uint16_t, bf16)
INLINE void store_nan_bf16(uint16_t *o, int64_t i) { o[i] = 0x7fc0u; }
/* Store v, or the NaN of store_nan_* where nan is all ones (its block holds NaN or Inf), as a bit
 * mask, not a branch or a ?: on the store: the column loop then vectorizes (about 8x faster with
 * GCC 12 on AVX2 than a per-element branch). */
INLINE void store_sel_f32(float *o, int64_t i, float v, uint32_t nan) {
    o[i] = u2f((f2u(v) & ~nan) | (0x7fc00000u & nan));
}
INLINE void store_sel_bf16(uint16_t *o, int64_t i, float v, uint32_t nan) {
    o[i] = (uint16_t)((bf16_bits(v) & ~nan) | (0x7fc0u & nan));
}

/* Maxima of 16 blocks at once. One block per register and a horizontal max each costs a log2(bs)
 * chain of shuffles per block; instead, registers holding several blocks are merged pairwise:
 * each step takes the first halves of every block of two registers into one and the second halves
 * into another (two two-register shuffles) and keeps their max, which halves the values left per
 * block and doubles the blocks per register. After log2(bs) steps one register holds the maxima
 * of 16 blocks, one per 32-bit lane, for about two instructions per block instead of ~10. Written
 * with the vector extensions of GCC >= 12 and Clang, which lower to the target's own shuffles.
 * AVX-512 builds only: the registers are 64 bytes, and on a CPU without AVX-512 each is split into
 * 32-byte halves whose cross-half shuffles the compiler lowers lane by lane, which made a whole
 * quantization 4-5x slower than the plain loop of block_absmax (GCC 12, AVX2, blocks of 32). */
#if defined(__has_builtin) && defined(__AVX512F__) && defined(__AVX512BW__)
#if __has_builtin(__builtin_shufflevector)
#define MX_TREE_MAXIMA 1
#endif
#endif
#ifdef MX_TREE_MAXIMA
typedef uint64_t vq __attribute__((vector_size(64)));
typedef uint32_t vd __attribute__((vector_size(64)));
typedef uint16_t vw __attribute__((vector_size(64)));
/* Loads through memcpy: any alignment, no aliasing of float memory as integers. */
INLINE vw load_vw(const uint16_t *x) { vw v; memcpy(&v, x, sizeof v); return v; }
INLINE vd load_vd(const float *x) { vd v; memcpy(&v, x, sizeof v); return v; }
/* Of the 128 bytes of registers a and b, the even (lo) and odd (hi) units of 256, 128, 64 and 32
 * bits, in order. */
#define PICK256(a, b, h) __builtin_shufflevector(a, b, 0 + 4 * h, 1 + 4 * h, 2 + 4 * h, 3 + 4 * h,      \
                                                 8 + 4 * h, 9 + 4 * h, 10 + 4 * h, 11 + 4 * h)
#define PICK128(a, b, h) __builtin_shufflevector(a, b, 0 + 2 * h, 1 + 2 * h, 4 + 2 * h, 5 + 2 * h,      \
                                                 8 + 2 * h, 9 + 2 * h, 12 + 2 * h, 13 + 2 * h)
#define PICK64(a, b, h) __builtin_shufflevector(a, b, 0 + h, 2 + h, 4 + h, 6 + h, 8 + h, 10 + h, 12 + h, \
                                                14 + h)
#define PICK32(a, b, h)                                                                            \
    __builtin_shufflevector(a, b, 0 + h, 2 + h, 4 + h, 6 + h, 8 + h, 10 + h, 12 + h, 14 + h, 16 + h, \
                            18 + h, 20 + h, 22 + h, 24 + h, 26 + h, 28 + h, 30 + h)
/* Lane-wise max of unsigned vectors (C has no vector ?:; compilers emit one max instruction). */
#define VMAX(V, a, b) (((a) & (V)((a) > (b))) | ((b) & ~(V)((a) > (b))))
/* One merge step on n registers of element type V (vw: bf16 bits, vd: fp32 bits), units of U bits. */
#define MERGE(V, n, r, PICK, VIEW)                                                                 \
    for (int i = 0; i < (n) / 2; ++i) {                                                            \
        V lo = (V)PICK((VIEW)r[2 * i], (VIEW)r[2 * i + 1], 0);                                     \
        V hi = (V)PICK((VIEW)r[2 * i], (VIEW)r[2 * i + 1], 1);                                     \
        r[i] = VMAX(V, lo, hi);                                                                    \
    }

/* |x| maxima of 16 consecutive blocks of bs (16 or 32) bf16 values, as fp32 bit patterns. */
INLINE void tree_maxima_bf16(const uint16_t *x, uint32_t *m, int64_t bs) {
    vw r[16];
    int n = (int)bs / 2; /* registers of 32 values */
    for (int i = 0; i < n; ++i) r[i] = load_vw(x + 32 * i) & 0x7fffu;
    if (bs == 32) MERGE(vw, 16, r, PICK256, vq) /* 16 registers of 1 block -> 8 of 2 */
    MERGE(vw, 8, r, PICK128, vq)                /* 2 blocks of 16 per register -> 4 blocks of 8 */
    MERGE(vw, 4, r, PICK64, vq)                 /* -> 8 blocks of 4 */
    MERGE(vw, 2, r, PICK32, vd)                 /* -> 16 blocks of 2: one 32-bit lane each */
    vd pair = (vd)r[0], lo = pair & 0xffffu, hi = pair >> 16;
    vd best = VMAX(vd, lo, hi) << 16;
    memcpy(m, &best, sizeof best);
}

/* The same for 16 blocks of bs (16 or 32) fp32 values. */
INLINE void tree_maxima_f32(const float *x, uint32_t *m, int64_t bs) {
    vd r[16];
    for (int i = 0; i < 16; ++i) {
        vd a = load_vd(x + bs * i) & 0x7fffffffu;
        if (bs == 32) {
            vd b = load_vd(x + bs * i + 16) & 0x7fffffffu;
            a = VMAX(vd, a, b);
        }
        r[i] = a;
    }
    MERGE(vd, 16, r, PICK256, vq) /* 1 block of 16 per register -> 2 blocks of 8 */
    MERGE(vd, 8, r, PICK128, vq)  /* -> 4 blocks of 4 */
    MERGE(vd, 4, r, PICK64, vq)   /* -> 8 blocks of 2 */
    MERGE(vd, 2, r, PICK32, vd)   /* -> 16 blocks of 1 */
    memcpy(m, &r[0], sizeof r[0]);
}
#endif
#ifdef MX_TREE_MAXIMA
#define TREE_MAXIMA(...) __VA_ARGS__
#else
#define TREE_MAXIMA(...)
#endif

/* quant_elem (with round_grid inlined) on 16 lanes with AVX-512 intrinsics, line for line (the same operations in the same
 * order, so the same bits), for rows of blocks of 16, 32, 64... and for columns 16 at a time. GCC
 * vectorizes quant_elem's loop with two 8-lane halves per block, packs with a permute and
 * re-broadcasts constants; written out for 16-lane registers the element loop takes about a quarter
 * less time for bf16 (fp32 is bound by memory either way). Elements travel as fp32 bit patterns
 * (bf16 widened by a 16-bit shift). Without AVX-512 the plain loops in apply_* do the same; the
 * tests run both builds. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
INLINE __m512i load16_f32(const float *x) { return _mm512_loadu_si512(x); }
INLINE void store16_f32(float *o, __m512i v) { _mm512_storeu_si512(o, v); }
INLINE __m512i load16_bf16(const uint16_t *x) {
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)x)), 16);
}
INLINE void store16_bf16(uint16_t *o, __m512i u) { /* store_bf16's rounding, 16 lanes */
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                          _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(u, bias), 16)));
}
INLINE __m512i quant16(__m512i xb, __m512 S, __m512 inv, const mx_params p) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), sign_mask = _mm512_set1_epi32((int)0x80000000u);
    __m512i yb = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(xb), inv));
    __m512i ab = _mm512_min_epu32(_mm512_and_si512(yb, abs_mask), _mm512_set1_epi32((int)f2u(p.elem_max)));
    __m512i eb = _mm512_max_epu32(ab, _mm512_set1_epi32((p.e_emin + 127) << 23));
    __m512 a = _mm512_castsi512_ps(ab);
    __m512 m = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_and_si512(eb, _mm512_set1_epi32(0x7f800000)),
                                                    _mm512_set1_epi32((23 - p.e_mbits) << 23)));
    __m512i ob = _mm512_castps_si512(_mm512_mul_ps(_mm512_sub_ps(_mm512_add_ps(a, m), m), S));
    ob = _mm512_min_epu32(ob, _mm512_set1_epi32(0x7f7fffff));
    return _mm512_or_si512(ob, _mm512_and_si512(yb, sign_mask));
}
#define AVX512(...) __VA_ARGS__
#else
#define AVX512(...)
#endif

/* Blocks per group along rows: up to CHUNK, about 4096 values (16 KiB of fp32, in L1 while its
 * maxima, scales and elements are computed). */
INLINE int64_t row_group_blocks(int64_t bs) { return bs >= 4096 ? 1 : (4096 / bs < CHUNK ? 4096 / bs : CHUNK); }

#define KERNELS(T, SUF)                                                                            \
    /* The elements of n blocks of bs values from their scales. post == 1: block j is             \
     * x[j*bs .. j*bs + bs), vectorized along the block; else block j is the column x[i*post + j], \
     * vectorized across the blocks. */                                                            \
    INLINE void apply_##SUF(const T *restrict x, T *restrict o, int64_t bs, int64_t n, int64_t post, \
                            const float *restrict S, const float *restrict inv, const mx_params p) { \
        if (post == 1) {                                                                           \
            AVX512(if (bs % 16 == 0) {                                                             \
                for (int64_t j = 0; j < n; ++j) {                                                  \
                    if (S[j] != S[j]) {                                                            \
                        for (int64_t i = 0; i < bs; ++i) store_nan_##SUF(o, j * bs + i);           \
                        continue;                                                                  \
                    }                                                                              \
                    const __m512 Sj = _mm512_set1_ps(S[j]), ij = _mm512_set1_ps(inv[j]);           \
                    for (int64_t i = j * bs; i < (j + 1) * bs; i += 16)                            \
                        store16_##SUF(o + i, quant16(load16_##SUF(x + i), Sj, ij, p));            \
                }                                                                                  \
                return;                                                                            \
            })                                                                                     \
            for (int64_t j = 0; j < n; ++j) { /* the NaN test once per block, not per element */ \
                const T *restrict xj = x + j * bs;                                                 \
                T *restrict oj = o + j * bs;                                                       \
                const float Sj = S[j], ij = inv[j];                                                \
                if (Sj != Sj) {                                                                    \
                    for (int64_t i = 0; i < bs; ++i) store_nan_##SUF(oj, i);                       \
                    continue;                                                                      \
                }                                                                                  \
                for (int64_t i = 0; i < bs; ++i) store_##SUF(oj, i, quant_elem(load_##SUF(xj, i), Sj, ij, p)); \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        int64_t j0 = 0; /* columns [0, j0) by 16 lanes, the rest one by one */                  \
        AVX512(                                                                                    \
            j0 = n - n % 16;                                                                       \
            for (int64_t i = 0; i < bs; ++i)                                                       \
                for (int64_t j = 0; j < j0; j += 16) {                                             \
                    const __m512 Sj = _mm512_loadu_ps(S + j), ij = _mm512_loadu_ps(inv + j);       \
                    /* lanes whose block holds NaN or Inf (S = NaN) store NaN, as store_nan_* */   \
                    const __mmask16 nan = _mm512_cmp_ps_mask(Sj, Sj, _CMP_UNORD_Q);                \
                    __m512i v = quant16(load16_##SUF(x + i * post + j), Sj, ij, p);                \
                    v = _mm512_mask_mov_epi32(v, nan, _mm512_set1_epi32(0x7fc00000));              \
                    store16_##SUF(o + i * post + j, v);                                            \
                })                                                                                 \
        for (int64_t i = 0; i < bs; ++i) { /* row i of the tile; NaN blocks by a mask */          \
            const T *restrict xi = x + i * post;                                                   \
            T *restrict oi = o + i * post;                                                         \
            for (int64_t j = j0; j < n; ++j)                                                       \
                store_sel_##SUF(oi, j, quant_elem(load_##SUF(xi, j), S[j], inv[j], p),             \
                                -(uint32_t)(S[j] != S[j]));                                        \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* The largest |x| bit patterns of n consecutive blocks of bs values. */                      \
    INLINE void row_maxima_##SUF(const T *restrict x, uint32_t *m, int64_t bs, int64_t n) {        \
        int64_t j = 0;                                                                             \
        TREE_MAXIMA(                                                                               \
            if (bs == 16 || bs == 32) for (; j + 16 <= n; j += 16) tree_maxima_##SUF(x + j * bs, m + j, bs);) \
        for (; j < n; ++j) m[j] = block_absmax_##SUF(x + j * bs, bs);                              \
    }                                                                                              \
                                                                                                   \
    /* The same for nq columns of a (bs, post) tile: column q is a block of stride post. */       \
    INLINE void col_maxima_##SUF(const T *restrict x, uint32_t *m, int64_t bs, int64_t post,       \
                                 int64_t nq) {                                                     \
        for (int64_t q = 0; q < nq; ++q) m[q] = 0;                                                 \
        for (int64_t i = 0; i < bs; ++i)                                                           \
            for (int64_t q = 0; q < nq; ++q) {                                                     \
                uint32_t a = absbits_##SUF(x, i * post + q);                                       \
                m[q] = a > m[q] ? a : m[q];                                                        \
            }                                                                                      \
    }                                                                                              \
                                                                                                   \
    /* n consecutive blocks of bs values (post == 1): maxima (or M's, already taken), scales,     \
     * elements. */                                                                                \
    INLINE void row_group_##SUF(const T *restrict x, T *restrict o, const int64_t bs, int64_t n,   \
                                const uint32_t *M, const mx_params p) {                            \
        uint32_t m[CHUNK];                                                                         \
        float S[CHUNK], inv[CHUNK];                                                                \
        if (M) memcpy(m, M, (size_t)n * sizeof *m);                                                \
        else row_maxima_##SUF(x, m, bs, n);                                                        \
        block_scales(m, S, inv, n, p);                                                             \
        apply_##SUF(x, o, bs, n, 1, S, inv, p);                                                    \
    }                                                                                              \
                                                                                                   \
    /* Columns [0, nq) of one (block, post) tile, each column a block of stride post. */          \
    INLINE void col_chunk_##SUF(const T *restrict x, T *restrict o, int64_t bs, int64_t post,      \
                                int64_t nq, const uint32_t *M, const mx_params p) {                \
        uint32_t m[CHUNK];                                                                         \
        float S[CHUNK], inv[CHUNK];                                                                \
        if (M) memcpy(m, M, (size_t)nq * sizeof *m);                                               \
        else col_maxima_##SUF(x, m, bs, post, nq);                                                 \
        block_scales(m, S, inv, nq, p);                                                            \
        apply_##SUF(x, o, bs, nq, post, S, inv, p);                                                \
    }                                                                                              \
                                                                                                   \
    /* The kernel. Blocks (tiles) of bs values along dim 2 of a (ntiles / post-less) layout; M, when \
     * not NULL, holds every block's largest |x| bit pattern from mx_block_maxima (the two-level     \
     * scaling's second pass), else each group of blocks takes its own maxima. */                    \
    void mx_quantize_##SUF(const T *restrict x, T *restrict o, int64_t ntiles, int64_t bs,         \
                           int64_t post, const uint32_t *M, const mx_params *params,               \
                           int32_t threads) {                                                      \
        /* A local copy: the output stores cannot alias it, so the loops keep it in registers. */  \
        const mx_params p = *params;                                                               \
        if (post == 1) { /* groups of up to CHUNK blocks: the scales vectorize across blocks */    \
            int64_t group = row_group_blocks(bs), ngroups = (ntiles + group - 1) / group;         \
            _Pragma("omp parallel for schedule(static) num_threads(threads)")                      \
            for (int64_t t = 0; t < ngroups; ++t) {                                                \
                int64_t b = t * group, n = ntiles - b < group ? ntiles - b : group;               \
                const uint32_t *Mb = M ? M + b : NULL;                                             \
                if (bs == 32) row_group_##SUF(x + b * 32, o + b * 32, 32, n, Mb, p);               \
                else if (bs == 16) row_group_##SUF(x + b * 16, o + b * 16, 16, n, Mb, p);          \
                else row_group_##SUF(x + b * bs, o + b * bs, bs, n, Mb, p);                        \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        int64_t nchunks = (post + CHUNK - 1) / CHUNK;                                              \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                          \
        for (int64_t t = 0; t < ntiles * nchunks; ++t) {                                           \
            int64_t b = t / nchunks, q0 = (t % nchunks) * CHUNK;                                   \
            int64_t nq = post - q0 < CHUNK ? post - q0 : CHUNK;                                    \
            col_chunk_##SUF(x + b * bs * post + q0, o + b * bs * post + q0, bs, post, nq,          \
                            M ? M + b * post + q0 : NULL, p);                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* Every block's largest |x| bit pattern into M (block b, column q at M[b * post + q]); returns \
     * the largest of all (>= 0x7f800000: NaN or Inf present). The first pass of two-level scaling: \
     * the per-tensor amax comes from the block maxima, so the input is not scanned twice for them. */ \
    uint32_t mx_block_maxima_##SUF(const T *restrict x, uint32_t *restrict M, int64_t ntiles,      \
                                   int64_t bs, int64_t post, int32_t threads) {                    \
        uint32_t g = 0;                                                                            \
        int64_t group = post > 1 ? 1 : row_group_blocks(bs);                                       \
        int64_t ngroups = (ntiles + group - 1) / group;                                            \
        _Pragma("omp parallel for schedule(static) reduction(max : g) num_threads(threads)")       \
        for (int64_t t = 0; t < ngroups; ++t) {                                                    \
            int64_t b = t * group, n = ntiles - b < group ? ntiles - b : group;                   \
            uint32_t *m = M + b * post;                                                            \
            if (post > 1) col_maxima_##SUF(x + b * bs * post, m, bs, post, post);                  \
            else if (bs == 32) row_maxima_##SUF(x + b * 32, m, 32, n);                             \
            else if (bs == 16) row_maxima_##SUF(x + b * 16, m, 16, n);                             \
            else row_maxima_##SUF(x + b * bs, m, bs, n);                                           \
            for (int64_t j = 0; j < n * post; ++j) g = m[j] > g ? m[j] : g;                        \
        }                                                                                          \
        return g;                                                                                  \
    }                                                                                              \
                                                                                                   \
    /* An element-wise format over n values (grid: 1 = bf16's, 0 = the one in params). */          \
    void mx_round_##SUF(const T *restrict x, T *restrict o, int64_t n, int32_t bf16,               \
                        const mx_params *params, int32_t threads) {                                \
        const mx_params p = *params;                                                               \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                          \
        for (int64_t k = 0; k < n; ++k) {                                                          \
            float v = round_elementwise(load_##SUF(x, k), bf16, p);                               \
            store_sel_##SUF(o, k, v, -(uint32_t)(v != v));                                         \
        }                                                                                          \
    }

KERNELS(float, f32)
KERNELS(uint16_t, bf16)
