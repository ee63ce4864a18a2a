"""Reading through the door: text and numbered links, windows and paging, the per-caller cache, charsets."""

import re

import psycopg
import pytest
from support.page import settle_audit

PUB = "http://www.pub.test"


def test_links_are_numbered_and_resolved_against_the_final_url(opener):
    page = opener(f"{PUB}/go/article").json()
    assert page["url"] == f"{PUB}/go/article"
    assert page["final_url"] == f"{PUB}/deep/dir/article"
    assert page["title"] == "A public article"
    assert page["links"] == [
        {"n": 1, "href": f"{PUB}/deep/dir/rel/next.html", "text": "relative link"},
        {"n": 2, "href": f"{PUB}/rooted", "text": "absolute-path link"},
        {"n": 3, "href": "https://elsewhere.example/page?x=1", "text": "external one"},
        {"n": 4, "href": f"{PUB}/deep/up.html", "text": "a parent link"},
        {"n": 5, "href": f"{PUB}/deep/dir/second%20page.html", "text": "link with a space"},
    ]
    text = page["text"]
    assert "a relative link [1]" in text and "the relative link again [1]" in text, "one href keeps one number"
    assert "an anchor on this page," in text and "a mail link," in text and "a script link and" in text
    assert "Home" not in text, "navigation is not the readable text"
    assert text.count("[") == 6


def test_a_link_is_followed_by_calling_again_with_its_href(opener, lab):
    link = opener(f"{PUB}/go/article").json()["links"][4]
    before = len(lab.public_hits())
    followed = opener(link["href"])
    assert followed.status_code == 200, followed.text
    assert [h["path"] for h in lab.public_hits()[before:]] == ["/deep/dir/second%20page.html"]


def test_a_base_href_is_honoured(opener):
    page = opener(f"{PUB}/base").json()
    assert page["links"] == [{"n": 1, "href": f"{PUB}/other/place/x.html", "text": "a relative link"}]


def test_windows_page_through_the_whole_text(opener, page_subject):
    whole = opener(f"{PUB}/long", subject=page_subject, window=40000).json()
    assert whole["next_offset"] is None and len(whole["text"]) == whole["total_chars"] > 20000
    offset, pieces, seen_links = 0, [], {}
    while offset is not None:
        page = opener(f"{PUB}/long", subject=page_subject, offset=offset, window=1000).json()
        assert page["offset"] == offset and page["total_chars"] == whole["total_chars"]
        assert 900 <= len(page["text"]) <= 1000 or page["next_offset"] is None
        markers = {int(n) for n in re.findall(r"\[(\d+)\]", page["text"])}
        assert {link["n"] for link in page["links"]} == markers, "a window lists the links it marks"
        for link in page["links"]:
            assert seen_links.setdefault(link["n"], link["href"]) == link["href"], "numbers agree across windows"
        pieces.append(page["text"])
        offset = page["next_offset"]
    assert "".join(pieces) == whole["text"]
    assert len(pieces) == pytest.approx(whole["total_chars"] / 1000, abs=4)
    assert sorted(seen_links) == list(range(1, 61))


def test_paging_neither_fetches_nor_counts_again(lab_fetcher, opener, issuer, lab, page_dsn, page_subject):
    before = len(lab.public_hits())
    offset = 0
    for _ in range(4):
        offset = opener(f"{PUB}/long?paging", subject=page_subject, offset=offset, window=2000).json()["next_offset"]
    assert len([h for h in lab.public_hits()[before:] if h["path"] == "/long?paging"]) == 1
    settle_audit(lab_fetcher.url, issuer)
    with psycopg.connect(page_dsn) as conn:
        (pages,) = conn.execute("SELECT pages FROM page.budget WHERE subject = %s", (page_subject,)).fetchone()
        (fetches,) = conn.execute("SELECT count(*) FROM page.audit WHERE subject = %s", (page_subject,)).fetchone()
    assert (pages, fetches) == (1, 1)


def test_another_caller_fetches_its_own_copy(opener, lab):
    before = len(lab.public_hits())
    opener(f"{PUB}/long?two-callers")
    opener(f"{PUB}/long?two-callers")
    assert len([h for h in lab.public_hits()[before:] if h["path"] == "/long?two-callers"]) == 2


def test_the_final_url_answers_from_the_cache_too(opener, lab, page_subject):
    first = opener(f"{PUB}/go/article?cached", subject=page_subject).json()
    before = len(lab.public_hits())
    again = opener(first["final_url"], subject=page_subject).json()
    assert again["text"] == first["text"] and lab.public_hits()[before:] == []


def test_an_offset_past_the_end_is_a_problem(opener, page_subject):
    total = opener(f"{PUB}/article", subject=page_subject).json()["total_chars"]
    assert opener(f"{PUB}/article", subject=page_subject, offset=total).json()["text"] == ""
    response = opener(f"{PUB}/article", subject=page_subject, offset=total + 1)
    assert response.status_code == 422
    assert response.json()["type"] == "https://agentfn.dev/problems/bad-offset"
    assert response.json()["total_chars"] == total


@pytest.mark.parametrize(
    ("path", "title", "words"),
    [
        ("/latin1", "Café", "Un café crème, s'il vous plaît"),
        ("/meta-charset", "Quotes", "\u201cCurly quotes\u201d"),
        ("/untyped-html", "A public article", "The first paragraph"),
        ("/gzip/article", "A public article", "The secret word"),
    ],
    ids=["charset from the header", "charset from a meta tag", "no content type", "gzip"],
)
def test_charsets_and_encodings_are_honoured(opener, path, title, words):
    page = opener(PUB + path).json()
    assert page["title"] == title and words in page["text"]


def test_plain_text_is_kept_as_it_is(opener):
    page = opener(f"{PUB}/text").json()
    assert page == {
        "url": f"{PUB}/text",
        "final_url": f"{PUB}/text",
        "title": "",
        "offset": 0,
        "next_offset": None,
        "text": "Plain text page.\nIt has two lines and no markup at all, which is fine.\n",
        "total_chars": 71,
        "links": [],
    }
