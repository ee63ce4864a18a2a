"""The guard: which URLs a page fetch may name, and which addresses it may reach.

Three steps, each one strict:
- `parse_url` reads a URL the way a browser would (WHATWG host parsing: `2130706433`, `0x7f.1` and
  fullwidth digits are IPv4 addresses, not names), refuses what is ambiguous (userinfo, backslashes,
  percent-encoded hosts, zone ids), applies the port policy and normalises the rest.
- `Resolver.addresses` asks the configured DNS server (dnspython, never the system's getaddrinfo) for
  every A and AAAA record of a name.
- `classify` is the one pure decision: an address is allowed, or refused with a `Verdict` naming its
  class, after unwrapping every IPv6 form that embeds IPv4 (mapped, compatible, translated, NAT64, 6to4,
  Teredo). `check_target` refuses a host if any of its addresses is refused; the fetcher then connects
  to exactly the addresses it returned, never to the name.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from .refusals import Refusal

if TYPE_CHECKING:
    import dns.name

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL = 2048
MAX_HOST = 253
DEFAULT_PORTS = {"http": 80, "https": 443}
LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")  # spaces, control characters, backslashes


class Verdict(enum.Enum):
    """The class of an address; its value names it in a refusal's detail, its name in the `reason` field."""

    ALLOWED = "public"
    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    SHARED = "shared (carrier-grade NAT)"
    LINK_LOCAL = "link-local"
    METADATA = "cloud metadata"
    PLATFORM = "cloud platform-internal"
    MULTICAST = "multicast"
    BROADCAST = "broadcast"
    DOCUMENTATION = "documentation"
    BENCHMARKING = "benchmarking"
    RESERVED = "reserved"

    @property
    def allowed(self) -> bool:
        return self is Verdict.ALLOWED


def _table(rows: list[tuple[str, Verdict]]) -> list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, Verdict]]:
    return [(ipaddress.ip_network(net), verdict) for net, verdict in rows]


