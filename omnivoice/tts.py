"""`python -m omnivoice.tts`: text to speech from the command line.

Argument parsing and I/O only, through the public API (omnivoice.api): every input is checked before the model
is loaded or converted, so a typo costs no minute of loading. Exit statuses: omnivoice.cli.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import cli
from .arguments import add_model_options, add_quant_option, add_threads_option
from .options import DEFAULTS, OptionError, add_arguments, flag_message, flags, from_arguments
from .text.utf8 import decode_utf8

FORMATS = ("wav16", "wav24", "wav32", "flac", "ogg", "opus", "mp3")

EPILOG = f"""\
output formats: by the name's extension (.wav, .flac, .ogg, .opus, .mp3) or --format: wav16, wav24, wav32
(float), flac (16-bit), ogg (Vorbis), opus (Ogg/Opus), mp3. -o - streams WAV to stdout.

--duration fixes the length of the generated speech; post-processing then trims long silences inside it and adds
0.1 s of silence at each end, so the file is about 0.2 s longer. With --no-postprocess it is exactly that long
(in 40 ms frames).

{cli.EXIT_STATUS_HELP}.

examples:
  python -m omnivoice.tts "Hello world." -o hello.wav
  echo "Long text ..." | python -m omnivoice.tts --model ./OmniVoice -o out.mp3 --lang English
  python -m omnivoice.tts "Hi!" --ref-wav me.wav --ref-text "Transcript of me.wav." -o cloned.flac
  python -m omnivoice.tts "Hi!" --instruct "female, low pitch, british accent" -o designed.wav
  cat book.txt | python -m omnivoice.tts -o - | aplay
