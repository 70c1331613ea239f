// host_pack.h: Python str (and bytes) documents as UTF-8 without the interpreter's lock
// (stages/pack.py, StrLayout; the native CPU device's chunk-by-chunk packing, and a GPU's chunks
// packed straight into its staging: runners/staged.py). Host only: part of the native library.
//
// gputok_str_locate finds each document's characters in place through the interpreter's public
// C API (PyUnicode_KIND / PyUnicode_DATA / PyUnicode_GET_LENGTH / PyUnicode_IS_ASCII,
// PyBytes_AS_STRING / PyBytes_GET_SIZE: the unit is compiled against the running interpreter's
// Python.h, GPUTOK_HOST_PYTHON; without the header there is no native str packer) and their
// UTF-8 length; gputok_pack_utf8 / gputok_pack_utf8_parts write them. The caller holds a
// reference to every document while the library reads it (str and bytes are immutable). A
// document is (address, kind, units): kind 1, 2 or 4 is a str's code units (PEP 393: Latin-1,
// UCS-2 or UCS-4); kind 0 is bytes already UTF-8 (an ASCII str's own characters, a bytes
// object's, or the caller's encoding of a document this packer does not take). Byte for byte
// what str.encode("utf-8") gives; a str holding a surrogate code point has no UTF-8 form here
// (tiktoken repairs it: stages/pack.py, fix_surrogates), so its length is reported as -1 and the
// caller encodes that document itself (kind 0).
#include <cstring>
#include <thread>
#include <vector>

namespace enc_pack {

// Branch-free sums the compiler vectorises (a branch per code unit, or one 64-bit sum, stayed
// scalar: ~1 ns a unit): one byte per unit, one more from U+0080, one more from U+0800 (and
// from U+10000), summed in 32-bit parts of 64K units; a surrogate anywhere makes it -1.
#if defined(__GNUC__) && !defined(__clang__)
#define ENC_PACK_VECTOR __attribute__((optimize("O3")))  // (the library builds at -O2)
#else
#define ENC_PACK_VECTOR
#endif
template <typename T>
ENC_PACK_VECTOR inline long long utf8_length_of(const T* s, long long n) {
  long long len = n;
  unsigned bad = 0;
  for (long long i = 0; i < n;) {
    const long long e = n - i > 65536 ? i + 65536 : n;
    unsigned part = 0;
    for (; i < e; ++i) {
      const unsigned c = s[i];
      part += (unsigned)(c >= 0x80u) + (unsigned)(c >= 0x800u) + (unsigned)(c >= 0x10000u);
      bad |= (unsigned)(c - 0xD800u < 0x800u);
    }
    len += part;
  }
  return bad ? -1 : len;
}

inline long long utf8_length(const void* p, int kind, long long n) {  // kind 1, 2 or 4
  if (kind == 1) return utf8_length_of((const unsigned char*)p, n);
  if (kind == 2) return utf8_length_of((const unsigned short*)p, n);
  return utf8_length_of((const unsigned*)p, n);
}

inline unsigned char* put(unsigned char* q, unsigned c) {
  if (c < 0x80u) {
    *q++ = (unsigned char)c;
  } else if (c < 0x800u) {
    *q++ = (unsigned char)(0xC0u | (c >> 6));
    *q++ = (unsigned char)(0x80u | (c & 0x3Fu));
  } else if (c < 0x10000u) {
    *q++ = (unsigned char)(0xE0u | (c >> 12));
    *q++ = (unsigned char)(0x80u | ((c >> 6) & 0x3Fu));
    *q++ = (unsigned char)(0x80u | (c & 0x3Fu));
  } else {
    *q++ = (unsigned char)(0xF0u | (c >> 18));
    *q++ = (unsigned char)(0x80u | ((c >> 12) & 0x3Fu));
    *q++ = (unsigned char)(0x80u | ((c >> 6) & 0x3Fu));
    *q++ = (unsigned char)(0x80u | (c & 0x3Fu));
  }
  return q;
}

// ASCII runs a word at a time: 8 Latin-1 units, 4 UCS-2 or 2 UCS-4 units whose high bits are
// all clear become that many bytes (a unit at a time ran at ~1 GB/s, behind Python's encoder).
inline bool ascii_word(const unsigned char* s, unsigned char* q) {
  unsigned long long w;
  std::memcpy(&w, s, 8);
  if (w & 0x8080808080808080ull) return false;
  std::memcpy(q, &w, 8);
  return true;
}

inline bool ascii_word(const unsigned short* s, unsigned char* q) {
  unsigned long long w;
  std::memcpy(&w, s, 8);
  if (w & 0xFF80FF80FF80FF80ull) return false;
  q[0] = (unsigned char)w;
  q[1] = (unsigned char)(w >> 16);
  q[2] = (unsigned char)(w >> 32);
  q[3] = (unsigned char)(w >> 48);
  return true;
}

inline bool ascii_word(const unsigned* s, unsigned char* q) {
  unsigned long long w;
  std::memcpy(&w, s, 8);
  if (w & 0xFFFFFF80FFFFFF80ull) return false;
  q[0] = (unsigned char)w;
  q[1] = (unsigned char)(w >> 32);
  return true;
}

template <typename T>
inline unsigned char* encode(unsigned char* q, const T* s, long long n) {
  const long long step = 8 / (long long)sizeof(T);
  long long i = 0;
  while (i < n) {
    if (i + step <= n && ascii_word(s + i, q)) {
      i += step;
      q += step;
      continue;
    }
    q = put(q, s[i++]);
  }
  return q;
}

}  // namespace enc_pack

