"""``oml bench pii-fp``: how often the phone and e-mail rules fire on ordinary text (docs/personal-data.md).

No database. Three corpora, none of which holds a real phone number or mailbox:

- **locomo**: every string of the LoCoMo file (``--data``; default ``../shared/data/locomo/locomo-dev.json``):
  turns, session dates, observations, summaries, questions and answers;
- **pydoc**: CPython's pydoc topics (``pydoc_data.topics``), one text per paragraph: prose and code with
  version numbers, sizes, ranges and examples;
- **digits**: ``--sentences`` sentences from templates of ordinary numbers (sports scores, years, counts, prices,
  postal codes, flight numbers, measures), drawn with a fixed seed.

Every phone or e-mail finding there is a false positive. Printed per corpus: the texts, those with a digit, those
with a phone finding (and that share of the texts with a digit), those holding a written-out at-sign or dot
(`` at ``, ``[at]``, ``(at)``, ``[dot]`` …) and those with an e-mail finding, with up to ``--examples`` of each
kind of finding (corpus text, so run it on public corpora only). Then the written-out e-mail forms
:data:`OBFUSCATED` and how many of them :func:`oml.domain.pii.classify` finds (they must all be found).
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import emit, machine, machine_line

# Written-out forms of oncall@example.com people use to keep an address from scrapers.
OBFUSCATED = (
    "oncall [at] example [dot] com", "oncall[at]example[dot]com", "oncall (at) example (dot) com",
    "oncall(at)example(dot)com", "oncall at example dot com", "oncall AT example DOT com",
    "oncall [at] example.com", "oncall(at)example.com", "oncall {at} example {dot} com",
    "oncall <at> example <dot> com", "oncall [AT] example [DOT] com", "oncall @ example . com",
)
_WRITTEN_AT = re.compile(r"(?i)[\[({<]\s*at\s*[\])}>]|\sat\s|[\[({<]\s*dot\s*[\])}>]|\sdot\s")

_TEMPLATES = (
    "Finished the round at par {a4} {b1} after a long day on the course.",
    "They won {a2}-{b2} at halftime and {a3}-{b3} in the end.",
    "The {y} census counted {a5} people in the valley.",
    "Flight LH {a4} leaves at {h}:{m} from gate {a2}.",
    "Room {a3} on floor {b1}; the lift stops at {a2}.",
    "We walked {a1},{b3} steps and {a2} km today.",
    "The order came to ${a3}.{b2} with shipping.",
    "She ran {a2} km in {h}:{m}:{s} and placed {a3} of {a4}.",
    "Built between {y} and {y2}, restored in {y3}.",
    "Read chapter {a2}, pages {a3}-{b3}, before Monday.",
    "He scored {a3} out of {b3} on the final exam.",
    "The summit is at {a4} m, about {a5} ft.",
    "Our team finished in the top {a2} of {a5} entrants.",
    "The engine idles at {a4} rpm and peaks at {a5}.",
    "Postal code {a5}, near the old mill.",
    "Release {a1}.{b2}.{a2} fixed {a3} bugs.",
    "A batch of {a4} {b2} units shipped on the {d}th.",
    "Tickets cost {a2} euros, {b2} for children under {a1}.",
    "The marathon record is {h}:{m}:{s}, set in {y}.",
    "Between {a4} and {b4} visitors came each weekend.",
)


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randint(10 ** (n - 1) if n > 1 else 0, 10 ** n - 1))


def digit_sentences(n: int, seed: int = 20261205) -> list[str]:
    """``n`` ordinary sentences with numbers, the same for a seed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = _TEMPLATES[i % len(_TEMPLATES)]
        fields = {f"{k}{d}": _digits(rng, d) for k in "ab" for d in range(1, 6)}
        fields.update(y=str(rng.randint(1500, 2025)), y2=str(rng.randint(1500, 2025)), y3=str(rng.randint(1500, 2025)),
                      h=str(rng.randint(1, 12)), m=f"{rng.randint(0, 59):02d}", s=f"{rng.randint(0, 59):02d}",
                      d=str(rng.randint(4, 28)))
        out.append(t.format(**fields))
    return out


