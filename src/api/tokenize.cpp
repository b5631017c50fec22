// api/tokenize: sluice/tokenize.h over the GGUF vocabulary reader and format/hf_folder's
// tokenizer-only open.
#include "sluice/tokenize.h"

#include "format/gguf.h"
#include "format/hf_folder.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

struct ModelTokenizer::Impl {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

ModelTokenizer::ModelTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->file = is_model_folder(path) ? open_folder_tokenizer(path) : std::make_unique<GgufFile>(path);
  impl_->tok = std::make_unique<Tokenizer>(vocab_from_gguf(*impl_->file));
}

ModelTokenizer::~ModelTokenizer() = default;

std::vector<int32_t> ModelTokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tok->encode(text, add_special, parse_special);
}

std::string ModelTokenizer::detokenize(const std::vector<int32_t>& ids) const { return impl_->tok->decode(ids); }

std::string ModelTokenizer::token_text(int32_t id) const { return impl_->tok->token_to_piece(id); }

int64_t ModelTokenizer::n_vocab() const { return impl_->tok->n_vocab(); }

}  // namespace sluice
