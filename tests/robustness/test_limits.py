"""Memory is planned, not hit (issue 14.2): a graph is measured before it is allocated, and inputs that would
make one too large (a long or mis-rated reference clip, a duration past the model's context, a 10-hour SRT cue,
a million-frame .rvq) are refused with a clear error before anything large is allocated."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from omnivoice.audio import MAX_REFERENCE_SECONDS, AudioFileError, load_audio, preprocess_reference
from omnivoice.audio.srt import SrtError, parse_srt
from omnivoice.codec import RvqFormatError, read_rvq
from omnivoice.codec.rvq_format import HEADER, MAGIC, MAX_FRAMES
from omnivoice.ggml import Graph, lib, new_tensor, types

from .conftest import FAST, ROOT, cli, refused


def _huge_graph(runtime, n: int) -> Graph:
    """A graph whose one output has `n` float32 values (its inputs are 4 values)."""
    g = Graph(runtime, what="the test graph")
    x = g.input("x", np.float32, (4,))
    g.output("y", lib.ggml_repeat(g.ctx, x, new_tensor(g.ctx, types.F32, (n,))))
    return g


def test_a_graph_too_large_is_refused_before_allocating(runtime):
    with _huge_graph(runtime, 1 << 38) as g:  # 1 TiB of activations
        with pytest.raises(MemoryError, match=r"the test graph needs 1024\.0 GiB of \w+ memory .* is available"):
            g.allocate()


_ALLOC_UNDER_CAP = """
import numpy as np
from omnivoice.ggml import Graph, Runtime, lib, memory, new_tensor, types
memory.available = lambda backend: None   # skip the plan: the allocation itself must fail cleanly
with Runtime("cpu", 1) as rt:
    g = Graph(rt, what="the test graph")
    x = g.input("x", np.float32, (4,))
    g.output("y", lib.ggml_repeat(g.ctx, x, new_tensor(g.ctx, types.F32, (1 << 31,))))  # 8 GiB
    try:
        g.allocate()
    except MemoryError as e:
        print("MemoryError:", e)
