"""`python -m omnivoice.tts`: text to speech from the command line.

Argument parsing and I/O only: every decision is the API's (omnivoice.api.OmniVoice).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_OOM, EXIT_CANCELLED = 0, 1, 2, 3, 130

EPILOG = """\
exit status: 0 success, 2 bad input (text, options, files), 1 internal failure, 3 out of memory,
130 interrupted.

examples:
  python -m omnivoice.tts "Hello world." -o hello.wav
  echo "Long text ..." | python -m omnivoice.tts --model ./OmniVoice -o out.wav --lang English
  python -m omnivoice.tts "Hi!" --ref-wav me.wav --ref-text "Transcript of me.wav." -o cloned.wav
  python -m omnivoice.tts "Hi!" --instruct "female, low pitch, british accent" -o designed.wav
  cat book.txt | python -m omnivoice.tts -o - | aplay
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m omnivoice.tts", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="OmniVoice text to speech (24 kHz mono WAV) on ggml.")
    p.add_argument("text", nargs="?", help="text to synthesize (default: read stdin)")
    g = p.add_argument_group("model")
    g.add_argument("--model", help="LM GGUF, OmniVoice checkpoint directory or Hugging Face repo id "
                                   "(default: $OMNIVOICE_MODEL, else k2-fsa/OmniVoice)")
    g.add_argument("--codec", help="codec GGUF (default: omnivoice-tokenizer-F32.gguf beside the model)")
    g.add_argument("--quant", default="auto", choices=["auto", "f32", "f16", "bf16", "q8_0"],
                   help="LM weight type when converting a checkpoint directory (default auto: bf16 on CUDA, "
                        "f16 on other GPUs, f32 on the CPU)")
    g.add_argument("--backend", default="auto", help="auto, cpu, cuda, vulkan, metal, optionally :INDEX")
    g.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    g.add_argument("--list-devices", action="store_true", help="print the usable backends and devices, exit")

    g = p.add_argument_group("input and output")
    g.add_argument("-o", "--output", default="output.wav",
                   help="output WAV (default output.wav); '-' streams WAV to stdout as sentences finish")
    g.add_argument("--srt", help="dub an SRT file: each cue in its time slot, one timeline WAV")
    g.add_argument("--format", default="wav16", choices=["wav16", "wav24", "wav32"], help="WAV sample format")
    g.add_argument("--stream-by-line", action="store_true",
                   help="with -o -: synthesize each input line as it arrives, one WAV header per line")

    g = p.add_argument_group("voice")
    g.add_argument("--lang", help="language name or code (default: none)")
    g.add_argument("--instruct", help="voice design attributes, e.g. 'female, low pitch, british accent'")
    g.add_argument("--ref-wav", help="reference audio for voice cloning")
    g.add_argument("--ref-text", help="transcript of the reference (a file path, or the text itself)")
    g.add_argument("--ref-rvq", help="pre-encoded reference codes (.rvq from python -m omnivoice.codec or "
                                     "--save-voice; its transcript comes from --ref-text or FILE.rvq.txt)")
    g.add_argument("--save-voice", metavar="FILE.rvq",
                   help="also save the encoded reference for reuse (FILE.rvq + FILE.rvq.txt transcript)")
    g.add_argument("--no-preprocess-prompt", action="store_true",
                   help="skip reference silence trimming and transcript punctuation")
    g.add_argument("--no-denoise", action="store_true", help="omit the <|denoise|> token")

    g = p.add_argument_group("generation")
    g.add_argument("--duration", type=float, help="output duration in seconds (default: estimated)")
    g.add_argument("--speed", type=float, default=1.0, help="speaking rate factor (default 1.0)")
    g.add_argument("--seed", type=int, default=-1, help="sampling seed (default -1: random)")
    g.add_argument("--steps", type=int, default=32, help="MaskGIT steps (default 32; fewer is faster)")
    g.add_argument("--guidance-scale", type=float, default=2.0)
    g.add_argument("--t-shift", type=float, default=0.1)
    g.add_argument("--layer-penalty", type=float, default=5.0)
    g.add_argument("--position-temperature", type=float, default=5.0)
    g.add_argument("--class-temperature", type=float, default=0.0)
    g.add_argument("--chunk-duration", type=float, default=15.0,
                   help="long-form chunk length in seconds (default 15; <= 0 disables chunking)")
    g.add_argument("--chunk-threshold", type=float, default=30.0,
                   help="chunk only above this estimated duration in seconds (default 30)")
    g.add_argument("--no-postprocess", action="store_true", help="keep silences, skip loudness and fades")

    g = p.add_argument_group("debug")
    g.add_argument("--no-fa", action="store_true", help="disable flash attention")
    g.add_argument("--clamp-fp16", action="store_true", help="clamp LM hidden states to the FP16 range")
    g.add_argument("--llm-test", action="store_true",
                   help="one full LM forward; writes prompt_ids.npy and llm_logits.npy into --dump DIR")
    g.add_argument("--dump", metavar="DIR", help="write prompt_ids.npy, logits0.npy, tokens_N.npy into DIR")
    g.add_argument("--maskgit-test", action="store_true",
                   help="run the MaskGIT decoder only (no codec decode, no WAV); use with --dump")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress or summary on stderr")
    g.add_argument("--verbose", "-v", action="store_true", help="log details on stderr")
    return p


