"""Fair share of a shared server: the order in which waiting jobs start (:func:`fl_ui.engine.fair_order`), who a
visitor is (a browser over all its tabs, by a secret only it holds) and the cookie that carries the secret."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from dataclasses import dataclass

import pytest

from fl_ui import sessions
from fl_ui.engine import Lane, fair_order


@dataclass(eq=False)
class Waiting:
    visitor: str | None
    order: int
    lane: Lane = Lane.INTERACTIVE

    def __repr__(self) -> str:
        return f"{self.visitor}#{self.order}"


def queue(*visitors: str, lane: Lane = Lane.INTERACTIVE, start: int = 0) -> list[Waiting]:
    return [Waiting(visitor, start + index, lane) for index, visitor in enumerate(visitors)]


def test_a_newcomers_first_job_goes_before_the_queues_of_five_visitors_with_four_jobs_each() -> None:
    """The red team's case: five scripted visitors asked for four jobs each (the first one runs), then a newcomer
    asked for one: FIFO put it 20th; here it is next."""
    scripted = queue(*(f"s{v}" for v in range(5) for _ in range(4)))
    newcomer = Waiting("new", len(scripted))
    order = fair_order([*scripted[1:], newcomer], {"s0": 1}, {"s0": 1})
    assert order[0] is newcomer
    # then each visitor's oldest job, the one that runs already counted: s1..s4 before s0 goes again
    assert [job.visitor for job in order[1:5]] == ["s1", "s2", "s3", "s4"]
    # one worker: s0's job has ended (none running), but s0 had its turn: the others go first
    assert [job.visitor for job in fair_order(scripted[1:], {}, {"s0": 1})[:5]] == ["s1", "s2", "s3", "s4", "s0"]


def test_the_same_five_sessions_of_one_browser_are_one_visitor() -> None:
    browser = queue(*(["browser-1"] * 8))  # FL_BROWSER_JOBS=8 caps what its tabs may queue together
    newcomer = Waiting("new", 8)
    assert fair_order([*browser[1:], newcomer], {"browser-1": 1}, {"browser-1": 1})[0] is newcomer


def test_the_next_job_is_the_oldest_of_the_visitor_with_the_fewest_running() -> None:
    older, newer = Waiting("a", 0), Waiting("b", 1)
    assert fair_order([older, newer], {"a": 2}, {})[0] is newer
    assert fair_order([older, newer], {"a": 1, "b": 1}, {})[0] is older  # equal: the oldest
    assert fair_order([older, newer], {"a": 1, "b": 1}, {"a": 7, "b": 3})[0] is newer  # b's turn was longer ago
    a1, a2, b1 = Waiting("a", 0), Waiting("a", 2), Waiting("b", 1)
    assert fair_order([a2, b1, a1], {}, {}) == [b1, a1, a2]  # fewer waiting first, then a's in order


def test_lanes_come_first_and_the_servers_own_jobs_take_turns_like_a_visitor() -> None:
    view = Waiting("a", 5, Lane.INTERACTIVE)
    warm_up = Waiting(None, 1, Lane.WARM_UP)
    training = Waiting("b", 0, Lane.LONG)
    assert fair_order([training, warm_up, view], {"a": 3}, {"a": 9}) == [view, warm_up, training]


def test_random_queues_always_start_a_job_of_a_visitor_with_the_fewest_running() -> None:
    """The rule checked step by step on 200 random queues: each job taken belongs to the highest lane waiting, to a
    visitor with the fewest running among those waiting in it and, among those, to one whose last turn is the oldest;
    each visitor's jobs of a lane start in the order it asked for them."""
    rng = random.Random(0)
    for _ in range(200):
        count = rng.randint(1, 25)
        waiting = [Waiting(rng.choice("abcde"), order, rng.choice(list(Lane))) for order in range(count)]
        running = Counter({visitor: rng.randint(0, 3) for visitor in "abcde"})
        turns = {visitor: rng.randint(1, 50) for visitor in rng.sample("abcde", 3)}
        order = fair_order(waiting, running, turns)
        assert sorted(order, key=lambda job: job.order) == sorted(waiting, key=lambda job: job.order)
        now, left, turn = Counter(running), list(waiting), 50
        for job in order:
            top = max(other.lane for other in left)
            contenders = {other.visitor for other in left if other.lane == top}
            fewest = min(now[visitor] for visitor in contenders)
            assert job.lane == top and now[job.visitor] == fewest
            assert turns.get(job.visitor, 0) == min(turns.get(v, 0) for v in contenders if now[v] == fewest)
            assert job.order == min(other.order for other in left if (other.visitor, other.lane) == (job.visitor, top))
            left.remove(job)
            now[job.visitor] += 1
            turn += 1
            turns[job.visitor] = turn