# The addresses clouds publish for their platform's own services on the instance: metadata (credentials,
# user data), the host agent, DNS and time. All but one lie in ranges refused below anyway; they are named
# here so the refusal says what they are, and so one list says where each comes from:
# - 169.254.169.254, fd00:ec2::254: EC2 instance metadata (IMDS), IPv4 and IPv6
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html
#   the same address serves GCP (also as metadata.google.internal: see `private_use_name`),
#   https://cloud.google.com/compute/docs/metadata/querying-metadata ;
#   Azure IMDS https://learn.microsoft.com/en-us/azure/virtual-machines/instance-metadata-service ;
#   Oracle https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/gettingmetadata.htm ;
#   DigitalOcean https://docs.digitalocean.com/reference/api/metadata/ ;
#   Hetzner https://docs.hetzner.cloud/#server-metadata ; OpenStack (and Huawei Cloud's, built on it)
#   https://docs.openstack.org/nova/latest/user/metadata.html
# - 169.254.170.2: ECS task metadata and credentials
#   https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v2.html
# - 169.254.170.23, fd00:ec2::23: the EKS Pod Identity agent (credentials)
#   https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html
# - 169.254.169.253, fd00:ec2::253: the Amazon VPC DNS server
#   https://docs.aws.amazon.com/vpc/latest/userguide/AmazonDNS-concepts.html
# - 169.254.169.123, fd00:ec2::123: the Amazon Time Sync Service
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/set-time.html
# - 168.63.129.16: Azure's WireServer (the VM agent's channel, extension settings, DNS, DHCP, health
#   probes), a public address that answers only inside Azure: the one entry no range below covers
#   https://learn.microsoft.com/en-us/azure/virtual-network/what-is-ip-address-168-63-129-16
# - 192.0.0.192: Oracle Cloud Infrastructure Classic's metadata address (inside 192.0.0.0/24, IETF
#   protocol assignments)
# - 100.100.100.200: Alibaba Cloud metadata (inside CGNAT)
#   https://www.alibabacloud.com/help/en/ecs/user-guide/view-instance-metadata
# - 169.254.0.23: Tencent Cloud metadata (metadata.tencentyun.com)
#   https://www.tencentcloud.com/document/product/213/4934
# The chart's egress policy for the page fetcher refuses the same addresses (networkpolicies.yaml).
# First match wins, so these narrow, better-named entries come before their ranges.
IPV4_DENY = _table(
    [
        ("169.254.169.254/32", Verdict.METADATA),
        ("169.254.170.2/32", Verdict.METADATA),
        ("169.254.170.23/32", Verdict.METADATA),
        ("100.100.100.200/32", Verdict.METADATA),
        ("192.0.0.192/32", Verdict.METADATA),
        ("169.254.0.23/32", Verdict.METADATA),
        ("168.63.129.16/32", Verdict.PLATFORM),
        ("169.254.169.253/32", Verdict.PLATFORM),
        ("169.254.169.123/32", Verdict.PLATFORM),
        ("0.0.0.0/8", Verdict.UNSPECIFIED),  # "this network"; Linux connects 0.0.0.0 to the local host
        ("10.0.0.0/8", Verdict.PRIVATE),
        ("100.64.0.0/10", Verdict.SHARED),
        ("127.0.0.0/8", Verdict.LOOPBACK),
        ("169.254.0.0/16", Verdict.LINK_LOCAL),
        ("172.16.0.0/12", Verdict.PRIVATE),
        ("192.0.0.0/24", Verdict.RESERVED),  # IETF protocol assignments
        ("192.0.2.0/24", Verdict.DOCUMENTATION),
        ("192.88.99.0/24", Verdict.RESERVED),  # deprecated 6to4 relay anycast
        ("192.168.0.0/16", Verdict.PRIVATE),
        ("198.18.0.0/15", Verdict.BENCHMARKING),
        ("198.51.100.0/24", Verdict.DOCUMENTATION),
        ("203.0.113.0/24", Verdict.DOCUMENTATION),
        ("224.0.0.0/4", Verdict.MULTICAST),
        ("255.255.255.255/32", Verdict.BROADCAST),
        ("240.0.0.0/4", Verdict.RESERVED),
    ]
)
IPV6_DENY = _table(
    [
        ("fd00:ec2::254/128", Verdict.METADATA),
        ("fd00:ec2::23/128", Verdict.METADATA),
        ("fd00:ec2::253/128", Verdict.PLATFORM),
        ("fd00:ec2::123/128", Verdict.PLATFORM),
        ("::/128", Verdict.UNSPECIFIED),
        ("::1/128", Verdict.LOOPBACK),
        ("ff00::/8", Verdict.MULTICAST),
        ("fe80::/10", Verdict.LINK_LOCAL),
        ("fec0::/10", Verdict.PRIVATE),  # deprecated site-local
        ("fc00::/7", Verdict.PRIVATE),  # unique local
        ("2001:db8::/32", Verdict.DOCUMENTATION),
        ("3fff::/20", Verdict.DOCUMENTATION),
        ("2001:2::/48", Verdict.BENCHMARKING),
        ("2001::/23", Verdict.RESERVED),  # IETF protocol assignments (Teredo is unwrapped before)
    ]
)
EXACT_V6 = 6  # the single addresses at the head of IPV6_DENY
GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")  # IPv6 outside it is not allocated for public hosts

# IPv6 forms that carry an IPv4 address: the embedded address is classified first.
MAPPED = ipaddress.ip_network("::ffff:0:0/96")
TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
COMPATIBLE = ipaddress.ip_network("::/96")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
TEREDO = ipaddress.ip_network("2001::/32")


def classify(address: IPAddress | str) -> Verdict:
    """The verdict on one address: `Verdict.ALLOWED` only for a public unicast address."""
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    if address.version == 4:
        return _first(address, IPV4_DENY) or Verdict.ALLOWED
    exact = _first(address, IPV6_DENY[:EXACT_V6])  # the platform's, ::, ::1 before the embedded forms
    if exact:
        return exact
    embedded, otherwise = _embedded(address)
    for inner in embedded:
        verdict = classify(inner)
        if not verdict.allowed:
            return verdict
    if otherwise is not None:
        return otherwise
    if address not in GLOBAL_UNICAST:
        return _first(address, IPV6_DENY) or Verdict.RESERVED
    return _first(address, IPV6_DENY) or Verdict.ALLOWED


