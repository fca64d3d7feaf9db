// Chat templates: render a conversation into the prompt text a chat model was trained on.
//
// Goals: the exact text the model's own template renders, for the template families of the models
// we run, so a prompt built here tokenizes to the same ids as in llama.cpp / transformers.
// Non-goals: a Jinja interpreter. The GGUF `tokenizer.chat_template` string is recognised as one of
// the families below (by its markers and its per-message expression); anything else is refused
// with an error naming what was not recognised.
//
// Supported families:
//   Gemma   (Gemma 3; also the default for a "gemma*" architecture without a template): byte-
//           identical to llama.cpp's built-in "gemma" template, described at ApplyChatTemplate.
//   ChatML  (SmolLM2-Instruct; any template whose messages render as
//           '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n' and that has no tool or
//           thinking features): as that Jinja template renders it, including a default system turn
//           that the template adds when the first message is not a system one (SmolLM2: "You are a
//           helpful AI assistant named SmolLM, trained by Hugging Face").
//
// The rendered text holds no BOS: encode it with add_special = true and parse_special = true, which
// prepends a BOS exactly once where the vocabulary wants one (Gemma: yes; SmolLM2: no).
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

enum class ChatTemplateKind { kGemma, kChatMl };

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kGemma;
  // ChatML: the system turn's content added when messages[0] is not a system message; empty for
  // templates that add none.
  std::string default_system;
};

// The template a GGUF chat_template string stands for (empty = the architecture's default, given
// as `architecture`, e.g. "gemma3"). Unimplemented for templates we do not recognise, naming why.
Result<ChatTemplate> DetectChatTemplate(std::string_view template_text,
                                        std::string_view architecture);

// Gemma (llama.cpp's LLM_CHAT_TEMPLATE_GEMMA):
//   for each message:  "<start_of_turn>" + role + "\n" + trim(content) + "<end_of_turn>\n"
//   with role "assistant" written as "model"; system messages are not turns: their trimmed
//   contents are concatenated and put, followed by "\n\n", at the start of the next non-model
//   turn's content; add_generation_prompt appends "<start_of_turn>model\n".
//   trim() removes ASCII whitespace (" \t\n\v\f\r") at both ends.
// Example: [{system,"Be brief."},{user,"Hi"}] ->
//   "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
// ChatML:
//   if default_system is set and messages[0].role != "system":
//     "<|im_start|>system\n" + default_system + "<|im_end|>\n"
//   for each message: "<|im_start|>" + role + "\n" + content + "<|im_end|>\n" (content as is)
//   add_generation_prompt appends "<|im_start|>assistant\n".
std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt,
                              const ChatTemplate& chat_template = {});

}  // namespace uniprefill::tokenizer
