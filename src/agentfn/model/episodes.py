"""Ending a session (E1, E2): the conversation summarised on the fast tier, checked, kept as an episode.

The person sends the whole conversation once; it is read, summarised and dropped (never stored, never
logged). The summary is the person's own generation (budgeted, recorded, bounded in tokens), must pass `faults()`
(the episode rules, checked after generation: a summary that fails keeps its longest run of first sentences that
passes; one that fails in its first sentence is written again once). When both break the rules, the episode is
told from the session's own record instead (`recorded`: which tools its turns ran and how each ended, in the
person's language), so a session that did something always keeps one; a session that did nothing and whose
summaries broke the rules keeps nothing, and is told so. Either is kept by `WriteEpisode` as the model function
itself (its service identity, not the caller's).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from agentfn.shared.contract import STEP
from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError, problem_type
from agentfn.shared.pseudonym import conversation_hash

from . import prompt
from .engines import DeadlinePassed, EngineFailed, Tier
from .generation import Generation, as_problem
from .grounding import TOKEN, VERBS_HR, fold
from .language import NAMES, language, likely_language
from .registry import Agent
from .services import Services

MAX_WORDS, MAX_CHARS = 80, 500
# The summary's token bound: two or three sentences (a first sentence is 15-25 words, Croatian spends about two
# tokens a word), and no more: decoding is most of /end's time on a small engine (5 tokens/s for the offline
# default on one core), and a sentence the bound cuts short is dropped.
SUMMARY_TOKENS = 60
# What the summariser reads of one message (its head): an answer's long listing or page says little of the session,
# and every token read is time the person waits at /end.
MESSAGE_CHARS = 400

# The episode rules, one pattern each; a summary is refused for the first rule it breaks.
RULES: list[tuple[str, re.Pattern]] = [
    (
        "code",
        re.compile(
            r"`|[{}]|=>|==|!=|&&|\|\||\w\(\)|\w\([^)]*[=,'\"][^)]*\)|;\s*$|</?[a-z]+[ >]|"
            r"^\s*(?:def|class|import|return|SELECT)\s",
            re.M | re.I,
        ),
    ),
    (
        "command",
        re.compile(
            r"(?:^|\s)(?:sudo|kubectl|chmod|ssh|curl|wget|rm\s+-|git\s+(?:clone|push|pull|commit|checkout)|"
            r"(?:pip|npm|apt(?:-get)?)\s+install)\b|(?:^|\s)--?[a-z][\w-]*=?|\|\s*\w|^\s*[$#>]\s",
            re.M | re.I,
        ),
    ),
    (
        "address",
        re.compile(
            r"https?://|\bwww\.|\b[a-z0-9-]+\.(?:com|org|net|io|dev|ai|app|hr|de|eu|uk|co|info|biz|me|xyz|"
            r"cloud|local|internal|svc)\b|\b\d{1,3}(?:\.\d{1,3}){3}\b|(?:^|\s)(?:~|\.{1,2})?/[\w.-]+/",
            re.I,
        ),
    ),
    ("e-mail", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    (
        "credential",
        re.compile(
            r"\b(?:sk|pk|ghp|gho|xox[abp]|AKIA)[-_A-Za-z0-9]{8,}|\beyJ[\w-]{8,}\.|"
            r"\b(?=[A-Za-z0-9+/_=-]*\d)(?=[A-Za-z0-9+/_=-]*[A-Za-z])[A-Za-z0-9+/_=-]{24,}\b|"
            r"\b(?:password|passwd|lozinka|token|secret|api[ _-]?key)\s*[:=]\s*\S|"
            r"\b(?:password|passwd|lozinka|token|secret|key|ključ)\s+(?:is|je)\s+\S*[\d!@#$%^&*]",
            re.I,
        ),
    ),
    (
        "first or second person",
        re.compile(
            r"(?-i:\bI\b)|\b(?:I'm|I've|me|my|mine|myself|you|your|yours|yourself)\b|"
            # Croatian: the pronouns and possessives, the first and second person of "biti" ("sam zapamtio",
            # "odobrili ste"), the auxiliary of most past tenses, and the first person of the verbs people say of
            # themselves ("radim", "volimo").
            r"\b(?:ja|moj|moja|moje|tvoj|tvoja|tvoje|vaš|vaša|vaše|sam|smo|ste)\b|"
            rf"\b(?:{VERBS_HR})mo?\b",
            re.I,
        ),
    ),
]


def faults(summary: str, person_language: str | None, said: Sequence[str] = ()) -> list[str]:
    """The episode rules the summary breaks (empty: it may be kept); `said`: the conversation's messages, which the
    summary may not repeat. Pure: the case table tests it."""
    text = summary.strip()
    if not text:
        return ["empty"]
    found = []
    if len(text.split()) > MAX_WORDS:
        found.append(f"more than {MAX_WORDS} words")
    if len(text) > MAX_CHARS:
        found.append(f"more than {MAX_CHARS} characters")
    found += [name for name, pattern in RULES if pattern.search(text)]
    if repeats(text, said):
        found.append("a line of the conversation")
    if person_language is not None:
        written = language(text)
        if written is not None and written != person_language:
            found.append("not in the person's language")
    return found


SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
MIN_LINE_WORDS = 3  # a shorter sentence ("Thanks.") may be said in a summary's own words


def repeats(summary: str, said: Sequence[str]) -> bool:
    """A sentence of the summary is one of the conversation's, word for word: a small model echoes the transcript
    rather than telling it, and an episode is never a transcript (the person's lines in the first person, the
    assistant's answers as if they were the person's facts)."""
    lines = {
        words for message in said for line in SENTENCE_END.split(message) if len(words := _words(line)) >= MIN_LINE_WORDS
    }
    return any(_words(line) in lines for line in SENTENCE_END.split(summary))


def _words(text: str) -> tuple[str, ...]:
    return tuple(fold(w) for w in TOKEN.findall(text))


ENDS = (".", "!", "?", "…")
CLAUSE_END = re.compile(r"[,;:]\s")
MIN_CLAUSE_WORDS = 6  # a first clause shorter than this says too little to keep


def sentences(text: str) -> list[str]:
    """The summary's whole sentences; a last one cut short by the token bound is not one. When the bound cut the
    first sentence, its whole clauses are kept, closed as a sentence (none when they are too few to say anything)."""
    found = [part for part in SENTENCE_END.split(text.strip()) if part]
    if found and not found[-1].endswith(ENDS):
        cut = found.pop()
        if not found:
            clauses = [m.start() for m in CLAUSE_END.finditer(cut)]
            whole = cut[: clauses[-1]].rstrip() if clauses else ""
            if len(whole.split()) >= MIN_CLAUSE_WORDS:
                found.append(whole + ".")
    return found


def kept_part(summary: str, person_language: str | None, said: Sequence[str] = ()) -> str | None:
    """The longest run of the summary's first sentences that keeps every rule, or None when its first breaks one:
    a summary that runs on past a bound, or strays into a rule late, still keeps what it said well before."""
    whole = sentences(summary)
    for n in range(len(whole), 0, -1):
        candidate = " ".join(whole[:n])
        if not faults(candidate, person_language, said):
            return candidate
    return None


OPENERS = {
    "en": "The person",
    "hr": "Osoba",
    "de": "Die Person",
    "fr": "La personne",
    "es": "La persona",
    "it": "La persona",
    "sl": "Oseba",
    "pt": "A pessoa",
    "nl": "De persoon",
    "pl": "Osoba",
    "cs": "Osoba",
}
CITATION = re.compile(r"\s*\[[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\]", re.I)


def instructions(person_language: str | None, broken: list[str]) -> str:
    """The summariser's brief. No example summary: a small model copies an example into the person's memory."""
    name = NAMES.get(person_language or "", "the language the person wrote in")
    text = (
        f"You keep a short memory of a conversation between a person and an assistant. Write one summary of what "
        f"the person asked for and what was settled or found, in {name}, in the third person: the person and the "
        "assistant, never I, me, my, you or your. At most 30 words, in two short plain sentences. Describe code, "
        "commands and addresses in plain words instead of quoting them; no passwords, keys or tokens. Reply with the "
        "summary only."
    )
    if broken:
        text += f" The last summary was refused ({', '.join(broken)}): write it again, keeping the rules."
    return text


def request(person_language: str | None, conversation: str) -> str:
    """The summariser's message: the transcript as material, and the task again after it (small models follow the
    last instruction they read, and would otherwise answer the conversation's last question)."""
    name = NAMES.get(person_language or "", "the language the person wrote in")
    opener = OPENERS.get(person_language or "")
    start = f', starting with "{opener}"' if opener else ""
    return (
        f"The conversation to summarise:\n\n{conversation}\n\n"
        f"Write the third-person summary of this conversation now, in {name}{start}."
    )


