"""Every tokenizer of the pinned test data against its own library, on generated documents.

For each tokenizer (named encodings vs tiktoken; tokenizer.json files vs HF ``tokenizers``;
SentencePiece ``.model`` files, BPE and Unigram, vs ``sentencepiece``; llama.cpp's GGUF
vocabularies vs HF on the tokenizer.json they were converted from), ``--docs`` documents are
made from a fixed seed: slices of the project's corpora (prose, code, multilingual, emoji),
random code points from every plane (unassigned ones, planes 4-11, controls, private use),
mixes of the characters the patterns and normalisers care about (letter cases, marks, digits
of every script, apostrophes, every whitespace kind, CJK, emoji ZWJ sequences, compatibility
forms), long runs of one character, the tokenizer's own special-token strings inside text, and
for the named encodings lone surrogates (tiktoken's repair is the rule). gputok's ids
(``encode_batch_arrays`` on each backend, and ``encode`` on a sample) are compared with the
library's, document by document; the host fallbacks of the native device are counted.

    python bench/fuzz_families.py --docs 20000 --record bench/results/fuzz.md
    python bench/fuzz_families.py --docs 300 --only cl100k_base llama3 botchan_unigram

Exit status 1 on any mismatch (the first documents that differ are printed).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import _common  # noqa: E402
import gputok  # noqa: E402
import testdata  # noqa: E402

TRICKY = list("aZéÉßǅʰ中日本ﾟ\u0301\u0915\u093f0129٣²½'’ \t\n\r\x0b\x0c\x85\u00a0\u2028\u3000"
              ".,!?-_/\\\"#$%&*+<=>@[]^`{|}~😀👍🏽\u200d\ufe0fｱｲ①ﬁ\u212b\u1100\u1161") + \
    ["'s", "'ll", "'VE", "\r\n", "  ", "e\u0301", "\u0041\u030a", "👨\u200d👩\u200d👧",
     "\U000e0100", "\u2581", "▁▁", "<0x41>", "ＡＢＣ１２３"]


def _random_char(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return chr(rng.randrange(0x20, 0x7F))
    if r < 0.7:
        return chr(rng.randrange(0xA0, 0x3000))
    if r < 0.8:
        return chr(rng.randrange(0x3000, 0xD800))
    if r < 0.9:
        cp = rng.randrange(0xE000, 0x110000)
        return chr(cp)
    return chr(rng.randrange(0, 0x20))


def make_docs(n: int, seed: int, specials: list, surrogates: bool) -> list:
    """``n`` documents from ``seed`` (see the module docstring)."""
    rng = random.Random(seed)
    pool = [d for kind in ("prose", "code", "multilingual", "emoji")
            for d in _common.corpus(kind, 1) if d]
    docs = []
    for k in range(n):
        kind = k % 6
        if kind == 0:
            d = rng.choice(pool)
            a = rng.randrange(len(d))
            doc = d[a:a + rng.randrange(1, 800)]
        elif kind == 1:
            doc = "".join(_random_char(rng) for _ in range(rng.randrange(0, 120)))
        elif kind == 2:
            doc = "".join(rng.choice(TRICKY) for _ in range(rng.randrange(0, 80)))
        elif kind == 3:
            doc = rng.choice(TRICKY + ["a", " ", "\n", "中", "😀", "0", "."]) * \
                rng.randrange(1, 600)
        elif kind == 4:
            parts = [rng.choice(pool)[:rng.randrange(0, 200)] for _ in range(3)]
            if specials:
                parts.insert(rng.randrange(4), rng.choice(specials))
            doc = "".join(parts)
        else:
            doc = "".join(rng.choice([rng.choice(TRICKY), _random_char(rng),
                                      rng.choice(pool)[:rng.randrange(0, 40)]])
                          for _ in range(rng.randrange(0, 30)))
        if surrogates and k % 50 == 7:
            at = rng.randrange(len(doc) + 1)
            doc = doc[:at] + chr(rng.randrange(0xD800, 0xE000)) + doc[at:]
        docs.append(doc)
    return docs


def _fixed(text: str) -> str:
    """What the oracles see for a lone surrogate: U+FFFD (tiktoken's repair; gputok's rule)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# ---- the tokenizers: name -> (family, loader of (gputok Encoding, oracle fn, gputok kwargs))

