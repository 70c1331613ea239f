"""cpu_ref: the executable specification of gputok.

Small, slow and obvious on purpose. Every fast path in ``gputok`` (numpy, CUDA, Metal) is tested
against these functions, and these functions are tested against the real libraries (tiktoken,
Hugging Face ``tokenizers``). Nothing here imports ``gputok``; when a fast path and this package
disagree, the fast path is wrong unless the oracle library says otherwise.

Modules:
    patterns  -- the pre-tokenizer regexes of the named encodings, and how we run them
    unicode   -- the oracles' Unicode data (property sets, case folds, HF's normalisers)
    bpe       -- the two literal BPE algorithms (tiktoken rule, HF rule)
    specials  -- the special-token contract (allowed / disallowed), and splitting on specials
    encoding  -- a reference Encoding that strings the pieces together, tiktoken style
    hf        -- a reference for HF tokenizer.json byte-level BPE files
    decode    -- decoding, lossy decoding and the streaming decoder
    train     -- the BPE training rule (HF BpeTrainer semantics)

Tokenizer families beyond byte-level BPE:
    spm_proto -- a protobuf wire-format reader for SentencePiece ``.model`` files (ModelProto)
    charsmap  -- SentencePiece's precompiled character map (nmt_nfkc & co.): the trie and rules
    spm       -- SentencePiece BPE: normaliser, merges by score, byte fallback / unk runs, decode
    hf_spm    -- SPM-style HF tokenizer.json (character BPE, byte_fallback, Metaspace, decoders)
    wordpiece -- BERT: BertNormalizer, BertPreTokenizer, greedy longest-match WordPiece
    gguf      -- GGUF metadata reader; tokenizer.ggml.model -> one of the families above
    gguf_pre  -- the pre-tokenizers named by tokenizer.ggml.pre (llama.cpp's names)
"""
