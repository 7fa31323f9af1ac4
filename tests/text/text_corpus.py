"""Multilingual tokenizer test corpus (plain data; tools/reference/goldens.py text loads it by path).

CORPUS holds hand-picked strings; random_texts(seed, n) makes random mixtures of the same ingredients.
"""

import random

CORPUS = [
    # English, contractions in every case, apostrophe edge cases
    "Hello world. The quick brown fox jumps over the lazy dog!",
    "I'm sure they'll say we've done what you'd've thought; it's John's, isn't it?",
    "DON'T SHOUT, I'LL HEAR YOU'RE WE'VE HE'D SHE'S THEY'RE",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'mM 'LL 'D 'x ''s '' ' 'ſ 'ſt",
    "rock 'n' roll, o'clock, ma'am, y'all",
    # Chinese, Japanese, Korean
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "他说：“这是一个测试（test）。”——真的吗？",
    "こんにちは、世界。カタカナとひらがなと漢字が混ざった文です。",
    "ｶﾀｶﾅ半角とＦｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
    "안녕하세요, 세계! 한국어 문장입니다.",
    # Arabic, Hebrew, Persian, Urdu
    "مرحبا بالعالم! مَرْحَبًا بِالْعَالَمِ، كَيْفَ حَالُكَ؟",
    "شلام עולם, שָׁלוֹם",
    "سلام دنیا، حالت چطوره؟ ١٢٣٤ ۱۲۳۴",
    # Indic
    "नमस्ते दुनिया। यह एक परीक्षण है।",
    "আমি বাংলায় গান গাই। தமிழ் மொழி. తెలుగు భాష. ಕನ್ನಡ. മലയാളം. ગુજરાતી. ਪੰਜਾਬੀ.",
    # Cyrillic, Greek, Thai, Lao, Khmer, Myanmar, Georgian, Armenian, Ethiopic
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε! ΑΒΓ αβγ ς",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "ສະບາຍດີ ជំរាបសួរ မင်္ဂလာပါ",
    "გამარჯობა Բարեւ ሰላም ልዑል",
    # Latin with diacritics, NFC / NFD
    "Tiếng Việt có dấu: Chào thế giới. Ça va? Größe Straße Ærø Øresund",
    "e\u0301te\u0301 cafe\u0301 n\u0303 A\u030a \u212b \u2126 \u1100\u1161\u11a8",
    "ﬁ ﬂ ﬀ ½ ² ³ ⅷ Ⅻ ① ⑳ ㈠",
    # Emoji and symbols
    "Emoji 🎉👍🏽 👨‍👩‍👧‍👦 🇯🇵🇺🇸 ❤️ ☺︎ 🙂🙃 😀😀😀",
    "Symbols: © ® ™ € £ ¥ ₹ § ¶ † ‡ • … ‰ ′ ″ ← → ⇒ ∀ ∑ √ ∞ ≠ ≤ ≥",
    # Digits
    "1 12 123 1234 12345 1234567890 3.14159 1,234,567.89 -42 +7 1e-10 0x1F 50% $100 ₩5000",
    "Year 2024, room 101, phone 555-0123, ISBN 978-3-16-148410-0, version v2.0.1",
    "٠١٢٣٤٥٦٧٨٩ ०१२३४५६७८९ 〇一二三 ¹²³ ⁴⁵",
    # Whitespace and newline runs
    "  leading and trailing  ",
    "tabs\tand\t\tmore\t\t\ttabs",
    "line one\nline two\n\nline four\n\n\n\nafter many",
    "windows\r\nline\r\n\r\nends\r",
    "     five spaces then text   \n   \n  ",
    "nbsp\u00a0here\u00a0\u00a0and\u3000ideographic\u3000space",
    "odd spaces:\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029\u1680\u2000\u200a\u202f\u205f|end",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom",
    "\n",
    " ",
    "\t\n \r\n",
    "",
    # OmniVoice special tokens and Qwen added tokens
    "<|denoise|><|lang_start|>en<|lang_end|><|instruct_start|>None<|instruct_end|>",
    "<|text_start|>Hello there.<|text_end|>",
    "<|lang_start|>zh<|lang_end|><|instruct_start|>女，低音调，四川话<|instruct_end|><|text_start|>你好<|text_end|>",
    "text<|endoftext|>more<|im_start|>user\nhi<|im_end|>\n<think>\nhmm\n</think>",
    "<tool_call>{\"a\": 1}</tool_call><|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>",
    "partial <|denoise <|text_start| |text_end|> <|TEXT_START|> < |lang_start|>",
    "<|text_start|><|text_start|><|text_end|><|text_end|>",
    "<|denoise|>\u0301 combining after a special token",
    # Non-verbal tags, pronunciation controls
    "That's so funny [laughter] really [sigh] okay.",
    "[question-en] Really? [surprise-oh] Wow! [dissatisfaction-hnn] [confirmation-en]",
    "[laughter][laughter] [Laughter] [laughter ] [unknown-tag]",
    "他笑了[laughter]然后叹气[sigh]。",
    "NI3 HAO3 ZHONG1 GUO2, ni3 hao3, Zhong1guo2, lv4 nü3",
    "我们去银行XING2吧，还是去行HANG2？",
    "The word {HH AH0 L OW1} and [B EY1 S] guitar, {R EH1 D} [T AH0 M EY1 T OW2].",
    # Code-like and mixed scripts
    "C++ and C# and F#; e-mail: user@example.com; URL https://example.com/path?q=1&r=2#frag",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE __dunder__",
    "abc123def456 x1y2z3 H2O CO2 COVID-19 MP3 4K 5G",
    "Mixed 混合 text テキスト 텍스트 نص текст ข้อความ",
    "!!!??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "\"quoted\" 'single' “curly” ‘curly’ «guillemets» „low“ 「括弧」『二重』【隅付き】",
    # Control characters and letters newer than Python's unicodedata
    "nul\x00del\x7fbell\x07esc\x1b",
    "new letters \U00031350\U00031351 \U00011F04\U00011F05 \u0c5d \U0001E4D0",
    # Long runs
    " " * 300 + "x",
    "a" * 200,
    "\n" * 50 + "end",
    "9" * 120,
    "ab " * 100,
    "😀" * 40,
]