def _named(name: str):
    oracle = _common.tiktoken_for(name)  # (built from the pinned files, offline)
    return gputok.get_encoding(name), \
        (lambda docs: oracle.encode_ordinary_batch([_fixed(d) for d in docs])), \
        {"disallowed_special": ()}, True


def _hf_file(path):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    hf.no_truncation()  # (a file may ask for both: MiniLM's truncates at 128 and pads)
    hf.no_padding()
    return gputok.load(path), \
        (lambda docs: [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]), \
        {"allowed_special": "all"}, False


def _gguf_json(name: str):
    import test_real_vocabs as R

    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(R.tokenizer_json_from_gguf(name), ensure_ascii=False))
    return gputok.load(testdata.family_path(f"llama_cpp_{name}")), \
        (lambda docs: [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]), \
        {"allowed_special": "all"}, False


def _spm(data: bytes, name: str):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=data)
    path = Path(tempfile.mkdtemp()) / f"{name}.model"
    path.write_bytes(data)
    return gputok.load(path), (lambda docs: sp.encode(docs)), {"disallowed_special": ()}, False


def _hf_cfg(cfg: dict, name: str):
    """A tokenizer.json written from ``cfg`` (built here from the pinned files): gputok loads
    the file, HF the same text."""
    path = Path(tempfile.mkdtemp()) / name / "tokenizer.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg, ensure_ascii=False))
    return _hf_file(path)


def _minilm_variant(kind: str):
    """MiniLM's WordPiece file changed as other BERT files are: cased with accents kept, or
    nomic-bert's empty continuation prefix with a short word cap (8 characters)."""
    cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    if kind == "cased":
        cfg["normalizer"].update({"lowercase": False, "strip_accents": False})
    else:
        cfg["model"].update({"continuing_subword_prefix": "", "max_input_chars_per_word": 8})
        cfg["decoder"] = None
    return _hf_cfg(cfg, f"minilm_{kind}")


