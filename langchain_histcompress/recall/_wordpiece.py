"""BERT's uncased WordPiece tokenizer: text to the token ids a BERT model was trained on.

Text is cleaned (control characters dropped, whitespace unified), CJK ideographs split
apart, lowercased and stripped of accents, split at whitespace and around punctuation; each
word is then cut greedily into the longest vocabulary pieces (``##`` marks a piece that
continues a word); a word that cannot be cut, or longer than 100 characters, is ``[UNK]``.
The ids of sentence-transformers' tokenizer for the same vocabulary, ``[CLS]`` and
``[SEP]`` included, truncated to ``max_length``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

__all__ = ["WordPieceTokenizer"]

_MAX_WORD = 100
"""Longer words are ``[UNK]`` without being cut."""

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_punctuation(char: str) -> bool:
    """ASCII symbols count as punctuation too (``$``, ``^``, ``|``...), as in BERT."""
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return any(low <= code <= high for low, high in _CJK_RANGES)


class WordPieceTokenizer:
    """Uncased WordPiece over a vocabulary (one piece per line of a BERT ``vocab.txt``).

    Example:
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "road", "##trip", "!", "cafe"]
        >>> tokenizer = WordPieceTokenizer(vocab)
        >>> tokenizer.encode("Roadtrip! Café xyz")
        [2, 4, 5, 6, 7, 1, 3]
        >>> WordPieceTokenizer(vocab, max_length=4).encode("road road road")
        [2, 4, 4, 3]
    """

    def __init__(self, vocab: Sequence[str], *, max_length: int = 256) -> None:
        """Index ``vocab``; ``max_length`` counts ``[CLS]`` and ``[SEP]`` (at least 2)."""
        self._ids = {piece: i for i, piece in enumerate(vocab)}
        missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in self._ids]
        if missing:
            msg = f"the vocabulary lacks the special tokens {missing}"
            raise ValueError(msg)
        if max_length < 2:
            msg = f"max_length must be at least 2, got {max_length}"
            raise ValueError(msg)
        self.max_length = max_length
        self._unknown = self._ids["[UNK]"]
        self._words: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        """``[CLS]``, the pieces of ``text`` (as many as fit), ``[SEP]``."""
        room = self.max_length - 2
        ids: list[int] = []
        for word in self._words_of(text):
            ids += self._pieces(word)
            if len(ids) >= room:
                break
        return [self._ids["[CLS]"], *ids[:room], self._ids["[SEP]"]]

    @staticmethod
    def _words_of(text: str) -> list[str]:
        kept: list[str] = []
        for char in text:
            code = ord(char)
            category = unicodedata.category(char)
            if char in "\t\n\r" or category == "Zs":
                kept.append(" ")
            elif code in (0, 0xFFFD) or category in ("Cc", "Cf"):
                continue
            elif _is_cjk(code):
                kept.append(f" {char} ")
            else:
                kept.append(char)
        words: list[str] = []
        for chunk in "".join(kept).split():
            plain = unicodedata.normalize("NFD", chunk.lower())
            plain = "".join(c for c in plain if unicodedata.category(c) != "Mn")
            start = 0
            for at, char in enumerate(plain):
                if _is_punctuation(char):
                    if at > start:
                        words.append(plain[start:at])
                    words.append(char)
                    start = at + 1
            if start < len(plain):
                words.append(plain[start:])
        return words

    def _pieces(self, word: str) -> tuple[int, ...]:
        """Longest vocabulary pieces first; remembered per word (a chat reuses its words)."""
        known = self._words.get(word)
        if known is not None:
            return known
        pieces: list[int] = []
        start = 0
        while start < len(word) and len(word) <= _MAX_WORD:
            for end in range(len(word), start, -1):
                found = self._ids.get(word[start:end] if start == 0 else f"##{word[start:end]}")
                if found is not None:
                    pieces.append(found)
                    start = end
                    break
            else:
                break
        result = tuple(pieces) if start == len(word) and word else (self._unknown,)
        if len(self._words) < 1 << 16:
            self._words[word] = result
        return result