def _first(address: IPAddress, table) -> Verdict | None:
    for network, verdict in table:
        if address in network:
            return verdict
    return None


def _v4(value: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(value & 0xFFFFFFFF)


def _embedded(address: ipaddress.IPv6Address) -> tuple[list[ipaddress.IPv4Address], Verdict | None]:
    """IPv4 addresses inside an IPv6 one, and the verdict when they are all public (None: judge the IPv6)."""
    n = int(address)
    if address in MAPPED or address in TRANSLATED or address in COMPATIBLE:
        # Nothing public is published this way; a socket would reach the IPv4 host.
        return [_v4(n)], Verdict.RESERVED
    if address in NAT64:
        return [_v4(n)], Verdict.ALLOWED  # DNS64 networks answer public IPv4 hosts this way
    if address in NAT64_LOCAL:
        # RFC 6052 /48 layout: 16 bits, the u-octet (bits 64-71), then the other 16 bits.
        high, low = (n >> 64) & 0xFFFF, (n >> 40) & 0xFFFF
        return [_v4(high << 16 | low)], Verdict.PRIVATE
    if address in SIX_TO_FOUR:
        return [_v4(n >> 80)], Verdict.ALLOWED
    if address in TEREDO:
        server, client = _v4(n >> 64), _v4(~n)  # the client address is stored inverted
        return [server, client], Verdict.ALLOWED
    return [], None


def refusal_for(verdict: Verdict, subject: str = "The URL's host is") -> Refusal:
    """blocked-address, naming the class of address (never the address) and what to do instead."""
    article = "an" if verdict.value[0] in "aeiou" else "a"
    return Refusal(
        "blocked-address",
        f"{subject} {article} {verdict.value} address; only public addresses can be opened. Use a public URL.",
        reason=verdict.name.lower(),
    )


# ---------------------------------------------------------------------------------------------- URLs


@dataclass(frozen=True)
class Target:
    """A URL that passed parsing: what to connect to (after DNS), and what to say once connected."""

    scheme: str
    host: str  # ASCII: an IDNA name, or an address in its canonical form
    port: int
    target: str  # path and query, as sent in the request line
    literal: IPAddress | None  # the host is an address: no DNS

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if self.literal is not None and self.literal.version == 6 else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.target}"


def bad_url(detail: str) -> Refusal:
    return Refusal("bad-url", detail)


def parse_url(raw: str, ports: frozenset[int]) -> Target:
    """A strictly parsed http(s) URL, or bad-url. Pure: addresses are judged by `check_target`."""
    if len(raw) > MAX_URL:
        raise bad_url(f"the URL is longer than {MAX_URL} characters")
    if UNSAFE.search(raw):
        raise bad_url("the URL contains spaces, control characters or backslashes; percent-encode them")
    match = SCHEME.match(raw)
    scheme = match.group(1).lower() if match else ""
    if scheme not in DEFAULT_PORTS:
        raise bad_url("only http and https URLs can be opened")
    rest = raw[match.end() :]
    if not rest.startswith("//"):
        raise bad_url("the URL has no host; write it as http(s)://host/path")
    rest = rest[2:]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, rest = rest[:end], rest[end:]
    if "@" in authority:
        raise bad_url("URLs with a user name or password are refused; nothing of the caller is sent")
    host_text, port_text = _split_authority(authority)
    literal, host = _host(host_text)
    port = _port(port_text, scheme, ports)
    return Target(scheme, host, port, _target(rest), literal)


def _split_authority(authority: str) -> tuple[str, str | None]:
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise bad_url("an IPv6 host must be closed with ']'")
        host, after = authority[: close + 1], authority[close + 1 :]
        if after and not after.startswith(":"):
            raise bad_url("unexpected characters after the IPv6 host")
        return host, after[1:] if after else None
    if authority.count(":") > 1:
        raise bad_url("an IPv6 host must be written in brackets")
    host, colon, port = authority.partition(":")
    return host, port if colon else None


