// Byte-level BPE vocabularies stored in GGUF files (tokenizer.ggml.model = "gpt2": Llama 3, Qwen2
// GGUFs) as a BpeTokenizer: the GGUF arrays (tokens, merges, token types, bos/eos, add_bos, pre)
// are restated as the equivalent tokenizer.json, so both sources share one tokenizer.
// Supported `tokenizer.ggml.pre` values: llama-bpe / llama3 (Llama 3 regex, ignore_merges) and
// qwen2 (Qwen2 regex, NFC); others are refused with a message naming the value.
#pragma once

#include <string>

#include "core/status.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"

namespace uniprefill::tokenizer {

// The tokenizer.json text (and tokenizer_config.json text, for the eos token) for a GGUF vocabulary.
Result<std::pair<std::string, std::string>> BpeJsonFromGguf(const gguf::GgufFile& file);
Result<BpeTokenizer> BpeTokenizerFromGguf(const gguf::GgufFile& file);

}  // namespace uniprefill::tokenizer
