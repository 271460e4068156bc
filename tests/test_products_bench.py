"""The products alone (python -m qwen3tts_tools.bench.products): every layer's weight products
of the talker and the code predictor, timed as the native runner runs them, in its order."""
from __future__ import annotations

import json

import pytest

from qwen3tts_tools.bench.products import ProductsReport, ProductTimes, main, measure, rows_list
from wyoming_qwen3tts._native import testing


@pytest.mark.parametrize("weights", ["int4", "int8"])
def test_each_graph_and_batch_size_is_timed(converted_factory, weights):
    model = converted_factory("tiny", "custom_voice", weights)
    report = measure(model, [1, 3], "", 2, 3)
    assert [(t.graph, t.rows) for t in report.times] == [("talker", 1), ("talker", 3), ("subcode", 1),
                                                          ("subcode", 3)]
    assert all(0 < t.min_ms <= t.median_ms and t.frames == 3 for t in report.times)
    assert report.subcode_steps == 15 and report.threads == 2 and report.kernels == "auto"
    talker, subcode = report.times[1].median_ms, report.times[3].median_ms
    assert report.step_ms(3) == pytest.approx(talker + 15 * subcode)


def test_the_step_sums_one_talker_pass_and_every_code_predictor_pass():
    report = ProductsReport("avx2", 1, 15, [ProductTimes("talker", 4, 10.0, 9.0, 5),
                                            ProductTimes("subcode", 4, 1.0, 0.9, 5)])
    assert report.step_ms(4) == pytest.approx(25.0)


def test_the_cli_prints_both_tables_and_writes_json(converted_factory, tmp_path, capsys):
    model = converted_factory("tiny", "custom_voice", "int4")
    out = tmp_path / "products.json"
    assert main(["--converted", str(model), "--rows", "2", "--threads", "1", "--kernels", "avx2", "--frames", "2",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Products alone (avx2 kernels, 1 threads)")
    assert "| talker | 2 |" in text and "| subcode | 2 |" in text
    data = json.loads(out.read_text())
    assert data["kernels"] == "avx2" and len(data["times"]) == 2


def test_a_frame_is_one_talker_pass_then_the_code_predictor_steps(converted_factory):
    model = converted_factory("tiny", "custom_voice", "int4")
    stacks = testing.ProductStacks(str(model / "talker.xml"), str(model / "subcode.xml"), "avx2", 1)
    talker, none = stacks.time(2, 0, 3)
    assert len(talker) == len(none) == 3 and all(ms > 0 for ms in talker)
    assert all(ms < min(talker) for ms in none)  # no code-predictor pass: only the team's start and end
    _, many = stacks.time(2, 30, 3)
    assert min(many) > max(none)


def test_bad_arguments_are_refused(converted_factory):
    model = converted_factory("tiny", "custom_voice", "int4")
    talker, subcode = str(model / "talker.xml"), str(model / "subcode.xml")
    with pytest.raises(ValueError, match="no weight"):
        testing.ProductStacks(subcode, talker)  # each graph has only its own weights
    with pytest.raises(ValueError, match="threads"):
        testing.ProductStacks(talker, subcode, "", 0)
    stacks = testing.ProductStacks(talker, subcode, "", 1)
    for rows, steps, frames in ((0, 1, 1), (1, -1, 1), (1, 1, 0)):
        with pytest.raises(ValueError, match="rows, frames >= 1"):
            stacks.time(rows, steps, frames)
    for bad in ("0", "1,x", ""):
        with pytest.raises(Exception, match="rows"):
            rows_list(bad)
    with pytest.raises(SystemExit):
        main(["--converted", str(model), "--frames", "0"])