class Progress:
    """A one-line progress bar on stderr (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 30
        fill = int(width * done / max(total, 1))
        sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} steps "
                         f"{time.perf_counter() - self.t0:5.1f}s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def read_text(args) -> str:
    if args.text is not None:
        return args.text
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("no text: give it as an argument or on stdin")
    return sys.stdin.read()


def read_ref_text(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value)
    if len(value) < 4096 and path.is_file():
        return path.read_text(encoding="utf-8").strip()
    return value


def synthesis_options(args) -> dict:
    return dict(language=args.lang, instruct=args.instruct, duration=args.duration, speed=args.speed,
                seed=args.seed, num_step=args.steps, guidance_scale=args.guidance_scale, t_shift=args.t_shift,
                layer_penalty_factor=args.layer_penalty, position_temperature=args.position_temperature,
                class_temperature=args.class_temperature, denoise=not args.no_denoise,
                postprocess_output=not args.no_postprocess, chunk_duration=args.chunk_duration,
                chunk_threshold=args.chunk_threshold)


def load_voice(ov, args):
    """The voice prompt from --ref-wav / --ref-rvq (+ --ref-text), or None."""
    from .codec.voice import VoicePrompt

    if args.ref_wav and args.ref_rvq:
        raise ValueError("give --ref-wav or --ref-rvq, not both")
    ref_text = read_ref_text(args.ref_text)
    if args.ref_wav and not ref_text:
        raise ValueError("--ref-wav needs --ref-text (the transcript of the reference audio)")
    if ref_text and not (args.ref_wav or args.ref_rvq):
        raise ValueError("--ref-text was given without --ref-wav or --ref-rvq")
    if args.ref_wav:
        voice = ov.create_voice(args.ref_wav, ref_text, preprocess_prompt=not args.no_preprocess_prompt)
    elif args.ref_rvq:
        voice = VoicePrompt.load(args.ref_rvq, ref_text)
    else:
        return None
    if args.save_voice:
        voice.save(args.save_voice)
    return voice


def run(args) -> int:
    from .api import OmniVoice
    from .audio.io import write_wav

    # -o - with text on stdin reads it as it arrives: synthesis starts at the first finished sentence
    incremental = args.output == "-" and args.text is None and not args.srt and not args.llm_test \
        and not args.maskgit_test
    text = None if args.srt or incremental else read_text(args)
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    t0 = time.perf_counter()
    with OmniVoice(args.model, args.codec, backend=args.backend, n_threads=args.threads, quant=args.quant,
                   flash_attn=False if args.no_fa else None, clamp_fp16=args.clamp_fp16) as ov:
        say(f"model {ov.model_path.name} on {ov.runtime.device.spec} ({ov.runtime.device.description}), "
            f"loaded in {time.perf_counter() - t0:.1f}s")
        voice = load_voice(ov, args)
        opts = synthesis_options(args)
        progress = Progress(not args.quiet)

        if args.llm_test:
            if not args.dump:
                raise ValueError("--llm-test writes its logits into --dump DIR: give --dump")
            logits = ov.pipeline.llm_test(text, ov.settings(text=text, **opts), voice, Path(args.dump))
            say(f"wrote {args.dump}/llm_logits.npy {tuple(logits.shape)}")
            return EXIT_OK

        if args.maskgit_test:
            settings = ov.settings(text=text, **opts)
            tokens, _ = ov.pipeline.generate_tokens(text, settings, voice, progress,
                                                    dump=Path(args.dump) if args.dump else None)
            say(f"{len(tokens)} chunk(s), {sum(t.shape[1] for t in tokens)} frames")
            return EXIT_OK

        if args.srt:
            from .audio.srt import load_srt, place_cues
            from .pipeline import SentenceStream

            cues = load_srt(args.srt)
            stream = SentenceStream(ov.pipeline, ov.settings(text=" ".join(c.text for c in cues), **opts), voice)
            clips = []
            for i, cue in enumerate(cues):
                clips.append(stream.say(cue.text, duration=max(cue.end - cue.start, 0.04)))
                progress(i + 1, len(cues))
            audio = place_cues(cues, clips, ov.sample_rate)
            write_wav(args.output, audio, ov.sample_rate, args.format)
            say(f"wrote {args.output}: {len(cues)} cues, {len(audio) / ov.sample_rate:.2f}s")
            return EXIT_OK

        if args.output == "-":
            return stream_stdout(ov, args, text, voice, opts)

        result = ov.synthesize(text, voice=voice, progress=progress, dump=args.dump, **opts)
        write_wav(args.output, result.audio, result.sample_rate, args.format)
        took = time.perf_counter() - t0
        say(f"wrote {args.output}: {result.duration:.2f}s of audio in {len(result.tokens)} chunk(s), "
            f"{took:.1f}s (RTF {took / max(result.duration, 1e-9):.2f})")
    return EXIT_OK


def stdin_lines():
    """Lines of stdin as they arrive (a pipe is read line by line, not to its end first)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError("no text: give it as an argument or on stdin")
    yield from iter(sys.stdin.readline, "")


