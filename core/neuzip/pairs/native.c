/* The CPU codec of NeuZip's format 3 (pairs of exponents, 8 interleaved 64-bit rANS states per chunk, two pairs per
 * refill; see core/neuzip/pairs/__init__.py for the format), in C. Built by core/neuzip/pairs/native.py with the
 * system's C compiler into a small shared library and called through ctypes (which releases the GIL for the call).
 *
 * Why C: the numba twin of this file (core/neuzip/pairs/numba_codec.py, the fallback where no compiler is found)
 * costs a process ~140 MiB of RSS to import and ~70 MiB more for its first call (LLVM), more than NeuZip saves on a
 * 135 M-parameter model; this library costs a few hundred KB.
 *
 * No heap allocation: the decoder works through each chunk in pieces of PIECE_ROUNDS rounds in a stack scratch
 * (8 KB, which stays in L1), the encoder writes into the caller's arrays. Every function checks its bounds; a
 * corrupt stream is reported (never read or written out of bounds). Integer arithmetic only, except the block
 * normaliser's single float32 multiply (IEEE, no contraction: built with -ffp-contract=off). */
#include <stdint.h>
#include <string.h>

#define LANES 8
#define ROUND 16                    /* pairs per round: each state decodes two, then refills once */
#define PRECISION 15
#define MASK ((uint64_t)((1u << PRECISION) - 1))
#define LOW ((uint64_t)1 << 31)     /* a state lies in [2**31, 2**63) */
#define SHIFT 32
#define PIECE_ROUNDS 256            /* rounds decoded before merging: 4,096 pairs, 8 KB of scratch */
#define PIECE_PAIRS (PIECE_ROUNDS * ROUND)

typedef int64_t i64;
typedef uint64_t u64;

static inline u64 step(u64 x, u64 t) { return (t & 0xFFFF) * (x >> PRECISION) + (x & MASK) - (t >> 48); }

/* ---- decoding ------------------------------------------------------------------------------------------------- */

/* Decode `rounds` rounds (16 pairs each) from the states x[8] and the word pointer p into pairs[16 * rounds] (uint16,
 * first exponent in the low byte); returns the new word pointer. Never reads past words[nwords - 1]: while a round
 * cannot reach the end the reads are unchecked, the last rounds check each read (a corrupt stream then decodes
 * garbage that the caller's end check catches). */
static i64 decode_rounds(const uint32_t *restrict words, i64 nwords, i64 p, u64 *restrict x,
                         const uint8_t *restrict slot_pair, const u64 *restrict info, uint16_t *restrict pairs,
                         i64 rounds) {
    u64 x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7], t, w, need;
    /* pointers rather than indices: two registers fewer in a loop that needs all sixteen */
    const uint32_t *wp = words + p, *const wsafe = words + nwords - LANES;
    uint16_t *out = pairs;
    uint16_t *const out_end = pairs + rounds * ROUND;
#define DEC(X, J) t = info[slot_pair[X & MASK]]; out[J] = (uint16_t)(t >> 16); X = step(X, t);
    /* branch-free refill (a state needs a word in about a third of the rounds, at random: a branch mispredicts) */
#define REFILL(X) w = *wp; need = X < LOW; X = (X << (need * SHIFT)) | (w & -need); wp += need;
    if (nwords >= LANES) {
        while (out < out_end && wp <= wsafe) {
            DEC(x0, 0) DEC(x1, 1) DEC(x2, 2) DEC(x3, 3) DEC(x4, 4) DEC(x5, 5) DEC(x6, 6) DEC(x7, 7)
            DEC(x0, 8) DEC(x1, 9) DEC(x2, 10) DEC(x3, 11) DEC(x4, 12) DEC(x5, 13) DEC(x6, 14) DEC(x7, 15)
            REFILL(x0) REFILL(x1) REFILL(x2) REFILL(x3) REFILL(x4) REFILL(x5) REFILL(x6) REFILL(x7)
            out += ROUND;
        }
    }
