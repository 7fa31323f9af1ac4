"""python -m omnivoice.codec: audio <-> .rvq codes with the Higgs Audio v2 codec.

    python -m omnivoice.codec --model omnivoice-tokenizer-F32.gguf -i clip.wav     # writes clip.rvq
    python -m omnivoice.codec --model models -i clip.rvq -o clip.flac               # a folder of converted GGUFs
    python -m omnivoice.codec --model ./OmniVoice -i clip.wav                       # a checkpoint: its codec

An output name the user did not give never replaces a file: decoding clip.rvq beside an existing clip.wav writes
clip.decoded.wav, and when that exists too (or clip.rvq exists when encoding) it stops and asks for -o.

Encoding applies the voice-cloning reference preprocessing of the TTS (downmix, resampling to 24 kHz, RMS
auto-gain, silence trim, truncation to whole frames; --no-preprocess keeps all but the silence trim, as the
reference's preprocess_prompt=False does) and stores the clip's RMS in the .rvq header, so the file can stand
in for the WAV as a cloning prompt (--rvq-format omnivoice-cpp writes omnivoice.cpp's headerless layout
instead, which keeps only the codes). Decoding reads either layout and writes the raw decoder output (no
post-processing), in the format of the output's extension or --format.
Exit statuses: omnivoice.cli.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import cli
from ..arguments import add_threads_option
from ..audio import MAX_REFERENCE_SECONDS, load_audio, preprocess_reference
from ..audio.io import OUTPUT_FORMATS, output_format, write_audio
from ..files import check_writable
from .rvq_format import FORMAT_OMNIVOICE, FORMATS, MAGIC, RvqFormatError, check_rates, read_rvq, save_rvq


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m omnivoice.codec",
        description="Audio tokenizer round trip: audio -> .rvq codes, .rvq codes -> audio.",
        epilog="Output is named after the input unless -o is given: clip.wav -> clip.rvq, clip.rvq -> clip.wav "
               "(clip.decoded.wav when clip.wav exists; an existing file is replaced only when named with -o). "
               "Decoded audio: format by the -o extension (.wav, .flac, .ogg, .opus, .mp3) or --format. "
               + cli.EXIT_STATUS_HELP + ".")
    ap.add_argument("--model", required=True,
                    help="codec GGUF (omnivoice-tokenizer-F32.gguf), a folder of converted GGUFs holding it, or an "
                         "OmniVoice checkpoint directory or Hugging Face repo id, whose codec alone is converted "
                         "once into the cache ($OMNIVOICE_CACHE, else ~/.cache/omnivoice)")
    ap.add_argument("-i", "--input", required=True,
                    help="input: a .rvq file decodes; any audio file soundfile reads encodes")
    ap.add_argument("-o", "--output", help="output path (default: next to the input, extension swapped)")
    ap.add_argument("--format", choices=list(OUTPUT_FORMATS),
                    help="audio format when decoding: wav16, wav24, wav32, flac, ogg (Vorbis), opus, mp3 "
                         "(default: from the -o extension, else wav16)")
    ap.add_argument("--backend", default="auto", help="ggml backend: auto, cpu, cuda, cuda:1, vulkan, ...")
    ap.add_argument("--encode-backend", default=None,
                    help="backend for encoding only (default: --backend). On CUDA, ggml's F32 matrix products run "
                         "in TF32; --encode-backend cpu gives codes identical to the float32 reference")
    add_threads_option(ap)
    ap.add_argument("--no-preprocess", action="store_true",
                    help="encode without the silence trim (RMS auto-gain and frame truncation still apply)")
    ap.add_argument("--rvq-format", default=FORMAT_OMNIVOICE, choices=FORMATS,
                    help="layout of the .rvq written when encoding: omnivoice (header with rates and the clip's "
                         "RMS, default) or omnivoice-cpp (omnivoice.cpp's headerless bit-packed codes)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    return ap.parse_args(argv)


def _is_rvq(path: Path) -> bool:
    if path.suffix.lower() == ".rvq":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _load(args: argparse.Namespace, part: str):
    from ..resolve import resolve_codec
    from ..runners.codec import load_codec

    return load_codec(resolve_codec(args.model), args.backend, threads=args.threads, parts=(part,),
                      encode_backend=args.encode_backend if part == "encode" else None)


def encode_file(args: argparse.Namespace, src: Path, dst: Path) -> str:
    audio, rate = load_audio(src, max_seconds=MAX_REFERENCE_SECONDS)
    with _load(args, "encode") as codec:
        clip, ref_rms = preprocess_reference(audio, rate, preprocess=not args.no_preprocess,
                                             target_rate=codec.sample_rate, hop_length=codec.hop_length)
        codes = codec.encode(clip)
        save_rvq(dst, codes, sample_rate=codec.sample_rate, frame_rate=codec.frame_rate,
                 codebook_size=codec.codebook_size, ref_rms=ref_rms, fmt=args.rvq_format)
    return (f"{src}: {len(audio) / rate:.2f} s at {rate} Hz -> {codes.shape[1]} frames x {codes.shape[0]} "
            f"codebooks -> {dst}")


def decode_file(args: argparse.Namespace, src: Path, dst: Path, fmt: str) -> str:
    with _load(args, "decode") as codec:
        # after the load: omnivoice.cpp's headerless files take the codec's codebook count and size
        rvq = read_rvq(src, n_codebooks=codec.n_codebooks, codebook_size=codec.codebook_size)
        check_rates(rvq, codec.sample_rate, codec.frame_rate, src)
        if rvq.codebook_size != codec.codebook_size:
            raise RvqFormatError(f"{src}: codebook_size {rvq.codebook_size}, the codec has {codec.codebook_size}")
        audio = codec.decode(rvq.codes)
        write_audio(dst, audio, codec.sample_rate, fmt)
    return f"{src}: {rvq.codes.shape[1]} frames -> {len(audio) / codec.sample_rate:.2f} s ({fmt}) -> {dst}"


def output_path(src: Path, decode: bool, given: str | None, fmt: str | None) -> Path:
    """-o as given, else a name beside the input that replaces no existing file."""
    if given:
        dst = Path(given)
        if dst.resolve() == src.resolve():
            raise ValueError(f"{dst}: the output would overwrite the input; give another name with -o")
        return dst
    ext = ".rvq" if not decode else {"flac": ".flac", "ogg": ".ogg", "opus": ".opus", "mp3": ".mp3"}.get(fmt, ".wav")
    candidates = [src.with_suffix(ext)] + ([src.with_suffix(".decoded" + ext)] if decode else [])
    for dst in candidates:
        if not dst.exists() and dst.resolve() != src.resolve():
            return dst
    raise FileExistsError(f"{candidates[-1]} exists; name the output with -o (an existing file is replaced only "
                          f"when named)")


def _body(args: argparse.Namespace) -> int:
    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such input file")
    decode = _is_rvq(src)
    if not decode and args.format:
        raise ValueError(f"--format applies to decoding; {src} is audio, which is encoded to .rvq")
    dst = output_path(src, decode, args.output, args.format)
    fmt = output_format(dst, args.format) if decode else None
    if dst.is_dir():
        raise IsADirectoryError(f"{dst}: is a directory; give a file name with -o")
    if not dst.parent.is_dir():
        raise FileNotFoundError(f"{dst}: the folder {dst.parent} does not exist")
    check_writable(dst)  # before the work: /proc and /sys pass os.access as root but take no new file
    model = Path(args.model)
    if not model.exists():
        raise FileNotFoundError(f"--model {model}: no such file or folder")
    t0 = time.perf_counter()
    line = decode_file(args, src, dst, fmt) if decode else encode_file(args, src, dst)
    if not args.quiet:
        print(f"{line} ({time.perf_counter() - t0:.2f} s)", file=sys.stderr)
    return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (see omnivoice.cli: 0 ok, 2 bad input, 1 failure, ...)."""
    args = parse_args(argv)
    return cli.run(lambda: _body(args))


if __name__ == "__main__":
    sys.exit(main())