// Documents [0, n) as UTF-8, one after another, into dst (the sum of their lengths, every
// length known: no -1). Returns the bytes written.
ENC_HOST_EXPORT long long gputok_pack_utf8(const long long* addr, const signed char* kind,
                                           const long long* units, long long n,
                                           unsigned char* dst) {
  unsigned char* q = dst;
  for (long long i = 0; i < n; ++i) {
    const void* p = (const void*)addr[i];
    const long long m = units[i];
    switch (kind[i]) {
      case 0:
        std::memcpy(q, p, (size_t)m);
        q += m;
        break;
      case 1:
        q = enc_pack::encode(q, (const unsigned char*)p, m);
        break;
      case 2:
        q = enc_pack::encode(q, (const unsigned short*)p, m);
        break;
      default:
        q = enc_pack::encode(q, (const unsigned*)p, m);
        break;
    }
  }
  return (long long)(q - dst);
}

// Documents [0, n) into dst at their own offsets (at[i]: document i's first byte; their UTF-8
// lengths known, no -1), in up to `threads` parts of 4 MB or more side by side (each a run of
// whole documents; a document longer than a part is one part). Returns the bytes written.
ENC_HOST_EXPORT long long gputok_pack_utf8_parts(const long long* addr, const signed char* kind,
                                                 const long long* units, const long long* at,
                                                 long long n, unsigned char* dst, int threads) {
  if (n <= 0) return 0;
  const long long total = at[n];
  const long long least = 4ll << 20;
  long long parts = (total + least - 1) / least;
  if (parts > threads) parts = threads;
  if (parts <= 1) return gputok_pack_utf8(addr, kind, units, n, dst);
  std::vector<long long> cut((size_t)parts + 1, n);
  cut[0] = 0;
  long long d = 0;
  for (long long k = 1; k < parts; ++k) {  // the first document past an even share of bytes
    const long long want = total / parts * k;
    while (d < n && at[d] < want) ++d;
    cut[(size_t)k] = d;
  }
  std::vector<std::thread> helpers;
  for (long long k = 1; k < parts; ++k) {
    const long long a = cut[(size_t)k], b = cut[(size_t)k + 1];
    if (a < b)
      helpers.emplace_back(
          [=] { gputok_pack_utf8(addr + a, kind + a, units + a, b - a, dst + at[a]); });
  }
  gputok_pack_utf8(addr, kind, units, cut[1], dst);
  for (auto& h : helpers) h.join();
  return total;
}

