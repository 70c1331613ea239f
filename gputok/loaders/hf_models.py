"""The Unigram and WordLevel parts of the ``tokenizer.json`` loader.

``hf_json.load_hf`` hands the file's object here when ``model.type`` is ``Unigram`` (HF's
UnigramTrainer, files converted from SentencePiece Unigram models) or ``WordLevel``. The file's
normaliser and pre-tokenizer become components (``_normalizer``, ``_pretokenizer``); what is not
supported is refused with an error naming the field, never ignored. Ids equal
``Tokenizer.encode(text, add_special_tokens=False)``, and with ``add_special_tokens=True``
``Tokenizer.encode(text)`` (the file's post-processor).
"""

from __future__ import annotations

import numpy as np

from ..components.decoders import HFDecoder
from ..components.normalizers import BertNormalizer, HFSteps
from ..components.segmenters.unigram import HFUnigram
from ..components.segmenters.wordlevel import WordLevel
from ..model import Model
from .hf_families import _added, _pretokenizer, _spm_norm_steps, _vocab
from .post import hf_post

def _normalizer(spec, need):
    if isinstance(spec, dict) and spec.get("type") == "BertNormalizer":
        return BertNormalizer(clean_text=spec.get("clean_text", True),
                              handle_chinese_chars=spec.get("handle_chinese_chars", True),
                              strip_accents=spec.get("strip_accents"),
                              lowercase=spec.get("lowercase", True))
    return HFSteps(_spm_norm_steps(spec, need))


def _detok(tokens: dict, cfg: dict, specials: dict, need):
    try:
        return HFDecoder(tokens, cfg.get("decoder"), skip=set(specials.values()),
                         where="tokenizer.json")
    except ValueError as e:
        need(False, str(e).replace("tokenizer.json: ", ""))


def unigram_model(cfg: dict, name: str, digest: str, need) -> Model:
    """A Unigram tokenizer.json (``components/segmenters/unigram.py``, HF's rule)."""
    model = cfg["model"]
    vocab = model.get("vocab")
    need(isinstance(vocab, list) and vocab, "model.vocab of a Unigram model must be a non-empty "
                                            "list of [token, score]")
    for k, v in enumerate(vocab):
        need(isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
             and isinstance(v[1], (int, float)), f"model.vocab[{k}] = {v!r}: expected "
                                                 "[token, score]")
    unk_id = model.get("unk_id")
    need(unk_id is None or (isinstance(unk_id, int) and 0 <= unk_id < len(vocab)),
         f"model.unk_id {unk_id!r} is not an id of model.vocab")
    specials, plain, added = _added(cfg, need)
    seg = HFUnigram([(t, s) for t, s in vocab], unk_id, bool(model.get("byte_fallback")),
                    where=name)
    tokens = {i: t for i, (t, _) in enumerate(vocab)}
    tokens.update({t["id"]: t["content"] for t in added})
    decoder = {i: _token_bytes(t, seg.byte_fallback) for i, t in tokens.items()}
    byte_ids = np.array([b if b is not None else (unk_id or 0) for b in seg.byte_tok], np.uint32)
    return Model(name=name, decoder=decoder, byte_ids=byte_ids, specials=specials, added=plain,
                 lstrip=frozenset(t["content"] for t in added if t.get("lstrip")),
                 rstrip=frozenset(t["content"] for t in added if t.get("rstrip")),
                 digest=digest, segmenter=seg, normalizer=_normalizer(cfg.get("normalizer"), need),
                 pretokenizer=_pretokenizer(cfg.get("pre_tokenizer"), need),
                 detok=_detok(tokens, cfg, specials, need),
                 post=hf_post(cfg.get("post_processor"), need))


def wordlevel_model(cfg: dict, name: str, digest: str, need) -> Model:
    """A WordLevel tokenizer.json (``components/segmenters/wordlevel.py``)."""
    model = cfg["model"]
    vocab = _vocab(model, need)
    unk = model.get("unk_token", "<unk>")
    need(isinstance(unk, str), "model.unk_token must be a string")
    specials, plain, added = _added(cfg, need)
    seg = WordLevel(vocab, unk, where=name)
    tokens = {i: t for t, i in vocab.items()}
    tokens.update({t["id"]: t["content"] for t in added})
    unk_id = vocab.get(unk, 0)
    return Model(name=name, decoder={i: t.encode("utf-8") for i, t in tokens.items()},
                 byte_ids=np.full(256, unk_id, np.uint32), specials=specials, added=plain,
                 lstrip=frozenset(t["content"] for t in added if t.get("lstrip")),
                 rstrip=frozenset(t["content"] for t in added if t.get("rstrip")),
                 digest=digest, segmenter=seg, normalizer=_normalizer(cfg.get("normalizer"), need),
                 pretokenizer=_pretokenizer(cfg.get("pre_tokenizer"), need),
                 detok=_detok(tokens, cfg, specials, need),
                 post=hf_post(cfg.get("post_processor"), need))


def _token_bytes(tok: str, byte_fallback: bool) -> bytes:
    """A token as ``decode_single_token_bytes`` shows it: a byte token as its byte, "▁" as a
    space."""
    if byte_fallback and len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
        try:
            return bytes([int(tok[3:5], 16)])
        except ValueError:
            pass
    return tok.replace("\u2581", " ").encode("utf-8")
