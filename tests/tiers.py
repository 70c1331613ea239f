"""Which tests run in the full tier only (``--full`` / ``GPUTOK_FULL=1``; see conftest.py).

Two lists, both of node-id patterns (``fnmatch``), each entry with why:

* ``FULL_ONLY``: whole tests (every parameter) that the default tier leaves out, with what the
  default tier keeps of the same code;
* ``DEFAULT_PARAMS``: a parametrised test whose default tier runs only the parameters listed
  (one or two representatives: every backend, every family, every format still runs; the other
  vocabularies, variants and corpus kinds are the full tier's).

A pattern that matches none of the tests of a collected file is an error (a renamed test must
not leave these lists silently). The default tier also runs one emulator thread order and
smaller samples (conftest.py: ``DEFAULT_ORDER``, ``DEFAULT_TIER_KNOBS``).
"""

from __future__ import annotations

import fnmatch

FULL_ONLY: tuple = (
    # corpus jobs: real processes killed and resumed
    ("tests/test_resume.py::test_sigkill_at_random_moments_then_resume*",
     "kill rounds; the default tier kills a job's main process once (next entry's [first shard])"),
    ("tests/test_resume.py::test_sigkill_of_the_main_process_alone_*[[]start]",
     "other kill points of the same test"),
    ("tests/test_resume.py::test_sigkill_of_the_main_process_alone_*[[]half]",
     "other kill points of the same test"),
    ("tests/test_resume.py::test_interrupt_keeps_the_encoded_documents*",
     "a real process interrupted; the default tier interrupts the job in process "
     "(test_cli.py::test_shard_cap_is_a_cap_and_small_jobs_keep_shards, the writer's own tests)"),
    ("tests/test_corpus_devices.py::test_a_multi_gpu_job_killed_and_resumed_writes_the_same_shards",
     "SIGKILL rounds of a three-GPU job (8-9 s); the default tier keeps a multi-GPU job "
     "(test_a_list_of_gpus_uses_those_alone) and a job killed and resumed (test_resume.py)"),
    ("tests/test_corpus_devices.py::test_one_pipeline_per_gpu_writes_one_encoders_shards",
     "three emulated GPUs, one pipeline each (9 s); the default tier keeps two of them "
     "(test_a_list_of_gpus_uses_those_alone) and each GPU's own context, pool and budget "
     "(test_cuda_device.py)"),
    # exhaustive sweeps (every code point, every rule, every release)
    ("tests/test_unicode_pattern.py::test_pieces_do_not_depend_on_the_regex_release*",
     "three regex releases over the corpora; the pinned tables' own tests stay"),
    ("tests/test_cpu_ref_wordpiece.py::test_unicode_table_differences_never_met_in_real_text",
     "every differing code point against real text; the corpus samples stay"),
    ("tests/test_cpu_ref_spm.py::test_charsmap_rules_vs_sentencepiece",
     "every charsmap rule; the normaliser edge cases and corpus samples stay"),
    ("tests/test_families.py::test_charsmap_rules_vs_spec*",
     "every charsmap rule; the normaliser edge cases stay"),
    ("tests/test_unicode.py::test_every_atom_outside_brackets_equals_the_engine[[]hf]",
     "every atom for HF's engine; tiktoken's stays"),
    ("tests/test_unicode_pattern.py::test_ascii_form_matches_the_pinned_pattern_on_ascii_text"
     "[[]tiktoken]", "the ASCII form for tiktoken's family; HF's stays"),
    ("tests/test_wordpiece.py::test_every_code_point_normalises_and_splits_like_hf*",
     "every code point through BERT's normaliser and split; the ids, fuzz and table tests stay"),
    ("tests/test_cpu_ref_unicode.py::test_pinned_named_patterns_equal_tiktoken",
     "every named pattern against tiktoken over the corpora; cpu_ref's encodings against "
     "tiktoken stay (test_cpu_ref.py)"),
    ("tests/test_cpu_ref_unigram.py::test_spec_vs_sentencepiece_xlmr",
     "XLM-R's 250K-piece model through the spec; the smaller Unigram models stay"),
    ("tests/test_unigram.py::test_xlmr_gguf_vs_sentencepiece",
     "XLM-R's GGUF; the T5 GGUF written from a model stays"),
    ("tests/test_post.py::test_gguf_follows_llama_cpp",
     "every GGUF's BOS/EOS rule; the tokenizer.json post-processors stay"),
    ("tests/test_bench_long.py::*",
     "bench/bench_long.py run end to end (the benchmarks, not the product; CI runs them)"),
    ("tests/test_cpu_ref_wordpiece.py::test_fuzz_vs_hf",
     "hypothesis text through three BERT variants (filtered: slow to draw); the edges and the "
     "corpus sample stay"),
    ("tests/test_metal_train.py::test_random_corpora_equal_hf",
     "random corpora through the Metal training loop; its equality with HF on real text stays"),
    ("tests/test_cpu_ref_hf_spm.py::test_fuzz_vs_hf",
     "hypothesis text through the spec and HF; the edges and the corpus sample stay"),
    ("tests/test_model_cache.py::test_concurrent_loads_agree",
     "processes loading one vocabulary at once (with a fresh cache each builds it: 30-40 s); "
     "the cache's atomic write and damaged-entry tests stay"),
    # long inputs: the heap and rounds rule at scale
    ("tests/test_native.py::test_long_runs_merge_in_rounds_then_the_heap_as_the_sequential_rule",
     "long runs at scale on the native device; cpu_ref's and the numpy stage's rule tests stay"),
    ("tests/test_cpu_ref.py::test_merge_long_rounds_then_heap_is_the_sequential_rule",
     "the spec's long-run rule at scale; test_stages' long pieces stay"),
    # one vocabulary's worth of a check that every vocabulary gets in the full tier
    ("tests/test_loaders.py::test_hf_export_of_named_encoding_matches_tiktoken",
     "exporting all of cl100k to tokenizer.json; the trained-vocabulary exports stay"),
    ("tests/test_metal_train.py::test_loop_shrinks_grows_and_compacts",
     "the Metal training loop's table sizes; the loop's equality with HF stays"),
    ("tests/test_native.py::test_every_kernel_runs_on_real_volumes",
     "every kernel on MBs of text; every kernel still runs in the pipeline tests"),
)

