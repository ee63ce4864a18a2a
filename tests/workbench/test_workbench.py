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


def sign_in(browser_page: Page, workbench_stack, subject: str, groups: str = PEOPLE) -> None:
    browser_page.goto(workbench_stack.url + "/")
    browser_page.get_by_role("button", name="Sign in").click()
    browser_page.wait_for_url(re.compile(re.escape(workbench_stack.issuer) + r"/authorize.*"))
    browser_page.get_by_label(re.compile("subject", re.I)).fill(subject)
    for group in groups.split(","):
        browser_page.get_by_label(group, exact=True).check()
    browser_page.get_by_role("button", name=re.compile("sign in", re.I)).click()
    browser_page.wait_for_url(workbench_stack.url + "/")
    expect(browser_page.locator("#who-name")).to_contain_text(subject)


def add_note(workbench_stack, token: str, text: str, kind: str = "preference", source: str = "workbench test") -> dict:
    answer = workbench_stack.door("POST", "/v1/entries", token, json={"kind": kind, "text": text, "source": source})
    assert answer.status_code == 201, answer.text
    return answer.json()


def say(browser_page: Page, text: str) -> None:
    browser_page.get_by_label("Your message").fill(text)
    browser_page.get_by_role("button", name="Send").click()


def test_sign_in_goes_through_the_dev_issuers_page_and_keeps_the_token_out_of_reach(browser_page, workbench_stack):
    browser_page.goto(workbench_stack.url + "/")
    expect(browser_page.get_by_role("heading", name="Sign in")).to_be_visible()
    shot(browser_page, "1-sign-in")
    browser_page.get_by_role("button", name="Sign in").click()
    browser_page.wait_for_url(re.compile(re.escape(workbench_stack.issuer) + r"/authorize.*"))
    expect(browser_page.locator("body")).to_contain_text(re.compile("development", re.I))
    shot(browser_page, "2-dev-issuer")
    browser_page.goto(workbench_stack.url + "/")
    sign_in(browser_page, workbench_stack, "wb-alice")
    expect(browser_page.locator("#who-name")).to_have_text("wb-alice (developers, platform-users)")
    expect(browser_page.get_by_label("Agent")).to_contain_text("code-reviewer")
    assert "code=" not in browser_page.url and "token" not in browser_page.url
    # Nothing another script could read: no storage, no cookie holds the token (a JWT starts "eyJ").
    stored = browser_page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie])")
    assert "eyJ" not in stored, stored
    assert not browser_page.context.cookies()


def test_a_turn_streams_with_its_recall_cited_and_a_step_approved(browser_page, workbench_stack):
    token = workbench_stack.token("wb-bea")
    note = add_note(workbench_stack, token, "Answer me in one short sentence.")
    script = workbench_stack.script(
        {"call": {"name": "run_code", "arguments": {"code": "print(6 * 7)"}}},
        {"text": f"It printed 42. [{note['id']}]", "chunks": 4},
    )
    sign_in(browser_page, workbench_stack, "wb-bea")
    browser_page.get_by_label("Agent").select_option("code-reviewer")
    say(browser_page, f"script:{script} Run print(6 * 7) please; how long should your answers be?")
    card = browser_page.locator(".card[data-step='1']")
    expect(card).to_have_attribute("data-status", "needs_approval")
    expect(card).to_contain_text("run_code")
    expect(card).to_contain_text('"code": "print(6 * 7)"')
    expect(card).to_be_focused()  # the call to read first; Approve is a Tab away
    shot(browser_page, "3-chat-approval")
    browser_page.get_by_role("button", name="Approve").click()
    expect(browser_page.locator(".answer").last).to_have_text(f"It printed 42. [{note['id']}]")
    ran = browser_page.locator(".reply").last.locator(".card[data-step='1']")
    expect(ran).to_have_attribute("data-status", "ok")
    expect(ran).to_contain_text("42")
    recalled = browser_page.locator(".reply").last.locator(".recalled li")
    expect(recalled).to_have_count(1)
    expect(recalled.first).to_have_attribute("data-cited", "true")
    expect(recalled.first).to_contain_text("Answer me in one short sentence.")
    expect(browser_page.locator(".meta").last).to_contain_text(re.compile(r"in / \d+ out tokens · 1 round · 1 step"))
    shot(browser_page, "4-chat-answer")


