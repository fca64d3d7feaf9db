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

TEST(ChatTemplateDetection, PicksGemmaFromTemplateTextOrArchitecture) {
  Result<ChatTemplateKind> k = DetectChatTemplate("{{ '<start_of_turn>' + role }}", "llama");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, ChatTemplateKind::kGemma);
  k = DetectChatTemplate("", "gemma3");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, ChatTemplateKind::kGemma);
  EXPECT_FALSE(DetectChatTemplate("", "llama").ok());
  EXPECT_FALSE(DetectChatTemplate("{% for m in messages %}<|im_start|>", "qwen2").ok());
}

}  // namespace
}  // namespace uniprefill::tokenizer
