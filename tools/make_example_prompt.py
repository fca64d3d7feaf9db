#!/usr/bin/env python3
"""Writes examples/long_context_prompt.txt: a long report with one buried fact and a question.

Deterministic (seeded); about 6,000 Gemma tokens. Used by scripts/demo.sh, the README's main command.
"""
import random
from pathlib import Path

SUBJECTS = ["The harbour authority", "The city council", "The river survey team", "The museum board",
            "The rail operator", "The weather office", "The university library", "The fishing cooperative",
            "The hospital trust", "The regional archive"]
VERBS = ["reported", "noted", "recorded", "announced", "confirmed", "estimated", "observed", "published"]
OBJECTS = ["a rise in visitors during the spring festival", "repairs to the northern footbridge",
           "a new timetable for the coastal line", "record rainfall in the eastern valleys",
           "the restoration of three medieval manuscripts", "lower catches of herring than last year",
           "an extension of the evening opening hours", "the planting of two hundred oak trees",
           "delays caused by the winter storms", "a survey of the old lighthouse foundations"]
TAILS = ["Officials expect the trend to continue.", "Further details will follow next month.",
         "Residents were invited to comment.", "The figures were checked twice.",
         "The work is funded by a local grant.", "No incidents were recorded.",
         "A second review is planned for the autumn.", "The change takes effect immediately."]


def main() -> None:
    rng = random.Random(2026)
    lines = ["Annual report of the town of Westmere. Read it carefully; a question follows.", ""]
    needle = "Important: the access code for the archive vault is 7391-AZ."
    n_paragraphs = 90
    needle_at = 37
    for p in range(n_paragraphs):
        sentences = [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}. {rng.choice(TAILS)}"
                     for _ in range(3)]
        if p == needle_at:
            sentences.insert(1, needle)
        lines.append(f"Section {p + 1}. " + " ".join(sentences))
    lines += ["", "Question: What is the access code for the archive vault?",
              "Answer: The access code for the archive vault is"]
    out = Path(__file__).resolve().parent.parent / "examples" / "long_context_prompt.txt"
    out.write_text("\n".join(lines))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