def test_a_denied_step_is_declined_and_the_answer_goes_on(browser_page, workbench_stack):
    script = workbench_stack.script(
        {"call": {"name": "run_code", "arguments": {"code": "import os"}}}, {"text": "I did not run it."}
    )
    sign_in(browser_page, workbench_stack, "wb-cid")
    say(browser_page, f"script:{script} run import os")
    browser_page.get_by_role("button", name="Deny").click()
    expect(browser_page.locator(".answer").last).to_have_text("I did not run it.")
    card = browser_page.locator(".reply").last.locator(".card").first
    expect(card).to_have_attribute("data-status", "declined")
    # With nothing recalled, the answer and its figures stay under the card, in the reply's one column.
    for part in (".answer", ".meta"):
        assert browser_page.locator(".reply").last.locator(part).bounding_box()["x"] == card.bounding_box()["x"], part


def test_ending_the_session_shows_the_episode_kept(browser_page, workbench_stack):
    script = workbench_stack.script({"text": "Hello."}, {"text": "The person greeted the assistant and asked nothing else."})
    sign_in(browser_page, workbench_stack, "wb-dan")
    say(browser_page, f"hello script:{script}")
    expect(browser_page.locator(".answer").last).to_have_text("Hello.")
    browser_page.get_by_role("button", name="End session").click()
    episode = browser_page.get_by_role("article", name="Episode kept")
    expect(episode).to_contain_text("The person greeted the assistant and asked nothing else.")
    shot(browser_page, "5-episode")
    listed = workbench_stack.door("GET", "/v1/entries", workbench_stack.token("wb-dan"), params={"kind": "episode"}).json()[
        "entries"
    ]
    assert [e["text"] for e in listed] == ["The person greeted the assistant and asked nothing else."]


def test_an_error_is_shown_as_the_problems_title_and_detail(browser_page, workbench_stack):
    script = workbench_stack.script({"status": 500})
    sign_in(browser_page, workbench_stack, "wb-eve")
    say(browser_page, f"script:{script} hi")
    problem = browser_page.locator(".reply .problem").last
    expect(problem).to_be_visible()
    assert "Traceback" not in problem.inner_text()
    expect(problem.locator("strong")).not_to_be_empty()