DEFAULT_PARAMS: tuple = (
    # SentencePiece user-defined pieces with a rewriting normaliser on the native device: a
    # charsmap with collapsed whitespace, and kept whitespace with byte fallback
    *((f"tests/test_spm_user_defined_native.py::{t}", (f"[[]ud_nfkc{p}",
       f"[[]ud_keep_ws_bytes{p}"), "the other trained models")
      for t, p in (("test_the_native_device_takes_the_normaliser", "]"),
                   ("test_batches_equal_sentencepiece_with_no_fallback", "-*"),
                   ("test_the_numpy_backend_agrees", "]"),
                   ("test_single_texts_equal_sentencepiece_with_no_fallback", "-*"),
                   ("test_cpu_devices_without_the_one_call_count_the_host_normaliser", "]"))),
    # parity on sampled corpora: every vocabulary on the native device, the numpy backend on
    # the hardest kind (multilingual), one HF file per backend and kind
    ("tests/test_parity.py::test_named_vs_tiktoken", ("*-native]", "*-multilingual-numpy]"),
     "the numpy backend on every kind"),
    ("tests/test_parity.py::test_hf_vs_tokenizers",
     ("[[]qwen2-*-native]", "[[]llama3-multilingual-numpy]"), "both files on both backends"),
    ("tests/test_parity.py::test_extra_named_vs_tiktoken", ("*-native]",), "the numpy backend"),
    ("tests/test_parity_families.py::test_spm_vs_sentencepiece", ("[[]mistral_v7]",),
     "the other SentencePiece models"),
    ("tests/test_parity_families.py::test_spm_tokenizer_json_vs_hf",
     ("[[]botchan_bpe-metaspace_split]",), "the other shapes"),
    ("tests/test_parity_families.py::test_wordpiece_vs_hf", ("[[]uncased]",), "the variants"),
    ("tests/test_parity_families.py::test_gguf_vs_source", ("[[]minilm]", "[[]mistral_v7]"),
     "the byte-level GGUF files (test_gguf_loader keeps r50k_base's)"),
    ("tests/test_parity_families_gputok.py::test_spm_model_vs_sentencepiece",
     ("[[]mistral_v7]", "[[]user_defined]"), "the other SentencePiece models"),
    ("tests/test_parity_families_gputok.py::test_spm_tokenizer_json_vs_hf",
     ("[[]botchan_bpe-legacy]",), "the other shapes"),
    ("tests/test_parity_families_gputok.py::test_wordpiece_vs_hf", ("[[]cased]",), "the variants"),
    ("tests/test_parity_families_gputok.py::test_gguf_vs_source", ("[[]mistral_v7]",),
     "qwen2's and minilm's GGUF"),
    # the spec against the libraries: one of each model family's variants
    ("tests/test_cpu_ref.py::test_cpu_ref_vs_tiktoken", ("[[]cl100k_base]",), "r50k/p50k/o200k"),
    ("tests/test_cpu_ref.py::test_numpy_backend_vs_cpu_ref", ("[[]o200k_base]",),
     "r50k/p50k/cl100k"),
    ("tests/test_gguf_loader.py::test_reader_equals_spec",
     ("[[]mistral_v3]", "[[]identity_keep_ws]", "[[]minilm]"), "qwen2's (a 150k vocabulary)"),
    ("tests/test_cpu_ref.py::test_table_merge_equals_tiktoken_rule", ("[[]r50k_base]",), "cl100k"),
    ("tests/test_cpu_ref.py::test_table_merge_equals_hf_rule", ("[[]llama3]",), "qwen2"),
    ("tests/test_cpu_ref.py::test_cpu_ref_hf_vs_tokenizers", ("[[]llama3]",), "qwen2"),
    ("tests/test_cpu_ref_gguf.py::test_reader_matches_gguf_package",
     ("[[]minilm]", "[[]tiny_gpt2]", "[[]identity_keep_ws]"), "Mistral v3's GGUF (25 s to write)"),
    ("tests/test_cpu_ref_gguf.py::test_gguf_ids_equal_source",
     ("[[]r50k_base]", "[[]mistral_v1]", "[[]identity_keep_ws]", "[[]minilm]"),
     "the large vocabularies' GGUF files"),
    ("tests/test_cpu_ref_hf_spm.py::test_edges_vs_hf", ("*-bf1-fuse1]",), "the other shapes"),
    ("tests/test_cpu_ref_hf_spm.py::test_corpus_sample_vs_hf",
     ("[[]mistral_v3-metaspace_split-bf1-fuse1]", "[[]botchan_bpe-legacy-*"), "the other shapes"),
    ("tests/test_cpu_ref_hf_spm.py::test_decode_random_ids_vs_hf", ("*-bf1-fuse1]",),
     "the other shapes"),
    ("tests/test_cpu_ref_spm.py::test_corpus_sample_vs_sentencepiece",
     ("[[]mistral_v7]", "[[]nfkc_cf_bytes]", "[[]user_defined]"), "the other models"),
    ("tests/test_cpu_ref_wordpiece.py::test_corpus_sample_vs_hf", ("[[]cased_strip_accents]",),
     "the other variants (their edge cases stay)"),
    ("tests/test_families.py::test_spm_tokenizer_json_vs_hf",
     ("[[]mistral_v3-metaspace_split-bf1-fuse1]", "[[]user_defined-legacy-bf0-fuse0]"),
     "the other shapes and models"),
    ("tests/test_families.py::test_normalizer_vs_spec_and_sentencepiece",
     ("[[]mistral_v7]", "[[]nfkc_cf_bytes]", "[[]nmt_nfkc_cf_ws_pieces]"), "the other models"),
    ("tests/test_families.py::test_corpus_sample_vs_sentencepiece",
     ("[[]mistral_v7]", "[[]nfkc_cf_bytes]", "[[]user_defined]"), "the other models"),
    ("tests/test_families_native.py::test_native_wordpiece_vs_hf", ("[[]cased]", "[[]no_cjk]"),
     "uncased over the full sample"),
    ("tests/test_gguf_loader.py::test_gguf_ids_equal_the_source_tokenizer",
     ("[[]r50k_base]", "[[]mistral_v*]", "[[]identity_keep_ws]", "[[]minilm]"),
     "Qwen2's and Llama 3's GGUF (15-25 s to write)"),
    ("tests/test_ranks_cache.py::test_named_encodings_from_the_cache_encode_as_tiktoken",
     ("[[]r50k_base]",), "cl100k and o200k"),
    ("tests/test_loaders.py::test_hf_file_metadata", ("[[]llama3]",), "qwen2"),
    ("tests/test_fuzz.py::test_fuzz_vs_hf_tokenizers", ("[[]qwen2-lstrip-rstrip]",),
     "llama3, and qwen2 without lstrip/rstrip tokens"),
    # kernels and devices: every kernel, one pattern family each where the families share it
    ("tests/test_native.py::test_pretok_matches_regex", ("*-1-thread]", "[[]qwen2-3-threads*"),
     "every family with several threads"),
    ("tests/test_native.py::test_merge_and_emit_match_the_sequential_rule",
     ("[[]tiktoken-*", "[[]hf-2-threads*"), "hf on one and three threads"),
    ("tests/test_native.py::test_pipeline_matches_tiktoken", ("*-2-threads-grid-strides]",),
     "the other thread layouts"),
    ("tests/test_native.py::test_pipeline_matches_hf_tokenizers", ("[[]llama3]",), "qwen2"),
    ("tests/test_native.py::test_a_giant_line_runs_as_ordinary_chunks",
     ("[[]cl100k_base]", "[[]o200k_base]"), "the other vocabularies"),
    ("tests/test_native.py::test_a_blob_without_spaces_is_cut_where_letters_meet_digits",
     ("[[]cl100k_base]", "[[]o200k_base]"), "the other vocabularies"),
    ("tests/test_native.py::test_merge_reads_the_byte_blocks", ("[[]llama3]",), "o200k"),
    ("tests/test_cuda_kernels.py::test_emulated_pipeline_matches_hf_tokenizers", ("[[]llama3]",),
     "qwen2"),
    ("tests/test_cuda_kernels.py::test_nvrtc_compiles_what_the_driver_loads", ("[[]sm_90]",),
     "sm_80"),
    ("tests/test_kernels_compile.py::test_cuda_kernel_compiles_with_nvcc", ("*-sm_90]",), "sm_80"),
    ("tests/test_metal_encode.py::test_metal_backend_matches_hf_tokenizers", ("[[]llama3]",),
     "qwen2"),
    ("tests/test_metal_encode.py::test_metal_backend_matches_tiktoken",
     ("[[]r50k_base]", "[[]o200k_base]", "[[]cl100k_base]"), "gpt2, p50k and o200k_harmony"),
    ("tests/test_metal_train.py::test_metal_training_equals_hf", ("[[]multilingual-380-*",),
     "prose and code"),
    ("tests/test_train_kernels.py::test_device_loop_on_emulator_equals_cpu",
     ("*-multilingual-380]", "*-code-420]"), "prose"),
    ("tests/test_device_coverage.py::test_every_encoding_and_tokenizer_json_runs_with_zero_"
     "fallbacks", ("[[]gpt2]", "[[]p50k_edit]", "[[]cl100k_base]", "[[]o200k_harmony]",
                   "[[]qwen2]"), "the other vocabularies"),
    # the scanners: every pattern family, one real-text kind each
    ("tests/test_scan.py::test_real_text",
     ("[[]cl100k-multilingual]", "[[]qwen2-multilingual]", "[[]o200k-code]"),
     "every family on every kind"),
    ("tests/test_unicode_pattern.py::test_boundary_walk_tiktoken", ("[[]o200k]",), "gpt2, cl100k"),
    ("tests/test_scan.py::test_edge_cases_alone_and_in_pairs", ("[[]cl100k]", "[[]qwen2]"),
     "the other families' edge cases in pairs"),
    ("tests/test_scan.py::test_fuzz_batch_and_boundaries", ("[[]o200k]", "[[]qwen2]"),
     "the other families"),
    ("tests/test_unicode_pattern.py::test_mixed_text_splits_as_the_pinned_pattern",
     ("[[]cl100k_base]", "[[]o200k_base]", "[[]r50k_base]"), "llama3 and qwen2"),
    ("tests/test_cpu_ref_unicode.py::test_pinned_pieces_equal_oniguruma", (r"[[]\\p{N}*", "*s+$]"),
     "the other regex atoms (the letter classes take 5-18 s each)"),
    ("tests/test_cpu_ref_unicode.py::test_normalisers_equal_hf_on_every_code_point", ("[[]NFD]",),
     "NFC, NFKC, NFKD"),
    # the families added lately: one model of each kind on each backend
    ("tests/test_unigram.py::test_corpora_vs_sentencepiece",
     ("[[]uni_ud_bytes-native]", "[[]botchan_unigram-numpy]"), "the other Unigram models"),
    ("tests/test_unigram.py::test_hf_unigram_vs_tokenizers",
     ("[[]True-Sequence-native]", "[[]False-Metaspace-numpy]"), "the other two"),
    ("tests/test_real_vocabs.py::test_gguf_gives_the_source_tokenizers_ids",
     ("[[]falcon]", "[[]phi-3]", "[[]starcoder]"), "the other real vocabularies' GGUF files"),
    ("tests/test_real_vocabs.py::test_tokenizer_json_vs_hf_on_corpora", ("[[]falcon]",),
     "StarCoder, DeepSeek Coder"),
    ("tests/test_real_vocabs.py::test_rebuilt_tokenizer_json_is_faithful", ("[[]falcon]",),
     "StarCoder"),
    ("tests/test_post.py::test_real_post_processors_vs_tokenizers", ("[[]qwen2_tokenizer_json]",),
     "the other files' post-processors"),
    ("tests/test_spm_device.py::test_references_equal_hf",
     ("[[]mistral_v3-True-True-metaspace_split]", "[[]user_defined-False-False-legacy]"),
     "the other shapes and flags"),
    ("tests/test_spm_device.py::test_references_equal_the_family_stages",
     ("[[]mistral_v7]", "[[]nfkc_cf_bytes]", "[[]user_defined]"), "the other models"),
    ("tests/test_spm_device.py::test_native_device_equals_sentencepiece",
     ("[[]mistral_v7]", "[[]nfkc_cf_bytes]"), "the other models"),
    # training
    ("tests/test_train.py::test_merges_equal_hf_on_real_text",
     ("[[]prose-1000-cl100k]", "[[]prose-8000-gpt2]", "[[]multilingual-8000-o200k]"),
     "code, and multilingual with cl100k"),
    ("tests/test_train.py::test_trained_encodes_like_hf_and_tiktoken",
     ("[[]prose-1000-cl100k]", "[[]multilingual-8000-o200k]"), "the other corpora and sizes"),
    ("tests/test_train.py::test_reference_chain_on_real_text", ("[[]multilingual]",),
     "prose, code, emoji"),
)


