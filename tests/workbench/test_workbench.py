"""The workbench in a real browser, through the dev stack: sign-in at the dev issuer's page, a turn that streams
with its recalled entries and a step card answered by approval, the session's episode, the memory screen, the
tools' forms, the admin's tables; and what the page must never do (run a note as markup, keep the token where
another site's script could read it, be framed, grow past its weight)."""

from __future__ import annotations

import re
import unicodedata

import pytest
import requests
from playwright.sync_api import Page, expect
from support.format_characters import FORMAT_CHARACTERS, HIDDEN
from support.workbench import shot

PEOPLE = "developers,platform-users"
ADMINS = "developers,platform-users,platform-admins"


def sign_in(page: Page, stack, subject: str, groups: str = PEOPLE) -> None:
    page.goto(stack.url + "/")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(stack.issuer) + r"/authorize.*"))
    page.get_by_label(re.compile("subject", re.I)).fill(subject)
    for group in groups.split(","):
        page.get_by_label(group, exact=True).check()
    page.get_by_role("button", name=re.compile("sign in", re.I)).click()
    page.wait_for_url(stack.url + "/")
    expect(page.locator("#who-name")).to_contain_text(subject)


def add_note(stack, token: str, text: str, kind: str = "preference", source: str = "workbench test") -> dict:
    answer = stack.door("POST", "/v1/entries", token, json={"kind": kind, "text": text, "source": source})
    assert answer.status_code == 201, answer.text
    return answer.json()


def say(page: Page, text: str) -> None:
    page.get_by_label("Your message").fill(text)
    page.get_by_role("button", name="Send").click()


def test_sign_in_goes_through_the_dev_issuers_page_and_keeps_the_token_out_of_reach(page, stack):
    page.goto(stack.url + "/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    shot(page, "1-sign-in")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(stack.issuer) + r"/authorize.*"))
    expect(page.locator("body")).to_contain_text(re.compile("development", re.I))
    shot(page, "2-dev-issuer")
    page.goto(stack.url + "/")
    sign_in(page, stack, "wb-alice")
    expect(page.locator("#who-name")).to_have_text("wb-alice (developers, platform-users)")
    expect(page.get_by_label("Agent")).to_contain_text("code-reviewer")
    assert "code=" not in page.url and "token" not in page.url
    # Nothing another script could read: no storage, no cookie holds the token (a JWT starts "eyJ").
    stored = page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie])")
    assert "eyJ" not in stored, stored
    assert not page.context.cookies()


def test_a_turn_streams_with_its_recall_cited_and_a_step_approved(page, stack):
    token = stack.token("wb-bea")
    note = add_note(stack, token, "Answer me in one short sentence.")
    script = stack.script(
        {"call": {"name": "run_code", "arguments": {"code": "print(6 * 7)"}}},
        {"text": f"It printed 42. [{note['id']}]", "chunks": 4},
    )
    sign_in(page, stack, "wb-bea")
    page.get_by_label("Agent").select_option("code-reviewer")
    say(page, f"script:{script} Run print(6 * 7) please; how long should your answers be?")
    card = page.locator(".card[data-step='1']")
    expect(card).to_have_attribute("data-status", "needs_approval")
    expect(card).to_contain_text("run_code")
    expect(card).to_contain_text('"code": "print(6 * 7)"')
    expect(card).to_be_focused()  # the call to read first; Approve is a Tab away
    shot(page, "3-chat-approval")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".answer").last).to_have_text(f"It printed 42. [{note['id']}]")
    ran = page.locator(".reply").last.locator(".card[data-step='1']")
    expect(ran).to_have_attribute("data-status", "ok")
    expect(ran).to_contain_text("42")
    recalled = page.locator(".reply").last.locator(".recalled li")
    expect(recalled).to_have_count(1)
    expect(recalled.first).to_have_attribute("data-cited", "true")
    expect(recalled.first).to_contain_text("Answer me in one short sentence.")
    expect(page.locator(".meta").last).to_contain_text(re.compile(r"in / \d+ out tokens · 1 round · 1 step"))
    shot(page, "4-chat-answer")


def test_a_denied_step_is_declined_and_the_answer_goes_on(page, stack):
    script = stack.script({"call": {"name": "run_code", "arguments": {"code": "import os"}}}, {"text": "I did not run it."})
    sign_in(page, stack, "wb-cid")
    say(page, f"script:{script} run import os")
    page.get_by_role("button", name="Deny").click()
    expect(page.locator(".answer").last).to_have_text("I did not run it.")
    card = page.locator(".reply").last.locator(".card").first
    expect(card).to_have_attribute("data-status", "declined")
    # With nothing recalled, the answer and its figures stay under the card, in the reply's one column.
    for part in (".answer", ".meta"):
        assert page.locator(".reply").last.locator(part).bounding_box()["x"] == card.bounding_box()["x"], part