def _host(text: str) -> tuple[IPAddress | None, str]:
    if not text:
        raise bad_url("the URL has no host")
    if text.startswith("["):
        inner = text[1:-1]
        if "%" in inner:
            raise bad_url("IPv6 zone ids are refused")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise bad_url("the IPv6 host is not a valid address") from None
        return address, str(address)
    if "%" in text:
        raise bad_url("percent-encoding in the host is refused; write the host name plainly")
    if not text.isascii():
        import idna  # only for a name that is not ASCII

        try:  # UTS 46 maps fullwidth letters, digits and dots the way browsers do
            text = idna.encode(text, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise bad_url("the host is not a valid internationalised domain name") from None
    text = text.lower()
    if text.endswith("."):
        text = text[:-1]  # one trailing dot: the same absolute name
    if _ends_in_number(text):
        address = _whatwg_ipv4(text)
        return address, str(address)
    labels = text.split(".")
    if len(text) > MAX_HOST or not all(LABEL.match(label) for label in labels):
        raise bad_url("the host is not a valid domain name")
    return None, text


def _ipv4_number(part: str) -> int | None:
    """One part of an IPv4 host, decimal, octal (leading 0) or hex (0x), as the WHATWG URL standard reads it."""
    if not part:
        return None
    base, digits = 10, part
    if part[:2] in ("0x", "0X"):
        base, digits = 16, part[2:]
    elif len(part) > 1 and part[0] == "0":
        base, digits = 8, part[1:]
    if not digits:
        return 0
    allowed = {10: "0123456789", 8: "01234567", 16: "0123456789abcdefABCDEF"}[base]
    if not all(c in allowed for c in digits):
        return None
    return int(digits, base)


def _ends_in_number(host: str) -> bool:
    last = host.rsplit(".", 1)[-1]
    return bool(last) and (last.isdigit() or _ipv4_number(last) is not None)


def _whatwg_ipv4(host: str) -> ipaddress.IPv4Address:
    parts = host.split(".")
    numbers = [_ipv4_number(p) for p in parts]
    if (
        len(parts) > 4
        or any(n is None for n in numbers)
        or any(n > 255 for n in numbers[:-1])
        or numbers[-1] >= 256 ** (5 - len(parts))
    ):
        raise bad_url("the host looks like an IPv4 address but is not a valid one")
    value = numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1]))
    return ipaddress.IPv4Address(value)


def _port(text: str | None, scheme: str, ports: frozenset[int]) -> int:
    if not text:
        port = DEFAULT_PORTS[scheme]
    elif not (text.isascii() and text.isdigit()) or len(text) > 5 or not 0 < int(text) < 65536:
        raise bad_url("the port is not a number from 1 to 65535")
    else:
        port = int(text)
    if port not in ports:
        allowed = ", ".join(str(p) for p in sorted(ports))
        raise bad_url(f"port {port} is not allowed; the ports pages can be opened on are {allowed}")
    return port


def _target(rest: str) -> str:
    """Path and query, fragment dropped; non-ASCII percent-encoded as UTF-8 (what browsers send)."""
    rest = rest.split("#", 1)[0]
    if not rest.startswith("/"):
        rest = "/" + rest
    if rest.isascii():
        return rest
    return "".join(c if c.isascii() else quote(c, safe="") for c in rest)


# ----------------------------------------------------------------------------------------------- DNS


def parse_servers(text: str) -> list[tuple[str, int]]:
    """`10.0.0.10, 10.0.0.11:5353, [fd00::a]:53` -> [(address, port)]; empty -> [] (use the system's)."""
    servers = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item.startswith("["):
            address, _, port = item[1:].partition("]")
            port = port.lstrip(":")
        elif item.count(":") == 1:
            address, port = item.split(":")
        else:
            address, port = item, ""
        ipaddress.ip_address(address)  # a resolver is named by address, never by name
        servers.append((address, int(port or 53)))
    return servers


# The AAAA lookups, beside the A lookup each fetch makes in its own thread; each ends by its deadline.
_LOOKUPS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="page-dns")


