#!/usr/bin/env python3
"""Writes tests/goldens/tokenizer_gemma3.json: llama.cpp's tokenization of a fixed, seeded corpus.

The reference is llama.cpp itself through llama-cpp-python's low-level API (llama_tokenize,
llama_detokenize, llama_chat_apply_template) on the Gemma 3 270M GGUF loaded with vocab_only.
Texts are generated deterministically (fixed lists plus random.Random(SEED)), stored base64 so that
invalid UTF-8 survives; the C++ test (tests/tokenizer/tokenizer_golden_test.cc) needs no Python.

Usage: .venv/bin/python tools/make_tokenizer_goldens.py [--model models/gemma-3-270m-q4_k_m.gguf]
"""
import argparse
import base64
import ctypes
import json
import os
import random
import sys

import llama_cpp

SEED = 20260101
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------------------------
# llama.cpp through ctypes


class LlamaVocab:
    def __init__(self, path):
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not self.model:
            sys.exit(f"cannot load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)

    def tokenize(self, data: bytes, add_special: bool, parse_special: bool):
        cap = len(data) + 16
        while True:
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special,
                                         parse_special)
            if n >= 0:
                return list(buf[:n])
            cap = -n

    def detokenize(self, ids, remove_special: bool, unparse_special: bool) -> bytes:
        arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        cap = 64 * len(ids) + 64
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = llama_cpp.llama_detokenize(self.vocab, arr, len(ids), buf, cap, remove_special,
                                           unparse_special)
            if n >= 0:
                return buf.raw[:n]
            cap = -n

    def chat(self, messages, add_generation_prompt: bool) -> bytes:
        arr = (llama_cpp.llama_chat_message * len(messages))()
        keep = []
        for i, m in enumerate(messages):
            role, content = m["role"].encode(), m["content"].encode()
            keep += [role, content]
            arr[i].role = role
            arr[i].content = content
        cap = 4096 + sum(len(m["content"]) for m in messages) * 2
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_chat_apply_template(b"gemma", arr, len(messages), add_generation_prompt,
                                                buf, cap)
        if n < 0 or n > cap:
            sys.exit("llama_chat_apply_template failed")
        return buf.raw[:n]


# ----------------------------------------------------------------------------------------------
# The corpus