_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "     \t\n\r",
    ".,;:!?'\"()[]{}<>|-_/\\@#$%^&*+=~`",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可",
    "あいうえおかきくけこさしすせそアイウエオカキクケコ",
    "가나다라마바사아자차카타파하한국어",
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي\u064b\u064e\u0650\u0652",
    "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशसह\u093e\u093f\u0940\u094d\u0902",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГД",
    "กขคงจฉชซญดตถทนบปผพฟภมยรลวสหอฮ\u0e31\u0e34\u0e35\u0e48\u0e49",
    "αβγδεζηθικλμνξοπρστυφχψω",
    "àáâãäåèéêëìíîïòóôõöùúûüýÿçñ\u0301\u0303",
    "，。！？：；（）“”、…—",
    "🎉👍😀❤️🇯🇵\u200d\U0001F3FD",
    "\u00a0\u3000\u2028\x0b\x0c\x85",
]
_FRAGMENTS = [
    "<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>", "<|instruct_end|>", "<|text_start|>",
    "<|text_end|>", "<|endoftext|>", "<think>", "<|", "|>", "[laughter]", "[sigh]", "'s", "'LL", "'re",
    "NI3", "HAO3", "{HH AH0}", "[B EY1 S]", "Mr.", "e.g.", "  ", "\n\n", "\r\n", "123", "3.14",
]


def random_texts(seed: int, n: int, max_len: int = 60):
    """n random strings mixing scripts, digits, whitespace, punctuation, emoji and special-token fragments."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pools = rng.sample(_POOLS, rng.randint(1, 4))
        parts = []
        for _ in range(rng.randint(1, max_len)):
            if rng.random() < 0.08:
                parts.append(rng.choice(_FRAGMENTS))
            else:
                parts.append(rng.choice(rng.choice(pools)))
        out.append("".join(parts))
    return out
