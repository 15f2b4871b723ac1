// Chat-template family detection and rendering (internal).
#pragma once

#include <string>
#include <vector>

#include "luminal/models/tokenizer.hpp"

namespace luminal::models::detail {

// Which known family a Jinja chat template belongs to (None when unrecognised or empty).
ChatTemplateFamily detect_chat_template_family(const std::string& tmpl);

// Render messages the way the family's reference template does.
std::string render_chat_template(ChatTemplateFamily family, const std::string& tmpl, const std::string& bos_token,
                                 const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace luminal::models::detail
