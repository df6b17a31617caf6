/* engine/rng.h: the engine's deterministic pseudo-random numbers.
 *
 * xoshiro256** seeded through splitmix64 (Blackman and Vigna). The same seed
 * gives the same stream on every platform; nothing here reads the clock. Used
 * for initialisation now, and for dropout masks, shuffling and augmentation
 * later, each from its own seed-derived stream (rng_derive).
 */
#ifndef KILN_ENGINE_RNG_H
#define KILN_ENGINE_RNG_H

#include <stdint.h>
#include <math.h>

typedef struct rng {
    uint64_t s[4];
} rng;

/* One splitmix64 step: advances *x and returns the mixed value. */
static inline uint64_t rng_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound) from the splitmix64 stream *x; bound must be > 0.
 * Lemire's multiply-and-reject: unbiased, and one step of *x per draw except
 * on the rare rejection. The seeded shuffles (the loader's epoch order, the
 * import's split) are pinned to this exact sequence: do not change it. */
static inline uint64_t rng_splitmix64_below(uint64_t *x, uint64_t bound)
{
    unsigned __int128 m = (unsigned __int128)rng_splitmix64(x) * bound;
    uint64_t lo = (uint64_t)m;
    if (lo < bound) {
        uint64_t threshold = -bound % bound;
        while (lo < threshold) {
            m = (unsigned __int128)rng_splitmix64(x) * bound;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* A stream seed for a named use of a run seed ("fc1.weight", "shuffle"):
 * FNV-1a of the name mixed with the seed, so streams do not depend on the
 * order in which they are drawn. */
static inline uint64_t rng_derive(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    uint64_t x = seed ^ h;
    return rng_splitmix64(&x);
}

static inline void rng_seed(rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = rng_splitmix64(&x);
}

static inline uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: the next 64 random bits. */
static inline uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_uniform(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi). */
static inline double rng_range(rng *r, double lo, double hi)
{
    return lo + (hi - lo) * rng_uniform(r);
}

/* Standard normal (Box-Muller, one value per call). */
static inline double rng_normal(rng *r)
{
    double u1 = 1.0 - rng_uniform(r);          /* (0, 1]: log is finite */
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
