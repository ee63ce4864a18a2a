"""The guard's pure parts: `classify(address)` over one table of addresses (as smokescreen's TestClassifyAddr),
and `parse_url` on the forms a browser would read differently from a naive parser."""

import ipaddress

import pytest

from agentfn.page.guard import Verdict, classify, parse_url
from agentfn.page.refusals import Refusal

V = Verdict
ADDRESSES = [
    # (address, verdict, why)
    ("44.0.0.10", V.ALLOWED, "the lab's public server"),
    ("8.8.8.8", V.ALLOWED, "a public resolver"),
    ("1.1.1.1", V.ALLOWED, "public"),
    ("0.0.0.0", V.UNSPECIFIED, "Linux connects it to the local host"),
    ("0.255.255.255", V.UNSPECIFIED, "end of 'this network'"),
    ("1.0.0.0", V.ALLOWED, "just outside 0/8"),
    ("127.0.0.1", V.LOOPBACK, "loopback"),
    ("127.255.255.254", V.LOOPBACK, "all of 127/8 is loopback"),
    ("128.0.0.1", V.ALLOWED, "just outside 127/8"),
    ("10.0.0.1", V.PRIVATE, "RFC 1918"),
    ("10.255.255.255", V.PRIVATE, "end of 10/8"),
    ("11.0.0.0", V.ALLOWED, "just outside 10/8"),
    ("172.16.0.1", V.PRIVATE, "RFC 1918"),
    ("172.31.255.255", V.PRIVATE, "end of 172.16/12"),
    ("172.32.0.0", V.ALLOWED, "just outside 172.16/12"),
    ("192.168.1.1", V.PRIVATE, "RFC 1918"),
    ("100.64.0.0", V.SHARED, "start of CGNAT"),
    ("100.127.255.255", V.SHARED, "end of CGNAT"),
    ("100.63.255.255", V.ALLOWED, "just below CGNAT"),
    ("100.128.0.0", V.ALLOWED, "just outside CGNAT"),
    ("100.100.100.200", V.METADATA, "Alibaba Cloud metadata, inside CGNAT"),
    ("169.254.169.254", V.METADATA, "AWS, GCP, Azure metadata"),
    ("169.254.170.2", V.METADATA, "ECS task credentials"),
    ("169.254.170.23", V.METADATA, "EKS Pod Identity agent"),
    ("169.254.0.23", V.METADATA, "Tencent Cloud metadata"),
    ("192.0.0.192", V.METADATA, "Oracle Cloud Classic metadata"),
    ("168.63.129.16", V.PLATFORM, "Azure WireServer, a public address"),
    ("168.63.129.15", V.ALLOWED, "beside the WireServer"),
    ("169.254.169.253", V.PLATFORM, "Amazon VPC DNS"),
    ("169.254.169.123", V.PLATFORM, "Amazon Time Sync"),
    ("169.254.0.1", V.LINK_LOCAL, "link-local"),
    ("192.0.0.170", V.RESERVED, "IETF protocol assignments (NAT64 discovery)"),
    ("192.0.2.1", V.DOCUMENTATION, "TEST-NET-1"),
    ("198.51.100.1", V.DOCUMENTATION, "TEST-NET-2"),
    ("203.0.113.1", V.DOCUMENTATION, "TEST-NET-3"),
    ("198.18.0.1", V.BENCHMARKING, "benchmarking"),
    ("198.19.255.255", V.BENCHMARKING, "end of 198.18/15"),
    ("198.20.0.0", V.ALLOWED, "just outside benchmarking"),
    ("192.88.99.1", V.RESERVED, "deprecated 6to4 relay anycast"),
    ("224.0.0.1", V.MULTICAST, "multicast"),
    ("239.255.255.255", V.MULTICAST, "end of multicast"),
    ("240.0.0.1", V.RESERVED, "class E"),
    ("255.255.255.255", V.BROADCAST, "limited broadcast"),
    ("::", V.UNSPECIFIED, "IPv6 unspecified"),
    ("::1", V.LOOPBACK, "IPv6 loopback"),
    ("::ffff:127.0.0.1", V.LOOPBACK, "IPv4-mapped loopback"),
    ("::ffff:169.254.169.254", V.METADATA, "IPv4-mapped metadata"),
    ("::ffff:8.8.8.8", V.RESERVED, "IPv4-mapped public: nothing public is published this way"),
    ("::127.0.0.1", V.LOOPBACK, "IPv4-compatible loopback"),
    ("::ffff:0:7f00:1", V.LOOPBACK, "IPv4-translated (SIIT) loopback"),
    ("64:ff9b::7f00:1", V.LOOPBACK, "NAT64 of loopback"),
    ("64:ff9b::a9fe:a9fe", V.METADATA, "NAT64 of metadata"),
    ("64:ff9b::a83f:8110", V.PLATFORM, "NAT64 of the Azure WireServer"),
    ("2002:a83f:8110::1", V.PLATFORM, "6to4 of the Azure WireServer"),
    ("::ffff:168.63.129.16", V.PLATFORM, "IPv4-mapped Azure WireServer"),
    ("64:ff9b::808:808", V.ALLOWED, "NAT64 of a public address (DNS64 networks)"),
    ("64:ff9b:1:7f00:0:100::", V.LOOPBACK, "local-use NAT64, /48 layout, of loopback"),
    ("64:ff9b:1:808:8:800::", V.PRIVATE, "local-use NAT64 of a public address is still local"),
    ("2002:7f00:1::1", V.LOOPBACK, "6to4 of loopback"),
    ("2002:a00:5::1", V.PRIVATE, "6to4 of 10.0.0.5"),
    ("2002:808:808::1", V.ALLOWED, "6to4 of a public address"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", V.LOOPBACK, "Teredo, client 127.0.0.1 (inverted)"),
    ("2001:0:a00:5:8000:63bf:f7f7:f7f7", V.PRIVATE, "Teredo, server 10.0.0.5"),
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", V.ALLOWED, "Teredo, public server and client"),
    ("fd00:ec2::254", V.METADATA, "AWS metadata over IPv6"),
    ("fd00:ec2::23", V.METADATA, "EKS Pod Identity agent over IPv6"),
    ("fd00:ec2::253", V.PLATFORM, "Amazon VPC DNS over IPv6"),
    ("fd00:ec2::123", V.PLATFORM, "Amazon Time Sync over IPv6"),
    ("fc00::1", V.PRIVATE, "unique local"),
    ("fdff:ffff::1", V.PRIVATE, "unique local"),
    ("fec0::1", V.PRIVATE, "deprecated site-local"),
    ("fe80::1", V.LINK_LOCAL, "link-local"),
    ("febf::1", V.LINK_LOCAL, "end of fe80::/10"),
    ("ff02::1", V.MULTICAST, "multicast"),
    ("2001:db8::1", V.DOCUMENTATION, "documentation"),
    ("3fff::1", V.DOCUMENTATION, "documentation (RFC 9637)"),
    ("2001:2::1", V.BENCHMARKING, "benchmarking"),
    ("2001:10::1", V.RESERVED, "ORCHID, IETF protocol assignments"),
    ("100::1", V.RESERVED, "discard-only, outside 2000::/3"),
    ("5f00::1", V.RESERVED, "SRv6 SIDs, outside 2000::/3"),
    ("4000::1", V.RESERVED, "not allocated for public hosts"),
    ("2600:44::10", V.ALLOWED, "the lab's public IPv6 server"),
    ("2001:4860:4860::8888", V.ALLOWED, "public"),
    ("2a00:1450::1", V.ALLOWED, "public"),
]


@pytest.mark.parametrize(
    ("address", "verdict"), [row[:2] for row in ADDRESSES], ids=[f"{row[0]} ({row[2]})" for row in ADDRESSES]
)
def test_classify(address, verdict):
    assert classify(address) is verdict
    assert classify(ipaddress.ip_address(address)) is verdict


def test_the_table_covers_every_verdict():
    assert {row[1] for row in ADDRESSES} == set(Verdict)


PORTS = frozenset({80, 443})
PARSED = [
    # (url as given, url as fetched)
    ("HTTP://WWW.Pub.Test./path", "http://www.pub.test/path"),
    ("https://www.pub.test:443/a?b=c#fragment", "https://www.pub.test/a?b=c"),
    ("http://www.pub.test", "http://www.pub.test/"),
    ("http://www.pub.test:80?q", "http://www.pub.test/?q"),
    ("http://bücher.example/päth?q=ü", "http://xn--bcher-kva.example/p%C3%A4th?q=%C3%BC"),
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://0177.0.0.01/", "http://127.0.0.1/"),
    ("http://１２７．０．０．１/", "http://127.0.0.1/"),
    ("http://0/", "http://0.0.0.0/"),
    ("http://[0:0:0:0:0:ffff:7f00:1]/", "http://[::ffff:7f00:1]/"),
    ("http://44.0.0.10:443/", "http://44.0.0.10:443/"),
]


@pytest.mark.parametrize(("given", "fetched"), PARSED, ids=[p[0] for p in PARSED])
def test_parse_url_reads_hosts_as_a_browser_does(given, fetched):
    assert parse_url(given, PORTS).url == fetched


REFUSED = [
    "http://user@www.pub.test/",
    "http://www.pub.test\\@x/",
    "http://127%2e0%2e0%2e1/",
    "http://[fe80::1%25lo]/",
    "http://256.0.0.1/",
    "http://1.2.3.4.5/",
    "http://www.pub.test:8080/",
    "http://www.pub.test:0/",
    "http://www.pub.test:99999/",
    "ftp://www.pub.test/",
    "http:www.pub.test",
    "http://a..b/",
    "http://-a.test/",
    "http://www.pub.test/a b",
    "http://" + "a" * 64 + ".test/",
    "http://www.pub.test/" + "a" * 2048,
    "",
]


@pytest.mark.parametrize("given", REFUSED)
def test_parse_url_refuses_ambiguous_urls(given):
    with pytest.raises(Refusal) as refused:
        parse_url(given, PORTS)
    assert refused.value.kind == "bad-url" and refused.value.detail
