"""A model directory (what ``transformers.AutoTokenizer.from_pretrained(dir)`` reads) -> ``Model``.

The vocabulary is ``tokenizer.json`` when the directory has one, else ``tokenizer.model`` (a
SentencePiece model, or Llama 3's tiktoken-format ranks), else the one ``*.tiktoken`` file.
Beside it, as transformers 5 reads them (``cpu_ref/post.py`` has the rules):

* ``tokenizer_config.json``: ``added_tokens_decoder`` entries the vocabulary file does not list
  become added tokens (special ones special); its named special tokens (``bos_token``,
  ``eos_token``, ``unk_token``, ``sep_token``, ``pad_token``, ``cls_token``, ``mask_token``,
  ``additional_special_tokens``) become special tokens too, as do those of
  ``special_tokens_map.json``: a token the vocabulary has keeps its id, a new one gets the next
  free id. ``add_bos_token`` / ``add_eos_token`` are dropped when a tokenizer.json is present
  (its post-processor rules); for a ``tokenizer.model`` they set the template
  ``add_special_tokens=True`` uses. ``model_max_length`` truncates nothing.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..components.postprocessors import NO_POST, Template
from ..model import Model

_NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
          "mask_token")
_LISTS = ("additional_special_tokens", "extra_special_tokens")


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        got = json.loads(path.read_text("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a JSON object ({e})") from None
    if not isinstance(got, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return got


def _content(value) -> "str | None":
    """A special token as the config writes it: a string or an AddedToken object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def vocabulary_file(directory: Path) -> Path:
    """The vocabulary file of a model directory (see the module docstring)."""
    for name in ("tokenizer.json", "tokenizer.model"):
        if (directory / name).is_file():
            return directory / name
    found = sorted(directory.glob("*.tiktoken"))
    if len(found) == 1:
        return found[0]
    raise FileNotFoundError(f"{directory} is a directory without a vocabulary file gputok "
                            "reads (tokenizer.json, tokenizer.model or one *.tiktoken file)")


def load_directory(directory: Path, load_file, *, name: "str | None" = None) -> Model:
    """The Model of a model directory; ``load_file(path, name)`` loads its vocabulary file."""
    vocab_path = vocabulary_file(directory)
    model = load_file(vocab_path, name or directory.name)
    config = _read_json(directory / "tokenizer_config.json")
    smap = _read_json(directory / "special_tokens_map.json")
    model = _with_config_tokens(model, config, smap, directory)
    if vocab_path.name != "tokenizer.json" and ("add_bos_token" in config
                                                or "add_eos_token" in config):
        model = dataclasses.replace(model, post=_bos_eos(model, config, directory))
    return model


def _with_config_tokens(model: Model, config: dict, smap: dict, where: Path) -> Model:
    specials, added = dict(model.specials), dict(model.added)
    decoder = dict(model.decoder)
    known = set(specials) | set(added)
    news: list = []  # (text, special)
    dec = config.get("added_tokens_decoder") or {}
    if not isinstance(dec, dict):
        raise ValueError(f"{where}/tokenizer_config.json: added_tokens_decoder must be an object")
    for key, entry in sorted(dec.items(), key=lambda kv: int(kv[0])):
        text = _content(entry)
        if text is not None and text not in known:
            news.append((text, bool(entry.get("special", True)), int(key)))
    for source in (config, smap):
        names = [_content(source.get(k)) for k in _NAMED]
        for k in _LISTS:
            names += [_content(v) for v in source.get(k) or []]
        news += [(t, True, None) for t in names if t is not None and t not in known]
    if not news:
        return model
    by_text = {}
    for text, special, fixed in news:
        if text in by_text or text in known:
            continue
        i = fixed if fixed is not None else _vocab_id(model, text)
        if i is None:
            i = max(decoder) + 1  # a new token: the next free id
        by_text[text] = i
        (specials if special else added)[text] = i
        decoder.setdefault(i, text.encode("utf-8"))
    return dataclasses.replace(model, specials=specials, added=added, decoder=decoder)


def _vocab_id(model: Model, text: str) -> "int | None":
    i = model.segmenter.token_id(text)
    return i if i is not None else model.token_ids_by_bytes.get(text.encode("utf-8"))


def _bos_eos(model: Model, config: dict, where: Path):
    """The template of a slow tokenizer's ``add_bos_token`` / ``add_eos_token`` (defaults: the
    vocabulary file's own, e.g. sentencepiece's BOS)."""
    post = model.post or NO_POST
    bos = config.get("add_bos_token", bool(post.prefix))
    eos = config.get("add_eos_token", bool(post.suffix))
    ids = []
    for flag, key in ((bos, "bos_token"), (eos, "eos_token")):
        if not flag:
            ids.append(())
            continue
        text = _content(config.get(key))
        i = None if text is None else model.specials.get(text)
        if i is None and text is not None:
            i = _vocab_id(model, text)
        if i is None:
            raise ValueError(f"{where}/tokenizer_config.json: {key.replace('_token', '')} is "
                             f"asked for (add_{key}) but {key} {text!r} is not in the vocabulary")
        ids.append((i,))
    return Template(ids[0], ids[1]) if ids[0] or ids[1] else NO_POST
