#include "tokenizer/chat_template.h"

namespace uniprefill::tokenizer {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string_view Trim(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end && IsAsciiSpace(s[begin])) ++begin;
  while (end > begin && IsAsciiSpace(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

std::string ApplyGemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  std::string system_prompt;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system_prompt += Trim(m.content);  // no separator between several system messages
      continue;
    }
    const std::string_view role = m.role == "assistant" ? std::string_view("model") : m.role;
    out += "<start_of_turn>";
    out += role;
    out += '\n';
    if (!system_prompt.empty() && role != "model") {
      out += system_prompt;
      out += "\n\n";
      system_prompt.clear();
    }
    out += Trim(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

Result<ChatTemplateKind> DetectChatTemplate(std::string_view template_text,
                                            std::string_view architecture) {
  if (template_text.empty()) {
    if (architecture.substr(0, 5) == "gemma") return ChatTemplateKind::kGemma;
    return Unimplemented("chat template: the model has no tokenizer.chat_template and no built-in "
                         "default for architecture '" + std::string(architecture) + "'");
  }
  if (template_text.find("<start_of_turn>") != std::string_view::npos) {
    return ChatTemplateKind::kGemma;
  }
  return Unimplemented("chat template: tokenizer.chat_template is not one we know (supported: "
                       "gemma); its first 80 bytes: '" +
                       std::string(template_text.substr(0, 80)) + "'");
}

std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kGemma: return ApplyGemma(messages, add_generation_prompt);
  }
  return {};
}

}  // namespace uniprefill::tokenizer
