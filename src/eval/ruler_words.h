// RULER word material: embedded word lists and the seeded generators of needle keys and values,
// variable names and coded words.
//
// Goals: everything the synthetic RULER tasks need without external data (RULER draws its words
// from the `wonderwords` package); the same output for the same seed on every platform (only
// std::mt19937_64 and our own range reduction / shuffle, never the implementation-defined std::
// distributions or std::shuffle).
// Non-goals: a dictionary; pseudo-words from syllables stand in for English once the embedded lists
// run out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace uniprefill::eval {

using Rng = std::mt19937_64;

// A generator seeded from (seed, stream), so the parts of a sample (keys, depths, haystack...) come
// from independent streams and growing one part leaves the others unchanged.
Rng MakeRng(uint64_t seed, uint64_t stream);
// Uniform in [0, n) (n > 0); uniform in [0, 1).
uint64_t UniformIndex(Rng& rng, uint64_t n);
double UniformUnit(Rng& rng);
// Fisher-Yates with UniformIndex: portable, unlike std::shuffle.
template <typename T>
void Shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[UniformIndex(rng, i)]);
}

// Common English adjectives and nouns (about 160 each, distinct, lowercase): keys of type "words"
// are adjective-noun pairs such as "fearless-dragon".
std::span<const std::string_view> Adjectives();
std::span<const std::string_view> Nouns();
// Further common English words (lowercase, distinct from each other and from the lists above).
std::span<const std::string_view> CommonWords();

// "fearless-dragon".
std::string RandomWordKey(Rng& rng);
// A 7-digit integer in [1000000, 9999999], as RULER's generate_random_number.
std::string RandomNumber7(Rng& rng);
// A uuid4 string: lowercase hex 8-4-4-4-12, version nibble 4, variant bits 10.
std::string RandomUuid4(Rng& rng);
// `length` random uppercase letters (vt variable names) / lowercase letters (fwe coded words).
std::string RandomUpperLetters(Rng& rng, int length);
std::string RandomLowerLetters(Rng& rng, int length);
// A pronounceable lowercase pseudo-word of 2-3 consonant-vowel syllables, e.g. "tobira".
std::string SyllableWord(Rng& rng);

// `count` distinct lowercase words for cwe: the embedded words (adjectives, nouns, common words)
// shuffled with the seed, then syllable pseudo-words. The list for a smaller count is a prefix of
// the list for a larger one. count is capped at MaxCweWords().
std::vector<std::string> CweWordPool(uint64_t seed, size_t count);
size_t MaxCweWords();

}  // namespace uniprefill::eval