def _param_rule(nodeid: str):
    base = nodeid.split("[", 1)[0]
    for function, kept, _why in DEFAULT_PARAMS:
        if base == function:
            return kept
    return None


def full_only(nodeid: str) -> bool:
    """Whether the test ``nodeid`` is left to the full tier by these lists."""
    if any(fnmatch.fnmatchcase(nodeid, pattern) for pattern, _why in FULL_ONLY):
        return True
    kept = _param_rule(nodeid)
    return kept is not None and not any(
        fnmatch.fnmatchcase(nodeid, nodeid.split("[", 1)[0] + p) for p in kept)


def stale_entries(nodeids) -> list:
    """The entries that match nothing in a file that was collected."""
    nodeids = list(nodeids)
    files = {n.split("::", 1)[0] for n in nodeids}
    out = [pattern for pattern, _why in FULL_ONLY
           if pattern.split("::", 1)[0] in files
           and not any(fnmatch.fnmatchcase(n, pattern) for n in nodeids)]
    for function, kept, _why in DEFAULT_PARAMS:
        if function.split("::", 1)[0] not in files:
            continue
        ours = [n for n in nodeids if n.split("[", 1)[0] == function]
        out += [function + p for p in kept
                if not any(fnmatch.fnmatchcase(n, function + p) for n in ours)]
    return out
