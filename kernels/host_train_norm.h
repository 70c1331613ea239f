// host_train_norm.h: host only. THE SPM NORMALISER (common/spm_norm_rules.h, the encoder's) on
// one sentence, for SentencePiece training's word counter (host_train_spm_words.h, in the
// training unit of the library, which reaches it through this export as it reaches the
// pre-tokenizer through gputok_native_chunk_pretok): training and encoding normalise alike.
//
//   gputok_native_spm_normalize   the normalised sentence's length in bytes; its first
//                                 min(length, cap) bytes are written to out (a caller whose
//                                 buffer was short grows it and calls again)

extern "C" __attribute__((visibility("default"))) long long gputok_native_spm_normalize(
    const unsigned* units, unsigned n_units, const unsigned char* strings, unsigned n_strings,
    unsigned flags, const unsigned char* buf, long long n, unsigned char* out, long long cap) {
  if (n <= 0) return 0;
  EncCharsMap cm{units, n_units, strings, n_strings, flags};
  EncNormOut o{out, true, (enc_u32)(cap < 0xFFFFFFFFll ? cap : 0xFFFFFFFFll), 0, 0};
  return (long long)enc_spm_normalize(cm, buf, 0, (enc_u32)n, o);
}