def fixed_texts():
    t = []
    # Plain prose, case, punctuation.
    t += ["Hello world", "Hello, world!", "hello WORLD HeLLo wOrLd", "The quick brown fox jumps "
          "over the lazy dog.", "I'm can't won't y'all's", "Mr. Smith's 3rd-floor office (room "
          "#42) -- really?!", "...!!!???;;;:::", "\"quoted\" 'single' `back` «guillemets» “curly”",
          "a", "A", " ", "  ", "x y", "e.g., i.e., etc.", "ALL CAPS SENTENCE HERE", "camelCaseWord"
          " snake_case_word kebab-case-word PascalCase"]
    # Whitespace: leading/trailing/runs/tabs/newlines/CR/NBSP/U+2581 itself.
    t += [" leading", "trailing ", "  two leading", "trailing two  ", "   ", "\t", "\t\t\tx",
          "\n", "\n\n", "\n\n\n\n\n", "a\nb", "a\n\nb", "a \n b", "line1\r\nline2\r\n", "\r",
          "tab\tseparated\tvalues", "mixed \t \n\t  \n   whitespace", " " * 31, " " * 32, " " * 40,
          " " * 100, "\t" * 31, "\t" * 40, "\n" * 31, "\n" * 45, "x" + " " * 64 + "y",
          "a\u00a0b non\u00a0breaking", "\u2581already\u2581marked", "\u2581\u2581", "\u3000ideo"
          "graphic\u3000space", "\u200bzero\u200bwidth", "\v\f", "end with newline\n",
          "    def indented():\n        return 1\n"]
    # Digits and numbers.
    t += ["0", "7", "42", "1234567890", "3.14159265358979323846", "-0.001e-10", "1,000,000.00",
          "12345678901234567890123456789012345678901234567890", "2026-11-29T13:47:27Z",
          "+1 (555) 123-4567", "0xDEADBEEF 0b1011 0o777", "v1.2.3-rc.4+build.5", "١٢٣ ٤٥٦",
          "१२३४", "Ⅻ ⅻ ½ ¾ ²³", "99 bottles of beer on the wall, 98 bottles"]
    # Code.
    t += ["def f(x):\n    return x ** 2  # square\n",
          "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
          "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto it = v.begin();",
          "const add = (a, b) => a + b;\nconsole.log(`sum=${add(1, 2)}`);",
          "fn main() {\n    let v: Vec<u8> = vec![1, 2];\n    println!(\"{:?}\", v);\n}",
          "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }",
          "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
          "<html><body><div class=\"x\"><b>bold</b> <i>it</i></div></body></html>",
          "<table><tr><td>1</td><td>2</td></tr></table>",
          "{\"key\": [1, 2, {\"nested\": null}], \"t\": true}",
          "for i in $(seq 1 10); do echo \"$i\" | grep -v 3 >> out.txt; done",
          "x = [i for i in range(10) if i % 2 == 0]\nprint(x[::-1])",
          "public static void main(String[] args) { System.out.println(\"Hi\"); }",
          "\\begin{equation} E = mc^2 \\end{equation}", "a->b; c::d; e=>f; g!=h; i<=j; k&&l||m",
          "// comment\n/* block */\n# hash\n-- sql\n<!-- html -->"]
    # URLs, paths, e-mail.
    t += ["https://www.example.com/path/to/page?query=1&b=two#frag",
          "http://localhost:8080/api/v1/chat/completions",
          "ftp://user:pass@host.example.org:21/file.tar.gz", "mailto:someone@example.com",
          "/usr/local/lib/python3.11/site-packages/", "C:\\Windows\\System32\\drivers\\etc\\hosts",
          "git@github.com:org/repo.git"]
    # Scripts.
    t += ["你好，世界！这是一个测试。", "今天天气很好，我们去公园散步吧。", "日本語のテキストです。カタカナとひらがな。",
          "한국어 텍스트입니다. 안녕하세요!", "مرحبا بالعالم، هذا اختبار.", "שלום עולם", "नमस्ते दुनिया, यह एक परीक्षण है।",
          "สวัสดีชาวโลก", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "Tiếng Việt có dấu: Xin chào thế giới",
          "Ελληνικά και English και 中文 mixed", "ქართული ენა", "Հայերեն", "አማርኛ", "தமிழ் மொழி",
          "ᚠᚢᚦᚨᚱᚲ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝟙𝟚𝟛", "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ"]
    # Emoji, ZWJ, flags, skin tones, combining marks.
    t += ["😀", "😀😃😄😁", "I ❤️ you 👍🏽", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇺🇸🇯🇵🇩🇪", "👩🏾‍💻 coder",
          "🧑‍🤝‍🧑", "✈︎ ✈️", "e\u0301 versus \u00e9", "Z\u0351\u0352\u0353a\u0300\u0301\u0302l\u0303go",
          "\u0915\u094d\u0937", "a\u20dd", "\U0001F600" * 20, "🫠🫡🫢 new emoji"]
    # Special tokens inside text.
    t += ["<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<bos>", "<eos>",
          "<pad><pad>", "<mask>", "<unk>", "<bos>text<eos>", "a<start_of_turn>b",
          "<start_of_tur", "<start_of_turn", "<<bos>>", "<end_of_turn><end_of_turn>",
          "<unused0> <unused57> <unused98>", "[multimodal]", "<start_of_image><end_of_image>",
          "</s> <s> <b>x</b> <i>y</i>", "<h1>Title</h1>\n<p>para</p>", "<blockquote>q</blockquote>",
          "<code>x = 1</code>", "text</s>more", "<eos> <bos>", " <start_of_turn> ",
          "<start_of_turn>user\n  spaced  <end_of_turn>", "<unused99>", "<bbox></bbox>",
          "<start_of_turn><start_of_turn>", "\n\n\n<end_of_turn>\n\n", "<<b>>", "<b<b>>",
          "<table><tr><td>x</td></tr></table>\n\n  \t", "<b>   </b>\t\t<i>\n</i>",
          "<end_of_turn>\n<start_of_turn>model\n", "[multimodal][multimodal]", "<s>", "</s>"]
    # Chat-formatted text.
    t += ["<start_of_turn>user\nYou are helpful.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"
          "4<end_of_turn>\n<start_of_turn>user\nThanks!<end_of_turn>\n<start_of_turn>model\n",
          "<bos><start_of_turn>user\nTranslate to French: cat<end_of_turn>\n<start_of_turn>model\n"]
    # Long words.
    t += ["pneumonoultramicroscopicsilicovolcanoconiosis", "Donaudampfschifffahrtsgesellschaft"
          "skapitän", "a" * 1000, "ab" * 500, "z" * 257, "é" * 300, "漢" * 200, "supercalifragilistic"
          "expialidocious" * 10, "-" * 200, "=" * 80, "." * 100, "_" * 64, "!" * 33]
    return [s.encode("utf-8") for s in t]