# What an episode may not keep, put in plain words before the summariser reads the conversation: a small model
# copies the code and addresses it reads into its summary however it is told, and the rules refuse it twice.
PLAIN: list[tuple[re.Pattern, str]] = [
    (re.compile(r"```.*?(?:```|$)", re.S), "some code"),
    (re.compile(r"`[^`\n]+`"), "some code"),
    (re.compile(r"\b[A-Za-z_][\w.]*\([^()\n]*\)"), "some code"),  # a call: print(6 * 7)
    (dict(RULES)["e-mail"], "an e-mail address"),
    (re.compile(r"\bhttps?://\S+|\bwww\.\S+", re.I), "a web address"),
    (dict(RULES)["address"], "a web address"),  # what is left: a bare host, an IP address, a path
]


def plain(text: str) -> str:
    for pattern, words in PLAIN:
        text = pattern.sub(words, text)
    return text


def transcript(messages: list[dict[str, str]], tokens: int) -> str:
    """The conversation as lines, in plain words (`PLAIN`); the answers' citations (`[id]`) are dropped: an id
    means nothing in an episode."""
    kept = prompt.fit(messages, tokens)
    return "\n".join(f"{'Person' if m['role'] == 'user' else 'Assistant'}: {read(m)}" for m in kept)


def read(message: dict[str, str]) -> str:
    """A message as the summariser reads it."""
    return head(plain(CITATION.sub("", message["content"])))


