"""The CLI's test parts: the `agentfn` command as a subprocess, as a person, against the gateway."""

import pytest
from support.model import agentfn


@pytest.fixture
def cli(gateway, person):
    """The CLI as the person, against the gateway."""
    return lambda *args, **kw: agentfn(*args, url=gateway.url, token=person.token, **kw)
