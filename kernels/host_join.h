// host_join.h: host only. A batch's token bytes joined in one call (gputok/stages/join.py,
// PieceJoin: what decode_batch reads), part of the native CPU device's library, called with the
// interpreter's lock held (ctypes.PyDLL): it reads the batch's lists and makes one bytes object.
//
//   gputok_pieces_join   a list of id lists -> every document's piece bytes, one after another
//   gputok_join_function one id list -> its bytes, as a built-in function (decode's)
//
// The id lists are read through the interpreter's public C API (PyList_GET_ITEM,
// PyLong_AsLongAndOverflow, ...: the unit is compiled against the running interpreter's
// Python.h, GPUTOK_HOST_PYTHON; without the header there is no native join and Python joins).
//
// Performance notes: the per-document Python join (a lookup per id, then bytes.join) was
// ~40 ns an id, most of it the lookups and the range check (min(ids)); here an id costs one
// conversion and one copy of its piece. The ids are read once and kept (4 bytes each) for the
// copy pass, which then needs no second conversion.
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#ifdef GPUTOK_HOST_PYTHON

namespace enc_join {

// The items of a list or tuple (borrowed), or false when `o` is neither.
inline bool items_of(PyObject* o, PyObject*** items, Py_ssize_t* n) {
  if (PyList_CheckExact(o)) {
    *items = &PyList_GET_ITEM(o, 0);
    *n = PyList_GET_SIZE(o);
    return true;
  }
  if (PyTuple_CheckExact(o)) {
    *items = &PyTuple_GET_ITEM(o, 0);
    *n = PyTuple_GET_SIZE(o);
    return true;
  }
  return false;
}

}  // namespace enc_join

// batch: a list (or tuple) of n lists (or tuples) of int; piece i's bytes are
// blob[off[i] .. off[i + 1]) for 0 <= i < n_vocab; mark[i] (NULL: none) is OR-ed into
// flags[d] of each document d that holds id i; ends (n + 1 entries, written): document d's
// bytes are the result's [ends[d], ends[d + 1]).
// Returns a new bytes object; None (a new reference) when the batch is not that shape, or an id
// is not an exact int in [0, n_vocab) - the caller then takes its per-document path, which names
// what is wrong; NULL with MemoryError set.
ENC_HOST_EXPORT PyObject* gputok_pieces_join(PyObject* batch, const unsigned char* blob,
                                             const long long* off, long long n_vocab,
                                             const unsigned char* mark, long long* ends,
                                             unsigned char* flags) {
  PyObject** docs;
  Py_ssize_t n;
  if (!enc_join::items_of(batch, &docs, &n)) Py_RETURN_NONE;
  std::vector<uint32_t> ids;
  long long total = 0;
  ends[0] = 0;
  for (Py_ssize_t d = 0; d < n; ++d) {
    PyObject** items;
    Py_ssize_t m;
    if (!enc_join::items_of(docs[d], &items, &m)) Py_RETURN_NONE;
    unsigned char f = 0;
    for (Py_ssize_t j = 0; j < m; ++j) {
      PyObject* o = items[j];
      if (!PyLong_CheckExact(o)) Py_RETURN_NONE;  // (bool, numpy ints: the Python path)
      int overflow = 0;
      const long long id = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow || id < 0 || id >= n_vocab) Py_RETURN_NONE;
      total += off[id + 1] - off[id];
      if (mark) f |= mark[id];
      ids.push_back((uint32_t)id);
    }
    flags[d] = f;
    ends[d + 1] = total;
  }
  PyObject* out = PyBytes_FromStringAndSize(nullptr, (Py_ssize_t)total);
  if (out == nullptr) return nullptr;
  unsigned char* w = reinterpret_cast<unsigned char*>(PyBytes_AS_STRING(out));
  for (const uint32_t id : ids) {
    const long long a = off[id], len = off[id + 1] - a;
    if (len == 1) {
      *w++ = blob[a];  // (most pieces of byte-fallback runs, and short pieces: no call)
    } else {
      std::memcpy(w, blob + a, (size_t)len);
      w += len;
    }
  }
  return out;
}

// ONE LIST AS A BUILT-IN: one id list (or tuple) joined by a built-in function of one argument
// (decode's call: a ctypes call cost ~1 us, a Python lookup per id ~40 ns). self is a capsule
// of the table's pointers; the capsule holds a reference to their owner (the JoinTable).
// The function returns the bytes, or None where the list is not taken (not a list or tuple of
// exact ints in range, or a marked id: the caller's path names what is wrong).
namespace enc_join {
struct Table {
  const unsigned char* blob;
  const long long* off;
  long long n_vocab;
  const unsigned char* mark;
};
constexpr const char* TABLE = "gputok.join_table";

inline PyObject* one_call(PyObject* self, PyObject* tokens) {
  const auto* t = static_cast<const Table*>(PyCapsule_GetPointer(self, TABLE));
  if (t == nullptr) return nullptr;
  PyObject** items;
  Py_ssize_t m;
  if (!items_of(tokens, &items, &m)) Py_RETURN_NONE;
  long long total = 0;
  for (Py_ssize_t j = 0; j < m; ++j) {  // checked and sized first: nothing is made for a miss
    PyObject* o = items[j];
    if (!PyLong_CheckExact(o)) Py_RETURN_NONE;
    int overflow = 0;
    const long long id = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || id < 0 || id >= t->n_vocab || (t->mark && t->mark[id])) Py_RETURN_NONE;
    total += t->off[id + 1] - t->off[id];
  }
  PyObject* out = PyBytes_FromStringAndSize(nullptr, (Py_ssize_t)total);
  if (out == nullptr) return nullptr;
  unsigned char* w = reinterpret_cast<unsigned char*>(PyBytes_AS_STRING(out));
  for (Py_ssize_t j = 0; j < m; ++j) {  // (the list cannot change: the lock is held)
    const long long id = PyLong_AsLongLong(items[j]);
    const long long a = t->off[id], len = t->off[id + 1] - a;
    std::memcpy(w, t->blob + a, (size_t)len);
    w += len;
  }
  return out;
}

inline void one_free(PyObject* capsule) {
  delete static_cast<Table*>(PyCapsule_GetPointer(capsule, TABLE));
  Py_XDECREF(static_cast<PyObject*>(PyCapsule_GetContext(capsule)));
}

inline PyMethodDef one_def = {"join_ids", one_call, METH_O,
                              "One id list's bytes joined (None where it is not taken)."};
}  // namespace enc_join

// The built-in joining one id list by the table (as gputok_pieces_join's), which owner keeps.
ENC_HOST_EXPORT PyObject* gputok_join_function(PyObject* owner, const unsigned char* blob,
                                               const long long* off, long long n_vocab,
                                               const unsigned char* mark) {
  auto* t = new (std::nothrow) enc_join::Table{blob, off, n_vocab, mark};
  if (t == nullptr) return PyErr_NoMemory();
  PyObject* cap = PyCapsule_New(t, enc_join::TABLE, enc_join::one_free);
  if (cap == nullptr) {
    delete t;
    return nullptr;
  }
  Py_INCREF(owner);
  PyCapsule_SetContext(cap, owner);
  PyObject* fn = PyCFunction_New(&enc_join::one_def, cap);
  Py_DECREF(cap);
  return fn;
}

#endif  // GPUTOK_HOST_PYTHON
