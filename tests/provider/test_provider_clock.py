"""The embedded provider's clock is simulated (docs/method.md#clock): cache entries expire by the answers given,
not by how long the machine took, so a seeded batch has the same cache outcomes on an idle or a busy machine."""

from __future__ import annotations

import dataclasses
import itertools
import time

import openai

from kit.provider import Reply, serve
from kit.provider.cache import load_profile
from kit.provider.log import read
from kit.provider.server import SimulatedClock

PROMPT = "You are a careful coding agent. Follow the repository conventions exactly. " * 150  # ~2k tokens


class Short:
    name = "short"

    def reply(self, conversation):
        return Reply(text="ok")


def _cached(p, n: int) -> list[int]:
    api = openai.OpenAI(base_url=p.base_url + "/v1", api_key="sk-test", max_retries=0)
    out = []
    for _ in range(n):
        api.responses.create(model="sim-agent", input=PROMPT)
        out.append(read(p.log_path)[-1]["usage"]["cache_read_tokens"])
    return out


def test_time_on_the_machine_does_not_expire_an_entry_and_answers_do():
    """A 3 s TTL: a real pause of 3.5 s between two requests leaves the entry alive (one answer is ~2 s of
    simulated time); two answers in between (4+ s simulated) expire it, however fast they came."""
    profile = dataclasses.replace(load_profile("openai-implicit"), ttl=3.0, name="ttl-3s")
    with serve(profile=profile, policy=Short()) as p:
        first = _cached(p, 1)
        time.sleep(3.5)  # wall-clock time past the TTL: a wall-clock engine would miss here
        again = _cached(p, 1)
    assert first == [0] and again[0] > 0
    with serve(profile=profile, policy=Short()) as p:
        api = openai.OpenAI(base_url=p.base_url + "/v1", api_key="sk-other", max_retries=0)
        api.responses.create(model="sim-agent", input=PROMPT)
        for i in range(2):  # two other answers: the clock moves 4+ s
            api.responses.create(model="sim-agent", input=f"unrelated prompt {i}")
        api.responses.create(model="sim-agent", input=PROMPT)
        log = read(p.log_path)
    assert log[-1]["usage"]["cache_read_tokens"] == 0  # expired in simulated time, milliseconds after on the machine
    step = SimulatedClock.CLIENT_S
    stamps = [line["t"] for line in log]
    assert stamps[0] == 0.0 and all(b - a >= step for a, b in itertools.pairwise(stamps))