def test_equal_visitors_take_turns_one_job_each() -> None:
    waiting = queue(*itertools.chain.from_iterable(itertools.repeat(("a", "b", "c"), 3)))
    assert [job.visitor for job in fair_order(waiting, {}, {})] == list("abcabcabc")
    burst = queue(*"aaaabbbbcccc")  # each asked for four at once
    assert [job.visitor for job in fair_order(burst, {}, {})] == list("abcabcabcabc")


def test_a_visitor_is_its_browser_by_a_digest_of_its_secret_else_its_session(monkeypatch) -> None:
    secret = "s" * 43
    monkeypatch.setattr(sessions, "current_session", lambda: "session-1")
    monkeypatch.setattr(sessions, "browser_secret", lambda: secret)
    visitor = sessions.current_visitor()
    assert visitor.startswith("browser-") and secret not in visitor and secret[:8] not in visitor
    monkeypatch.setattr(sessions, "current_session", lambda: "session-2")
    assert sessions.current_visitor() == visitor  # another tab of the same browser
    monkeypatch.setattr(sessions, "browser_secret", lambda: None)
    assert sessions.current_visitor() == "session-2"  # no cookie: the session alone
    monkeypatch.setattr(sessions, "current_session", lambda: None)
    assert sessions.current_visitor() is None  # the server itself


def served(content_type: bytes, cookie: str | None = None, scheme: str = "http", kind: str = "http") -> list[dict]:
    """The messages the middleware sends for one request to an app that answers with ``content_type``."""

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        await send({"type": "http.response.body", "body": b"<html></html>"})

    sent: list[dict] = []

    async def send(message) -> None:
        sent.append(message)

    headers = [] if cookie is None else [(b"cookie", f"other=1; {cookie}".encode())]
    asyncio.run(sessions.BrowserCookie(app)({"type": kind, "scheme": scheme, "headers": headers}, None, send))
    return sent


def set_cookies(messages: list[dict]) -> list[str]:
    return [value.decode() for name, value in messages[0]["headers"] if name == b"set-cookie"]


def test_every_page_gives_the_browser_its_secret_in_an_http_only_cookie() -> None:
    first = set_cookies(served(b"text/html; charset=utf-8"))
    assert len(first) == 1
    value, *attributes = first[0].split("; ")
    name, secret = value.split("=")
    assert name == sessions.BROWSER_COOKIE and sessions.BROWSER_SECRET.fullmatch(secret)
    assert {"HttpOnly", "SameSite=Lax", "Path=/", f"Max-Age={30 * 86400}"} <= set(attributes)
    assert "Secure" not in attributes and "Secure" in set_cookies(served(b"text/html", scheme="https"))[0]
    again = set_cookies(served(b"text/html", cookie=f"{sessions.BROWSER_COOKIE}={secret}"))
    assert again == first  # the same secret, its expiry renewed
    forged = set_cookies(served(b"text/html", cookie=f"{sessions.BROWSER_COOKIE}=short"))[0]
    assert secret not in forged and "short" not in forged  # not a secret of ours: a new one
    assert set_cookies(served(b"text/html"))[0] != first[0]  # each new browser its own
    assert not set_cookies(served(b"application/json"))  # only pages, not the health check or the assets
    assert not set_cookies(served(b"text/html", kind="websocket"))  # a session's websocket reads it, never sets it


@pytest.mark.parametrize("secret", ["a" * 43, "B-_9" * 10 + "xyz"])
def test_the_runs_folder_is_a_one_way_digest_of_the_browsers_secret(secret) -> None:
    from fl_core.lab.runs import SESSION_TOKEN
    from fl_ui.lab import runs_token

    token = runs_token(secret)
    assert SESSION_TOKEN.fullmatch(token) and token == runs_token(secret) and token != runs_token(secret + "x")
    assert secret[:16] not in token
