"""What memory keeps: a note is a sentence a person could have said, never only an id, a number or code.

One guard for every writer (POST and PATCH of entries, WriteEpisode). It refuses a text only when the
whole of it is junk: a refused real note costs the person more than a kept borderline one, so anything
with words around its ids, numbers or code ("My team's port is 8080.") is a note.
"""

from __future__ import annotations

import json
import re
import unicodedata

from agentfn.shared.problems import problem_type

PROBLEM_TYPE = problem_type("not-a-note")
WHY = "a note is a sentence a person could have said"

# Characters that wrap a token without being part of it ("(42)", "`46303f0d`,", "«3.14 ms»").
WRAPPING = ".,;:!?\"'()[]{}<>«»“”„‘’`*"

UUID = re.compile(r"(?:urn:uuid:)?\{?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\}?", re.I)
HEX = re.compile(r"[0-9a-f]+(?:-[0-9a-f]+)*", re.I)  # an entry id's prefix, a short hash
TOKEN = re.compile(r"[A-Za-z0-9_+/=.:-]{16,}")  # a key, a digest, a ULID, a timestamp
ID_LABELS = {"id", "uuid", "entry", "ref", "#"}
NUMBER = r"[-+−±~≈]?[$€£¥]?\d[\d.,:/'_-]*(?:[eE][-+]?\d+)?%?"
UNIT = r"(?:[°%]|[^\W\d_]{1,4}\.?)(?:/[^\W\d_]{1,4})?(?:\^?-?\d)?"  # ms, GB, km/h, °C, kn, s^-1
QUANTITY = re.compile(rf"{NUMBER}(?:{UNIT})?")
UNIT_ALONE = re.compile(UNIT)

CALL = re.compile(r"(?:await\s+)?[A-Za-z_$][\w.$]*(?:\[[^\]]*\])*\(.*\)[;,]?")  # print(6 * 7), os.getcwd()
ASSIGNMENT = re.compile(r"(?:(?:let|const|var|export|local)\s+)?[A-Za-z_$][\w.$\[\]'\"]*\s*(?:[-+*/%|&^]?=|:=)\s*(.+?);?")
LITERAL = re.compile(rf"{NUMBER}|true|false|none|null|nil|undefined|[\"'`].*|.*[()\[\]{{}}+*/<>=$;].*", re.I | re.S)
STATEMENT = re.compile(
    r"(?:def|class)\s+\w+\s*[(:].*"
    r"|import\s+[\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+)*;?"
    r"|from\s+[\w.]+\s+import\s+[\w.*,\s()]+"
    r"|#include\s*[<\"].*"
    r"|(?:if|elif|else|for|while|try|except|finally|with)\b.*:"
    r"|(?:function|func|fn)\s+\w+\s*\(.*"
    r"|(?:return|yield|raise|throw)\b.*[;()\[\]].*"
    r"|[\[\](){};]+"
    r"|(?:#|//).*"
)
SQL = re.compile(
    r"(?:select\s.+\sfrom\s|insert\s+into\s|update\s+\w+\s+set\s|delete\s+from\s|"
    r"(?:create|drop|alter)\s+(?:table|index|view)\s).*;",
    re.I | re.S,
)
COMMANDS = {
    "apt",
    "apt-get",
    "awk",
    "bash",
    "brew",
    "cargo",
    "cat",
    "cd",
    "chmod",
    "chown",
    "cp",
    "curl",
    "dnf",
    "docker",
    "du",
    "df",
    "echo",
    "export",
    "find",
    "git",
    "grep",
    "gzip",
    "helm",
    "kill",
    "kubectl",
    "ln",
    "ls",
    "make",
    "mkdir",
    "mv",
    "node",
    "npm",
    "npx",
    "pip",
    "pip3",
    "pnpm",
    "podman",
    "ps",
    "psql",
    "pytest",
    "python",
    "python3",
    "rm",
    "rmdir",
    "rsync",
    "scp",
    "sed",
    "sh",
    "ssh",
    "sudo",
    "systemctl",
    "journalctl",
    "tar",
    "terraform",
    "unzip",
    "uv",
    "wget",
    "yarn",
    "yum",
    "zsh",
}
SHELL_SIGN = re.compile(r"--?[A-Za-z][\w-]*(?:=.*)?|.*/.*|~.*|\|\|?|&&|>>?|<|;|.*\$\(.*|.*`.*")