def test_ending_the_session_shows_the_episode_kept(page, stack):
    script = stack.script({"text": "Hello."}, {"text": "The person greeted the assistant and asked nothing else."})
    sign_in(page, stack, "wb-dan")
    say(page, f"hello script:{script}")
    expect(page.locator(".answer").last).to_have_text("Hello.")
    page.get_by_role("button", name="End session").click()
    episode = page.get_by_role("article", name="Episode kept")
    expect(episode).to_contain_text("The person greeted the assistant and asked nothing else.")
    shot(page, "5-episode")
    listed = stack.door("GET", "/v1/entries", stack.token("wb-dan"), params={"kind": "episode"}).json()["entries"]
    assert [e["text"] for e in listed] == ["The person greeted the assistant and asked nothing else."]


def test_an_error_is_shown_as_the_problems_title_and_detail(page, stack):
    script = stack.script({"status": 500})
    sign_in(page, stack, "wb-eve")
    say(page, f"script:{script} hi")
    problem = page.locator(".reply .problem").last
    expect(problem).to_be_visible()
    assert "Traceback" not in problem.inner_text()
    expect(problem.locator("strong")).not_to_be_empty()


def test_an_ended_sign_in_says_so_and_offers_to_sign_in_again(page, stack):
    sign_in(page, stack, "wb-end")
    # The token's hour is up: memory's door answers 401, as it does for an expired token.
    page.route(
        "**/v1/entries*",
        lambda route: route.fulfill(
            status=401,
            content_type="application/problem+json",
            body='{"type": "about:blank", "title": "Unauthorized", "status": 401, "detail": "the token has expired"}',
        ),
    )
    page.locator("#nav").get_by_role("button", name="Memory").click()
    expect(page.locator("#notice")).to_contain_text("Your sign-in has ended")
    page.locator("#notice").get_by_role("button", name="Sign in again").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.locator("#nav")).to_be_hidden()


def test_memory_lists_corrects_forgets_searches_and_forgets_everything(page, stack):
    token = stack.token("wb-fay")
    kept = add_note(stack, token, "I review Go code mostly.", kind="fact", source="intro")
    other = add_note(stack, token, "Prefer tabs to spaces.")
    sign_in(page, stack, "wb-fay")
    page.locator("#nav").get_by_role("button", name="Memory").click()
    entry = page.locator(f".entries li[data-id='{kept['id']}']")
    expect(entry).to_contain_text("I review Go code mostly.")
    expect(entry).to_contain_text("source: intro")
    shot(page, "6-memory")

    entry.get_by_role("button", name="Correct").click()
    entry.get_by_label("Text").fill("I review Rust code mostly.")
    entry.get_by_role("button", name="Save").click()
    expect(page.locator(f".entries li[data-id='{kept['id']}']")).to_contain_text("I review Rust code mostly.")
    assert stack.door("GET", "/v1/entries", token).json()["entries"][-1]["text"] in (
        "I review Rust code mostly.",
        "Prefer tabs to spaces.",
    )

    page.get_by_label("Search").fill("Which language do I review?")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#entries-title")).to_contain_text("Recalled for")
    expect(page.locator(f".entries li[data-id='{kept['id']}']")).to_contain_text("similarity")

    page.get_by_label("Show").select_option("preference")
    item = page.locator(f".entries li[data-id='{other['id']}']")
    item.get_by_role("button", name="Forget").click()
    item.get_by_role("button", name="Keep it").click()  # a second thought: nothing is deleted
    assert stack.door("GET", "/v1/entries?kind=preference", token).json()["entries"]
    item.get_by_role("button", name="Forget").click()
    item.get_by_role("button", name="Yes, forget it").click()
    expect(page.get_by_text(f"Forgotten: {other['id'][:8]}")).to_be_visible()
    left = stack.door("GET", "/v1/entries", token).json()["entries"]
    assert [e["id"] for e in left] == [kept["id"]]

    button = page.get_by_role("button", name="Forget everything")
    expect(button).to_be_disabled()
    page.get_by_label("Confirmation").fill("forget")
    expect(button).to_be_disabled()
    page.get_by_label("Confirmation").fill("forget everything")
    button.click()
    expect(page.locator("#receipt")).to_contain_text(re.compile(r"Deleted 1 entry \(.*fact 1.*\)"))
    expect(page.get_by_role("heading", name="What stays")).to_be_visible()
    expect(page.locator("#stays li").filter(has_text="model.token_budgets")).to_contain_text("daily token budget")
    shot(page, "7-forget-all")
    assert stack.door("GET", "/v1/entries", token).json()["entries"] == []


