"""GGUF's token types (``tokenizer.ggml.token_type``), as llama.cpp writes them."""

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
