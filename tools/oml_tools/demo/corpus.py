"""The demo's input: LoCoMo conversations when the shared data folder exists, else CPython's pydoc topics.

LoCoMo (``<shared>/data/locomo/locomo-dev.json``; layout in its NOTICE.md):
each record is one conversation between two speakers over dated sessions;
each turn ``{speaker, dia_id, text}`` becomes one claim whose statement is
``({session date}) {speaker}: {text}`` (plus ``[image: caption]`` when the
turn shared one) and whose ``source.locator`` is the ``dia_id``. Questions
come from the record's ``qa`` list; only questions whose evidence turns were
all ingested are asked, and adversarial ones (category 5) are skipped.

The fallback, used when no LoCoMo file is found, ships with every CPython:
``pydoc_data.topics`` (the Language Reference's help topics). Each topic's
prose paragraphs are turns (``locator`` ``<topic>:<n>``), topics are grouped
into "conversations", and a topic's title becomes a question whose evidence
is the topic's first paragraph.

Public API::

    load(data: Path | None, conversations: int, turns: int, questions: int) -> Corpus
    default_data_path() -> Path | None
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from oml_tools import shared_dir

LOCOMO_FILE = Path("data") / "locomo" / "locomo-dev.json"


@dataclass(frozen=True)
class Turn:
    locator: str      # dia_id ("D1:3") or "<topic>:<n>"
    speaker: str
    session: int
    date: str         # the session's date as the corpus writes it
    text: str

    def statement(self) -> str:
        return f"({self.date}) {self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    evidence: tuple[str, ...]   # locators


@dataclass
class Conversation:
    key: str                   # workarea label: [a-z0-9][a-z0-9-]{0,62}
    title: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


@dataclass
class Corpus:
    name: str                  # "locomo" or "pydoc"
    source: str                # the file or module read
    uri_prefix: str            # source.uri = uri_prefix + conversation key + "/" + locator
    conversations: list[Conversation]

    @property
    def turns(self) -> int:
        return sum(len(c.turns) for c in self.conversations)

    @property
    def questions(self) -> int:
        return sum(len(c.questions) for c in self.conversations)


def default_data_path() -> Path | None:
    """The LoCoMo file when it exists, else None (the pydoc fallback)."""
    p = shared_dir() / LOCOMO_FILE
    return p if p.is_file() else None


def load(data: Path | None, conversations: int, turns: int, questions: int) -> Corpus:
    """The first ``conversations`` conversations, each cut to its first ``turns`` turns, with up to
    ``questions`` answerable questions each. ``data``: a LoCoMo JSON file or a folder holding
    ``locomo-dev.json``; None: the default path, else the pydoc fallback."""
    if data is not None:
        path = data / "locomo-dev.json" if data.is_dir() else data
        if not path.is_file():
            raise FileNotFoundError(f"no LoCoMo file at {path}")
        return _locomo(path, conversations, turns, questions)
    path = default_data_path()
    if path is not None:
        return _locomo(path, conversations, turns, questions)
    return _pydoc(conversations, turns, questions)


# ---------------------------------------------------------------- LoCoMo
_DIA = re.compile(r"^D(\d+):(\d+)$")


def _norm_dia(raw: str) -> list[str]:
    """NOTICE.md: a few evidence strings are malformed ("D8:6; D9:17", "D:11:26", "D30:05")."""
    out = []
    for part in re.split(r"[;,\s]+", str(raw)):
        part = part.strip().replace("D:", "D")
        m = _DIA.match(part)
        if m:
            out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def _locomo(path: Path, conversations: int, turns: int, questions: int) -> Corpus:
    records = json.loads(path.read_text(encoding="utf-8"))
    convs: list[Conversation] = []
    for rec in records[:conversations]:
        c = rec["conversation"]
        key = re.sub(r"[^a-z0-9-]", "-", str(rec["sample_id"]).lower()).strip("-")[:63] or f"conv-{len(convs) + 1}"
        conv = Conversation(key, f"LoCoMo {rec['sample_id']}: {c['speaker_a']} and {c['speaker_b']}")
        sessions = sorted((int(k.split("_")[1]), v) for k, v in c.items()
                          if re.fullmatch(r"session_\d+", k) and isinstance(v, list))
        for n, items in sessions:
            date = str(c.get(f"session_{n}_date_time", "")).strip()
            for t in items:
                if len(conv.turns) >= turns:
                    break
                text = str(t.get("text", "")).strip()
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                if text:
                    conv.turns.append(Turn(_norm_dia(t["dia_id"])[0] if _norm_dia(t["dia_id"]) else str(t["dia_id"]),
                                           str(t["speaker"]), n, date, text))
        have = {t.locator for t in conv.turns}
        for q in rec.get("qa", []):
            if len(conv.questions) >= questions:
                break
            ev = [d for e in q.get("evidence", []) for d in _norm_dia(e)]
            if q.get("category") == 5 or "answer" not in q or not ev or not set(ev) <= have:
                continue
            conv.questions.append(Question(str(q["question"]), str(q["answer"]), tuple(ev)))
        convs.append(conv)
    return Corpus("locomo", str(path), "locomo://", convs)


# ---------------------------------------------------------------- pydoc fallback
TOPICS_PER_CONVERSATION = 8


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in block.splitlines()]
        # Skip titles (underlined with ***/===), grammar productions and code: keep prose.
        if not lines or any(set(ln) <= set("*=-~^") and ln for ln in lines) or block.startswith("   "):
            continue
        para = " ".join(ln for ln in lines if ln)
        if len(para) >= 60:
            out.append(para[:900])
    return out


def _pydoc(conversations: int, turns: int, questions: int) -> Corpus:
    from pydoc_data.topics import topics

    names = sorted(topics)
    convs: list[Conversation] = []
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for i in range(conversations):
        group = names[i * TOPICS_PER_CONVERSATION:(i + 1) * TOPICS_PER_CONVERSATION]
        if not group:
            break
        conv = Conversation(f"pydoc-{i + 1}", f"Python {version} language reference: {', '.join(group)}")
        for n_topic, name in enumerate(group, 1):
            title = topics[name].strip().splitlines()[0].strip()
            paras = _paragraphs(topics[name])
            for n, para in enumerate(paras, 1):
                if len(conv.turns) >= turns:
                    break
                conv.turns.append(Turn(f"{name}:{n}", "Python Language Reference", n_topic, f"Python {version}", para))
            if paras and len(conv.questions) < questions and len(conv.turns) and conv.turns[-1].locator.startswith(f"{name}:"):
                conv.questions.append(Question(f"What does the documentation say about {title}?", paras[0][:120] + "…",
                                               (f"{name}:1",)))
        convs.append(conv)
    return Corpus("pydoc", "pydoc_data.topics", "python-docs://", convs)