def invalid_utf8_texts():
    return [b"\x80", b"\xbf", b"\xc3", b"\xc3(", b"\xc3\xa9\xc3", b"\xe2\x82", b"\xe2\x82(x",
            b"\xf0\x9f\x98", b"\xf0\x9f\x98x", b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe0\x80\xaf",
            b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"abc\x80def", b"\xc3A", b"\xc3\xc3\xa9",
            b"hello \xff world", b"\x00", b"a\x00b", b"\x01\x02\x03\x1f\x7f", b"\xe4\xbd\xa0\xe5",
            b"\x80\x81\x82\x83", b"<start_of_turn>\xff<end_of_turn>", b"\xf8\x88\x80\x80\x80",
            b" \xc3 ", b"\xe2\x96", b"\xe2\x96\x81\xe2\x96"]


def random_texts(rng: random.Random, n: int):
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        " " * 8, "\n\t", ".,;:!?'\"()[]{}<>/\\|@#$%^&*-+=_~`",
        "你好世界中文字符测试汉语", "日本語ひらがなカタカナ", "абвгдежзийклмнопрстуфхцчшщ",
        "😀😃🎉🚀❤️👍🏽🇺🇸", "\u0301\u0300\u0308\u200d", "مرحبابالعالم", "नमस्तेदुनिया",
        "éèêëàâäôöûüç", "\u2581",
    ]
    words = ["the", "of", "and", "model", "token", " token", "Hello", "world", "<start_of_turn>",
             "<end_of_turn>", "<bos>", "<eos>", "\n\n", "  ", "\t\t", "<b>", "</s>", "1234",
             "print(", "https://", "<unused3>", "[multimodal]", "data", "ing", "tion"]
    out = []
    for i in range(n):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 40, 80, 160, 300])
        parts = []
        for _ in range(length):
            if rng.random() < 0.3:
                parts.append(rng.choice(words))
            else:
                parts.append(rng.choice(rng.choice(pools)))
        s = "".join(parts).encode("utf-8")
        if i % 10 == 9:  # now and then cut a multi-byte character in half
            s = s[: max(1, len(s) - rng.randint(1, 3))]
        out.append(s)
    return out


def random_byte_texts(rng: random.Random, n: int):
    """Arbitrary bytes: lead bytes without continuations, stray continuations, NULs."""
    return [bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 4, 9, 30, 100])))
            for _ in range(n)]


def random_codepoint_texts(rng: random.Random, n: int):
    """Code points from all over Unicode (surrogates excluded), with spaces between runs."""
    ranges = [(0x20, 0x7E), (0xA0, 0x2FF), (0x300, 0x36F), (0x370, 0x1FFF), (0x2000, 0x2BFF),
              (0x3000, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xFFFD), (0x10000, 0x1FAFF),
              (0x20000, 0x2FFFF), (0xE0000, 0xE007F)]
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.choice([1, 3, 10, 40])):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
            if rng.random() < 0.2:
                chars.append(" ")
        out.append("".join(chars).encode("utf-8"))
    return out


