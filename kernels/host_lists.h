// host_lists.h: host only. Token ids as a Python list of int (gputok/stages/lists.py, IdLists:
// what encode, encode_ordinary and encode_batch return), part of the native CPU device's library
// but called with the interpreter's lock held (ctypes.PyDLL): it makes Python objects.
//
// numpy's tolist makes a new int object for every id: 32 bytes of fresh memory per id besides
// the list's 8-byte slot, so a 10 MB run of "a" (1.25 M ids of one token) made 40 MB of equal
// ints, and in a fresh process their first touch cost as much as the merge. Here an id seen
// recently shares its int object (ints are immutable; CPython shares small ints the same way):
// a direct-mapped table of the last object made per id slot (id mod the table size) hands it out
// again with one more reference, and any other id gets a new object. On repetitive output (one
// long run) that is 8 bytes per id; on prose most ids recur within a few thousand tokens.
//
// The interpreter's functions come in from ctypes.pythonapi (stable ABI: PyList_New,
// PyLong_FromUnsignedLong, Py_IncRef, Py_DecRef), so no Python header or link step is needed;
// the new list's items are written where lists.py found CPython keeps them (the ob_item pointer
// at `items_at` bytes into the list object, checked on a probe list there), as PyList_SET_ITEM
// does: PyList_SetItem would read each fresh slot before writing it, two page faults a page.
#include <cstdint>
#include <memory>

namespace enc_lists {

struct PyApi {
  void* (*list_new)(long long);       // PyList_New
  void* (*long_from)(unsigned long);  // PyLong_FromUnsignedLong
  void (*incref)(void*);              // Py_IncRef
  void (*decref)(void*);              // Py_DecRef
};

constexpr unsigned MAX_SLOTS = 1u << 16;  // 768 KB of table: ids recurring within ~64K tokens
constexpr unsigned MIN_SLOTS = 1u << 6;

// The table, kept per calling thread between calls (only the part a call uses is reset; the
// objects' part is read only where its key matched, so it is never initialised: a fresh
// thread's first long list does not touch 512 KB of it).
struct Table {
  std::unique_ptr<uint32_t[]> keys;
  std::unique_ptr<void*[]> objs;
  unsigned size = 0;
};

// The list of the ids of `nparts` arrays in turn (parts[p] holds ns[p] ids): a batch's chunks
// give one text's ids in parts, and joining them first wrote a second copy of them all.
template <typename T>
void* build(const T* const* parts, const long long* ns, int nparts, const PyApi& api,
            long long items_at) {
  long long n = 0;
  for (int p = 0; p < nparts; ++p) n += ns[p];
  void* list = api.list_new(n);
  if (list == nullptr || n == 0) return list;
  void** items = *reinterpret_cast<void***>(static_cast<char*>(list) + items_at);
  unsigned slots = MIN_SLOTS;
  while (slots < MAX_SLOTS && (long long)slots < n) slots <<= 1;
  thread_local Table t;
  if (t.size < slots) {
    t.keys.reset(new uint32_t[slots]);  // (default-initialised: untouched until written)
    t.objs.reset(new void*[slots]);
    t.size = slots;
  }
  uint32_t* keys = t.keys.get();
  void** objs = t.objs.get();
  // an empty slot s holds ~s, which no id of that slot is (~s mod slots != s)
  for (unsigned s = 0; s < slots; ++s) keys[s] = ~s;
  const unsigned mask = slots - 1;
  long long i = 0;
  for (int p = 0; p < nparts; ++p) {
    const T* ids = parts[p];
    for (long long j = 0; j < ns[p]; ++j, ++i) {
      const uint32_t id = ids[j];
      const unsigned s = id & mask;
      void* o;
      if (keys[s] == id) {  // (the table's pointer is borrowed: the list holds the reference)
        o = objs[s];
        api.incref(o);
      } else {
        o = api.long_from(id);
        if (o == nullptr) {  // (MemoryError set; the list's unset items are NULL)
          api.decref(list);
          return nullptr;
        }
        keys[s] = id;
        objs[s] = o;
      }
      items[i] = o;
    }
  }
  return list;
}

}  // namespace enc_lists

// parts: nparts arrays of ns[p] uint16 (width 2) or uint32 (width 4) ids each, listed in turn;
// api: an enc_lists::PyApi; items_at: the offset of a list's item pointer. A new reference to
// the list, or NULL with the exception set.
ENC_HOST_EXPORT void* gputok_id_list_parts(const void* const* parts, const long long* ns,
                                           int nparts, int width, const void* api,
                                           long long items_at) {
  const enc_lists::PyApi& a = *static_cast<const enc_lists::PyApi*>(api);
  if (width == 2)
    return enc_lists::build(reinterpret_cast<const uint16_t* const*>(parts), ns, nparts, a,
                            items_at);
  return enc_lists::build(reinterpret_cast<const uint32_t* const*>(parts), ns, nparts, a,
                          items_at);
}

// One array: ids holds n ids.
ENC_HOST_EXPORT void* gputok_id_list(const void* ids, int width, long long n, const void* api,
                                     long long items_at) {
  const void* parts[1] = {ids};
  return gputok_id_list_parts(parts, &n, 1, width, api, items_at);
}
