"""cpu_ref: the executable specification of gputok.

Small, slow and obvious on purpose. Every fast path in ``gputok`` (numpy, CUDA, Metal) is tested
against these functions, and these functions are tested against the real libraries (tiktoken,
Hugging Face ``tokenizers``). Nothing here imports ``gputok``; when a fast path and this package
disagree, the fast path is wrong unless the oracle library says otherwise.

Modules:
    patterns  -- the pre-tokenizer regexes of the named encodings, and how we run them
    bpe       -- the two literal BPE algorithms (tiktoken rule, HF rule)
    specials  -- the special-token contract (allowed / disallowed), and splitting on specials
    encoding  -- a reference Encoding that strings the pieces together, tiktoken style
    hf        -- a reference for HF tokenizer.json byte-level BPE files
    decode    -- decoding, lossy decoding and the streaming decoder
    train     -- the BPE training rule (HF BpeTrainer semantics)
"""