#undef DEC
#undef REFILL
    x[0] = x0; x[1] = x1; x[2] = x2; x[3] = x3; x[4] = x4; x[5] = x5; x[6] = x6; x[7] = x7;
    p = wp - words;
    while (out < out_end) {  /* the last rounds, reads checked */
        for (int j = 0; j < ROUND; j++) {
            t = info[slot_pair[x[j % LANES] & MASK]];
            out[j] = (uint16_t)(t >> 16);
            x[j % LANES] = step(x[j % LANES], t);
        }
        for (int j = 0; j < LANES; j++) {
            if (x[j] < LOW) {
                w = p < nwords ? words[p] : 0;
                x[j] = (x[j] << SHIFT) | w;
                p++;
            }
        }
        out += ROUND;
    }
    return p;
}

/* out[i] (bf16 bits) for i < count from exponent byte e[i] and the packed field of weight src + i (src a multiple of
 * 8: whole packed bytes). k = 7: one sign/mantissa byte per weight; k < 7: P = 8 / (k + 1) fields a byte, field_bits
 * (256 * P) gives each field's sign and mantissa bits as they sit in bf16 (the loop over a byte's fields has a
 * constant trip count per k, so it unrolls). */
#define MERGE_PACKED(PER, SHIFT_)                                                                                    \
    {                                                                                                                \
        const uint8_t *restrict packed = fields + (src >> SHIFT_);                                                  \
        const i64 whole = count >> SHIFT_;                                                                           \
        for (i64 j = 0; j < whole; j++) {                                                                            \
            const uint16_t *restrict row = field_bits + (i64)packed[j] * PER;                                        \
            for (int q = 0; q < PER; q++) out[PER * j + q] = row[q] | (uint16_t)((uint16_t)e[PER * j + q] << 7);    \
        }                                                                                                            \
        for (i64 i = whole << SHIFT_; i < count; i++)                                                                \
            out[i] = field_bits[((i64)packed[i >> SHIFT_] << SHIFT_) | (i & (PER - 1))]                              \
                     | (uint16_t)((uint16_t)e[i] << 7);                                                              \
    }

static void merge(const uint8_t *restrict e, const uint8_t *restrict fields, uint16_t *restrict out, i64 src,
                  i64 count, int k, const uint16_t *restrict field_bits) {
    if (k == 7) {
        const uint8_t *restrict raw = fields + src;
        for (i64 i = 0; i < count; i++) {
            const uint16_t r = raw[i];
            out[i] = (uint16_t)(((r & 0x80) << 8) | ((uint16_t)e[i] << 7) | (r & 0x7F));
        }
    } else if (k == 3) {
        MERGE_PACKED(2, 1)
    } else if (k == 1) {
        MERGE_PACKED(4, 2)
    } else {
        MERGE_PACKED(8, 3)
    }
}
#undef MERGE_PACKED

/* Times 1 + code / 128 in float32, rounded to bf16 (nearest even), per block of `block` weights; dest holds the bf16
 * bits of weights src, src + 1, ...; NaNs pass unchanged (core.neuzip.normaliser.denormalise). */
static void scale_blocks(uint16_t *restrict dest, i64 count, const uint8_t *restrict scales, i64 src, i64 block) {
    uint32_t wide[256];
    float value[256];
    i64 i = 0;
    while (i < count) {
        const i64 b = (src + i) / block;
        const i64 end = (b + 1) * block - src < count ? (b + 1) * block - src : count;
        const float scale = 1.0f + (float)scales[b] / 128.0f;
        while (i < end) {  /* 256 weights at a time through float32, each loop branch-free: they vectorise */
            const i64 len = end - i < 256 ? end - i : 256;
            uint16_t *restrict seg = dest + i;
            for (i64 j = 0; j < len; j++) wide[j] = (uint32_t)seg[j] << 16;
            memcpy(value, wide, (size_t)len * 4);
            for (i64 j = 0; j < len; j++) value[j] = value[j] * scale;
            memcpy(wide, value, (size_t)len * 4);
            for (i64 j = 0; j < len; j++) {
                const uint16_t rounded = (uint16_t)((wide[j] + 0x7FFFu + ((wide[j] >> 16) & 1u)) >> 16);
                seg[j] = (seg[j] & 0x7FFF) > 0x7F80 ? seg[j] : rounded;  /* NaNs unchanged */
            }
            i += len;
        }
    }
}

