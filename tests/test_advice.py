"""Parameters that are useless say so: estimates that are noise, looser levels
that cannot get more signal, rates so small their users are barely seen, a capped m."""

from __future__ import annotations

import json

from segshuffle.cli.main import main
from segshuffle.core.advice import parameter_notes


def test_healthy_parameters_get_no_note() -> None:
    assert parameter_notes([0.5, 1, 2], [0.52, 0.98, 1.0], [0.5, 1, 1.01], 0.51, 0.001, 4,
                           5000) == []


def test_each_kind_of_useless_parameters_is_named() -> None:
    noise = parameter_notes([0.01], [0.049], [0.01], 41.05, 1723.9, 1, 10)
    assert len(noise) == 1 and "with 10 users the estimates are mostly noise" in noise[0]
    shared = parameter_notes([0.5, 1, 2], [0.4, 1.0, 1.0], [0.5, 0.9984, 0.9984], 1.9, 0.2,
                             2, 200)
    assert shared == ["levels 1 and 2 all send every item (lambda = 1) and get the same "
                      "guarantee (eps 0.9984): the blanket that protects the stricter levels "
                      "already covers them, so a looser level cannot send more"]
    tiny = parameter_notes([0.1, 1], [0.003, 0.5], [0.1, 1], 3.0, 0.5, 2, 1000)
    assert len(tiny) == 1 and "level 0.1 sends each item with probability 0.003" in tiny[0]
    capped = parameter_notes([1], [0.5], [1], 1024.0, 0.5, 2, 1000)
    assert len(capped) == 1 and "at its cap (m = 1024)" in capped[0]


def test_optimize_prints_the_notes(capsys) -> None:
    argv = ["optimize", "--users", "40", "--domain-size", "8", "--set-size", "1",
            "--levels", "0.3", "--shares", "1", "--delta", "1e-3", "--blanket", "4",
            "--no-compare"]
    assert main([*argv, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes and "the estimates are mostly noise" in notes[0]
    assert main(argv) == 0
    assert "note: with 40 users the estimates are mostly noise" in capsys.readouterr().out


def test_the_demo_prints_the_notes() -> None:
    """The demo's report carries the notes on the parameters the server published, and its
    summary prints them (checked on the report of a made-up 5-user run: the rounds
    themselves are test_demo.py's, which takes seconds)."""
    import argparse
    from types import SimpleNamespace

    from segshuffle.cli.demo import DemoData, _human, _report

    def entry(id_: int, name: str | None) -> SimpleNamespace:
        return SimpleNamespace(id=id_, name=name, estimate=0.3, standard_error=0.9)

    parameters = SimpleNamespace(
        privacy_domain_size=3, levels=[0.3], lambdas=[0.05], epsilons=[0.3],
        epsilons_lower=[0.29], m=41.05, blanket_mode="slots", messages_per_user=2,
        delta=1e-3, accounting_users=5, fake_tolerance=0.0, honest_users=5,
        mse_bound=1723.9, set_size=1, users=5)
    results = SimpleNamespace(items=[entry(0, "a"), entry(1, "b")], padding=[entry(2, None)],
                              privacy=SimpleNamespace(levels=[SimpleNamespace(users_round2=5)]),
                              dropped_messages=0)
    report = _report(argparse.Namespace(users=5), DemoData("made-up", [], ["a", "b"], 1),
                     {"results": results, "parameters": parameters,
                      "fitted": [[0], [0], [1], [0], [2]]}, {"total": 1.0})
    assert report["notes"] and "with 5 users the estimates are mostly noise" in \
        report["notes"][0]
    json.dumps(report)  # what --json prints
    summary = _human(report, top=2).splitlines()
    assert f"note: {report['notes'][0]}" in summary
