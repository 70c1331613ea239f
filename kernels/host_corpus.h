// host_corpus.h: host routines of the corpus job (`gputok encode`) that were Python's work on
// every byte: the shards' fast checksum (XXH64) and the disallowed-special prefilter. Host
// only: a part of the native CPU device's library's host_jsonl unit, not a kernel.
//
// XXH64, as its public specification states it (xxHash's "xxhash_spec.md": four 64-bit lanes
// over 32-byte stripes, then the tail in 8-, 4- and 1-byte steps, then the avalanche),
// streaming: a state updated piece by piece gives the digest of the pieces joined. Tests check
// it against the specification's published values and a pure-Python statement of the same
// steps (gputok/corpus/checksum.py).
//
// The prefilter: the first position of a buffer of packed documents where one of a set of
// byte strings starts and ends inside one document (what stages/split.find_tokens finds first,
// document by document); the caller asks Python for the exact error only where there is one.
#include <cstdint>
#include <cstring>

namespace enc_corpus {

constexpr std::uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full,
                        P3 = 0x165667B19E3779F9ull, P4 = 0x85EBCA77C2B2AE63ull,
                        P5 = 0x27D4EB2F165667C5ull;

inline std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline std::uint64_t read64(const unsigned char* p) {  // little-endian, as the spec reads
  std::uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

inline std::uint32_t read32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

inline std::uint64_t lane_round(std::uint64_t acc, std::uint64_t lane) {
  return rotl(acc + lane * P2, 31) * P1;
}

inline std::uint64_t merge(std::uint64_t acc, std::uint64_t v) {
  return (acc ^ lane_round(0, v)) * P1 + P4;
}

// The streaming state (its layout is the Python side's: 88 bytes, gputok/corpus/checksum.py)
struct Xxh64 {
  std::uint64_t v[4];
  std::uint64_t total;  // bytes taken so far
  std::uint64_t seed;
  std::uint64_t held;   // bytes in mem (< 32)
  unsigned char mem[32];
};
static_assert(sizeof(Xxh64) == 88, "the state's layout is shared with Python");

inline const unsigned char* stripes(std::uint64_t* v, const unsigned char* p,
                                    const unsigned char* e) {
  std::uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
  while (e - p >= 32) {
    a = lane_round(a, read64(p));
    b = lane_round(b, read64(p + 8));
    c = lane_round(c, read64(p + 16));
    d = lane_round(d, read64(p + 24));
    p += 32;
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  return p;
}

}  // namespace enc_corpus

ENC_HOST_EXPORT void gputok_xxh64_reset(void* state, unsigned long long seed) {
  using namespace enc_corpus;
  Xxh64* s = (Xxh64*)state;
  std::memset(s, 0, sizeof(Xxh64));
  s->seed = seed;
  s->v[0] = seed + P1 + P2;
  s->v[1] = seed + P2;
  s->v[2] = seed;
  s->v[3] = seed - P1;
}

// Takes data[0 .. n) into the state (the interpreter's lock released: ctypes).
ENC_HOST_EXPORT void gputok_xxh64_update(void* state, const unsigned char* data, long long n) {
  using namespace enc_corpus;
  Xxh64* s = (Xxh64*)state;
  const unsigned char* p = data;
  const unsigned char* const e = data + n;
  s->total += (std::uint64_t)n;
  if (s->held + (std::uint64_t)n < 32) {
    std::memcpy(s->mem + s->held, p, (size_t)n);
    s->held += (std::uint64_t)n;
    return;
  }
  if (s->held) {  // the stripe begun by earlier pieces
    const size_t take = 32 - (size_t)s->held;
    std::memcpy(s->mem + s->held, p, take);
    stripes(s->v, s->mem, s->mem + 32);
    p += take;
    s->held = 0;
  }
  p = stripes(s->v, p, e);
  std::memcpy(s->mem, p, (size_t)(e - p));
  s->held = (std::uint64_t)(e - p);
}

ENC_HOST_EXPORT unsigned long long gputok_xxh64_digest(const void* state) {
  using namespace enc_corpus;
  const Xxh64* s = (const Xxh64*)state;
  std::uint64_t acc;
  if (s->total >= 32) {
    acc = rotl(s->v[0], 1) + rotl(s->v[1], 7) + rotl(s->v[2], 12) + rotl(s->v[3], 18);
    for (int k = 0; k < 4; ++k) acc = merge(acc, s->v[k]);
  } else {
    acc = s->seed + P5;
  }
  acc += s->total;
  const unsigned char* p = s->mem;
  const unsigned char* const e = s->mem + s->held;
  for (; e - p >= 8; p += 8) acc = rotl(acc ^ lane_round(0, read64(p)), 27) * P1 + P4;
  if (e - p >= 4) {
    acc = rotl(acc ^ (std::uint64_t)read32(p) * P1, 23) * P2 + P3;
    p += 4;
  }
  for (; p < e; ++p) acc = rotl(acc ^ (std::uint64_t)*p * P5, 11) * P1;
  acc ^= acc >> 33;
  acc *= P2;
  acc ^= acc >> 29;
  acc *= P3;
  acc ^= acc >> 32;
  return acc;
}

// The first position p of buf[0 .. doc_off[n_docs]) where one of the n_tok strings (token k:
// tok[tok_off[k] .. tok_off[k + 1]), none empty) starts and ends within the document holding
// p, or -1. Candidates are found by their first byte (memchr when all share one: the usual
// "<|" specials).
ENC_HOST_EXPORT long long gputok_first_token(const unsigned char* buf, const long long* doc_off,
                                             long long n_docs, const unsigned char* tok,
                                             const long long* tok_off, long long n_tok) {
  if (n_docs < 1 || n_tok < 1) return -1;
  bool first[256] = {};
  int distinct = 0;
  unsigned char only = 0;
  for (long long k = 0; k < n_tok; ++k) {
    if (tok_off[k + 1] <= tok_off[k]) continue;
    const unsigned char c = tok[tok_off[k]];
    if (!first[c]) ++distinct, only = c;
    first[c] = true;
  }
  const long long n = doc_off[n_docs];
  long long d = 0, p = doc_off[0];
  while (p < n) {
    if (distinct == 1) {
      const void* hit = std::memchr(buf + p, only, (size_t)(n - p));
      if (hit == nullptr) return -1;
      p = (const unsigned char*)hit - buf;
    } else {
      while (p < n && !first[buf[p]]) ++p;
      if (p >= n) return -1;
    }
    while (doc_off[d + 1] <= p) ++d;  // the document holding p (empty ones passed)
    const long long room = doc_off[d + 1] - p;
    for (long long k = 0; k < n_tok; ++k) {
      const long long len = tok_off[k + 1] - tok_off[k];
      if (len > 0 && len <= room && tok[tok_off[k]] == buf[p] &&
          std::memcmp(buf + p, tok + tok_off[k], (size_t)len) == 0)
        return p;
    }
    ++p;
  }
  return -1;
}