def locomo_strings(data: Path) -> list[str]:
    """Every string value in the LoCoMo file (turns, dates, observations, summaries, questions, answers)."""
    def walk(v: Any) -> Iterator[str]:
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for x in v.values():
                yield from walk(x)
        elif isinstance(v, list):
            for x in v:
                yield from walk(x)

    return [s for s in walk(json.loads(Path(data).read_text())) if s.strip()]


def pydoc_paragraphs() -> list[str]:
    from pydoc_data.topics import topics

    return [p for text in topics.values() for p in text.split("\n\n") if p.strip()]


def measure(texts: list[str], examples: int) -> dict[str, Any]:
    from oml.domain.pii import classify

    out: dict[str, Any] = {"texts": len(texts), "with_digit": 0, "phone": 0, "with_written_at": 0, "email": 0,
                           "examples": {"phone": [], "email": []}}
    for t in texts:
        out["with_digit"] += any(c.isdigit() for c in t)
        out["with_written_at"] += _WRITTEN_AT.search(t) is not None
        found = classify(t)
        for kind in ("phone", "email"):
            spans = [f for f in found if f.kind == kind]
            if spans:
                out[kind] += 1
                if len(out["examples"][kind]) < examples:
                    f = spans[0]
                    out["examples"][kind].append(t[max(0, f.start - 25):f.end + 25])
    out["phone_rate"] = round(out["phone"] / out["with_digit"], 5) if out["with_digit"] else 0.0
    out["email_rate"] = round(out["email"] / out["with_written_at"], 5) if out["with_written_at"] else 0.0
    return out


def run(data: Path | None, *, sentences: int = 2000, examples: int = 5) -> dict[str, Any]:
    """Measure the three corpora and the written-out forms; returns the numbers."""
    import phonenumbers
    import stdnum

    from oml.domain.pii import classify

    corpora = {"digits": digit_sentences(sentences), "pydoc": pydoc_paragraphs()}
    if data is not None:
        corpora = {"locomo": locomo_strings(data), **corpora}
    caught = [form for form in OBFUSCATED if any(f.kind == "email" for f in classify(form))]
    return {"corpora": {name: measure(texts, examples) for name, texts in corpora.items()},
            "obfuscated": {"forms": len(OBFUSCATED), "caught": len(caught),
                           "missed": [f for f in OBFUSCATED if f not in caught]},
            "machine": machine(phonenumbers=phonenumbers.__version__, stdnum=stdnum.__version__)}


def render(res: dict[str, Any]) -> list[str]:
    out = [f"{'corpus':<8}{'texts':>8}{'digit':>8}{'phone':>7}{'rate':>9}{'at/dot':>8}{'email':>7}{'rate':>9}"]
    for name, r in res["corpora"].items():
        out.append(f"{name:<8}{r['texts']:>8}{r['with_digit']:>8}{r['phone']:>7}{r['phone_rate']:>9.2%}"
                   f"{r['with_written_at']:>8}{r['email']:>7}{r['email_rate']:>9.2%}")
    for name, r in res["corpora"].items():
        for kind in ("phone", "email"):
            for ex in r["examples"][kind]:
                out.append(f"  {name} {kind}: …{ex}…")
    o = res["obfuscated"]
    out.append(f"written-out e-mail forms found: {o['caught']} of {o['forms']}"
               + (f" (missed: {'; '.join(o['missed'])})" if o["missed"] else ""))
    m = res["machine"]
    out.append(machine_line(m, f"phonenumbers {m['phonenumbers']}, python-stdnum {m['stdnum']}"))
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("pii-fp")
    def pii_fp(data: Path = typer.Option(None, "--data", dir_okay=False,
                                         help="LoCoMo JSON (default ../shared/data/locomo/locomo-dev.json; skipped when absent)"),
               sentences: int = typer.Option(2000, "--sentences", min=1, help="ordinary sentences with numbers"),
               examples: int = typer.Option(5, "--examples", min=0, help="findings shown per corpus and kind"),
               as_json: bool = JSON) -> None:
        """False positives of the phone and e-mail rules on ordinary text; the written-out e-mail forms caught."""
        from oml_tools.demo.corpus import default_data_path

        emit(run(data or default_data_path(), sentences=sentences, examples=examples), render, as_json)