/* Decode chunks [first, last) of a stream: merged into bf16 bits out[w - out_offset] (when out is given) and/or as
 * exponent bytes exponents_out[w - out_offset] (when given), for every weight w of those chunks. Returns -1 when
 * every chunk ends where it must (its 8 states back at 2**31, its words and escapes used up), else the first chunk
 * that does not. */
i64 nz_decode_range(const uint32_t *words, i64 nwords, const u64 *states, const uint32_t *offsets,
                    const uint8_t *escapes, const uint32_t *escape_offsets, i64 n, i64 chunk_size, i64 first, i64 last,
                    const uint8_t *slot_pair, const u64 *info, i64 marker_, const uint8_t *fields,
                    const uint8_t *scales, uint16_t *out, i64 out_offset, i64 k, i64 block,
                    const uint16_t *field_bits, uint8_t *exponents_out) {
    uint16_t scratch[PIECE_PAIRS];
    uint8_t *exps = (uint8_t *)scratch;
    const uint8_t marker = (uint8_t)marker_;
    u64 x[LANES];
    for (i64 c = first; c < last; c++) {
        const i64 lo = c * chunk_size;
        const i64 count = (n < lo + chunk_size ? n : lo + chunk_size) - lo;
        const i64 rounds = ((count + 1) / 2 + ROUND - 1) / ROUND;
        for (int j = 0; j < LANES; j++) x[j] = states[c * LANES + j];
        i64 p = offsets[c], q = escape_offsets[c];
        const i64 q_end = escape_offsets[c + 1];
        for (i64 r0 = 0; r0 < rounds; r0 += PIECE_ROUNDS) {
            const i64 r = rounds - r0 < PIECE_ROUNDS ? rounds - r0 : PIECE_ROUNDS;
            p = decode_rounds(words, nwords, p, x, slot_pair, info, scratch, r);
            const i64 start = r0 * 2 * ROUND;              /* the piece's first weight within the chunk */
            const i64 m = count - start < r * 2 * ROUND ? count - start : r * 2 * ROUND;
            const i64 src = lo + start, dst = src - out_offset;
            if (out) merge(exps, fields, out + dst, src, m, (int)k, field_bits);
            /* the escapes, in stream order (memchr: a vectorised scan; about 1 weight in 10**4 escapes) */
            for (uint8_t *hit = memchr(exps, marker, (size_t)m); hit;
                 hit = memchr(hit + 1, marker, (size_t)(exps + m - hit - 1))) {
                if (q >= q_end) return c;
                const i64 i = hit - exps;
                *hit = escapes[q];
                if (out) out[dst + i] = (uint16_t)((out[dst + i] & 0x807F) | ((uint16_t)escapes[q] << 7));
                q++;
            }
            if (out && block > 0) scale_blocks(out + dst, m, scales, src, block);
            if (exponents_out) memcpy(exponents_out + dst, exps, (size_t)m);
        }
        if (p != (i64)offsets[c + 1] || q != q_end) return c;
        for (int j = 0; j < LANES; j++)
            if (x[j] != LOW) return c;
    }
    return -1;
}

/* Where each segment of `segment` weights (a multiple of 32 dividing chunk_size) starts: its 8 states
 * seg_states[s * 8 ...], word pointer seg_p[s] and escapes taken so far seg_q[s]; the last entries of seg_p and
 * seg_q are the totals. Checks every chunk on the way; returns -1 when well formed, else the first bad chunk. */
