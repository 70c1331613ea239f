"""One text's calls an ``Encoding`` keeps (``Encoding._text_calls``): the backend's bound
function of one text with no special token allowed (per backend name), ``encode``'s default
special-token test (``SEARCH``) and ``decode``'s one-list join (``JOIN``), each made at first
use. Functions of this process's backends: a pickled encoding takes none of them along.
"""

from __future__ import annotations

from typing import Callable

from .specials import may_hold


def get_backend(name):
    from .backends import get_backend as get  # (not at import: ``import gputok`` stays light)

    return get(name)

SEARCH = object()  # (``TextCalls``' key of the special search)
JOIN = object()  # (and of the one-list join)


class TextCalls(dict):
    """An encoding's bound one-text calls (backend name -> ``text_call``) and its special
    search (``SEARCH`` -> ``special_search``): functions of this process's backends, so a
    pickled encoding (a corpus job's spawned worker) takes none of them along."""

    def __reduce__(self):
        return TextCalls, ()


def text_call(enc, backend) -> "Callable[[str], list]":
    """The backend's function of one text with no special token allowed (``Backend.text_call``,
    else its ``encode_text``), kept per backend name: a short text's encode is then that call
    and little else (a dispatch through ``get_backend`` and the runners was ~1 us of a 3 us
    text)."""
    be = get_backend(backend)
    model = enc.model
    call = be.text_call(model)
    if call is None:
        def call(text: str, encode_text=be.encode_text, none=frozenset()) -> list:
            return encode_text(model, text, none)
    if isinstance(backend, str):
        enc._text_calls[backend] = call
    return call


def special_search(enc):
    """``encode``'s default check (every special refused) as a test of whether the text holds
    a character a special starts with (``specials.may_hold``); a hit runs the full check."""
    specials = enc.model.special_set
    got = enc._text_calls[SEARCH] = may_hold(specials) if specials else _nothing
    return got


def _nothing(text: str) -> bool:
    return False


def one_join(enc):
    """``decode``'s join of one id list (``JOIN``): the backend's built-in over the decoder's
    table (``PieceJoin.one``) where the decoder is a plain byte join, returning None for a list
    it does not take; else a function that takes none (the decoder's own path)."""
    from .components.decoders import ByteDecoder

    detok, got = enc.model.detok, None
    if type(detok) is ByteDecoder:
        joiner = getattr(get_backend("auto").tools, "joiner", None)
        table = detok.joined if joiner is not None else None
        got = joiner.one(table) if table is not None else None
    got = enc._text_calls[JOIN] = got or _takes_none
    return got


def _takes_none(tokens) -> None:
    return None
