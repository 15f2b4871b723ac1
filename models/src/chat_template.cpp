#include "chat_template.hpp"

#include <string>

#include "luminal/error.hpp"

namespace luminal::models::detail {

namespace {
std::string trim(const std::string& s) {  // Jinja's `| trim` (Python str.strip())
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A literal default system prompt written in a ChatML template, e.g. Qwen 2's
// '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'.
std::string chatml_default_system(const std::string& tmpl) {
  const std::string close = "<|im_end|>";
  // The newline is written either as a "\n" escape or verbatim inside the Jinja literal.
  for (const std::string open : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    for (size_t at = tmpl.find(open); at != std::string::npos; at = tmpl.find(open, at + 1)) {
      const size_t b = at + open.size();
      const size_t e = tmpl.find(close, b);
      if (e == std::string::npos) break;
      const std::string text = tmpl.substr(b, e - b);
      if (!text.empty() && text.find_first_of("{}<'\"\n") == std::string::npos) return text;
    }
  }
  return "";
}

void check_role(const ChatMessage& m) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant")
    fail("chat template: unsupported role \"", m.role, "\" (use system, user or assistant)");
}
}  // namespace

ChatTemplateFamily detect_chat_template_family(const std::string& t) {
  if (t.empty()) return ChatTemplateFamily::None;
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatTemplateFamily::Llama3;
  if (t.find("<|im_start|>") != std::string::npos) return ChatTemplateFamily::ChatML;
  if (t.find("<start_of_turn>") != std::string::npos) return ChatTemplateFamily::Gemma;
  return ChatTemplateFamily::None;
}

std::string render_chat_template(ChatTemplateFamily family, const std::string& tmpl, const std::string& bos_token,
                                 const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  for (const auto& m : messages) check_role(m);
  std::string out;
  switch (family) {
    case ChatTemplateFamily::Llama3: {
      out += bos_token.empty() ? "<|begin_of_text|>" : bos_token;
      size_t first = 0;
      if (tmpl.find("Cutting Knowledge Date") != std::string::npos) {
        // Llama 3.1+ always emits a system block carrying the knowledge/today dates.
        std::string sys;
        if (!messages.empty() && messages[0].role == "system") {
          sys = trim(messages[0].content);
          first = 1;
        }
        out += "<|start_header_id|>system<|end_header_id|>\n\n";
        out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
        out += sys + "<|eot_id|>";
      }
      for (size_t i = first; i < messages.size(); ++i)
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + trim(messages[i].content) +
               "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatTemplateFamily::ChatML: {
      const std::string def = chatml_default_system(tmpl);
      if (!def.empty() && (messages.empty() || messages[0].role != "system"))
        out += "<|im_start|>system\n" + def + "<|im_end|>\n";
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatTemplateFamily::Gemma: {
      out += bos_token.empty() ? "<bos>" : bos_token;
      size_t first = 0;
      std::string prefix;
      if (!messages.empty() && messages[0].role == "system") {
        prefix = messages[0].content + "\n\n";  // Gemma 3 folds the system prompt into the first turn
        first = 1;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const std::string role = messages[i].role == "assistant" ? "model" : messages[i].role;
        out += "<start_of_turn>" + role + "\n" + (i == first ? prefix : "") + trim(messages[i].content) +
               "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
    case ChatTemplateFamily::None:
      fail("chat template: unsupported template family");
  }
  return out;
}

}  // namespace luminal::models::detail
