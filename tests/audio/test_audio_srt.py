"""SRT parsing (with the usual real-world variations and clear errors) and the cue timeline."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.audio.srt import Cue, SrtError, load_srt, parse_srt, place_cues

WORDS = ["hello", "world", "naïve", "café", "你好", "Привет", "it's", "<i>tagged</i>", "1,000", "-->"[1:]]


def _stamp(ms: int, sep: str = ",") -> str:
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _random_cues(rng, n):
    """(index, start_ms, end_ms, lines) with random times (some past 10 h) and 1-3 text lines."""
    t = int(rng.integers(0, 5000))
    cues = []
    for k in range(n):
        start = t + int(rng.integers(0, 3000))
        end = start + int(rng.integers(0, 6000))
        lines = [" ".join(rng.choice(WORDS, int(rng.integers(1, 5)))) for _ in range(int(rng.integers(1, 4)))]
        cues.append((k + 1 + int(rng.integers(0, 2)) * 100, start, end, lines))
        t = end + int(rng.integers(0, 36_000_000 if k == n // 2 else 2000))
    return cues


def _render(cues, *, newline="\n", sep=",", bom=False, extra_blank=False, position=False, final_newline=True):
    blocks = []
    for index, start, end, lines in cues:
        timing = f"{_stamp(start, sep)} --> {_stamp(end, sep)}"
        if position:
            timing += "  X1:100 X2:200 Y1:10 Y2:50"
        blocks.append(newline.join([str(index), timing, *lines]))
    gap = newline * (3 if extra_blank else 2)
    text = gap.join(blocks) + (newline if final_newline else "")
    return ("\ufeff" if bom else "") + text


VARIANTS = [
    {},
    {"newline": "\r\n"},
    {"newline": "\r"},
    {"sep": "."},
    {"bom": True, "newline": "\r\n"},
    {"extra_blank": True, "final_newline": False},
    {"position": True},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={v[k]!r}" for k in v) or "plain")
def test_parse_random_files(rng, variant):
    cues = _random_cues(rng, 25)
    got = parse_srt(_render(cues, **variant))
    assert len(got) == len(cues)
    for cue, (index, start, end, lines) in zip(got, cues):
        assert cue.index == index
        assert cue.start == pytest.approx(start / 1000, abs=1e-9)
        assert cue.end == pytest.approx(end / 1000, abs=1e-9)
        assert cue.text == "\n".join(lines)
        assert cue.duration == pytest.approx((end - start) / 1000, abs=1e-9)


def test_load_srt_reads_utf8_with_bom(tmp_path, rng):
    cues = _random_cues(rng, 4)
    path = tmp_path / "subs.srt"
    path.write_bytes(_render(cues, bom=True, newline="\r\n").encode("utf-8"))
    assert [c.text for c in load_srt(path)] == ["\n".join(lines) for *_, lines in cues]


def test_cue_without_text_is_kept_empty():
    got = parse_srt("1\n00:00:01,000 --> 00:00:02,000\n\n2\n00:00:03,000 --> 00:00:04,000\nHi\n")
    assert [(c.index, c.text) for c in got] == [(1, ""), (2, "Hi")]


@pytest.mark.parametrize(
    "text, line, expected",
    [
        ("Hello\n00:00:01,000 --> 00:00:02,000\nHi\n", 1, "expected a cue number"),
        ("1\n00:00:01,000 -> 00:00:02,000\nHi\n", 2, "expected a timing line"),
        ("1\n00:00:01 --> 00:00:02\nHi\n", 2, "expected a timing line"),
        ("1\n00:61:01,000 --> 00:00:02,000\nHi\n", 2, "expected a timing line"),
        ("1\n00:00:01,000 --> 00:00:02,000\nHi\n\n2\n", 6, "expected a timing line"),
        ("1\n00:00:01,000 --> 00:00:02,000\nHi\n\n2\n\n00:00:03,000 --> 00:00:04,000\n", 6, "blank line"),
        ("1\n00:00:05,000 --> 00:00:02,000\nHi\n", 2, "ends before it starts"),
        ("1\n00:00:01,000 --> 00:00:02,000\nHi\n\nHi again\n", 5, "expected a cue number"),
        ("1\n00:00:01,000 --> 00:00:02,000\nHi\n2\n00:00:03,000 --> 00:00:04,000\nYo\n", 4, "blank line before cue 2"),
    ],
)
def test_malformed_files_name_the_line(text, line, expected):
    with pytest.raises(SrtError, match=expected) as info:
        parse_srt(text, source="subs.srt")
    assert f"subs.srt:{line}:" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text", ["", "\n\n  \n", "\ufeff"])
def test_file_without_cues_is_an_error(text):
    with pytest.raises(SrtError, match="no subtitle cues"):
        parse_srt(text)


def test_load_srt_errors(tmp_path):
    with pytest.raises(SrtError, match="cannot read"):
        load_srt(tmp_path / "missing.srt")
    bad = tmp_path / "latin1.srt"
    bad.write_bytes("1\n00:00:01,000 --> 00:00:02,000\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(SrtError, match=r"latin1.srt:3: not UTF-8 text \(byte 35: invalid continuation byte\)"):
        load_srt(bad)


# ---------------------------------------------------------------------------
# place_cues
# ---------------------------------------------------------------------------


def test_place_random_cues(rng):
    rate = 24000
    cues, clips = [], []
    t = 0.0
    for k in range(12):
        start = t + float(rng.uniform(0, 1.5))
        end = start + float(rng.uniform(0.2, 2.0))
        cues.append(Cue(k + 1, round(start, 3), round(end, 3), f"cue {k}"))
        slot = round(end, 3) * rate - round(start, 3) * rate
        # Some clips shorter than the slot, some longer.
        clips.append(rng.uniform(0.1, 1.0, int(slot * rng.uniform(0.5, 1.5))).astype(np.float32))
        t = end
    timeline = place_cues(cues, clips, rate)
    assert timeline.dtype == np.float32
    assert len(timeline) == round(cues[-1].end * rate)
    covered = np.zeros(len(timeline), bool)
    for cue, clip in zip(cues, clips):
        start, end = round(cue.start * rate), round(cue.end * rate)
        n = min(len(clip), end - start)
        np.testing.assert_array_equal(timeline[start : start + n], clip[:n])
        covered[start : start + n] = True
    # Clips are strictly positive, so everything not covered by a clip must be exact silence.
    assert not timeline[~covered].any()


def test_overlapping_cue_is_cut_where_the_next_begins():
    rate = 1000
    cues = [Cue(2, 1.0, 3.0, "b"), Cue(1, 0.0, 2.0, "a")]  # out of order, and overlapping
    clips = [np.full(2000, 2.0, np.float32), np.full(2000, 1.0, np.float32)]
    timeline = place_cues(cues, clips, rate)
    assert len(timeline) == 3000
    assert (timeline[:1000] == 1.0).all() and (timeline[1000:] == 2.0).all()


def test_place_cues_checks_its_arguments():
    with pytest.raises(ValueError, match="2 cues but 1 audio"):
        place_cues([Cue(1, 0, 1, "a"), Cue(2, 1, 2, "b")], [np.zeros(3, np.float32)], 24000)
    with pytest.raises(ValueError, match="mono"):
        place_cues([Cue(1, 0, 1, "a")], [np.zeros((2, 3), np.float32)], 24000)
    assert place_cues([], [], 24000).shape == (0,)