i64 nz_segment_index(const uint32_t *words, i64 nwords, const u64 *states, const uint32_t *offsets,
                     const uint32_t *escape_offsets, i64 n, i64 chunk_size, i64 segment, const uint8_t *slot_pair,
                     const u64 *info, i64 marker_, u64 *seg_states, i64 *seg_p, i64 *seg_q, i64 num_segments) {
    uint16_t scratch[PIECE_PAIRS];
    const uint8_t *exps = (const uint8_t *)scratch;
    const uint8_t marker = (uint8_t)marker_;
    u64 x[LANES];
    const i64 num = (n + chunk_size - 1) / chunk_size;
    for (i64 c = 0; c < num; c++) {
        const i64 lo = c * chunk_size;
        const i64 hi = n < lo + chunk_size ? n : lo + chunk_size;
        for (int j = 0; j < LANES; j++) x[j] = states[c * LANES + j];
        i64 p = offsets[c], q = escape_offsets[c];
        for (i64 start = lo; start < hi; start += segment) {
            const i64 s = start / segment;
            for (int j = 0; j < LANES; j++) seg_states[s * LANES + j] = x[j];
            seg_p[s] = p;
            seg_q[s] = q;
            const i64 count = (hi < start + segment ? hi : start + segment) - start;
            const i64 rounds = ((count + 1) / 2 + ROUND - 1) / ROUND;
            for (i64 r0 = 0; r0 < rounds; r0 += PIECE_ROUNDS) {
                const i64 r = rounds - r0 < PIECE_ROUNDS ? rounds - r0 : PIECE_ROUNDS;
                p = decode_rounds(words, nwords, p, x, slot_pair, info, scratch, r);
                const i64 from = r0 * 2 * ROUND;
                const i64 m = count - from < r * 2 * ROUND ? count - from : r * 2 * ROUND;
                for (const uint8_t *hit = memchr(exps, marker, (size_t)m); hit;
                     hit = memchr(hit + 1, marker, (size_t)(exps + m - hit - 1)))
                    q++;
            }
        }
        if (p != (i64)offsets[c + 1] || q != (i64)escape_offsets[c + 1]) return c;
        for (int j = 0; j < LANES; j++)
            if (x[j] != LOW) return c;
    }
    seg_p[num_segments] = offsets[num];
    seg_q[num_segments] = escape_offsets[num];
    return -1;
}

/* ---- encoding ------------------------------------------------------------------------------------------------- */

/* bf16 bits (n) -> exponent bytes exponents[n] and packed 1 + k bit fields fields[ceil(n / P)] (zeroed here first),
 * and, when hist is given, how often each exponent byte occurs (hist[256], added to): the twin of
 * kernels.neuzip_bits.split_bf16_ref, bit for bit (k < 7: round to nearest even on the dropped bits, a carry into
 * the exponent, no carry into exponent 255, infinities and NaNs truncated with a NaN's quiet bit kept). */
void nz_split(const uint16_t *bits, i64 n, i64 k, uint8_t *exponents, uint8_t *fields, i64 *hist) {
    if (k == 7) {
        for (i64 i = 0; i < n; i++) {
            const uint16_t b = bits[i];
            exponents[i] = (uint8_t)(b >> 7);
            fields[i] = (uint8_t)(((b >> 8) & 0x80) | (b & 0x7F));
        }
    } else {
        const int width = (int)k + 1, per = 8 / width, d = 7 - (int)k;
        memset(fields, 0, (size_t)((n + per - 1) / per));
        for (i64 i = 0; i < n; i++) {
            const i64 b = bits[i];
            i64 mag = b & 0x7FFF;
            const i64 exp = mag >> 7;
            i64 trunc = (mag >> d) << d;
            i64 rounded = ((mag + (1 << (d - 1)) - 1 + ((mag >> d) & 1)) >> d) << d;
            if ((rounded >> 7) == 255) rounded = trunc;
            if (exp == 255) {
                if (k >= 1 && (mag & 0x7F) != 0) trunc |= 0x40;
                rounded = trunc;
            }
            mag = rounded;
            exponents[i] = (uint8_t)(mag >> 7);
            const i64 field = ((b >> 15) << k) | ((mag >> d) & ((1 << k) - 1));
            fields[i / per] |= (uint8_t)(field << ((i % per) * width));
        }
    }
    if (hist)
        for (i64 i = 0; i < n; i++) hist[exponents[i]]++;
}