def stream_stdout(ov, args, text, voice, opts: dict) -> int:
    """-o -: WAV to stdout, written sentence by sentence (one WAV per input line with --stream-by-line)."""
    from .audio.io import WavStreamWriter
    from .pipeline import SentenceStream
    from .text.sentences import complete_sentences, split_sentences

    out = sys.stdout.buffer
    lines = stdin_lines() if text is None else iter(text.splitlines(keepends=True))
    stream = None

    def say(sentence: str):
        nonlocal stream
        if stream is None:  # the first sentence decides Chinese or English voice-design wording
            stream = SentenceStream(ov.pipeline, ov.settings(text=sentence, **opts), voice)
        return stream.say(sentence)

    if args.stream_by_line:
        spoken = 0
        for line in lines:
            if line.strip():
                with WavStreamWriter(out, ov.sample_rate, args.format) as writer:
                    for sentence in split_sentences(line):
                        writer.write(say(sentence))
                        spoken += 1
        if not spoken:
            raise ValueError("text is empty: nothing to synthesize")
        return EXIT_OK
    sentences = complete_sentences(lines)
    first = next(sentences, None)
    if first is None:  # checked before the WAV header goes out
        raise ValueError("text is empty: nothing to synthesize")
    with WavStreamWriter(out, ov.sample_rate, args.format) as writer:
        for sentence in itertools.chain([first], sentences):
            writer.write(say(sentence))
    return EXIT_OK


def list_devices() -> int:
    from .ggml import list_devices as devices

    for d in devices():
        mem = f"{d.memory_total / 2**30:.1f} GiB" if d.memory_total else "n/a"
        print(f"{d.spec:<10} {d.kind:<5} {d.name:<12} {d.description} ({mem})")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING if not args.quiet else
                        logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    if args.list_devices:
        return list_devices()
    from .pipeline import Cancelled

    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_CANCELLED
    except Cancelled as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CANCELLED
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError as e:
        print(f"error: out of memory: {e}", file=sys.stderr)
        return EXIT_OOM
    except Exception as e:  # an internal failure: say what, keep the traceback for --verbose
        logging.getLogger("omnivoice").debug("internal failure", exc_info=True)
        print(f"error: internal failure: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
