"""The bench command aggregates every area's rows; bad areas are a one-line error (no timings asserted)."""

import json

import pytest

from explainer.bench import Row
from explainer.cli import main


def test_unknown_area_is_rejected(capsys):
    assert main(["bench", "--only", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "unknown bench area 'gpu'" in err and "sampler" in err


def test_startup_area_reports_a_ratio_and_no_process(capsys):
    assert main(["bench", "--quick", "--only", "startup", "--json"]) == 0
    rows = [Row(**r) for r in json.loads(capsys.readouterr().out)]
    by_name = {r.name: r for r in rows}
    procs = next(r for r in rows if "processes" in r.name)
    assert procs.ours == 0 and procs.met
    timed = [r for r in rows if r.ratio is not None]
    assert timed and all(r.baseline is not None and r.ratio == pytest.approx(r.baseline / r.ours, rel=0.05)
                         for r in timed), by_name


def test_room_area_reports_throughput_and_latency_rows(capsys):
    assert main(["bench", "--quick", "--only", "room", "--json"]) == 0
    rows = [Row(**r) for r in json.loads(capsys.readouterr().out)]
    assert [r.unit for r in rows] == ["rep/s", "s"] and all(r.area == "room" for r in rows)
    assert rows[0].ours > 0 and "(0 refused," in rows[0].name and "peak RSS" in rows[0].name
    assert 0 < rows[1].ours < float("inf")          # every report was seen on the board's stream