def long_texts(rng: random.Random):
    sentence = ("In {y}, the {a} {n} of {p} reported {k} results; see https://example.org/{k} "
                "and section {s}.\n")
    adjs = ["large", "small", "quiet", "rapid", "annual", "strange"]
    nouns = ["council", "laboratory", "museum", "factory", "river", "orchestra"]
    places = ["Zürich", "São Paulo", "東京", "Київ", "Reykjavík", "القاهرة"]
    doc = "".join(sentence.format(y=rng.randint(1800, 2026), a=rng.choice(adjs),
                                  n=rng.choice(nouns), p=rng.choice(places),
                                  k=rng.randint(1, 10 ** 6), s=f"{rng.randint(1, 9)}."
                                  f"{rng.randint(1, 9)}") for _ in range(150))
    code = "".join(f"def func_{i}(x):\n\tif x > {i}:\n\t\treturn x * {i}\n\treturn None\n\n"
                   for i in range(120))
    noletters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(6000))
    return [doc.encode(), code.encode(), noletters.encode()]


def chat_cases():
    return [
        ([{"role": "user", "content": "Hello"}], True),
        ([{"role": "user", "content": "Hello"}], False),
        ([{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi"}],
         True),
        ([{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
          {"role": "user", "content": "And 3+3?"}], True),
        ([{"role": "system", "content": "  padded system \n"},
          {"role": "user", "content": "\n\t padded user  "},
          {"role": "assistant", "content": " padded model \n\n"}], False),
        ([{"role": "system", "content": "A"}, {"role": "system", "content": "B"},
          {"role": "user", "content": "u"}], True),
        ([{"role": "system", "content": "S"}, {"role": "assistant", "content": "x"},
          {"role": "user", "content": "y"}], True),
        ([{"role": "user", "content": "多语言 😀 <b>bold</b>\n\ncode:\n\tx = 1"}], True),
        ([{"role": "user", "content": ""}], True),
    ]


# ----------------------------------------------------------------------------------------------


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "goldens",
                                                  "tokenizer_gemma3.json"))
    args = ap.parse_args()
    ref = LlamaVocab(args.model)
    rng = random.Random(SEED)

    texts = (fixed_texts() + invalid_utf8_texts() + random_texts(rng, 160) + long_texts(rng) +
             random_byte_texts(rng, 24) + random_codepoint_texts(rng, 32))
    cases = []
    for i, data in enumerate(texts):
        modes = [(True, True)]
        if i % 3 == 0 or b"<" in data or b"[" in data:
            modes.append((True, False))
        if i % 7 == 0:
            modes.append((False, True))
        for add_special, parse_special in modes:
            ids = ref.tokenize(data, add_special, parse_special)
            case = {
                "text": b64(data),
                "add_special": add_special,
                "parse_special": parse_special,
                "ids": ids,
                "detok": b64(ref.detokenize(ids, False, False)),
                "detok_special": b64(ref.detokenize(ids, False, True)),
            }
            removed = ref.detokenize(ids, True, False)
            if removed != ref.detokenize(ids, False, False):  # stored only when it differs
                case["detok_remove_special"] = b64(removed)
            cases.append(case)

    chats = []
    for messages, add_gen in chat_cases():
        text = ref.chat(messages, add_gen)
        chats.append({"messages": messages, "add_generation_prompt": add_gen,
                      "text": text.decode("utf-8"), "ids": ref.tokenize(text, True, True)})

    golden = {
        "about": "llama.cpp (llama-cpp-python %s) tokenization of the Gemma 3 270M vocabulary; "
                 "made by tools/make_tokenizer_goldens.py; texts and detokenized bytes are base64"
                 % llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "n_texts": len(texts),
        "cases": cases,
        "chat": chats,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(golden, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"{args.out}: {len(texts)} texts, {len(cases)} cases, {len(chats)} chats, "
          f"{os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
