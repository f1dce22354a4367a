"""The tally shows exactly what the same moves made through ``prometheus_client`` show: the same
series (moved by 0 included), the same values to the last bit (dollars added in the same order),
the same buckets; whoever collects, whenever."""

from __future__ import annotations

import random
import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.telemetry.tally import Tally

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def families(registry: CollectorRegistry) -> tuple[Counter, Counter, Histogram, Histogram]:
    return (Counter("t_usd_total", "dollars", ["org", "kind"], registry=registry),
            Counter("t_plain_total", "unlabelled", registry=registry),
            Histogram("t_seconds", "timings", buckets=BUCKETS, registry=registry),
            Histogram("t_steps", "steps", ["org"], buckets=(0, 1, 2, 4, 8), registry=registry))


def exposition(registry: CollectorRegistry) -> list[str]:
    """The scrape without the creation times (the two registries were made apart)."""
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def moves(seed: int) -> list[tuple[int, tuple[str, ...], float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(3000):
        which = rng.randrange(4)
        if which == 0:
            amount = rng.choice([0, 0.0, -1.0, 1e-17, 0.1, 0.2, 0.3, 1 / 3, rng.random() * 1e-4, 7])
            out.append((0, (rng.choice(["acme", "beta"]), rng.choice(["actual", "scorer"])), amount))
        elif which == 1:
            out.append((1, (), rng.choice([1, 0.7, 0])))
        elif which == 2:
            out.append((2, (), rng.choice([0.0, 0.0005, 0.005, 0.0049999, 0.7, 99.0, rng.random()])))
        else:
            out.append((3, (rng.choice(["acme", "beta"]),), rng.choice([0, 1, 2, 3, 9, 300])))
    return out


def test_a_scrape_equals_the_same_moves_made_through_prometheus_client() -> None:
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    tally = Tally()
    tallied.register(tally)
    plain, through = families(direct), families(tallied)
    for step, (which, labels, amount) in enumerate(moves(29)):
        metric = plain[which]
        child = metric.labels(*labels) if labels else metric
        with tally.lock:
            if which < 2:
                if amount > 0:
                    child.inc(amount)
                tally.count(through[which], labels, amount)
            else:
                child.observe(amount)
                tally.observe(through[which], labels, amount)
        if step % 700 == 0:  # collected between moves too, as scrapes come
            assert exposition(tallied) == exposition(direct)
    assert exposition(tallied) == exposition(direct)
    assert any('t_usd_total{kind="scorer",org="beta"}' in line for line in exposition(tallied))


def test_a_series_moved_by_zero_shows_at_zero() -> None:
    registry, tally = CollectorRegistry(), Tally()
    registry.register(tally)
    usd, *_ = families(registry)
    with tally.lock:
        tally.count(usd, ("acme", "scorer"), 0.0)
    assert registry.get_sample_value("t_usd_total", {"org": "acme", "kind": "scorer"}) == 0.0
    assert registry.get_sample_value("t_usd_total", {"org": "acme", "kind": "actual"}) is None


def test_reads_from_another_thread_while_moving_lose_nothing() -> None:
    registry, tally = CollectorRegistry(), Tally()
    registry.register(tally)
    _, plain, seconds, _ = families(registry)
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            generate_latest(registry)

    reader = threading.Thread(target=scrape)
    reader.start()
    try:
        for _ in range(20_000):
            with tally.lock:
                tally.count(plain, (), 1)
                tally.observe(seconds, (), 0.002)
    finally:
        stop.set()
        reader.join()
    assert registry.get_sample_value("t_plain_total") == 20_000
    assert registry.get_sample_value("t_seconds_count") == 20_000
    assert registry.get_sample_value("t_seconds_bucket", {"le": "0.0025"}) == 20_000