def _hf_trained(kind: str):
    """A WordLevel or Unigram tokenizer.json trained by HF's own trainer on botchan."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    if kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Metaspace()])
        trainer = trainers.UnigramTrainer(vocab_size=700, special_tokens=["<unk>", "<s>"],
                                          unk_token="<unk>", show_progress=False)
    else:
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer() if kind == "wordlevel_bert" else \
            normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = (pre_tokenizers.BertPreTokenizer() if kind == "wordlevel_bert"
                             else pre_tokenizers.Whitespace())
        trainer = trainers.WordLevelTrainer(vocab_size=3000, show_progress=False,
                                            special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(testdata.botchan_lines(), trainer=trainer)
    cfg = json.loads(tok.to_str())
    if kind == "unigram":  # (with byte fallback: every character has ids)
        cfg["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256)]
        cfg["model"]["byte_fallback"] = True
    return _hf_cfg(cfg, kind)


def _t5_json(name: str):
    """A T5-style tokenizer.json (Precompiled + Replace, WhitespaceSplit + Metaspace, Unigram)
    written from a SentencePiece Unigram .model, as the converters write one."""
    import families as F
    from test_precompiled import t5_json

    return _hf_cfg(t5_json(F.unigram_source(name)), f"t5_{name}")


def _gguf_ref(name: str):
    """A GGUF whose source tokenizer is not in the test data (Phi-3, Gemma 4): cpu_ref's
    statement of llama.cpp's rule, itself checked on llama.cpp's own test ids."""
    from cpu_ref import gguf as ref_gguf

    path = testdata.family_path(f"llama_cpp_{name}")
    ref = ref_gguf.load(path)
    return gputok.load(path), (lambda docs: [ref.encode_ordinary(d) for d in docs]), \
        {"disallowed_special": ()}, False


def _gguf_unigram():
    """llama.cpp's XLM-RoBERTa vocabulary (t5 GGUF, 250K pieces) vs sentencepiece on the
    .model it was converted from."""
    import families as F
    import sentencepiece as spm

    from gputok.loaders.gguf import read_metadata

    path = testdata.family_path("llama_cpp_nomic-bert-moe")
    sp = spm.SentencePieceProcessor(model_proto=F.model_from_t5_gguf(read_metadata(path)[0]))
    return gputok.load(path), (lambda docs: sp.encode(docs)), {"disallowed_special": ()}, False


def _llama2c():
    """llama2.c's tokenizer.bin exported from the Mistral v1 .model, vs cpu_ref's literal
    ``run.c`` rule (short documents only: that rule is quadratic)."""
    import families as F
    from test_llama2c import export

    from cpu_ref.llama2c import RefLlama2c

    path = export(F.model_source("mistral_v1"), Path(tempfile.mkdtemp()) / "tokenizer.bin")
    ref = RefLlama2c.load(path)
    return gputok.load(path), (lambda docs: [ref.encode(d) for d in docs]), \
        {"disallowed_special": ()}, True


def tokenizers() -> dict:
    import families as F

    out = {}
    for n in ("r50k_base", "p50k_base", "cl100k_base", "o200k_base", "o200k_harmony"):
        out[n] = ("byte-level BPE (tiktoken)", "tiktoken", functools.partial(_named, n))
    for n in ("llama3", "qwen2"):
        out[n] = ("byte-level BPE (tokenizer.json)", "tokenizers",
                  functools.partial(_hf_file, testdata.vocab_path(f"{n}_tokenizer_json")))
    for n in ("deepseek_coder", "deepseek_llm"):
        out[n] = ("byte-level BPE (tokenizer.json)", "tokenizers",
                  functools.partial(_hf_file, testdata.family_path(f"{n}_tokenizer_json")))
    out["minilm"] = ("WordPiece (tokenizer.json)", "tokenizers",
                     functools.partial(_hf_file, testdata.family_path("minilm_tokenizer_json")))
    for n in ("cased", "noprefix_cap8"):
        out[f"minilm:{n}"] = ("WordPiece (tokenizer.json)", "tokenizers",
                              functools.partial(_minilm_variant, n))
    for n in ("command-r", "deepseek-coder", "deepseek-llm", "falcon", "mpt", "qwen35", "refact",
              "starcoder"):
        out[f"gguf:{n}"] = ("byte-level BPE (GGUF)", "tokenizers",
                            functools.partial(_gguf_json, n))
    for n in testdata.SPM_MODELS:
        out[n] = ("SentencePiece BPE (.model)", "sentencepiece",
                  functools.partial(lambda n: _spm(F.model_source(n), n), n))
    for n in F.TRAINED:
        out[f"trained:{n}"] = ("SentencePiece BPE (.model)", "sentencepiece",
                               functools.partial(lambda n: _spm(F.model_source(n), n), n))
    for n in ("botchan_unigram", "kyoto_unigram"):
        out[n] = ("SentencePiece Unigram (.model)", "sentencepiece",
                  functools.partial(lambda n: _spm(F.unigram_source(n), n), n))
    for shape in ("legacy", "metaspace_split"):
        out[f"hf_spm:{shape}"] = (
            "SPM-style BPE (tokenizer.json)", "tokenizers",
            functools.partial(lambda s: _hf_cfg(F.spm_tokenizer_json(
                F.model_source("mistral_v1"), shape=s), f"hf_spm_{s}"), shape))
    out["hf_unigram"] = ("Unigram (tokenizer.json)", "tokenizers",
                         functools.partial(_hf_trained, "unigram"))
    out["hf_unigram_t5:botchan"] = ("Unigram, Precompiled (tokenizer.json)", "tokenizers",
                                    functools.partial(_t5_json, "botchan_unigram"))
    for n in ("wordlevel", "wordlevel_bert"):
        out[n] = ("WordLevel (tokenizer.json)", "tokenizers", functools.partial(_hf_trained, n))
    for n in ("phi-3", "gemma-4"):
        out[f"gguf:{n}"] = ("SentencePiece BPE (GGUF)" if n == "phi-3" else
                            "BPE on characters (GGUF)", "cpu_ref", functools.partial(_gguf_ref, n))
    out["gguf:nomic-bert-moe"] = ("Unigram (GGUF t5)", "sentencepiece", _gguf_unigram)
    out["llama2c"] = ("SentencePiece BPE (tokenizer.bin)", "cpu_ref", _llama2c)
    return out


def _backend_ids(enc, docs, backend, kw) -> "tuple[list, dict]":
    be = gputok.backends.get_backend(backend)
    before = dict(be.fallbacks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, off = enc.encode_batch_arrays(docs, backend=be, **kw)
    got = [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]
    return got, {k: v - before.get(k, 0) for k, v in be.fallbacks.items() if v > before.get(k, 0)}


def run_one(name: str, spec, args) -> dict:
    family, oracle_name, load = spec
    t0 = time.perf_counter()
    enc, oracle, kw, surrogates = load()
    specials = sorted(getattr(enc, "special_tokens_set", ()) or ())[:50]
    docs = make_docs(args.docs, args.seed, specials, surrogates)
    want = oracle(docs)
    row = {"tokenizer": name, "family": family, "oracle": oracle_name, "docs": len(docs)}
    bad_examples = []
    for backend in args.backends:
        got, fb = _backend_ids(enc, docs, backend, kw)
        bad = [k for k, (g, w) in enumerate(zip(got, want)) if g != w]
        row[f"mismatch_{backend}"] = len(bad)
        row[f"fallbacks_{backend}"] = sum(fb.values())
        row[f"fallback_stages_{backend}"] = sorted({f"{st}: {why}" for st, why in fb})
        for k in bad[:3]:
            g, w = got[k], want[k]
            at = next((i for i, (x, y) in enumerate(zip(g, w)) if x != y), min(len(g), len(w)))
            bad_examples.append(f"{backend} doc {k} {docs[k][:120]!r}: first difference at id "
                                f"{at}: gputok {g[at:at + 5]} vs {w[at:at + 5]}")
    sample = range(0, len(docs), max(1, len(docs) // 200))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = [k for k in sample if enc.encode(docs[k], **kw) != want[k]]
    row["mismatch_encode_sample"] = len(one)
    bad_examples += [f"encode doc {k} {docs[k][:120]!r}" for k in one[:3]]
    row["seconds"] = round(time.perf_counter() - t0, 1)
    row["examples"] = bad_examples
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=2000, help="documents per tokenizer")
    p.add_argument("--seed", type=int, default=20261128)
    p.add_argument("--backends", nargs="+", default=["numpy", "native"])
    p.add_argument("--only", nargs="+", help="these tokenizers (names as printed)")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--record", help="write the record here (bench/README.md), e.g. "
                                    "bench/results/fuzz.md")
    args = p.parse_args()
    specs = tokenizers()
    names = args.only or list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise SystemExit(f"unknown tokenizers {unknown}; known: {', '.join(specs)}")
    rows = []
    with _common.recording(args.record, "fuzz_families.py", "every tokenizer of the test data "
                           "against its own library on generated documents",
                           ["tiktoken", "tokenizers", "sentencepiece"]) as rec:
        print(f"machine: {_common.machine()}\ndocuments per tokenizer: {args.docs} "
              f"(seed {args.seed}); backends: {', '.join(args.backends)}")
        head = f"{'tokenizer':<32}{'family':<40}{'oracle':<15}{'docs':>7}"
        head += "".join(f"{'bad ' + b:>12}" for b in args.backends)
        head += f"{'bad encode':>11}{'native host fallbacks':>23}{'s':>7}"
        print(head)
        for n in names:
            row = run_one(n, specs[n], args)
            rows.append(row)
            line = f"{n:<32}{row['family']:<40}{row['oracle']:<15}{row['docs']:>7}"
            line += "".join(f"{row[f'mismatch_{b}']:>12}" for b in args.backends)
            line += f"{row['mismatch_encode_sample']:>11}"
            line += f"{row.get('fallbacks_native', '-'):>23}{row['seconds']:>7}"
            print(line, flush=True)
            for e in row.get("fallback_stages_native", []):
                print(f"    native host stage: {e}", flush=True)
            for e in row["examples"]:
                print(f"    {e}", flush=True)
        total = sum(r[f"mismatch_{b}"] for r in rows for b in args.backends) + \
            sum(r["mismatch_encode_sample"] for r in rows)
        print(f"\n{len(rows)} tokenizers, {sum(r['docs'] for r in rows)} documents each way: "
              f"{total} mismatched")
        rec["data"] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