static inline i64 pair_of(const uint8_t *e, i64 n, i64 i, const i64 *lookup, i64 alpha) {
    /* pair i: exponents 2 i and 2 i + 1 (an odd count padded with index 0) */
    return lookup[e[2 * i]] * alpha + (2 * i + 1 < n ? lookup[e[2 * i + 1]] : 0);
}

/* Entropy-code exponent bytes e[n] in format 3 with the table given as lookup[256] (byte -> alphabet index, the
 * escape index alpha - 1 for bytes outside the table), freq / cdf[alpha * alpha] and the pad pair. Chunk c (of
 * chunk_size weights) is coded backwards from 8 states at 2**31: states[c * 8 ...] get its decoder's initial states,
 * its words (in decoding order) go to words[offsets[c] ... offsets[c + 1]), its escaped bytes (in order) to
 * escapes[escape_offsets[c] ... escape_offsets[c + 1]). Returns the number of words written; -1 when words_cap
 * words are not enough, -2 when escapes_cap bytes are not enough, -3 when a pair to code has frequency 0 (a table
 * that does not cover the exponents). */
i64 nz_encode(const uint8_t *e, i64 n, const i64 *lookup, i64 alpha, i64 chunk_size, const i64 *freq, const i64 *cdf,
              i64 pad, u64 *states, uint32_t *offsets, uint32_t *words, i64 words_cap, uint8_t *escapes,
              i64 escapes_cap, uint32_t *escape_offsets) {
    const i64 m = (n + 1) / 2, chunk_pairs = chunk_size / 2;
    const i64 num = (n + chunk_size - 1) / chunk_size;
    i64 total = 0, q = 0;
    u64 x[LANES];
    offsets[0] = 0;
    escape_offsets[0] = 0;
    for (i64 c = 0; c < num; c++) {
        const i64 lo = c * chunk_pairs, hi = m < lo + chunk_pairs ? m : lo + chunk_pairs;
        const i64 w_lo = c * chunk_size, w_hi = n < w_lo + chunk_size ? n : w_lo + chunk_size;
        for (i64 i = w_lo; i < w_hi; i++) {
            if (lookup[e[i]] == alpha - 1) {
                if (q >= escapes_cap) return -2;
                escapes[q++] = e[i];
            }
        }
        escape_offsets[c + 1] = (uint32_t)q;
        const i64 rounds = (hi - lo + ROUND - 1) / ROUND;
        for (int j = 0; j < LANES; j++) x[j] = LOW;
        const i64 start = total;
        for (i64 r = rounds - 1; r >= 0; r--) {
            for (int j = LANES - 1; j >= 0; j--) {  /* the refills of a round, undone in reverse */
                const i64 i = lo + r * ROUND + j;
                const i64 a = i < hi ? pair_of(e, n, i, lookup, alpha) : pad;
                const i64 b = i + LANES < hi ? pair_of(e, n, i + LANES, lookup, alpha) : pad;
                const u64 fa = (u64)freq[a], fb = (u64)freq[b];
                if (fa == 0 || fb == 0) return -3;
                u64 xx = x[j];
                if ((xx >> (2 * SHIFT - 1 - 2 * PRECISION)) >= fa * fb) {  /* x >= 2**33 fa fb (no overflow) */
                    if (total >= words_cap) return -1;
                    words[total++] = (uint32_t)(xx & 0xFFFFFFFFu);
                    xx >>= SHIFT;
                }
                xx = ((xx / fb) << PRECISION) + (xx % fb) + (u64)cdf[b];
                x[j] = ((xx / fa) << PRECISION) + (xx % fa) + (u64)cdf[a];
            }
        }
        for (i64 a = start, b = total - 1; a < b; a++, b--) {  /* the chunk's words into decoding order */
            const uint32_t t = words[a];
            words[a] = words[b];
            words[b] = t;
        }
        for (int j = 0; j < LANES; j++) states[c * LANES + j] = x[j];
        offsets[c + 1] = (uint32_t)total;
    }
    return total;
}

