// bench/lookup_bench: see lookup_bench.h.
#include "bench/lookup_bench.h"

#include <string>

#include "core/error.h"
#include "runtime/chat_format.h"
#include "runtime/generator.h"
#include "runtime/session.h"

namespace sluice {
namespace {

// About 160 words: with the instruction, ~200 prompt tokens for a BPE vocabulary.
constexpr const char* kParagraph =
    "The old lighthouse stood at the edge of the cliff for more than a hundred years. Every night its keeper "
    "climbed the narrow stairs, lit the great lamp, and watched the ships pass safely through the dark water "
    "below. The villagers said the light had never failed, not even during the worst storms of winter. In "
    "spring the fishermen painted their boats in bright colours and sailed out before dawn, trusting the beam "
    "to guide them home. Children gathered shells on the beach beneath the tower and told each other stories "
    "about the keeper, who was said to know the name of every star. When the keeper grew too tired to climb, "
    "his daughter took the key, learned the clockwork of the lamp, and kept the light burning as he had. The "
    "harbour grew, new ships came and went, and still the beam turned over the water every night.";

}  // namespace

LookupBenchResult bench_lookup(const Model& m, Backend& be, const KvCacheOptions& kv, int n_gen, int reps) {
  const ChatFormat chat(m);
  const nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "user"},
        {"content",
         std::string("Rewrite this paragraph, changing only the word \"old\" to \"ancient\":\n\n") + kParagraph}}});
  const std::string prompt = chat.render(messages);
  GenerateParams gp;
  gp.sampler.temp = 0;
  gp.n_predict = n_gen;
  const SpeculativeParams sp;
  Session s(m, be, kv);
  LookupBenchResult r;
  for (int rep = 0; rep < reps; ++rep) {
    s.reset();
    const GenerationStats plain = Generator(s).run(prompt, gp);
    s.reset();
    NgramDrafter drafter(sp);
    SpeculativeStats spec;
    const GenerationStats look = run_speculative(s, prompt, gp, drafter, sp.draft_max, {}, &spec);
    r.plain_tps.push_back(plain.generate_seconds > 0 ? plain.n_generated / plain.generate_seconds : 0);
    r.lookup_tps.push_back(look.generate_seconds > 0 ? look.n_generated / look.generate_seconds : 0);
    r.identical = r.identical && plain.tokens == look.tokens;
    r.spec = spec;
    r.n_prompt = plain.n_prompt;
    r.n_generated = plain.n_generated;
  }
  return r;
}

}  // namespace sluice