def refusal(text: str) -> str | None:
    """Why the text is not a note (for the problem's detail), or None when it is one."""
    text = _visible(text)
    if not text:
        return f"the text is blank; {WHY}"
    if text.startswith("`") and text.endswith("`") and len(text) > 1:
        inner = text.strip("`").strip()
        if "```" in text or not inner:
            return f"the text is only code; {WHY}"
        return refusal(inner)
    if _json(text):
        return f"the text is only JSON data; {WHY}"
    if not any(c.isalnum() for c in text):
        return f"the text has no words; {WHY}"
    kinds = _token_kinds(text.split())
    if kinds is not None:
        return f"the text is only {'an id' if 'id' in kinds else 'a number'}; {WHY}"
    if _code(text):
        return f"the text is only code; {WHY}"
    return None


def _visible(text: str) -> str:
    """The text as a reader sees it: compatibility forms folded, invisible format characters dropped."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if unicodedata.category(c) != "Cf").strip()


def _json(text: str) -> bool:
    if text[0] not in "{[":
        return False
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def _token_kinds(tokens: list[str]) -> set[str] | None:
    """{'id', 'number'} found when every token is an id, a label of one, a number or a number's unit; else None."""
    kinds, previous = set(), None
    for raw in tokens:
        token = raw.strip(WRAPPING)
        if not any(c.isalnum() for c in token):
            kind = "punctuation"  # also = * ≈ ×: "6 * 7 = 42" is only numbers
        elif QUANTITY.fullmatch(token):
            kind = "number"
        elif _id(token):
            kind = "id"
        elif token.casefold() in ID_LABELS:
            kind = "label"
        elif previous == "number" and UNIT_ALONE.fullmatch(token):
            kind = "unit"
        else:
            return None
        kinds.add(kind)
        previous = kind if kind != "punctuation" else previous
    return kinds if kinds & {"id", "number"} else None


def _id(token: str) -> bool:
    if UUID.fullmatch(token):
        return True
    if HEX.fullmatch(token):
        digits = token.replace("-", "")
        return len(digits) >= 4 and any(c.isdigit() for c in digits) and any(c.isalpha() for c in digits)
    if TOKEN.fullmatch(token) and "://" not in token:
        return sum(c.isdigit() for c in token) >= 2 and sum(c.isalpha() for c in token) >= 2
    return False


def _words(tokens: list[str], after_flags: bool = True) -> int:
    """Tokens that are words of a language (any script, two letters or more; inner apostrophes and hyphens
    allowed). A flag is no word, nor its argument (`-n agentfn`) unless `after_flags`."""
    count, flag = 0, False
    for token in tokens:
        if token.startswith("-"):
            flag = True
            continue
        word = token.strip(WRAPPING).replace("'", "").replace("’", "").replace("-", "")
        if len(word) > 1 and word.isalpha() and (after_flags or not flag):
            count += 1
        flag = False
    return count


def _code(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0].strip()
    if SQL.fullmatch(text):
        return True
    if len(lines) == 1 and _shell(first):
        # "ls shows hidden files with -a." is a sentence about a command, not the command.
        words = _words(_unquoted(first).split()[1:], after_flags=False)
        return not (text[-1] in ".!?" and words >= 3 or words >= 4)
    tokens = text.split()
    words = _words(tokens)
    if words >= 3 and words * 2 >= len(tokens):
        return False  # mostly words: prose, whatever else it holds
    if len(lines) > 1 and STATEMENT.fullmatch(first):  # a block: a def/class/if header and its indented body
        return all(line[:1].isspace() or _code_line(line.strip()) for line in lines[1:])
    return all(_code_line(line.strip()) or _shell(line.strip()) for line in lines)


def _code_line(line: str) -> bool:
    if CALL.fullmatch(line) or STATEMENT.fullmatch(line):
        return True
    assignment = ASSIGNMENT.fullmatch(line)
    return bool(assignment and LITERAL.fullmatch(assignment.group(1).strip()))


def _shell(line: str) -> bool:
    tokens = line.split()
    if tokens[0] in ("$", "sudo") or tokens[0].startswith("./"):  # a prompt, a command run as root or from here
        return len(tokens) > 1
    return tokens[0] in COMMANDS and any(SHELL_SIGN.fullmatch(t) for t in tokens[1:])


def _unquoted(line: str) -> str:
    return re.sub(r"([\"'`]).*?\1", " ", line)
