// Fact templates and answer pools of the long-document QA family (see qa_facts.h).
#include "eval/qa_facts.h"

#include <iterator>
#include <random>

namespace uniprefill::eval {
namespace {

constexpr const char* kCities[] = {
    "Lisbon", "Oslo",    "Porto",   "Tallinn", "Bergen",  "Ghent",   "Krakow", "Turin",
    "Lyon",   "Valencia", "Dublin", "Graz",    "Utrecht", "Malmo",   "Riga",   "Seville",
    "Bremen", "Aarhus",  "Bologna", "Leipzig", "Galway",  "Tampere", "Basel",  "Zagreb"};
constexpr const char* kDays[] = {"Mondays", "Tuesdays", "Wednesdays", "Thursdays",
                                 "Fridays", "Saturdays", "Sundays"};
constexpr const char* kCodeHeads[] = {"Blue", "Amber", "Silver", "Copper", "Jade",  "Scarlet",
                                      "Ivory", "Cobalt", "Russet", "Golden", "Ash", "Indigo"};
constexpr const char* kCodeTails[] = {"finch", "fox",   "hawk", "wren",  "otter", "heron",
                                      "lynx",  "moth",  "crane", "badger", "stag", "pike"};
constexpr const char* kTowns[] = {"Westbrook", "Ashford", "Millbrook", "Harrowgate", "Kingsley",
                                  "Elmstead",  "Thornbury", "Redcliffe", "Oakhurst",  "Fenwick"};
constexpr const char* kFirstNames[] = {"Margaret", "Daniel", "Amara", "Tomas", "Helena",
                                       "Rafael",   "Ingrid", "Samuel", "Leona", "Victor"};
constexpr const char* kLastNames[] = {"Okafor", "Lindqvist", "Moreau", "Castellano", "Brennan",
                                      "Novak",  "Hartley",   "Sato",   "Delacroix",  "Whitlock"};
constexpr const char* kIslands[] = {"Inishmore", "Skye",   "Gotland", "Texel",  "Hydra",
                                    "Madeira",  "Jersey", "Arran",   "Bornholm", "Korcula"};
constexpr const char* kColours[] = {"Green", "Yellow", "Crimson", "Silver", "Orange",
                                    "Violet", "Turquoise", "Brown"};

template <typename Array>
std::string Pick(const Array& a, std::mt19937_64& rng) {
  return a[rng() % std::size(a)];
}

QaFact MaintenanceWindow(std::mt19937_64& rng) {
  const std::string city = Pick(kCities, rng), day = Pick(kDays, rng);
  const std::string subject = "The maintenance window of the " + city + " office";
  return {"maintenance_window", subject + " is on " + day + ".",
          "On which day is the maintenance window of the " + city + " office?",
          subject + " is on", day};
}

QaFact CodeName(std::mt19937_64& rng) {
  const std::string city = Pick(kCities, rng);
  const std::string code = Pick(kCodeHeads, rng) + Pick(kCodeTails, rng);
  const std::string subject = "The code name of the " + city + " project";
  return {"code_name", subject + " is " + code + ".",
          "What is the code name of the " + city + " project?", subject + " is", code};
}

QaFact HeadLibrarian(std::mt19937_64& rng) {
  const std::string town = Pick(kTowns, rng);
  const std::string name = Pick(kFirstNames, rng) + " " + Pick(kLastNames, rng);
  const std::string subject = "The head librarian of " + town + " College";
  return {"head_librarian", subject + " is " + name + ".",
          "Who is the head librarian of " + town + " College?", subject + " is", name};
}

QaFact FerryPier(std::mt19937_64& rng) {
  const std::string island = Pick(kIslands, rng);
  const std::string pier = std::to_string(3 + rng() % 95);
  const std::string subject = "The ferry to " + island + " leaves from pier";
  return {"ferry_pier", subject + " " + pier + ".",
          "From which pier does the ferry to " + island + " leave?", subject, pier};
}

QaFact ChoirRoom(std::mt19937_64& rng) {
  const std::string city = Pick(kCities, rng), room = Pick(kColours, rng) + " Room";
  const std::string subject = "The rehearsals of the " + city + " choir take place in the";
  return {"choir_room", subject + " " + room + ".",
          "Where do the rehearsals of the " + city + " choir take place?", subject, room};
}

QaFact DoorCode(std::mt19937_64& rng) {
  const std::string city = Pick(kCities, rng);
  const std::string code = std::to_string(1000 + rng() % 9000);
  const std::string subject = "The door code of the " + city + " archive";
  return {"door_code", subject + " is " + code + ".",
          "What is the door code of the " + city + " archive?", subject + " is", code};
}

using FactMaker = QaFact (*)(std::mt19937_64&);
constexpr FactMaker kMakers[] = {MaintenanceWindow, CodeName,  HeadLibrarian,
                                 FerryPier,         ChoirRoom, DoorCode};

}  // namespace

const std::vector<std::string>& QaFactKinds() {
  static const std::vector<std::string> kinds = {"maintenance_window", "code_name",
                                                 "head_librarian",     "ferry_pier",
                                                 "choir_room",         "door_code"};
  return kinds;
}

QaFact MakeQaFact(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const FactMaker make = kMakers[rng() % std::size(kMakers)];
  return make(rng);
}

}  // namespace uniprefill::eval