def test_a_note_written_as_markup_shows_as_text(page, stack):
    token = stack.token("wb-gus")
    hostile = "<img src=x onerror=alert(1)>"
    note = add_note(stack, token, hostile, source="<b>bold</b>")
    sign_in(page, stack, "wb-gus")
    page.locator("#nav").get_by_role("button", name="Memory").click()
    entry = page.locator(f".entries li[data-id='{note['id']}']")
    expect(entry.locator(".text")).to_have_text(hostile)
    expect(entry).to_contain_text("source: <b>bold</b>")
    assert page.locator("main img").count() == 0 and page.locator("main b").count() == 0
    # and in the chat's recall panel, beside an answer
    script = stack.script({"text": "Noted."})
    page.locator("#nav").get_by_role("button", name="Chat").click()
    say(page, f"script:{script} <img src=x onerror=alert(1)>")
    expect(page.locator(".answer").last).to_have_text("Noted.")
    expect(page.locator(".you").last).to_have_text(f"script:{script} <img src=x onerror=alert(1)>")
    assert page.locator("main img").count() == 0


def test_tools_have_a_form_built_from_their_schema(page, stack):
    sign_in(page, stack, "wb-hal")
    page.locator("#nav").get_by_role("button", name="Tools").click()
    tool = page.locator("article[data-tool='platform_status']")
    expect(tool).to_be_visible()
    expect(page.locator("article[data-tool='run_code']")).to_have_count(0)  # never callable on its own
    tool.get_by_label(re.compile("^service")).fill("llm")
    tool.get_by_role("button", name="Call platform_status").click()
    expect(tool.locator(".result")).to_contain_text("llm is up")
    shot(page, "8-tools")


def test_an_admin_sees_who_may_call_what_and_what_happened(page, stack):
    script = stack.script({"text": "Hi."})
    sign_in(page, stack, "wb-ivy", ADMINS)
    say(page, f"script:{script} hi")
    expect(page.locator(".answer").last).to_have_text("Hi.")
    page.locator("#nav").get_by_role("button", name="Admin").click()
    grants = page.locator("#grants tbody tr")
    expect(grants.first).to_be_visible()
    expect(page.locator("#grants")).to_contain_text("code-reviewer")
    page.get_by_label("Filter").fill("site-guide")
    for row in grants.all():
        assert "site-guide" in row.inner_text()
    generations = page.locator("#generations tbody tr")
    expect(generations.first).to_be_visible()
    text = page.locator("#generations").inner_text()
    assert "wb-ivy" not in text and "hi" not in text.split()  # a hash for the subject, never the conversation
    shot(page, "9-admin")


def test_a_person_without_the_admin_group_has_no_admin_page(page, stack):
    said, asked = [], []
    page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    page.on("request", lambda request: asked.append(request.url))
    sign_in(page, stack, "wb-jon")
    expect(page.locator("#nav").get_by_role("button", name="Chat")).to_be_visible()
    expect(page.get_by_label("Agent")).to_contain_text("code-reviewer")
    for view in ("Memory", "Tools", "Chat"):
        page.locator("#nav").get_by_role("button", name=view).click()
    page.wait_for_load_state("networkidle")
    expect(page.locator("#nav").get_by_role("button", name="Admin")).to_be_hidden()
    # The page asks for the admin view only for a person in an admin group: nothing refused in the console.
    assert not [url for url in asked if "/v1/admin" in url], asked
    assert not [line for line in said if line.startswith("error")], said
    status = page.evaluate("""async () => (await fetch('/v1/admin/grants')).status""")
    assert status == 401  # without the person's token the door does not answer; with it, 403 (tests/model)


def test_the_page_is_held_to_its_site(stack):
    answer = requests.get(stack.url + "/", timeout=10)
    policy = answer.headers["Content-Security-Policy"]
    for rule in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"):
        assert rule in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert not re.search(r"<script(?![^>]*\bsrc=)", answer.text), "an inline script"
    assert not re.search(r"\son[a-z]+=", answer.text), "an inline event handler"
    assert not re.search(r"https?://", answer.text), "an asset from another site"
    weight = len(answer.content) + sum(
        len(requests.get(stack.url + f"/assets/{name}", timeout=10).content) for name in ("app.js", "app.css", "icon.svg")
    )
    assert weight < 150 * 1024, weight


@pytest.mark.parametrize("width", [360, 1280])
def test_readable_at_360_px_and_on_a_desktop_with_every_control_labelled(browser, stack, width):
    token = stack.token(f"wb-kim-{width}")
    add_note(stack, token, "Antworte mir auf Deutsch, bitte.", source="tour")
    add_note(stack, token, "I review Go services and prefer table-driven tests.", kind="fact", source="intro")
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    sign_in(page, stack, f"wb-kim-{width}")
    for view in ("Chat", "Memory", "Tools"):
        page.locator("#nav").get_by_role("button", name=view).click()
        page.wait_for_load_state("networkidle")
        assert page.evaluate("document.documentElement.scrollWidth") <= width, view
        unlabelled = page.evaluate("""[...document.querySelectorAll('input, select, textarea')]
            .filter((c) => c.offsetParent !== null && !c.labels.length && !c.getAttribute('aria-label'))
            .map((c) => c.id || c.outerHTML)""")
        assert not unlabelled, (view, unlabelled)
        if width == 360:
            shot(page, f"10-narrow-{view.lower()}")
    context.close()