def head(text: str) -> str:
    """The first MESSAGE_CHARS of a message, cut at a word."""
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS].rsplit(" ", 1)[0] + " ..."


def end_session(
    services: Services, caller: Caller, agent: Agent, messages: list[dict[str, str]], session_id: str | None
) -> dict[str, Any]:
    """Summarise, check, keep. Returns the episode Entry memory kept; raises a problem otherwise."""
    if agent.memory == "none":
        raise ProblemError(
            422,
            "Unprocessable Content",
            f"the agent {agent.name} keeps nothing about a person",
            type=problem_type("keeps-nothing"),
        )
    if not services.memory.configured:
        raise ProblemError(503, "Service Unavailable", "memory is not configured", type=problem_type("memory"))
    tier = services.tier(services.limits.episode_tier)
    deadline = time.monotonic() + tier.deadline
    said = " ".join(m["content"] for m in messages if m["role"] == "user")
    person = language(said)
    conversation = conversation_hash(agent.name, messages)
    steps = services.store.session_steps(caller.subject, agent.name, conversation)
    try:
        with Generation(
            services.store,
            kind="session_end",
            channel=STEP,
            subject=caller.subject,
            agent=agent.name,
            tier=tier.name,
            hold_seconds=tier.deadline + 30,
            daily_tokens=services.limits.daily_tokens,
            min_completion=services.limits.min_completion,
            conversation=conversation,
        ) as generation:
            try:
                summary = summarise(services, generation, tier, messages, person, deadline)
            except Unkept as unkept:
                # A short session is seldom told apart with confidence: its likeliest language chooses the record's words.
                summary = recorded(steps, person, person or likely_language(said))
                if summary is None:
                    raise ProblemError(
                        422,
                        "Unprocessable Content",
                        f"no summary of this session kept the episode rules ({', '.join(unkept.broken)}), not even in "
                        "its first sentence, twice, and its turns ran no tool: the session had nothing an episode may "
                        "hold, and nothing was kept",
                        type=problem_type("episode-rules"),
                        rules=unkept.broken,
                    ) from None
            return services.memory.write_episode(
                caller.subject, summary, session_id, timeout=max(deadline - time.monotonic(), 1.0)
            )
    except (DeadlinePassed, EngineFailed) as error:
        raise as_problem(error) from None


def summarise(
    services: Services,
    generation: Generation,
    tier: Tier,
    messages: list[dict[str, str]],
    person: str | None,
    deadline: float,
) -> str:
    """The summary that keeps the episode rules, written at most twice; `Unkept` when both break them."""
    text = transcript(messages, max(tier.context_tokens - SUMMARY_TOKENS - 200, 256))
    said = [read(m) for m in messages]  # what the summary may not repeat, as the summariser read it
    broken: list[str] = []
    for _attempt in range(2):
        convo = [
            {"role": "system", "content": instructions(person, broken)},
            {"role": "user", "content": request(person, text)},
        ]
        engine, cost = services.engine(tier), prompt.estimate(convo)
        with generation.round(engine, convo, None, deadline, cost=cost, completion=SUMMARY_TOKENS) as r:
            written = " ".join("".join(r).split())
        summary = " ".join(sentences(written))
        broken = faults(summary, person, said) if summary or not written else ["its first sentence cut short by the bound"]
        kept = summary if not broken else kept_part(summary, person, said)
        if kept:
            return kept
    raise Unkept(broken)


