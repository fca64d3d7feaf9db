// Gemma chat template: the exact text llama.cpp's built-in "gemma" template renders.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace uniprefill::tokenizer {
namespace {

TEST(GemmaChatTemplate, SingleUserTurnWithGenerationPrompt) {
  EXPECT_EQ(ApplyChatTemplate({{"user", "Hello"}}, true),
            "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
}

TEST(GemmaChatTemplate, NoGenerationPromptEndsAfterTheLastTurn) {
  EXPECT_EQ(ApplyChatTemplate({{"user", "Hello"}}, false), "<start_of_turn>user\nHello<end_of_turn>\n");
}

TEST(GemmaChatTemplate, SystemIsPrependedToTheFirstUserTurn) {
  EXPECT_EQ(ApplyChatTemplate({{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}

TEST(GemmaChatTemplate, AssistantTurnsUseRoleModel) {
  EXPECT_EQ(ApplyChatTemplate({{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, true),
            "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n"
            "<start_of_turn>user\nc<end_of_turn>\n<start_of_turn>model\n");
}

TEST(GemmaChatTemplate, ContentIsTrimmedOfAsciiWhitespace) {
  EXPECT_EQ(ApplyChatTemplate({{"system", "  sys \n"}, {"user", "\t hi there \r\n"}}, false),
            "<start_of_turn>user\nsys\n\nhi there<end_of_turn>\n");
}

TEST(GemmaChatTemplate, SystemWaitsForANonModelTurn) {
  // llama.cpp: a system prompt is held over model turns and joins the next user turn.
  EXPECT_EQ(ApplyChatTemplate({{"system", "S"}, {"assistant", "x"}, {"user", "y"}}, false),
            "<start_of_turn>model\nx<end_of_turn>\n<start_of_turn>user\nS\n\ny<end_of_turn>\n");
}

TEST(GemmaChatTemplate, SeveralSystemMessagesAreConcatenated) {
  EXPECT_EQ(ApplyChatTemplate({{"system", "A"}, {"system", "B"}, {"user", "u"}}, false),
            "<start_of_turn>user\nAB\n\nu<end_of_turn>\n");
}

// SmolLM2-135M-Instruct's tokenizer.chat_template, as its GGUF stores it (raw newlines).
constexpr const char* kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplateDetection, PicksGemmaFromTemplateTextOrArchitecture) {
  Result<ChatTemplate> k = DetectChatTemplate("{{ '<start_of_turn>' + role }}", "llama");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->kind, ChatTemplateKind::kGemma);
  k = DetectChatTemplate("", "gemma3");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->kind, ChatTemplateKind::kGemma);
  EXPECT_FALSE(DetectChatTemplate("", "llama").ok());
}

TEST(ChatTemplateDetection, ReadsSmolLm2ChatMlWithItsDefaultSystemTurn) {
  Result<ChatTemplate> t = DetectChatTemplate(kSmolLm2Template, "llama");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->default_system,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(ChatTemplateDetection, ReadsPlainChatMlWrittenWithEscapesAndAttributes) {
  // No default system turn; "\n" escapes, double quotes, whitespace control, message.role.
  Result<ChatTemplate> t = DetectChatTemplate(
      "{%- for message in messages %}{{- \"<|im_start|>\" + message.role + \"\\n\" + "
      "message.content + \"<|im_end|>\\n\" }}{%- endfor %}{%- if add_generation_prompt %}"
      "{{- \"<|im_start|>assistant\\n\" }}{%- endif %}",
      "qwen2");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->default_system, "");
}

TEST(ChatTemplateDetection, RefusesChatMlItCannotRenderFaithfully) {
  // A fragment whose per-message expression is not ChatML's.
  Result<ChatTemplate> t = DetectChatTemplate("{% for m in messages %}<|im_start|>", "qwen2");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("do not render as"), std::string::npos);
  // Tool calling (Qwen2.5's template) is a feature the renderer lacks: refused, named.
  t = DetectChatTemplate("{%- if tools %}<|im_start|>system{% endif %}", "qwen2");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'tool'"), std::string::npos);
  t = DetectChatTemplate("{{ bos_token }}[INST] {{ m }} [/INST]", "llama");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("supported: gemma, ChatML"), std::string::npos);
}

ChatTemplate SmolLm2() { return *DetectChatTemplate(kSmolLm2Template, "llama"); }

TEST(ChatMlChatTemplate, AddsTheDefaultSystemTurnBeforeAFirstUserMessage) {
  EXPECT_EQ(ApplyChatTemplate({{"user", "Hi"}}, true, SmolLm2()),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatMlChatTemplate, AGivenSystemMessageReplacesTheDefault) {
  EXPECT_EQ(ApplyChatTemplate({{"system", "Be brief."}, {"user", "Hi"}}, false, SmolLm2()),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatMlChatTemplate, KeepsContentAsIsAndRolesVerbatim) {
  // No trimming (unlike Gemma), assistant stays "assistant", a later system turn is a turn.
  EXPECT_EQ(ApplyChatTemplate({{"system", " s "}, {"user", "\n a \n"}, {"assistant", "b"},
                               {"system", "c"}},
                              false, SmolLm2()),
            "<|im_start|>system\n s <|im_end|>\n<|im_start|>user\n\n a \n<|im_end|>\n"
            "<|im_start|>assistant\nb<|im_end|>\n<|im_start|>system\nc<|im_end|>\n");
}

TEST(ChatMlChatTemplate, NoMessagesRenderOnlyTheGenerationPrompt) {
  EXPECT_EQ(ApplyChatTemplate({}, true, SmolLm2()), "<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate({}, false, SmolLm2()), "");
}

}  // namespace
}  // namespace uniprefill::tokenizer
