// Byte-level BPE vocabularies stored in GGUF files (tokenizer.ggml.model = "gpt2": Llama 3, Qwen2
// GGUFs) as a BpeTokenizer: the GGUF arrays (tokens, merges, token types, bos/eos, add_bos, pre)
// are restated as the equivalent tokenizer.json, so both sources share one tokenizer.
// Supported `tokenizer.ggml.pre` values (a table in gguf_bpe.cc): llama-bpe / llama3 (Llama 3
// regex, ignore_merges), qwen2 (Qwen2 regex, NFC) and smollm (single digits, then the GPT-2
// regex); others are refused (Unimplemented) with a message naming the value and the supported
// ones.
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