class Unkept(Exception):
    """No summary of the session kept the episode rules; `broken`: the rules the last one broke."""

    def __init__(self, broken: list[str]):
        super().__init__(", ".join(broken))
        self.broken = broken


# The episode of a session told from its record, a sentence for each tool and outcome its turns had (in the order they
# first had it): what the record holds is all it says. "{tool}" names a tool without a sentence of its own.
TOLD = {
    "en": {
        ("run_code", "ok"): "The assistant ran a program in the sandbox for the person.",
        ("run_code", "error"): "A program the person asked to run in the sandbox failed.",
        ("run_code", "declined"): "The person declined to run a program in the sandbox.",
        ("remember", "ok"): "The assistant kept a note the person asked for.",
        ("remember", "error"): "Keeping a note the person asked for failed.",
        ("remember", "declined"): "The person declined to keep a note.",
        ("forget", "ok"): "The assistant forgot a note at the person's request.",
        ("forget", "error"): "Forgetting a note the person asked about failed.",
        ("forget", "declined"): "The person declined to forget a note.",
        ("open_page", "ok"): "The assistant opened a web page for the person.",
        ("open_page", "error"): "A web page the person asked for could not be opened.",
        ("open_page", "declined"): "The person declined to open a web page.",
        ("platform_status", "ok"): "The assistant checked the platform's status for the person.",
        ("platform_status", "error"): "Checking the platform's status failed.",
        ("*", "ok"): "The assistant used the {tool} tool for the person.",
        ("*", "error"): "The {tool} tool failed for the person.",
        ("*", "declined"): "The person declined a call of the {tool} tool.",
    },
    "hr": {
        ("run_code", "ok"): "Asistent je za osobu pokrenuo program u sandboxu.",
        ("run_code", "error"): "Program koji je osoba htjela pokrenuti u sandboxu nije uspio.",
        ("run_code", "declined"): "Osoba je odbila pokretanje programa u sandboxu.",
        ("remember", "ok"): "Asistent je na zahtjev osobe spremio bilješku.",
        ("remember", "error"): "Spremanje bilješke koju je osoba tražila nije uspjelo.",
        ("remember", "declined"): "Osoba je odbila spremanje bilješke.",
        ("forget", "ok"): "Asistent je na zahtjev osobe izbrisao bilješku.",
        ("forget", "error"): "Brisanje bilješke koje je osoba tražila nije uspjelo.",
        ("forget", "declined"): "Osoba je odbila brisanje bilješke.",
        ("open_page", "ok"): "Asistent je za osobu otvorio web stranicu.",
        ("open_page", "error"): "Web stranica koju je osoba tražila nije se mogla otvoriti.",
        ("open_page", "declined"): "Osoba je odbila otvaranje web stranice.",
        ("platform_status", "ok"): "Asistent je za osobu provjerio stanje platforme.",
        ("platform_status", "error"): "Provjera stanja platforme nije uspjela.",
        ("*", "ok"): "Asistent je za osobu upotrijebio alat {tool}.",
        ("*", "error"): "Alat {tool} nije uspio.",
        ("*", "declined"): "Osoba je odbila poziv alata {tool}.",
    },
}


def recorded(steps: list[dict], person: str | None, words: str | None) -> str | None:
    """The session's episode from its record (the steps of its turns), told in the language `words` (English when
    unknown) and kept to the rules in the person's language (`person`, when known); None when its turns ran, kept or
    forgot nothing, or the language is one the record cannot be told in."""
    told = TOLD.get(words or "en")
    if told is None:
        return None
    said: list[str] = []
    for step in steps:
        tool, status = step.get("tool"), step.get("status")
        if status not in ("ok", "error", "declined") or not tool or tool == "(unknown)":
            continue
        sentence = (told.get((tool, status)) or told[("*", status)]).format(tool=tool)
        if sentence not in said:
            said.append(sentence)
    kept = ""
    for sentence in said:  # as many as the episode's bounds hold
        if faults(f"{kept} {sentence}".strip(), person):
            break
        kept = f"{kept} {sentence}".strip()
    return kept or None