"""


def test_a_failed_allocation_is_a_memory_error_not_a_crash():
    """ggml_backend_sched_alloc_graph ignores a failed buffer allocation and then writes through the missing
    buffer (SIGSEGV): Graph reserves first, which reports the failure."""
    cap = 3 << 30

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    r = subprocess.run([sys.executable, "-c", _ALLOC_UNDER_CAP], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert "MemoryError: could not allocate the test graph on cpu:0" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------------------------ reference clips

def test_a_header_saying_8_hz_is_refused_before_reading(tmp_path):
    """1.2 s of samples declared as 8 Hz: a 20-minute clip, a 23 GiB encoder graph on the tiny codec."""
    path = tmp_path / "slow.wav"
    sf.write(path, np.zeros(9600, np.float32), 8)
    with pytest.raises(AudioFileError, match=rf"slow\.wav: 1200\.0 s of audio \(9600 samples at 8 Hz\) is over the "
                                             rf"{MAX_REFERENCE_SECONDS:g} s limit"):
        load_audio(path, max_seconds=MAX_REFERENCE_SECONDS)
    assert load_audio(path)[1] == 8  # without a limit it is an ordinary (if odd) file


def test_a_ten_minute_reference_is_refused(tmp_path, ov):
    path = tmp_path / "long.wav"
    sf.write(path, np.full(600 * 8000, 0.1, np.float32), 8000)
    with pytest.raises(ValueError, match=r"long\.wav: 600\.0 s of audio"):
        ov.create_voice(path, "Hello.")
    with pytest.raises(ValueError, match=r"reference audio is 600\.0 s long .* at most 60 s"):
        ov.create_voice((np.full(600 * 8000, 0.1, np.float32), 8000), "Hello.")


def test_preprocess_reference_checks_the_length_before_resampling():
    with pytest.raises(ValueError, match=r"1200\.0 s long \(9600 samples at 8 Hz\)"):
        preprocess_reference(np.full(9600, 0.1, np.float32), 8)
    clip, _ = preprocess_reference(np.full(24000 * 2, 0.1, np.float32), 24000, preprocess=False)
    assert len(clip) == 48000


def test_the_codec_cli_refuses_a_mis_rated_wav(tmp_path, tiny_gguf, capsys):
    """Fuzzer case wav:49 (fmt sample rate 8000 -> 8): SIGSEGV in the encoder's graph allocation before."""
    from omnivoice.codec.__main__ import main

    path = tmp_path / "ref.wav"
    sf.write(path, np.full(9600, 0.1, np.float32), 8000, subtype="PCM_U8")
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 24, 8)  # the fmt chunk's sample rate
    path.write_bytes(bytes(data))
    rc = main(["--model", str(tiny_gguf["codec"]), "-i", str(path), "-o", str(tmp_path / "out.rvq"),
               "--backend", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "1200.0 s of audio" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.wav"]


# ------------------------------------------------------------------------------------------------ LM length

@pytest.mark.parametrize("duration", [1e5, 86400.0, 1700.0])
def test_a_duration_past_one_context_is_an_option_error(ov, duration):
    """--duration 1e5 crashed in the LM graph's allocation (issue 14.2); 86400 s, the bound before, asked for
    2.2 M frames: anything past what one context holds (40960 positions at 25 frames a second) is refused with
    the options, before the model loads (tts) or any graph is built."""
    words = r"duration must be a number of seconds > 0 and <= 1638.4"
    with pytest.raises(ValueError, match=words):
        ov.synthesize("Hi.", duration=duration)
    with pytest.raises(ValueError, match=words):
        list(ov.stream("Hi. Ho.", duration=duration))


def test_a_voice_prompt_past_the_context_is_refused(ov):
    from omnivoice.api import MAX_DURATION
    from omnivoice.pipeline import VoicePrompt

    voice = VoicePrompt(np.zeros((8, 40000), np.int32), "Hello.")
    with pytest.raises(ValueError, match=r"a voice prompt of 40000 frames .* context of 40960"):
        ov.synthesize("Hi.", voice=voice, duration=60.0)
    # the longest duration the options allow fills the context: a voice prompt beside it does not fit
    voice = VoicePrompt(np.zeros((8, 100), np.int32), "Hello.")
    with pytest.raises(ValueError, match=r"\d{5} target frames .* \+ a voice prompt of 100 frames .* context of 40960"):
        ov.synthesize("Hi.", voice=voice, duration=MAX_DURATION)


def test_voice_prompt_codes_are_checked_against_the_codec(ov):
    from omnivoice.pipeline import VoicePrompt

    with pytest.raises(ValueError, match=r"voice prompt codes: code values must lie in \[0, 1024\)"):
        ov.synthesize("Hi.", voice=VoicePrompt(np.full((8, 10), 2**31 - 1, np.int32), "Hello."))
    with pytest.raises(ValueError, match=r"voice prompt codes: expected shape \[8, T\]"):
        ov.synthesize("Hi.", voice=VoicePrompt(np.zeros((9, 10), np.int32), "Hello."))


# ------------------------------------------------------------------------------------------------ SRT

def test_srt_times_of_99999999_hours_are_refused():
    with pytest.raises(SrtError, match=r"<srt>:2: time 99999999:00:00,000 is past 99999 hours"):
        parse_srt("1\n00:00:00,000 --> 99999999:00:00,000\nHello.\n")
    with pytest.raises(SrtError, match=r"past 99999 hours"):
        parse_srt("1\n" + "9" * 400 + ":00:00,000 --> 00:00:01,000\nHello.\n")


def test_srt_fields_of_5000_digits_are_clear_errors_with_file_and_line():
    """A 5 000-digit hour field (zeros, then a 1) or cue number reached Python's 4 300-digit limit of int(): exit 2
    with "Exceeds the limit" and no file or line."""
    long_hour = "0" * 4999 + "2"
    cues = parse_srt(f"1\n{long_hour}:00:00,000 --> {long_hour}:00:01,000\nHello.\n", "x.srt")
    assert (cues[0].start, cues[0].end) == (7200.0, 7201.0)  # leading zeros are still a valid time
    with pytest.raises(SrtError, match=r"x.srt:2: time 000000000000...:00:00,000 is past 99999 hours"):
        parse_srt("1\n" + "0" * 4999 + "1" * 6 + ":00:00,000 --> 00:00:01,000\nHello.\n", "x.srt")
    with pytest.raises(SrtError, match=r"x.srt:1: cue number 999999999999... has 5000 digits; at most 18"):
        parse_srt("9" * 5000 + "\n00:00:00,000 --> 00:00:01,000\nHello.\n", "x.srt")


def test_srt_cues_are_checked_before_any_is_synthesized(model, tmp_path):
    """Fuzzer cases srt:31 (a 9999-hour timeline: exit 3) and srt:55 (a 60-hour cue: SIGSEGV in the LM graph's
    allocation); a 10-hour cue, within one WAV file, is past the model's context."""
    out = tmp_path / "dub.wav"
    srt = tmp_path / "long.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:01,000\nHello.\n\n2\n00:00:02,000 --> 10:00:02,000\nBye.\n")
    refused(cli("tts", "--srt", srt, *model, *FAST, "-o", out), "cue 2 (36000.000 s)", "context of 40960")
    srt.write_text("1\n00:00:00,000 --> 00:00:01,000\nHello.\n\n2\n00:00:02,000 --> 60:00:04,000\nBye.\n")
    refused(cli("tts", "--srt", srt, *model, *FAST, "-o", out), "cue 2 ends at 60.0 h", "at most 24.9 h")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["long.srt"]


# ------------------------------------------------------------------------------------------------ .rvq

@pytest.mark.parametrize("n_frames", [MAX_FRAMES + 1, 1_000_000])
def test_a_rvq_of_a_million_frames_is_refused_from_its_header(tmp_path, n_frames):
    path = tmp_path / "long.rvq"
    path.write_bytes(HEADER.pack(MAGIC, 1, 40, 8, n_frames, 24000, 25.0, 1024, 0.1, 0))
    with pytest.raises(RvqFormatError, match=rf"shape \[8, {n_frames}\] is too large .* {MAX_FRAMES} frames"):
        read_rvq(path)


def test_long_rvq_files_are_refused_by_both_clis(model, tiny_gguf, tmp_path, capsys):
    """Fuzzer cases rvq:0 (100k frames as a voice prompt) and rvq:21 (1M frames decoded): both ran for minutes."""
    from omnivoice.codec.__main__ import main

    path = tmp_path / "long.rvq"
    path.write_bytes(HEADER.pack(MAGIC, 1, 40, 8, 100_000, 24000, 25.0, 1024, 0.1, 0) + bytes(32 * 100_000))
    refused(cli("tts", "Hi.", "--ref-rvq", path, "--ref-text", "Hello.", *model, *FAST, "-o", tmp_path / "o.wav"),
            "long.rvq", "too large")
    rc = main(["--model", str(tiny_gguf["codec"]), "-i", str(path), "-o", str(tmp_path / "o.wav")])
    assert rc == 2 and "too large" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.rvq"]


# ------------------------------------------------------------------------------------------ absurd samples

@pytest.mark.parametrize("value", [1e30, np.inf, np.nan])
def test_audio_with_absurd_samples_is_refused_naming_the_input_on_every_path(model, tmp_path, ov, value):
    """A float WAV of 1e30: the codec CLI exited 2 blaming its output (an infinite ref_rms), tts --ref-wav took
    it, the server answered 500 (tests/server/test_hostile.py). One check (audio.io.check_samples), one message
    naming the input."""
    wav = tmp_path / "huge.wav"
    samples = np.full(24000, 0.1, np.float32)
    samples[100] = value
    sf.write(wav, samples, 24000, subtype="FLOAT")
    out = tmp_path / "out.rvq"
    words = "huge.wav: its peak sample is 1e+30" if value == 1e30 else "huge.wav: 1 of its 24000 samples are NaN"
    err = refused(cli("codec", "--model", model[3], "-i", wav, "-o", out, "--backend", "cpu"), words)
    assert "out.rvq" not in err
    refused(cli("tts", "Hallo.", *model, *FAST, "--ref-wav", wav, "--ref-text", "Hello.", "-o", tmp_path / "o.wav"),
            words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.wav"]
    with pytest.raises(ValueError, match="ref_audio: reference audio: "):  # samples given as an array
        ov.create_voice((samples, 24000), "Hello.")


@pytest.mark.parametrize("sample_rate, frame_rate", [(1, 25.0), (2**32 - 1, 25.0), (24000, 1e-30), (24000, 3.4e38)])
def test_rvq_rates_are_checked_alike_as_a_voice_and_when_decoded(model, tmp_path, sample_rate, frame_rate):
    """tts --ref-rvq took headers that codec -i refused: one check (rvq_format.check_rates) for both."""
    path = tmp_path / "odd.rvq"
    path.write_bytes(HEADER.pack(MAGIC, 1, 40, 8, 10, sample_rate, frame_rate, 1024, 0.1, 0)
                     + np.zeros((8, 10), "<i4").tobytes())
    words = (f"odd.rvq: codes for {sample_rate} Hz at {np.float32(frame_rate):g} frames/s, but the codec works at "
             "24000 Hz and 25 frames/s")
    refused(cli("tts", "Hallo.", *model, *FAST, "--ref-rvq", path, "--ref-text", "Hello.", "-o", tmp_path / "o.wav"),
            words)
    refused(cli("codec", "--model", model[3], "-i", path, "-o", tmp_path / "o.wav", "--backend", "cpu"), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.rvq"]
