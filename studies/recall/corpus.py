"""The recall study's corpus: the first set (corpus_base.json) grown by hand, split into tuning and held-out parts.

    .venv/bin/python studies/recall/corpus.py    # writes studies/recall/corpus.json

Everything here was written for this study (nothing is downloaded). The growth covers what the first set
lacked: short Croatian notes asked about in other grammatical forms, long episodes with their dates,
families of notes that differ in one detail (asked about one of them), questions that share no word with
their note, more cross-language questions and more questions with no right note.

The split is by note, and by family for notes that differ in one detail: every question goes to the part
of its right note, so a note whose questions tuned a setting never scores it. Which part a note (family)
goes to is fixed by a hash of its id, so the split does not depend on the order of this file; questions
with no right note are split by a hash of their text. Every note stays in the subject's memory for every
question (the other part's notes are distractors, as a subject's other notes are).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (id, language, kind, text, family): notes of one family differ in one detail and share a part.
NOTES = [
    # Short Croatian notes: asked about in other cases, other persons, other words.
    ("hr-41", "hr", "fact", "Mačka mi se zove Luna.", None),
    ("hr-42", "hr", "fact", "Alergična sam na orašaste plodove.", None),
    ("hr-43", "hr", "fact", "Vozim električni bicikl.", None),
    ("hr-44", "hr", "fact", "Sestra mi živi u Splitu.", None),
    ("hr-45", "hr", "fact", "Ne pijem kavu.", None),
    ("hr-46", "hr", "fact", "Imam dvoje djece.", None),
    ("hr-47", "hr", "fact", "Trčim polumaraton.", None),
    ("hr-48", "hr", "fact", "Sviram gitaru.", None),
    ("hr-49", "hr", "fact", "Vegetarijanka sam.", None),
    ("hr-50", "hr", "fact", "Stanujem na Trešnjevci.", None),
    ("hr-51", "hr", "preference", "Piši kratko.", None),
    ("hr-52", "hr", "preference", "Bez uvoda, odmah na stvar.", None),
    ("hr-53", "hr", "fact", "Radim u Infobipu.", None),
    ("hr-54", "hr", "fact", "Učim njemački.", None),
    # Short English notes.
    ("en-41", "en", "fact", "My dog is called Biscuit.", None),
    ("en-42", "en", "fact", "I'm allergic to penicillin.", None),
    ("en-43", "en", "fact", "I drive a 2019 Skoda Octavia.", None),
    ("en-44", "en", "fact", "I play chess on Lichess.", None),
    ("en-45", "en", "preference", "Explain like I'm new to the topic.", None),
    ("en-46", "en", "fact", "I commute by train.", None),
    # Families: one detail apart.
    ("en-47", "en", "fact", "The staging database is backed up every night at 02:00.", "backups"),
    ("en-48", "en", "fact", "The production database is backed up every hour.", "backups"),
    ("en-49", "en", "fact", "Marko's birthday is on 12 May.", "birthdays"),
    ("en-50", "en", "fact", "Marta's birthday is on 21 May.", "birthdays"),
    ("en-51", "en", "fact", "The search service runs 3 replicas in production.", "replicas"),
    ("en-52", "en", "fact", "The search service runs 1 replica in staging.", "replicas"),
    ("en-53", "en", "fact", "My personal GitHub account is anavuk.", "accounts"),
    ("en-54", "en", "fact", "My work GitHub account is ana-vuk-acme.", "accounts"),
    ("en-55", "en", "fact", "The sandbox AWS account ends in 4412.", "aws"),
    ("en-56", "en", "fact", "The production AWS account ends in 9087.", "aws"),
    ("hr-55", "hr", "fact", "Kćer vodim na plivanje utorkom.", "djeca"),
    ("hr-56", "hr", "fact", "Sina vodim na nogomet četvrtkom.", "djeca"),
    ("hr-57", "hr", "fact", "Zubar mi je dr. Horvat u Ilici.", "doktori"),
    ("hr-58", "hr", "fact", "Obiteljska liječnica mi je dr. Kovač na Trešnjevci.", "doktori"),
    ("hr-59", "hr", "fact", "Testni Redis ima 2 GB memorije.", "redis"),
    ("hr-60", "hr", "fact", "Produkcijski Redis ima 16 GB memorije.", "redis"),
    ("hr-61", "hr", "fact", "Registracija auta istječe u ožujku.", "rokovi"),
    ("hr-62", "hr", "fact", "Osobna iskaznica istječe u listopadu.", "rokovi"),
    # Longer facts and preferences, some to be asked about in words they do not use.
    (
        "en-57",
        "en",
        "fact",
        "The quarterly planning offsite is in Ljubljana this time, from 9 to 11 October, and the "
        "company books the hotel for everyone.",
        None,
    ),
    (
        "en-58",
        "en",
        "fact",
        "Our incident reviews are blameless: we write down what happened and what we change, never who was at fault.",
        None,
    ),
    ("en-59", "en", "preference", "When you write SQL for me, prefer CTEs over nested subqueries.", None),
    ("en-60", "en", "preference", "If a shell command deletes anything, warn me before showing it.", None),
    (
        "en-61",
        "en",
        "fact",
        "The mobile app is released every second Wednesday through the App Store and Google Play.",
        None,
    ),
    ("en-62", "en", "fact", "I take the 7:40 train and get to the office around 8:30.", None),
    ("hr-63", "hr", "fact", "Godišnji odmor ove godine koristim od 4. do 18. kolovoza, na Visu.", None),
    ("hr-64", "hr", "fact", "Novi zaposlenici prvi tjedan rade u paru s nekim iz tima.", None),
    ("hr-65", "hr", "preference", "Kad pišeš Bash skripte, uvijek dodaj set -euo pipefail.", None),
    ("hr-66", "hr", "fact", "Za osobne bilješke koristim Obsidian, a za poslovne Confluence.", None),
    ("hr-67", "hr", "fact", "Plaća sjeda desetog u mjesecu.", None),
    ("hr-68", "hr", "fact", "Parking u garaži ispod ureda plaća firma.", None),
    # Episodes: a session's summary, long, with its date.
    (
        "en-63",
        "en",
        "episode",
        "2026-03-04: We traced the ledger's slow month-end close to a missing index on "
        "entries(account_id, posted_at). Ana added the index in a migration, the close went from 40 minutes to 6, "
        "and we agreed to check the query plans of the month-end jobs before every release.",
        None,
    ),
    (
        "en-64",
        "en",
        "episode",
        "2026-04-17: Planning the home lab move to a rack. Decided on a 12U open frame, "
        "moving the three NUCs and the Synology into it, and a UPS that gives about 20 minutes; the Pi-hole stays on "
        "its own power so DNS survives the NUCs being rebooted.",
        None,
    ),
    (
        "en-65",
        "en",
        "episode",
        "2026-05-08: Reviewed the checkout service's Redis outage. The cache was full and "
        "evicting hot keys; we set maxmemory-policy to allkeys-lfu, doubled the memory, and added an alert at 80% "
        "use. Follow-up: ask the team whether sessions should move out of Redis.",
        None,
    ),
    (
        "en-66",
        "en",
        "episode",
        "2026-06-02: Drafted the KubeCon talk outline: why zero-downtime schema changes "
        "fail, expand and contract in three steps, a demo with a column rename, and what to monitor during the "
        "backfill. Ana wants the demo recorded in case the venue Wi-Fi fails.",
        None,
    ),
    (
        "en-67",
        "en",
        "episode",
        "2026-07-21: Compared two job queues for billing-sync. We chose a Postgres table "
        "with SKIP LOCKED over adding RabbitMQ, because the volume is low (a few thousand jobs a day) and it keeps "
        "one less system to run.",
        None,
    ),
    (
        "en-68",
        "en",
        "episode",
        "2026-09-12: Helped prepare Priya's one-to-one. Ana wants to move from the "
        "payments team to platform next year, and to lead the feature-flags rewrite; she'll bring a written "
        "proposal with a timeline.",
        None,
    ),
    (
        "en-69",
        "en",
        "episode",
        "2026-10-30: Debugged flaky integration tests in the notifications service. The "
        "cause was tests sharing one Kafka topic; each test now creates its own topic with a random suffix, and "
        "the suite went from 1 failure in 5 runs to none in 50.",
        None,
    ),
    (
        "hr-69",
        "hr",
        "episode",
        "2026-02-11: Dogovorili smo plan nadogradnje produkcijskog Kubernetesa na 1.30: "
        "prvo testno okruženje, tjedan dana praćenja, zatim produkcija u svibnju, čvor po čvor, izvan radnog "
        "vremena. Marina odobrava svaki korak.",
        None,
    ),
    (
        "hr-70",
        "hr",
        "episode",
        "2026-03-26: Analizirali smo zašto Galebovi izvještaji o zalihama kasne. Noćni "
        "posao čitao je cijelu tablicu kretanja robe; prebacili smo ga na inkrementalno čitanje po datumu i sad "
        "traje osam minuta umjesto sat vremena.",
        None,
    ),
    (
        "hr-71",
        "hr",
        "episode",
        "2026-05-19: Planirali smo obiteljsko ljeto. Na Vis idemo trajektom iz Splita, "
        "auto ostaje kod sestre, a za djecu smo rezervirali tečaj jedrenja u drugom tjednu.",
        None,
    ),
    (
        "hr-72",
        "hr",
        "episode",
        "2026-06-23: Pregledali smo troškove oblaka za kvartal. Najviše troše testna "
        "okruženja koja rade i vikendom; dogovoreno je da se automatski gase petkom u 20 sati i pale u ponedjeljak "
        "u 7.",
        None,
    ),
    (
        "hr-73",
        "hr",
        "episode",
        "2026-08-27: Pripremili smo uvođenje nove kolegice Petre. Prvi tjedan radi u "
        "paru s Ivanom na Galebu, dobiva pristup VPN-u i 1Passwordu prvog dana, a mentor joj je Tomislav.",
        None,
    ),
    (
        "hr-74",
        "hr",
        "episode",
        "2026-09-30: Riješili smo problem s certifikatima na testnom okruženju: "
        "cert-manager nije mogao obnoviti certifikat jer je DNS zapis pokazivao na stari load balancer. Zapis je "
        "ispravljen i dodan je alarm 14 dana prije isteka.",
        None,
    ),
    (
        "hr-75",
        "hr",
        "episode",
        "2026-11-05: Razgovarali smo o učenju Rusta. Plan je proći knjigu do poglavlja o "
        "vlasništvu do kraja godine i napisati mali CLI alat za kućni NAS kao vježbu.",
        None,
    ),
    (
        "en-70",
        "en",
        "episode",
        "2026-08-06: Went through the on-call handover. Pager rotation moves to weekly shifts "
        "starting Monday at 10:00, the secondary is whoever was primary the week before, and runbooks must link the "
        "dashboard they refer to.",
        None,
    ),
    (
        "en-71",
        "en",
        "episode",
        "2026-11-19: Picked a laptop for Ana's partner: a ThinkPad X1 Carbon with 16 GB, "
        "mostly for writing and video calls, bought through the company's employee discount.",
        None,
    ),
    (
        "hr-76",
        "hr",
        "episode",
        "2026-04-02: Dogovorili smo pravila za pull requestove u Galebu: najviše 400 "
        "promijenjenih redaka, opis s poveznicom na zadatak i barem jedan test za svaku ispravljenu grešku.",
        None,
    ),
    (
        "hr-77",
        "hr",
        "episode",
        "2026-10-14: Sređivali smo kućnu mrežu. MikroTik sada ima zasebnu mrežu za goste i "
        "za pametne uređaje, a NAS je dostupan samo iz glavne mreže i preko VPN-a.",
        None,
    ),
    ("hr-78", "hr", "fact", "Stand-up platformskog tima je u 9:15.", "standup"),
    ("hr-79", "hr", "fact", "Stand-up tima za plaćanja je u 9:45.", "standup"),
    ("en-72", "en", "fact", "The office VPN uses WireGuard.", "vpn"),
    ("en-73", "en", "fact", "The home lab VPN uses Tailscale.", "vpn"),
    ("en-74", "en", "fact", "I'm left-handed.", None),
    ("hr-80", "hr", "fact", "Krvna grupa mi je A+.", None),
]

# (language, right note id or None, question). The first set's questions keep their ids; these follow.
QUESTIONS = [
    ("hr", "hr-41", "kako se zove moja mačka?"),
    ("hr", "hr-41", "kako zovem svog kućnog ljubimca?"),
    ("en", "hr-41", "what's my cat's name?"),
    ("hr", "hr-42", "na što sam alergična?"),
    ("hr", "hr-42", "smijem li jesti kolač s lješnjacima?"),
    ("en", "hr-42", "do I have any food allergies?"),
    ("hr", "hr-43", "kakav bicikl vozim?"),
    ("hr", "hr-43", "čime se vozim po gradu?"),
    ("hr", "hr-44", "gdje živi moja sestra?"),
    ("en", "hr-44", "which city does my sister live in?"),
    ("hr", "hr-45", "piješ li kavu?"),
    ("hr", "hr-45", "da ti skuham espresso?"),
    ("hr", "hr-46", "koliko imam djece?"),
    ("en", "hr-46", "how many kids do I have?"),
    ("hr", "hr-47", "koju dužinu utrke trčim?"),
    ("hr", "hr-47", "bavim li se trčanjem?"),
    ("hr", "hr-48", "na kojem instrumentu sviram?"),
    ("hr", "hr-49", "jedem li meso?"),
    ("en", "hr-49", "am I vegetarian?"),
    ("hr", "hr-50", "u kojem kvartu stanujem?"),
    ("hr", "hr-50", "gdje mi je stan?"),
    ("hr", "hr-51", "kako dugi trebaju biti odgovori?"),
    ("hr", "hr-52", "trebaš li odgovor započeti uvodom?"),
    ("hr", "hr-53", "u kojoj firmi radim?"),
    ("en", "hr-53", "where do I work?"),
    ("hr", "hr-54", "koji strani jezik učim?"),
    ("en", "hr-54", "which language am I learning?"),
    ("en", "en-41", "what's my dog's name?"),
    ("en", "en-41", "what do I call my pet?"),
    ("hr", "en-41", "kako se zove moj pas?"),
    ("en", "en-42", "which medicine am I allergic to?"),
    ("en", "en-42", "can the doctor prescribe me amoxicillin?"),
    ("en", "en-43", "what car do I have?"),
    ("hr", "en-43", "koji auto vozim?"),
    ("en", "en-44", "where do I play chess online?"),
    ("en", "en-45", "how should you pitch explanations for me?"),
    ("en", "en-46", "how do I get to work?"),
    ("hr", "en-46", "kako putujem na posao?"),
    ("en", "en-47", "when is the staging database backed up?"),
    ("en", "en-47", "what time does the staging backup run?"),
    ("en", "en-48", "how often is the production database backed up?"),
    ("hr", "en-48", "koliko često se radi backup produkcijske baze?"),
    ("en", "en-49", "when is Marko's birthday?"),
    ("en", "en-50", "when is Marta's birthday?"),
    ("hr", "en-50", "kad je Marti rođendan?"),
    ("en", "en-51", "how many replicas does search have in production?"),
    ("en", "en-52", "how many search replicas run in staging?"),
    ("en", "en-53", "what's my personal GitHub username?"),
    ("en", "en-54", "which GitHub account do I use for work?"),
    ("en", "en-55", "what are the last digits of the sandbox AWS account?"),
    ("en", "en-56", "which AWS account number is production?"),
    ("hr", "hr-55", "kojim danom kćer ide na plivanje?"),
    ("hr", "hr-56", "kad sin ima nogomet?"),
    ("en", "hr-56", "what day is my son's football practice?"),
    ("hr", "hr-57", "kako se zove moj zubar?"),
    ("hr", "hr-58", "tko mi je obiteljski liječnik?"),
    ("en", "hr-58", "who is my family doctor?"),
    ("hr", "hr-59", "koliko memorije ima Redis na testnom okruženju?"),
    ("hr", "hr-60", "koliko RAM-a ima produkcijski Redis?"),
    ("hr", "hr-61", "kad mi istječe registracija auta?"),
    ("hr", "hr-62", "do kad mi vrijedi osobna?"),
    ("en", "hr-62", "when does my ID card expire?"),
    ("en", "en-57", "where is the planning offsite this quarter?"),
    ("en", "en-57", "do I need to book my own hotel for the offsite?"),
    ("hr", "en-57", "gdje je kvartalno planiranje?"),
    ("en", "en-58", "how do we run incident reviews?"),
    ("en", "en-58", "after an outage, do we name who caused it?"),
    ("en", "en-59", "how do you structure SQL queries for me?"),
    ("en", "en-60", "what should you do before showing a destructive command?"),
    ("en", "en-61", "how often does the mobile app ship?"),
    ("hr", "en-61", "koliko često izlazi mobilna aplikacija?"),
    ("en", "en-62", "which train do I catch in the morning?"),
    ("en", "en-62", "what time do I usually arrive at the office?"),
    ("hr", "hr-63", "kad idem na godišnji?"),
    ("hr", "hr-63", "gdje ljetujem ove godine?"),
    ("en", "hr-63", "when is my summer vacation?"),
    ("hr", "hr-64", "kako uvodimo nove ljude u tim?"),
    ("en", "hr-64", "how do new hires spend their first week?"),
    ("hr", "hr-65", "što uvijek dodaješ u shell skripte?"),
    ("en", "hr-65", "what should every bash script you write start with?"),
    ("hr", "hr-66", "u kojoj aplikaciji vodim osobne bilješke?"),
    ("hr", "hr-66", "gdje pišemo poslovnu dokumentaciju?"),
    ("hr", "hr-67", "kojeg dana stiže plaća?"),
    ("en", "hr-67", "when do I get paid each month?"),
    ("hr", "hr-68", "tko plaća parkiranje kod posla?"),
    ("en", "en-63", "what did we find about the slow month-end close?"),
    ("en", "en-63", "which index did we add to the ledger in March?"),
    ("hr", "en-63", "zašto je zatvaranje mjeseca u ledgeru bilo sporo?"),
    ("en", "en-64", "what did I decide about the home lab rack?"),
    ("en", "en-64", "how long will the UPS keep the lab running?"),
    ("en", "en-65", "what was the cause of the checkout Redis outage?"),
    ("en", "en-65", "which eviction policy did we pick for the cache?"),
    ("en", "en-66", "what's the outline of my conference talk?"),
    ("en", "en-66", "why should the demo be recorded?"),
    ("en", "en-67", "why didn't we add RabbitMQ to billing-sync?"),
    ("en", "en-67", "how does billing-sync queue its jobs?"),
    ("hr", "en-67", "koji smo red poslova odabrali za billing-sync?"),
    ("en", "en-68", "what do I want to discuss with my manager about next year?"),
    ("en", "en-68", "which team do I want to join?"),
    ("en", "en-69", "why were the notifications tests flaky?"),
    ("en", "en-69", "how did we fix the flaky Kafka tests?"),
    ("hr", "hr-69", "kakav je plan nadogradnje Kubernetesa?"),
    ("hr", "hr-69", "kojim redom nadograđujemo klastere?"),
    ("en", "hr-69", "what's the plan for the Kubernetes upgrade?"),
    ("hr", "hr-70", "zašto su Galebovi izvještaji kasnili?"),
    ("hr", "hr-70", "koliko sad traje noćni posao za zalihe?"),
    ("en", "hr-70", "why were Galeb's stock reports late?"),
    ("hr", "hr-71", "kako putujemo na Vis?"),
    ("hr", "hr-71", "što smo rezervirali djeci za ljeto?"),
    ("hr", "hr-72", "što troši najviše novca u oblaku?"),
    ("hr", "hr-72", "kad se gase testna okruženja?"),
    ("en", "hr-72", "when are the test environments switched off?"),
    ("hr", "hr-73", "s kim Petra radi prvi tjedan?"),
    ("hr", "hr-73", "tko je mentor novoj kolegici?"),
    ("hr", "hr-74", "zašto cert-manager nije obnovio certifikat?"),
    ("en", "hr-74", "what broke certificate renewal in the test environment?"),
    ("hr", "hr-75", "kako planiram učiti Rust?"),
    ("hr", "hr-75", "koji alat želim napisati za vježbu?"),
    ("en", "en-70", "how does the on-call rotation work now?"),
    ("en", "en-70", "who is secondary on call?"),
    ("hr", "en-70", "kako sada izgleda raspored dežurstava?"),
    ("en", "en-71", "which laptop did we pick for my partner?"),
    ("hr", "en-71", "koji laptop smo izabrali za mog partnera?"),
    ("hr", "hr-76", "koliko redaka smije imati pull request u Galebu?"),
    ("hr", "hr-76", "koja su pravila za PR-ove?"),
    ("en", "hr-76", "what are the rules for Galeb pull requests?"),
    ("hr", "hr-77", "kako je podijeljena kućna mreža?"),
    ("en", "hr-77", "can guests on my home Wi-Fi reach the NAS?"),
    ("hr", "hr-78", "u koliko je sati stand-up platformskog tima?"),
    ("hr", "hr-79", "kad je jutarnji sastanak tima za plaćanja?"),
    ("en", "hr-79", "what time is the payments team's stand-up?"),
    ("en", "en-72", "which VPN does the office use?"),
    ("en", "en-73", "how do I connect to the home lab remotely?"),
    ("en", "en-74", "which hand do I write with?"),
    ("hr", "en-74", "jesam li ljevak?"),
    ("hr", "hr-80", "koja mi je krvna grupa?"),
    ("en", "hr-80", "what's my blood type?"),
    ("en", None, "what's my partner's name?"),
    ("hr", None, "u koliko je sati stand-up tima za Galeb?"),
    # Questions whose right note is in the first set, asked in words the note does not use.
    ("en", "en-06", "what hardware runs my virtual machines at home?"),
    ("en", "en-16", "where do copies of my lab database go?"),
    ("en", "en-19", "how many reviewers must sign off before I merge to payments?"),
    ("en", "en-26", "how long are logs retained?"),
    ("hr", "hr-18", "smiješ li mi pisati u subotu zbog posla?"),
    ("hr", "hr-27", "koju opremu imam za mrežu doma?"),
    ("hr", "hr-21", "u čemu pišem kod?"),
    ("hr", "hr-15", "koliko dugo traje jedna iteracija?"),
    ("hr", "hr-20", "kad nisam u uredu?"),
    ("en", "hr-23", "where's our office?"),
    ("en", "hr-16", "where do I keep my home server's SSH key?"),
    # No right note: near the notes' topics, never answered by one.
    ("en", None, "what's my cat's breed?"),
    ("en", None, "when is Marko's name day?"),
    ("en", None, "how often is the staging Redis backed up?"),
    ("en", None, "how many replicas does the notifications service run?"),
    ("en", None, "what's the last digit of the billing AWS account?"),
    ("en", None, "what did we decide about moving sessions out of Redis?"),
    ("en", None, "where was last year's offsite?"),
    ("en", None, "what train do I take home in the evening?"),
    ("en", None, "which hospital did I go to for the penicillin reaction?"),
    ("en", None, "how much did the home lab rack cost?"),
    ("en", None, "who presents the KubeCon demo with me?"),
    ("en", None, "what's my dog's breed?"),
    ("en", None, "which chess opening do I play?"),
    ("en", None, "when did we last upgrade RabbitMQ?"),
    ("en", None, "which day is the iOS app reviewed?"),
    ("hr", None, "koje je pasmine moj pas?"),
    ("hr", None, "koliko godina ima moja sestra?"),
    ("hr", None, "kad kćer ima nogomet?"),
    ("hr", None, "koliko memorije ima Redis za Galeb?"),
    ("hr", None, "kad mi istječe putovnica?"),
    ("hr", None, "gdje je zubar moje kćeri?"),
    ("hr", None, "kad je kvartalno planiranje sljedeće godine?"),
    ("hr", None, "koliko dugo traje trajekt do Visa?"),
    ("hr", None, "tko je mentor Ivanu?"),
    ("hr", None, "koliko košta tečaj jedrenja?"),
    ("hr", None, "koji model električnog bicikla imam?"),
    ("hr", None, "u kojem gradu živi moj brat?"),
    ("hr", None, "na koji datum izlazi nova verzija Galeba?"),
    ("hr", None, "koliko košta parking u centru?"),
    ("hr", None, "u koliko sati se gasi produkcija?"),
]


def part(key: str) -> str:
    """'tuning' or 'held-out', fixed by the key's hash (half and half in expectation)."""
    return "tuning" if hashlib.sha256(key.encode()).digest()[0] % 2 == 0 else "held-out"


