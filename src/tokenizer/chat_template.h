// Chat templates: render a conversation into the prompt text a chat model was trained on.
//
// Goals: byte-identical output to llama.cpp's built-in templates (llama_chat_apply_template), so a
// prompt built here tokenizes to the same ids as in llama.cpp. Non-goals: a Jinja interpreter; the
// GGUF `tokenizer.chat_template` string is only used to pick a built-in template.
//
// The rendered text holds no BOS: encode it with SpmTokenizer::Encode(text, /*add_special=*/true,
// /*parse_special=*/true), which prepends <bos> exactly once (as llama.cpp and its server do).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace uniprefill::tokenizer {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant" (Gemma also accepts "model")
  std::string content;
};

enum class ChatTemplateKind { kGemma };

// Picks the built-in template for a GGUF chat_template string (empty = the architecture's default,
// given as `architecture`, e.g. "gemma3"). Unimplemented for templates we do not know.
Result<ChatTemplateKind> DetectChatTemplate(std::string_view template_text,
                                            std::string_view architecture);

// Gemma (llama.cpp's LLM_CHAT_TEMPLATE_GEMMA):
//   for each message:  "<start_of_turn>" + role + "\n" + trim(content) + "<end_of_turn>\n"
//   with role "assistant" written as "model"; system messages are not turns: their trimmed
//   contents are concatenated and put, followed by "\n\n", at the start of the next non-model
//   turn's content; add_generation_prompt appends "<start_of_turn>model\n".
//   trim() removes ASCII whitespace (" \t\n\v\f\r") at both ends.
// Example: [{system,"Be brief."},{user,"Hi"}] ->
//   "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt,
                              ChatTemplateKind kind = ChatTemplateKind::kGemma);

}  // namespace uniprefill::tokenizer