def test_the_chat_works_from_the_keyboard(page, stack):
    script = stack.script({"call": {"name": "run_code", "arguments": {"code": "print(1)"}}}, {"text": "Done."})
    sign_in(page, stack, "wb-lea")
    expect(page.get_by_label("Your message")).to_be_focused()  # after sign-in, typing goes to the message
    page.keyboard.type(f"script:{script} print one")
    page.keyboard.press("Enter")
    expect(page.locator(".card[data-step='1']")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Approve")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".answer").last).to_have_text("Done.")
    expect(page.get_by_label("Your message")).to_be_focused()
    page.goto(stack.url + "/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the content"


def test_a_forget_card_shows_the_note_and_a_stray_enter_answers_nothing(page, stack):
    token = stack.token("wb-max")
    note = add_note(stack, token, "Prefer tabs to spaces in Go code.")
    script = stack.script({"call": {"name": "forget", "arguments": {"id": note["id"]}}}, {"text": "I kept it."})
    sign_in(page, stack, "wb-max")
    page.get_by_label("Agent").select_option("code-reviewer")
    say(page, f"script:{script} Forget my note about tabs and spaces in Go code.")
    card = page.locator(".card[data-step='1']")
    expect(card).to_have_attribute("data-status", "needs_approval")
    expect(card).to_contain_text(note["id"])
    expect(card.get_by_label("The note")).to_contain_text("Prefer tabs to spaces in Go code.")
    expect(card.locator(".note .kind")).to_have_text("preference")
    # The card has the focus, not Approve: a stray Enter (a message sent twice) answers nothing.
    expect(card).to_be_focused()
    expect(page.get_by_role("button", name="Approve")).not_to_be_focused()
    page.keyboard.press("Enter")
    page.wait_for_timeout(500)
    expect(card).to_have_attribute("data-status", "needs_approval")
    expect(card.get_by_role("button", name="Approve")).to_be_visible()
    assert [e["id"] for e in stack.door("GET", "/v1/entries", token).json()["entries"]] == [note["id"]]
    shot(page, "11-forget-approval")
    page.get_by_role("button", name="Deny").click()
    expect(page.locator(".answer").last).to_have_text("I kept it.")
    assert [e["id"] for e in stack.door("GET", "/v1/entries", token).json()["entries"]] == [note["id"]]


def escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def test_cards_show_format_characters_escaped_in_the_tool_its_arguments_and_the_note(page, stack):
    token = stack.token("wb-nia")
    note = add_note(stack, token, f"Prefer tabs to spaces in Go code.{HIDDEN} Always.")
    script = stack.script(
        {"call": {"name": f"x{HIDDEN}y", "arguments": {"code": f"print(1){HIDDEN}"}}},
        {"call": {"name": "forget", "arguments": {"id": note["id"]}}},
        {"text": "I kept it."},
    )
    sign_in(page, stack, "wb-nia")
    page.get_by_label("Agent").select_option("code-reviewer")
    say(page, f"script:{script} Forget my note about tabs and spaces in Go code.")
    forget = page.locator(".card[data-step='2']")
    expect(forget).to_have_attribute("data-status", "needs_approval")
    unknown = page.locator(".card[data-step='1']")
    shown = {
        "the tool's name": unknown.locator("header strong").inner_text(),
        "a step's arguments": unknown.locator("pre").first.inner_text(),
        "the forget card's note": forget.get_by_label("The note").inner_text(),
    }
    hidden = "".join(map(escape, HIDDEN))
    assert shown["the tool's name"] == f"step 1 · x{hidden}y"
    assert f"print(1){hidden}" in shown["a step's arguments"]
    assert f"Prefer tabs to spaces in Go code.{hidden} Always." in shown["the forget card's note"]
    missing = [
        (where, name) for where, text in shown.items() for name, c in FORMAT_CHARACTERS.items() if escape(c) not in text
    ]
    assert missing == []
    cards = page.locator(".card").all_inner_texts()
    assert [c for card in cards for c in card if unicodedata.category(c) == "Cf"] == []
    page.get_by_role("button", name="Deny").click()
    expect(page.locator(".answer").last).to_have_text("I kept it.")
    assert [e["id"] for e in stack.door("GET", "/v1/entries", token).json()["entries"]] == [note["id"]]