def build() -> dict:
    base = json.loads((HERE / "corpus_base.json").read_text(encoding="utf-8"))
    notes = [dict(n, family=None) for n in base["notes"]]
    notes += [dict(id=i, lang=lang, kind=kind, text=text, family=family) for i, lang, kind, text, family in NOTES]
    ids = [n["id"] for n in notes]
    assert len(set(ids)) == len(ids), "a note id is used twice"
    for n in notes:
        n["part"] = part(n["family"] or n["id"])
    parts = {n["id"]: n["part"] for n in notes}
    questions = list(base["questions"])
    start = len(questions) + 1
    for k, (lang, note, text) in enumerate(QUESTIONS):
        assert note is None or note in parts, f"question {text!r}: no note {note}"
        questions.append(dict(id=f"q{start + k:03d}", lang=lang, text=text, note=note))
    for q in questions:
        q["part"] = parts[q["note"]] if q["note"] else part(q["text"])
    return {"notes": notes, "questions": questions}


def main() -> None:
    corpus = build()
    (HERE / "corpus.json").write_text(json.dumps(corpus, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    notes, questions = corpus["notes"], corpus["questions"]
    for name in ("tuning", "held-out"):
        qs = [q for q in questions if q["part"] == name]
        print(
            f"{name}: {sum(n['part'] == name for n in notes)} notes, {len(qs)} questions "
            f"({sum(q['note'] is None for q in qs)} with no right note)"
        )


if __name__ == "__main__":
    main()