/* The word count the encoder may need at most for n exponents in chunks of chunk_size: one word per state and
 * round. */
i64 nz_words_bound(i64 n, i64 chunk_size) {
    const i64 num = (n + chunk_size - 1) / chunk_size, chunk_pairs = chunk_size / 2, m = (n + 1) / 2;
    i64 total = 0;
    for (i64 c = 0; c < num; c++) {
        const i64 lo = c * chunk_pairs, hi = m < lo + chunk_pairs ? m : lo + chunk_pairs;
        total += (hi - lo + ROUND - 1) / ROUND * LANES;
    }
    return total;
}

/* The decoders' two small tables from a table's pair frequencies freq[alpha * alpha] (summing to 2**precision) and
 * the byte each alphabet index decodes to (decoded[alpha]): slot_pair[2**precision], the pair of each slot, and
 * info[alpha * alpha], per pair bits 0-15 its frequency, 16-31 its two exponent bytes, 48-63 its cdf. Returns 0, or
 * -1 when the frequencies do not fill the slots exactly. */
i64 nz_tables(const i64 *freq, const i64 *decoded, i64 alpha, i64 precision, uint8_t *slot_pair, u64 *info) {
    const i64 slots = (i64)1 << precision;
    i64 slot = 0;
    for (i64 s = 0; s < alpha * alpha; s++) {
        const u64 pair = (u64)decoded[s / alpha] | ((u64)decoded[s % alpha] << 8);
        if (freq[s] < 0 || slot + freq[s] > slots) return -1;
        info[s] = (u64)freq[s] | (pair << 16) | ((u64)slot << 48);
        memset(slot_pair + slot, (int)(uint8_t)s, (size_t)freq[s]);
        slot += freq[s];
    }
    return slot == slots ? 0 : -1;
}

/* Format 2 (written by Layerwise before format 3; read to convert old files): the pair index of every pair into
 * out[ceil(n / 2)], 8 states of 32 bits per chunk (states[c * 8 ...], in [2**16, 2**32)), a 16-bit word read after
 * any pair that leaves its state below 2**16. Returns -1 when every chunk ends in its initial state with its words
 * used up, else the first chunk that does not. */
i64 nz_format2_pairs(const uint16_t *words, const i64 *states, const i64 *offsets, i64 num, const uint8_t *slot_pair,
                     const i64 *freq, const i64 *cdf, i64 n, i64 chunk_size, i64 *out) {
    u64 x[LANES];
    for (i64 c = 0; c < num; c++) {
        const i64 lo = c * chunk_size;
        i64 p = offsets[c];
        const i64 end = offsets[c + 1];
        for (int j = 0; j < LANES; j++) x[j] = (u64)states[c * LANES + j];
        const i64 pairs = ((n < lo + chunk_size ? n : lo + chunk_size) - lo + 1) / 2;
        for (i64 j = 0; j < pairs; j++) {
            u64 xx = x[j % LANES];
            const i64 s = slot_pair[xx & MASK];
            xx = (u64)freq[s] * (xx >> PRECISION) + (xx & MASK) - (u64)cdf[s];
            if (xx < ((u64)1 << 16)) {
                if (p >= end) return c;
                xx = (xx << 16) | words[p];
                p++;
            }
            x[j % LANES] = xx;
            out[lo / 2 + j] = s;
        }
        if (p != end) return c;
        for (int j = 0; j < LANES; j++)
            if (x[j] != ((u64)1 << 16)) return c;
    }
    return -1;
}