def test_an_ended_sign_in_says_so_and_offers_to_sign_in_again(browser_page, workbench_stack):
    sign_in(browser_page, workbench_stack, "wb-end")
    # The token's hour is up: memory's door answers 401, as it does for an expired token.
    browser_page.route(
        "**/v1/entries*",
        lambda route: route.fulfill(
            status=401,
            content_type="application/problem+json",
            body='{"type": "about:blank", "title": "Unauthorized", "status": 401, "detail": "the token has expired"}',
        ),
    )
    browser_page.locator("#nav").get_by_role("button", name="Memory").click()
    expect(browser_page.locator("#notice")).to_contain_text("Your sign-in has ended")
    browser_page.locator("#notice").get_by_role("button", name="Sign in again").click()
    expect(browser_page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(browser_page.locator("#nav")).to_be_hidden()


def test_memory_lists_corrects_forgets_searches_and_forgets_everything(browser_page, workbench_stack):
    token = workbench_stack.token("wb-fay")
    kept = add_note(workbench_stack, token, "I review Go code mostly.", kind="fact", source="intro")
    other = add_note(workbench_stack, token, "Prefer tabs to spaces.")
    sign_in(browser_page, workbench_stack, "wb-fay")
    browser_page.locator("#nav").get_by_role("button", name="Memory").click()
    entry = browser_page.locator(f".entries li[data-id='{kept['id']}']")
    expect(entry).to_contain_text("I review Go code mostly.")
    expect(entry).to_contain_text("source: intro")
    shot(browser_page, "6-memory")

    entry.get_by_role("button", name="Correct").click()
    entry.get_by_label("Text").fill("I review Rust code mostly.")
    entry.get_by_role("button", name="Save").click()
    expect(browser_page.locator(f".entries li[data-id='{kept['id']}']")).to_contain_text("I review Rust code mostly.")
    assert workbench_stack.door("GET", "/v1/entries", token).json()["entries"][-1]["text"] in (
        "I review Rust code mostly.",
        "Prefer tabs to spaces.",
    )

    browser_page.get_by_label("Search").fill("Which language do I review?")
    browser_page.get_by_role("button", name="Search").click()
    expect(browser_page.locator("#entries-title")).to_contain_text("Recalled for")
    expect(browser_page.locator(f".entries li[data-id='{kept['id']}']")).to_contain_text("similarity")

    browser_page.get_by_label("Show").select_option("preference")
    item = browser_page.locator(f".entries li[data-id='{other['id']}']")
    item.get_by_role("button", name="Forget").click()
    item.get_by_role("button", name="Keep it").click()  # a second thought: nothing is deleted
    assert workbench_stack.door("GET", "/v1/entries?kind=preference", token).json()["entries"]
    item.get_by_role("button", name="Forget").click()
    item.get_by_role("button", name="Yes, forget it").click()
    expect(browser_page.get_by_text(f"Forgotten: {other['id'][:8]}")).to_be_visible()
    left = workbench_stack.door("GET", "/v1/entries", token).json()["entries"]
    assert [e["id"] for e in left] == [kept["id"]]

    button = browser_page.get_by_role("button", name="Forget everything")
    expect(button).to_be_disabled()
    browser_page.get_by_label("Confirmation").fill("forget")
    expect(button).to_be_disabled()
    browser_page.get_by_label("Confirmation").fill("forget everything")
    button.click()
    expect(browser_page.locator("#receipt")).to_contain_text(re.compile(r"Deleted 1 entry \(.*fact 1.*\)"))
    expect(browser_page.get_by_role("heading", name="What stays")).to_be_visible()
    expect(browser_page.locator("#stays li").filter(has_text="model.token_budgets")).to_contain_text("daily token budget")
    shot(browser_page, "7-forget-all")
    assert workbench_stack.door("GET", "/v1/entries", token).json()["entries"] == []


def test_a_note_written_as_markup_shows_as_text(browser_page, workbench_stack):
    token = workbench_stack.token("wb-gus")
    hostile = "<img src=x onerror=alert(1)>"
    note = add_note(workbench_stack, token, hostile, source="<b>bold</b>")
    sign_in(browser_page, workbench_stack, "wb-gus")
    browser_page.locator("#nav").get_by_role("button", name="Memory").click()
    entry = browser_page.locator(f".entries li[data-id='{note['id']}']")
    expect(entry.locator(".text")).to_have_text(hostile)
    expect(entry).to_contain_text("source: <b>bold</b>")
    assert browser_page.locator("main img").count() == 0 and browser_page.locator("main b").count() == 0
    # and in the chat's recall panel, beside an answer
    script = workbench_stack.script({"text": "Noted."})
    browser_page.locator("#nav").get_by_role("button", name="Chat").click()
    say(browser_page, f"script:{script} <img src=x onerror=alert(1)>")
    expect(browser_page.locator(".answer").last).to_have_text("Noted.")
    expect(browser_page.locator(".you").last).to_have_text(f"script:{script} <img src=x onerror=alert(1)>")
    assert browser_page.locator("main img").count() == 0


def test_tools_have_a_form_built_from_their_schema(browser_page, workbench_stack):
    sign_in(browser_page, workbench_stack, "wb-hal")
    browser_page.locator("#nav").get_by_role("button", name="Tools").click()
    tool = browser_page.locator("article[data-tool='platform_status']")
    expect(tool).to_be_visible()
    expect(browser_page.locator("article[data-tool='run_code']")).to_have_count(0)  # never callable on its own
    tool.get_by_label(re.compile("^service")).fill("llm")
    tool.get_by_role("button", name="Call platform_status").click()
    expect(tool.locator(".result")).to_contain_text("llm is up")
    shot(browser_page, "8-tools")


def test_an_admin_sees_who_may_call_what_and_what_happened(browser_page, workbench_stack):
    script = workbench_stack.script({"text": "Hi."})
    sign_in(browser_page, workbench_stack, "wb-ivy", ADMINS)
    say(browser_page, f"script:{script} hi")
    expect(browser_page.locator(".answer").last).to_have_text("Hi.")
    browser_page.locator("#nav").get_by_role("button", name="Admin").click()
    grants = browser_page.locator("#grants tbody tr")
    expect(grants.first).to_be_visible()
    expect(browser_page.locator("#grants")).to_contain_text("code-reviewer")
    browser_page.get_by_label("Filter").fill("site-guide")
    for row in grants.all():
        assert "site-guide" in row.inner_text()
    generations = browser_page.locator("#generations tbody tr")
    expect(generations.first).to_be_visible()
    text = browser_page.locator("#generations").inner_text()
    assert "wb-ivy" not in text and "hi" not in text.split()  # a hash for the subject, never the conversation
    shot(browser_page, "9-admin")


def test_a_person_without_the_admin_group_has_no_admin_page(browser_page, workbench_stack):
    said, asked = [], []
    browser_page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    browser_page.on("request", lambda request: asked.append(request.url))
    sign_in(browser_page, workbench_stack, "wb-jon")
    expect(browser_page.locator("#nav").get_by_role("button", name="Chat")).to_be_visible()
    expect(browser_page.get_by_label("Agent")).to_contain_text("code-reviewer")
    for view in ("Memory", "Tools", "Chat"):
        browser_page.locator("#nav").get_by_role("button", name=view).click()
    browser_page.wait_for_load_state("networkidle")
    expect(browser_page.locator("#nav").get_by_role("button", name="Admin")).to_be_hidden()
    # The page asks for the admin view only for a person in an admin group: nothing refused in the console.
    assert not [url for url in asked if "/v1/admin" in url], asked
    assert not [line for line in said if line.startswith("error")], said
    status = browser_page.evaluate("""async () => (await fetch('/v1/admin/grants')).status""")
    assert status == 401  # without the person's token the door does not answer; with it, 403 (tests/model)


def test_the_page_is_held_to_its_site(workbench_stack):
    answer = requests.get(workbench_stack.url + "/", timeout=10)
    policy = answer.headers["Content-Security-Policy"]
    for rule in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"):
        assert rule in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert not re.search(r"<script(?![^>]*\bsrc=)", answer.text), "an inline script"
    assert not re.search(r"\son[a-z]+=", answer.text), "an inline event handler"
    assert not re.search(r"https?://", answer.text), "an asset from another site"
    weight = len(answer.content) + sum(
        len(requests.get(workbench_stack.url + f"/assets/{name}", timeout=10).content)
        for name in ("app.js", "app.css", "icon.svg")
    )
    assert weight < 150 * 1024, weight


@pytest.mark.parametrize("width", [360, 1280])
def test_readable_at_360_px_and_on_a_desktop_with_every_control_labelled(browser, workbench_stack, width):
    token = workbench_stack.token(f"wb-kim-{width}")
    add_note(workbench_stack, token, "Antworte mir auf Deutsch, bitte.", source="tour")
    add_note(workbench_stack, token, "I review Go services and prefer table-driven tests.", kind="fact", source="intro")
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    sign_in(page, workbench_stack, f"wb-kim-{width}")
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


def test_the_chat_works_from_the_keyboard(browser_page, workbench_stack):
    script = workbench_stack.script({"call": {"name": "run_code", "arguments": {"code": "print(1)"}}}, {"text": "Done."})
    sign_in(browser_page, workbench_stack, "wb-lea")
    expect(browser_page.get_by_label("Your message")).to_be_focused()  # after sign-in, typing goes to the message
    browser_page.keyboard.type(f"script:{script} print one")
    browser_page.keyboard.press("Enter")
    expect(browser_page.locator(".card[data-step='1']")).to_be_focused()
    browser_page.keyboard.press("Tab")
    expect(browser_page.get_by_role("button", name="Approve")).to_be_focused()
    browser_page.keyboard.press("Enter")
    expect(browser_page.locator(".answer").last).to_have_text("Done.")
    expect(browser_page.get_by_label("Your message")).to_be_focused()
    browser_page.goto(workbench_stack.url + "/")
    browser_page.keyboard.press("Tab")
    assert browser_page.evaluate("document.activeElement.textContent") == "Skip to the content"


def test_a_forget_card_shows_the_note_and_a_stray_enter_answers_nothing(browser_page, workbench_stack):
    token = workbench_stack.token("wb-max")
    note = add_note(workbench_stack, token, "Prefer tabs to spaces in Go code.")
    script = workbench_stack.script({"call": {"name": "forget", "arguments": {"id": note["id"]}}}, {"text": "I kept it."})
    sign_in(browser_page, workbench_stack, "wb-max")
    browser_page.get_by_label("Agent").select_option("code-reviewer")
    say(browser_page, f"script:{script} Forget my note about tabs and spaces in Go code.")
    card = browser_page.locator(".card[data-step='1']")
    expect(card).to_have_attribute("data-status", "needs_approval")
    expect(card).to_contain_text(note["id"])
    expect(card.get_by_label("The note")).to_contain_text("Prefer tabs to spaces in Go code.")
    expect(card.locator(".note .kind")).to_have_text("preference")
    # The card has the focus, not Approve: a stray Enter (a message sent twice) answers nothing.
    expect(card).to_be_focused()
    expect(browser_page.get_by_role("button", name="Approve")).not_to_be_focused()
    browser_page.keyboard.press("Enter")
    browser_page.wait_for_timeout(500)
    expect(card).to_have_attribute("data-status", "needs_approval")
    expect(card.get_by_role("button", name="Approve")).to_be_visible()
    assert [e["id"] for e in workbench_stack.door("GET", "/v1/entries", token).json()["entries"]] == [note["id"]]
    shot(browser_page, "11-forget-approval")
    browser_page.get_by_role("button", name="Deny").click()
    expect(browser_page.locator(".answer").last).to_have_text("I kept it.")
    assert [e["id"] for e in workbench_stack.door("GET", "/v1/entries", token).json()["entries"]] == [note["id"]]


def escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def test_cards_show_format_characters_escaped_in_the_tool_its_arguments_and_the_note(browser_page, workbench_stack):
    token = workbench_stack.token("wb-nia")
    note = add_note(workbench_stack, token, f"Prefer tabs to spaces in Go code.{HIDDEN} Always.")
    script = workbench_stack.script(
        {"call": {"name": f"x{HIDDEN}y", "arguments": {"code": f"print(1){HIDDEN}"}}},
        {"call": {"name": "forget", "arguments": {"id": note["id"]}}},
        {"text": "I kept it."},
    )
    sign_in(browser_page, workbench_stack, "wb-nia")
    browser_page.get_by_label("Agent").select_option("code-reviewer")
    say(browser_page, f"script:{script} Forget my note about tabs and spaces in Go code.")
    forget = browser_page.locator(".card[data-step='2']")
    expect(forget).to_have_attribute("data-status", "needs_approval")
    unknown = browser_page.locator(".card[data-step='1']")
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
    cards = browser_page.locator(".card").all_inner_texts()
    assert [c for card in cards for c in card if unicodedata.category(c) == "Cf"] == []
    browser_page.get_by_role("button", name="Deny").click()
    expect(browser_page.locator(".answer").last).to_have_text("I kept it.")
    assert [e["id"] for e in workbench_stack.door("GET", "/v1/entries", token).json()["entries"]] == [note["id"]]
