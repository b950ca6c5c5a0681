"""Audio datasets for speech-to-text backends (backends.base.AudioSample), behind the QSL.

Specs, as given to `--dataset` when the backend takes audio (protocol openai-transcriptions):
    PATH.jsonl, or audio:PATH[,max_mb=M,wrong_above=P]
                      one JSON object a line: `audio` (a file, relative to the JSONL's folder),
                      optional `text` (what is said: word error rate's reference), `id`
    librispeech:DIR[,n=N,max_mb=M,wrong_above=P]
                      LibriSpeech's layout: DIR/SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac (or
                      .wav) with each chapter's SPEAKER-CHAPTER.trans.txt ("UTT-ID TRANSCRIPT"
                      lines); DIR may be one split (dev-clean) or a folder of splits
    synthetic-speech[:n=8,seconds=3,seed=0,voice=en-us,wpm=150]
                      espeak-ng speaking known sentences (the Harvard sentences, IEEE 1969), about
                      `seconds` each: word error rate has a truth without any download
    mlperf:whisper:MANIFEST
                      MLPerf's whisper set as its reference ships it (speech2text/utils/
                      repackage_librispeech.py): a JSON list of {transcript, files: [{fname,
                      speed, duration}], original_duration}, each fname absolute or relative to
                      the manifest's folder (the reference's --dataset_dir); clips over 30 s and
                      files of another speed are left out, as its manifest.py does

Every file is read once, when the dataset is built before the test, and kept as it is on
disk (its bytes are what is sent); its length comes from its header: WAV by the standard
library, FLAC and Ogg by soundfile (the `speech` extra). A file of another format, a
truncated or unreadable one, or one over `max_mb` (default 25, OpenAI's upload limit) is one
line naming the file and the row. `wrong_above` (percent, default 0) is the sample WER above
which a transcript counts as wrong (a failed task in cost per successful task): by default
any word error after Whisper's normalizer, the rule exact-match answers follow.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.base import AudioSample
from harness.data.datasets import Dataset
from harness.data.jsonl import json_objects
from harness.data.spec import DatasetSpec
from harness.errors import DatasetError

SPEECH_HINT = "pip install 'loadgen-harness[speech]'"
DEFAULT_MAX_MB = 25.0
#: MLPerf whisper's manifest.py max_duration (MAX_DURATION's default)
WHISPER_MAX_S = 30.0
#: The Harvard sentences (IEEE Recommended Practice for Speech Quality Measurements, 1969),
#: list 1 and 2: phonetically balanced English, the usual known text of speech tests.
SENTENCES = (
    "The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.", "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.", "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.", "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.", "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.", "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.", "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.", "A pot of tea helps to pass the evening.",
    "Smoky fires lack flame and heat.", "The soft cushion broke the man's fall.",
    "The salt breeze came across from the sea.", "The girl at the booth sold fifty bonds.",
)


@dataclass(frozen=True)
class Clip:
    sample: AudioSample
    #: where it came from, for messages: "FILE (ROW)"
    where: str


def audio_format(data: bytes) -> str | None:
    """The container by its magic bytes (a file's extension can lie); None: not one the reader knows."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    return None


def _wav_seconds(data: bytes, where: str) -> float:
    try:
        with wave.open(io.BytesIO(data)) as w:
            frames, rate, size = w.getnframes(), w.getframerate(), w.getsampwidth() * w.getnchannels()
            got = len(w.readframes(frames))
    except (wave.Error, EOFError) as e:
        raise DatasetError(f"{where}: not a WAV file the reader can read ({e}); write it as PCM WAV "
                           "(e.g. ffmpeg -i IN -c:a pcm_s16le OUT.wav)") from e
    if got < frames * size:
        raise DatasetError(f"{where}: truncated WAV: its header says {frames} frames, the file holds "
                           f"{got // max(size, 1)}; write the file again")
    if not rate:
        raise DatasetError(f"{where}: WAV with a sample rate of 0")
    return frames / rate


def _soundfile_seconds(data: bytes, fmt: str, where: str) -> float:
    try:
        import soundfile
    except ImportError as e:
        raise DatasetError(f"{where}: reading {fmt.upper()} needs soundfile: {SPEECH_HINT}") from e
    try:  # decoded whole once, here: a truncated file fails now, not at the server
        info = soundfile.info(io.BytesIO(data))
        frames = len(soundfile.read(io.BytesIO(data), dtype="int16")[0])
    except (RuntimeError, soundfile.LibsndfileError) as e:
        raise DatasetError(f"{where}: unreadable or truncated {fmt.upper()} ({e})") from e
    if info.frames and frames < info.frames:
        raise DatasetError(f"{where}: truncated {fmt.upper()}: {frames} of {info.frames} frames")
    return info.duration


def read_clip(path: Path, where: str, max_mb: float, reference: str | None = None) -> Clip:
    """One audio file read whole, checked, its length from its header."""
    at = f"{path} ({where})" if where else str(path)
    try:
        size = path.stat().st_size
        if size > max_mb * 1e6:
            raise DatasetError(f"{at}: {size / 1e6:.1f} MB, over the stated limit max_mb={max_mb:g} "
                               "(raise max_mb if the server takes it, or cut the file)")
        data = path.read_bytes()
    except OSError as e:
        raise DatasetError(f"{at}: cannot read the audio file ({e.strerror})") from e
    fmt = audio_format(data)
    if fmt is None:
        raise DatasetError(f"{at}: audio format not known (first bytes {data[:4]!r}); the reader takes WAV, FLAC "
                           "and Ogg: convert it (e.g. ffmpeg -i IN OUT.wav)")
    seconds = _wav_seconds(data, at) if fmt == "wav" else _soundfile_seconds(data, fmt, at)
    return Clip(AudioSample(data, fmt, seconds, path.name, reference), at)


class AudioDataset(Dataset):
    """Audio clips held in memory, as read (their bytes are what is sent)."""

    def __init__(self, name: str, clips: list[Clip], source: dict[str, Any], metric: str) -> None:
        self.name = name
        self.clips = clips
        self.source = source
        self.metric = metric
        super().__init__(len(clips))

    def _make(self, index: int) -> AudioSample:
        return self.clips[index].sample

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for c in self.clips:
            h.update(hashlib.sha256(c.sample.data).digest())
            h.update(json.dumps([c.sample.reference, c.sample.filename]).encode())
        return h.hexdigest()

    def references(self) -> list[dict[str, Any]] | None:
        """Each clip's transcript, scored by word error rate; None when the dataset has none."""
        if not any(c.sample.reference is not None for c in self.clips):
            return None
        return [{"reference": c.sample.reference, "metric": self.metric, "subset": None} for c in self.clips]

    def describe(self) -> dict[str, Any]:
        seconds = [c.sample.seconds for c in self.clips]
        return {**super().describe(), **self.source, "audio_seconds": sum(seconds),
                "audio_seconds_max": max(seconds), "bytes": sum(len(c.sample.data) for c in self.clips),
                "formats": sorted({c.sample.format for c in self.clips}),
                "with_reference": sum(c.sample.reference is not None for c in self.clips)}


def _number(params: dict[str, str], key: str, default: float, spec: str) -> float:
    try:
        value = float(params.get(key, default))
    except ValueError:
        raise DatasetError(f"dataset spec {spec!r}: {key} must be a number") from None
    if value < 0:
        raise DatasetError(f"dataset spec {spec!r}: {key} must be >= 0")
    return value


def _metric(kind: str, params: dict[str, str], spec: str) -> str:
    above = _number(params, "wrong_above", 0.0, spec)
    return f"{kind}:{above:g}" if above else kind


def _check_all_or_none(clips: list[Clip], where: str) -> None:
    given = [c.sample.reference is not None for c in clips]
    if any(given) and not all(given):  # a clip without a reference would silently not count
        raise DatasetError(f"{clips[given.index(False)].where}: no `text`, while {clips[given.index(True)].where} has one: "
                           f"give every row of {where} a transcript, or none")


def load_audio_jsonl(path: Path, params: dict[str, str], spec: str) -> AudioDataset:
    if not path.is_file():
        raise DatasetError(f"audio file list {path} does not exist")
    max_mb = _number(params, "max_mb", DEFAULT_MAX_MB, spec)
    clips = []
    for at, obj in json_objects(path, lambda row, line: f"{path}:{line}", "`audio` (a file)"):
        audio, text = obj.get("audio"), obj.get("text")
        if not isinstance(audio, str) or not audio:
            raise DatasetError(f"{at}: `audio` must be a file path (relative to {path.parent})")
        if text is not None and not isinstance(text, str):
            raise DatasetError(f"{at}: `text` must be the transcript, a string")
        unknown = set(obj) - {"audio", "text", "id"}
        if unknown:
            raise DatasetError(f"{at}: unknown field(s) {', '.join(sorted(unknown))}")
        clips.append(read_clip(path.parent / audio, at, max_mb, text))
    if not clips:
        raise DatasetError(f"audio file list {path} holds no rows")
    _check_all_or_none(clips, str(path))
    from harness.data.hashing import sha256_file

    return AudioDataset("audio", clips, {"path": str(path), "sha256": sha256_file(path)}, _metric("wer", params, spec))


def load_librispeech(root: Path, params: dict[str, str], spec: str) -> AudioDataset:
    if not root.is_dir():
        raise DatasetError(f"LibriSpeech folder {root} does not exist")
    max_mb = _number(params, "max_mb", DEFAULT_MAX_MB, spec)
    limit = int(_number(params, "n", 0, spec)) or None
    clips: list[Clip] = []
    for trans in sorted(root.rglob("*.trans.txt")):
        for lineno, line in enumerate(trans.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            at = f"{trans}:{lineno}"
            utt, _, text = line.strip().partition(" ")
            audio = next((trans.parent / f"{utt}{ext}" for ext in (".flac", ".wav") if (trans.parent / f"{utt}{ext}").is_file()), None)
            if audio is None:
                raise DatasetError(f"{at}: no {utt}.flac (or .wav) beside it: the folder is not LibriSpeech's layout, "
                                   "or is incomplete")
            clips.append(read_clip(audio, at, max_mb, text))
            if limit and len(clips) >= limit:
                break
        if limit and len(clips) >= limit:
            break
    if not clips:
        raise DatasetError(f"{root}: no SPEAKER-CHAPTER.trans.txt found below it (LibriSpeech's layout: "
                           "SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac beside SPEAKER-CHAPTER.trans.txt)")
    return AudioDataset("librispeech", clips, {"path": str(root)}, _metric("wer", params, spec))


def load_whisper_manifest(path: Path) -> AudioDataset:
    """MLPerf's whisper set, in its reference's layout (the module docstring)."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DatasetError(f"whisper manifest {path}: cannot read it ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise DatasetError(f"whisper manifest {path}: not valid JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(entries, list):
        raise DatasetError(f"whisper manifest {path}: expected a JSON list of samples")
    clips = []
    for i, entry in enumerate(entries):
        at = f"{path} entry {i}"
        try:
            transcript, files, duration = entry["transcript"], entry["files"], float(entry["original_duration"])
            fname = next(f["fname"] for f in files if f.get("speed", 1) == 1)
        except (KeyError, TypeError, ValueError, StopIteration):
            raise DatasetError(f"{at}: expected transcript, files [{{fname, speed}}] and original_duration, "
                               "as the reference's repackage_librispeech.py writes them") from None
        if duration > WHISPER_MAX_S:
            continue  # the reference's manifest.py filters these out
        file = Path(fname) if Path(fname).is_absolute() else path.parent / fname
        clips.append(read_clip(file, at, float("inf"), str(transcript)))
    if not clips:
        raise DatasetError(f"whisper manifest {path} lists no sample of {WHISPER_MAX_S:g} s or less")
    from harness.data.hashing import sha256_file

    return AudioDataset("mlperf:whisper", clips, {"path": str(path), "set": "whisper", "sha256": sha256_file(path)},
                        "whisper")


#: benchmarks.Benchmark.reader -> its reader, for the audio sets
AUDIO_READERS = {"whisper-manifest": load_whisper_manifest}


def speak(text: str, out: Path, voice: str = "en-us", wpm: int = 150) -> None:
    """espeak-ng says `text` into the WAV file `out`."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise DatasetError("synthetic-speech needs espeak-ng (Debian/Ubuntu: apt-get install espeak-ng)")
    done = subprocess.run([exe, "-v", voice, "-s", str(wpm), "-w", str(out), text], capture_output=True, text=True)
    if done.returncode != 0 or not out.is_file():
        raise DatasetError(f"espeak-ng failed (voice {voice!r}): {done.stderr.strip() or done.returncode}")


def load_synthetic_speech(params: dict[str, str], spec: str) -> AudioDataset:
    known = {"n", "seconds", "seed", "voice", "wpm", "wrong_above", "max_mb"}
    unknown = set(params) - known
    if unknown:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                           f"known: {', '.join(sorted(known))}")
    n, seconds = int(_number(params, "n", 8, spec)), _number(params, "seconds", 3, spec)
    seed, wpm, voice = int(_number(params, "seed", 0, spec)), int(_number(params, "wpm", 150, spec)), params.get("voice", "en-us")
    if n < 1 or wpm < 80:
        raise DatasetError(f"dataset spec {spec!r}: n must be >= 1 and wpm >= 80 (espeak-ng's slowest)")
    rng = random.Random(seed)
    clips = []
    with tempfile.TemporaryDirectory(prefix="harness-speech-") as tmp:
        for i in range(n):
            words: list[str] = []
            while not words or len(" ".join(words).split()) * 60 / wpm < seconds:
                words.append(rng.choice(SENTENCES))
            text = " ".join(words)
            wav = Path(tmp) / f"speech-{i:05d}.wav"
            speak(text, wav, voice, wpm)
            clips.append(read_clip(wav, f"synthetic sample {i}", _number(params, "max_mb", DEFAULT_MAX_MB, spec), text))
    return AudioDataset("synthetic-speech", clips, {"seed": seed, "voice": voice, "wpm": wpm, "seconds": seconds},
                        _metric("wer", params, spec))


def build_audio_dataset(spec: str) -> AudioDataset:
    """The dataset a spec names, for a backend that takes audio."""
    from harness.data.spec import parse_dataset_spec

    parsed: DatasetSpec = parse_dataset_spec(spec)
    if parsed.kind in ("audio", "jsonl") and parsed.path is not None:
        return load_audio_jsonl(parsed.path, parsed.params, spec)
    if parsed.kind == "librispeech" and parsed.path is not None:
        return load_librispeech(parsed.path, parsed.params, spec)
    if parsed.kind == "synthetic-speech":
        return load_synthetic_speech(parsed.params, spec)
    if parsed.kind == "mlperf" and parsed.params.get("set") == "whisper" and parsed.path is not None:
        return load_whisper_manifest(parsed.path)
    raise DatasetError(f"dataset {spec!r} holds no audio; the backend takes audio: use PATH.jsonl (rows with `audio`), "
                       "librispeech:DIR, synthetic-speech[:n=N,seconds=S] or mlperf:whisper:MANIFEST")
