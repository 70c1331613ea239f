"""The device protocol: what the encode driver needs of a device, declared in one place.

A device is an adapter over one kind of hardware (CuPy on an NVIDIA GPU, MLX on an Apple GPU,
the host's cores, the kernel emulator): memory, copies, streams and ``launch(name, grid, block,
args)`` of the kernels of ``kernels/encode_*.cu``. It knows nothing of tokenizers. Every device
subclasses ``Device``, implements the required members below and states a ``Capabilities``
value; the driver (``driver/``) reads the capabilities and never probes a device for members.
A member marked "with capability X" is called only on a device whose capabilities state X.

Required members (every device):

    name                              shown in plans, reprs and warnings
    xp                                the array module of its arrays (numpy, cupy)
    block, max_blocks                 threads per block, blocks per grid-stride launch
    scan_block, scan_items            the block scans' shape (``encode_scan.cu``)
    oom_errors                        the exceptions that mean "out of device memory"
    caps                              its ``Capabilities``
    launch(name, grid, block, args)   run a kernel on the current stream
    empty / zeros / full(n, ...)      device arrays of n elements
    dummy(dtype)                      a 1-element array for an unused pointer argument
    put(host)                         a one-off upload (a model's tables)
    upload(arrays) -> device arrays   a chunk's inputs, on the current stream
    download(key, arr, count)         a copy to the host in flight: ``.result()`` -> a numpy
                                      array of its own; ``.view()`` -> one valid until the
                                      slot's next download (to copy into its final place)
    stream(slot)                      a context: the work and copies of chunk slot 0..in_flight-1
    memory_budget()                   bytes a batch may plan for
    begin_chunk(nbytes)               a chunk of nbytes of text is about to be queued
    release()                         after an out-of-memory error: give cached memory back
    synchronize()                     wait for all queued work
    mark() / elapsed_ms(a, b)         timing (device events on a GPU)

Members with defaults (a device overrides them where it has its own):

    defines()                         launch-shape defines its kernel modules are built with
    launch_shape(name, count)         (grid, block) of a grid-stride kernel over count elements
    has_kernel(name)                  whether it has a form of a kernel (``caps.kernels``)
    host_block(nbytes)                host memory for a batch's output (default: fresh pages)
    work_block(nbytes)                host memory for a chunk's packed input
    trim_idle()                       give idle host workspace back (default: nothing to give)
    hold()                            a context: keep memory pools between batches while inside
    batch_done()                      a batch ended: give pooled memory back unless held
    host_tools()                      native helpers for the host stages (``HostTools``)
    solo()                            a context: launches at once, on the calling thread alone

Members that come with a capability (the base class raises for a device that lacks it):

    fence()                           with ``host_memory``: wait for the current stream
    scan(arr, n, exclusive)           with ``own_scan``: in-place prefix sum
    chunk_inline(...)                 with ``chunk_inline``: a chunk's whole sequence, one call
    text_short(...)                   with ``text_short_max``: one short text, one call
    pretok_inline(...)                with ``pretok_inline``: one text's piece starts
    merge_inline(...)                 with ``merge_inline``: the merge of host-cut pieces
    spm_chunk / spm_text_call(...)    with ``spm_inline``: a SentencePiece chunk / one text
    spm_rewrite / spm_ud_spans(...)   with ``spm_inline``: a chunk normalised, user-defined
                                      pieces too / its user-defined pieces found
    unigram_lattice(tables, norm, w)  with ``unigram_inline``: one Unigram model's lattice
    program_cutter(pre, program, w)   with ``pretok_program``: a pre-tokenizer no scanner knows,
                                      cut by the device from its program (``w``: the
                                      segmenter's ``whole_words``, or None)
    stage(slot, nbytes)               with ``staging``: the slot's host staging, free to write
    per_doc_pass()                    with ``per_doc``: the per-document pass (its batches and
                                      texts: ``runners/perdoc.py``)

``NativeDevice`` (``native/``) documents the one-call members' arguments.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..unicode import FORMS
from .host_pool import huge_block

#: the scanner families the pretok kernels implement (``encode_pretok.cu``, ``encode_o200k.cu``)
DEVICE_FAMILIES = ("cl3", "cl1", "gpt2", "o200k")


@dataclass(frozen=True)
class Capabilities:
    """What a device states it can do; the driver picks its runners from this.

    ``host_memory``: the host reads the device's arrays directly once ``fence()`` returns (the
    native CPU): per-entry arrays, grids and scans are sized by the real entry count, where a
    GPU sizes them by the bound so the host never waits mid-chunk.
    ``own_scan``: prefix sums run as the device's ``scan`` (block scans need shared memory and
    barriers, which a host loop has not), not as ``encode_scan.cu``.
    ``in_flight``: chunks the stream runner keeps queued, one stream slot each.
    ``chunk_workers``: with two or more, a batch of several chunks runs on that many worker
    threads, each chunk start to end on one (``solo``); 0: chunks go through the streams.
    ``chunk_inline``: ``chunk_inline`` runs a chunk cut on the device as one call on the calling
    thread (a worker's chunk, a one-chunk batch of at most ``inline_max_bytes``, one text).
    ``text_short_max``: ``text_short`` encodes one text of at most this many bytes in one call
    with the thread's own workspace (0: no such form).
    ``pretok_inline``: ``pretok_inline`` cuts one text's pieces on the calling thread (a text of
    a few long pieces).
    ``merge_inline``: ``merge_inline`` runs the merge stage of host-cut pieces as one call.
    ``pretok_families`` / ``normal_forms``: the scanner families and normal forms its kernels
    cover (a model outside them cuts or normalises on the host, counted).
    ``spm_inline``: ``spm_chunk`` runs a SentencePiece chunk's whole kernel sequence as one
    call on the calling thread, and ``spm_text_call`` one text's (``runners/spm.py``);
    ``spm_rewrite`` normalises a chunk whose model has user-defined pieces, which the
    normaliser kernels do not take, and ``spm_ud_spans`` finds those pieces in a chunk.
    ``pretok_program``: ``program_cutter`` cuts pieces of a pre-tokenizer whose pattern has no
    scanner (``stages.pattern_program``) on the device itself (the native CPU: its C matcher),
    so such a model has no host pretok stage there.
    ``unigram_inline``: ``unigram_lattice`` makes a Unigram model's lattice, whose calls run
    items, units and one text on the calling thread (``runners/unigram.py``).
    ``kernels``: the encode kernels it has a form of (None: every one).
    ``dedup``: whether it can run the piece dedup (a 64-bit compare-and-swap per piece).
    ``staging``: uploads go through host staging it lends (``stage(slot, nbytes)``): a chunk
    written straight there (``runners/staged.py``) is uploaded without another copy.
    ``per_doc``: ``per_doc_pass()`` encodes byte-level BPE a document at a time, each start to
    end on one thread, with a piece cache kept from batch to batch (the native CPU's:
    ``native/perdoc.py``); the runner in front of the others where it takes a batch or a text.
    """

    host_memory: bool = False
    own_scan: bool = False
    in_flight: int = 2
    chunk_workers: int = 0
    chunk_inline: bool = False
    inline_max_bytes: int = 0
    text_short_max: int = 0
    pretok_inline: bool = False
    merge_inline: bool = False
    spm_inline: bool = False
    unigram_inline: bool = False
    pretok_program: bool = False
    pretok_families: tuple = DEVICE_FAMILIES
    normal_forms: tuple = FORMS
    kernels: "frozenset | None" = None
    dedup: bool = True
    staging: bool = False
    per_doc: bool = False


@dataclass(frozen=True)
class HostTools:
    """Native helpers a backend gives the host stages it runs, explicitly (a stage never
    behaves differently because some backend was loaded): ``lister`` builds id lists
    (``stages.lists.IdLists``), ``packer`` reads str documents as UTF-8 without the
    interpreter's lock (``stages.pack.StrLayout``), ``utf8_check(buf, n)`` checks bytes input,
    ``joiner`` joins a batch's token bytes for ``decode_batch`` (``stages.join.PieceJoin``),
    ``first_token(buf, doc_off, tokens)`` the first offset where one of ``tokens`` lies inside
    a document, or -1 (``stages.split.check_buffer``'s prefilter).
    None: the stages' plain Python forms."""

    lister: object = None
    packer: object = None
    utf8_check: object = None
    joiner: object = None
    first_token: object = None


class Ready:
    """A download that has finished (host memory already): the interface of one in flight."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value

    def view(self):
        return self.value


class Device:
    """Base of every device adapter: the defaults of the optional members (see the module
    docstring for the protocol). Subclasses set ``caps`` and implement the required members."""

    caps = Capabilities()
    name = "device"
    block = 256
    max_blocks = 1024
    scan_block, scan_items = 256, 8

    def defines(self) -> tuple:
        return ()

    def launch_shape(self, name: str, count: int) -> tuple:
        grid = max(1, min(self.max_blocks, -(-int(count) // self.block)))
        return (grid,), (self.block,)

    def has_kernel(self, name: str) -> bool:
        return self.caps.kernels is None or name in self.caps.kernels

    def host_block(self, nbytes: int):
        return huge_block(nbytes)

    def work_block(self, nbytes: int):
        return huge_block(nbytes)

    def trim_idle(self) -> None:
        pass

    def hold(self):
        return contextlib.nullcontext()

    def batch_done(self) -> None:
        pass

    def host_tools(self) -> HostTools:
        return HostTools()

    def solo(self):
        return contextlib.nullcontext()

    # ---- members that come with a capability --------------------------------------------------

    def _lacks(self, member: str, cap: str):
        return NotImplementedError(f"{self.name}: {member} needs the capability {cap!r}, which "
                                   "this device does not state")

    def fence(self) -> None:
        raise self._lacks("fence", "host_memory")

    def scan(self, arr, n: int, exclusive: bool) -> None:
        raise self._lacks("scan", "own_scan")

    def chunk_inline(self, tables, hc, out_dtype, dedup_slots_per_entry: float = 0.0,
                     out_for=None) -> tuple:
        raise self._lacks("chunk_inline", "chunk_inline")

    def text_short(self, tables, data: bytes, seg_bits, out_dtype,
                   dedup_slots_per_entry: float = 0.0):
        raise self._lacks("text_short", "text_short_max")

    def pretok_inline(self, tables, data: bytes, mpos, mbits, limit: int):
        raise self._lacks("pretok_inline", "pretok_inline")

    def merge_inline(self, tables, data, starts, spec, has_long: bool, whole: bool) -> tuple:
        raise self._lacks("merge_inline", "merge_inline")

    def spm_chunk(self, t, up: dict, chunk, out_dtype) -> tuple:
        raise self._lacks("spm_chunk", "spm_inline")

    def spm_text_call(self, t, up: dict, out_dtype):
        raise self._lacks("spm_text_call", "spm_inline")

    def spm_rewrite(self, t, up: dict, buf: bytes, doc_off, ss, se) -> tuple:
        raise self._lacks("spm_rewrite", "spm_inline")

    def spm_ud_spans(self, t, up: dict, buf, lo, hi) -> tuple:
        raise self._lacks("spm_ud_spans", "spm_inline")

    def unigram_lattice(self, tables: tuple, norm, where: str):
        raise self._lacks("unigram_lattice", "unigram_inline")

    def program_cutter(self, pre, program, words=None):
        raise self._lacks("program_cutter", "pretok_program")

    def per_doc_pass(self):
        raise self._lacks("per_doc_pass", "per_doc")

    def stage(self, slot: int, nbytes: int):
        raise self._lacks("stage", "staging")


#: the members every device implements itself (the tests check each device against this)
REQUIRED = ("name", "xp", "block", "max_blocks", "scan_block", "scan_items", "oom_errors",
            "caps", "launch", "empty", "zeros", "full", "dummy", "put", "upload", "download",
            "stream", "memory_budget", "begin_chunk", "release", "synchronize", "mark",
            "elapsed_ms")
