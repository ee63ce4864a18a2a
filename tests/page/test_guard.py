"""The guard against real servers: one table of attacks, each with its expected refusal, through the door.

The internal targets are HTTP servers on every internal address and port of the lab's namespace that
record every connection: a bypass is any hit. The "public" servers stand at 44.0.0.10/11 and
2600:44::10 inside the same namespace; the guard under test is the shipped one, configured only
with the lab's DNS server and CA (and with proxies in its environment that it must ignore).
"""

import json
import time
from urllib.parse import quote

import pytest

PROBLEMS = "https://agentfn.dev/problems/"
STATUS = {
    "bad-url": 422,
    "blocked-address": 403,
    "dns-failure": 422,
    "too-many-redirects": 422,
    "too-large": 422,
    "timeout": 504,
    "unsupported-type": 422,
    "upstream-error": 502,
}
PUB = "http://www.pub.test"
TLS = "https://secure.pub.test"


def via(to: str, code: int = 302, base: str = PUB) -> str:
    return f"{base}/redirect?code={code}&to={quote(to, safe='')}"


ATTACKS = [
    # (id, url, expected refusal)
    # IPv4 in every spelling a socket accepts
    ("loopback", "http://127.0.0.1/", "blocked-address"),
    ("loopback, another one", "http://127.0.0.2/", "blocked-address"),
    ("short form", "http://127.1/", "blocked-address"),
    ("short form, three parts", "http://127.0.1/", "blocked-address"),
    ("decimal", "http://2130706433/", "blocked-address"),
    ("octal", "http://0177.0.0.1/", "blocked-address"),
    ("octal, whole", "http://017700000001/", "blocked-address"),
    ("hex", "http://0x7f.0.0.1/", "blocked-address"),
    ("hex, whole", "http://0x7f000001/", "blocked-address"),
    ("mixed hex and short", "http://0x7f.1/", "blocked-address"),
    ("mixed octal and hex", "http://0177.0x0.0.1/", "blocked-address"),
    ("metadata in hex", "http://0xa9fea9fe/latest/meta-data/", "blocked-address"),
    ("fullwidth digits", "http://１２７．０．０．１/", "blocked-address"),
    ("ideographic full stops", "http://127。0。0。1/", "blocked-address"),
    ("trailing dot", "http://127.0.0.1./", "blocked-address"),
    ("uppercase scheme", "HTTP://127.0.0.1/", "blocked-address"),
    ("unspecified 0.0.0.0", "http://0.0.0.0/", "blocked-address"),
    ("unspecified 0", "http://0/", "blocked-address"),
    ("private 10/8", "http://10.0.0.5/", "blocked-address"),
    ("private 172.16/12", "http://172.16.0.5/", "blocked-address"),
    ("private 192.168/16", "http://192.168.0.5/", "blocked-address"),
    ("CGNAT", "http://100.64.0.5/", "blocked-address"),
    ("metadata", "http://169.254.169.254/latest/meta-data/", "blocked-address"),
    ("metadata, ECS", "http://169.254.170.2/v2/credentials", "blocked-address"),
    ("metadata, Alibaba", "http://100.100.100.200/latest/meta-data/", "blocked-address"),
    ("Azure WireServer, a public address", "http://168.63.129.16/machine/?comp=goalstate", "blocked-address"),
    ("Azure WireServer in NAT64", "http://[64:ff9b::a83f:8110]/", "blocked-address"),
    ("Azure WireServer in 6to4", "http://[2002:a83f:8110::1]/", "blocked-address"),
    ("benchmarking", "http://198.18.0.5/", "blocked-address"),
    ("documentation", "http://192.0.2.5/", "blocked-address"),
    ("reserved class E", "http://240.0.0.5/", "blocked-address"),
    ("broadcast", "http://255.255.255.255/", "blocked-address"),
    ("multicast", "http://224.0.0.1/", "blocked-address"),
    ("not an IPv4 address", "http://256.0.0.1/", "bad-url"),
    # IPv6 and IPv4 inside IPv6
    ("IPv6 loopback", "http://[::1]/", "blocked-address"),
    ("IPv6 loopback, port 80", "http://[::1]:80/", "blocked-address"),
    ("IPv6 unspecified", "http://[::]/", "blocked-address"),
    ("IPv4-mapped", "http://[::ffff:127.0.0.1]/", "blocked-address"),
    ("IPv4-mapped, hex", "http://[::ffff:7f00:1]/", "blocked-address"),
    ("IPv4-mapped, long form", "http://[0:0:0:0:0:ffff:127.0.0.1]/", "blocked-address"),
    ("IPv4-mapped metadata", "http://[::ffff:169.254.169.254]/", "blocked-address"),
    ("IPv4-translated", "http://[::ffff:0:127.0.0.1]/", "blocked-address"),
    ("IPv4-compatible", "http://[::127.0.0.1]/", "blocked-address"),
    ("NAT64", "http://[64:ff9b::127.0.0.1]/", "blocked-address"),
    ("NAT64 of private", "http://[64:ff9b::a00:5]/", "blocked-address"),
    ("NAT64 local-use", "http://[64:ff9b:1:7f00:0:100::]/", "blocked-address"),
    ("6to4", "http://[2002:7f00:1::1]/", "blocked-address"),
    ("6to4 of private", "http://[2002:a00:5::1]/", "blocked-address"),
    ("Teredo", "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "blocked-address"),
    ("IPv6 metadata", "http://[fd00:ec2::254]/", "blocked-address"),
    ("unique local", "http://[fc00::5]/", "blocked-address"),
    ("site-local", "http://[fec0::5]/", "blocked-address"),
    ("link-local", "http://[fe80::1]/", "blocked-address"),
    ("zone id", "http://[fe80::1%25lo]/", "bad-url"),
    ("IPv6 multicast", "http://[ff02::1]/", "blocked-address"),
    ("IPv6 documentation", "http://[2001:db8::5]/", "blocked-address"),
    ("IPv6 discard-only", "http://[100::5]/", "blocked-address"),
    ("IPv6 without brackets", "http://::1/", "bad-url"),
    # names that resolve inward
    ("name to loopback", "http://loop.evil.test/", "blocked-address"),
    ("name to loopback, trailing dot", "http://loop.evil.test./", "blocked-address"),
    ("name to loopback, uppercase", "http://LOOP.EVIL.TEST/", "blocked-address"),
    ("AAAA to loopback", "http://loop6.evil.test/", "blocked-address"),
    ("name to private", "http://private.evil.test/", "blocked-address"),
    ("name to metadata", "http://meta.evil.test/latest/meta-data/", "blocked-address"),
    ("name to the Azure WireServer", "http://wireserver.evil.test/machine/", "blocked-address"),
    ("GCP's metadata name, whatever DNS answers", "http://metadata.google.internal/computeMetadata/v1/", "blocked-address"),
    ("name to CGNAT", "http://cgnat.evil.test/", "blocked-address"),
    ("name to 0.0.0.0", "http://zero.evil.test/", "blocked-address"),
    ("one good A, one bad A", "http://mixed.evil.test/article", "blocked-address"),
    ("good A, bad AAAA", "http://mixed46.evil.test/article", "blocked-address"),
    ("AAAA IPv4-mapped", "http://mapped.evil.test/", "blocked-address"),
    ("AAAA NAT64", "http://nat64.evil.test/", "blocked-address"),
    ("AAAA 6to4", "http://sixtofour.evil.test/", "blocked-address"),
    ("AAAA Teredo", "http://teredo.evil.test/", "blocked-address"),
    ("AAAA unique local metadata", "http://ula.evil.test/", "blocked-address"),
    ("CNAME chain to loopback", "http://cname.evil.test/", "blocked-address"),
    ("CNAME to metadata", "http://cname-meta.evil.test/", "blocked-address"),
    ("localhost", "http://localhost/", "blocked-address"),
    ("a .localhost name", "http://www.localhost/", "blocked-address"),
    ("fullwidth localhost", "http://ｌｏｃａｌｈｏｓｔ/", "blocked-address"),
    ("no such name", "http://nothing.test/", "dns-failure"),
    ("a name without addresses", "http://noaddress.pub.test/", "dns-failure"),
    # redirects
    ("redirect to loopback", via("http://127.0.0.1/"), "blocked-address"),
    ("redirect 307 to loopback", via("http://127.0.0.1/", 307), "blocked-address"),
    ("redirect 308 to metadata", via("http://169.254.169.254/latest/meta-data/", 308), "blocked-address"),
    ("redirect to decimal loopback", via("http://2130706433/"), "blocked-address"),
    ("redirect to the Azure WireServer", via("http://168.63.129.16/machine/"), "blocked-address"),
    ("redirect to IPv6 loopback", via("http://[::1]/"), "blocked-address"),
    ("redirect to a name to loopback", via("http://loop.evil.test/"), "blocked-address"),
    ("redirect, scheme-relative", via("//127.0.0.1/"), "blocked-address"),
    ("redirect over https to loopback", via("https://127.0.0.1/", base=TLS), "blocked-address"),
    ("redirect to file", via("file:///etc/passwd"), "bad-url"),
    ("redirect to gopher", via("gopher://127.0.0.1:6379/_INFO"), "bad-url"),
    ("redirect to ftp", via("ftp://www.pub.test/"), "bad-url"),
    ("redirect to dict", via("dict://127.0.0.1:11211/stats"), "bad-url"),
    ("redirect to javascript", via("javascript:alert(1)"), "bad-url"),
    ("redirect to an internal port", via("http://www.pub.test:6379/"), "bad-url"),
    ("redirect with userinfo", via("http://www.pub.test@127.0.0.1/"), "bad-url"),
    ("redirect https to http", via(f"{PUB}/article", base=TLS), "bad-url"),
    ("redirect loop", f"{PUB}/loop", "too-many-redirects"),
    ("six redirects", f"{PUB}/hops/6", "too-many-redirects"),
    # parsing tricks
    ("userinfo before loopback", "http://public@127.0.0.1/", "bad-url"),
    ("public name as userinfo", "http://www.pub.test@127.0.0.1/", "bad-url"),
    ("userinfo with password", "http://a:b@www.pub.test/", "bad-url"),
    ("fragment hides the host", "http://127.0.0.1#@www.pub.test/", "blocked-address"),
    ("query hides the host", "http://127.0.0.1?@www.pub.test/", "blocked-address"),
    ("backslash before @", "http://www.pub.test\\@127.0.0.1/", "bad-url"),
    ("backslash as slash", "http://127.0.0.1\\www.pub.test/", "bad-url"),
    ("encoded dots", "http://127%2e0%2e0%2e1/", "bad-url"),
    ("encoded host", "http://%31%32%37.0.0.1/", "bad-url"),
    ("internal port", "http://www.pub.test:22/", "bad-url"),
    ("internal port on loopback", "http://127.0.0.1:6379/", "bad-url"),
    ("gopher", "gopher://127.0.0.1:6379/_INFO", "bad-url"),
    ("file", "file:///etc/passwd", "bad-url"),
    ("dict", "dict://127.0.0.1:11211/", "bad-url"),
    ("missing slash", "http:/127.0.0.1/", "bad-url"),
    ("leading space", " http://127.0.0.1/", "bad-url"),
    ("space in the host", "http://127.0.0.1 .www.pub.test/", "bad-url"),
    ("tab in the URL", "http://127.0.0.1/\t", "bad-url"),
    ("newline for header injection", "http://www.pub.test/\r\nX-Injected: 1", "bad-url"),
    # what the page sends back
    ("gzip bomb", f"{PUB}/bomb/gzip", "too-large"),
    ("deflate bomb", f"{PUB}/bomb/deflate", "too-large"),
    ("raw deflate bomb", f"{PUB}/bomb/raw-deflate", "too-large"),
    ("too large, declared", f"{PUB}/big/declared", "too-large"),
    ("too large, chunked", f"{PUB}/big/chunked", "too-large"),
    ("slow-drip body", f"{PUB}/slow/body", "timeout"),
    ("slow-drip headers", f"{PUB}/slow/headers", "timeout"),
    ("silent server", f"{PUB}/silent", "timeout"),
    ("DNS that never answers", "http://blackhole.test/", "timeout"),
    ("too many headers", f"{PUB}/headers/many", "upstream-error"),
    ("a huge header line", f"{PUB}/headers/long", "upstream-error"),
    ("huge headers in total", f"{PUB}/headers/big", "upstream-error"),
    ("PDF by type", f"{PUB}/pdf", "unsupported-type"),
    ("image by type", f"{PUB}/png", "unsupported-type"),
    ("PDF sent as HTML", f"{PUB}/pdf-as-html", "unsupported-type"),
    ("image without a type", f"{PUB}/png-untyped", "unsupported-type"),
    ("ZIP sent as text", f"{PUB}/zip-as-text", "unsupported-type"),
    ("binary sent as HTML", f"{PUB}/binary-as-html", "unsupported-type"),
    ("certificate for another name", "https://wrongcert.pub.test/article", "upstream-error"),
    ("TLS to a plain HTTP port", "https://www.pub.test:80/article", "upstream-error"),
    ("an error page", f"{PUB}/status/500", "upstream-error"),
]
INTERNAL_MARKS = [
    "127.0",
    "169.254",
    "10.0.0",
    "172.16",
    "192.168",
    "100.64",
    "100.100",
    "::1",
    "ffff",
    "fd00",
    "fc00",
    "fe80",
    "fec0",
    "64:ff9b",
    "2002:",
    "0.0.0.0",
    "evil.test",
    "168.63",
    "a83f",
]


def test_the_table_is_large():
    assert len(ATTACKS) >= 60
    assert len({a[0] for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize(("url", "kind"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_refused_and_reaches_nothing_internal(opener, lab, url, kind):
    before = len(lab.internal_hits())
    started = time.monotonic()
    response = opener(url)
    elapsed = time.monotonic() - started
    assert (response.status_code, response.json().get("type")) == (STATUS[kind], PROBLEMS + kind), response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["detail"]
    assert lab.internal_hits()[before:] == [], "a bypass: an internal target was hit"
    shown = json.dumps({k: v for k, v in response.json().items() if k != "request_id"}).lower()  # ids are hex
    assert not [mark for mark in INTERNAL_MARKS if mark in shown], "an internal address was echoed"
    assert elapsed < 2 + 1.5, "one deadline (2 s here) covers the whole fetch"


OPENS = [
    # (id, url, server address that must see the request, Host header)
    ("name", f"{PUB}/article", "44.0.0.10", "www.pub.test"),
    ("public IPv4 literal", "http://44.0.0.10/article", "44.0.0.10", "44.0.0.10"),
    ("https, certificate checked for the name", f"{TLS}/article", "44.0.0.10", "secure.pub.test"),
    ("https to an IPv4 literal", "https://44.0.0.10/article", "44.0.0.10", "44.0.0.10"),
    ("IPv6 by name", "http://v6.pub.test/article", "2600:44::10", "v6.pub.test"),
    ("IPv6 literal", "http://[2600:44::10]/article", "2600:44::10", "[2600:44::10]"),
    ("A and AAAA, both public", "http://dual.pub.test/article", "44.0.0.10", "dual.pub.test"),
    ("CNAME to a public name", "http://alias.pub.test/article", "44.0.0.10", "alias.pub.test"),
    ("uppercase and a trailing dot", "http://WWW.PUB.TEST./article", "44.0.0.10", "www.pub.test"),
    ("explicit default port", "http://www.pub.test:80/article", "44.0.0.10", "www.pub.test"),
    ("https on 443 explicitly", "https://secure.pub.test:443/article", "44.0.0.10", "secure.pub.test"),
    ("five redirects", f"{PUB}/hops/5", "44.0.0.10", "www.pub.test"),
    ("gzip-encoded page", f"{PUB}/gzip/article", "44.0.0.10", "www.pub.test"),
]


@pytest.mark.parametrize(("url", "server", "host"), [o[1:] for o in OPENS], ids=[o[0] for o in OPENS])
def test_public_pages_open_at_the_checked_address(opener, lab, url, server, host):
    before_public, before_internal = len(lab.public_hits()), len(lab.internal_hits())
    response = opener(url)
    assert response.status_code == 200, response.text
    assert response.json()["title"] == "A public article"
    hits = lab.public_hits()[before_public:]
    assert hits and all(h["server"] == server and h["host"] == host for h in hits), hits
    assert lab.internal_hits()[before_internal:] == []


def test_a_name_opened_again_within_its_ttl_is_not_asked_again(opener, lab):
    """One resolver (made on the first lookup) keeps A and AAAA answers for their TTL, and the page still opens
    at the checked address."""
    assert opener("http://dual.pub.test/article?ttl=1").status_code == 200
    queries, before = len(lab.dns_queries()), len(lab.public_hits())
    response = opener("http://dual.pub.test/article?ttl=2")
    assert response.status_code == 200, response.text
    assert [q for q in lab.dns_queries()[queries:] if q["name"].rstrip(".") == "dual.pub.test"] == []
    assert [(h["server"], h["host"]) for h in lab.public_hits()[before:]] == [("44.0.0.10", "dual.pub.test")]


SLOW_DNS = [
    # (id, url, status): the lab's resolver answers these names 1.2 s late; the deadline is 2 s
    ("A and AAAA each answered late", "http://slow.pub.test/article", 200),
    ("A answered late, AAAA never", "http://slow-silent.pub.test/article", 504),
]


@pytest.mark.parametrize(("url", "status"), [s[1:] for s in SLOW_DNS], ids=[s[0] for s in SLOW_DNS])
def test_one_deadline_covers_both_dns_lookups(opener, lab, url, status):
    """A slow resolver costs the fetch one wait, not one per record type: the page deadline holds."""
    queries = len(lab.dns_queries())
    started = time.monotonic()
    response = opener(url)
    elapsed = time.monotonic() - started
    assert response.status_code == status, response.text
    name = url.split("/")[2]
    assert {q["type"] for q in lab.dns_queries()[queries:] if q["name"] == name} == {"A", "AAAA"}
    assert elapsed < 2 + 0.5, f"{elapsed:.2f} s: the 2 s deadline covers DNS too"


def test_rebinding_cannot_reach_loopback(opener, lab):
    """The name answers a public address first and loopback after: the one lookup is the one connected to."""
    queries, public = len(lab.dns_queries()), len(lab.public_hits())
    first = opener("http://rebind.evil.test/article")
    assert first.status_code == 200, first.text
    asked = [q for q in lab.dns_queries()[queries:] if q["name"] == "rebind.evil.test" and q["type"] == "A"]
    assert len(asked) == 1, "resolved once; the connection used that answer"
    assert [(h["server"], h["host"]) for h in lab.public_hits()[public:]] == [("44.0.0.11", "rebind.evil.test")]
    internal = len(lab.internal_hits())
    second = opener("http://rebind.evil.test/article")  # another caller: no cache, a fresh lookup
    assert second.status_code == 403 and second.json()["type"] == PROBLEMS + "blocked-address", second.text
    assert lab.internal_hits()[internal:] == []


def test_proxies_in_the_environment_are_ignored(lab_fetcher, opener, lab):
    assert "HTTP_PROXY" in lab_fetcher.env and "HTTPS_PROXY" in lab_fetcher.env
    before = len(lab.internal_hits())
    for url in (f"{PUB}/article?proxy-check", f"{TLS}/article?proxy-check"):
        assert opener(url).status_code == 200
    assert [h for h in lab.internal_hits()[before:] if h["port"] == 3128] == []
    assert len([h for h in lab.public_hits() if h["path"] == "/article?proxy-check"]) == 2


def test_nothing_of_the_caller_is_sent(opener, lab):
    before = len(lab.public_hits())
    door_headers = {
        "Cookie": "door=1",
        "Referer": "https://caller.example/",
        "X-Forwarded-For": "10.0.0.9",
        "Accept-Language": "hr",
        "X-Request-Id": "from-the-caller",
    }
    response = opener(f"{PUB}/echo?who", headers=door_headers)
    assert response.status_code == 200
    (hit,) = [h for h in lab.public_hits()[before:] if h["path"] == "/echo?who"]
    assert set(hit["headers"]) == {"host", "user-agent", "accept", "accept-encoding", "connection"}
    assert hit["headers"]["user-agent"].startswith("agentfn-page/")
    assert hit["headers"]["accept-encoding"] == "gzip, deflate"
    assert "from-the-caller" not in str(hit) and "Bearer" not in str(hit)


def test_cookies_are_not_kept_across_redirects(opener, lab):
    before = len(lab.public_hits())
    assert opener(f"{PUB}/cookie").status_code == 200
    hits = lab.public_hits()[before:]
    assert [h["path"] for h in hits] == ["/cookie", "/echo"]
    assert "cookie" not in hits[1]["headers"]


def test_the_internal_targets_do_record_hits(lab):
    """The proof above is only as good as the recorders: a connection from inside the namespace is seen."""
    before = len(lab.internal_hits())
    probe = (
        "import urllib.request\n"
        "for url in ('http://127.0.0.1/lab-probe', 'http://169.254.169.254/lab-probe', 'http://[::1]/lab-probe',"
        " 'http://[64:ff9b::7f00:1]/lab-probe', 'http://0.0.0.0/lab-probe'):\n"
        "    print(urllib.request.urlopen(url, timeout=5).read())\n"
    )
    result = lab.inside(probe)
    assert result.returncode == 0, result.stderr
    hits = lab.internal_hits()[before:]
    assert sorted(h["address"] for h in hits) == sorted(
        ["127.0.0.1", "169.254.169.254", "::1", "64:ff9b::7f00:1", "127.0.0.1"]
    )
    assert all(h["request"] == "GET /lab-probe HTTP/1.1" for h in hits)


def test_no_bypass_in_the_whole_run(lab):
    """Every internal hit so far is the lab's own probe: bypasses, 0."""
    assert [h for h in lab.internal_hits() if "/lab-probe" not in h["request"]] == []