"""

# the synthesis options this command sets by flag (omnivoice.options makes the flags), and the words of some
OPTION_FLAGS = ("duration", "speed", "seed", "num_step", "guidance_scale", "t_shift", "layer_penalty_factor",
                "position_temperature", "class_temperature", "chunk_duration", "chunk_threshold", "postprocess_output")
HELP = {"duration": "length of the generated speech in seconds, before the padding (default: estimated from the "
                    "text; see below)",
        "postprocess_output": "the speech as generated: no silence trimming, fades or padding (the loudness is still "
                              "matched to the reference, or peak-normalised without one)"}
PRIMARY = {"num_step": "--steps"}
# API option name -> the flag that sets it, for error messages in the user's terms
FLAGS = {"language": "--lang", "instruct": "--instruct", **flags(OPTION_FLAGS + ("denoise",), PRIMARY)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m omnivoice.tts", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="OmniVoice text to speech (24 kHz mono) on ggml.")
    p.add_argument("text", nargs="?", help="text to synthesize (default: read stdin)")
    g = p.add_argument_group("model")
    add_model_options(g)
    add_quant_option(g)
    g.add_argument("--backend", default="auto", help="auto, cpu, cuda, vulkan, metal, optionally :INDEX")
    add_threads_option(g)
    g.add_argument("--list-devices", action="store_true", help="print the usable backends and devices, exit")
    g.add_argument("--list-languages", action="store_true", help="print the language ids and names, exit")

    g = p.add_argument_group("input and output")
    g.add_argument("-o", "--output", default="output.wav",
                   help="output file (default output.wav), format by extension; '-' streams WAV to stdout as "
                        "sentences finish")
    g.add_argument("--format", choices=FORMATS, help="output format (default: from the output's extension, "
                                                      "else wav16)")
    g.add_argument("--srt", help="dub an SRT file: each cue in its time slot, one timeline")
    g.add_argument("--stream-by-line", action="store_true",
                   help="with -o - to a pipe: synthesize each input line as it arrives, one WAV per line "
                        "(to a file: one WAV)")

    g = p.add_argument_group("voice")
    g.add_argument("--lang", help="language name or code (default: none; --list-languages)")
    g.add_argument("--instruct", help="voice design attributes, e.g. 'female, low pitch, british accent'")
    g.add_argument("--ref-wav", help="reference audio for voice cloning")
    g.add_argument("--ref-text", help="transcript of the reference: the text itself, or a file holding it (a "
                                      "value ending in .txt, or a path without spaces, must name a file)")
    g.add_argument("--ref-rvq", help="pre-encoded reference codes (.rvq from python -m omnivoice.codec, "
                                     "--save-voice or omnivoice.cpp; its transcript comes from --ref-text or "
                                     "FILE.rvq.txt)")
    g.add_argument("--save-voice", metavar="FILE.rvq",
                   help="also save the encoded reference for reuse (FILE.rvq + FILE.rvq.txt transcript)")
    g.add_argument("--no-preprocess-prompt", action="store_true",
                   help="skip reference silence trimming and transcript punctuation")
    add_arguments(g, ["denoise"])

    g = p.add_argument_group("generation")
    add_arguments(g, OPTION_FLAGS, PRIMARY, HELP)

    g = p.add_argument_group("debug")
    g.add_argument("--no-fa", action="store_true", help="disable flash attention")
    g.add_argument("--clamp-fp16", action="store_true", help="clamp LM hidden states to the FP16 range")
    g.add_argument("--llm-test", action="store_true",
                   help="one full LM forward; writes prompt_ids.npy and llm_logits.npy into --dump DIR")
    g.add_argument("--dump", metavar="DIR", help="write prompt_ids.npy, logits0.npy, tokens_N.npy into DIR")
    g.add_argument("--maskgit-test", action="store_true",
                   help="run the MaskGIT decoder only (no codec decode, no audio file); use with --dump")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress or summary on stderr")
    g.add_argument("--verbose", "-v", action="store_true", help="log details on stderr")
    return p


@dataclass
class Inputs:
    """Everything read and checked before the model loads."""

    text: Optional[str]            # None: read stdin as it arrives (-o -) or dub cues
    options: dict
    fmt: str
    ref_text: Optional[str] = None
    voice: object = None           # a VoicePrompt from --ref-rvq
    cues: Optional[list] = None


def synthesis_options(args) -> dict:
    """The keyword arguments of OmniVoice.synthesize that the flags give (the table's defaults for the others).
    --no-postprocess also drops the fades and the padding: this command's "the speech as generated"."""
    o = from_arguments(args, OPTION_FLAGS + ("denoise",))
    for name in ("pad_duration", "fade_duration"):
        o[name] = DEFAULTS[name] if o["postprocess_output"] else 0.0
    return dict(language=args.lang, instruct=args.instruct, **o)


def read_text(args) -> str:
    if args.text is not None:
        return args.text
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("no text: give it as an argument or on stdin")
    stdin = getattr(sys.stdin, "buffer", None)
    return sys.stdin.read() if stdin is None else decode_utf8(stdin.read(), "stdin")


def read_ref_text(value: Optional[str]) -> Optional[str]:
    """--ref-text: the transcript, or the file holding it. A value that looks like a file name (ends in .txt,
    or is a path without spaces) but names no file is an error, not a transcript."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if len(value) < 4096 and path.is_file():
        return decode_utf8(path.read_bytes(), f"--ref-text {value}").strip()
    one_word = not any(c.isspace() for c in value.strip())
    if value.strip().lower().endswith(".txt") and "\n" not in value or one_word and ("/" in value or os.sep in value):
        raise FileNotFoundError(f"--ref-text {value}: no such file (to pass the transcript itself, write it out)")
    return value


def check_output(path: str, what: str = "-o") -> None:
    """The output can be written: not a folder, its folder exists, and the writer's temporary file can be
    created there (files.check_writable)."""
    from .files import FileWriteError, check_writable

    if path == "-":
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise IsADirectoryError(f"{what} {path}: is a directory; give a file name")
    if p.exists() and not p.is_file():
        return  # /dev/null, a named pipe: written in place
    parent = p.parent
    if not parent.is_dir():
        raise FileNotFoundError(f"{what} {path}: the folder {parent} does not exist")
    try:
        check_writable(p)
    except FileWriteError as e:
        raise PermissionError(f"{what} {path}: cannot be written ({getattr(e.__cause__, 'strerror', None) or e})") \
            from None


def check_timeline(srt: str, cues: list, fmt: str) -> None:
    """A dubbed timeline must fit one WAV file (32-bit sizes: 24.9 h of wav16 at the model's 24 kHz)."""
    from .audio.io import WAV_FORMATS, max_wav_samples
    from .audio.postprocess import SAMPLING_RATE
    from .audio.srt import SrtError, timeline_samples

    if fmt in WAV_FORMATS and timeline_samples(cues, SAMPLING_RATE) > max_wav_samples(fmt):
        last = max(cues, key=lambda c: c.end)
        raise SrtError(f"{srt}: cue {last.index} ends at {last.end / 3600:.1f} h; one {fmt} file at {SAMPLING_RATE} "
                       f"Hz holds at most {max_wav_samples(fmt) / SAMPLING_RATE / 3600:.1f} h")


def check_inputs(args) -> Inputs:
    """Read and check every input that can be checked without the model (files, option values, formats)."""
    from .api import check_options
    from .audio.io import load_audio, output_format
    from .audio.postprocess import MAX_REFERENCE_SECONDS

    if args.output == "-" and args.format not in (None, "wav16", "wav24", "wav32"):
        raise ValueError(f"-o - streams WAV; --format {args.format} needs a file name")
    fmt = output_format(args.output, args.format)
    if not (args.llm_test or args.maskgit_test):
        check_output(args.output)
    if args.save_voice:
        check_output(args.save_voice, "--save-voice")
    if args.llm_test and not args.dump:
        raise ValueError("--llm-test writes its logits into --dump DIR: give --dump")
    if args.dump and Path(args.dump).exists() and not Path(args.dump).is_dir():
        raise NotADirectoryError(f"--dump {args.dump}: not a folder")
    if args.srt and args.duration is not None:
        raise ValueError("--duration does not apply to --srt: each cue is as long as its time slot")

    if args.ref_wav and args.ref_rvq:
        raise ValueError("give --ref-wav or --ref-rvq, not both")
    ref_text = read_ref_text(args.ref_text)
    if args.ref_wav and not ref_text:
        raise ValueError("--ref-wav needs --ref-text (the transcript of the reference audio)")
    if ref_text and not (args.ref_wav or args.ref_rvq):
        raise ValueError("--ref-text was given without --ref-wav or --ref-rvq")
    if args.save_voice and not (args.ref_wav or args.ref_rvq):
        raise ValueError("--save-voice saves the reference of --ref-wav (or --ref-rvq): give one")
    voice = None
    if args.ref_wav:  # a missing, unreadable or overlong reference fails now, not after loading
        load_audio(args.ref_wav, max_seconds=MAX_REFERENCE_SECONDS)
    elif args.ref_rvq:
        from .codec.voice import VoicePrompt

        voice = VoicePrompt.load(args.ref_rvq, ref_text)

    cues = None
    incremental = args.output == "-" and args.text is None and not (args.srt or args.llm_test or args.maskgit_test)
    if args.srt:
        from .audio.srt import load_srt

        cues = load_srt(args.srt)
        check_timeline(args.srt, cues, fmt)
        text = None
        sample = " ".join(c.text for c in cues)
    elif incremental:
        text, sample = None, ""
    else:
        text = sample = read_text(args)
        if not text.strip():
            raise ValueError("text is empty: nothing to synthesize")
    options = synthesis_options(args)
    try:
        check_options(sample, **options)
    except OptionError as e:
        raise ValueError(flag_message(e, FLAGS)) from None
    return Inputs(text, options, fmt, ref_text, voice, cues)


def run(args) -> int:
    from .api import OmniVoice
    from .audio.io import write_audio

    inputs = check_inputs(args)
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    t0 = time.perf_counter()
    with OmniVoice(args.model, args.codec, backend=args.backend, n_threads=args.threads, quant=args.quant,
                   flash_attn=False if args.no_fa else None, clamp_fp16=args.clamp_fp16,
                   cpu_products=args.cpu_products) as ov:
        rt = ov.runtime
        arithmetic = f"{rt.arithmetic} arithmetic, " if rt.arithmetic else ""  # Vulkan's F16 or F32 shaders
        say(f"model {ov.model_path.name} + {ov.codec_path.name} on {rt.device.spec} ({rt.device.description}, "
            f"{arithmetic}{rt.n_threads} thread{'s' if rt.n_threads != 1 else ''}"
            f"{f', {ov.lm.cpu_products} products' if ov.lm.cpu_products else ''}), "
            f"loaded in {time.perf_counter() - t0:.1f}s")
        voice = inputs.voice
        if args.ref_wav:
            voice = ov.create_voice(args.ref_wav, inputs.ref_text, preprocess_prompt=not args.no_preprocess_prompt)
        if args.save_voice:
            voice.save(args.save_voice)
        opts, text = inputs.options, inputs.text
        progress = cli.Progress(not args.quiet)

        if args.llm_test:
            logits = ov.llm_logits(text, voice=voice, dump=args.dump, **opts)
            say(f"wrote {args.dump}/llm_logits.npy {tuple(logits.shape)}")
            return cli.EXIT_OK
        if args.maskgit_test:
            tokens = ov.generate_tokens(text, voice=voice, progress=progress, dump=args.dump, **opts)
            say(f"{len(tokens)} chunk(s), {sum(t.shape[1] for t in tokens)} frames")
            return cli.EXIT_OK
        if inputs.cues is not None:
            opts.pop("duration")
            result = ov.dub(inputs.cues, voice=voice, progress=progress, **opts)
            write_audio(args.output, result.audio, result.sample_rate, inputs.fmt)
            say(f"wrote {args.output}: {len(inputs.cues)} cues, {result.duration:.2f}s")
            return cli.EXIT_OK
        if args.output == "-":
            return stream_stdout(ov, args, text, voice, opts, inputs.fmt)

        result = ov.synthesize(text, voice=voice, progress=progress, dump=args.dump, **opts)
        write_audio(args.output, result.audio, result.sample_rate, inputs.fmt)
        took = time.perf_counter() - t0
        say(f"wrote {args.output}: {result.duration:.2f}s of audio in {len(result.tokens)} chunk(s), "
            f"{took:.1f}s (RTF {took / max(result.duration, 1e-9):.2f})")
    return cli.EXIT_OK


def stdin_lines():
    """Lines of stdin as they arrive (a pipe is read line by line, not to its end first)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("no text: give it as an argument or on stdin")
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None:
        yield from iter(sys.stdin.readline, "")
        return
    for n, line in enumerate(iter(stdin.readline, b""), start=1):
        yield decode_utf8(line, "stdin", first_line=n)


def stream_stdout(ov, args, text: Optional[str], voice, opts: dict, fmt: str) -> int:
    """-o -: WAV to stdout, written sentence by sentence. With --stream-by-line to a pipe, one WAV per input
    line; to a regular file (a redirect), always one WAV, whose header is completed at the end."""
    from .audio.io import WavStreamWriter
    from .text import stream_sentences

    out = sys.stdout.buffer
    try:
        to_file = stat.S_ISREG(os.fstat(out.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # not a real file descriptor
        to_file = False
    lines = stdin_lines() if text is None else iter(text.splitlines(keepends=True))
    if not args.stream_by_line:
        audio = ov.stream(lines, voice=voice, **opts)
        first = next(audio)  # an empty text raises here, before the WAV header goes out
        with WavStreamWriter(out, ov.sample_rate, fmt) as writer:
            writer.write(first)
            for chunk in audio:
                writer.write(chunk)
        return cli.EXIT_OK
    speaker = ov.speaker(voice=voice, **opts)
    writer = None
    try:
        for line in lines:
            if not line.strip():
                continue
            sentences = stream_sentences(line)  # each line a stream of its own: the streaming rule
            if writer is None or not to_file:
                if writer is not None:
                    writer.close()
                writer = WavStreamWriter(out, ov.sample_rate, fmt)
            for sentence in sentences:
                writer.write(speaker.say(sentence))
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise ValueError("text is empty: nothing to synthesize")
    return cli.EXIT_OK


def list_devices() -> int:
    from .ggml import list_devices as devices
    from .ggml.backend import vulkan_arithmetic

    for d in devices():
        mem = f"{d.memory_total / 2**30:.1f} GiB" if d.memory_total else "n/a"
        arithmetic = f", {vulkan_arithmetic()} arithmetic" if d.backend.lower() == "vulkan" else ""
        print(f"{d.spec:<10} {d.kind:<5} {d.name:<12} {d.description} ({mem}{arithmetic})")
    return cli.EXIT_OK


def list_languages() -> int:
    from .text.lang_table import LANG_NAME_TO_ID
    from .text.languages import lang_display_name

    for name in sorted(LANG_NAME_TO_ID):
        print(f"{LANG_NAME_TO_ID[name]:<12} {lang_display_name(name)}")
    return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (see omnivoice.cli)."""
    args = build_parser().parse_args(argv)
    # the package says what it does at INFO (a conversion, which files of a folder it uses); libraries only warn
    cli.setup_logging(logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING,
                      "%(message)s" if not args.verbose else "%(levelname)s %(name)s: %(message)s")
    if not args.quiet and not args.verbose:
        logging.getLogger("omnivoice").setLevel(logging.INFO)
    if args.list_devices:
        return cli.run(list_devices, listing=True)
    if args.list_languages:
        return cli.run(list_languages, listing=True)
    return cli.run(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