class Resolver:
    """Every A and AAAA record of a name, from the configured DNS servers, within a time limit.

    dnspython is imported on the first lookup (or by `reading.warm_up`), not on the way to ready.
    """

    def __init__(self, servers: list[tuple[str, int]]):
        self._servers = servers
        self._made = threading.Lock()
        self._resolver = None

    def warm_up(self) -> None:
        self._dns()

    def _dns(self):
        with self._made:
            if self._resolver is None:
                import dns.nameserver
                import dns.resolver

                resolver = dns.resolver.Resolver(configure=not self._servers)
                if self._servers:
                    resolver.nameservers = [dns.nameserver.Do53Nameserver(a, p) for a, p in self._servers]
                resolver.cache = dns.resolver.LRUCache(4096)  # honours each record's TTL
                self._resolver = resolver
            return self._resolver

    def addresses(self, host: str, lifetime: float) -> list[IPAddress]:
        import dns.exception
        import dns.name
        import dns.rdataclass
        import dns.rdatatype

        resolver = self._resolver or self._dns()
        try:
            name = dns.name.from_text(host)  # absolute: no search domains
        except dns.exception.DNSException:
            raise bad_url("the host is not a valid domain name") from None
        # A and AAAA at once, under one deadline: a slow resolver costs the fetch one wait, not one per type. An
        # AAAA answer still cached (with its TTL) is read here, without handing it to another thread.
        deadline = time.monotonic() + lifetime
        if resolver.cache.get((name, dns.rdatatype.AAAA, dns.rdataclass.IN)) is not None:
            found = self._records(resolver, name, "A", deadline) + self._records(resolver, name, "AAAA", deadline)
        else:
            aaaa = _LOOKUPS.submit(self._records, resolver, name, "AAAA", deadline)
            found = self._records(resolver, name, "A", deadline)  # a failure refuses at once; the AAAA ends by the deadline
            found += aaaa.result()
        if not found:
            raise Refusal("dns-failure", "the host name has no address records; check the URL")
        return found

    @staticmethod
    def _records(resolver, name: dns.name.Name, rdtype: str, deadline: float) -> list[IPAddress]:
        import dns.exception
        import dns.resolver

        left = deadline - time.monotonic()
        if left <= 0:
            raise Refusal("timeout", "the DNS server did not answer in time")
        try:
            answer = resolver.resolve(name, rdtype, search=False, lifetime=left, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            raise Refusal("dns-failure", "the host name does not exist (NXDOMAIN); check the URL") from None
        except dns.resolver.LifetimeTimeout:
            raise Refusal("timeout", "the DNS server did not answer in time") from None
        except dns.exception.DNSException:
            raise Refusal("dns-failure", "the DNS server could not resolve the host; try again later", status=502) from None
        return [ipaddress.ip_address(r.address) for r in answer.rrset] if answer.rrset is not None else []


def private_use_name(host: str) -> bool:
    """A name in `.internal`, the top-level domain ICANN reserved for private use (2024): never public, and
    the clouds' own (metadata.google.internal, *.compute.internal, *.ec2.internal) are platform-internal."""
    return host == "internal" or host.endswith(".internal")


def check_target(target: Target, resolver: Resolver, lifetime: float, *, redirected: bool = False) -> list[IPAddress]:
    """The addresses to connect to for `target`, every one of them public; otherwise refuse.

    One refused answer refuses the host: a name that answers both a public and an internal address is
    an attack, not a choice to make for it.
    """
    if target.literal is not None:
        subject = "The page redirected to" if redirected else "The URL's host is"
        addresses = [target.literal]
    elif target.host == "localhost" or target.host.endswith(".localhost"):
        raise refusal_for(Verdict.LOOPBACK)  # RFC 6761: localhost names are loopback, whatever DNS says
    elif private_use_name(target.host):
        raise Refusal(
            "blocked-address",
            "The URL's host is a private-use name (.internal); only public hosts can be opened. Use a public URL.",
            reason=Verdict.PRIVATE.name.lower(),
        )
    else:
        subject = "The page redirected to a host that resolves to" if redirected else "The URL's host resolves to"
        addresses = resolver.addresses(target.host, lifetime)
    for address in addresses:
        verdict = classify(address)
        if not verdict.allowed:
            raise refusal_for(verdict, subject)
    return addresses
