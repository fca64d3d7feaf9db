#include "tokenizer/chat_template.h"

#include <algorithm>

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

std::string ApplyChatMl(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        const std::string& default_system) {
  std::string out;
  auto turn = [&out](std::string_view role, std::string_view content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  };
  // The Jinja templates add it inside the message loop (loop.first): no messages, no system turn.
  if (!messages.empty() && messages[0].role != "system" && !default_system.empty()) {
    turn("system", default_system);
  }
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// The template text with what does not change its meaning for our purposes normalised away:
// spaces and tabs, double quotes (as single), Jinja's whitespace control ("{{-", "-}}"), the
// escape "\n" (as a newline), attribute access message.x (as message['x']) and the concatenation
// of adjacent string literals ('a' + 'b' as 'ab').
std::string Canonical(std::string_view text) {
  std::string s;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t') continue;
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
      s += '\n';
      ++i;
      continue;
    }
    s += c == '"' ? '\'' : c;
  }
  auto replace_all = [&s](std::string_view from, std::string_view to) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
      s.replace(p, from.size(), to);
    }
  };
  replace_all("{{-", "{{");
  replace_all("-}}", "}}");
  replace_all("{%-", "{%");
  replace_all("-%}", "%}");
  replace_all("message.role", "message['role']");
  replace_all("message.content", "message['content']");
  replace_all("'+'", "");
  return s;
}

// The system turn a ChatML template adds when the conversation starts without one: the literal
// after "<|im_start|>system\n" in the branch guarded by messages[0]['role'] != 'system'.
Result<std::string> ChatMlDefaultSystem(std::string_view text) {
  const std::string canonical = Canonical(text);
  if (canonical.find("messages[0]['role']!='system'") == std::string::npos) return std::string();
  // The newline after the role is a raw newline or Jinja's two-character escape.
  constexpr std::string_view kRaw = "<|im_start|>system\n", kEscaped = "<|im_start|>system\\n";
  size_t begin = text.find(kRaw), skip = kRaw.size();
  if (begin == std::string_view::npos) {
    begin = text.find(kEscaped);
    skip = kEscaped.size();
  }
  const size_t end = begin == std::string_view::npos ? begin : text.find("<|im_end|>", begin);
  if (end == std::string_view::npos) {
    return Unimplemented("chat template: a ChatML template adds a system turn we cannot read "
                         "(no '<|im_start|>system' literal ending in '<|im_end|>')");
  }
  const std::string_view system = text.substr(begin + skip, end - begin - skip);
  if (system.find_first_of("'\"{}\\") != std::string_view::npos) {
    return Unimplemented("chat template: the default system turn of this ChatML template is not "
                         "a plain literal: '" + std::string(system.substr(0, 80)) + "'");
  }
  return std::string(system);
}

Result<ChatTemplate> DetectChatMl(std::string_view text) {
  for (std::string_view feature : {"tool", "<think>", "enable_thinking"}) {
    if (text.find(feature) != std::string_view::npos) {
      return Unimplemented("chat template: a ChatML template with '" + std::string(feature) +
                           "' features is not supported (supported: gemma, plain ChatML)");
    }
  }
  if (Canonical(text).find("'<|im_start|>'+message['role']+'\n'+message['content']+"
                           "'<|im_end|>\n'") == std::string::npos) {
    return Unimplemented("chat template: a ChatML-like template whose messages do not render as "
                         "'<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n' is not "
                         "supported; its first 80 bytes: '" + std::string(text.substr(0, 80)) +
                         "'");
  }
  ChatTemplate t;
  t.kind = ChatTemplateKind::kChatMl;
  UP_ASSIGN_OR_RETURN(t.default_system, ChatMlDefaultSystem(text));
  return t;
}

}  // namespace

Result<ChatTemplate> DetectChatTemplate(std::string_view template_text,
                                        std::string_view architecture) {
  if (template_text.empty()) {
    if (architecture.substr(0, 5) == "gemma") return ChatTemplate{};
    return Unimplemented("chat template: the model has no tokenizer.chat_template and no built-in "
                         "default for architecture '" + std::string(architecture) + "'");
  }
  if (template_text.find("<start_of_turn>") != std::string_view::npos) return ChatTemplate{};
  if (template_text.find("<|im_start|>") != std::string_view::npos) {
    return DetectChatMl(template_text);
  }
  return Unimplemented("chat template: tokenizer.chat_template is not one we know (supported: "
                       "gemma, ChatML); its first 80 bytes: '" +
                       std::string(template_text.substr(0, 80)) + "'");
}

std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const ChatTemplate& chat_template) {
  switch (chat_template.kind) {
    case ChatTemplateKind::kGemma: return ApplyGemma(messages, add_generation_prompt);
    case ChatTemplateKind::kChatMl:
      return ApplyChatMl(messages, add_generation_prompt, chat_template.default_system);
  }
  return {};
}

}  // namespace uniprefill::tokenizer