#ifdef GPUTOK_HOST_PYTHON
// Where each of n str (bytes_docs: bytes) objects keeps its characters, by the public C API:
// addr, kind (0 for an ASCII str, whose characters are its UTF-8, and for bytes), units and
// the UTF-8 length (-1: a surrogate code point; -2: a str whose characters are not ready, a
// legacy string of the old C API, which the caller encodes itself).
ENC_HOST_EXPORT void gputok_str_locate(PyObject* const* obj, long long n, int bytes_docs,
                                       long long* addr, signed char* kind, long long* units,
                                       long long* len) {
  for (long long i = 0; i < n; ++i) {
    PyObject* o = obj[i];
    if (bytes_docs) {
      addr[i] = (long long)PyBytes_AS_STRING(o);
      kind[i] = 0;
      units[i] = len[i] = (long long)PyBytes_GET_SIZE(o);
      continue;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (!PyUnicode_IS_READY(o)) {
      addr[i] = 0;
      kind[i] = 0;
      units[i] = 0;
      len[i] = -2;
      continue;
    }
#endif
    const long long m = (long long)PyUnicode_GET_LENGTH(o);
    const void* data = PyUnicode_DATA(o);
    addr[i] = (long long)data;
    units[i] = m;
    if (PyUnicode_IS_ASCII(o)) {
      kind[i] = 0;
      len[i] = m;
    } else {
      const int k = (int)PyUnicode_KIND(o);
      kind[i] = (signed char)k;
      len[i] = enc_pack::utf8_length(data, k, m);
    }
  }
}

// ONE STR AS A BUILT-IN: gputok_cpu_encode_str (kernels/cpu_encode.h, another unit) behind a
// built-in function of one argument, so that Python calls it as it calls len(): a ctypes call
// cost ~0.8 us of a 5-character text's 0.9. self is a capsule of the call's context words; the
// capsule holds a reference to their owner (the ctypes array), so they live as the function does.
extern "C" void* gputok_cpu_encode_str(const void* obj, const unsigned long long* ctx);

namespace enc_pack {
constexpr const char* STR_CTX = "gputok.str_ctx";

inline PyObject* str_call(PyObject* self, PyObject* text) {
  if (!PyUnicode_Check(text)) {
    PyErr_Format(PyExc_TypeError, "expected a str, not %.100s", Py_TYPE(text)->tp_name);
    return nullptr;
  }
  const auto* ctx = static_cast<const unsigned long long*>(PyCapsule_GetPointer(self, STR_CTX));
  if (ctx == nullptr) return nullptr;
  void* got = gputok_cpu_encode_str(text, ctx);
  return got == nullptr ? PyErr_NoMemory() : static_cast<PyObject*>(got);
}

inline void str_ctx_free(PyObject* capsule) { Py_XDECREF((PyObject*)PyCapsule_GetContext(capsule)); }

inline PyMethodDef str_def = {"encode_str", str_call, METH_O,
                              "One str's ids as a list (None for a str it does not take)."};
}  // namespace enc_pack

// The built-in of gputok_cpu_encode_str for the context words at ctx, which owner keeps.
ENC_HOST_EXPORT PyObject* gputok_str_function(PyObject* owner, void* ctx) {
  PyObject* cap = PyCapsule_New(ctx, enc_pack::STR_CTX, enc_pack::str_ctx_free);
  if (cap == nullptr) return nullptr;
  Py_INCREF(owner);
  PyCapsule_SetContext(cap, owner);
  PyObject* fn = PyCFunction_New(&enc_pack::str_def, cap);
  Py_DECREF(cap);
  return fn;
}
#endif
